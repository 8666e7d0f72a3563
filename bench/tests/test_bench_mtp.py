"""Issue 26 in the benchmark, without a GPU: bench_artifacts.py's mtp set,
bench_gpu.py's plan, run-time estimate, MTP commits between SPIN steps
(a fake program and state on CPU tensors that enforce the runtime's commit
rules), decoding steps that grow by the accepted drafts + 1, DeepGEMM's
paged cache layout and its absence, and render_benchmarks.py's section on
a made-up results file."""

import importlib.util
import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

MTP_SET = {
    "fp8-b16-n128k-k512-r1-dense", "fp8-b16-n128k-k512-r1-spin0.5",
    "fp8-b16-n256k-k2048-r1-dense", "fp8-b16-n256k-r1-scores",
    "fp8-b16-n256k-k2048-r1-dense-qfp8", "fp8-b16-n256k-k2048-r2-dense-qfp8",
    "fp8-b16-n256k-k2048-r4-dense-qfp8", "fp8-b16-n256k-k2048-r2-spin0.5-qfp8",
    "fp8-b16-n256k-r1-scores-qfp8", "fp8-b16-n256k-r2-scores-qfp8",
    "fp8-b16-n256k-r4-scores-qfp8",
    "fp8-b96-n128k-k2048-r1-dense-qfp8", "fp8-b96-n128k-k2048-r2-dense-qfp8",
    "fp8-b96-n128k-k2048-r4-dense-qfp8", "fp8-b96-n128k-k2048-r2-spin0.5-qfp8",
    "fp8-b96-n128k-r1-scores-qfp8", "fp8-b96-n128k-r2-scores-qfp8",
    "fp8-b96-n128k-r4-scores-qfp8",
    "fp8-b12-n128k-r1-scores-qfp8", "fp8-b12-n128k-r2-scores-qfp8",
    "fp8-b12-n128k-r4-scores-qfp8",
}


@pytest.fixture(scope="module")
def artifacts_module():
    pytest.importorskip("spin")  # gpu_artifacts (imported by it) needs the package
    import sys
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    spec = importlib.util.spec_from_file_location(
        "bench_artifacts", os.path.join(ROOT, "bench", "bench_artifacts.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _index(configs):
    return {"format": "spin-bench-artifacts", "version": 1, "configs": configs}


def test_the_mtp_set_is_exactly_what_the_minimums_need(artifacts_module):
    ba = artifacts_module
    configs = ba.all_configs()
    mtp = [c for c in configs if "mtp" in c["sets"]]
    assert {c["name"] for c in mtp} == MTP_SET
    assert all(c["format"] == "fp8" for c in mtp)
    fp8q = [c for c in configs if c["q_format"] == "fp8"]
    assert fp8q and all(c["name"].endswith("-qfp8") and c["format"] == "fp8" for c in fp8q)
    # The minimum set is issue 5's, unchanged: bf16 queries, R = 1.
    assert all(c["q_format"] == "bf16" and c["rows"] == 1 for c in configs if c["minimum"])


def test_the_grid_keeps_its_names(artifacts_module):
    """Every configuration of the grid from before issue 26 is still built
    under its old name (the rendered 'before' figures and earlier results
    files are matched by name)."""
    ba = artifacts_module
    old = subprocess.run(["git", "-C", ROOT, "show", "f761f92:bench/bench_artifacts.py"],
                         capture_output=True, text=True)
    if old.returncode != 0:
        pytest.skip("no git history")
    ns = {"__name__": "old_bench_artifacts",
          "__file__": os.path.join(ROOT, "bench", "bench_artifacts.py")}
    code = old.stdout.replace("import gpu_artifacts", "gpu_artifacts = None")
    exec(compile(code, "old_bench_artifacts.py", "exec"), ns)
    old_names = {c["name"] for c in ns["all_configs"]()}
    new_names = {c["name"] for c in ba.all_configs()}
    assert len(old_names) == 168 and old_names <= new_names


def test_bench_gpu_plans_and_estimates_the_mtp_set(artifacts_module, bench_script):
    bg = bench_script("bench_gpu")
    configs = artifacts_module.all_configs()
    for c in configs:
        c["dir"] = c["name"]
    groups = bg.plan(_index(configs), "", "mtp")
    assert [key for key, _ in groups] == [("fp8", 16, 262144), ("fp8", 96, 131072),
                                          ("fp8", 12, 131072), ("fp8", 16, 131072)]
    assert {c["name"] for _, cs in groups for c in cs} == MTP_SET
    for (fmt, _, _), cs in groups:
        # SPIN's dense step at the same R and queries is measured before it.
        for i, c in enumerate(cs):
            if c["mode"] == "spin":
                assert any(d["mode"] == "dense" and d["rows"] == c["rows"]
                           and d["q_format"] == c["q_format"] and d["k"] == c["k"]
                           for d in cs[:i])
    dg = {key[1:]: bg.deepgemm_rows(key[0], cs) for key, cs in groups}
    assert dg == {(16, 262144): [1, 2, 4], (96, 131072): [1, 2, 4], (12, 131072): [1, 2, 4],
                  (16, 131072): []}
    assert bg.deepgemm_calls(1) == [(0, 1)]
    assert bg.deepgemm_calls(2) == [(0, 2)]
    assert bg.deepgemm_calls(4) == [(0, 2), (2, 4)]
    args = bg.parse_args(["--artifacts", "/nonexistent", "--set", "mtp"])
    est = bg.estimate(groups, args)
    assert 30 < est["total_s"] < 240, est
    # The whole set (no --set) is planned too, in groups of (keys, B, N).
    everything = bg.plan(_index(configs), "", "all")
    assert sum(len(cs) for _, cs in everything) == len(configs)


def test_in_set_reads_indexes_from_before_sets(bench_script):
    bg = bench_script("bench_gpu")
    assert bg.in_set({"minimum": True}, "minimum")
    assert not bg.in_set({"minimum": False}, "minimum")
    assert not bg.in_set({"minimum": True}, "mtp")
    assert bg.in_set({"sets": ["all", "mtp"]}, "mtp")


def test_accepted_patterns_cover_every_count(bench_script):
    bg = bench_script("bench_gpu")
    for rows in (2, 3, 4):
        for j in range(rows):
            p = bg.accepted_pattern(16, rows, j)
            assert set(p) == set(range(rows))
        # Each request's count changes from one pattern to the next.
        assert all(bg.accepted_pattern(5, rows, j)[i] != bg.accepted_pattern(5, rows, j + 1)[i]
                   for i in range(5) for j in range(rows - 1))


torch = pytest.importorskip("torch")


class _FakeTimer:
    """Calls prepare + fn a few times; every call's lengths are recorded by
    the fns themselves."""

    def __init__(self, calls=7):
        self.calls = calls
        self.max_calls = []

    def _summary(self, n):
        return {"median_us": 10.0, "p20_us": 9.0, "p80_us": 11.0, "min_us": 9.0, "reps": n}

    def __call__(self, fn, rep_ms=None, flush=True, min_reps=None, prepare=None,
                 max_calls=None):
        self.max_calls.append(max_calls)
        n = self.calls if max_calls is None else min(self.calls, max_calls)
        for _ in range(n):
            if prepare is not None:
                prepare()
            fn()
        return self._summary(n)

    def each(self, fns):
        for fn in fns:
            for _ in range(2):
                fn()
        return self._summary(2 * len(fns))


def test_mtp_decoding_steps_grow_by_the_accepted_drafts(bench_script):
    bg = bench_script("bench_gpu")
    runner = object.__new__(bg.Bench)
    runner.timer = _FakeTimer(calls=9)
    b, rows, n = 3, 2, 16384
    lengths = (n - (rows - 1) + torch.arange(rows, dtype=torch.int32)).expand(b, rows).contiguous()
    positions = lengths - 1
    before = lengths.clone()
    seen = []

    def replay(j):
        return lambda: seen.append((j, lengths.clone(), positions.clone()))

    cycle = [(replay(j), torch.tensor(bg.accepted_pattern(b, rows, j),
                                      dtype=torch.int32).add_(1).view(b, 1))
             for j in range(rows)]
    runner.decode_timing(None, lengths, positions, cycle=cycle)
    assert runner.timer.max_calls == [bg.DECODE_HEADROOM // rows]
    assert [j for j, _, _ in seen] == [i % rows for i in range(9)]
    start = before - bg.DECODE_HEADROOM
    total = torch.zeros(b, 1, dtype=torch.int32)
    for i, (j, ln, pos) in enumerate(seen):
        total += cycle[j][1]
        assert torch.equal(ln, start + total)          # grew by accepted + 1 first
        assert torch.equal(pos, ln - 1)                 # row r at length_r - 1
        assert torch.equal(ln[:, 1] - ln[:, 0], torch.ones(b, dtype=torch.int32))
    assert torch.equal(lengths, before) and torch.equal(positions, before - 1)


class _FakeState:
    """The runtime's MTP rules (StatePool): a request stepped by an MTP
    program must be committed (0..R-1) before its next step, once."""

    def __init__(self, rows):
        self.rows = rows
        self.pending, self.it, self.commits, self.ids = {}, {}, [], []

    def add(self, rid):
        self.pending[rid], self.it[rid] = False, 0
        self.ids.append(rid)

    def commit(self, rid, accepted):
        assert self.pending[rid], f"request {rid} has no uncommitted verification step"
        assert 0 <= accepted < self.rows
        self.pending[rid] = False
        self.it[rid] += 1
        self.commits.append((rid, accepted))

    def step(self, ids):
        for rid in ids:
            assert not (self.rows > 1 and self.pending[rid]), \
                f"request {rid} has an uncommitted verification step"
            self.pending[rid] = self.rows > 1
            if self.rows == 1:
                self.it[rid] += 1

    def iteration(self, rid):
        return self.it[rid]


class _FakeProgram:
    chip = "sm_90a"

    def __init__(self, rows, k, sparsity):
        self.rows, self.k, self.sparsity = rows, k, sparsity
        self.state = _FakeState(rows)
        self.steps = 0
        self.captured_steps_left = 0

    def new_state(self, slots):
        return self.state

    def reserve_captured_steps(self, n):
        self.captured_steps_left += n

    def check(self):
        pass

    def __call__(self, x, state, request_ids=None, outputs=None):
        assert x["q"].shape[1] == self.rows and x["positions"].shape == x["lengths"].shape
        assert torch.equal(x["positions"], x["lengths"] - 1)
        state.step(request_ids)
        b = len(request_ids)
        outputs["topk"].copy_(torch.arange(self.k, dtype=torch.int32).expand(b, self.rows,
                                                                             self.k))
        outputs["sparsity"].fill_(0.0 if self.steps == 0 else self.sparsity)
        self.steps += 1
        return outputs


class _Graph:
    """A captured step: the capture runs the host part once; a replay runs
    none of it (as a CUDA graph, which replays device work only)."""

    def __init__(self, call):
        call()
        self.replays = 0

    def replay(self):
        self.replays += 1


def test_spin_mtp_steps_commit_between_steps(bench_script, monkeypatch):
    """run_ours on an R=2 SPIN configuration: every step after the first
    commits each request's accepted drafts first (eager steps, captures and
    direct calls; never inside the timed window of a replay), the counts
    vary over the batch and from step to step, the decoding graphs are one
    per pattern, and the checks pass."""
    bg = bench_script("bench_gpu")
    b, n, k, rows = 3, 4096, 64, 2
    monkeypatch.setattr(bg, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    graphs = []

    def capture(torch_, program, calls):
        new = [_Graph(c) for c in calls]
        graphs.extend(new)
        return new

    monkeypatch.setattr(bg, "capture_graphs", capture)
    budget = 1.0 - bg.expected_sparsity(n, k, 0.5)
    program = _FakeProgram(rows, k, 1.0 - budget)

    class Spin:
        @staticmethod
        def load(path):
            return program

    args = bg.parse_args(["--artifacts", "/nonexistent", "--steps", "4", "--sets", "3"])
    runner = object.__new__(bg.Bench)
    runner.torch, runner.spin, runner.args = torch, Spin, args
    runner.timer = _FakeTimer()
    gen = torch.Generator().manual_seed(1)
    sets = [bg.InputSet(torch, "bf16", b, n, [rows], gen) for _ in range(3)]
    c = dict(name="bf16-b3-n4k-k64-r2-spin0.5", format="bf16", batch=b, slots=n, k=k, rows=rows,
             mode="spin", sparsity=0.5, dir="x")
    r = runner.run_ours(c, sets, None)
    assert r["problems"] == [], r["problems"]
    assert r["warmup_sparsity"] == 0.0
    commits = program.state.commits
    # 4 eager steps, 3 captures, the direct calls, 2 decoding captures: one
    # commit per request before each step but the first.
    host_steps = 4 + 3 + runner.timer.calls + 2
    assert len(commits) == b * (host_steps - 1)
    assert {a for _, a in commits} == {0, 1}
    by_request = {}
    for rid, a in commits:
        by_request.setdefault(rid, []).append(a)
    assert all(len(set(v)) == 2 for v in by_request.values())
    assert len(graphs) == 3 + rows and all(g.replays > 0 for g in graphs)
    assert r["decode_steps"] <= bg.DECODE_HEADROOM // rows
    assert r["decode_mean_growth"] == pytest.approx(1.5)
    assert r["realized_sparsity"] <= r["expected_sparsity"] + 0.01


def test_deepgemm_cache_is_its_paged_layout(bench_script):
    """uint8 [pages, 64, 1, 132]: per page the 64 x 128 key bytes, then the
    64 f32 scales' bytes (a stand-in for e4m3 keys: their bytes)."""
    bg = bench_script("bench_gpu")
    s = object.__new__(bg.InputSet)
    s.torch = torch
    pages = 5
    s.keys = torch.randint(0, 256, (pages, bg.PAGE, bg.HEAD_DIM), dtype=torch.uint8)
    s.scales = torch.rand(pages, bg.PAGE)
    s._deepgemm_cache = None
    cache = s.deepgemm_cache()
    assert cache.shape == (pages, bg.PAGE, 1, bg.HEAD_DIM + 4) and cache.dtype == torch.uint8
    assert cache.stride(1) == bg.HEAD_DIM + 4 and cache.stride(3) == 1
    flat = cache.reshape(pages, -1)
    assert torch.equal(flat[:, :bg.PAGE * bg.HEAD_DIM].reshape(pages, bg.PAGE, bg.HEAD_DIM),
                       s.keys)
    scales = flat[:, bg.PAGE * bg.HEAD_DIM:].contiguous().view(torch.float32)
    assert torch.equal(scales, s.scales)
    assert s.deepgemm_cache() is cache


def test_deepgemm_absent_is_not_measured(bench_script, tmp_path):
    bg = bench_script("bench_gpu")
    for argv, reason in (([], "has no deep_gemm/ package"),
                         (["--no-deepgemm"], "--no-deepgemm")):
        args = bg.parse_args(["--artifacts", "x", "--deepgemm", str(tmp_path)] + argv)
        dg = bg.DeepGemm(torch, args)
        assert not dg.available and reason in dg.reason
        assert dg.info()["available"] is False
    (tmp_path / "deep_gemm").mkdir()
    (tmp_path / "deep_gemm" / "__init__.py").write_text("raise ImportError('no _C')\n")
    dg = bg.DeepGemm(torch, bg.parse_args(["--artifacts", "x", "--deepgemm", str(tmp_path)]))
    assert not dg.available and "no _C" in dg.reason and "build_deepgemm.sh" in dg.reason


#===------------------------------------------------------------------------===#
# render_benchmarks.py's section
#===------------------------------------------------------------------------===#

def _r(name, mode, b, n, rows, median, q="fp8", k=2048, fmt="fp8", **extra):
    r = {"name": name, "format": fmt, "q_format": q, "batch": b, "slots": n, "k": k,
         "rows": rows, "mode": mode, "sparsity": extra.pop("sparsity", 0.0),
         "median_us": median, "repeat_median_us": median, "rotate_median_us": median,
         "problems": []}
    r.update(extra)
    return r


def _mtp_results(dg=True):
    res = []
    for b, n, t1 in ((16, 262144, 160.0), (96, 131072, 470.0)):
        nk = n // 1024
        res.append(_r(f"fp8-b{b}-n{nk}k-r1-scores-qfp8", "scores", b, n, 1, t1 * 0.8, k=0,
                      fraction_of_copy=0.86 if b == 16 else 0.84, scores_max_error=2e-5))
        for rows, f in ((1, 1.0), (2, 1.1), (4, 1.8)):
            res.append(_r(f"fp8-b{b}-n{nk}k-k2048-r{rows}-dense-qfp8", "dense", b, n, rows,
                          t1 * f, decode_median_us=t1 * f))
        res.append(_r(f"fp8-b{b}-n{nk}k-k2048-r2-spin0.5-qfp8", "spin", b, n, 2, t1 * 0.75,
                      sparsity=0.5, realized_sparsity=0.45, decode_median_us=t1 * 0.78,
                      speedup_vs_dense=1.1 / 0.75, decode_speedup_vs_dense=1.1 / 0.78))
    for b, n, base in ((16, 262144, 150.0), (96, 131072, 420.0), (12, 131072, 60.0)):
        nk = n // 1024
        for rows, ours in ((2, base * 1.02), (4, base * 1.5)):
            res.append(_r(f"fp8-b{b}-n{nk}k-r{rows}-scores-qfp8", "scores", b, n, rows, ours,
                          k=0, fraction_of_copy=0.8, scores_max_error=2e-5))
            if dg:
                res.append(_r(f"fp8-b{b}-n{nk}k-r{rows}-deepgemm", "deepgemm", b, n, rows,
                              base * (1.05 if rows == 2 else 2.1), k=0,
                              graph_median_us=base * (1.04 if rows == 2 else 2.0),
                              calls=1 if rows == 2 else 2, scores_max_error=3e-5))
    res.append(_r("fp8-b16-n128k-k512-r1-dense", "dense", 16, 131072, 1, 111.1 * 1.02,
                  q="bf16", k=512))
    res.append(_r("fp8-b16-n128k-k512-r1-spin0.5", "spin", 16, 131072, 1, 78.4 * 1.05,
                  q="bf16", k=512, sparsity=0.5, realized_sparsity=0.5))
    doc = {"format": "spin-bench-results", "version": 1, "results": res, "skipped": [],
           "copy": {"gbps": 4273.0, "bytes": 2**32, "median_us": 2010.0}}
    doc["deepgemm"] = ({"available": True, "version": "2.6.1"} if dg else
                       {"available": False, "reason": "--no-deepgemm"})
    return doc


def _rows(markdown, prefix):
    return [[c.strip() for c in line.strip("|").split("|")]
            for line in markdown.splitlines() if line.startswith(prefix)]


def test_the_mtp_section_states_each_minimum_and_its_verdict(bench_script):
    render = bench_script("render_benchmarks")
    md = render.markdown(_mtp_results())
    section = md.split("## MTP rows and fp8 queries (issue 26)", 1)[1]
    copy = _rows(section, "| fp8-query dense scoring alone ≥ 0.85 of copy")
    assert [(r[1], r[2], r[3]) for r in copy] == [
        ("fp8 keys, 16 × 256K", "0.86", "yes"), ("fp8 keys, 96 × 128K", "0.84", "**no**")]
    r2 = _rows(section, "| fp8 queries: dense step R=2 ≤ 1.15× R=1")
    r4 = _rows(section, "| fp8 queries: dense step R=4 ≤ 1.7× R=1")
    assert [(r[2], r[3]) for r in r2] == [("1.10×", "yes")] * 2
    assert [(r[2], r[3]) for r in r4] == [("1.80×", "**no**")] * 2
    dg2 = _rows(section, "| fp8-query scoring alone at R=2 no slower than DeepGEMM at R=2")
    assert [r[1] for r in dg2] == ["fp8 keys, 16 × 256K", "fp8 keys, 96 × 128K",
                                   "fp8 keys, 12 × 128K"]
    assert all(r[2].startswith("1.02×") and r[3] == "yes" for r in dg2)   # 1.04 / 1.02
    dg4 = _rows(section, "| fp8-query scoring alone at R=4 no slower than two DeepGEMM")
    assert all(r[2].startswith("1.33×") and r[3] == "yes" for r in dg4)   # 2.0 / 1.5
    spin = _rows(section, "| SPIN ρ=0.5 R=2 ≥ 1.35× our dense R=2, decoding steps")
    assert [(r[2], r[3]) for r in spin] == [("1.41×", "yes")] * 2
    before = _rows(section, "| bf16 queries, R=1: not slower than before by > 3%")
    assert [(r[1], r[2].split()[0], r[3]) for r in before] == [
        ("fp8-b16-n128k-k512-r1-dense", "1.020×", "yes"),
        ("fp8-b16-n128k-k512-r1-spin0.5", "1.050×", "**no**")]
    # The tables the minimums come from.
    assert "### Dense scoring alone by R, and DeepGEMM" in section
    scoring = _rows(section, "| 12 × 128K | 4 |")
    assert scoring and scoring[0][6] == "126.0 (2 calls)" and scoring[0][10] == "1.33×"
    dense = _rows(section, "| fp8 | fp8 | 96 × 128K | 2048 |")
    assert dense and dense[0][7] == "1.10×" and dense[0][8] == "1.80×"
    spin_rows = _rows(section, "| fp8 | fp8 | 16 × 256K | 2048 | 2 | 0.5 |")
    assert spin_rows and spin_rows[0][6] == "0.450" and spin_rows[0][12] == "1.41×"
    # The sections from before show bf16 queries only: the fp8-query rows
    # and R = 2 stay out of them.
    old = md.split("## MTP rows and fp8 queries (issue 26)", 1)[0]
    assert "| fp8 | 16 × 256K | 2048 | 165.0" not in old
    assert "| fp8 | 16 × 128K | 512 | 113.3" in old
    assert render.compact_table(_mtp_results())


def test_the_mtp_section_says_deepgemm_was_not_measured(bench_script):
    render = bench_script("render_benchmarks")
    md = render.markdown(_mtp_results(dg=False))
    section = md.split("## MTP rows and fp8 queries (issue 26)", 1)[1]
    assert "DeepGEMM: not measured in this run (--no-deepgemm)." in section
    dg2 = _rows(section, "| fp8-query scoring alone at R=2 no slower than DeepGEMM at R=2")
    assert all(r[2] == "not measured (--no-deepgemm)" and r[3] == "—" for r in dg2)
    # An empty run renders too (every minimum "not measured").
    empty = {"format": "spin-bench-results", "version": 1, "results": [], "skipped": [],
             "copy": {"gbps": 4273.0, "bytes": 2**32, "median_us": 2010.0}}
    assert "not measured" in render.mtp_section(empty)


def test_baseline_from_an_earlier_results_file(bench_script, tmp_path):
    render = bench_script("render_benchmarks")
    earlier = _mtp_results()
    for r in earlier["results"]:
        r["median_us"] = r["median_us"] / 1.02
    earlier["date"] = "2026-12-01"
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(earlier))
    now = tmp_path / "now.json"
    now.write_text(json.dumps(_mtp_results()))
    out = tmp_path / "out.md"
    assert render.main([str(now), "-o", str(out), "--baseline", str(path)]) == 0
    md = out.read_text()
    before = _rows(md, "| bf16 queries, R=1: not slower than before by > 3%")
    assert [(r[2].split()[0], r[3]) for r in before] == [("1.020×", "yes")] * 2
    assert "earlier.json (2026-12-01" in md


FAKE_DEEP_GEMM = '''
"""A stand-in for deep_gemm (CPU, torch ops): its paged MQA logits'
contract as bench_gpu.py calls it, asserted; e4m3 values are stood in for by
uint8 ones (torch here has no float8)."""
import torch

__version__ = "fake"
calls = []


def get_num_sms():
    return 4


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms):
    assert context_lens.dim() == 2 and context_lens.dtype == torch.int32
    assert context_lens.is_contiguous() and block_kv == 64
    return torch.zeros(num_sms + 1, 2, dtype=torch.int32)


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                             max_context_len, clean_logits=False, logits_dtype=torch.float32):
    q_fp, q_sf = q
    assert q_sf is None and q_fp.is_contiguous() and q_fp.dtype == torch.uint8
    b, next_n, h, d = q_fp.shape
    assert next_n in (1, 2) and not clean_logits and logits_dtype == torch.float32
    pages, block_kv, one, d_sf = kv_cache.shape
    assert kv_cache.dtype == torch.uint8 and one == 1 and d_sf == d + 4
    assert kv_cache.stride(1) == d_sf and kv_cache.stride(3) == 1
    assert weights.shape == (b * next_n, h) and weights.is_contiguous()
    assert context_lens.shape == (b, next_n) and schedule_meta.shape == (5, 2)
    flat = kv_cache.reshape(pages, -1)
    keys = flat[:, :block_kv * d].reshape(pages, block_kv, d).float()
    scales = flat[:, block_kv * d:].contiguous().view(torch.float32)
    logits = torch.full((b * next_n, max_context_len), float("nan"))
    for i in range(b):
        pages_i = block_table[i].long()
        k = keys[pages_i].reshape(-1, d)[:max_context_len]
        sc = scales[pages_i].reshape(-1)[:max_context_len]
        for j in range(next_n):
            s = torch.einsum("hd,nd->hn", q_fp[i, j].float(), k).relu()
            z = (s * weights[i * next_n + j].unsqueeze(-1)).sum(0) * sc
            n = int(context_lens[i, j])
            logits[i * next_n + j, :n] = z[:n]
    calls.append(next_n)
    return logits
'''


class _ScoresProgram:
    """A scoring-alone program: the f32 scores of its inputs."""
    chip = "sm_90a"
    captured_steps_left = 100

    def check(self):
        pass

    def __call__(self, x, state, request_ids=None, outputs=None):
        q, w, keys, scales = x["q"], x["w"], x["keys"], x["scales"]
        idx = x["block_table"].long()
        b, rows = q.shape[:2]
        k = keys[idx].reshape(b, -1, keys.shape[-1]).float()
        sc = scales[idx].reshape(b, -1)
        z = torch.einsum("brhd,bnd->brhn", q.float(), k).relu()
        z = (z * w.unsqueeze(-1)).sum(2) * sc.unsqueeze(1)
        pos = torch.arange(z.shape[-1])
        outputs["scores"].copy_(z.masked_fill(pos >= x["lengths"].unsqueeze(-1),
                                              float("-inf")))
        return outputs


def test_run_measures_deepgemm_beside_ours(bench_script, monkeypatch, tmp_path):
    """Bench.run over fp8-key scoring-alone configurations at R = 2 and 4
    with a stand-in deep_gemm: DeepGEMM is fed the same keys (its paged
    layout), queries, weights, lengths and block table, R = 4 as two
    next_n = 2 calls, its logits match the reference, and the results
    render."""
    import sys
    bg = bench_script("bench_gpu")
    render = bench_script("render_benchmarks")
    dg_dir = tmp_path / "DeepGEMM"
    (dg_dir / "deep_gemm").mkdir(parents=True)
    (dg_dir / "deep_gemm" / "__init__.py").write_text(FAKE_DEEP_GEMM)
    monkeypatch.delitem(sys.modules, "deep_gemm", raising=False)
    monkeypatch.setattr(torch, "float8_e4m3fn", torch.uint8, raising=False)
    monkeypatch.setattr(bg, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(bg, "capture_graphs", lambda t, p, calls: [_Graph(c) for c in calls])
    monkeypatch.setattr(bg, "copy_bandwidth",
                        lambda t, timer: {"gbps": 4000.0, "bytes": 2**32, "median_us": 2000.0})

    class Spin:
        @staticmethod
        def load(path):
            return _ScoresProgram()

    b, n = 2, 4096
    configs = [dict(name=f"fp8-b{b}-n4k-r{r}-scores-qfp8", format="fp8", q_format="fp8",
                    batch=b, slots=n, k=0, rows=r, mode="scores", sparsity=0.0, dir="x",
                    sets=["all", "mtp"]) for r in (2, 4)]
    groups = bg.plan(_index(configs), "", "mtp")
    args = bg.parse_args(["--artifacts", "x", "--out", str(tmp_path), "--deepgemm",
                          str(dg_dir), "--set", "mtp"])
    runner = object.__new__(bg.Bench)
    runner.torch, runner.spin, runner.args, runner.index = torch, Spin, args, {}
    runner.timer = _FakeTimer()
    runner.t0, runner.results, runner.skipped, runner.dead = 0.0, [], [], None
    runner.deepgemm = None
    runner.json_path = str(tmp_path / "bench-results.json")
    runner.md_path = str(tmp_path / "bench-results.md")
    runner.doc = {"format": "spin-bench-results", "version": 1, "machine": {"gpu": "cpu"},
                  "method": {"notes": []}}
    monkeypatch.setattr(bg.time, "time", lambda: 1.0)
    runner.run(groups)
    import deep_gemm
    assert deep_gemm.calls[:1] == [2] and 2 in deep_gemm.calls and 1 not in deep_gemm.calls
    doc = json.loads((tmp_path / "bench-results.json").read_text())
    assert doc["deepgemm"]["available"] and doc["deepgemm"]["version"] == "fake"
    by_name = {r["name"]: r for r in doc["results"]}
    for r in (2, 4):
        ours = by_name[f"fp8-b{b}-n4k-r{r}-scores-qfp8"]
        assert ours["problems"] == [] and ours["scores_max_error"] < 1e-5
        dg = by_name[f"fp8-b{b}-n4k-r{r}-deepgemm"]
        assert "error" not in dg, dg.get("error")
        assert dg["problems"] == [] and dg["scores_max_error"] < 1e-5
        assert dg["calls"] == (1 if r == 2 else 2) and dg["next_n"] == [2] * dg["calls"]
        assert "graph_error" in dg and dg["best_us"] == dg["median_us"]  # no CUDA graphs here
        assert dg["fraction_of_copy"] > 0 and "topk_median_us" in dg
    md = (tmp_path / "bench-results.md").read_text()
    assert "## MTP rows and fp8 queries (issue 26)" in md
    assert render.mtp_minimums(doc)


def test_runs_merge_with_the_later_one_winning(bench_script, tmp_path):
    """render_benchmarks.py FULL.json MTP.json: both runs' results, a later
    run's replacing an earlier one's of the same name, DeepGEMM's status
    from the run that measured it."""
    render = bench_script("render_benchmarks")
    full = _mtp_results(dg=False)
    full["results"] = [r for r in full["results"] if r["mode"] != "deepgemm"]
    full["results"].append(_r("fp8-b16-n64k-k512-r1-dense", "dense", 16, 65536, 1, 66.0,
                              q="bf16", k=512))
    full.update(date="A", command="bash bench/run_bench.sh", skipped=["x"])
    mtp = _mtp_results(dg=True)
    for r in mtp["results"]:
        r["median_us"] *= 0.5
    mtp.update(date="B", command="bash bench/run_bench.sh --set mtp", skipped=[])
    paths = []
    for name, doc in (("full.json", full), ("mtp.json", mtp)):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    out = tmp_path / "out.md"
    assert render.main(paths + ["-o", str(out)]) == 0
    md = out.read_text()
    assert "* Merged run: `bash bench/run_bench.sh` (A;" in md
    assert "* Merged run: `bash bench/run_bench.sh --set mtp` (B;" in md
    assert "| fp8 | 16 × 64K | 512 | 66.0" in md                 # only in the first run
    assert "| fp8 | 16 × 128K | 512 | 56.7" in md                 # the second run's (113.3 / 2)
    assert "DeepGEMM: deep_gemm 2.6.1 measured in this run" in md
    assert "* x: skipped" in md
