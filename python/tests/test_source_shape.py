"""Functions stay short enough to read: no C++ function in lib/, runtime/,
python/src/ or tools/ is longer than 150 lines (scripts/function_lengths.py
lists them; kernel builders and runtime steps are split into named phases
instead)."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "function_lengths", os.path.join(ROOT, "scripts", "function_lengths.py"))
function_lengths = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(function_lengths)


def test_no_function_is_longer_than_150_lines():
    found = function_lengths.long_functions(150, ["lib", "runtime", "python/src", "tools"])
    assert not found, "functions over 150 lines:\n" + "\n".join(
        f"{n} {path}:{first} {name}" for n, path, first, name in found)


def test_the_measure_counts_a_planted_function(tmp_path):
    body = "\n".join(f"  x += {i};" for i in range(160))
    src = tmp_path / "long.cpp"
    src.write_text(f"namespace a {{\nstruct S {{ int f() {{ return 1; }} }};\n"
                   f"// }} in a comment\nint g(int x) {{\n  auto l = [&] {{ return \"}}\"; }};\n"
                   f"{body}\n  return x;\n}}\n}} // namespace a\n")
    got = function_lengths.functions(str(src))
    assert (1, 2, "f") in got
    assert any(n == 164 and first == 4 and name == "g" for n, first, name in got), got
