"""spin-sparsify-pipeline options from Python: a dict sets each option of the
generated options struct with the option's own type, and gives what the same
options as text give."""

import os

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")
_spin = spin._spin
pytestmark = pytest.mark.skipif(not spin.has_compiler,
                                reason="spin was built without the compiler")

#: Every option of the pipeline with a value that is not its default, and
#: the same value as option text.
EVERY_OPTION = {
    "topk_callee": ("my_topk", "my_topk"),
    "page_size": (128, "128"),
    "sparsity": (0.25, "0.25"),
    "block_size": (32, "32"),
    "ema_decay": (0.75, "0.75"),
    "explore": (0.125, "0.125"),
    "seed": (2**64 - 1, str(2**64 - 1)),
    "explore_policy": ("block-age", "block-age"),
    "pooling": ("top4", "top4"),
    "reduction": ("A2", "A2"),
    "mtp_mask": ("row0", "row0"),
    "mtp_update": ("row0", "row0"),
    "reset_input": (True, "true"),
    "report_sparsity": (True, "true"),
    "fuse": (False, "false"),
    "schedule_async": (False, "false"),
}


def options_text(options):
    """Every option of the parsed struct, printed canonically."""
    return _spin.sparsify_options_text(options)


def as_text(options):
    return " ".join(f"{key.replace('_', '-')}={EVERY_OPTION[key][1]}"
                    for key in options)


def test_the_table_covers_every_option():
    printed = options_text({})
    flags = [item.split("=")[0] for item in printed.strip("{}").split(" ")]
    assert sorted(flags) == sorted(key.replace("_", "-") for key in EVERY_OPTION)


@pytest.mark.parametrize("key", sorted(EVERY_OPTION))
def test_each_option_is_set_with_its_type(key):
    value = EVERY_OPTION[key][0]
    got = options_text({key: value})
    assert got != options_text({})
    assert got == options_text(as_text([key]))
    assert got == options_text({key.replace("_", "-"): value})


def test_all_options_at_once_equal_the_text():
    options = {key: value for key, (value, _) in EVERY_OPTION.items()}
    assert options_text(options) == options_text(as_text(EVERY_OPTION))


def test_numbers_of_other_python_types_are_accepted():
    assert options_text({"sparsity": 1}) == options_text("sparsity=1.0")
    assert options_text({"block_size": np.int64(32)}) == options_text("block-size=32")
    assert options_text({"sparsity": np.float64(0.5)}) == options_text("sparsity=0.5")


def test_unknown_option_lists_the_accepted_ones():
    with pytest.raises(ValueError, match=r"unknown spin-sparsify-pipeline option "
                       r"'sparsty' \(accepted: topk-callee, page-size, sparsity, "
                       r"block-size, .*, fuse, schedule-async\)"):
        options_text({"sparsty": 0.5})
    # Not forwarded by the pipeline (it is for debugging the pass alone).
    with pytest.raises(ValueError, match="unknown .* option 'report_failures'"):
        options_text({"report_failures": True})


@pytest.mark.parametrize("key,value,expected", [
    ("sparsity", "0.5", "a float"),
    ("sparsity", True, "a float"),
    ("block_size", 64.0, "an int"),
    ("block_size", False, "an int"),
    ("seed", 1.5, "a non-negative int"),
    ("reset_input", 1, "a bool"),
    ("fuse", "false", "a bool"),
    ("topk_callee", 5, "a str"),
    ("pooling", 3, r"a str \(one of max, mean, top4\)"),
])
def test_value_of_the_wrong_type_is_a_type_error(key, value, expected):
    flag = key.replace("_", "-")
    with pytest.raises(TypeError, match=f"option '{flag}' takes {expected}, "
                       f"got {repr(value)}"):
        options_text({key: value})


def test_unknown_enum_value_lists_the_declared_names():
    with pytest.raises(ValueError, match=r"option 'explore-policy' has no value "
                       r"'oldest' \(accepted: random, staleness-score, block-age\)"):
        options_text({"explore_policy": "oldest"})
    with pytest.raises(ValueError, match=r"option 'reduction' has no value 'a1' "
                       r"\(accepted: A0, A1, A2\)"):
        options_text({"reduction": "a1"})


@pytest.mark.parametrize("key,value", [("seed", -1), ("page_size", 2**63)])
def test_integer_out_of_range_is_a_value_error(key, value):
    with pytest.raises(ValueError, match=f"option '{key.replace('_', '-')}' is "
                       f"out of range for u?int64: {value}"):
        options_text({key: value})


def test_options_are_a_dict_or_text():
    with pytest.raises(TypeError, match="must be a dict, got"):
        options_text([("sparsity", 0.5)])
    with pytest.raises(TypeError, match="option names are str, got 1"):
        options_text({1: 0.5})
    with pytest.raises(ValueError, match="invalid spin-sparsify-pipeline options"):
        options_text("sparsity=half")


def test_compile_with_a_dict_equals_compile_with_the_text():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "examples", "glm5-indexer.mlir")) as f:
        text = f.read()
    options = {"sparsity": 0.5, "explore": 0.25, "seed": 7,
               "explore_policy": "block-age", "pooling": "mean"}
    from_dict = spin.compile(text, "glm5_indexer_layer", options)
    _spin.clear_memory_cache()
    from_text = _spin.compile(text, "glm5_indexer_layer",
                              "sparsity=0.5 explore=0.25 seed=7 "
                              "explore-policy=block-age pooling=mean")
    assert from_dict.graph_ir == from_text.graph_ir
    assert "pooling = #spin.pooling<mean>" in from_dict.graph_ir
    with pytest.raises(TypeError, match="option 'sparsity' takes a float"):
        spin.compile(text, "glm5_indexer_layer", {"sparsity": "0.5"})


def test_compile_artifact_checks_the_options_first(tmp_path):
    with pytest.raises(ValueError, match="unknown spin-sparsify-pipeline option"):
        spin.compile_artifact("module {}", "f", str(tmp_path), {"sparsty": 0.5})
