"""GPU compilation from Python (no GPU needed): spin.compile_artifact writes
the artifact spin-compile writes, and bad requests raise with a clear
message."""

import json
import os
import re

import pytest

import spin

pytestmark = pytest.mark.skipif(not spin.has_compiler,
                                reason="spin built without the compiler")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_EXAMPLE = os.path.join(_ROOT, "examples", "deepseek-v4-flash-indexer.mlir")


def _graph():
    with open(_EXAMPLE) as f:
        return f.read()


def test_compile_artifact_writes_ptx_per_chip_and_a_manifest(tmp_path):
    out = spin.compile_artifact(_graph(), "dsv4_flash_indexer_layer",
                                tmp_path / "a", {"sparsity": 0.5, "explore": 0.05},
                                chips=["sm_90a", "sm_103a"])
    assert out == os.fspath(tmp_path / "a")
    manifest = spin.read_manifest(out)  # the runtime's validation
    assert manifest["ptx"] == {"sm_90a": "sm_90a.ptx", "sm_103a": "sm_103a.ptx"}
    assert manifest["state"]["capacity"] == 131072
    with open(os.path.join(out, "manifest.json")) as f:
        raw = json.load(f)
    assert raw["ptx_version"] == 88  # what sm_103a needs
    roles = [(a["role"], a["name"]) for a in manifest["arguments"]]
    assert ("input", "keys") in roles and ("output", "topk") in roles
    assert ("output", "sparsity") in roles and ("state", "v") in roles
    kernels = {launch["kernel"] for launch in raw["launches"]}
    assert any(k.startswith("spin_score_sparse") for k in kernels)
    # Tensor-core scoring: wgmma on sm_90a, mma.sync on the other chips.
    for chip, mma in (("sm_90a", "wgmma.mma_async.sync.aligned"),
                      ("sm_103a", "mma.sync.aligned.m16n8k16")):
        text = (tmp_path / "a" / f"{chip}.ptx").read_text()
        assert f".target {chip}" in text
        assert mma in text


def test_compile_artifact_dense_graph_is_stateless(tmp_path):
    out = spin.compile_artifact(_graph(), "dsv4_flash_indexer_layer", tmp_path / "d")
    manifest = spin.read_manifest(out)
    assert manifest["state"] is None  # stateless
    assert not any(a["role"] == "state" for a in manifest["arguments"])


@pytest.mark.parametrize("chips,ptx,message", [
    (["sm_89"], 0, "unknown chip 'sm_89'"),
    (["sm_103a"], 86, "sm_103a needs PTX version 8.8 or later (got 8.6)"),
])
def test_compile_artifact_rejects_bad_targets(tmp_path, chips, ptx, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        spin.compile_artifact(_graph(), "dsv4_flash_indexer_layer", tmp_path / "x",
                              chips=chips, ptx_version=ptx)
    assert not (tmp_path / "x" / "manifest.json").exists()


def test_compile_artifact_names_an_unsupported_graph(tmp_path):
    with pytest.raises(ValueError, match="only the A1 block reduction is supported"):
        spin.compile_artifact(_graph(), "dsv4_flash_indexer_layer", tmp_path / "y",
                              {"sparsity": 0.5, "reduction": "A0"})


@pytest.mark.parametrize("policy", ["staleness-score", "block-age"])
def test_compile_artifact_names_an_age_exploration_policy(tmp_path, policy):
    with pytest.raises(ValueError, match=re.escape(
            "GPU path: only random exploration is supported (got explore_policy "
            + policy.replace("-", "_"))):
        spin.compile_artifact(_graph(), "dsv4_flash_indexer_layer", tmp_path / "z",
                              {"sparsity": 0.5, "explore": 0.05, "explore_policy": policy})
    assert not (tmp_path / "z" / "manifest.json").exists()


def test_compile_target_must_be_cpu_or_cuda():
    with pytest.raises(ValueError, match="target must be 'cpu' or 'cuda'"):
        spin.compile(_graph(), "dsv4_flash_indexer_layer", target="sm_90a")


def _expected_score_grid(entries, rows, sm_count):
    """docs/GPU-ABI.md's rule: T in [8, 64] tiles of 16 slots per warp (8
    warps) minimising ceil(CTAs / (2 x SMs)) x (T + 2), the fewest on a tie;
    returns the CTAs per row."""
    best = None
    for t in range(8, 65):
        per_row = -(-entries // (8 * 16 * t))
        cost = -(-(rows * per_row) // (2 * sm_count)) * (t + 2)
        if best is None or cost < best[0]:
            best = (cost, per_row)
    return best[1]


@pytest.mark.parametrize("sm_count", [132, 148])
def test_compile_artifact_sizes_the_scoring_grid_for_the_sm_count(tmp_path, sm_count):
    out = spin.compile_artifact(_graph(), "dsv4_flash_indexer_layer",
                                tmp_path / str(sm_count), sm_count=sm_count)
    with open(os.path.join(out, "manifest.json")) as f:
        raw = json.load(f)
    grid = next(launch["grid"] for launch in raw["launches"]
                if launch["kernel"].startswith("spin_score_dense"))
    # 16 rows of 131072 slots: one wave of 16 x 16 CTAs (64 tiles) on 132
    # SMs, of 18 x 16 (57 tiles) on 148.
    assert grid == [_expected_score_grid(131072, 16, sm_count), 16, 1]
    assert grid[0] == {132: 16, 148: 18}[sm_count]


def test_compile_artifact_rejects_a_bad_sm_count(tmp_path):
    with pytest.raises(ValueError, match=re.escape("sm_count must be positive (got 0)")):
        spin.compile_artifact(_graph(), "dsv4_flash_indexer_layer", tmp_path / "s",
                              sm_count=0)
    assert not (tmp_path / "s" / "manifest.json").exists()
