"""The serving engines' fused fp8 key pages (docs/GPU-ABI.md, "Fused fp8 key
pages") without a GPU: the layout helpers (fuse, split, sizes) on numpy and
torch, the CPU Indexer on fused pages against separate keys and scales
(the CPU splits them), the compiled programs' single ``kv_cache`` input,
the engines' other conventions (int64 positions, 1-D lengths), and the
errors. test_fused_pages_cuda.py runs the kernels that read the pages in
place."""

import json
import os

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_compiler = pytest.mark.skipif(not spin.has_compiler,
                                    reason="spin built without the compiler")
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def fp8_keys(rng, pages, page_size, head_dim):
    """Random e4m3 bit patterns (no NaN) and random f32 scales."""
    keys = rng.integers(0, 256, size=(pages, page_size, head_dim), dtype=np.uint8)
    keys[(keys & 0x7F) == 0x7F] = 0x38
    return keys, rng.random((pages, page_size), dtype=np.float32) + 0.25


@pytest.mark.parametrize("pages,page_size,head_dim", [(1, 4, 64), (7, 16, 64), (3, 64, 128)])
def test_fused_pages_hold_each_page_keys_then_scales(rng, pages, page_size, head_dim):
    keys, scales = fp8_keys(rng, pages, page_size, head_dim)
    fused = spin.fuse_fp8_pages(keys, scales)
    page = spin.fp8_page_bytes(page_size, head_dim)
    assert page == page_size * (head_dim + 4)
    assert fused.shape == (pages, page) and fused.dtype == np.uint8
    for p in range(pages):  # the layout, byte by byte
        assert np.array_equal(fused[p, :page_size * head_dim], keys[p].reshape(-1))
        assert np.array_equal(fused[p, page_size * head_dim:],
                              scales[p].view(np.uint8).reshape(-1))
    for shape in ((pages, page), (pages, page_size, 1, head_dim + 4)):
        k, s = spin.split_fp8_pages(fused.reshape(shape), page_size, head_dim)
        assert np.array_equal(k, keys) and np.array_equal(s, scales)


@needs_torch
def test_torch_splits_are_views_of_the_cache(rng):
    keys, scales = fp8_keys(rng, 5, 16, 64)
    fused = spin.fuse_fp8_pages(torch.from_numpy(keys), torch.from_numpy(scales))
    assert fused.dtype == torch.uint8 and tuple(fused.shape) == (5, 16 * 68)
    k, s = spin.split_fp8_pages(fused.view(5, 16, 1, 68), 16, 64)
    assert k.data_ptr() == fused.data_ptr()
    assert s.data_ptr() == fused.data_ptr() + 16 * 64
    assert np.array_equal(k.numpy(), keys) and np.array_equal(s.numpy(), scales)
    s[2, 3] = 7.0  # a view: the cache changes
    assert spin.split_fp8_pages(fused, 16, 64)[1][2, 3] == 7.0


def test_fused_pages_errors_name_the_value():
    with pytest.raises(ValueError, match="page_size must be a positive integer, got 0"):
        spin.fp8_page_bytes(0, 64)
    with pytest.raises(ValueError, match="head_dim must be a positive integer, got True"):
        spin.fp8_page_bytes(16, True)
    with pytest.raises(TypeError, match="kv_cache has dtype float32, expected uint8"):
        spin.split_fp8_pages(np.zeros((2, 272), np.float32), 16, 64)
    with pytest.raises(ValueError, match="kv_cache has shape \\(2, 1000\\): expected "
                                         "\\[pages, ...\\] with 1088 bytes a page"):
        spin.split_fp8_pages(np.zeros((2, 1000), np.uint8), 16, 64)
    with pytest.raises(ValueError, match="kv_cache has shape \\(1088,\\)"):
        spin.split_fp8_pages(np.zeros(1088, np.uint8), 16, 64)
    with pytest.raises(ValueError, match="kv_cache is not contiguous"):
        spin.split_fp8_pages(np.zeros((4, 2176), np.uint8)[:, ::2], 16, 64)
    with pytest.raises(ValueError, match="must be \\[pages, page_size, head_dim\\] and "
                                         "\\[pages, page_size\\]"):
        spin.fuse_fp8_pages(np.zeros((2, 16, 64), np.uint8), np.zeros((2, 8), np.float32))
    with pytest.raises(TypeError, match="keys must be uint8 and scales float32"):
        spin.fuse_fp8_pages(np.zeros((2, 16, 64), np.float32), np.zeros((2, 16), np.float32))
    with pytest.raises(ValueError, match="key_format must be 'fp8', got 'bf16'"):
        spin.Indexer(device="cpu", fused_fp8_pages=True)
    with pytest.raises(TypeError, match="fused_fp8_pages must be a bool"):
        spin.Indexer(device="cpu", key_format="fp8", fused_fp8_pages=1)


@needs_compiler
@pytest.mark.parametrize("dense,rows", [(True, 1), (False, 1), (False, 2)])
def test_cpu_steps_on_fused_pages_equal_separate_keys(rng, dense, rows):
    H, D, S, BS, MB, K, B = 8, 64, 16, 16, 6, 12, 3
    options = dict(heads=H, head_dim=D, block_size=BS, page_size=S, topk=K, sparsity=0.5,
                   explore=0.25, seed=4, rows=rows, key_format="fp8", dense=dense)
    fused_ix = spin.Indexer(fused_fp8_pages=True, **options)
    plain_ix = spin.Indexer(**options)
    states = [ix.new_state(MB * S, max_requests=4) for ix in (fused_ix, plain_ix)]
    ids = np.array([3, 8, 11], np.int64)
    for state in states:
        for i in ids:
            state.add(int(i))
    n = rng.integers(1, MB * S // 2, size=B)
    for step in range(8):
        keys, scales = fp8_keys(rng, 2 * MB, S, D)
        fused = spin.fuse_fp8_pages(keys, scales).reshape(2 * MB, S, 1, D + 4)
        table = np.stack([rng.choice(2 * MB, MB, replace=False) for _ in range(B)]).astype(np.int32)
        q = rng.integers(-4, 5, size=(B, rows, H, D)).astype(np.float32)
        w = (rng.integers(-4, 5, size=(B, rows, H)) / 4).astype(np.float32)
        lengths = np.minimum(n[:, None] + np.arange(rows), MB * S).astype(np.int32)
        got = fused_ix(q, w, fused, table, lengths, lengths - 1, states[0], request_ids=ids,
                       return_sparsity=True)
        want = plain_ix(q, w, keys, table, lengths, lengths - 1, states[1], request_ids=ids,
                        scales=scales, return_sparsity=True)
        for g, x in zip(got, want):
            assert np.array_equal(g, x), f"step {step} differs"
        if not dense and rows > 1:
            for state in states:
                for i in ids:
                    state.commit(int(i), 1)
        n = np.minimum(n + rows, MB * S - rows)
    with pytest.raises(ValueError, match="pass the fused kv_cache as keys, no scales"):
        fused_ix(q, w, fused, table, lengths, lengths - 1, states[0], request_ids=ids,
                 scales=scales)


@needs_compiler
def test_fused_programs_take_one_kv_cache_input(tmp_path):
    indexer = spin.Indexer(heads=8, head_dim=64, block_size=16, page_size=64, topk=32,
                           rows=2, key_format="fp8", fused_fp8_pages=True, device="cuda",
                           chips=["sm_90a"], cache_dir=str(tmp_path), max_pages=8,
                           batch_sizes=[4])
    directory = indexer.artifact(0, 8, 4)
    manifest = spin.read_manifest(directory)
    inputs = {a["name"]: a for a in manifest["arguments"] if a["role"] == "input"}
    assert "keys" not in inputs and "scales" not in inputs
    assert inputs["kv_cache"]["dtype"] == "i8"
    assert inputs["kv_cache"]["shape"] == [-1, spin.fp8_page_bytes(64, 64)]
    # The page count the kernels bound their page lookups by is the cache's.
    with open(os.path.join(directory, "manifest.json")) as f:
        raw = json.load(f)
    dims = [arg for launch in raw["launches"] for arg in launch["args"]
            if arg["kind"] == "dim"]
    names = [raw["arguments"][d["argument"]]["name"] for d in dims]
    assert "kv_cache" in names
    plain = spin.Indexer(heads=8, head_dim=64, block_size=16, page_size=64, topk=32, rows=2,
                         key_format="fp8", device="cuda", chips=["sm_90a"],
                         cache_dir=str(tmp_path), max_pages=8, batch_sizes=[4])
    assert plain.artifact(0, 8, 4) != indexer.artifact(0, 8, 4)


@needs_torch
@needs_compiler
def test_engine_positions_and_lengths_become_the_rows_own():
    """int64 positions (one per token, or [B, R]) and 1-D sequence lengths,
    as engines keep them, become the program's int32 [B, R]: row r of a
    request of length L (its R rows' tokens included) sees L - R + 1 + r
    slots; a position past int32 stays out of range instead of wrapping."""
    indexer = spin.Indexer(heads=8, head_dim=64, block_size=16, topk=8, rows=3,
                           key_format="fp8", fused_fp8_pages=True)
    B, R = 2, 3
    positions = torch.tensor([10, 11, 12, 2**33, 5, 6], dtype=torch.int64)
    lengths = torch.tensor([13, 7], dtype=torch.int64)
    kv = torch.zeros((4, 16, 1, 68), dtype=torch.uint8)
    out = indexer._engine_inputs({"positions": positions, "lengths": lengths,
                                  "kv_cache": kv}, B)
    assert out["positions"].dtype == torch.int32
    assert out["positions"].tolist() == [[10, 11, 12], [2**31 - 1, 5, 6]]
    assert out["lengths"].dtype == torch.int32
    assert out["lengths"].tolist() == [[11, 12, 13], [5, 6, 7]]
    assert tuple(out["kv_cache"].shape) == (4, 1088)
    assert out["kv_cache"].data_ptr() == kv.data_ptr()
    two_d = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int32)
    same = indexer._engine_inputs({"positions": two_d, "lengths": two_d}, B)
    assert same["positions"] is two_d and same["lengths"] is two_d
    assert R == indexer.rows
