"""The compiler-runtime contract is spelled once.

``runtime/include/spin/Runtime/Abi.def`` defines every state field, argument
role and manifest member. These tests read that file directly (not through
the module) and check that (1) the native module's ``spin.abi`` tables are
exactly the .def's lists, and (2) no source file of the compiler, the
runtime, the Python package, the tools or the bench scripts spells a state
field's name, or a manifest member that only the manifest uses, as a string
literal of its own: they must take it from the contract. Comments, docs and
tests may mention the names.
"""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ABI_DEF = os.path.join(ROOT, "runtime", "include", "spin", "Runtime", "Abi.def")

#: Where code (not tests or docs) lives.
CODE_DIRS = ["lib", "include", "runtime/lib", "runtime/include", "python/src",
             "python/spin", "tools", "bench"]
CODE_SUFFIXES = (".cpp", ".h", ".py")


def _entries(macro):
    """The argument lists of every ``macro(...)`` line of Abi.def."""
    out = []
    for line in open(ABI_DEF, encoding="utf-8"):
        m = re.match(r"%s\((.*)\)\s*$" % macro, line)
        if m:
            out.append([a.strip() for a in re.findall(r'"[^"]*"|[^,]+', m.group(1))])
    return out


def _unquote(s):
    assert s.startswith('"') and s.endswith('"'), s
    return s[1:-1]


STATE_FIELDS = [(e[0], _unquote(e[1]), e[2], e[3:6], e[6]) for e in _entries("SPIN_STATE_FIELD")]
ROLES = {e[0]: _unquote(e[1]) for e in _entries("SPIN_ARG_ROLE")}
OUTPUTS = {e[0]: _unquote(e[1]) for e in _entries("SPIN_OUTPUT")}
KEYS = {e[0]: _unquote(e[1]) for e in _entries("SPIN_MANIFEST_KEY")}

#: Manifest members no other name collides with: nothing but the manifest
#: code may spell them.
MANIFEST_ONLY = ["programmatic_launch", "shared_bytes", "ptx_version", "max_rows"]


def _strip_comments(text, suffix):
    """The code of a source file without comments, and without the keyword
    names and method names that C++ binds for Python (``py::arg("ptx_version")``,
    ``.def("last_observed", ...)``): those are the Python API's names, not
    the contract's."""
    if suffix == ".py":
        return re.sub(r"#[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'py::arg\("\w+"\)', "", text)
    text = re.sub(r'\.def(_property_readonly|_property|_static)?\("\w+"', ".def(", text)
    return re.sub(r"//[^\n]*", "", text)


def _code_files():
    for d in CODE_DIRS:
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, d)):
            dirs[:] = [x for x in dirs if x != "tests"]  # tests may spell names
            for f in files:
                if f.endswith(CODE_SUFFIXES):
                    yield os.path.join(dirpath, f)


def _literal_uses(names):
    """(file:line, literal) of every string literal equal to one of `names`."""
    pattern = re.compile(r"""(?<![\w\\])(["'])(%s)\1""" % "|".join(map(re.escape, names)))
    hits = []
    for path in _code_files():
        suffix = os.path.splitext(path)[1]
        text = _strip_comments(open(path, encoding="utf-8", errors="replace").read(), suffix)
        for n, line in enumerate(text.split("\n"), 1):
            for m in pattern.finditer(line):
                hits.append("%s:%d: %s" % (os.path.relpath(path, ROOT), n, m.group(0)))
    return hits


def test_abi_def_lists_are_well_formed():
    assert [f[1] for f in STATE_FIELDS][:3] == ["v", "d", "it"]
    assert len({f[1] for f in STATE_FIELDS}) == len(STATE_FIELDS)
    assert ROLES["RequestIds"] == "request_ids" and ROLES["State"] == "state"
    assert KEYS["Format"] == "format" and len(set(KEYS.values())) == len(KEYS)


def test_module_tables_are_the_contract():
    spin = pytest.importorskip("spin")
    from spin import abi
    assert [f["name"] for f in abi.STATE_FIELDS] == [f[1] for f in STATE_FIELDS]
    for got, (_, name, dtype, dims, group) in zip(abi.STATE_FIELDS, STATE_FIELDS):
        want_dims = [re.sub(r"(?<!^)([A-Z])", r"_\1", d).lower() for d in dims if d != "None"]
        assert got["dtype"] == dtype, name
        assert list(got["dims"]) == want_dims, name
        assert got["group"] == group.lower(), name
    assert abi.ROLES == ROLES
    assert abi.OUTPUTS == OUTPUTS
    assert abi.KEY == KEYS
    assert abi.state_fields("observation") == ("obs_rows", "obs_pos", "obs_len", "obs_mask", "obs_z")
    with pytest.raises(ValueError, match="unknown state-field group 'nope'"):
        abi.state_fields("nope")


def test_no_state_field_name_is_spelled_outside_the_contract():
    hits = _literal_uses([f[1] for f in STATE_FIELDS])
    assert not hits, "state-field names spelled outside Abi.def:\n" + "\n".join(hits)


def test_no_manifest_only_key_is_spelled_outside_the_contract():
    assert set(MANIFEST_ONLY) <= set(KEYS.values())
    hits = _literal_uses(MANIFEST_ONLY)
    assert not hits, "manifest members spelled outside Abi.def:\n" + "\n".join(hits)


def _role_uses():
    """Role names spelled where code matches arguments by role: lines that
    mention a role together with a literal role name, and C++ lookups of an
    input by a role's name (``inputs.find("positions")``)."""
    names = "|".join(map(re.escape, ROLES.values()))
    literal = re.compile(r"""(["'])(%s)\1""" % names)
    lookup = re.compile(r"""(find|at|count)\(\s*"(%s)"\s*\)|\[\s*"(%s)"\s*\]""" % (names, names))
    hits = []
    for path in _code_files():
        suffix = os.path.splitext(path)[1]
        text = _strip_comments(open(path, encoding="utf-8", errors="replace").read(), suffix)
        for n, line in enumerate(text.split("\n"), 1):
            found = (re.search(r"\brole\b|Role::", line) and literal.search(line)) or \
                (suffix != ".py" and lookup.search(line))
            if found:
                hits.append("%s:%d: %s" % (os.path.relpath(path, ROOT), n, line.strip()))
    return hits


def test_no_role_name_is_matched_outside_the_contract():
    hits = _role_uses()
    assert not hits, "argument roles spelled outside Abi.def:\n" + "\n".join(hits)


def test_the_scan_finds_a_planted_spelling(tmp_path, monkeypatch):
    # The scan itself must be able to fail: a planted literal is reported,
    # the same name in a comment is not.
    planted = tmp_path / "lib"
    planted.mkdir()
    (planted / "x.cpp").write_text('// "obs_z" in a comment\nauto f = "obs_z";\n')
    (planted / "y.py").write_text("# 'max_rows' here\nk = 'max_rows'\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", str(tmp_path))
    hits = _literal_uses(["obs_z", "max_rows"])
    assert sorted(hits) == sorted(['lib/x.cpp:2: "obs_z"', "lib/y.py:2: 'max_rows'"])
    (planted / "z.py").write_text("if arg['role'] == 'state':\n    pass\n")
    (planted / "w.cpp").write_text('auto it = inputs.find("positions");\n')
    assert sorted(_role_uses()) == sorted([
        "lib/z.py:1: if arg['role'] == 'state':",
        'lib/w.cpp:1: auto it = inputs.find("positions");'])
