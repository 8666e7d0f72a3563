"""The bad-input matrix of issue 28 (item 4): one table row per bad input.

Each case checks three things:

1. a clear error naming the offending value: a diagnostic on stderr and a
   non-zero exit for the tools, an exception of the right class whose
   message holds the offending name or value for Python;
2. no crash: a tool exits with a normal error code (not a signal, no LLVM
   crash dump); an in-process case leaves the interpreter working (a good
   step runs afterwards), and the risky ones (huge or negative sizes, values
   past the block table) run in a child interpreter first;
3. every request's state is byte-identical before and after (V, D,
   iteration and last_observed of every request of the State; a refused
   step or State call changes nothing, docs/Runtime-ABI.md).

Categories: the spin-opt, spin-compile and spin-exec command lines, the
Python API on the CPU (Indexer steps, State methods, spin.new_state,
Indexer and spin.compile options, Program.run), GPU artifacts and their
manifests (spin.read_manifest / spin.load; loading PTX needs CUDA), and
trace files (spin.traces / spin-replay). docs/Reliability.md lists what the
matrix found and how each finding was fixed.

    pytest --collect-only -q python/tests/test_bad_inputs.py | tail -1
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Tuple, Type

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Absolute: the command-line cases run in temporary working directories.
BUILD = os.path.abspath(os.environ.get("SPIN_BUILD_DIR", os.path.join(ROOT, "build")))
BIN = os.path.join(BUILD, "bin")
sys.path.insert(0, os.path.join(ROOT, "python", "spin"))
import traces  # noqa: E402  (from the source tree, as test_replay.py does)

HAVE_CUDA = torch is not None and torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="torch.cuda.is_available() is False")
TOY_STEP = os.path.join(ROOT, "runtime", "test", "Inputs", "toy_step")
DENSE_GPU = os.path.join(ROOT, "test", "Conversion", "SpinToGPU", "dense.mlir")
SELECT_GPU = os.path.join(ROOT, "test", "Conversion", "SpinToGPU", "fused-select.mlir")
STATIC_GRAPH = os.path.join(ROOT, "test", "Tools", "spin-compile.mlir")
GLM5 = os.path.join(ROOT, "examples", "glm5-indexer.mlir")
LINALG = os.path.join(ROOT, "examples", "upstream-linalg-indexer.mlir")


#===------------------------------------------------------------------------===#
# Command lines: spin-opt, spin-compile, spin-exec
#===------------------------------------------------------------------------===#

@dataclass
class Cli:
    id: str
    tool: str
    args: Sequence[str]
    needles: Sequence[str]          # each must appear in stderr
    marks: Tuple = ()
    writes_nothing: bool = False    # spin-compile: no manifest under -o


def _files(tmp):
    """Bad input files, by placeholder."""
    paths = {}
    for name, data in (
            ("unknown_op", b"func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                           b"  %y = spin.nonsense %x : tensor<4xf32>\n"
                           b"  return %y : tensor<4xf32>\n}\n"),
            ("truncated", b"func.func @f("),
            ("binary", b"\xff\xfe\x00garbage\x00\x01"),
            ("bad_type", b"func.func @f(%x: tensor<4xf33>) {\n  return\n}\n")):
        path = os.path.join(tmp, name + ".mlir")
        with open(path, "wb") as f:
            f.write(data)
        paths[name] = path
    paths["out"] = os.path.join(tmp, "out")
    paths["missing"] = os.path.join(tmp, "does-not-exist.mlir")
    return paths


CLI_CASES = [
    # -- spin-opt: files and IR
    Cli("opt-unknown-flag", "spin-opt", ["--no-such-flag", GLM5], ["'--no-such-flag'"]),
    Cli("opt-missing-file", "spin-opt", ["{missing}"], ["cannot open input file", "does-not-exist.mlir"]),
    Cli("opt-unknown-op", "spin-opt", ["{unknown_op}"], ["unknown_op.mlir:2:8", "'spin.nonsense' is unknown"]),
    Cli("opt-truncated-ir", "spin-opt", ["{truncated}"], ["truncated.mlir:1:", "error:"]),
    Cli("opt-binary-ir", "spin-opt", ["{binary}"], ["binary.mlir:1:1", "unexpected character"]),
    Cli("opt-bad-element-type", "spin-opt", ["{bad_type}"], ["bad_type.mlir:1:", "f33"]),
    Cli("opt-unknown-pass-in-pipeline", "spin-opt", ["--pass-pipeline=builtin.module(nope)", GLM5],
        ["'nope' does not refer to a registered pass"]),
    # -- spin-opt: pass options (the SIGFPE was warps-per-cta=0)
    Cli("opt-convert-gpu-warps-per-cta", "spin-opt", ["--convert-spin-to-gpu=warps-per-cta=0", DENSE_GPU],
        ["no such option warps-per-cta"]),
    Cli("opt-configure-warps-zero", "spin-opt", ["--spin-configure-gpu-kernels=warps-per-cta=0", DENSE_GPU],
        ["warps must be in [1, 32], got 0"]),
    Cli("opt-configure-warps-not-a-number", "spin-opt",
        ["--spin-configure-gpu-kernels=warps-per-cta=abc", DENSE_GPU], ["warps-per-cta", "'abc'"]),
    Cli("opt-configure-m-tiles-3", "spin-opt", ["--spin-configure-gpu-kernels=m-tiles=3", DENSE_GPU],
        ["m_tiles must be 1 or 2, got 3"]),
    Cli("opt-configure-sm-count-zero", "spin-opt", ["--spin-configure-gpu-kernels=sm-count=0", DENSE_GPU],
        ["sm-count must be positive (got 0)"]),
    Cli("opt-configure-sm-count-negative", "spin-opt",
        ["--spin-configure-gpu-kernels=sm-count=-5", DENSE_GPU], ["sm-count must be positive (got -5)"]),
    Cli("opt-configure-tiles-per-warp-negative", "spin-opt",
        ["--spin-configure-gpu-kernels=tiles-per-warp=-1", DENSE_GPU], ["tiles-per-warp", "-1"]),
    Cli("opt-configure-m-tiles-negative", "spin-opt",
        ["--spin-configure-gpu-kernels=m-tiles=-1", DENSE_GPU], ["m-tiles", "-1"]),
    Cli("opt-convert-gpu-capacity-negative", "spin-opt",
        ["--convert-spin-to-gpu=capacity=-1", SELECT_GPU], ["capacity", "-1"]),
    Cli("opt-sparsity-above-one", "spin-opt", ["--spin-sparsify-pipeline=sparsity=1.5", GLM5],
        ["option 'sparsity' must be in [0, 1], got 1.5"]),
    Cli("opt-sparsity-nan", "spin-opt", ["--spin-sparsify-pipeline=sparsity=nan", GLM5],
        ["option 'sparsity' must be in [0, 1], got nan"]),
    Cli("opt-ema-decay-negative", "spin-opt", ["--spin-sparsify-pipeline=ema-decay=-0.1", GLM5],
        ["option 'ema-decay' must be in [0, 1], got -0.1"]),
    Cli("opt-explore-two", "spin-opt", ["--spin-sparsify-pipeline=explore=2", GLM5],
        ["option 'explore' must be in [0, 1], got 2"]),
    Cli("opt-block-size-zero", "spin-opt", ["--spin-sparsify-pipeline=block-size=0", GLM5],
        ["option 'block-size' must be positive, got 0"]),
    Cli("opt-block-size-not-dividing", "spin-opt", ["--spin-sparsify-pipeline=block-size=7", GLM5],
        ["block-size 7 does not divide the page size 64"]),
    Cli("opt-pooling-unknown", "spin-opt", ["--spin-sparsify-pipeline=pooling=median", GLM5],
        ["--pooling", "'median'"]),
    Cli("opt-explore-policy-unknown", "spin-opt",
        ["--spin-sparsify-pipeline=explore-policy=oldest", GLM5], ["--explore-policy", "'oldest'"]),
    Cli("opt-unknown-pipeline-option", "spin-opt", ["--spin-sparsify-pipeline=no-such=1", GLM5],
        ["no such option no-such"]),
    Cli("opt-seed-negative", "spin-opt", ["--spin-sparsify-pipeline=seed=-1", GLM5],
        ["--seed", "'-1'"]),
    Cli("opt-raise-page-size-zero", "spin-opt", ["--spin-raise-indexer=page-size=0", LINALG],
        ["option 'page-size' must be positive, got 0"]),
    Cli("opt-scf-state-storage-unknown", "spin-opt", ["--convert-spin-to-scf=state-storage=heap", GLM5],
        ["option 'state-storage' must be 'arguments' or 'globals', got 'heap'"]),
    Cli("opt-scf-globals-zero-slots", "spin-opt",
        ["--convert-spin-to-scf=state-storage=globals num-slots=0", GLM5],
        ["'num-slots', 'capacity' and 'max-rows' must be positive"]),
    Cli("opt-nvvm-unknown-chip", "spin-opt", ["--spin-lower-to-nvvm=chips=sm_75", DENSE_GPU],
        ["unknown chip 'sm_75'"]),
    Cli("opt-nvvm-opt-level", "spin-opt", ["--spin-lower-to-nvvm=chips=sm_90a opt-level=9", DENSE_GPU],
        ["opt-level must be 0-3 (got 9)"]),
    # -- spin-compile
    Cli("compile-unknown-target", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--target=sm_75"],
        ["unknown chip 'sm_75'"], writes_nothing=True),
    Cli("compile-empty-target", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--target="],
        ["no target chip given"], writes_nothing=True),
    Cli("compile-ptx-version-text", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--ptx-version=abc"],
        ["--ptx-version must look like 88 or 8.8 (got 'abc')"], writes_nothing=True),
    Cli("compile-ptx-version-too-low", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--ptx-version=10"],
        ["sm_90a needs PTX version 7.8 or later (got 1.0)"], writes_nothing=True),
    Cli("compile-opt-level", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--opt-level=7"],
        ["opt-level must be 0-3 (got 7)"], writes_nothing=True),
    Cli("compile-sm-count-zero", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--sm-count=0"],
        ["--sm-count must be positive (got 0)"], writes_nothing=True),
    Cli("compile-m-tiles-5", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--m-tiles=5"],
        ["m_tiles must be 1 or 2, got 5"], writes_nothing=True),
    Cli("compile-dense-and-sparsify", "spin-compile",
        [STATIC_GRAPH, "-o", "{out}", "--dense", "--sparsify=sparsity=0.5"],
        ["--dense and --sparsify exclude each other"], writes_nothing=True),
    Cli("compile-sparsify-range", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--sparsify=sparsity=2"],
        ["option 'sparsity' must be in [0, 1], got 2"], writes_nothing=True),
    Cli("compile-sparsify-unknown-option", "spin-compile",
        [STATIC_GRAPH, "-o", "{out}", "--sparsify=bogus=1"], ["bad --sparsify options 'bogus=1'"],
        writes_nothing=True),
    Cli("compile-unknown-function", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--function=nope"],
        ["the graph has no function @nope"], writes_nothing=True),
    Cli("compile-missing-file", "spin-compile", ["{missing}", "-o", "{out}"],
        ["cannot read", "does-not-exist.mlir"], writes_nothing=True),
    Cli("compile-no-output-dir", "spin-compile", [STATIC_GRAPH], ["-o option", "must be specified"]),
    Cli("compile-unknown-op", "spin-compile", ["{unknown_op}", "-o", "{out}"],
        ["cannot parse the graph", "'spin.nonsense' is unknown"], writes_nothing=True),
    Cli("compile-unwritable-output", "spin-compile", [STATIC_GRAPH, "-o", "/proc/spin-bad-inputs"],
        ["cannot create /proc/spin-bad-inputs"]),
    Cli("compile-capacity-negative", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--capacity=-5"],
        ["capacity", "-5"], writes_nothing=True),
    Cli("compile-tiles-per-warp-negative", "spin-compile",
        [STATIC_GRAPH, "-o", "{out}", "--tiles-per-warp=-2"], ["tiles-per-warp", "-2"],
        writes_nothing=True),
    Cli("compile-m-tiles-negative", "spin-compile", [STATIC_GRAPH, "-o", "{out}", "--m-tiles=-3"],
        ["m-tiles", "-3"], writes_nothing=True),
    # fused fp8 key pages hold fp8 keys and their scales: bf16 keys have none
    Cli("compile-fused-pages-bf16-keys", "spin-compile",
        [STATIC_GRAPH, "-o", "{out}", "--fused-fp8-pages"],
        ["'spin.dense_indexer' op GPU path: fused-fp8-pages needs fp8 keys with scales"],
        writes_nothing=True),
    Cli("opt-fused-pages-bf16-keys", "spin-opt", ["--convert-spin-to-gpu=fused-fp8-pages=1", DENSE_GPU],
        ["dense.mlir:", "fused-fp8-pages needs fp8 keys with scales"]),
]


def _check_exit(done):
    """(2) of the module docstring for a subprocess."""
    assert done.returncode > 0, f"exit {done.returncode} (negative: a signal)\n{done.stderr}"
    assert done.returncode < 128, f"exit {done.returncode}: killed by a signal\n{done.stderr}"
    for crash in ("Stack dump", "PLEASE submit a bug report", "Segmentation fault",
                  "Assertion", "terminate called", "AddressSanitizer"):
        assert crash not in done.stderr, done.stderr


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CLI_CASES])
def test_command_line(case, tmp_path):
    paths = _files(str(tmp_path))
    args = [a.format(**paths) for a in case.args]
    done = subprocess.run([os.path.join(BIN, case.tool), *args], capture_output=True,
                          text=True, errors="replace", timeout=120, cwd=str(tmp_path))
    if done.returncode == 0:
        pytest.fail(f"{case.tool} accepted the bad input (exit 0)\n{done.stderr}")
    _check_exit(done)
    for needle in case.needles:
        assert needle in done.stderr, f"{needle!r} not in:\n{done.stderr}"
    if case.writes_nothing:
        assert not os.path.exists(os.path.join(paths["out"], "manifest.json"))


# -- spin-exec: its trace directory (tools/spin-exec) -------------------------

_EX = dict(H=2, D=8, S=16, MB=4, B=2, P=8)


def _exec_trace(root):
    """A good one-step spin-exec trace of two requests (ids 1 and 2)."""
    H, D, S, MB, B, P = (_EX[k] for k in ("H", "D", "S", "MB", "B", "P"))
    rng = np.random.default_rng(0)
    step = os.path.join(root, "step_0000")
    os.makedirs(step)
    np.save(os.path.join(root, "keys.npy"), rng.standard_normal((P, S, D)).astype("<f4"))
    arrays = {"q": rng.standard_normal((B, 1, H, D)).astype("<f4"),
              "w": rng.standard_normal((B, 1, H)).astype("<f4"),
              "block_table": np.stack([rng.permutation(P)[:MB] for _ in range(B)]).astype("<i4"),
              "lengths": np.full((B, 1), 30, "<i4"), "positions": np.full((B, 1), 29, "<i4"),
              "request_ids": np.array([1, 2], "<i8")}
    for name, array in arrays.items():
        np.save(os.path.join(step, name + ".npy"), array)
    return root


def _exec_args(trace):
    return ["--trace", trace, "--heads", str(_EX["H"]), "--head-dim", str(_EX["D"]),
            "--page-size", str(_EX["S"]), "--max-pages", str(_EX["MB"]), "--topk", "8",
            "--key-format", "f32", "--block-size=16", "--num-slots", "4"]


def _npy_header(shape, descr="<f4"):
    text = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    text += " " * (118 - len(text)) + "\n"
    return b"\x93NUMPY\x01\x00v\x00" + text.encode()


def _write(rel, data):
    def change(root):
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    return change


def _save(rel, array):
    return lambda root: np.save(os.path.join(root, rel), array)


def _truncate(rel, size=None, drop=None):
    def change(root):
        path = os.path.join(root, rel)
        with open(path, "r+b") as f:
            f.truncate(size if size is not None else os.path.getsize(path) - drop)
    return change


EXEC_CASES = [
    ("exec-truncated-keys", _truncate("keys.npy", drop=10), [], ["keys.npy' is truncated", "4086 data bytes"]),
    ("exec-truncated-header", _truncate("step_0000/q.npy", size=20), [],
     ["q.npy' is truncated: its header needs 128 bytes but the file has 20"]),
    ("exec-bad-magic", _write("step_0000/w.npy", b"\x93NUMPX" + bytes(200)), [],
     ["w.npy' is not a .npy file (bad magic)"]),
    ("exec-empty-npy", _write("step_0000/lengths.npy", b""), [],
     ["lengths.npy' is truncated: 0 bytes"]),
    ("exec-keys-float64", _save("keys.npy", np.zeros((8, 16, 8), "<f8")), [],
     ["keys.npy' has unsupported dtype '<f8'"]),
    ("exec-big-endian", _save("step_0000/lengths.npy", np.full((2, 1), 30, ">i4")), [],
     ["lengths.npy' has big-endian dtype '>i4'"]),
    ("exec-fortran-order", _save("step_0000/block_table.npy", np.asfortranarray(np.zeros((2, 4), "<i4"))),
     [], ["block_table.npy' is Fortran-ordered"]),
    ("exec-shape-overflow", _write("step_0000/w.npy", _npy_header((2 ** 62, 2 ** 62, 2))), [],
     ["w.npy' has a shape whose size overflows int64"]),
    ("exec-negative-shape", _write("step_0000/w.npy", _npy_header((-2, 1, 2))), [],
     ["w.npy' has a corrupt .npy header: 'shape'"]),
    ("exec-request-ids-int32", _save("step_0000/request_ids.npy", np.array([1, 2], "<i4")), [],
     ["request_ids.npy: dtype <i4, expected <i8"]),
    ("exec-request-ids-rank-2", _save("step_0000/request_ids.npy", np.array([[1, 2]], "<i8")),
     [], ["request_ids.npy has shape [1, 2]"]),
    ("exec-duplicate-request", _save("step_0000/request_ids.npy", np.array([1, 1], "<i8")), [],
     ["step_0000: request 1 appears twice in the batch (at 0 and 1)"]),
    ("exec-reset-float", _save("step_0000/reset.npy", np.array([0, 1], "<f4")), [],
     ["reset.npy: dtype <f4, expected |u1"]),
    ("exec-reset-length", _save("step_0000/reset.npy", np.array([0, 1, 0], "|u1")), [],
     ["reset.npy has shape [3], expected [2]"]),
    ("exec-commit-without-step", _save("step_0000/accepted.npy", np.array([0, 0], "<i4")), [],
     ["request 1 has no uncommitted verification step"]),
    ("exec-lengths-past-block-table", _save("step_0000/lengths.npy", np.array([[100], [30]], "<i4")), [],
     ["lengths[0][0] = 100 is outside [0, 64]"]),
    ("exec-block-table-past-keys", _save("step_0000/block_table.npy", np.full((2, 4), 50, "<i4")), [],
     ["block_table[0][0] = 50 is not a page of the key cache [0, 8)"]),
    ("exec-missing-q", lambda root: os.remove(os.path.join(root, "step_0000", "q.npy")), [],
     ["cannot open", "step_0000/q.npy"]),
    ("exec-key-format-unknown", None, ["--key-format=int4"], ["key format 'int4' is not one of"]),
    ("exec-fp8-queries-bf16-keys", None, ["--query-format=fp8"],
     ["query format 'fp8' needs fp8 keys, got key format 'f32'"]),
    ("exec-query-format-unknown", None, ["--query-format=f16"],
     ["query format 'f16' is not taken with key format 'f32'"]),
    ("exec-num-slots-zero", None, ["--num-slots=0"], ["numSlots must be positive, got 0"]),
    ("exec-sparsity-three", None, ["--sparsity=3"], ["option 'sparsity' must be in [0, 1], got 3"]),
    ("exec-heads-zero", None, ["--heads=0"], ["heads must be positive, got 0"]),
    ("exec-no-trace-flag", "no-trace", [], ["-trace option", "must be specified"]),
]


def _exec_param(case):
    return pytest.param(*case[:4], id=case[0], marks=case[4:])


@pytest.mark.parametrize("name,change,extra,needles", [_exec_param(c) for c in EXEC_CASES])
def test_spin_exec(name, change, extra, needles, tmp_path):
    trace = _exec_trace(str(tmp_path / "trace"))
    if callable(change):
        change(trace)
    args = [] if change == "no-trace" else _exec_args(trace)
    done = subprocess.run([os.path.join(BIN, "spin-exec"), *args, *extra], capture_output=True,
                          text=True, errors="replace", timeout=120)
    if done.returncode == 0:
        pytest.fail(f"spin-exec accepted the bad input\n{done.stderr}")
    _check_exit(done)
    for needle in needles:
        assert needle in done.stderr, f"{needle!r} not in:\n{done.stderr}"
    # Nothing of the refused step was written.
    assert not os.path.exists(os.path.join(trace, "step_0000", "out_topk.npy"))


#===------------------------------------------------------------------------===#
# The Python API on the CPU
#===------------------------------------------------------------------------===#

H, D, S, BS, K, MB, P = 2, 8, 16, 16, 8, 4, 8
IDS = (1, 2, 3)                     # in the State; steps run 1 and 2


class Ctx:
    """A fresh State holding requests 1, 2, 3 after two good steps (so their
    V, D, iteration and last_observed are not zero), and the good inputs of
    a step of requests 1 and 2."""

    def __init__(self, indexer):
        rng = np.random.default_rng(7)
        self.indexer = indexer
        self.keys = rng.standard_normal((P, S, D)).astype(np.float32)
        self.q = rng.standard_normal((2, 1, H, D)).astype(np.float32)
        self.w = rng.standard_normal((2, 1, H)).astype(np.float32)
        self.table = np.stack([rng.permutation(P)[:MB] for _ in range(2)]).astype(np.int32)
        self.lengths = np.array([[30], [41]], np.int32)
        self.positions = self.lengths - 1
        self.ids = np.array([1, 2], np.int64)
        self.state = indexer.new_state(capacity_slots=MB * S, max_requests=4)
        for i in IDS:
            self.state.add(i)
        for _ in range(2):
            self.step()
            self.step(ids=np.array([3, 1], np.int64))

    def step(self, state=None, ids=None, layer=0, indexer=None, **over):
        a = dict(q=self.q, w=self.w, keys=self.keys, block_table=self.table,
                 lengths=self.lengths, positions=self.positions)
        a.update(over)
        return (indexer or self.indexer)(
            a["q"], a["w"], a["keys"], a["block_table"], a["lengths"], a["positions"],
            self.state if state is None else state,
            request_ids=self.ids if ids is None else ids, layer=layer, **a.get("extra", {}))

    def snapshot(self):
        """Every request's state, as bytes."""
        out = {}
        for i in IDS:
            if i not in self.state:
                out[i] = None
                continue
            v, d = self.state.ema(i)
            out[i] = (v.tobytes(), d.tobytes(), self.state.iteration(i),
                      self.state.last_observed(i).tobytes())
        return out


@dataclass
class Api:
    id: str
    call: Callable[[Ctx], object]
    error: Type[BaseException]
    needles: Sequence[str]
    risky: bool = False             # run in a child interpreter first
    marks: Tuple = ()


def _f32(shape, value=0.0):
    return np.full(shape, value, np.float32)


def _i32(rows):
    return np.array(rows, np.int32)


def _other_indexer(c):
    return spin.Indexer(heads=H, head_dim=D, block_size=8, page_size=S, topk=K,
                        key_format="f32")


API_CASES = [
    # -- step inputs: dtype, rank, shape, strides, container, device
    Api("step-w-float64", lambda c: c.step(w=c.w.astype(np.float64)), TypeError,
        ["w has dtype float64, expected float32"]),
    Api("step-q-rank-3", lambda c: c.step(q=c.q[0]), ValueError, ["q must have rank 4", "(1, 2, 8)"]),
    Api("step-q-head-dim", lambda c: c.step(q=np.ascontiguousarray(c.q[..., :4])), ValueError,
        ["q has shape (2, 1, 2, 4), expected [2, 1, 2, 8]"]),
    Api("step-keys-page-size", lambda c: c.step(keys=_f32((P, 8, D))), ValueError,
        ["keys has shape (8, 8, 8), expected [?, 16, 8]"]),
    Api("step-keys-fortran", lambda c: c.step(keys=np.asfortranarray(c.keys)), ValueError,
        ["keys is not C-contiguous"]),
    Api("step-w-strided", lambda c: c.step(w=_f32((2, 1, 2 * H))[:, :, ::2]), ValueError,
        ["w is not C-contiguous"]),
    Api("step-block-table-list", lambda c: c.step(block_table=c.table.tolist()), TypeError,
        ["block_table must be a numpy array or a torch tensor, got list"]),
    Api("step-lengths-int64", lambda c: c.step(lengths=c.lengths.astype(np.int64)), TypeError,
        ["lengths has dtype int64, expected int32"]),
    Api("step-lengths-two-rows", lambda c: c.step(lengths=_i32([[30, 30], [41, 41]])), ValueError,
        ["'lengths' has shape [2, 2], expected [?, 1]"]),
    Api("step-w-batch", lambda c: c.step(w=_f32((3, 1, H))), ValueError,
        ["'w' has batch size 3 but other inputs have 2"]),
    Api("step-w-heads", lambda c: c.step(w=_f32((2, 1, H + 1))), ValueError,
        ["'w' has shape [2, 1, 3], expected [?, 1, 2]"]),
    Api("step-scales-with-f32-keys", lambda c: c.step(extra={"scales": _f32((P, S))}), ValueError,
        ["scales are only taken with fp8 keys, not f32"]),
    # -- request ids
    Api("step-unknown-request", lambda c: c.step(ids=np.array([1, 99], np.int64)), ValueError,
        ["request 99 is not in the state pool"]),
    Api("step-duplicate-request", lambda c: c.step(ids=np.array([2, 2], np.int64)), ValueError,
        ["request 2 appears twice in the batch (at 0 and 1)"]),
    Api("step-negative-request", lambda c: c.step(ids=np.array([1, -1], np.int64)), ValueError,
        ["request -1 is not in the state pool"]),
    Api("step-request-ids-int32", lambda c: c.step(ids=np.array([1, 2], np.int32)), TypeError,
        ["request_ids has dtype int32, expected int64"]),
    Api("step-request-ids-short", lambda c: c.step(ids=np.array([1], np.int64)), ValueError,
        ["'request_ids' has batch size 1 but other inputs have 2"]),
    # -- values: block table, lengths, positions (read by the step: risky)
    Api("step-block-table-past-keys", lambda c: c.step(block_table=np.where(c.table == c.table[0, 0], 99, c.table).astype(np.int32)),
        ValueError, ["= 99 is not a page of the key cache [0, 8)"], risky=True),
    Api("step-block-table-negative", lambda c: c.step(block_table=np.where(c.table == c.table[1, 0], -1, c.table).astype(np.int32)),
        ValueError, ["= -1 is not a page of the key cache"], risky=True),
    Api("step-lengths-past-block-table", lambda c: c.step(lengths=_i32([[65], [41]]), positions=_i32([[64], [40]])),
        ValueError, ["lengths[0][0] = 65 is outside [0, 64] (block table width 4 x page size 16)"], risky=True),
    Api("step-lengths-huge", lambda c: c.step(lengths=_i32([[30], [2 ** 31 - 1]]), positions=_i32([[29], [2 ** 31 - 1]])),
        ValueError, ["lengths[1][0] = 2147483647 is outside [0, 64]"], risky=True),
    Api("step-lengths-negative", lambda c: c.step(lengths=_i32([[-1], [41]])), ValueError,
        ["lengths[0][0] = -1 must be >= 0"], risky=True),
    Api("step-positions-below-lengths", lambda c: c.step(positions=_i32([[5], [40]])), ValueError,
        ["positions[0][0] = 5 must be at least lengths[0][0] - 1 = 29"], risky=True),
    Api("step-positions-past-capacity", lambda c: c.step(block_table=np.concatenate([c.table, c.table[:, :2]], 1),
                                                         lengths=_i32([[90], [41]]), positions=_i32([[89], [40]])),
        ValueError, ["positions[0][0] = 89 exceeds the state capacity of 64 slots"], risky=True),
    # -- state and layer
    Api("step-layer-out-of-range", lambda c: c.step(layer=3), ValueError,
        ["layer 3 is outside the state's 1 layers"]),
    Api("step-state-not-a-state", lambda c: c.step(state=object()), TypeError,
        ["state must be a spin.State, got object"]),
    Api("step-state-of-another-indexer", lambda c: c.step(indexer=_other_indexer(c)), ValueError,
        ["state was made for another indexer"]),
    Api("step-state-without-last-observed",
        lambda c: c.step(state=spin.new_state(MB * S, max_requests=4, block_size=BS)), ValueError,
        ["explore_policy 'block-age' needs a state that keeps last_observed"]),
    # -- State methods
    Api("state-commit-without-a-step", lambda c: c.state.commit(1, 0), ValueError,
        ["request 1 has no uncommitted verification step"]),
    Api("state-commit-unknown-request", lambda c: c.state.commit(5, 0), ValueError,
        ["request 5 is not in the state pool"]),
    Api("state-add-duplicate", lambda c: c.state.add(2), ValueError,
        ["request 2 is already in the state pool"]),
    Api("state-add-when-full", lambda c: (c.state.add(4), c.state.add(5)), ValueError,
        ["state pool is full: 4 of 4 slots in use"]),
    Api("state-release-unknown", lambda c: c.state.release(7), ValueError,
        ["request 7 is not in the state pool"]),
    Api("state-reset-unknown", lambda c: c.state.reset(7), ValueError,
        ["request 7 is not in the state pool"]),
    Api("state-iteration-bad-layer", lambda c: c.state.iteration(1, 3), ValueError,
        ["layer 3 is out of range: the pool has 1 layers"]),
    Api("state-ema-negative-layer", lambda c: c.state.ema(1, -1), ValueError,
        ["layer -1 is out of range"]),
    Api("state-request-id-too-large", lambda c: c.state.add(2 ** 70), ValueError,
        ["request_id 1180591620717411303424 does not fit in int64"]),
    Api("state-request-id-not-an-integer", lambda c: c.state.reset("x"), TypeError,
        ["request_id must be an integer, got 'x'"]),
    Api("state-accepted-not-an-integer", lambda c: c.state.commit(1, 1.5), TypeError,
        ["accepted must be an integer, got 1.5"]),
    Api("state-used-after-close", lambda c: (c.state.close(), c.step()), RuntimeError,
        ["this State is closed"]),
]


def _run_api(case, ctx):
    """(1) and (3) of the module docstring for one case in this process."""
    before = ctx.snapshot()
    with pytest.raises(case.error) as raised:
        case.call(ctx)
    message = str(raised.value)
    for needle in case.needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    extra = [i for i in (4, 5) if i in ctx.state]
    for i in extra:                             # requests the case itself added
        ctx.state.release(i)
    assert ctx.snapshot() == before, "a refused call changed a request's state"
    # The runtime is left working: a good step runs.
    top = ctx.step()
    assert top.shape == (2, 1, K)


@pytest.fixture(scope="module")
def indexer():
    return spin.Indexer(heads=H, head_dim=D, block_size=BS, topk=K, sparsity=0.5,
                        explore=0.25, explore_policy="block-age", key_format="f32")


CHILD = r"""
import sys
sys.argv = ["pytest"]
sys.path.insert(0, {here!r})
import test_bad_inputs as t
case = {{c.id: c for c in t.API_CASES}}[{case!r}]
ctx = t.Ctx(t.spin.Indexer(heads=t.H, head_dim=t.D, block_size=t.BS, topk=t.K, sparsity=0.5,
                           explore=0.25, explore_policy="block-age", key_format="f32"))
before = ctx.snapshot()
try:
    case.call(ctx)
except case.error as e:
    print("REFUSED:", e)
else:
    print("ACCEPTED")
print("SAME" if ctx.snapshot() == before else "CHANGED")
ctx.step()
print("ALIVE")
"""


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in API_CASES])
def test_python_api(case, indexer):
    ctx = Ctx(indexer)
    if case.id == "state-used-after-close":
        before = ctx.snapshot()
        state = ctx.state
        pool = state._pool
        with pytest.raises(RuntimeError, match="this State is closed"):
            case.call(ctx)
        state._pool = pool                      # the pool itself: untouched
        assert ctx.snapshot() == before
        return
    if case.risky:
        # First in a child interpreter: a crash there fails this case
        # instead of killing pytest.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(BUILD, "python"), os.path.join(ROOT, "test", "reference"), HERE]))
        done = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE, case=case.id)],
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, f"child exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        assert "REFUSED:" in done.stdout and "SAME" in done.stdout and "ALIVE" in done.stdout, \
            done.stdout + done.stderr
    _run_api(case, ctx)


def test_mtp_step_without_commit_and_a_bad_commit(rng):
    """MTP: the next step needs the commit of the last one, and a commit of
    more rows than the step had is refused; nothing changes either way."""
    mtp = spin.Indexer(heads=H, head_dim=D, block_size=BS, topk=K, sparsity=0.5, rows=2,
                       key_format="f32")
    keys = rng.standard_normal((P, S, D)).astype(np.float32)
    q = rng.standard_normal((2, 2, H, D)).astype(np.float32)
    w = rng.standard_normal((2, 2, H)).astype(np.float32)
    table = np.stack([rng.permutation(P)[:MB] for _ in range(2)]).astype(np.int32)
    n = np.array([[30, 31], [40, 41]], np.int32)
    state = mtp.new_state(capacity_slots=MB * S, max_requests=4)
    for i in IDS:
        state.add(i)
    ids = np.array([1, 2], np.int64)
    mtp(q, w, keys, table, n, n - 1, state, request_ids=ids)

    def snap():
        return {i: (state.ema(i)[0].tobytes(), state.ema(i)[1].tobytes(), state.iteration(i))
                for i in IDS}
    before = snap()
    with pytest.raises(ValueError, match="commit") as e:
        mtp(q, w, keys, table, n + 2, n + 1, state, request_ids=ids)
    assert "request 1" in str(e.value)
    with pytest.raises(ValueError) as e:
        state.commit(1, 5)
    assert "5" in str(e.value)
    with pytest.raises(ValueError) as e:
        state.commit(2, -4)
    assert "-4" in str(e.value)
    assert snap() == before
    state.commit(1, 1)
    state.commit(2, 0)
    mtp(q, w, keys, table, n + 2, n + 1, state, request_ids=ids)


# -- spin.new_state, Indexer and spin.compile options, Program.run ----------

@dataclass
class Opt:
    id: str
    call: Callable[[], object]
    error: Type[BaseException]
    needles: Sequence[str]
    marks: Tuple = ()


def _glm5():
    with open(GLM5) as f:
        return f.read()


OPTION_CASES = [
    Opt("new-state-zero-capacity", lambda: spin.new_state(0), ValueError,
        ["capacity_slots must be a positive integer, got 0"]),
    Opt("new-state-negative-layers", lambda: spin.new_state(64, layers=-2), ValueError,
        ["layers must be a positive integer, got -2"]),
    Opt("new-state-huge-capacity", lambda: spin.new_state(2 ** 62), ValueError,
        ["capacity = 4611686018427387904 exceeds 2147483647"]),
    Opt("new-state-huge-pool", lambda: spin.new_state(2 ** 40, max_requests=2 ** 20), ValueError,
        ["capacity = 1099511627776"]),
    Opt("new-state-block-size-text", lambda: spin.new_state(64, block_size="64"), ValueError,
        ["block_size must be a positive integer, got '64'"]),
    Opt("new-state-max-requests-float", lambda: spin.new_state(64, max_requests=2.5), ValueError,
        ["max_requests must be a positive integer, got 2.5"]),
    Opt("new-state-layers-bool", lambda: spin.new_state(64, layers=True), ValueError,
        ["layers must be a positive integer, got True"]),
    Opt("indexer-sparsity-nan", lambda: spin.Indexer(sparsity=float("nan")), ValueError,
        ["sparsity must be in [0, 1], got nan"]),
    Opt("indexer-ema-decay-inf", lambda: spin.Indexer(ema_decay=float("inf")), ValueError,
        ["ema_decay must be in [0, 1], got inf"]),
    Opt("indexer-sparsity-text", lambda: spin.Indexer(sparsity="high"), TypeError,
        ["sparsity must be a number, got 'high'"]),
    Opt("indexer-unknown-option", lambda: spin.Indexer(sparsty=0.5), TypeError, ["'sparsty'"]),
    Opt("indexer-heads-text", lambda: spin.Indexer(heads="4"), ValueError,
        ["heads must be a positive integer, got '4'"]),
    Opt("indexer-topk-negative", lambda: spin.Indexer(topk=-1), ValueError,
        ["topk must be a positive integer, got -1"]),
    Opt("indexer-page-size-zero", lambda: spin.Indexer(block_size=16, page_size=0), ValueError,
        ["page_size 0"]),
    Opt("indexer-explore-policy", lambda: spin.Indexer(explore_policy="oldest"), ValueError,
        ["explore_policy must be one of", "'oldest'"]),
    Opt("indexer-device", lambda: spin.Indexer(device="tpu"), ValueError, ["'tpu'"]),
    Opt("compile-unknown-option", lambda: spin.compile(_glm5(), "glm5_indexer_layer", {"bogus": 1}),
        ValueError, ["unknown spin-sparsify-pipeline option 'bogus'"]),
    Opt("compile-option-type", lambda: spin.compile(_glm5(), "glm5_indexer_layer", {"sparsity": "high"}),
        TypeError, ["option 'sparsity' takes a float, got 'high'"]),
    Opt("compile-option-bool-for-int", lambda: spin.compile(_glm5(), "glm5_indexer_layer", {"block_size": True}),
        TypeError, ["option 'block-size' takes an int, got True"]),
    Opt("compile-option-enum", lambda: spin.compile(_glm5(), "glm5_indexer_layer", {"pooling": "median"}),
        ValueError, ["option 'pooling' has no value 'median'"]),
    Opt("compile-option-nan", lambda: spin.compile(_glm5(), "glm5_indexer_layer", {"sparsity": float("nan")}),
        ValueError, ["option 'sparsity' must be in [0, 1], got nan"]),
    Opt("compile-seed-negative", lambda: spin.compile(_glm5(), "glm5_indexer_layer", {"seed": -1}),
        ValueError, ["option 'seed' is out of range for uint64: -1"]),
    Opt("compile-options-not-a-dict", lambda: spin.compile(_glm5(), "glm5_indexer_layer", ["sparsity"]),
        TypeError, ["options must be a dict, got ['sparsity']"]),
    Opt("compile-bad-ir", lambda: spin.compile("func.func @f(", "f"), ValueError,
        ["cannot parse the graph", "1:13"]),
    Opt("compile-unknown-function", lambda: spin.compile(_glm5(), "nope"), ValueError,
        ["no function @nope"]),
    Opt("compile-unknown-target", lambda: spin.compile(_glm5(), "glm5_indexer_layer", target="tpu"),
        ValueError, ["target must be 'cpu' or 'cuda', got 'tpu'"]),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in OPTION_CASES])
def test_options(case):
    with pytest.raises(case.error) as raised:
        case.call()
    for needle in case.needles:
        assert needle in str(raised.value), f"{needle!r} not in {raised.value!s}"


@pytest.fixture(scope="module")
def program():
    text = spin._spin.build_indexer_graph(heads=H, head_dim=D, rows=1, topk=K, page_size=S,
                                          max_pages=MB, key_format="f32", layer=0)
    return spin.compile(text, "indexer_layer", {"sparsity": 0.5, "block_size": BS})


PROGRAM_CASES = [
    ("run-missing-input", lambda a: a.pop("w"), ValueError, ["missing input 'w'"]),
    ("run-unknown-input", lambda a: a.update(z=a["w"]), ValueError, ["unknown inputs ['z']"]),
    ("run-q-float64", lambda a: a.update(q=a["q"].astype(np.float64)), TypeError,
     ["q has dtype float64, expected float32"]),
    ("run-unknown-request", lambda a: a.update(request_ids=np.array([1, 8], np.int64)), ValueError,
     ["request 8 is not in the state pool"]),
    ("run-block-table-past-keys", lambda a: a.update(block_table=np.full((2, MB), P, np.int32)),
     ValueError, ["block_table[0][0] = 8 is not a page of the key cache [0, 8)"]),
]


@pytest.mark.parametrize("name,change,error,needles", [pytest.param(*c, id=c[0]) for c in PROGRAM_CASES])
def test_program_run(name, change, error, needles, program):
    rng = np.random.default_rng(3)
    state = spin.new_state(capacity_slots=MB * S, max_requests=4, block_size=BS)
    for i in IDS:
        state.add(i)
    good = dict(q=rng.standard_normal((2, 1, H, D)).astype(np.float32),
                w=rng.standard_normal((2, 1, H)).astype(np.float32),
                keys=rng.standard_normal((P, S, D)).astype(np.float32),
                block_table=np.stack([rng.permutation(P)[:MB] for _ in range(2)]).astype(np.int32),
                lengths=np.array([[30], [41]], np.int32), positions=np.array([[29], [40]], np.int32),
                request_ids=np.array([1, 2], np.int64))
    program.run(state, **good)
    program.run(state, **dict(good, request_ids=np.array([3, 2], np.int64)))
    snap = lambda: {i: (state.ema(i)[0].tobytes(), state.ema(i)[1].tobytes(),  # noqa: E731
                        state.iteration(i)) for i in IDS}
    before = snap()
    bad = dict(good)
    change(bad)
    with pytest.raises(error) as raised:
        program.run(state, **bad)
    for needle in needles:
        assert needle in str(raised.value), f"{needle!r} not in {raised.value!s}"
    assert snap() == before
    assert program.run(state, **good)["topk"].shape == (2, 1, K)


#===------------------------------------------------------------------------===#
# GPU artifacts and their manifests
#===------------------------------------------------------------------------===#

def _edit(change):
    def apply(artifact):
        path = os.path.join(artifact, "manifest.json")
        with open(path) as f:
            manifest = json.load(f)
        change(manifest)
        with open(path, "w") as f:
            json.dump(manifest, f)
    return apply


def _manifest_bytes(cut):
    def apply(artifact):
        path = os.path.join(artifact, "manifest.json")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(cut(data))
    return apply


MANIFEST_CASES = [
    ("manifest-truncated", _manifest_bytes(lambda d: d[:len(d) // 2]), ["manifest.json: JSON error at byte"]),
    ("manifest-empty", _manifest_bytes(lambda d: b""), ["JSON error at byte 0: unexpected end of input"]),
    ("manifest-nul-byte", _manifest_bytes(lambda d: d[:100] + b"\x00" + d[101:]),
     ["JSON error at byte 100: control character"]),
    ("manifest-too-deep", _manifest_bytes(lambda d: b"[" * 100000), ["nesting deeper than 256 levels"]),
    ("manifest-top-level-array", _manifest_bytes(lambda d: b"[1, 2]"),
     ["expected an object at the top level, got an array"]),
    ("manifest-missing", lambda a: os.remove(os.path.join(a, "manifest.json")), ["has no manifest.json"]),
    ("manifest-format", _edit(lambda m: m.update(format="onnx")),
     ['format: expected "spin-gpu-artifact", got "onnx"']),
    ("manifest-version", _edit(lambda m: m.update(version=99)), ["version: version 99 is not supported"]),
    ("manifest-version-text", _edit(lambda m: m.update(version="1")),
     ["version: expected an integer, got a string"]),
    ("manifest-missing-ptx-file", lambda a: os.remove(os.path.join(a, "sm_90.ptx")),
     ['ptx.sm_90: PTX file "sm_90.ptx" is not in']),
    ("manifest-ptx-path-escapes", _edit(lambda m: m["ptx"].update(sm_90="../../x.ptx")),
     ['ptx.sm_90: expected a file name in the artifact directory, got "../../x.ptx"']),
    ("manifest-batch-negative", _edit(lambda m: m.update(batch=-4)), ["batch: -4 is outside [1, 2147483647]"]),
    ("manifest-batch-huge", _edit(lambda m: m.update(batch=2 ** 62)), ["batch: 4611686018427387904 is outside"]),
    ("manifest-state-capacity-zero", _edit(lambda m: m["state"].update(capacity=0)),
     ["state.capacity: 0 is outside"]),
    ("manifest-shape-negative", _edit(lambda m: m["arguments"][0].update(shape=[-1, -8])),
     ["arguments[0].shape[1]: -8 is outside"]),
    ("manifest-unknown-dtype", _edit(lambda m: m["arguments"][0].update(dtype="float")),
     ['arguments[0].dtype: unknown element type "float"']),
    ("manifest-unknown-role", _edit(lambda m: m["arguments"][0].update(role="weights")),
     ['arguments[0].role: unknown role "weights"']),
    ("manifest-duplicate-name", _edit(lambda m: m["arguments"][5].update(name="x")),
     ['arguments[5].name: "x" is also the name of arguments[0]']),
    ("manifest-scratch-negative", _edit(lambda m: m["scratch"][0].update(bytes=-1)),
     ["scratch[0].bytes: -1 is outside"]),
    ("manifest-block-too-large", _edit(lambda m: m["kernels"][0].update(block=[4096, 1, 1])),
     ["kernels[0].block[0]: 4096 is outside [1, 1024]"]),
    ("manifest-launch-grid-zero", _edit(lambda m: m["launches"][0].update(grid=[0, 1, 1])),
     ["launches[0].grid[0]: 0 is outside"]),
    ("manifest-launch-stream", _edit(lambda m: m["launches"][0].update(stream=7)),
     ["launches[0].stream: 7 is out of range: the program has 2 streams"]),
    ("manifest-launch-wait-event", _edit(lambda m: m["launches"][1].update(wait=[5])),
     ["launches[1].wait[0]: event 5 is out of range"]),
    ("manifest-launch-kernel", _edit(lambda m: m["launches"][0].update(kernel="nope")),
     ['launches[0].kernel: kernel "nope" is not in the manifest\'s "kernels"']),
    ("manifest-launch-arg-index", _edit(lambda m: m["launches"][1]["args"][0].update(index=12)),
     ["launches[1].args[0].index: 12 is out of range: the step has 7 arguments"]),
    ("manifest-launch-arg-kind", _edit(lambda m: m["launches"][1]["args"][0].update(kind="pointer")),
     ['launches[1].args[0].kind: unknown kind "pointer"']),
    ("manifest-launch-arg-dim", _edit(lambda m: m["launches"][0]["args"][5].update(dim=9)),
     ['launches[0].args[5].dim: 9 is out of range: argument "x" has rank 2']),
    ("manifest-no-launches", _edit(lambda m: m.pop("launches")), ['missing member "launches"']),
]


@pytest.mark.parametrize("name,change,needles", [pytest.param(*c, id=c[0]) for c in MANIFEST_CASES])
def test_manifest(name, change, needles, tmp_path):
    artifact = str(tmp_path / "artifact")
    shutil.copytree(TOY_STEP, artifact)
    change(artifact)
    # spin.load validates the manifest before it needs CUDA: the same error
    # with and without a GPU.
    for reader in (spin.read_manifest, spin.load):
        with pytest.raises(ValueError) as raised:
            reader(artifact)
        message = str(raised.value)
        assert artifact in message, message
        for needle in needles:
            assert needle in message, f"{needle!r} not in {message!r}"


def _ptx_without_second_kernel(artifact):
    path = os.path.join(artifact, "sm_90.ptx")
    with open(path) as f:
        ptx = f.read()
    with open(path, "w") as f:
        f.write(ptx[:ptx.index(".visible .entry spin_test_scale")])


GPU_CASES = [
    ("ptx-not-ptx", _write("sm_90.ptx", b".version 8.0\n.target sm_90\nthis is not PTX\n"),
     ["sm_90.ptx: cuModuleLoadDataEx"]),
    ("ptx-missing-kernel", _ptx_without_second_kernel, ['kernel "spin_test_scale"']),
    ("ptx-truncated", _truncate("sm_90.ptx", size=100), ["sm_90.ptx"]),
]


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("name,change,needles", [pytest.param(*c, id=c[0]) for c in GPU_CASES])
def test_gpu_artifact_load(name, change, needles, tmp_path):
    artifact = str(tmp_path / "artifact")
    shutil.copytree(TOY_STEP, artifact)
    change(artifact)
    spin.read_manifest(artifact)                # the manifest itself is fine
    with pytest.raises(RuntimeError) as raised:
        spin.load(artifact)
    for needle in needles:
        assert needle in str(raised.value), str(raised.value)
    assert spin.load(TOY_STEP).chip == "sm_90"  # the driver is still usable


#===------------------------------------------------------------------------===#
# Trace files (spin.traces, spin-replay)
#===------------------------------------------------------------------------===#

@pytest.fixture(scope="module")
def trace_template(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("trace") / "t")
    return traces.generate(root, layers=1, steps=2, batch=2, context=64, heads=2, head_dim=8,
                           topk=8, page_size=16)


def _header(change):
    def apply(root):
        path = os.path.join(root, "header.json")
        with open(path) as f:
            header = json.load(f)
        change(header)
        with open(path, "w") as f:
            json.dump(header, f)
    return apply


def _keys_header_overflow(root):
    path = os.path.join(root, "layer_000", "keys.npy")
    keys = np.load(path)
    with open(path, "wb") as f:
        f.write(_npy_header((2 ** 62,) + keys.shape[1:]) + keys.tobytes())


L0 = "layer_000"
ST0 = os.path.join(L0, "step_00000")
TRACE_CASES = [
    ("trace-truncated-npy", _truncate(os.path.join(L0, "keys.npy"), drop=100), False,
     ["keys.npy: truncated: header says shape"]),
    ("trace-garbage-npy", _write(os.path.join(ST0, "q.npy"), b"hello, not numpy"), False,
     ["q.npy: not a valid .npy file"]),
    ("trace-lengths-int64", _save(os.path.join(ST0, "lengths.npy"), np.full((2, 1), 30, np.int64)), False,
     ["lengths.npy: dtype int64 is not allowed for lengths"]),
    ("trace-q-float64", _save(os.path.join(ST0, "q.npy"), np.zeros((2, 1, 2, 8))), False,
     ["q.npy: dtype float64 is not allowed for q"]),
    ("trace-q-shape", _save(os.path.join(ST0, "q.npy"), np.zeros((2, 1, 3, 8), np.float32)), False,
     ["q.npy: shape (2, 1, 3, 8) does not match the header"]),
    ("trace-fortran", _save(os.path.join(ST0, "lengths.npy"), np.asfortranarray(np.full((2, 3), 30, np.int32))),
     False, ["lengths.npy: Fortran-ordered arrays are not allowed"]),
    ("trace-object-array", _write(os.path.join(ST0, "positions.npy"), _npy_header((2, 1), "|O") + bytes(16)),
     False, ["positions.npy: object arrays are not allowed"]),
    ("trace-keys-size-overflow", _keys_header_overflow, False,
     ["keys.npy: truncated: header says shape (4611686018427387904, 16, 8)"]),
    ("trace-missing-q", lambda r: os.remove(os.path.join(r, ST0, "q.npy")), False,
     ["step_00000/q.npy: missing file"]),
    ("trace-header-json", _write("header.json", b'{"format": "spin-trace",, }'), False,
     ["header.json: not valid JSON"]),
    ("trace-header-truncated", lambda r: _truncate("header.json", size=os.path.getsize(
        os.path.join(r, "header.json")) // 2)(r), False, ["header.json: not valid JSON"]),
    ("trace-header-format", _header(lambda h: h.update(format="other")), False,
     ["header.json: format is 'other', expected 'spin-trace'"]),
    ("trace-header-version", _header(lambda h: h.update(version=7)), False,
     ["header.json: version 7 is not supported"]),
    ("trace-header-batch-negative", _header(lambda h: h.update(batch=-2)), False,
     ["field 'batch' must be a positive integer, got -2"]),
    ("trace-lengths-zero", _save(os.path.join(ST0, "lengths.npy"), np.zeros((2, 1), np.int32)), True,
     ["step_00000: lengths.npy has a value 0 < 1"]),
    ("trace-lengths-past-table", _save(os.path.join(ST0, "lengths.npy"), np.full((2, 1), 10 ** 6, np.int32)),
     True, ["lengths.npy has a value 1000000 larger than block_table width x page_size"]),
]


@pytest.mark.parametrize("name,change,at_step,needles", [pytest.param(*c, id=c[0]) for c in TRACE_CASES])
def test_trace(name, change, at_step, needles, trace_template, tmp_path):
    root = str(tmp_path / "t")
    shutil.copytree(trace_template, root)
    change(root)
    with pytest.raises(traces.TraceError) as raised:
        trace = traces.load_trace(root)
        if at_step:
            trace.step(0, 0)
    message = str(raised.value)
    assert isinstance(raised.value, ValueError)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"


@pytest.mark.parametrize("name,change,needles", [
    pytest.param("replay-cli-corrupt-header", _write("header.json", b"\x00\x01"),
                 ["header.json: not valid JSON"], id="replay-cli-corrupt-header"),
    pytest.param("replay-cli-truncated-npy", _truncate(os.path.join(L0, "keys.npy"), drop=100),
                 ["keys.npy: truncated"], id="replay-cli-truncated-npy"),
])
def test_spin_replay_cli(name, change, needles, trace_template, tmp_path):
    root = str(tmp_path / "t")
    shutil.copytree(trace_template, root)
    change(root)
    done = subprocess.run([os.path.join(ROOT, "tools", "spin-replay", "spin-replay"), root,
                           "--sparsity", "0.5", "--quiet"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, SPIN_BUILD_DIR=BUILD))
    assert done.returncode == 2, done.stderr
    _check_exit(done)
    for needle in needles:
        assert needle in done.stderr, done.stderr
