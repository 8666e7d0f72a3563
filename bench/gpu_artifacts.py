#!/usr/bin/python3
#===- bench/gpu_artifacts.py - the GPU correctness check's artifacts ------===#
#
# Writes one small indexer graph per configuration of the H200 correctness
# check (dense spin.dense_indexer + spin.topk, written like
# examples/deepseek-v4-flash-indexer.mlir, static shapes) and compiles it with
# build/bin/spin-compile for sm_90a into gpu-artifacts/<name>/, dense as
# written or with --sparsify="..." (SPIN), plus gpu-artifacts/index.json: the
# shapes, options and test plan bench/gpu_check.py needs on the GPU machine.
# Runs here (the compiler; no GPU).
#
# The matrix: dense and SPIN for each key format (bf16; f16 with f16 or bf16
# queries; fp8 e4m3 + f32 scales with bf16 or f16 queries), H in {8, 64},
# Dh in {64, 128}, pages of 64 and 16 slots with SPIN blocks of 64 and 16,
# batch 1, 3 and 16, K in {16, 512, 2048}, SPIN sparsity 0 / 0.2 / 0.5 / 0.9, exploration
# 0 and 0.25 with seeds >= 2^63, pooling max / mean / top4, reset-input on one
# configuration; MTP (2, 3 and 4 query rows, union / row-0 masks, prefix /
# row-0 updates, a host reset and the reset input, bf16 / f16 / fp8 keys);
# rows of 56K and 64K slots, whose top-K spans a cluster of 7 or 8 CTAs (K =
# 1024 and 2048: merge ranks), two of them with tied scores (the "ties"
# scheme: keys drawn from a few vectors);
# three dense graphs that return their scores too (compared entry by entry,
# -inf past each row's length);
# the "exact" input scheme everywhere except one noninteger dense and one
# noninteger SPIN configuration per key format, and one noninteger MTP one;
# multi-layer graphs (ml3-*: 3 identical SPIN layers with exploration, one
# single-row, one MTP, one noninteger) whose layers launch shared kernels,
# the select kernel taking the layer (for the exploration hash) as an i32.
#
# A configuration spin-compile rejects is NOT dropped silently: it stays in
# index.json with "compiled": false and the exact command and error, is
# listed at the end, and gpu_check.py reports it as SKIP.
#
#   bench/gpu_artifacts.py              (re)build gpu-artifacts/
#   bench/gpu_artifacts.py --list       print the configurations only
#   bench/gpu_artifacts.py --only fp8   a subset (index.json lists only it)
#
#===----------------------------------------------------------------------===#

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    from spin import abi  # the compiler-runtime contract's names
except ImportError:  # not installed: the build's package (scripts/dev build)
    sys.path.insert(0, os.path.join(os.environ.get("SPIN_BUILD_DIR", os.path.join(ROOT, "build")),
                                    "python"))
    try:
        from spin import abi
    except ImportError as e:
        sys.exit(f"error: {os.path.basename(__file__)} needs the spin Python package of a "
                 f"build (scripts/dev build; SPIN_BUILD_DIR selects it) and Debian's "
                 f"python3-numpy: run it with /usr/bin/python3 ({e})")

FUNCTION = "indexer"

# fp8 keys need Dh % 64 == 0, bf16/f16 Dh % 32 == 0; H % 8 == 0 everywhere.
MLIR_TYPES = {"bf16": "bf16", "f16": "f16", "fp8": "f8E4M3FN"}
MANIFEST_DTYPES = {"bf16": "bf16", "f16": "f16", "fp8": "fp8e4m3"}

# Exploration seeds (all >= 2^63: the hash reads them as uint64).
SEED_A = 2 ** 63 + 0x5EED_0001_2345
SEED_B = 2 ** 64 - 0x1234_5677


def C(name, mode, fmt, H, Dh, S, MB, B, K, **kw):
    """One configuration. S: page size, MB: block-table width (pages per
    request), so the capacity is MB * S slots."""
    c = dict(name=name, mode=mode, key_format=fmt,
             q_format=kw.pop("q", "bf16"), heads=H, head_dim=Dh,
             page_size=S, table_pages=MB, batch=B, topk=K,
             scheme=kw.pop("scheme", "exact"),
             steps=kw.pop("steps", 10 if mode == "spin" else 3),
             extra_requests=kw.pop("extra", 0),
             bad_table=kw.pop("bad_table", None),
             zero_length=kw.pop("zero_length", False),
             extreme_ids=kw.pop("extreme_ids", False),
             return_scores=kw.pop("scores", False),
             sm_count=kw.pop("sm_count", None),
             no_wgmma=kw.pop("no_wgmma", False),
             distinct_keys=kw.pop("distinct", None))
    c["rows"] = kw.pop("rows", 1)
    c["layers"] = kw.pop("layers", 1)
    if mode == "spin":
        c.update(block_size=kw.pop("bs"), sparsity=kw.pop("sp"),
                 explore=kw.pop("x", 0.0), seed=kw.pop("seed", 0),
                 pooling=kw.pop("pool", "max"), ema_decay=0.5,
                 reset_input=kw.pop("reset_input", False),
                 host_reset=kw.pop("host_reset", False),
                 mtp_mask=kw.pop("mtp_mask", "union"),
                 mtp_update=kw.pop("mtp_update", "prefix"))
    if kw:
        raise ValueError(f"{name}: unknown options {sorted(kw)}")
    if c["return_scores"] and mode != "dense":
        raise ValueError(f"{name}: only a dense graph returns its scores")
    if c["key_format"] == "bf16" and c["q_format"] != "bf16":
        raise ValueError(f"{name}: bf16 keys need bf16 queries")
    if c["q_format"] == "fp8" and c["key_format"] != "fp8":
        raise ValueError(f"{name}: fp8 queries need fp8 keys")
    if c["layers"] > 1 and (mode != "spin" or not c["explore"] > 0 or c["bad_table"]
                            or c["return_scores"]):
        # gpu_check.py checks the bad-table step and returned scores on
        # single-layer graphs only, and needs exploration to tell the layers
        # apart in the select kernel.
        raise ValueError(f"{name}: a multi-layer configuration is SPIN with exploration, "
                         f"without a bad-table step or scores")
    c["pages"] = MB + (8 if B > 3 else 3)   # physical pages in the cache
    c["capacity"] = MB * S
    return c


def all_configs():
    d, s = "dense", "spin"
    cs = [
        # --- dense, exact inputs -------------------------------------------
        C("dense-bf16-h8-d64-p64-b1-k16", d, "bf16", 8, 64, 64, 8, 1, 16),
        C("dense-bf16-h64-d128-p64-b16-k512", d, "bf16", 64, 128, 64, 64, 16, 512,
          bad_table="too-large", zero_length=True),
        C("dense-bf16-h8-d128-p16-b3-k512", d, "bf16", 8, 128, 16, 128, 3, 512),
        C("dense-f16-h8-d64-p16-b3-k16-qf16", d, "f16", 8, 64, 16, 24, 3, 16, q="f16"),
        C("dense-f16-h64-d128-p64-b16-k512-qbf16", d, "f16", 64, 128, 64, 64, 16, 512),
        C("dense-f16-h64-d64-p64-b1-k512-qf16", d, "f16", 64, 64, 64, 32, 1, 512, q="f16"),
        C("dense-fp8-h64-d128-p64-b16-k512-qbf16", d, "fp8", 64, 128, 64, 64, 16, 512,
          bad_table="too-large"),
        C("dense-fp8-h8-d64-p16-b3-k16-qf16", d, "fp8", 8, 64, 16, 24, 3, 16, q="f16",
          bad_table="negative"),
        C("dense-fp8-h8-d128-p64-b1-k16-qbf16", d, "fp8", 8, 128, 64, 8, 1, 16),
        # The graph returns the scores too (-inf past each row's length).
        C("scores-dense-fp8-h64-d128-p64-b16-k512-qbf16", d, "fp8", 64, 128, 64, 64, 16,
          512, scores=True, zero_length=True, bad_table="too-large"),
        C("scores-dense-bf16-h8-d64-p16-b3-k16", d, "bf16", 8, 64, 16, 24, 3, 16,
          scores=True),
        # --- SPIN, exact inputs --------------------------------------------
        C("spin-bf16-h8-d64-p64-bs64-b3-k16-sp0.5-max", s, "bf16", 8, 64, 64, 8, 3, 16,
          bs=64, sp=0.5, host_reset=True),
        # Blocks of 2 slots: the prediction pools slot by slot (blocks of
        # four slots and more take four a lane).
        C("spin-bf16-h8-d64-p16-bs2-b3-k16-sp0.5-max", s, "bf16", 8, 64, 16, 24, 3, 16,
          bs=2, sp=0.5),
        C("spin-bf16-h64-d128-p64-bs16-b16-k512-sp0.9-mean", s, "bf16", 64, 128, 64, 64,
          16, 512, bs=16, sp=0.9, pool="mean", extra=4, zero_length=True),
        C("spin-bf16-h8-d128-p16-bs16-b1-k16-sp0-top4", s, "bf16", 8, 128, 16, 24, 1, 16,
          bs=16, sp=0.0, pool="top4", extra=1),
        C("spin-bf16-h64-d64-p64-bs64-b3-k512-sp0.5-x0.25-max", s, "bf16", 64, 64, 64, 64,
          3, 512, bs=64, sp=0.5, x=0.25, seed=SEED_A, extreme_ids=True,
          bad_table="too-large"),
        C("spin-f16-h8-d64-p16-bs16-b3-k16-sp0.9-x0.25-top4-qf16", s, "f16", 8, 64, 16, 48,
          3, 16, q="f16", bs=16, sp=0.9, x=0.25, seed=SEED_B, pool="top4", extra=1),
        C("spin-f16-h64-d128-p64-bs64-b16-k512-sp0.5-max-qbf16", s, "f16", 64, 128, 64, 64,
          16, 512, bs=64, sp=0.5, host_reset=True),
        C("spin-f16-h8-d128-p64-bs16-b1-k512-sp0.9-mean-qf16", s, "f16", 8, 128, 64, 64, 1,
          512, q="f16", bs=16, sp=0.9, pool="mean"),
        C("spin-f16-h64-d64-p64-bs64-b3-k16-sp0-x0.25-max-qbf16", s, "f16", 64, 64, 64, 8, 3,
          16, bs=64, sp=0.0, x=0.25, seed=SEED_A),
        C("spin-fp8-h64-d128-p64-bs64-b16-k512-sp0.5-x0.25-max-qbf16", s, "fp8", 64, 128, 64,
          64, 16, 512, bs=64, sp=0.5, x=0.25, seed=SEED_B, bad_table="too-large"),
        C("spin-fp8-h8-d64-p16-bs16-b3-k16-sp0.9-mean-qf16", s, "fp8", 8, 64, 16, 48, 3, 16,
          q="f16", bs=16, sp=0.9, pool="mean", host_reset=True),
        C("spin-fp8-h8-d128-p64-bs16-b1-k16-sp0.5-top4-qbf16", s, "fp8", 8, 128, 64, 16, 1,
          16, bs=16, sp=0.5, pool="top4"),
        C("spin-fp8-h64-d64-p64-bs64-b3-k512-sp0.9-max-qf16", s, "fp8", 64, 64, 64, 64, 3,
          512, q="f16", bs=64, sp=0.9),
        C("spin-fp8-h8-d64-p64-bs16-b16-k16-sp0.5-x0.25-top4-qbf16", s, "fp8", 8, 64, 64, 16,
          16, 16, bs=16, sp=0.5, x=0.25, seed=SEED_A, pool="top4", extra=4),
        C("spin-bf16-h8-d64-p64-bs16-b3-k16-sp0.5-max-reset", s, "bf16", 8, 64, 64, 16, 3,
          16, bs=16, sp=0.5, reset_input=True, extra=1),
        # A predict grid wider than --sm-count: no prefetch on a miss, and the
        # select kernel lets the scoring kernel start before its own wait.
        C("spin-fp8-h64-d128-p64-bs64-b16-k512-sp0.5-max-sm1", s, "fp8", 64, 128, 64, 64,
          16, 512, bs=64, sp=0.5, sm_count=1),
        # The same with fp8 queries, sparse scoring by the copying warpgroup,
        # on 4 "SMs" for 3 requests of 2 predict CTAs: one scoring CTA
        # prefetches its first tiles from the previous step's list.
        C("spin-fp8-h64-d128-p64-bs64-b3-k512-sp0.5-max-qfp8-sm4", s, "fp8", 64, 128, 64,
          128, 3, 512, q="fp8", bs=64, sp=0.5, sm_count=4),
        # --- noninteger inputs: one dense and one SPIN per key format -------
        C("nonint-dense-bf16-h64-d128-p64-b3-k512", d, "bf16", 64, 128, 64, 64, 3, 512,
          scheme="noninteger"),
        C("nonint-dense-f16-h8-d64-p16-b3-k16-qf16", d, "f16", 8, 64, 16, 24, 3, 16,
          q="f16", scheme="noninteger"),
        C("nonint-dense-fp8-h64-d128-p64-b3-k512-qf16", d, "fp8", 64, 128, 64, 64, 3, 512,
          q="f16", scheme="noninteger"),
        C("nonint-scores-dense-f16-h64-d128-p64-b3-k512-qbf16", d, "f16", 64, 128, 64, 64,
          3, 512, scheme="noninteger", scores=True),
        C("nonint-spin-bf16-h64-d128-p64-bs64-b3-k512-sp0.5-max", s, "bf16", 64, 128, 64,
          64, 3, 512, bs=64, sp=0.5, scheme="noninteger"),
        C("nonint-spin-f16-h8-d64-p16-bs16-b3-k16-sp0.5-mean-qbf16", s, "f16", 8, 64, 16,
          24, 3, 16, bs=16, sp=0.5, pool="mean", scheme="noninteger"),
        C("nonint-spin-fp8-h64-d128-p64-bs64-b3-k512-sp0.5-x0.25-max-qbf16", s, "fp8", 64,
          128, 64, 64, 3, 512, bs=64, sp=0.5, x=0.25, seed=SEED_B, scheme="noninteger"),
        # --- long rows: the top-K's cluster of CTAs per row (one per 16
        # entries a thread, up to 8: 64K slots -> 8 CTAs of 512 threads; K >
        # 512 by merge ranks) -----------------------------------------------------
        C("long-dense-fp8-h8-d64-p64-b3-k512-qbf16", d, "fp8", 8, 64, 64, 1024, 3, 512),
        C("long-dense-bf16-h8-d64-p64-b1-k2048", d, "bf16", 8, 64, 64, 1024, 1, 2048),
        # 56K slots: 7 CTAs, K = 1024 by merge ranks over slices of 512,
        # whose copies do not split evenly over the threads
        C("long-dense-fp8-h8-d64-p64-b3-k1024-qbf16", d, "fp8", 8, 64, 64, 896, 3, 1024),
        C("long-spin-bf16-h8-d64-p64-bs64-b3-k512-sp0.5-max", s, "bf16", 8, 64, 64, 1024,
          3, 512, bs=64, sp=0.5, steps=6),
        C("nonint-long-spin-fp8-h8-d64-p64-bs64-b3-k2048-sp0.2-max-qbf16", s, "fp8", 8, 64,
          64, 1024, 3, 2048, bs=64, sp=0.2, steps=6, scheme="noninteger"),
        # --- long rows' top-K where their clusters of 8 fill more than one
        # wave (sm-count 4 here), several rows a request: one 1024-thread CTA
        # a row for at most 64K candidates (64K slots dense, a SPIN row's
        # 52K selected), pairs of them for more (72K slots dense, 68K
        # selected of SPIN's)
        C("one-cta-long-dense-fp8-h64-d128-p64-b3-k2048-r2-qfp8", d, "fp8", 64, 128, 64, 1024,
          3, 2048, q="fp8", rows=2, sm_count=4),
        C("one-cta-long-spin-fp8-h8-d64-p64-bs64-b3-k1024-r2-sp0.2-max-qbf16", s, "fp8", 8,
          64, 64, 1024, 3, 1024, bs=64, sp=0.2, rows=2, steps=6, sm_count=4),
        C("pairs-long-dense-fp8-h64-d128-p64-b3-k2048-r2-qfp8", d, "fp8", 64, 128, 64, 1152,
          3, 2048, q="fp8", rows=2, sm_count=4),
        C("pairs-long-spin-fp8-h8-d64-p64-bs64-b3-k1024-r2-sp0.05-max-qbf16", s, "fp8", 8, 64,
          64, 1152, 3, 1024, bs=64, sp=0.05, rows=2, steps=6, sm_count=4),
        # --- shapes no other configuration takes: H = 32
        # (GLM-5's indexer: bf16 keys, 64-slot pages), whose wgmma chains are
        # m64n32 and, at R = 3 with fp8 queries, end in a chain of one row;
        # H = 16 and H = 128 on the copying warpgroup
        C("dense-bf16-h32-d128-p64-b3-k512", d, "bf16", 32, 128, 64, 64, 3, 512),
        C("mtp-bf16-h32-d128-p64-bs64-b3-k512-r2-sp0.5-x0.25-max", s, "bf16", 32, 128, 64, 64,
          3, 512, bs=64, sp=0.5, x=0.25, seed=SEED_A, rows=2),
        C("mtp-fp8-h32-d128-p64-bs64-b3-k512-r3-sp0.5-max-qfp8", s, "fp8", 32, 128, 64, 64, 3,
          512, q="fp8", bs=64, sp=0.5, rows=3),
        C("dense-fp8-h32-d128-p64-b3-k512-qfp8", d, "fp8", 32, 128, 64, 64, 3, 512, q="fp8"),
        C("spin-fp8-h16-d128-p64-bs64-b3-k16-sp0.5-max-qfp8", s, "fp8", 16, 128, 64, 16, 3, 16,
          q="fp8", bs=64, sp=0.5),
        C("dense-fp8-h128-d128-p64-b3-k512-r3-qfp8", d, "fp8", 128, 128, 64, 64, 3, 512,
          q="fp8", rows=3),
        # the mma.sync kernels of sm_100a / sm_103a with bf16 queries (bf16
        # MMAs for bf16 keys; the bf16-query prescale for fp8 keys)
        C("spin-fp8-h64-d128-p64-bs64-b3-k512-sp0.5-max-qbf16-mmasync", s, "fp8", 64, 128, 64,
          64, 3, 512, bs=64, sp=0.5, no_wgmma=True),
        C("dense-bf16-h32-d128-p64-b3-k512-mmasync", d, "bf16", 32, 128, 64, 64, 3, 512,
          no_wgmma=True),
        # sparse R = 3 at H = 64 (the other wgmma kernel, head weights staged
        # in shared memory); one row of fp8 queries on that kernel (blocks of
        # 16 slots, which the copying warpgroup does not take)
        C("mtp-fp8-h64-d128-p64-bs64-b16-k512-r3-sp0.5-x0.25-max-qfp8", s, "fp8", 64, 128, 64,
          64, 16, 512, q="fp8", bs=64, sp=0.5, x=0.25, seed=SEED_B, rows=3),
        C("spin-fp8-h64-d128-p64-bs16-b3-k512-sp0.5-x0.25-max-qfp8", s, "fp8", 64, 128, 64, 64,
          3, 512, q="fp8", bs=16, sp=0.5, x=0.25, seed=SEED_A),
        # a 256K-slot row of 16-slot blocks (the select kernel's block arrays
        # over 48 KB of shared memory; the top-K's four-chunk shares)
        C("long-spin-bf16-h8-d64-p64-bs16-b1-k2048-sp0.5-max", s, "bf16", 8, 64, 64, 4096, 1,
          2048, bs=16, sp=0.5, steps=4),
        # two distinct scores in a 64K row: more candidates than merge
        # ranks take (the whole-row fallback)
        C("ties-long-dense-bf16-h8-d64-p64-b1-k2048-d2", d, "bf16", 8, 64, 64, 1024, 1, 2048,
          scheme="ties", distinct=2),
        # batches over one wave: rows moving between steps (the previous
        # list found by vote over several 32-row chunks), the commit's
        # finishing kernel of more than one CTA (B > 128)
        C("spin-bf16-h8-d64-p64-bs16-b100-k16-sp0.5-max", s, "bf16", 8, 64, 64, 32, 100, 16,
          bs=16, sp=0.5),
        C("mtp-bf16-h8-d64-p64-bs64-b160-k16-r2-sp0.5-x0.25-max", s, "bf16", 8, 64, 64, 16,
          160, 16, bs=64, sp=0.5, x=0.25, seed=SEED_A, rows=2),
        # blocks of 128 and 256 slots on the other kernels, mean and top4
        # pooling of them
        C("spin-bf16-h32-d128-p128-bs128-b3-k512-sp0.5-mean", s, "bf16", 32, 128, 128, 32, 3,
          512, bs=128, sp=0.5, pool="mean"),
        C("spin-bf16-h8-d64-p256-bs256-b3-k16-sp0.5-top4", s, "bf16", 8, 64, 256, 8, 3, 16,
          bs=256, sp=0.5, pool="top4"),
        # pages of 2 slots: rows whose widths are not multiples of 4 (the
        # top-K's and the commit's scalar paths)
        C("mtp-bf16-h8-d64-p2-bs2-b3-k16-r2-sp0.5-max", s, "bf16", 8, 64, 2, 25, 3, 16, bs=2,
          sp=0.5, rows=2),
        # K wider than the rows (1024 of 512 slots): -1 past each row
        C("kwide-dense-bf16-h8-d64-p64-b3-k1024", d, "bf16", 8, 64, 64, 8, 3, 1024),
        # --- K not a power of two (every other configuration's is): the
        # leader's sort of K <= 512, merge ranks of K > 512 (slices of 2K
        # over the cluster, rounded up to a power of two), and K > 2048
        C("kodd-dense-bf16-h8-d64-p64-b3-k100", d, "bf16", 8, 64, 64, 16, 3, 100),
        C("kodd-long-dense-fp8-h8-d64-p64-b3-k1500-qbf16", d, "fp8", 8, 64, 64, 512, 3, 1500),
        C("kodd-long-spin-fp8-h8-d64-p64-bs64-b3-k600-sp0.5-max-qbf16", s, "fp8", 8, 64, 64,
          512, 3, 600, bs=64, sp=0.5, steps=6),
        C("kodd-long-dense-bf16-h8-d64-p64-b1-k3000", d, "bf16", 8, 64, 64, 1024, 1, 3000),
        # --- long rows of tied scores (keys from a few vectors): the top-K's
        # merge ranks across CTAs with runs of equal keys (24 vectors: each
        # score about 2.7K times, so at most 4K candidates), and its leader's
        # path where the candidates outnumber the merge's slices (8 vectors)
        C("ties-long-dense-bf16-h8-d64-p64-b1-k2048", d, "bf16", 8, 64, 64, 1024, 1, 2048,
          scheme="ties", distinct=24),
        C("ties-long-spin-fp8-h8-d64-p64-bs64-b3-k2048-sp0.2-max", s, "fp8", 8, 64, 64,
          1024, 3, 2048, bs=64, sp=0.2, steps=6, scheme="ties", distinct=8),
        # --- MTP (SPIN_SPEC §4): R = d + 1 rows, commits of 0..d drafts -------
        C("mtp-bf16-h8-d64-p64-bs16-b3-k16-r3-sp0.5-max", s, "bf16", 8, 64, 64, 16, 3, 16,
          bs=16, sp=0.5, rows=3, host_reset=True, extra=1),
        C("mtp-fp8-h64-d128-p64-bs64-b16-k512-r4-sp0.5-x0.25-max-qbf16", s, "fp8", 64, 128,
          64, 64, 16, 512, bs=64, sp=0.5, x=0.25, seed=SEED_A, rows=4, extra=4),
        C("mtp-f16-h8-d64-p16-bs16-b3-k16-r2-sp0.9-x0.25-top4-row0-qf16", s, "f16", 8, 64,
          16, 48, 3, 16, q="f16", bs=16, sp=0.9, x=0.25, seed=SEED_B, pool="top4", rows=2,
          mtp_mask="row0", mtp_update="row0"),
        C("mtp-bf16-h8-d64-p64-bs16-b3-k16-r4-sp0.5-mean-reset", s, "bf16", 8, 64, 64, 16,
          3, 16, bs=16, sp=0.5, pool="mean", rows=4, reset_input=True, extra=1),
        C("nonint-mtp-fp8-h64-d128-p64-bs64-b3-k512-r3-sp0.5-max-qf16", s, "fp8", 64, 128,
          64, 64, 3, 512, q="f16", bs=64, sp=0.5, rows=3, scheme="noninteger"),
        # --- fp8 queries (e4m3 MMAs: wgmma k32 on sm_90a, mma.sync m16n8k32
        # with --no-wgmma, as on sm_100a / sm_103a) and the query rows of a
        # step scored in one pass over the keys (dense R > 1; SPIN MTP) -----
        C("dense-fp8-h64-d128-p64-b16-k512-qfp8", d, "fp8", 64, 128, 64, 64, 16, 512,
          q="fp8", bad_table="too-large", zero_length=True),
        C("dense-fp8-h8-d64-p16-b3-k16-qfp8-mmasync", d, "fp8", 8, 64, 16, 24, 3, 16,
          q="fp8", no_wgmma=True, bad_table="negative"),
        C("nonint-dense-fp8-h64-d128-p64-b3-k512-qfp8", d, "fp8", 64, 128, 64, 64, 3, 512,
          q="fp8", scheme="noninteger"),
        C("nonint-dense-fp8-h64-d128-p64-b3-k512-qfp8-mmasync", d, "fp8", 64, 128, 64, 64,
          3, 512, q="fp8", scheme="noninteger", no_wgmma=True),
        C("scores-dense-fp8-h64-d128-p64-b16-k512-r2-qfp8", d, "fp8", 64, 128, 64, 64, 16,
          512, q="fp8", rows=2, scores=True, zero_length=True),
        C("dense-fp8-h64-d128-p64-b16-k512-r4-qfp8", d, "fp8", 64, 128, 64, 64, 16, 512,
          q="fp8", rows=4),
        C("dense-fp8-h64-d128-p64-b3-k512-r3-qfp8-mmasync", d, "fp8", 64, 128, 64, 64, 3,
          512, q="fp8", rows=3, no_wgmma=True),
        # Three rows (N = 192): the other kernel by default, the copying
        # warpgroup with --copy-warpgroup (two multipliers, one chain).
        C("dense-fp8-h64-d128-p64-b16-k512-r3-qfp8", d, "fp8", 64, 128, 64, 64, 16, 512,
          q="fp8", rows=3, zero_length=True),
        # Pages of more than 64 slots for the copying warpgroup (its tensor
        # maps and page-lookup units: a unit is the gcd of the CTA's
        # entries, the page and the block): 128-slot pages dense (scores
        # compared entry by entry) and with 128-slot blocks, 256-slot pages
        # holding four 64-slot blocks each
        C("scores-dense-fp8-h64-d128-p128-b3-k512-r2-qfp8", d, "fp8", 64, 128, 128, 24, 3,
          512, q="fp8", rows=2, scores=True, zero_length=True),
        C("spin-fp8-h64-d128-p128-bs128-b3-k512-sp0.5-x0.25-max-qfp8", s, "fp8", 64, 128, 128,
          24, 3, 512, q="fp8", bs=128, sp=0.5, x=0.25, seed=SEED_A, bad_table="too-large"),
        C("mtp-fp8-h64-d128-p256-bs64-b3-k512-r2-sp0.5-max-qfp8", s, "fp8", 64, 128, 256, 12,
          3, 512, q="fp8", bs=64, sp=0.5, rows=2, zero_length=True),
        # and for the other kernels: 128-slot pages of 32-slot blocks
        C("spin-bf16-h8-d64-p128-bs32-b3-k16-sp0.5-max", s, "bf16", 8, 64, 128, 8, 3, 16,
          bs=32, sp=0.5, bad_table="too-large"),
        C("dense-bf16-h8-d64-p16-b3-k16-r3", d, "bf16", 8, 64, 16, 24, 3, 16, rows=3),
        C("dense-bf16-h64-d128-p64-b3-k512-r4", d, "bf16", 64, 128, 64, 64, 3, 512, rows=4,
          zero_length=True),
        C("nonint-scores-dense-fp8-h64-d128-p64-b16-k512-r2-qfp8", d, "fp8", 64, 128, 64,
          64, 16, 512, q="fp8", rows=2, scores=True, scheme="noninteger"),
        C("nonint-scores-dense-fp8-h64-d128-p64-b3-k512-r2-qfp8-mmasync", d, "fp8", 64,
          128, 64, 64, 3, 512, q="fp8", rows=2, scores=True, scheme="noninteger",
          no_wgmma=True),
        C("nonint-scores-dense-fp8-h64-d128-p64-b3-k512-r2-qbf16", d, "fp8", 64, 128, 64,
          64, 3, 512, rows=2, scores=True, scheme="noninteger"),
        C("nonint-dense-f16-h64-d128-p64-b3-k512-r2-qf16-mmasync", d, "f16", 64, 128, 64,
          64, 3, 512, q="f16", rows=2, scheme="noninteger", no_wgmma=True),
        C("spin-fp8-h64-d128-p64-bs64-b16-k512-sp0.5-x0.25-max-qfp8", s, "fp8", 64, 128, 64,
          64, 16, 512, q="fp8", bs=64, sp=0.5, x=0.25, seed=SEED_A, bad_table="too-large",
          host_reset=True),
        C("mtp-fp8-h64-d128-p64-bs64-b16-k512-r2-sp0.5-max-qfp8", s, "fp8", 64, 128, 64, 64,
          16, 512, q="fp8", bs=64, sp=0.5, rows=2, extra=4, zero_length=True),
        # examples/serving_loop.py's shape with fp8 queries, on wgmma (eight
        # heads of 64: m64n16k32 chains over 64-byte query rows)
        C("mtp-fp8-h8-d64-p64-bs16-b3-k32-r2-sp0.5-x0.1-max-qfp8", s, "fp8", 8, 64, 64, 8,
          3, 32, q="fp8", bs=16, sp=0.5, x=0.1, seed=SEED_A, rows=2, reset_input=True),
        C("mtp-fp8-h8-d64-p16-bs16-b3-k16-r3-sp0.5-x0.25-mean-qfp8-mmasync", s, "fp8", 8, 64,
          16, 48, 3, 16, q="fp8", bs=16, sp=0.5, x=0.25, seed=SEED_B, pool="mean", rows=3,
          no_wgmma=True, reset_input=True, extra=1),
        C("nonint-mtp-fp8-h64-d128-p64-bs64-b3-k512-r4-sp0.5-top4-row0-qfp8", s, "fp8", 64,
          128, 64, 64, 3, 512, q="fp8", bs=64, sp=0.5, pool="top4", rows=4,
          mtp_mask="row0", mtp_update="row0", scheme="noninteger"),
        C("mtp-bf16-h64-d128-p64-bs16-b3-k512-r2-sp0.9-max", s, "bf16", 64, 128, 64, 64, 3,
          512, bs=16, sp=0.9, rows=2, host_reset=True),
        # --- multi-layer graphs (issue 30): 3 identical layers, each with its
        # own q, w, keys (+ scales) and state, sharing the block table,
        # lengths, positions and request ids; every distinct kernel is
        # emitted once and launched by every layer. Exploration on, so that
        # each layer's select must hash its own layer index (gpu_check.py
        # gives the last layer the first one's inputs: only the hash tells
        # them apart).
        C("ml3-spin-fp8-h8-d64-p64-bs16-b3-k16-sp0.5-x0.25-max-qbf16", s, "fp8", 8, 64, 64,
          16, 3, 16, bs=16, sp=0.5, x=0.25, seed=SEED_A, layers=3, host_reset=True,
          extra=1),
        C("ml3-mtp-fp8-h8-d128-p16-bs16-b3-k16-r2-sp0.5-x0.25-mean-qf16-reset", s, "fp8", 8,
          128, 16, 48, 3, 16, q="f16", bs=16, sp=0.5, x=0.25, seed=SEED_B, pool="mean",
          rows=2, layers=3, reset_input=True, extra=1),
        C("ml3-nonint-spin-bf16-h64-d128-p64-bs64-b3-k512-sp0.5-x0.25-max", s, "bf16", 64,
          128, 64, 64, 3, 512, bs=64, sp=0.5, x=0.25, seed=SEED_B, layers=3,
          scheme="noninteger", steps=6),
    ]
    names = [c["name"] for c in cs]
    assert len(set(names)) == len(names), "duplicate configuration names"
    for c in cs:
        chunk = 64 if c["key_format"] == "fp8" else 32
        assert c["heads"] % 8 == 0 and c["head_dim"] % chunk == 0, c["name"]
        if c["mode"] == "spin":
            assert c["page_size"] % c["block_size"] == 0, c["name"]
    return cs


def sparsify_options(c):
    """The --sparsify option string of a SPIN configuration."""
    opts = [f"sparsity={c['sparsity']:g}", f"block-size={c['block_size']}",
            f"ema-decay={c['ema_decay']:g}", f"explore={c['explore']:g}",
            f"seed={c['seed']}", f"pooling={c['pooling']}"]
    if c["reset_input"]:
        opts.append("reset-input=true")
    if c["rows"] > 1:
        opts += [f"mtp-mask={c['mtp_mask']}", f"mtp-update={c['mtp_update']}"]
    return " ".join(opts)


def indexer_types(batch, rows, heads, head_dim, page_size, table_pages, topk,
                  key_format, q_format):
    """The MLIR tensor types of an indexer layer's values: queries, head
    weights, keys, key scales, block table, lengths, scores, top-K."""
    B, R, H, Dh, S, MB, K = (batch, rows, heads, head_dim, page_size, table_pages, topk)
    kt, qt = MLIR_TYPES[key_format], MLIR_TYPES[q_format]
    return (f"tensor<{B}x{R}x{H}x{Dh}x{qt}>", f"tensor<{B}x{R}x{H}xf32>",
            f"tensor<?x{S}x{Dh}x{kt}>", f"tensor<?x{S}xf32>", f"tensor<{B}x{MB}xi32>",
            f"tensor<{B}x{R}xi32>", f"tensor<{B}x{R}x{MB * S}xf32>",
            f"tensor<{B}x{R}x{K}xi32>")


def indexer_graph(function, header, *, batch, rows, heads, head_dim, page_size,
                  table_pages, topk, key_format, q_format="bf16", outputs="topk"):
    """A dense indexer graph (as examples/deepseek-v4-flash-indexer.mlir):
    `@function` scoring B x R rows over paged keys and taking their top-K,
    after the comment lines ``header``. `outputs`: "topk" (the top-K
    indices), "scores,topk" (the scores too) or "scores" (the scores only).
    bench/bench_artifacts.py uses it too."""
    S, K = page_size, topk
    qtype, wtype, ktype, sctype, ttype, ltype, ztype, otype = indexer_types(
        batch, rows, heads, head_dim, page_size, table_pages, topk, key_format, q_format)
    fp8 = key_format == "fp8"
    scale_arg = f"\n    %scales: {sctype},           // per-slot key scales [pages, {S}]" \
        if fp8 else ""
    scale_use = f"\n      scales(%scales : {sctype})" if fp8 else ""
    names = outputs.split(",")
    if names not in (["topk"], ["scores", "topk"], ["scores"]):
        raise ValueError(f"outputs={outputs!r}: expected topk, scores,topk or scores")
    types = {"scores": ztype, "topk": otype}
    results = ", ".join("%" + n for n in names)
    return_types = ", ".join(types[n] for n in names)
    result_types = f"({return_types})" if len(names) > 1 else return_types
    topk_op = "" if "topk" not in names else f"""
  %topk = spin.topk %scores lengths(%lengths : {ltype}) {{k = {K} : i64}}
      : {ztype} -> {otype}"""
    return f"""{header}

func.func @{function}(
    %q: {qtype},          // indexer queries [B, R, H, Dh]
    %w: {wtype},               // head weights [B, R, H]
    %keys: {ktype},      // key cache [pages, {S}, Dh]{scale_arg}
    %block_table: {ttype},     // logical -> physical page
    %lengths: {ltype})            // visible slots per row
    -> {result_types} {{
  %scores = spin.dense_indexer q(%q : {qtype})
      w(%w : {wtype})
      keys(%keys : {ktype}){scale_use}
      block_table(%block_table : {ttype})
      lengths(%lengths : {ltype}) -> {ztype}{topk_op}
  return {results} : {return_types}
}}
"""


def multilayer_indexer_graph(function, header, *, layers, batch, rows, heads, head_dim,
                             page_size, table_pages, topk, key_format, q_format="bf16"):
    """`layers` dense indexer layers in one graph (as
    examples/deepseek-v4-flash-multilayer.mlir): layer l has its own queries
    %q<l>, head weights %w<l> and key cache %keys<l> (+ %scales<l> for fp8
    keys); the block table and lengths are shared; it returns every layer's
    top-K, layer 0's first. `key_format` is one format for every layer or a
    list of one per layer (bench/multilayer_graph.py --mixed)."""
    formats = [key_format] * layers if isinstance(key_format, str) else list(key_format)
    if len(formats) != layers:
        raise ValueError(f"{len(formats)} key formats for {layers} layers")
    K = topk
    args, body = [], []
    for i, fmt in enumerate(formats):
        qtype, wtype, ktype, sctype, ttype, ltype, ztype, otype = indexer_types(
            batch, rows, heads, head_dim, page_size, table_pages, topk, fmt, q_format)
        args += [f"%q{i}: {qtype}", f"%w{i}: {wtype}", f"%keys{i}: {ktype}"]
        if fmt == "fp8":
            args.append(f"%scales{i}: {sctype}")
        scale_use = f"\n      scales(%scales{i} : {sctype})" if fmt == "fp8" else ""
        body.append(f"""  %z{i} = spin.dense_indexer q(%q{i} : {qtype})
      w(%w{i} : {wtype})
      keys(%keys{i} : {ktype}){scale_use}
      block_table(%block_table : {ttype})
      lengths(%lengths : {ltype}) -> {ztype}
  %topk{i} = spin.topk %z{i} lengths(%lengths : {ltype}) {{k = {K} : i64}}
      : {ztype} -> {otype}""")
    args += [f"%block_table: {ttype}", f"%lengths: {ltype}"]
    types = ", ".join([otype] * layers)
    values = ", ".join(f"%topk{i}" for i in range(layers))
    return (f"{header}\n\nfunc.func @{function}(\n    " + ",\n    ".join(args)
            + f")\n    -> ({types}) {{\n" + "\n".join(body)
            + f"\n  return {values} : {types}\n}}\n")


def graph_text(c):
    """The correctness check's graph of configuration ``c``."""
    B, S, MB = c["batch"], c["page_size"], c["table_pages"]
    R = c["rows"]
    if c.get("layers", 1) > 1:
        header = f"""// GPU correctness check graph {c['name']} (bench/gpu_artifacts.py):
//   {c['layers']} identical indexer layers, each with its own q, w and key cache;
//   {B} requests, {R} query row{'s' if R > 1 else ''} each, H = {c['heads']}, Dh = {c['head_dim']}, top-K = {c['topk']},
//   {c['key_format']} keys ({c['q_format']} queries), {S}-slot pages, shared block tables of
//   {MB} pages ({MB * S} slots) per request; the page count (`?`) is known at run time."""
        return multilayer_indexer_graph(
            FUNCTION, header, layers=c["layers"], batch=B, rows=R, heads=c["heads"],
            head_dim=c["head_dim"], page_size=S, table_pages=MB, topk=c["topk"],
            key_format=c["key_format"], q_format=c["q_format"])
    header = f"""// GPU correctness check graph {c['name']} (bench/gpu_artifacts.py):
//   {B} requests, {R} query row{'s' if R > 1 else ''} each, H = {c['heads']}, Dh = {c['head_dim']}, top-K = {c['topk']},
//   {c['key_format']} keys ({c['q_format']} queries), {S}-slot pages, block tables of
//   {MB} pages ({MB * S} slots) per request; the page count (`?`) is known at run time."""
    return indexer_graph(FUNCTION, header, batch=B, rows=R, heads=c["heads"],
                         head_dim=c["head_dim"], page_size=S, table_pages=MB,
                         topk=c["topk"], key_format=c["key_format"],
                         q_format=c["q_format"],
                         outputs="scores,topk" if c.get("return_scores") else "topk")


def compile_args(c, compiler, graph, out_dir, target, flags=()):
    args = [compiler, graph, f"--target={target}", "-o", out_dir, *flags]
    if c["mode"] == "spin":
        args.append(f"--sparsify={sparsify_options(c)}")
    if c["sm_count"] is not None:
        args.append(f"--sm-count={c['sm_count']}")
    if c["no_wgmma"]:
        args.append("--no-wgmma")
    return args


def layer_name(name, layer):
    """The manifest name of a per-layer input or output of layer `layer`
    (layer 0's has no suffix: "q", "q_1", "q_2", ...; gpu_check.py binds
    and reads these)."""
    return name if layer == 0 else f"{name}_{layer}"


# The inputs and outputs each layer of a multi-layer graph has its own of.
PER_LAYER_NAMES = ("q", "w", "keys", "scales", abi.TOPK, abi.SPARSITY, abi.SCORES)


def name_layer(name):
    """The layer of a per-layer argument name (layer_name's inverse), or
    None for a shared one."""
    if name in PER_LAYER_NAMES:
        return 0
    base, _, tail = name.rpartition("_")
    if base in PER_LAYER_NAMES and tail.isdigit():
        return int(tail)
    return None


def expected_arguments(c):
    """(role, name, dtype, shape) of every manifest argument gpu_check.py
    binds or reads, in the order the GPU ABI gives them."""
    B, H, Dh, S, MB, K = (c["batch"], c["heads"], c["head_dim"], c["page_size"],
                          c["table_pages"], c["topk"])
    R = c["rows"]
    L = c.get("layers", 1)
    kd = MANIFEST_DTYPES[c["key_format"]]
    qd = MANIFEST_DTYPES[c["q_format"]]
    args = []
    for l in range(L):
        args += [(abi.INPUT, layer_name("q", l), qd, [B, R, H, Dh]),
                 (abi.INPUT, layer_name("w", l), "f32", [B, R, H]),
                 (abi.INPUT, layer_name("keys", l), kd, [-1, S, Dh])]
        if c["key_format"] == "fp8":
            args.append((abi.INPUT, layer_name("scales", l), "f32", [-1, S]))
    args += [(abi.INPUT, "block_table", "i32", [B, MB]),
             (abi.INPUT, "lengths", "i32", [B, R])]
    if c["mode"] == "spin":
        args += [(abi.POSITIONS, abi.POSITIONS, "i32", [B, R]),
                 (abi.REQUEST_IDS, abi.REQUEST_IDS, "i64", [B])]
        if R > 1:
            args.append((abi.ACCEPTED, abi.ACCEPTED, "i32", [B]))
        if c["reset_input"]:
            args.append((abi.RESET, abi.RESET, "i1", [B]))
    if c.get("return_scores"):
        args.append((abi.OUTPUT, abi.SCORES, "f32", [B, R, MB * S]))
    args += [(abi.OUTPUT, layer_name(abi.TOPK, l), "i32", [B, R, K]) for l in range(L)]
    if c["mode"] == "spin":
        args += [(abi.OUTPUT, layer_name(abi.SPARSITY, l), "f32", [B, R]) for l in range(L)]
    return args


def check_manifest(c, d, single=None):
    """Everything gpu_check.py relies on, checked here rather than on the
    GPU; returns the manifest and a list of problems. `single`: for a
    multi-layer configuration, the manifest of its one-layer graph (the
    kernels every layer must share)."""
    m = json.load(open(os.path.join(d, "manifest.json")))
    problems = []
    L = c.get("layers", 1)
    got = {a["name"]: a for a in m["arguments"]
           if a["role"] in (abi.INPUT, abi.POSITIONS, abi.REQUEST_IDS, abi.ACCEPTED,
                            abi.RESET, abi.OUTPUT)}
    want = expected_arguments(c)
    for role, name, dtype, shape in want:
        a = got.get(name)
        if a is None:
            problems.append(f"no argument {name!r}")
        elif (a["role"], a["dtype"], a["shape"]) != (role, dtype, shape):
            problems.append(f"argument {name!r} is {a['role']} {a['dtype']} "
                            f"{a['shape']}, expected {role} {dtype} {shape}")
    extra = sorted(set(got) - {w[1] for w in want})
    if extra:
        problems.append(f"unexpected arguments {extra}")
    if m["batch"] != c["batch"] or m["rows"] != c["rows"]:
        problems.append(f"batch/rows {m['batch']}/{m['rows']}, expected "
                        f"{c['batch']}/{c['rows']}")
    if "sm_90a" not in m["ptx"]:
        problems.append(f"no sm_90a PTX ({sorted(m['ptx'])})")
    stateful = any(a["role"] == abi.STATE for a in m["arguments"])
    if stateful != (c["mode"] == "spin"):
        problems.append(f"state arguments {'present' if stateful else 'absent'} "
                        f"for a {c['mode']} graph")
    if c["mode"] == "spin":
        st = m.get("state", {})
        if st.get("capacity") != c["capacity"] or st.get("block_size") != c["block_size"] \
                or st.get("layers") != L or st.get(abi.KEY["MaxRows"]) != c["rows"]:
            problems.append(f"state section {st}, expected capacity {c['capacity']}, "
                            f"block_size {c['block_size']}, {L} layer(s), "
                            f"max_rows {c['rows']}")
        # Single-row steps whose max pooling runs in many CTAs keep their
        # block scores in the state's prediction cache (Kernels.h).
        bs = c["block_size"]
        cached = c["rows"] == 1 and c["pooling"] == "max" and (bs % 32 == 0 or 32 % bs == 0)
        # A reset clears the cache's record, binding it first (before the
        # MTP fields).
        pred = list(abi.state_fields("prediction"))
        obs = list(abi.state_fields("observation"))
        want_fields = list(abi.state_fields("core")) + (pred if c["reset_input"] else []) + \
            (obs if c["rows"] > 1 else []) + \
            (pred if cached and not c["reset_input"] else [])
        for l in range(L):
            fields = [a["name"] for a in m["arguments"]
                      if a["role"] == abi.STATE and a.get("layer", 0) == l]
            if fields != want_fields:
                problems.append(f"layer {l}: state fields {fields}, expected {want_fields}")
        stray = sorted({a.get("layer") for a in m["arguments"] if a["role"] == abi.STATE}
                       - set(range(L)))
        if stray:
            problems.append(f"state arguments of layers {stray}, expected 0..{L - 1}")
        opts = m.get("options", {}).get("sparsify", "")
        for key, value in (("seed", str(c["seed"])), ("pooling", c["pooling"]),
                           ("reduction", "A1"),
                           ("reset-input", "true" if c["reset_input"] else "false")):
            if f"{key}={value}" not in opts:
                problems.append(f"options.sparsify lacks {key}={value}: {opts!r}")
    if L > 1:
        problems += check_shared_kernels(c, m, single)
    return m, problems


def launch_layers(m, launch):
    """The layers whose per-layer arguments (state, inputs, outputs) a
    launch of manifest `m` touches."""
    layers = set()
    for a in launch["args"]:
        if a["kind"] == "argument":
            i = a["index"]
        elif a["kind"] == "dim":
            i = a["argument"]
        else:
            continue
        arg = m["arguments"][i]
        layer = arg["layer"] if arg["role"] == abi.STATE else name_layer(arg["name"])
        if layer is not None:
            layers.add(layer)
    return layers


def check_shared_kernels(c, m, single):
    """A multi-layer graph of identical layers emits each kernel once: as
    many kernel entries as its one-layer graph, every layer launching the
    same kernels in the same order, and every launch that passes an i32
    (the select kernel's layer, hashed by exploration) passing its own
    layer."""
    L = c["layers"]
    problems = []
    names = [k["name"] for k in m["kernels"]]
    if len(set(names)) != len(names):
        problems.append(f"kernels listed twice: {names}")
    if single is not None and len(m["kernels"]) != len(single["kernels"]):
        problems.append(f"{len(m['kernels'])} kernel entries, the one-layer graph has "
                        f"{len(single['kernels'])}: {names} vs "
                        f"{[k['name'] for k in single['kernels']]}")
    per_layer = [[] for _ in range(L)]
    for j, launch in enumerate(m["launches"]):
        if launch["kernel"] not in names:
            problems.append(f"launch {j} of an unlisted kernel {launch['kernel']!r}")
        layers = launch_layers(m, launch)
        if len(layers) != 1 or not layers <= set(range(L)):
            problems.append(f"launch {j} ({launch['kernel']}) touches layers "
                            f"{sorted(layers)}, expected exactly one")
            continue
        layer = layers.pop()
        per_layer[layer].append(launch["kernel"])
        for a in launch["args"]:
            if a["kind"] == "i32" and a["value"] != layer:
                problems.append(f"launch {j} ({launch['kernel']}) of layer {layer} passes "
                                f"i32 {a['value']}, expected its layer {layer}")
        if any(a["kind"] == "i32" for a in launch["args"]):
            per_layer[layer].append("i32 layer")
    for l in range(1, L):
        if per_layer[l] != per_layer[0]:
            problems.append(f"layer {l} launches {per_layer[l]}, layer 0 {per_layer[0]}")
    if c["explore"] > 0 and "i32 layer" not in per_layer[0]:
        problems.append("no launch passes the layer (an i32) although exploration "
                        "hashes it")
    if single is not None:
        # Kernel names carry the number of the op they were made for, which
        # differs between the graphs.
        def kind(name):
            return re.sub(r"_\d+", "", name)
        one = [kind(k["kernel"]) for k in single["launches"]]
        mine = [kind(k) for k in per_layer[0] if k != "i32 layer"]
        if mine != one:
            problems.append(f"layer 0 launches {mine}, the one-layer graph {one}")
    return problems


def compile_one_layer(c, compiler, target, flags=()):
    """The manifest of configuration c's graph with one layer (what its
    shared kernels are compared with), or an error string."""
    one = dict(c, layers=1)
    with tempfile.TemporaryDirectory(prefix="gpu-artifacts-one-layer-") as d:
        graph = os.path.join(d, "graph.mlir")
        with open(graph, "w") as f:
            f.write(graph_text(one))
        proc = subprocess.run(compile_args(one, compiler, graph, d, target, flags),
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return f"its one-layer graph does not compile: {proc.stderr.strip()[-500:]}"
        with open(os.path.join(d, "manifest.json")) as f:
            return json.load(f)


def dir_bytes(path, suffix=""):
    total = 0
    for base, _, files in os.walk(path):
        for f in files:
            if f.endswith(suffix):
                total += os.path.getsize(os.path.join(base, f))
    return total


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Graphs + sm_90a artifacts of the GPU correctness check "
                    "(gpu-artifacts/, read by bench/gpu_check.py on the GPU machine).")
    p.add_argument("--out", default=os.path.join(ROOT, "gpu-artifacts"))
    p.add_argument("--compiler", default=os.path.join(ROOT, "build", "bin", "spin-compile"))
    p.add_argument("--target", default="sm_90a")
    p.add_argument("--only", default="", help="substring filter on configuration names")
    p.add_argument("--max-mb", type=float, default=40.0,
                   help="fail if the PTX of all artifacts exceeds this (default 40)")
    p.add_argument("--list", action="store_true", help="print the configurations and exit")
    p.add_argument("--flag", action="append", default=[], metavar="OPTION",
                   help="an extra spin-compile option for every configuration, "
                        "e.g. --flag=--tiles-per-warp=32 (repeatable; for experiments)")
    args = p.parse_args(argv)

    configs = all_configs()
    if args.only:
        configs = [c for c in configs if args.only in c["name"]]
    if args.list:
        for c in configs:
            extra = f" --sparsify=\"{sparsify_options(c)}\"" if c["mode"] == "spin" else ""
            print(f"{c['name']}{extra}")
        print(f"{len(configs)} configurations")
        return 0
    if not os.access(args.compiler, os.X_OK):
        print(f"error: {args.compiler} is not an executable (build the compiler first)",
              file=sys.stderr)
        return 1

    # Build into OUT.tmp and swap it in at the end, so that an interrupted
    # run (or a compiler being relinked meanwhile) never leaves a half tree.
    final = os.path.abspath(args.out)
    out = final + ".tmp"
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    failed, bad_manifest = [], []
    t_all = time.time()
    compiler_version = None
    for i, c in enumerate(configs):
        d = os.path.join(out, c["name"])
        os.makedirs(d)
        graph = os.path.join(d, "graph.mlir")
        with open(graph, "w") as f:
            f.write(graph_text(c))
        cmd = compile_args(c, args.compiler, graph, d, args.target, args.flag)
        c["dir"] = c["name"]
        c["function"] = FUNCTION
        shown = [a.replace(out + os.sep, final + os.sep) for a in cmd]
        c["compile_command"] = " ".join(
            shlex.quote(os.path.relpath(a, ROOT) if a.startswith(ROOT + os.sep) else a)
            for a in shown)
        if c["mode"] == "spin":
            c["sparsify"] = sparsify_options(c)
        t0 = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            print(f"error: cannot run {args.compiler}: {e} ({final} left as it was)",
                  file=sys.stderr)
            shutil.rmtree(out, ignore_errors=True)
            return 1
        dt = time.time() - t0
        if proc.returncode != 0:
            c["compiled"] = False
            c["compile_error"] = proc.stderr.strip()
            failed.append(c)
            print(f"[{i + 1:2d}/{len(configs)}] {c['name']}: spin-compile FAILED "
                  f"(exit {proc.returncode}, {dt:.1f} s)", flush=True)
            continue
        single, one_layer_problem = None, []
        if c["layers"] > 1:
            single = compile_one_layer(c, args.compiler, args.target, args.flag)
            if isinstance(single, str):
                single, one_layer_problem = None, [single]
        m, problems = check_manifest(c, d, single)
        problems += one_layer_problem
        compiler_version = m.get("compiler_version", compiler_version)
        c["compiled"] = True
        c["compile_error"] = None
        c["ptx_bytes"] = dir_bytes(d, ".ptx")
        if problems:
            bad_manifest.append((c, problems))
        print(f"[{i + 1:2d}/{len(configs)}] {c['name']}: ok ({dt:.1f} s, "
              f"{c['ptx_bytes'] / 1024:.0f} KiB PTX, {len(m['launches'])} launches)"
              + (f" MANIFEST PROBLEMS: {problems}" if problems else ""), flush=True)

    ptx_total = dir_bytes(out, ".ptx")
    index = {
        "format": "spin-gpu-check-index",
        "version": 1,
        "generated_by": "bench/gpu_artifacts.py",
        "compiler": (os.path.relpath(args.compiler, ROOT)
                     if os.path.abspath(args.compiler).startswith(ROOT + os.sep)
                     else os.path.abspath(args.compiler)),
        "compiler_version": compiler_version,
        "target": args.target,
        "ptx_bytes": ptx_total,
        "configs": configs,
    }
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")

    if os.path.isdir(final):
        shutil.rmtree(final)
    os.rename(out, final)
    out = final
    ok = len(configs) - len(failed)
    print(f"\n{ok}/{len(configs)} configurations compiled in {time.time() - t_all:.1f} s; "
          f"PTX {ptx_total / 2 ** 20:.2f} MiB in {out}")
    if failed:
        print(f"\n{len(failed)} configuration(s) NOT compiled (kept in index.json with "
              f"compiled=false; gpu_check.py reports them as SKIP):")
        for c in failed:
            print(f"  {c['name']}\n    $ {c['compile_command']}")
            for line in c["compile_error"].splitlines():
                print(f"    | {line}")
    status = 0
    if bad_manifest:
        status = 1
        print("\nmanifests that do not match what gpu_check.py expects:")
        for c, problems in bad_manifest:
            print(f"  {c['name']}: " + "; ".join(problems))
    if ptx_total > args.max_mb * 2 ** 20:
        status = 1
        print(f"\nerror: the PTX totals {ptx_total / 2 ** 20:.1f} MiB, above --max-mb "
              f"{args.max_mb}")
    return status


if __name__ == "__main__":
    sys.exit(main())
