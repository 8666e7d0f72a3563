"""bench/compare_gpu.py without a GPU: its arguments, the configuration it
finds in every variant's index (and the clear errors when one lacks it or
disagrees on its shape), and the summary lines with their ratios."""

import json
import os

import pytest


def _variant(tmp_path, name, config, **shape):
    """An artifact directory as bench_artifacts.py --only CONFIG writes it."""
    d = tmp_path / name
    c = dict(name=config, dir=config, format="fp8", batch=16, slots=131072, k=512, rows=1,
             mode="spin", sparsity=0.5)
    c.update(shape)
    (d / config).mkdir(parents=True)
    (d / config / "manifest.json").write_text("{}")
    (d / "index.json").write_text(json.dumps({"format": "spin-bench-artifacts",
                                              "configs": [c]}))
    return str(d)


def test_rounds_must_be_positive(bench_script, capsys):
    cg = bench_script("compare_gpu")
    with pytest.raises(SystemExit):
        cg.parse_args(["--config", "x", "--rounds", "0", "a"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err


def test_configuration_is_found_in_every_variant(bench_script, tmp_path):
    cg = bench_script("compare_gpu")
    name = "fp8-b16-n128k-k512-r1-spin0.5"
    a, b = _variant(tmp_path, "a", name), _variant(tmp_path, "b", name)
    assert cg.configuration([a, b], name)["dir"] == name
    with pytest.raises(SystemExit, match="has no configuration 'other'"):
        cg.configuration([a, b], "other")
    c = _variant(tmp_path, "c", name, slots=65536)
    with pytest.raises(SystemExit, match=f"{os.path.basename(c)}: configuration .* differs"):
        cg.configuration([a, c], name)


def test_summary_gives_per_round_values_medians_and_ratios(bench_script):
    cg = bench_script("compare_gpu")
    rounds = {
        "old": [dict(median_us=84.0, decode_median_us=82.0, rotate_median_us=87.0),
                dict(median_us=83.0, decode_median_us=82.4, rotate_median_us=86.0),
                dict(median_us=83.6, decode_median_us=82.2, rotate_median_us=86.6)],
        "new": [dict(median_us=82.0, decode_median_us=81.0, rotate_median_us=85.0,
                     problems=["ids outside [-1, N)"]),
                dict(median_us=82.4, decode_median_us=81.2, rotate_median_us=85.4),
                dict(median_us=82.2, decode_median_us=81.4, rotate_median_us=85.2)],
    }
    old, new = cg.summary_lines(["old", "new"], rounds)
    assert old.startswith("old: fixed 84.0 / 83.0 / 83.6 (median 83.6); decoding")
    assert "vs the first" not in old
    assert "fixed 1.017x" in new and "decoding 1.012x" in new   # 83.6/82.2, 82.2/81.2
    assert new.endswith("| PROBLEMS: ids outside [-1, N)")
