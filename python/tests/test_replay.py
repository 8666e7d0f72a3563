"""spin-replay: trace format validation, metric helpers, replay behaviour on
synthetic traces, Table 1 diagnostics and the command line end to end."""

import json
import re
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# replay/traces are imported from the source tree as top-level modules (the
# build only gets a copy at cmake configure time); spin itself from the build.
sys.path.insert(0, os.path.join(ROOT, "python", "spin"))

import traces  # noqa: E402
import replay  # noqa: E402

TOOLS = os.path.join(ROOT, "tools", "spin-replay")


def _have_spin():
    try:
        import spin
        return hasattr(spin, "Indexer")
    except ImportError:
        return False


needs_spin = pytest.mark.skipif(not _have_spin(), reason="the spin extension is not built")

SMALL = dict(layers=2, steps=6, batch=2, context=128, heads=4, head_dim=32, topk=32,
             page_size=16)


@pytest.fixture
def small_trace(tmp_path):
    return traces.generate(str(tmp_path / "t"), **SMALL)


# ---------------------------------------------------------------- validation


def test_valid_trace_loads(small_trace):
    t = traces.load_trace(small_trace)
    assert t.header["layers"] == 2 and t.header["steps"] == 6
    a = t.step(1, 5)
    assert a["q"].shape == (2, 1, 4, 32) and a["keys"].shape[1:] == (16, 32)


def test_missing_file(small_trace):
    p = os.path.join(small_trace, "layer_001", "step_00003", "q.npy")
    os.remove(p)
    with pytest.raises(traces.TraceError, match=r"layer_001/step_00003/q\.npy: missing file"):
        traces.load_trace(small_trace)


def test_missing_step_directory(small_trace):
    shutil.rmtree(os.path.join(small_trace, "layer_000", "step_00005"))
    with pytest.raises(traces.TraceError, match=r"step_00005: missing directory "
                                                r"\(header says 6 steps\)"):
        traces.load_trace(small_trace)


def test_truncated_npy(small_trace):
    p = os.path.join(small_trace, "layer_000", "keys.npy")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size - 100)
    with pytest.raises(traces.TraceError) as e:
        traces.load_trace(small_trace)
    msg = str(e.value)
    assert "layer_000/keys.npy: truncated: header says shape (" in msg
    assert f"but the file has {size - 100 - 128} data bytes" in msg


def test_garbage_npy(small_trace):
    p = os.path.join(small_trace, "layer_000", "step_00000", "w.npy")
    with open(p, "wb") as f:
        f.write(b"not numpy")
    with pytest.raises(traces.TraceError, match=r"step_00000/w\.npy: not a valid \.npy file"):
        traces.load_trace(small_trace)


def test_wrong_shape(small_trace):
    p = os.path.join(small_trace, "layer_000", "step_00002", "q.npy")
    np.save(p, np.zeros((2, 1, 4, 16), dtype=np.float32))
    with pytest.raises(traces.TraceError) as e:
        traces.load_trace(small_trace)
    assert "step_00002/q.npy: shape (2, 1, 4, 16) does not match the header: " \
           "expected [2, 1, 4, 32] (batch, rows, heads, head_dim)" in str(e.value)


def test_wrong_dtype(small_trace):
    p = os.path.join(small_trace, "layer_001", "step_00001", "lengths.npy")
    np.save(p, np.load(p).astype(np.int64))
    with pytest.raises(traces.TraceError, match=r"lengths\.npy: dtype int64 is not allowed"):
        traces.load_trace(small_trace)


def _edit_header(path, **changes):
    hp = os.path.join(path, "header.json")
    with open(hp) as f:
        h = json.load(f)
    h.update(changes)
    for k, v in list(h.items()):
        if v is None:
            del h[k]
    with open(hp, "w") as f:
        json.dump(h, f)


def test_header_mismatch_heads(small_trace):
    _edit_header(small_trace, heads=8)
    with pytest.raises(traces.TraceError, match=r"step_00000/q\.npy: shape \(2, 1, 4, 32\) "
                                                r"does not match the header: expected \[2, 1, 8, 32\]"):
        traces.load_trace(small_trace)


def test_header_mismatch_layers(small_trace):
    _edit_header(small_trace, layers=3)
    with pytest.raises(traces.TraceError, match=r"layer_002: missing directory "
                                                r"\(header says 3 layers\)"):
        traces.load_trace(small_trace)
    _edit_header(small_trace, layers=1)
    with pytest.raises(traces.TraceError, match=r"layer_001: header says 1 layers"):
        traces.load_trace(small_trace)


def test_header_missing_field_and_mtp(small_trace):
    _edit_header(small_trace, topk=None)
    with pytest.raises(traces.TraceError, match=r"header\.json: missing field 'topk'"):
        traces.load_trace(small_trace)
    _edit_header(small_trace, topk=32, rows=2)
    with pytest.raises(traces.TraceError, match=r"rows=2 \(MTP\) needs 'accepted'"):
        traces.load_trace(small_trace)


def test_value_check_lengths(small_trace):
    p = os.path.join(small_trace, "layer_000", "step_00004", "lengths.npy")
    np.save(p, np.full((2, 1), 100000, dtype=np.int32))
    t = traces.load_trace(small_trace)
    with pytest.raises(traces.TraceError, match=r"step_00004: lengths\.npy has a value 100000 "
                                                r"larger than block_table width"):
        t.step(0, 4)


# ---------------------------------------------------------------- metrics


def test_miss_rate_by_hand():
    assert replay.miss_rate([1, 2, 3, 4], [4, 3, 2, 1]) == 0.0
    assert replay.miss_rate([1, 2, 3, 4], [1, 2, 9, -1]) == 0.5
    assert replay.miss_rate([5, 6, -1, -1], [6, 7, -1, -1]) == 0.5   # padding ignored
    assert replay.miss_rate([-1, -1], [1, 2]) is None


def test_recall_and_pearson_by_hand():
    z = np.array([0.0, 5.0, 1.0, 4.0, 2.0])
    truth = traces.topk_indices(z, 2)
    assert truth.tolist() == [1, 3]
    assert replay.recall(np.array([0, 9, 0, 0, 8.0]), truth, 2) == 0.5
    assert replay.recall(np.array([np.nan, 1, 0, 1, 0.0]), truth, 2) == 1.0
    # NaN (unknown) slots are never picked even when everything else is lower
    assert replay.recall(np.array([np.nan, np.nan, 0, 1, 0.0]), truth, 2) == 0.5
    assert replay.pearson(z, 2 * z + 1) == pytest.approx(1.0)
    assert replay.pearson(z, -z) == pytest.approx(-1.0)
    # [1,2,3] vs [1,3,2]: cov 0.5 / (var 1) -> 0.5
    assert replay.pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert replay.pearson([1, 1, 1], [1, 2, 3]) is None
    assert replay.pearson([np.nan, 1, 2, 3], [7, 1, 2, 3]) == pytest.approx(1.0)


def test_topk_ties_lower_index():
    assert traces.topk_indices(np.array([1.0, 2.0, 2.0, 0.0, 2.0]), 2).tolist() == [1, 2]


def test_summarize_p99():
    s = replay.summarize([0.0] * 99 + [1.0])
    assert s["mean"] == pytest.approx(0.01) and s["rows"] == 100
    assert s["p99"] == pytest.approx(np.percentile([0.0] * 99 + [1.0], 99))
    assert replay.summarize([None])["mean"] is None


def test_dense_scores_by_hand():
    keys = np.zeros((2, 2, 2), dtype=np.float32)
    keys[1, 0] = [1, 0]      # logical slot 0 (page 1)
    keys[1, 1] = [0, 1]      # slot 1
    keys[0, 0] = [-1, 1]     # slot 2 (page 0)
    q = np.array([[1.0, 2.0], [3.0, -1.0]])
    w = np.array([0.5, 2.0])
    z = traces.dense_scores(q, w, keys, np.array([1, 0]), 3, "f32")
    # slot0: .5*1 + 2*3 = 6.5; slot1: .5*2 + 2*relu(-1) = 1; slot2: .5*1 + 2*relu(-4) = .5
    assert z.tolist() == [6.5, 1.0, 0.5]
    z8 = traces.dense_scores(q, w, keys, np.array([1, 0]), 3, "f32",
                             scales=np.full((2, 2), 2.0, np.float32))
    assert z8.tolist() == [13.0, 2.0, 1.0]


def test_fp8_decode():
    assert traces.fp8_e4m3_bits_to_f64(np.array([0x38, 0xB8, 0x7E, 0x01], np.uint8)).tolist() \
        == [1.0, -1.0, 448.0, 2.0 ** -9]


# ---------------------------------------------------------------- replay


@needs_spin
def test_static_vertical_lines_never_miss(tmp_path):
    # Two hot blocks = exactly K slots, no band, no noise: T* never changes.
    path = traces.generate(str(tmp_path / "static"), layers=2, steps=12, batch=2,
                           context=256, diagonal=(), noise=0.0, layer_noise=0.0)
    # (at 0.8 the budget is 2 exploit blocks, and the diagonal EMA D smears the hot
    # runs one slot forward, so a ghost block ties with a hot one: not "keeps")
    cs = replay.configs([0.2, 0.5, 0.7], explores=[0.0])
    report = replay.replay(path, cs, diagnostics=False)
    for run in report["runs"]:
        assert run["overall"]["rows"] == 11 * 2 * 2
        assert run["overall"]["miss_mean"] == 0.0 and run["overall"]["miss_p99"] == 0.0
        assert run["overall"]["sparsity"] >= run["config"]["sparsity"] - 0.06


@needs_spin
def test_moving_blocks_miss_without_exploration(tmp_path):
    path = traces.generate(str(tmp_path / "moving"), layers=1, steps=12, batch=2,
                           context=512, diagonal=(), noise=0.05, layer_noise=0.0,
                           move_every_step=True)
    report = replay.replay(path, replay.configs([0.8], explores=[0.0]), diagnostics=True)
    overall = report["runs"][0]["overall"]
    assert overall["miss_mean"] > 0.4, overall
    assert overall["miss_p99"] == 1.0
    # and the Table 1 prev-iter predictor agrees: the top-K moved every step
    assert report["diagnostics"]["overall"]["prev-iter"]["recall"] < 0.1


@needs_spin
def test_shift_is_recovered_by_exploration(tmp_path):
    path = traces.generate(str(tmp_path / "shift"), layers=1, steps=40, batch=2,
                           context=512, diagonal=(), shifts=(4,), noise=0.05)
    report = replay.replay(path, replay.configs([0.5], explores=[0.0, 0.25]),
                           diagnostics=False)
    no, yes = (r["overall"]["miss_mean"] for r in report["runs"])
    assert yes < no


def _duplicate_steps(path, steps):
    """Turns a 1-step trace into one whose steps are all identical."""
    for layer in range(2):
        src = os.path.join(path, f"layer_{layer:03d}", "step_00000")
        for t in range(1, steps):
            shutil.copytree(src, os.path.join(path, f"layer_{layer:03d}", f"step_{t:05d}"))
    _edit_header(path, steps=steps)


def test_identical_steps_prev_iter_is_perfect(tmp_path):
    path = traces.generate(str(tmp_path / "same"), layers=2, steps=1, batch=2, context=200,
                           noise=0.2)
    _duplicate_steps(path, 5)
    t = traces.load_trace(path)
    d = replay.Diagnostics(2, t.header["topk"])
    prev = None
    for step in range(5):
        cur = []
        for layer in range(2):
            a = t.step(layer, step)
            q = traces.to_f64(a["q"], "q", "f32")
            z = traces.dense_scores(q[0, 0], a["w"][0, 0].astype(np.float64), a["keys"],
                                    a["block_table"][0], int(a["lengths"][0, 0]), "f32")
            cur.append(z)
            d.row(layer, z, prev[layer] if prev else None, cur[:-1][::-1])
        prev = cur
    o = d.result()["overall"]
    assert o["prev-iter"]["pearson"] == pytest.approx(1.0)
    assert o["prev-iter"]["recall"] == 1.0
    assert o["prev-iter"]["rows"] == 4 * 2
    assert abs(o["random"]["pearson"]) < 0.3
    assert o["prev-iter-offset1"]["recall"] < 1.0


@needs_spin
def test_identical_steps_through_replay(tmp_path):
    path = traces.generate(str(tmp_path / "same"), layers=2, steps=1, batch=2, context=200,
                           noise=0.2)
    _duplicate_steps(path, 4)
    report = replay.replay(path, replay.configs([0.5]))
    o = report["diagnostics"]["overall"]
    assert o["prev-iter"]["pearson"] == pytest.approx(1.0)
    assert o["prev-iter"]["recall"] == 1.0
    assert 0.0 < o["prev-layer"]["pearson"] <= 1.0


@needs_spin
def test_mtp_trace_replays(tmp_path):
    path = traces.generate(str(tmp_path / "mtp"), layers=1, steps=8, batch=2, context=256,
                           rows=3)
    t = traces.load_trace(path)
    assert t.accepted.shape == (8, 2)
    cs = replay.configs([0.5], mtp_masks=["union", "row0"], mtp_updates=["prefix", "row0"],
                        rows=3)
    assert len(cs) == 4
    report = replay.replay(t, cs)
    for run in report["runs"]:
        assert run["overall"]["rows"] == 7 * 2 * 3
        assert 0.3 < run["overall"]["sparsity"] < 0.6


def test_configs_collapse():
    cs = replay.configs([0.2, 0.4], poolings=["max", "mean"], reductions=["A0", "A1"])
    # A0 has no pooling: 2 sparsities x (A0 + A1-max + A1-mean)
    assert len(cs) == 6
    assert len(replay.configs([0.5], mtp_masks=["union", "row0"])) == 1
    a0 = replay.configs([0.5], reductions=["A0"], explores=[0.0, 0.05])
    assert [c.explore for c in a0] == [0.0]
    # policies: "none" is explore 0; nothing explored -> no policy; A0 has none
    ps = replay.configs([0.5], explores=[0.0, 0.05],
                        explore_policies=["none", "random", "staleness-score", "block-age"])
    assert [(c.explore, c.explore_policy) for c in ps] == [
        (0.0, "random"), (0.05, "random"), (0.05, "staleness-score"), (0.05, "block-age")]
    assert [c.label(1) for c in ps] == [
        "rho=0.5 A1-max explore=0", "rho=0.5 A1-max explore=0.05",
        "rho=0.5 A1-max explore=0.05 staleness-score", "rho=0.5 A1-max explore=0.05 block-age"]
    a0 = replay.configs([0.5], reductions=["A0"], explores=[0.05],
                        explore_policies=["block-age"])
    assert [(c.explore, c.explore_policy) for c in a0] == [(0.0, "random")]
    with pytest.raises(ValueError, match="explore policy 'oldest' is not one of"):
        replay.configs([0.5], explore_policies=["oldest"])


# ---------------------------------------------------------------- CLI


def _cli(*args, tool="spin-replay"):
    return subprocess.run([os.path.join(TOOLS, tool), *args], capture_output=True, text=True)


@needs_spin
def test_cli_end_to_end(tmp_path):
    trace = str(tmp_path / "trace")
    done = _cli(trace, "--steps", "20", "--shifts", "10", "--layers", "2",
                tool="spin-trace-gen")
    assert done.returncode == 0, done.stderr
    out = str(tmp_path / "report.json")
    done = _cli(trace, "--sparsity", "0.2,0.5", "--pooling", "max,top4", "--reduction", "A0,A1,A2",
                "--explore", "0,0.1", "--json", out)
    assert done.returncode == 0, done.stderr
    assert "Predictor diagnostics" in done.stdout and "prev-layer-best5" in done.stdout
    assert "rho=0.5 A2-top4 explore=0.1" in done.stdout
    assert "(100%)" in done.stderr and "(10%)" in done.stderr
    with open(out) as f:
        report = json.load(f)
    # 2 sparsities x (A0 once + A1/A2 x 2 poolings x 2 explores)
    assert len(report["runs"]) == 2 * (1 + 2 * 2 * 2)
    for run in report["runs"]:
        assert len(run["per_layer"]) == 2
        assert 0.0 <= run["overall"]["miss_mean"] <= 1.0
        assert run["overall"]["rows"] == 19 * 2 * 2   # steps x requests x layers
    assert set(report["diagnostics"]["overall"]) == set(replay.PREDICTORS)
    assert len(report["heatmap"]["dense_topk"]) == 20


@needs_spin
def test_cli_errors(tmp_path):
    trace = traces.generate(str(tmp_path / "t"), **SMALL)
    done = _cli(trace, "--explore-policy", "random,oldest")
    assert done.returncode == 2
    assert "'oldest' is not one of none, random, staleness-score, block-age" in done.stderr
    done = _cli(trace, "--explore-policy", "none", "--explore", "0.1")
    assert done.returncode == 2
    assert "--explore-policy none conflicts with a nonzero --explore" in done.stderr
    done = _cli(trace, "--pooling", "median")
    assert done.returncode == 2 and "'median' is not one of max, mean, top4" in done.stderr
    # w.npy of a generated trace lives in the trace root (shared by all steps)
    os.remove(os.path.join(trace, "w.npy"))
    done = _cli(trace)
    assert done.returncode == 2
    assert "step_00000/w.npy: missing file" in done.stderr


@needs_spin
def test_cli_plots(tmp_path):
    trace = traces.generate(str(tmp_path / "t"), **SMALL)
    done = _cli(trace, "--sparsity", "0.5", "--plots", str(tmp_path / "plots"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert done.returncode == 2
        assert "--plots needs matplotlib" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    assert os.path.isfile(tmp_path / "plots" / "topk_heatmap.png")


# ---------------------------------------------------------------- scores traces


def test_scores_trace_loads(tmp_path):
    path = traces.generate(str(tmp_path / "s"), kind="scores", **SMALL)
    t = traces.load_trace(path)
    assert t.kind == "scores" and t.request_ids.tolist() == [100, 101]
    a = t.step(1, 5)
    assert set(a) == {"z", "lengths", "positions"}
    assert a["z"].dtype == np.float32 and a["z"].shape[:2] == (2, 1)
    assert a["z"].shape[2] % SMALL["page_size"] == 0
    n = int(a["lengths"][0, 0])
    assert np.isfinite(a["z"][0, 0, :n]).all() and np.isneginf(a["z"][0, 0, n:]).all()
    # the same z as dense_scores of the inputs trace
    ti = traces.load_trace(traces.generate(str(tmp_path / "i"), **SMALL))
    b = ti.step(1, 5)
    z = traces.dense_scores(b["q"][0, 0].astype(np.float64), b["w"][0, 0].astype(np.float64),
                            b["keys"], b["block_table"][0], n, "f32")
    assert np.array_equal(a["z"][0, 0, :n], z.astype(np.float32))


def test_scores_truncated_z(tmp_path):
    path = traces.generate(str(tmp_path / "s"), kind="scores", **SMALL)
    p = os.path.join(path, "layer_001", "step_00002", "z.npy")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size - 40)
    with pytest.raises(traces.TraceError) as e:
        traces.load_trace(path)
    msg = str(e.value)
    assert "layer_001/step_00002/z.npy: truncated: header says shape (2, 1, " in msg
    assert f"but the file has {size - 40 - 128} data bytes" in msg


def test_scores_z_shorter_than_length(tmp_path):
    path = traces.generate(str(tmp_path / "s"), kind="scores", **SMALL)
    p = os.path.join(path, "layer_000", "step_00003", "z.npy")
    n = int(np.load(os.path.join(path, "layer_000", "step_00003", "lengths.npy")).max())
    np.save(p, np.zeros((2, 1, 128), dtype=np.float32))     # 128 slots < n = 132
    t = traces.load_trace(path)
    with pytest.raises(traces.TraceError, match=r"layer_000/step_00003/z\.npy: NS = 128 slots is "
                                                rf"smaller than a length: lengths\.npy has {n}"):
        t.step(0, 3)


def test_scores_validation_header_and_shape(tmp_path):
    path = traces.generate(str(tmp_path / "s"), kind="scores", **SMALL)
    p = os.path.join(path, "layer_000", "step_00001", "z.npy")
    np.save(p, np.zeros((2, 1, 150), dtype=np.float32))
    with pytest.raises(traces.TraceError, match=r"step_00001/z\.npy: NS = 150 slots is not a "
                                                r"positive multiple of page_size = 16"):
        traces.load_trace(path)
    np.save(p, np.zeros((2, 3, 160), dtype=np.float32))
    with pytest.raises(traces.TraceError, match=r"z\.npy: shape \(2, 3, 160\) does not match the "
                                                r"header: expected \[2, 1, \?\] \(batch, rows, slots\)"):
        traces.load_trace(path)
    np.save(p, np.zeros((2, 1, 160), dtype=np.float64))
    with pytest.raises(traces.TraceError, match=r"z\.npy: dtype float64 is not allowed"):
        traces.load_trace(path)
    os.remove(p)
    with pytest.raises(traces.TraceError, match=r"step_00001/z\.npy: missing file"):
        traces.load_trace(path)
    _edit_header(path, kind="logits")
    with pytest.raises(traces.TraceError, match=r"header\.json: kind 'logits' is not one of"):
        traces.load_trace(path)
    ids = os.path.join(path, "request_ids.npy")
    np.save(ids, np.array([5, 5], dtype=np.int64))
    _edit_header(path, kind="scores")
    shutil.copy(os.path.join(path, "layer_000", "step_00000", "z.npy"), p)
    with pytest.raises(traces.TraceError, match=r"request_ids\.npy: request ids must be 2 distinct"):
        traces.load_trace(path)


def test_score_graph_text():
    g = replay.score_graph(1, 1, 160, 32, 16, 0.5, 0.05, 7, "max")
    assert 'func.func @score_layer(%z: tensor<?x1x160xf32> {spin.input = "scores"}' in g
    assert "-> tensor<?x1x10xf32>" in g and "spin.ema_update" in g and "layer = 1>" in g
    g3 = replay.score_graph(0, 3, 64, 8, 16, 0.4, 0.0, 0, "top4", mtp_mask="row0",
                            mtp_update="row0")
    assert "%acc: tensor<?xi32> {spin.accepted}" in g3
    assert "mtp_update = #spin.mtp_update<row0>" in g3 and "spin.observe %c" in g3
    with pytest.raises(ValueError, match="must divide NS"):
        replay.score_graph(0, 1, 100, 8, 16, 0.5)


def test_dense_topk_of_scores():
    z = np.array([[[1.0, 3.0, 3.0, -np.inf, 2.0, 9.0]]], dtype=np.float32)
    # slot 5 is beyond the length, slot 3 is -inf: never picked; ties to the lower index
    assert replay.dense_topk(z, np.array([[5]], np.int32), 4).tolist() == [[[1, 2, 4, 0]]]
    assert replay.dense_topk(z, np.array([[5]], np.int32), 6).tolist() == [[[1, 2, 4, 0, -1, -1]]]


@needs_spin
@pytest.mark.parametrize("rows", [1, 3])
def test_scores_trace_matches_inputs_trace(tmp_path, rows):
    # f32 keys: the compiled path scores exactly what numpy's dense_scores stores
    kw = dict(layers=2, steps=10, batch=2, context=256, rows=rows, shifts=(5,), seed=3)
    inputs = traces.generate(str(tmp_path / "i"), **kw)
    scores = traces.generate(str(tmp_path / "s"), kind="scores", **kw)
    cs = replay.configs([0.2, 0.5], poolings=["max", "top4"], explores=[0.0, 0.1], rows=rows,
                        mtp_masks=["union", "row0"], mtp_updates=["prefix", "row0"])
    a, b = replay.replay(inputs, cs), replay.replay(scores, cs)
    assert b["kind"] == "scores" and len(b["runs"]) == len(a["runs"])
    for x, y in zip(a["runs"], b["runs"]):
        assert x["label"] == y["label"]
        assert x["per_layer"] == y["per_layer"], x["label"]
        assert x["overall"] == y["overall"], x["label"]
    for p in replay.PREDICTORS:
        for m in ("pearson", "recall"):
            assert b["diagnostics"]["overall"][p][m] == pytest.approx(
                a["diagnostics"]["overall"][p][m], abs=1e-6)
    assert a["heatmap"] == b["heatmap"]


@needs_spin
def test_static_score_trace_never_misses(tmp_path):
    path = traces.generate(str(tmp_path / "static"), layers=2, steps=12, batch=2, context=256,
                           diagonal=(), noise=0.0, layer_noise=0.0, kind="scores")
    report = replay.replay(path, replay.configs([0.2, 0.5, 0.7], explores=[0.0]),
                           diagnostics=False)
    for run in report["runs"]:
        assert run["overall"]["rows"] == 11 * 2 * 2
        assert run["overall"]["miss_mean"] == 0.0 and run["overall"]["miss_p99"] == 0.0
        assert run["overall"]["sparsity"] >= run["config"]["sparsity"] - 0.06


@needs_spin
@pytest.mark.parametrize("rows", [1, 3])
def test_scores_trace_matches_inputs_trace_a0_a2_and_policies(tmp_path, rows):
    # A0 and A2 replay on scores traces, and so do the exploration policies:
    # the same numbers as the inputs trace they were made from.
    kw = dict(layers=2, steps=10, batch=2, context=256, rows=rows, shifts=(5,), seed=5)
    inputs = traces.generate(str(tmp_path / "i"), **kw)
    scores = traces.generate(str(tmp_path / "s"), kind="scores", **kw)
    cs = replay.configs([0.3, 0.6], poolings=["max", "mean"], reductions=["A0", "A1", "A2"],
                        explores=[0.25], rows=rows,
                        explore_policies=["none", "random", "staleness-score", "block-age"])
    assert {c.reduction for c in cs} == {"A0", "A1", "A2"}
    assert {c.explore_policy for c in cs} == {"random", "staleness-score", "block-age"}
    a, b = replay.replay(inputs, cs, diagnostics=False), \
        replay.replay(scores, cs, diagnostics=False)
    for x, y in zip(a["runs"], b["runs"]):
        assert x["label"] == y["label"]
        assert x["per_layer"] == y["per_layer"], x["label"]
        assert x["overall"] == y["overall"], x["label"]
    assert a["heatmap"] == b["heatmap"]


@needs_spin
def test_cli_scores_end_to_end(tmp_path):
    trace = str(tmp_path / "trace")
    done = _cli(trace, "--kind", "scores", "--steps", "12", "--shifts", "6", "--rows", "2",
                tool="spin-trace-gen")
    assert done.returncode == 0, done.stderr
    assert "scores trace" in done.stdout
    assert not os.path.exists(os.path.join(trace, "w.npy"))
    out = str(tmp_path / "report.json")
    done = _cli(trace, "--sparsity", "0.2,0.5", "--explore", "0,0.1", "--mtp-mask", "union,row0",
                "--json", out)
    assert done.returncode == 0, done.stderr
    assert "scores trace" in done.stdout and "miss vs top-K of z" in done.stdout
    assert "rho=0.5 A1-max explore=0.1 mtp=row0/prefix" in done.stdout
    assert "(100%)" in done.stderr
    with open(out) as f:
        report = json.load(f)
    assert report["kind"] == "scores" and len(report["runs"]) == 2 * 2 * 2
    for run in report["runs"]:
        assert run["overall"]["rows"] == 11 * 2 * 2 * 2   # steps x requests x rows x layers
        assert 0.0 <= run["overall"]["miss_mean"] <= 1.0
    assert set(report["diagnostics"]["overall"]) == set(replay.PREDICTORS)
    done = _cli(trace, "--sparsity", "0.5", "--reduction", "A0,A2", "--no-diagnostics")
    assert done.returncode == 0, done.stderr
    assert "rho=0.5 A0 explore=0 mtp=union/prefix" in done.stdout
    assert "rho=0.5 A2-max explore=0.05 mtp=union/prefix" in done.stdout


def _add_resets(path, resets):
    hp = os.path.join(path, "header.json")
    with open(hp) as f:
        header = json.load(f)
    header["resets"] = resets
    with open(hp, "w") as f:
        json.dump(header, f)


@pytest.mark.parametrize("resets,message", [
    ([[99, 0]], "step 99 is outside"),
    ([[3, 7]], "batch index 7 is outside"),
    ([[3, 0], [3, 0]], "is listed twice"),
    ([[3]], "must be [step, batch index] integer pairs"),
    ({"3": 0}, "must be a list of [step, batch index] pairs"),
])
def test_resets_header_validation(small_trace, resets, message):
    _add_resets(small_trace, resets)
    with pytest.raises(traces.TraceError, match=re.escape(message)):
        traces.load_trace(small_trace)


def test_resets_load_as_a_matrix(tmp_path):
    path = traces.generate(str(tmp_path / "t"), layers=1, steps=6, batch=3, context=128)
    _add_resets(path, [[2, 1], [4, 0]])
    trace = traces.load_trace(path)
    expected = np.zeros((6, 3), dtype=bool)
    expected[2, 1] = expected[4, 0] = True
    assert (trace.resets == expected).all()


@needs_spin
def test_reset_starts_a_new_turn_with_a_dense_warm_up(tmp_path):
    # Blocks move every step, so SPIN without exploration misses often; at a
    # reset the request's step is a warm-up again: every block is selected
    # and its top-K equals the dense one exactly, and it is not a sparse row.
    path = traces.generate(str(tmp_path / "moving"), layers=1, steps=10, batch=2,
                           context=512, diagonal=(), noise=0.05, layer_noise=0.0,
                           move_every_step=True)
    plain = replay.replay(path, replay.configs([0.8], explores=[0.0]), diagnostics=False)
    _add_resets(path, [[6, 0], [7, 1]])
    turns = replay.replay(path, replay.configs([0.8], explores=[0.0]), diagnostics=False)
    assert plain["runs"][0]["overall"]["rows"] == 9 * 2
    assert turns["runs"][0]["overall"]["rows"] == 9 * 2 - 2
    heat, label = turns["heatmap"], turns["runs"][0]["label"]
    assert heat["request_id"] == int(traces.load_trace(path).request_ids[0])  # reset at 6
    assert heat["spin_topk"][label][6] == heat["dense_topk"][6]
    differs = [t for t in range(1, 10)
               if plain["heatmap"]["spin_topk"][label][t] != plain["heatmap"]["dense_topk"][t]]
    assert 6 in differs  # without the reset, step 6 was a sparse step that missed


# ---------------------------------------------------------------- exploration policies


@needs_spin
def test_explore_policies_share_the_budget(tmp_path):
    # Every policy explores the same fraction of the same block budget, so
    # the realized sparsity is the same as without exploration; which
    # blocks are explored differs.
    path = traces.generate(str(tmp_path / "shift"), layers=1, steps=30, batch=2,
                           context=512, diagonal=(), shifts=(4,), noise=0.05)
    cs = replay.configs([0.5], explores=[0.1], explore_policies=list(replay.EXPLORE_POLICIES))
    report = replay.replay(path, cs, diagnostics=False)
    by_policy = {(r["config"]["explore_policy"] if r["config"]["explore"] else "none"): r
                 for r in report["runs"]}
    assert set(by_policy) == set(replay.EXPLORE_POLICIES)
    assert len({r["overall"]["sparsity"] for r in report["runs"]}) == 1
    assert all(r["overall"]["rows"] == 29 * 2 for r in report["runs"])
    # After the shift at step 4, every policy finds the new blocks sooner
    # than no exploration; they do not all explore the same blocks.
    miss = {p: r["overall"]["miss_mean"] for p, r in by_policy.items()}
    for p in ("random", "staleness-score", "block-age"):
        assert miss[p] < miss["none"], miss
    assert len({miss["random"], miss["staleness-score"], miss["block-age"]}) > 1, miss


@needs_spin
def test_cli_compares_every_policy(tmp_path):
    trace = traces.generate(str(tmp_path / "t"), **SMALL)
    out = str(tmp_path / "r.json")
    done = _cli(trace, "--sparsity", "0.5", "--explore", "0.25", "--explore-policy",
                "none,random,staleness-score,block-age", "--no-diagnostics", "--json", out)
    assert done.returncode == 0, done.stderr
    for label in ("rho=0.5 A1-max explore=0 ", "rho=0.5 A1-max explore=0.25 ",
                  "rho=0.5 A1-max explore=0.25 staleness-score",
                  "rho=0.5 A1-max explore=0.25 block-age"):
        assert label in done.stdout, (label, done.stdout)
    with open(out) as f:
        runs = json.load(f)["runs"]
    assert [r["config"]["explore_policy"] for r in runs] == \
        ["random", "random", "staleness-score", "block-age"]


# ---------------------------------------------------------------- joining and leaving


def _set_ids(path, ids, **changes):
    _edit_header(path, request_ids=ids, **changes)


@pytest.mark.parametrize("ids,message", [
    ([[100, 101]] * 5, "request_ids lists 5 steps, expected 6 (steps) lists of 2 entries "
                       "(batch)"),
    ([[100, 101]] * 5 + [[100]], "request_ids[5] must list 2 entries (batch), got [100]"),
    ([[100, 101]] * 5 + [[7, 7]], "request_ids[5] lists request 7 twice (batch indices 0 "
                                  "and 1); a request is at one batch index per step"),
    ([[100, 101]] * 5 + [[7, "a"]], "request_ids[5][1] = 'a' is not an integer or null "
                                    "(no request)"),
    ([[100, 101]] * 5 + [[7, True]], "request_ids[5][1] = True is not an integer or null"),
    ([[100, 101]] * 5 + [[7, 2 ** 63]], "request_ids[5][1] = 9223372036854775808 does not "
                                        "fit in int64"),
    ([100, None], "request_ids[1] = None is not an integer"),
    ([5, 5], "request_ids lists request 5 twice (batch indices 0 and 1)"),
    ("all", "request_ids must be a list of 2 distinct integers (batch) or one such list "
            "per step, got 'all'"),
])
def test_request_ids_per_step_validation(small_trace, ids, message):
    _set_ids(small_trace, ids)
    with pytest.raises(traces.TraceError, match=re.escape(message)) as e:
        traces.load_trace(small_trace)
    assert str(e.value).startswith(os.path.join(small_trace, "header.json") + ": ")


def test_join_leave_validation_of_resets_accepted_and_scores(tmp_path):
    ids = [[100, 101], [100, 101], [100, None], [100, None], [100, 102], [100, 102]]
    path = traces.generate(str(tmp_path / "t"), **SMALL)
    _set_ids(path, ids, resets=[[3, 1]])
    with pytest.raises(traces.TraceError, match=re.escape(
            "reset [3, 1]: batch index 1 holds no request at step 3 (request_ids[3][1] is "
            "null)")):
        traces.load_trace(path)
    mtp = traces.generate(str(tmp_path / "m"), **dict(SMALL, rows=2))
    accepted = [[0, 1]] * 6
    accepted[2] = [1, None]          # null at the empty batch index: fine
    _set_ids(mtp, ids, accepted=accepted)
    t = traces.load_trace(mtp)
    assert t.accepted[2].tolist() == [1, 0]
    accepted[4] = [0, None]          # batch index 1 holds request 102 at step 4
    _set_ids(mtp, ids, accepted=accepted)
    with pytest.raises(traces.TraceError, match=re.escape(
            "'accepted' values must lie in 0..1 (rows - 1); accepted[4][1] is None")):
        traces.load_trace(mtp)
    scores = traces.generate(str(tmp_path / "s"), kind="scores", **SMALL)
    _set_ids(scores, ids)
    with pytest.raises(traces.TraceError, match=r"request_ids\.npy: .*header\.json lists "
                                                r"request_ids per step .* takes no "
                                                r"request_ids\.npy; remove it"):
        traces.load_trace(scores)


def test_empty_batch_indices_are_not_read(tmp_path):
    path = traces.generate(str(tmp_path / "t"), **SMALL)
    ids = [[100, 101]] * 3 + [[100, None]] * 3
    _set_ids(path, ids)
    # garbage where nobody is: lengths beyond the table, positions before them
    for layer in range(2):
        for t in range(3, 6):
            d = os.path.join(path, f"layer_{layer:03d}", f"step_{t:05d}")
            n = np.load(os.path.join(d, "lengths.npy"))
            n[1] = 10 ** 6
            np.save(os.path.join(d, "lengths.npy"), n)
            p = np.load(os.path.join(d, "positions.npy"))
            p[1] = -5
            np.save(os.path.join(d, "positions.npy"), p)
    t = traces.load_trace(path)
    assert t.active[:, 1].tolist() == [True] * 3 + [False] * 3
    assert t.step(1, 4)["lengths"][1, 0] == 10 ** 6     # loaded, not checked
    assert t.max_live_requests() == 2 and t.last_steps() == {100: 5, 101: 2}
    # occupied again at step 3, the same garbage is read and reported
    ids[3] = [100, 103]
    _set_ids(path, ids)
    with pytest.raises(traces.TraceError, match="lengths.npy has a value 1000000 larger"):
        traces.load_trace(path).step(0, 3)


def test_generate_joins_and_leaves(tmp_path):
    path = traces.generate(str(tmp_path / "t"), **dict(SMALL, batch=3),
                           joins=[(2, 1), (4, 2)], leaves=[(1, 2), (3, 0)])
    t = traces.load_trace(path)
    assert t.ids.tolist() == [[100, 101, 102], [100, 101, -1], [100, 103, -1],
                              [-1, 103, -1], [-1, 103, 104], [-1, 103, 104]]
    assert t.first_steps().astype(int).tolist() == [[1, 1, 1], [0, 0, 0], [0, 1, 0],
                                                    [0, 0, 0], [0, 0, 1], [0, 0, 0]]
    assert t.max_live_requests() == 3
    a = t.step(0, 3)
    assert a["lengths"][[0, 2]].tolist() == [[0], [0]] and a["lengths"][1, 0] > 0
    with pytest.raises(ValueError, match=r"join \(9, 0\) is outside the 6 steps x 3 batch"):
        traces.generate(str(tmp_path / "u"), **dict(SMALL, batch=3), joins=[(9, 0)])
    with pytest.raises(ValueError, match=r"leave \(2, 1\): batch index 1 already has a join"):
        traces.generate(str(tmp_path / "v"), **dict(SMALL, batch=3), joins=[(2, 1)],
                        leaves=[(2, 1)])


def _permute_batch(path, steps, order):
    """Rewrites the given steps of a generated inputs trace with the batch
    indices in ``order`` (per-step copies of the shared arrays too) and the
    header's request_ids to match."""
    h = json.load(open(os.path.join(path, "header.json")))
    T, L = h["steps"], h["layers"]
    base = h["request_ids"]
    table, w = np.load(os.path.join(path, "block_table.npy")), np.load(os.path.join(path,
                                                                                   "w.npy"))
    ids = []
    for t in range(T):
        perm = order if t in steps else list(range(len(base)))
        ids.append([base[i] for i in perm])
        for layer in range(L):
            d = os.path.join(path, f"layer_{layer:03d}", f"step_{t:05d}")
            for name in ("q", "lengths", "positions"):
                a = np.load(os.path.join(d, name + ".npy"))
                np.save(os.path.join(d, name + ".npy"), np.ascontiguousarray(a[perm]))
            np.save(os.path.join(d, "block_table.npy"), np.ascontiguousarray(table[perm]))
            np.save(os.path.join(d, "w.npy"), np.ascontiguousarray(w[perm]))
    _set_ids(path, ids)


@needs_spin
def test_requests_moving_between_batch_indices_keep_their_state(tmp_path):
    # The state follows the request id, not the batch index: a trace whose
    # batch is reordered at some steps replays exactly like the original.
    kw = dict(layers=2, steps=10, batch=3, context=256, shifts=(5,), seed=4)
    a = traces.generate(str(tmp_path / "a"), **kw)
    b = traces.generate(str(tmp_path / "b"), **kw)
    _permute_batch(b, steps={3, 4, 7}, order=[2, 0, 1])
    cs = replay.configs([0.5], explores=[0.25],
                        explore_policies=["random", "staleness-score", "block-age"])
    ra, rb = replay.replay(a, cs), replay.replay(b, cs)
    for x, y in zip(ra["runs"], rb["runs"]):
        assert x["per_layer"] == y["per_layer"] and x["overall"] == y["overall"], x["label"]
    for p in replay.PREDICTORS:
        if p == "random":
            continue  # uniform draws in row order: the order changed
        for m in ("pearson", "recall"):
            assert rb["diagnostics"]["overall"][p][m] == pytest.approx(
                ra["diagnostics"]["overall"][p][m], abs=1e-12)
    assert ra["heatmap"] == rb["heatmap"]


@needs_spin
@pytest.mark.parametrize("kind", ["inputs", "scores"])
def test_join_and_leave_replay(tmp_path, kind):
    # batch index 1: request 101 leaves at step 3, request 102 joins at
    # step 5; batch index 0 holds request 100 throughout. Sparse rows: 100
    # at steps 1-7, 101 at steps 1-2, 102 at steps 6-7 (step 5 is its
    # warm-up) -> 11 per layer, 2 layers.
    kw = dict(layers=2, steps=8, batch=2, context=256, shifts=(4,), seed=6, kind=kind)
    path = traces.generate(str(tmp_path / "t"), **kw, joins=[(5, 1)], leaves=[(3, 1)])
    cs = replay.configs([0.6], explores=[0.25], explore_policies=["random", "block-age"])
    report = replay.replay(path, cs, heatmap_request=102)
    for run in report["runs"]:
        assert run["overall"]["rows"] == 11 * 2, run["label"]
        assert [l["rows"] for l in run["per_layer"]] == [11, 11]
    heat = report["heatmap"]
    assert heat["request_id"] == 102
    assert heat["dense_topk"][:5] == [[]] * 5           # not in the batch yet
    for label, spin_top in heat["spin_topk"].items():
        assert spin_top[:5] == [[]] * 5
        assert spin_top[5] == heat["dense_topk"][5], label   # its warm-up is dense
    # the diagnostics know no previous step of a request before its first
    prev_rows = report["diagnostics"]["overall"]["prev-iter"]["rows"]
    assert prev_rows == 2 * (7 + 2 + 2)


@needs_spin
def test_one_batch_index_serving_requests_in_turn(tmp_path):
    # Four requests one after the other in a batch of one: the replay's
    # state holds one request at a time (each is released after its last
    # step), and each first step is a dense warm-up.
    path = traces.generate(str(tmp_path / "t"), layers=1, steps=8, batch=1, context=256,
                           joins=[(2, 0), (4, 0), (6, 0)])
    t = traces.load_trace(path)
    assert t.max_live_requests() == 1
    report = replay.replay(path, replay.configs([0.5], explores=[0.0]), diagnostics=False)
    assert report["runs"][0]["overall"]["rows"] == 4   # steps 1, 3, 5, 7


@needs_spin
def test_cli_join_leave_end_to_end(tmp_path):
    trace = str(tmp_path / "t")
    done = _cli(trace, "--steps", "8", "--batch", "3", "--join", "4:1,5:2", "--leave", "2:2",
                "--layers", "1", tool="spin-trace-gen")
    assert done.returncode == 0, done.stderr
    assert json.load(open(os.path.join(trace, "header.json")))["request_ids"][3] == \
        [100, 101, None]
    done = _cli(trace, "--sparsity", "0.5", "--explore-policy", "block-age",
                "--heatmap-request", "103")
    assert done.returncode == 0, done.stderr
    assert "rho=0.5 A1-max explore=0.05 block-age" in done.stdout
    assert "3 batch indices (5 requests joining and leaving)" in done.stdout
    done = _cli(trace, "--leave", "x:1", tool="spin-trace-gen")
    assert done.returncode == 2 and "'x:1' is not STEP:BATCH_INDEX" in done.stderr
    done = _cli(trace, "--heatmap-request", "999")
    assert done.returncode == 2 and "request 999 is not in the trace" in done.stderr


def _to_fp8_trace(path, query_format="fp8"):
    """A generated f32 trace rewritten with fp8 e4m3 keys (unit scales) and,
    with `query_format`, fp8 queries: every value rounded to an integer in
    [-4, 4] and stored as its e4m3 bit pattern."""
    table = traces.fp8_e4m3_bits_to_f64(np.arange(256, dtype=np.uint8))
    bits = {v: int(np.flatnonzero(table == v)[0]) for v in range(-4, 5)}

    def encode(a):
        r = np.clip(np.rint(a), -4, 4).astype(int)
        return np.vectorize(bits.get)(r).astype(np.uint8)

    for root, _, files in os.walk(path):
        for name in files:
            f = os.path.join(root, name)
            if name == "keys.npy":
                k = np.load(f)
                np.save(f, encode(k))
                np.save(os.path.join(root, "scales.npy"),
                        np.ones(k.shape[:2], dtype=np.float32))
            elif name == "q.npy" and query_format == "fp8":
                np.save(f, encode(np.load(f)))
    changes = {"key_format": "fp8"}
    if query_format:
        changes["query_format"] = query_format
    _edit_header(path, **changes)


def test_fp8_query_trace_header_and_dtypes(tmp_path):
    path = traces.generate(str(tmp_path / "q8"), layers=1, steps=2, batch=2, context=64,
                           heads=4, head_dim=32, topk=16, page_size=16)
    _to_fp8_trace(path)
    t = traces.load_trace(path)
    assert t.header["query_format"] == "fp8"
    _edit_header(path, query_format="fp4")
    with pytest.raises(traces.TraceError, match="query_format 'fp4' is not one of"):
        traces.load_trace(path)
    _edit_header(path, query_format="fp8", key_format="bf16")
    with pytest.raises(traces.TraceError, match="query_format 'fp8' needs key_format 'fp8'"):
        traces.load_trace(path)
    # bf16 queries (uint16 bits) in a trace that says fp8 queries.
    path2 = traces.generate(str(tmp_path / "q16"), layers=1, steps=2, batch=2, context=64,
                            heads=4, head_dim=32, topk=16, page_size=16, key_format="bf16")
    _edit_header(path2, key_format="fp8", query_format="fp8")
    with pytest.raises(traces.TraceError, match="dtype uint16 is not allowed for q with "
                                                "query_format 'fp8'"):
        traces.load_trace(path2)


@needs_spin
def test_fp8_query_trace_replays_on_fp8_queries(tmp_path):
    """spin-replay runs an fp8-query trace with query_format='fp8' Indexers
    (which take the uint8 bit patterns as they are), and its dense truth is
    the numpy top-K of the decoded fp8 queries and keys."""
    import spin
    path = traces.generate(str(tmp_path / "q8"), layers=1, steps=4, batch=2, context=200,
                           heads=4, head_dim=32, topk=16, page_size=16)
    _to_fp8_trace(path)
    report = replay.replay(path, replay.configs([0.5]), diagnostics=True)
    run = report["runs"][0]
    assert run["overall"]["rows"] == 3 * 2          # the first step warms up
    t = traces.load_trace(path)
    a = t.step(0, 3)
    q = traces.to_f64(a["q"], "q", "fp8")
    z = traces.dense_scores(q[0, 0], a["w"][0, 0].astype(np.float64), a["keys"],
                            a["block_table"][0], int(a["lengths"][0, 0]), "fp8", a["scales"])
    ix = spin.Indexer(heads=4, head_dim=32, block_size=16, topk=16, key_format="fp8",
                      query_format="fp8", dense=True)
    st = ix.new_state(capacity_slots=a["block_table"].shape[1] * 16, max_requests=2)
    got = ix(a["q"], a["w"], a["keys"], a["block_table"], a["lengths"], a["positions"], st,
             request_ids=np.arange(2, dtype=np.int64), scales=a["scales"])
    np.testing.assert_array_equal(got[0, 0][:16], traces.topk_indices(z, 16))
