"""Trace directories of `spin-exec` (write inputs, read outputs, run it).

A trace directory (the contract of `build/bin/spin-exec`):

    DIR/keys.npy                [P, S, Dh] key cache: '<u2' bf16 bits (bf16),
                                '<f2' (f16), '<f4' (f32), '|u1' fp8 e4m3 bits
    DIR/scales.npy              [P, S] '<f4' (fp8 only)
    DIR/step_0000/q.npy         [B, R, H, Dh] '<u2' bf16 bits (bf16, fp8),
                                '<f2' (f16), '<f4' (f32)
    DIR/step_0000/w.npy         [B, R, H] '<f4'
    DIR/step_0000/block_table.npy [B, MB] '<i4'
    DIR/step_0000/lengths.npy   [B, R] '<i4'
    DIR/step_0000/positions.npy [B, R] '<i4'
    DIR/step_0000/request_ids.npy [B] '<i8'
    DIR/step_0000/accepted.npy  [B] '<i4' (optional, MTP)
    DIR/step_0000/reset.npy     [B] '|u1' (optional)

and spin-exec writes step_XXXX/out_topk.npy [B, R, K] '<i4' and
step_XXXX/out_sparsity.npy [B, R] '<f4'.

Only numpy and the standard library are used; element-format decoding comes
from the independent reference (test/reference/spin_reference.py).
"""

import os
import subprocess
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_REFERENCE_DIR = os.path.join(os.path.dirname(_HERE), "reference")
if _REFERENCE_DIR not in sys.path:
    sys.path.insert(0, _REFERENCE_DIR)

import spin_reference as sr  # noqa: E402

KEY_FORMATS = ("bf16", "f16", "f32", "fp8")
DEFAULT_BUILD_DIR = "/work/main/build"


# ---------------------------------------------------------------------------
# Locating the tool
# ---------------------------------------------------------------------------

def spin_exec_path():
    """Where spin-exec should be: $SPIN_BUILD_DIR/bin/spin-exec (default
    build dir /work/main/build)."""
    # Absolute: tests run tools from temporary working directories.
    build = os.path.abspath(os.environ.get("SPIN_BUILD_DIR", DEFAULT_BUILD_DIR))
    return os.path.join(build, "bin", "spin-exec")


def find_spin_exec():
    """The path of an executable spin-exec, or None."""
    path = spin_exec_path()
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    return None


# ---------------------------------------------------------------------------
# Element formats
# ---------------------------------------------------------------------------

_FP8_TABLE = sr.fp8_e4m3_to_f32(np.arange(256, dtype=np.uint8))
_FP8_FINITE_BITS = np.nonzero(~np.isnan(_FP8_TABLE))[0].astype(np.uint8)
_FP8_FINITE_VALS = _FP8_TABLE[_FP8_FINITE_BITS].astype(np.float64)


def f32_to_fp8_bits(x):
    """Nearest fp8 e4m3fn bit pattern of each value (saturating at +-448;
    NaN and +-inf map to the NaN pattern 0x7F / 0xFF).  Exact for values that
    are representable (e.g. the integers -4..4); +0.0 encodes as 0x00."""
    x = np.asarray(x, dtype=np.float32)
    flat = x.ravel().astype(np.float64)
    out = np.empty(flat.size, dtype=np.uint8)
    finite = np.isfinite(flat)
    if np.any(finite):
        v = np.clip(flat[finite], -448.0, 448.0)
        # nearest value; argmin takes the first (smallest pattern) on ties
        idx = np.argmin(np.abs(v[:, None] - _FP8_FINITE_VALS[None, :]), axis=1)
        bits = _FP8_FINITE_BITS[idx]
        # keep +0.0 as 0x00 (the table holds both 0x00 and 0x80)
        bits = np.where(v == 0.0, np.uint8(0), bits)
        out[finite] = bits
    nonfinite = ~finite
    out[nonfinite] = np.where(np.signbit(flat[nonfinite]), 0xFF, 0x7F)
    return out.reshape(x.shape)


def encode_keys(values, fmt):
    """(stored array for keys.npy, decoded float32 values) of a key cache."""
    values = np.ascontiguousarray(np.asarray(values, dtype=np.float32))
    if fmt == "bf16":
        bits = sr.f32_to_bf16_bits(values).astype("<u2")
        return bits, sr.bf16_to_f32(bits.astype(np.uint16))
    if fmt == "f16":
        half = values.astype("<f2")
        return half, half.astype(np.float32)
    if fmt == "f32":
        return values.astype("<f4"), values.copy()
    if fmt == "fp8":
        bits = f32_to_fp8_bits(values).astype("|u1")
        return bits, sr.fp8_e4m3_to_f32(bits.astype(np.uint8))
    raise ValueError("unknown key format %r" % (fmt,))


def q_format(key_format):
    """Element format of q for a key format: bf16 for bf16 and fp8 keys."""
    return {"bf16": "bf16", "fp8": "bf16", "f16": "f16", "f32": "f32"}[key_format]


def encode_q(values, key_format):
    """(stored array for q.npy, decoded float32 values)."""
    fmt = q_format(key_format)
    return encode_keys(values, fmt)


# ---------------------------------------------------------------------------
# Writing a trace, reading the outputs
# ---------------------------------------------------------------------------

def _save(path, array, dtype):
    array = np.ascontiguousarray(np.asarray(array).astype(dtype, copy=False))
    if array.dtype.str != np.dtype(dtype).str:
        raise AssertionError("wrong dtype for %s: %s" % (path, array.dtype.str))
    np.save(path, array, allow_pickle=False)


def step_dir(trace_dir, index):
    return os.path.join(trace_dir, "step_%04d" % index)


def write_trace(trace_dir, keys_stored, scales, steps):
    """Write a trace directory.

    keys_stored: the encoded key cache (dtype already '<u2' / '<f2' / '<f4' /
    '|u1'); scales: [P, S] float32 or None; steps: a list of dicts with the
    encoded 'q' (dtype already set) and 'w', 'block_table', 'lengths',
    'positions', 'request_ids', optionally 'accepted' and 'reset'.
    """
    os.makedirs(trace_dir, exist_ok=True)
    keys_stored = np.asarray(keys_stored)
    if keys_stored.dtype.str not in ("<u2", "<f2", "<f4", "|u1"):
        raise AssertionError("bad key dtype %s" % keys_stored.dtype.str)
    _save(os.path.join(trace_dir, "keys.npy"), keys_stored, keys_stored.dtype.str)
    if scales is not None:
        _save(os.path.join(trace_dir, "scales.npy"), scales, "<f4")
    for t, st in enumerate(steps):
        d = step_dir(trace_dir, t)
        os.makedirs(d, exist_ok=True)
        q = np.asarray(st["q"])
        if q.dtype.str not in ("<u2", "<f2", "<f4"):
            raise AssertionError("bad q dtype %s" % q.dtype.str)
        _save(os.path.join(d, "q.npy"), q, q.dtype.str)
        _save(os.path.join(d, "w.npy"), st["w"], "<f4")
        _save(os.path.join(d, "block_table.npy"), st["block_table"], "<i4")
        _save(os.path.join(d, "lengths.npy"), st["lengths"], "<i4")
        _save(os.path.join(d, "positions.npy"), st["positions"], "<i4")
        _save(os.path.join(d, "request_ids.npy"), st["request_ids"], "<i8")
        if st.get("accepted") is not None:
            _save(os.path.join(d, "accepted.npy"), st["accepted"], "<i4")
        if st.get("reset") is not None:
            _save(os.path.join(d, "reset.npy"), st["reset"], "|u1")


def read_step_outputs(trace_dir, index):
    """(out_topk int32 [B,R,K], out_sparsity float32 [B,R]) of one step."""
    d = step_dir(trace_dir, index)
    topk = np.load(os.path.join(d, "out_topk.npy"), allow_pickle=False)
    sparsity = np.load(os.path.join(d, "out_sparsity.npy"), allow_pickle=False)
    return topk, sparsity


def read_outputs(trace_dir, num_steps):
    return [read_step_outputs(trace_dir, t) for t in range(num_steps)]


def run_spin_exec(exe, trace_dir, args, timeout=300):
    """Run `spin-exec --trace DIR ARGS...`; returns the CompletedProcess."""
    cmd = [exe, "--trace", str(trace_dir)] + [str(a) for a in args]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout)
