"""The spin Python API on the CPU: results against the independent
reference, numpy vs torch inputs, state handling and argument errors."""

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")
import spin_reference as ref  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

H, D, S, BS, K = 4, 16, 16, 16, 24


def make_batch(rng, *, batch=3, pages=32, table_width=8, rows=1):
    """Exact small-integer data (see test/python: ties are real ties)."""
    keys = rng.integers(-4, 5, size=(pages, S, D)).astype(np.float32)
    q = rng.integers(-4, 5, size=(batch, rows, H, D)).astype(np.float32)
    w = (rng.integers(-4, 5, size=(batch, rows, H)) / 4).astype(np.float32)
    table = np.stack([rng.permutation(pages)[:table_width] for _ in range(batch)]).astype(np.int32)
    return keys, q, w, table


def reference_steps(keys, q, w, table, lengths_per_step, ids, **opts):
    states = [ref.LayerState(table.shape[1] * S, BS) for _ in ids]
    out = []
    for n in lengths_per_step:
        n = np.asarray(n, dtype=np.int32)
        t, _, sp, _ = ref.spin_step(states, list(ids), 0, q, w, keys, None, table,
                                    n, n - 1, k=K, bs=BS, **opts)
        out.append((t, sp))
    return out


def run_steps(indexer, keys, q, w, table, lengths_per_step, ids, convert=lambda x: x):
    state = indexer.new_state(capacity_slots=table.shape[1] * S, max_requests=8)
    for i in ids:
        state.add(int(i))
    out = []
    for n in lengths_per_step:
        n = np.asarray(n, dtype=np.int32)
        t, sp = indexer(convert(q), convert(w), convert(keys), convert(table),
                        convert(n), convert(n - 1), state,
                        request_ids=convert(np.asarray(ids, dtype=np.int64)),
                        return_sparsity=True)
        out.append((np.asarray(t), np.asarray(sp)))
    return out, state


@pytest.mark.parametrize("sparsity,pooling,explore", [
    (0.5, "max", 0.0), (0.25, "mean", 0.0), (0.7, "top4", 0.25)])
def test_matches_reference_over_steps(rng, sparsity, pooling, explore):
    keys, q, w, table = make_batch(rng)
    lengths = [[[40 + s], [70 + s], [95 + s]] for s in range(8)]
    ids = [3, 11, 12]
    indexer = spin.Indexer(heads=H, head_dim=D, block_size=BS, topk=K,
                           sparsity=sparsity, pooling=pooling, explore=explore,
                           seed=5, key_format="f32")
    got, state = run_steps(indexer, keys, q, w, table, lengths, ids)
    want = reference_steps(keys, q, w, table, lengths, ids, sparsity=sparsity,
                           pooling=pooling, explore=explore, seed=5)
    for step, ((t, sp), (rt, rsp)) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(t, rt, err_msg=f"step {step}")
        np.testing.assert_allclose(sp, rsp, atol=1e-6, err_msg=f"step {step}")
    assert state.iteration(3) == len(lengths)


def test_bf16_numpy_float32_bits_and_torch_agree(rng):
    if torch is None:
        pytest.skip("torch is not installed")
    keys, q, w, table = make_batch(rng)
    lengths = [[[50 + s], [64 + s], [90 + s]] for s in range(4)]
    ids = [1, 2, 3]
    indexer = spin.Indexer(heads=H, head_dim=D, block_size=BS, topk=K,
                           sparsity=0.5, key_format="bf16")
    as_f32, _ = run_steps(indexer, keys, q, w, table, lengths, ids)
    bits = lambda x: spin._f32_to_bf16_bits(x) if x.dtype == np.float32 and x.ndim in (3, 4) and x.shape[-1] == D else x  # noqa: E731
    as_bits, _ = run_steps(indexer, keys, q, w, table, lengths, ids, convert=bits)

    def to_torch(x):
        t = torch.from_numpy(np.ascontiguousarray(x))
        if x.dtype == np.float32 and x.ndim in (3, 4) and x.shape[-1] == D:
            t = t.to(torch.bfloat16)
        return t
    as_torch, _ = run_steps(indexer, keys, q, w, table, lengths, ids, convert=to_torch)
    want = reference_steps(keys, q, w, table, lengths, ids, sparsity=0.5)
    for (a, _), (b, _), (c, _), (r, _) in zip(as_f32, as_bits, as_torch, want):
        np.testing.assert_array_equal(a, r)
        np.testing.assert_array_equal(b, r)
        np.testing.assert_array_equal(c, r)


def test_fp8_keys_with_scales(rng):
    keys, q, w, table = make_batch(rng)
    fp8_bits = {v: b for b in range(256) for v in [float(ref.fp8_e4m3_to_f32(np.array([b], np.uint8))[0])]
                if b < 0x80 or v != 0.0}
    key_bits = np.vectorize(lambda v: fp8_bits[float(v)])(keys).astype(np.uint8)
    scales = (2.0 ** rng.integers(-2, 3, size=keys.shape[:2])).astype(np.float32)
    indexer = spin.Indexer(heads=H, head_dim=D, block_size=BS, topk=K,
                           sparsity=0.5, key_format="fp8")
    state = indexer.new_state(capacity_slots=table.shape[1] * S, max_requests=4)
    states = [ref.LayerState(table.shape[1] * S, BS) for _ in range(3)]
    for i in (0, 1, 2):
        state.add(i)
    for step in range(3):
        n = np.array([[30 + step], [60 + step], [80 + step]], np.int32)
        t = indexer(q, w, key_bits, table, n, n - 1, state, scales=scales,
                    request_ids=np.arange(3, dtype=np.int64))
        rt, _, _, _ = ref.spin_step(states, [0, 1, 2], 0, q, w, keys, scales, table,
                                    n, n - 1, k=K, bs=BS, sparsity=0.5)
        np.testing.assert_array_equal(t, rt, err_msg=f"step {step}")


def test_mtp_commit_and_reset(rng):
    keys, q, w, table = make_batch(rng, rows=3)
    indexer = spin.Indexer(heads=H, head_dim=D, block_size=BS, topk=K,
                           sparsity=0.5, rows=3, key_format="f32")
    state = indexer.new_state(capacity_slots=table.shape[1] * S, max_requests=4)
    states = [ref.LayerState(table.shape[1] * S, BS) for _ in range(3)]
    for i in range(3):
        state.add(i)
    ids = np.arange(3, dtype=np.int64)
    accepted = None
    for step in range(5):
        base = np.array([40, 61, 77]) + 2 * step
        n = (base[:, None] + np.arange(3)[None, :]).astype(np.int32)
        if step:
            accepted = rng.integers(0, 3, size=3)
            for i in range(3):
                state.commit(i, int(accepted[i]))
        if step == 3:
            state.reset(1)
            ref.reset(states[1])
            accepted[1] = -1
        t = indexer(q, w, keys, table, n, n - 1, state, request_ids=ids)
        rt, _, _, _ = ref.spin_step(states, [0, 1, 2], 0, q, w, keys, None, table, n, n - 1,
                                    k=K, bs=BS, sparsity=0.5,
                                    accepted=None if accepted is None else [int(a) for a in accepted])
        np.testing.assert_array_equal(t, rt, err_msg=f"step {step}")
    # The next step needs the commit of the last one.
    with pytest.raises(ValueError, match="commit"):
        indexer(q, w, keys, table, n + 2, n + 1, state, request_ids=ids)


def test_argument_errors_name_the_argument(rng):
    keys, q, w, table = make_batch(rng)
    indexer = spin.Indexer(heads=H, head_dim=D, block_size=BS, topk=K, key_format="f32")
    state = indexer.new_state(capacity_slots=table.shape[1] * S, max_requests=4)
    state.add(0)
    n = np.array([[30]], np.int32)
    args = dict(q=q[:1], w=w[:1], keys=keys, block_table=table[:1], lengths=n, positions=n - 1)

    def call(**over):
        a = {**args, **over}
        return indexer(a["q"], a["w"], a["keys"], a["block_table"], a["lengths"],
                       a["positions"], over.get("state", state),
                       request_ids=over.get("request_ids", np.array([0], np.int64)))

    with pytest.raises(TypeError, match="w has dtype float64, expected float32"):
        call(w=w[:1].astype(np.float64))
    with pytest.raises(ValueError, match="q must have rank 4"):
        call(q=q[0])
    with pytest.raises(ValueError, match="keys is not C-contiguous"):
        call(keys=np.asfortranarray(keys))
    with pytest.raises(ValueError, match=r"q has shape \(1, 1, 4, 8\)"):
        call(q=np.ascontiguousarray(q[:1, :, :, :8]))
    with pytest.raises(TypeError, match="block_table must be a numpy array"):
        call(block_table=table[:1].tolist())
    with pytest.raises(ValueError, match="request 9"):
        call(request_ids=np.array([9], np.int64))
    with pytest.raises(ValueError, match=r"block_table\[0\]\[0\] = 99"):
        bad = table[:1].copy()
        bad[0, 0] = 99
        call(block_table=bad)
    with pytest.raises(TypeError, match="state must be a spin.State"):
        call(state=object())
    if torch is not None:
        with pytest.raises(ValueError, match="w is on meta"):
            call(w=torch.empty((1, 1, H), device="meta"))
        with pytest.raises(ValueError, match="q is not contiguous"):
            call(q=torch.from_numpy(q[:1]).transpose(2, 3).contiguous().transpose(2, 3))
    state.close()
    with pytest.raises(RuntimeError, match="closed"):
        call()


def test_bad_configuration_is_rejected():
    with pytest.raises(ValueError, match="sparsity must be in"):
        spin.Indexer(sparsity=1.5)
    with pytest.raises(ValueError, match="pooling must be one of"):
        spin.Indexer(pooling="median")
    with pytest.raises(ValueError, match="key_format must be one of"):
        spin.Indexer(key_format="int4")
    with pytest.raises(ValueError, match="must divide page_size"):
        spin.Indexer(block_size=48, page_size=64)
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda' or 'cuda:N', got 'tpu'"):
        spin.Indexer(device="tpu")
    with pytest.raises(ValueError, match="chips is only taken with device='cuda'"):
        spin.Indexer(chips=["sm_90a"])
    with pytest.raises(ValueError, match="sm_count is only taken with device='cuda'"):
        spin.Indexer(sm_count=148)
    with pytest.raises(ValueError, match="capacity_slots must be a positive"):
        spin.Indexer(key_format="f32").new_state(capacity_slots=0)


def test_programs_are_compiled_once_per_layer_and_width(rng):
    indexer = spin.Indexer(heads=H, head_dim=D, block_size=BS, topk=K, key_format="f32")
    assert indexer.program(0, 6) is indexer.program(0, 6)
    assert indexer.program(1, 6) is not indexer.program(0, 6)
    assert "spin.layer_state" in indexer.program(0, 6).graph_ir
    assert "spin.dense_indexer" not in indexer.program(0, 6).graph_ir


def test_compile_user_graph():
    text = open(__file__.replace("python/tests/test_api.py", "examples/glm5-indexer.mlir")).read()
    program = spin.compile(text, "glm5_indexer_layer", {"sparsity": 0.5, "explore": 0.05})
    roles = [a["role"] for a in program.signature]
    assert roles.count("state") == 3 and "positions" in roles and roles[-1] == "output"
    with pytest.raises(ValueError, match="option 'sparsity' must be in"):
        spin.compile(text, "glm5_indexer_layer", {"sparsity": 2})
    with pytest.raises(ValueError, match="no function @nope"):
        spin.compile(text, "nope")


def test_readme_example_runs_as_written():
    """The README's Python example, extracted and executed."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "README.md")).read()
    start = text.index("```python\nimport numpy as np\nimport spin") + len("```python\n")
    code = text[start:text.index("```", start)]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(spin.__file__)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "3 (2, 1, 32) [0.5 0.5]" in done.stdout


def test_disk_cache_detects_corrupt_and_stale_entries(tmp_path, monkeypatch):
    import glob
    monkeypatch.setenv("SPIN_CACHE_DIR", str(tmp_path))
    text = open(__file__.replace("python/tests/test_api.py", "examples/glm5-indexer.mlir")).read()
    options = {"sparsity": 0.3, "seed": 12345}
    spin._spin.clear_memory_cache()
    first = spin.compile(text, "glm5_indexer_layer", options)
    assert not first.from_disk_cache
    entries = glob.glob(str(tmp_path / "*.spincache"))
    assert len(entries) == 1
    spin._spin.clear_memory_cache()
    again = spin.compile(text, "glm5_indexer_layer", options)
    assert again.from_disk_cache and again.signature == first.signature
    assert again.graph_ir == first.graph_ir
    # A flipped byte in the payload: detected, rebuilt, rewritten.
    data = bytearray(open(entries[0], "rb").read())
    data[-100] ^= 0x20
    open(entries[0], "wb").write(bytes(data))
    spin._spin.clear_memory_cache()
    rebuilt = spin.compile(text, "glm5_indexer_layer", options)
    assert not rebuilt.from_disk_cache and rebuilt.signature == first.signature
    spin._spin.clear_memory_cache()
    assert spin.compile(text, "glm5_indexer_layer", options).from_disk_cache
    # A truncated entry and one from another cache version: rebuilt too.
    open(entries[0], "wb").write(bytes(data[:50]))
    spin._spin.clear_memory_cache()
    assert not spin.compile(text, "glm5_indexer_layer", options).from_disk_cache
    text_entry = open(entries[0], "rb").read().replace(b"spin-cpu-cache 2", b"spin-cpu-cache 0", 1)
    open(entries[0], "wb").write(text_entry)
    spin._spin.clear_memory_cache()
    assert not spin.compile(text, "glm5_indexer_layer", options).from_disk_cache
    # Different options are a different entry.
    spin.compile(text, "glm5_indexer_layer", {"sparsity": 0.31, "seed": 12345})
    assert len(glob.glob(str(tmp_path / "*.spincache"))) == 2


def test_multi_layer_mtp_graph_matches_reference(rng):
    """The shipped three-layer MTP graph (shrunk), compiled with spin.compile
    and run with Program.run, against the reference layer by layer."""
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "examples", "deepseek-v4-flash-multilayer.mlir")).read()
    B, R, Hh, Dd, MB, KK, P = 2, 4, 4, 16, 8, 32, 16
    for old, new in (("8x4x64x128xbf16", f"{B}x{R}x{Hh}x{Dd}xbf16"), ("8x4x64xf32", f"{B}x{R}x{Hh}xf32"),
                     ("?x64x128xf8E4M3FN", f"?x64x{Dd}xf8E4M3FN"), ("8x1024xi32", f"{B}x{MB}xi32"),
                     ("8x4xi32", f"{B}x{R}xi32"), ("8x4x65536xf32", f"{B}x{R}x{MB * 64}xf32"),
                     ("8x4x512xi32", f"{B}x{R}x{KK}xi32"), ("{k = 512 : i64}", f"{{k = {KK} : i64}}")):
        text = text.replace(old, new)
    program = spin.compile(text, "three_indexer_layers", {"sparsity": 0.5, "explore": 0.25, "seed": 3})
    names = [a["name"] for a in program.signature if a["role"] == "output"]
    assert names == ["topk", "topk_1", "topk_2", "sparsity", "sparsity_1", "sparsity_2"]
    state = spin.new_state(capacity_slots=MB * 64, layers=3, max_requests=4, rows=R, block_size=64)
    fp8_bits = {float(ref.fp8_e4m3_to_f32(np.array([b], np.uint8))[0]): b for b in range(0x100) if b != 0x80}
    keys = [rng.integers(-4, 5, size=(P, 64, Dd)).astype(np.float32) for _ in range(3)]
    scales = [(2.0 ** rng.integers(-1, 2, size=(P, 64))).astype(np.float32) for _ in range(3)]
    key_bits = [np.vectorize(lambda v: fp8_bits[float(v)])(k).astype(np.uint8) for k in keys]
    table = np.stack([rng.permutation(P)[:MB] for _ in range(B)]).astype(np.int32)
    ids = np.array([4, 9], np.int64)
    for i in ids:
        state.add(int(i))
    ref_states = [[ref.LayerState(MB * 64, 64) for _ in ids] for _ in range(3)]
    accepted = None
    for step in range(4):
        n = (np.array([[200], [330]]) + 3 * step + np.arange(R)[None, :]).astype(np.int32)
        qs = [rng.integers(-4, 5, size=(B, R, Hh, Dd)).astype(np.float32) for _ in range(3)]
        ws = [(rng.integers(-4, 5, size=(B, R, Hh)) / 4).astype(np.float32) for _ in range(3)]
        if step:
            accepted = [int(a) for a in rng.integers(0, R, size=B)]
            for i, a in zip(ids, accepted):
                state.commit(int(i), a)
        inputs = dict(block_table=table, lengths=n, positions=n - 1, request_ids=ids)
        for layer, suffix in enumerate(["", "_1", "_2"]):
            inputs.update({f"q{suffix}": qs[layer], f"w{suffix}": ws[layer],
                           f"keys{suffix}": key_bits[layer], f"scales{suffix}": scales[layer]})
        out = program.run(state, **inputs)
        for layer, suffix in enumerate(["", "_1", "_2"]):
            rt, _, rsp, _ = ref.spin_step(ref_states[layer], [int(i) for i in ids], layer, qs[layer],
                                          ws[layer], keys[layer], scales[layer], table, n, n - 1,
                                          k=KK, bs=64, sparsity=0.5, explore=0.25, seed=3,
                                          accepted=accepted)
            np.testing.assert_array_equal(out[f"topk{suffix}"], rt, err_msg=f"step {step} layer {layer}")
            np.testing.assert_allclose(out[f"sparsity{suffix}"], rsp, atol=1e-6)


def test_program_run_takes_a_reset_input(rng):
    """A graph compiled with reset-input takes a [B] i1 'reset' input (bool or
    0/1 uint8); other values and dtypes are refused with a clear error."""
    text = spin._spin.build_indexer_graph(heads=H, head_dim=D, rows=1, topk=K,
                                          page_size=S, max_pages=8, key_format="f32",
                                          layer=0)
    program = spin.compile(text, "indexer_layer", {"block_size": BS, "reset_input": True,
                                                   "sparsity": 0.5})
    assert "reset" in [a["name"] for a in program.signature]
    keys, q, w, table = make_batch(rng, batch=2)
    state = spin.new_state(capacity_slots=8 * S, max_requests=2, block_size=BS)
    for i in (0, 1):
        state.add(i)
    n = np.array([[60], [90]], np.int32)
    args = dict(q=q[:2], w=w[:2], keys=keys, block_table=table[:2], lengths=n,
                positions=n - 1, request_ids=np.array([0, 1], np.int64))
    program.run(state, reset=np.array([False, False]), **args)
    program.run(state, reset=np.array([False, False]), **args)
    assert state.iteration(0) == 2
    program.run(state, reset=np.array([0, 1], np.uint8), **args)
    assert state.iteration(0) == 3 and state.iteration(1) == 1
    with pytest.raises(ValueError, match="reset must hold only 0 and 1"):
        program.run(state, reset=np.array([0, 2], np.uint8), **args)
    with pytest.raises(TypeError, match="reset has dtype float32, expected bool"):
        program.run(state, reset=np.zeros(2, np.float32), **args)


def test_a_graph_returning_dense_scores_names_them_scores(rng):
    """A graph may return the dense indexer's scores: the result is named
    "scores" and holds z for i < N and -inf past each row's length."""
    B, H, Dd, P, MB = 2, 4, 16, 6, 2
    text = f"""
func.func @scores_only(%q: tensor<{B}x1x{H}x{Dd}xf32>, %w: tensor<{B}x1x{H}xf32>,
                       %keys: tensor<?x64x{Dd}xf32>, %bt: tensor<{B}x{MB}xi32>,
                       %n: tensor<{B}x1xi32>) -> tensor<{B}x1x{MB * 64}xf32> {{
  %z = spin.dense_indexer q(%q : tensor<{B}x1x{H}x{Dd}xf32>) w(%w : tensor<{B}x1x{H}xf32>)
      keys(%keys : tensor<?x64x{Dd}xf32>) block_table(%bt : tensor<{B}x{MB}xi32>)
      lengths(%n : tensor<{B}x1xi32>) -> tensor<{B}x1x{MB * 64}xf32>
  return %z : tensor<{B}x1x{MB * 64}xf32>
}}"""
    program = spin.compile(text, "scores_only", {})
    assert [a["name"] for a in program.signature if a["role"] == "output"] == ["scores"]
    q = rng.integers(-3, 4, size=(B, 1, H, Dd)).astype(np.float32)
    w = rng.integers(-2, 3, size=(B, 1, H)).astype(np.float32)
    keys = rng.integers(-3, 4, size=(P, 64, Dd)).astype(np.float32)
    bt = np.stack([rng.permutation(P)[:MB] for _ in range(B)]).astype(np.int32)
    n = np.array([[100], [0]], np.int32)
    state = spin.new_state(capacity_slots=MB * 64, layers=1, max_requests=1)
    z = program.run(state, q=q, w=w, keys=keys, block_table=bt, lengths=n)["scores"]
    want = ref.dense_scores(q, w, keys, None, bt, n)
    assert z.shape == want.shape and np.array_equal(z, want)
    assert np.all(np.isneginf(z[0, 0, 100:])) and np.all(np.isneginf(z[1]))


def test_program_run_sizes_run_time_rows_from_the_lengths(rng):
    """A graph with a run-time row count: Program.run sizes topk [B, R, K]
    and sparsity [B, R] from the lengths' rows, not from the batch (which
    gave [B, B, K]: too small when B < R, so the step wrote past it)."""
    R = 2
    static = spin._spin.build_indexer_graph(heads=2, head_dim=4, rows=R, topk=4, page_size=16,
                                            max_pages=4, key_format="f32", layer=0)
    dynamic = static
    for old, new in (("?x2x2x4xf32", "?x?x2x4xf32"), ("?x2x2xf32", "?x?x2xf32"),
                     ("?x2xi32", "?x?xi32"), ("?x2x64xf32", "?x?x64xf32"),
                     ("?x2x4xi32", "?x?x4xi32")):
        dynamic = dynamic.replace(old, new)
    options = {"sparsity": 0.5, "block_size": 16}
    program = spin.compile(dynamic, "indexer_layer", options)
    assert [a["shape"] for a in program.signature if a["role"] == "output"] == [[-1, -1, 4], [-1, -1]]
    reference = spin.compile(static, "indexer_layer", options)
    keys = rng.standard_normal((8, 16, 4)).astype(np.float32)
    for B in (1, 3):
        q = rng.standard_normal((B, R, 2, 4)).astype(np.float32)
        w = rng.standard_normal((B, R, 2)).astype(np.float32)
        table = np.stack([rng.permutation(8)[:4] for _ in range(B)]).astype(np.int32)
        n = np.tile(np.array([40, 41], np.int32), (B, 1))
        args = dict(q=q, w=w, keys=keys, block_table=table, lengths=n, positions=n - 1,
                    request_ids=np.arange(B, dtype=np.int64))
        outs = []
        for p in (program, reference):
            state = spin.new_state(capacity_slots=64, max_requests=B, rows=R, block_size=16)
            for i in range(B):
                state.add(i)
            outs.append(p.run(state, **args))
        assert outs[0]["topk"].shape == (B, R, 4) and outs[0]["sparsity"].shape == (B, R)
        np.testing.assert_array_equal(outs[0]["topk"], outs[1]["topk"])
        np.testing.assert_array_equal(outs[0]["sparsity"], outs[1]["sparsity"])


def test_program_run_refuses_output_sizes_it_cannot_derive():
    """A run-time output size that neither the batch, the lengths' rows nor
    the block table gives is an error naming the output and the dim."""
    lengths = np.zeros((2, 3), np.int32)
    arrays = {"lengths": (lengths, "i32")}
    assert spin._output_shape("topk_1", [-1, -1, 8], arrays, 2) == [2, 3, 8]
    with pytest.raises(ValueError, match=r"output 'topk' has shape \[\?, \?, \?\]: "
                                         r"Program.run cannot tell its run-time size in dim 2"):
        spin._output_shape("topk", [-1, -1, -1], arrays, 2)
