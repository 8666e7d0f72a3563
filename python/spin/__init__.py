"""spin: SPIN (Shadow Predictive Indexer) for indexer-based sparse attention.

SPIN predicts which KV blocks matter at a decode step from exponential moving
averages of earlier indexer scores, and scores only those blocks. This
package compiles an indexer layer through spin's MLIR pipelines, runs it on
numpy arrays or torch tensors, and keeps the per-request SPIN state::

    import numpy as np, spin

    indexer = spin.Indexer(heads=4, head_dim=16, block_size=16, topk=32,
                           sparsity=0.5, key_format="f32")
    state = indexer.new_state(capacity_slots=1024, max_requests=8)
    state.add(7)                                   # after prefill
    top = indexer(q, w, keys, block_table, lengths, positions, state,
                  request_ids=np.array([7]))

``Indexer(..., device="cuda")`` runs the same steps on CUDA torch tensors
with the state in device memory; its GPU programs are compiled to PTX into
the disk cache, ahead of time where the GPU machine has no compiler (see
:class:`Indexer`). Compiled GPU artifacts (manifest.json + PTX,
docs/GPU-ABI.md) of graphs of your own run through :func:`load` (see
:mod:`spin.cuda`); that needs no CUDA toolkit, only the driver, and
``import spin`` works without a GPU.

Semantics: docs/SPIN_SPEC.md. Errors in arguments raise ``TypeError`` or
``ValueError`` naming the argument; nothing is changed by a refused step.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _spin, abi
from .cuda import (CudaProgram, CudaState, CudaStateTensors, CudaWorkspace,
                   _complete_op_tensors, _require_torch_cuda, load,
                   read_manifest, state_field_names, state_shapes)

__all__ = ["Indexer", "State", "Program", "compile", "new_state", "has_compiler",
           "load", "read_manifest", "CudaProgram", "CudaState", "CudaStateTensors",
           "CudaWorkspace",
           "state_bytes", "fp8_page_bytes", "fuse_fp8_pages", "split_fp8_pages"]

#: True when the extension was built with the compiler (JIT) part.
has_compiler: bool = bool(_spin.has_compiler)

_POOLINGS = ("max", "mean", "top4")
_REDUCTIONS = ("A0", "A1", "A2")
_EXPLORE_POLICIES = ("random", "staleness-score", "block-age")
#: Exploration policies that rank blocks by age: their state keeps the
#: per-block last-observed iterations (``last_observed``).
_AGE_POLICIES = ("staleness-score", "block-age")
_MTP_MASKS = ("union", "row0")
_MTP_UPDATES = ("prefix", "row0")
_KEY_FORMATS = ("bf16", "f16", "f32", "fp8")
#: Query formats: each key format's own (the default, ``query_format=None``),
#: or fp8 e4m3 queries with fp8 e4m3 keys (SPIN_SPEC §1).
_QUERY_FORMATS = ("bf16", "f16", "f32", "fp8")
#: The query format of each key format when ``query_format`` is not given.
_DEFAULT_QUERY_FORMATS = {"bf16": "bf16", "f16": "f16", "f32": "f32", "fp8": "bf16"}
#: The runtime element type of each query / key format.
_RUNTIME_TYPES = {"bf16": "bf16", "f16": "f16", "f32": "f32", "fp8": "fp8e4m3"}

try:  # torch is optional
    import torch as _torch
except ImportError:  # pragma: no cover - depends on the machine
    _torch = None


def _is_torch(x: Any) -> bool:
    return _torch is not None and isinstance(x, _torch.Tensor)


def _torch_fp8_dtype():
    """torch.float8_e4m3fn, or None where torch lacks it (before 2.1) or is
    not installed."""
    return getattr(_torch, "float8_e4m3fn", None) if _torch is not None else None


def _query_format(query_format: Optional[str], key_format: str) -> str:
    """The query format an Indexer with ``key_format`` keys runs: its own
    (``None``: bf16 for fp8 keys), or fp8 e4m3 with fp8 keys; a ValueError
    naming the value for anything else."""
    default = _DEFAULT_QUERY_FORMATS[key_format]
    if query_format is None:
        return default
    if not isinstance(query_format, str) or query_format not in _QUERY_FORMATS:
        raise ValueError(f"query_format must be None or one of {_QUERY_FORMATS}, "
                         f"got {query_format!r}")
    if query_format == "fp8" and key_format != "fp8":
        raise ValueError(f"query_format='fp8' needs key_format='fp8' (fp8 e4m3 queries "
                         f"need fp8 e4m3 keys), got key_format={key_format!r}")
    if query_format not in ("fp8", default):
        raise ValueError(f"query_format={query_format!r} is not taken with "
                         f"key_format={key_format!r}: its queries are {default!r} "
                         "(the default)" + (" or 'fp8'" if key_format == "fp8" else ""))
    return query_format


def _f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Rounds float32 to bfloat16 (nearest even); returns the bit patterns."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = np.isnan(x)
    rounded = ((bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)
    rounded[nan] = 0x7FC0
    return rounded


class Program:
    """A compiled step function (see :func:`compile`)."""

    def __init__(self, native: "_spin.Program"):
        self._native = native

    @property
    def signature(self):
        """The arguments of the compiled function, in call order."""
        return self._native.signature

    @property
    def graph_ir(self) -> str:
        """The graph after spin's graph passes, before lowering."""
        return self._native.graph_ir

    @property
    def from_disk_cache(self) -> bool:
        """True when the compiled code came from the on-disk cache."""
        return self._native.from_disk_cache

    def run(self, state: "State", **inputs) -> Dict[str, np.ndarray]:
        """Runs one step; ``inputs`` by the names in :attr:`signature`.

        Returns the outputs (``topk``, ``sparsity``, ``topk_1``, ...; a
        dense indexer's scores that the graph returns as ``scores``) as
        numpy arrays. Element types follow the signature (bf16 inputs may be
        float32, uint16 bit patterns or torch.bfloat16).
        """
        if not isinstance(state, State):
            raise TypeError(f"state must be a spin.State, got {type(state).__name__}")
        arrays, outputs, batch = {}, {}, None
        for arg in self.signature:
            role, name = arg["role"], arg["name"]
            if role in (abi.INPUT, abi.POSITIONS, abi.REQUEST_IDS, abi.RESET):
                if name not in inputs:
                    if role == abi.RESET:
                        continue
                    raise ValueError(f"missing input {name!r}")
                arrays[name] = _tensor(name, inputs.pop(name), arg["dtype"], len(arg["shape"]))
                if batch is None and not abi.is_paged_cache_input(name):
                    batch = arrays[name][0].shape[0]
        if inputs:
            raise ValueError(f"unknown inputs {sorted(inputs)}")
        for arg in self.signature:
            if arg["role"] == abi.OUTPUT:
                shape = _output_shape(arg["name"], arg["shape"], arrays, batch)
                outputs[arg["name"]] = (np.empty(shape, dtype=_NUMPY_TYPES[arg["dtype"]]),
                                        arg["dtype"])
        self._native.run(state._native(), arrays, outputs)
        return {name: array for name, (array, _) in outputs.items()}


def _output_shape(name: str, shape, arrays, batch) -> List[int]:
    """The shape to allocate for output ``name``, whose signature shape is
    ``shape`` (-1 for a run-time size). Outputs are ``[B, R, ...]``
    (docs/Runtime-ABI.md): B is the batch, R the rows of the lengths of the
    same indexer (``lengths_k`` for ``topk_k``), and a dense indexer's scores
    span the block table's pages; any other run-time size is an error rather
    than a guess the compiled code would write past."""
    kind, _, index = name.rpartition("_")
    suffix = "_" + index if kind and index.isdigit() else ""
    kind = kind if suffix else name

    def input_of(base):
        for key in (base + suffix, base):
            if key in arrays:
                return arrays[key][0]
        return None

    lengths = input_of("lengths")
    if lengths is None:
        lengths = input_of("positions")
    table, keys = input_of("block_table"), input_of("keys")
    sizes = []
    for dim, size in enumerate(shape):
        if size < 0 and dim == 0 and batch is not None:
            size = batch
        elif size < 0 and dim == 1 and lengths is not None and lengths.ndim == 2:
            size = lengths.shape[1]
        elif (size < 0 and dim == 2 and kind == "scores" and table is not None
              and keys is not None and table.ndim == 2 and keys.ndim >= 2):
            size = table.shape[1] * keys.shape[1]
        elif size < 0:
            dims = ", ".join("?" if d < 0 else str(d) for d in shape)
            raise ValueError(f"output {name!r} has shape [{dims}]: Program.run cannot "
                             f"tell its run-time size in dim {dim} from the inputs")
        sizes.append(size)
    return sizes


def _sparsify_text(pipeline_options: Optional[Dict[str, Any]]) -> Optional[str]:
    """``pipeline_options`` as option text, for cache keys only (the compiler
    takes the dict itself and checks each option's type). Plain Python, so
    that a build without the compiler computes the same keys."""
    if pipeline_options is None:
        return None
    return " ".join(f"{k.replace('_', '-')}={_option_text(v)}"
                    for k, v in pipeline_options.items())


#: The SM count the GPU code is sized for when none is given (an H100 SXM or
#: an H200).
_DEFAULT_SM_COUNT = 132


def compile(mlir_text: str, function: str,
            pipeline_options: Optional[Dict[str, Any]] = None,
            target: str = "cpu"):
    """Compiles ``function`` of an MLIR module with spin ops.

    ``pipeline_options`` are spin-sparsify-pipeline options (for example
    ``{"sparsity": 0.4, "explore": 0.05, "explore_policy": "block-age"}``;
    keys with ``_`` or ``-``, values of the option's type: bool, int, float,
    or str for strings and for enums' value names; an unknown key or value
    raises ValueError, a value of the wrong type TypeError); ``None``
    compiles the graph as written. ``target="cpu"`` JIT-compiles for this
    machine and returns a :class:`Program`; ``target="cuda"`` compiles PTX
    for torch's current CUDA device (sm_90a, sm_100a or sm_103a; the scoring
    grids sized for its SM count) into the cache directory and returns the
    loaded :class:`CudaProgram` (see :func:`compile_artifact` for
    ahead-of-time artifacts).

    Compiled code is cached in this process and on disk (``$SPIN_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/spin`` or ``~/.cache/spin``; ``SPIN_CACHE_DIR=off``
    disables it) by a hash of the IR, the options and the compiler version;
    corrupt or stale CPU entries are detected by checksum and rebuilt. A
    build without the compiler (the GPU runtime alone) can still compile
    for ``target="cuda"`` from a cache filled elsewhere (``python3 -m
    spin.cache prebuild``); a missing entry raises an error naming it and
    the command that builds it.
    """
    if target == "cuda":
        torch = _cuda_torch("compile(target='cuda')")
        chip = _device_chip(torch, None)
        sm_count = torch.cuda.get_device_properties(
            torch.cuda.current_device()).multi_processor_count
        return load(_cached_artifact(mlir_text, function, pipeline_options, [chip],
                                     sm_count))
    if target != "cpu":
        raise ValueError(f"target must be 'cpu' or 'cuda', got {target!r} "
                         "(compile_artifact() writes PTX for named chips)")
    if not has_compiler:
        raise RuntimeError("spin was built without the compiler: compile() "
                           "for the CPU needs -DSPIN_ENABLE_COMPILER=ON (for "
                           "CUDA, prebuilt programs are found in the cache)")
    return Program(_spin.compile(mlir_text, function, pipeline_options))


def compile_artifact(mlir_text: str, function: str, out_dir: str,
                     pipeline_options: Optional[Dict[str, Any]] = None,
                     chips: Sequence[str] = ("sm_90a",),
                     ptx_version: int = 0, sm_count: int = _DEFAULT_SM_COUNT,
                     layer_argument: bool = False, paged_state: bool = False,
                     fused_fp8_pages: bool = False) -> str:
    """Compiles ``function`` for the GPU ahead of time (what ``spin-compile``
    does): writes one PTX module per chip in ``chips`` ("sm_90a", "sm_100a",
    "sm_103a") and ``manifest.json`` into ``out_dir`` and returns it, for
    :func:`load` on the serving machine. No GPU is needed. ``ptx_version``
    (e.g. 88) defaults to the lowest every chip accepts. ``sm_count`` is the
    serving GPU's SM count, which sizes the scoring grids (``spin-compile
    --sm-count``; 132 for an H100 SXM or H200, 148 for a B200 or B300).
    ``layer_argument``: the step takes its layer at run time (``layer=`` of
    :meth:`CudaProgram.run_batch`), the graph's state layers being offsets
    from it, so that one program serves every layer (docs/GPU-ABI.md, "The
    layer at run time"). ``paged_state``: the state follows the KV pages
    (docs/GPU-ABI.md, "Paged state"): its steps take a
    ``state_block_table`` and state tensors of pages. ``fused_fp8_pages``:
    fp8 keys and their scales come in one uint8 ``kv_cache`` input of the
    serving engines' page layout (docs/GPU-ABI.md, "Fused fp8 key pages")."""
    if not has_compiler:
        raise RuntimeError("spin was built without the compiler: "
                           "compile_artifact() needs -DSPIN_ENABLE_COMPILER=ON")
    if isinstance(chips, str):
        chips = [chips]
    _spin.compile_gpu(mlir_text, function, pipeline_options, list(chips),
                      int(ptx_version), os.fspath(out_dir), int(sm_count),
                      bool(layer_argument), bool(paged_state), bool(fused_fp8_pages))
    return os.fspath(out_dir)


def _bool_flag(name: str, value) -> bool:
    """``value`` as a bool; a TypeError naming ``name`` unless it is one."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def _sm_count_value(value) -> int:
    """``value`` as an SM count; a ValueError naming it unless it is a
    positive integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"sm_count must be a positive integer (got {value!r})")
    return int(value)


#: The chips spin generates GPU code for, by compute capability.
_CHIPS = {(9, 0): "sm_90a", (10, 0): "sm_100a", (10, 3): "sm_103a"}


def _device_chip(torch, device) -> str:
    """The chip of a CUDA device (``None``: torch's current one)."""
    major, minor = torch.cuda.get_device_capability(device)
    chip = _CHIPS.get((major, minor))
    if chip is None:
        raise ValueError(f"no GPU code generation for compute capability "
                         f"{major}.{minor} (spin targets "
                         f"{', '.join(_CHIPS.values())})")
    return chip


def _cache_root(cache_dir: Optional[str] = None) -> Optional[str]:
    """The disk cache directory (see :func:`spin.cache.cache_root`)."""
    from . import cache
    return cache.cache_root(cache_dir)


def _cuda_torch(what: str):
    try:
        import torch
    except ImportError as e:
        raise RuntimeError(f"{what} needs torch with CUDA") from e
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} needs a CUDA device (torch.cuda.is_available() "
                           "is False)")
    return torch


def _cached_artifact(mlir_text, function, pipeline_options, chips, sm_count) -> str:
    """The artifact directory for these inputs in the disk cache, compiled on
    first use (see :func:`spin.cache.graph_artifact`)."""
    from . import cache
    return cache.graph_artifact(mlir_text, function, pipeline_options, chips, sm_count)


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_INT64_MIN, _INT64_MAX = -2 ** 63, 2 ** 63 - 1


def _int_arg(name: str, value) -> int:
    """``value`` as a Python int for an int64 runtime argument: TypeError
    unless it is an integer (bool excluded), ValueError outside int64; both
    name the argument and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{name} {value} does not fit in int64")
    return value


def _request_id(value) -> int:
    return _int_arg("request_id", value)


class State:
    """SPIN state of a batch of requests across indexer layers.

    The runtime owns the memory (V, D, iteration counters, buffered MTP
    rows). ``add`` a request after its prefill, ``reset`` it at a new turn
    (the next step is a dense warm-up), ``commit`` the accepted draft count
    of an MTP verification step (replayed at the request's next step), and
    ``release`` it when it finishes.
    """

    def __init__(self, pool: "_spin.StatePool", capacity: int, layers: int,
                 rows: int, block_size: int, last_observed: bool = False):
        self._pool = pool
        self.capacity = capacity
        self.layers = layers
        self.rows = rows
        self.block_size = block_size
        self.has_last_observed = bool(last_observed)

    def _native(self) -> "_spin.StatePool":
        if self._pool is None:
            raise RuntimeError("this State is closed")
        return self._pool

    def add(self, request_id: int) -> None:
        """Starts tracking a request (fresh state: its next step is a warm-up)."""
        self._native().acquire(_request_id(request_id))

    def reset(self, request_id: int) -> None:
        """Zeroes a request's state: after prefill or at a new turn."""
        self._native().reset(_request_id(request_id))

    def commit(self, request_id: int, accepted: int) -> None:
        """Records how many draft tokens of the last MTP step were accepted."""
        self._native().commit(_request_id(request_id), _int_arg("accepted", accepted))

    def release(self, request_id: int) -> None:
        """Forgets a finished request and frees its slot."""
        self._native().release(_request_id(request_id))

    def iteration(self, request_id: int, layer: int = 0) -> int:
        """Decode steps since the request's last reset on ``layer``."""
        return self._native().iteration(_request_id(request_id), _int_arg("layer", layer))

    def ema(self, request_id: int, layer: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """Copies of the request's (V, D) vectors on ``layer``."""
        v, d = self._native().state(_request_id(request_id), _int_arg("layer", layer))
        return np.asarray(v, dtype=np.float32), np.asarray(d, dtype=np.float32)

    def last_observed(self, request_id: int, layer: int = 0) -> np.ndarray:
        """Copy of the request's per-block last-observed iterations on
        ``layer`` (int32, ``ceil(capacity / block_size)`` entries): ``it + 1``
        at the step that last scored the block, 0 if never (SPIN_SPEC §7.1).
        Only states made with ``last_observed=True`` keep them."""
        return np.asarray(self._native().last_observed(_request_id(request_id),
                                                       _int_arg("layer", layer)),
                          dtype=np.int32)

    def __contains__(self, request_id: int) -> bool:
        return self._native().contains(_request_id(request_id))

    def __len__(self) -> int:
        return self._native().live_requests()

    def close(self) -> None:
        """Frees the state; later use raises RuntimeError."""
        self._pool = None


def new_state(capacity_slots: int, layers: int = 1, max_requests: int = 64,
              rows: int = 1, block_size: int = 64, last_observed: bool = False) -> State:
    """State for up to ``max_requests`` requests of ``capacity_slots`` slots,
    ``layers`` state layers, ``rows`` query rows per step (d + 1 for MTP) and
    SPIN blocks of ``block_size`` slots (for :meth:`Program.run`).
    ``last_observed`` keeps when each block was last scored, which programs
    compiled with ``explore_policy`` ``staleness-score`` or ``block-age``
    need."""
    for name, value in (("capacity_slots", capacity_slots), ("layers", layers),
                        ("max_requests", max_requests), ("rows", rows),
                        ("block_size", block_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    pool = _spin.StatePool(layers=int(layers), slots=int(max_requests),
                           capacity=int(capacity_slots), rows=int(rows),
                           block_size=int(block_size), last_observed=bool(last_observed))
    return State(pool, int(capacity_slots), int(layers), int(rows), int(block_size),
                 bool(last_observed))


#===------------------------------------------------------------------------===#
# GPU artifacts of Indexer layers in the disk cache
#===------------------------------------------------------------------------===#

_INDEXER_CACHE_FORMAT = "spin-indexer-gpu-cache"
_INDEXER_CACHE_VERSION = 1
_INDEXER_FUNCTION = "indexer_layer"


class Indexer:
    """One indexer layer shape, dense or sparsified with SPIN, on the CPU or
    on a CUDA device.

    ``device="cpu"`` compiles through spin-sparsify-pipeline and
    spin-lower-to-cpu on first use of each (layer, block-table width) and
    runs on numpy arrays or CPU torch tensors.

    ``device="cuda"`` (or ``"cuda:N"``) runs the GPU kernels on CUDA torch
    tensors, on torch's current stream. GPU programs have static shapes, so
    there is one per (layer, batch size, block-table width), compiled to PTX
    for ``chips`` (default: the device's own chip: sm_90a for compute
    capability 9.0, sm_100a for 10.0, sm_103a for 10.3), with scoring grids
    sized for ``sm_count`` SMs (default: the device's SM count when a CUDA
    device is available, else 132, an H100 SXM's or H200's; give 148 to
    compile for a B200 or B300 elsewhere) and kept in the disk
    cache (``cache_dir``, else ``$SPIN_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/spin`` or ``~/.cache/spin``). With ``max_pages`` and
    ``batch_sizes``, the programs of layers ``0 .. layers - 1`` are compiled
    (or found in the cache) when the Indexer is made; others on first use.
    Programs are loaded onto the GPU only when a step needs them, so an
    Indexer with explicit ``chips`` can fill a cache on a machine without a
    GPU; a build without the compiler (the GPU runtime alone) only looks
    programs up, and raises an error naming the missing cache entry.
    MTP (``rows = d + 1`` query rows, ``state.commit(request, accepted)``)
    runs on both devices. Not on CUDA yet: the A0/A2 reductions, the
    age-based exploration policies and f32 keys.

    ``explore_policy`` picks the explored blocks: ``"random"`` (hash ranks),
    ``"staleness-score"`` or ``"block-age"`` (by block age, SPIN_SPEC §7.1;
    their CPU state keeps ``last_observed``, see :meth:`new_state`).

    ``key_format`` is the key cache's element type; the queries are of the
    same type (bf16 with fp8 keys) unless ``query_format="fp8"``, which with
    ``key_format="fp8"`` takes fp8 e4m3 queries (SPIN_SPEC §1): their exact
    values enter the scores (fold a query scale into ``w``), as uint8 bit
    patterns (numpy or torch) or ``torch.float8_e4m3fn``. ``query_format``
    may also name the key format's own query type; anything else is a
    ValueError.

    ``reset_input=True`` compiles steps that take per-row reset flags
    (``reset``, bool [B]: the row's state starts afresh before the step,
    as ``state.reset`` does), which device batches need for new turns
    (:meth:`run_batch`, docs/Serving.md).

    ``layer_argument=True`` (cuda) compiles one program per batch size and
    block-table width that serves every layer: the layer is a run-time
    argument of its steps (docs/GPU-ABI.md, "The layer at run time"), so a
    model of many layers needs one program per batch bucket.

    ``paged_state=True`` (cuda, SPIN) keeps V, D and the MTP scores in pages
    that follow the KV pages (docs/GPU-ABI.md, "Paged state"): state
    tensors from :meth:`new_state_tensors` with ``pages=`` state pages,
    stepped by :meth:`run_batch` through a ``state_block_table`` input
    (default: the step's ``block_table``), so the state's memory grows with
    the pages allocated rather than with requests x capacity.

    ``fused_fp8_pages=True`` (fp8 keys) takes the key cache as serving
    engines keep it (docs/GPU-ABI.md, "Fused fp8 key pages"): one uint8
    tensor whose pages hold their key rows and then their f32 scales
    (:func:`fp8_page_bytes` bytes a page, e.g. [pages, page_size, 1,
    head_dim + 4]), passed as ``keys`` (``scales`` absent) or as
    ``inputs["kv_cache"]`` of :meth:`run_batch`. On cuda the kernels read it
    in place; the CPU splits it (:func:`split_fp8_pages`, a copy).
    """

    def __init__(self, heads: int = 64, head_dim: int = 128,
                 block_size: int = 64, topk: int = 512, sparsity: float = 0.4,
                 ema_decay: float = 0.5, explore: float = 0.0, seed: int = 0,
                 pooling: str = "max", reduction: str = "A1",
                 mtp_mask: str = "union", mtp_update: str = "prefix",
                 key_format: str = "bf16", page_size: Optional[int] = None,
                 rows: int = 1, device: str = "cpu", dense: bool = False, *,
                 chips: Optional[Sequence[str]] = None,
                 cache_dir: Optional[str] = None,
                 sm_count: Optional[int] = None,
                 max_pages: Optional[int] = None,
                 batch_sizes: Sequence[int] = (), layers: int = 1,
                 explore_policy: str = "random",
                 query_format: Optional[str] = None,
                 reset_input: bool = False, layer_argument: bool = False,
                 paged_state: bool = False, fused_fp8_pages: bool = False,
                 shared_workspace: bool = False):
        for name, value in (("heads", heads), ("head_dim", head_dim),
                            ("block_size", block_size), ("topk", topk),
                            ("rows", rows), ("layers", layers)):
            if not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name, value in (("sparsity", sparsity), ("ema_decay", ema_decay),
                            ("explore", explore)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer,
                                                                 np.floating)):
                raise TypeError(f"{name} must be a number, got {value!r}")
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        for name, value, allowed in (("explore_policy", explore_policy, _EXPLORE_POLICIES),
                                     ("pooling", pooling, _POOLINGS),
                                     ("reduction", reduction, _REDUCTIONS),
                                     ("mtp_mask", mtp_mask, _MTP_MASKS),
                                     ("mtp_update", mtp_update, _MTP_UPDATES),
                                     ("key_format", key_format, _KEY_FORMATS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        query_format = _query_format(query_format, key_format)
        page_size = block_size if page_size is None else page_size
        if page_size <= 0 or page_size % block_size:
            raise ValueError(f"block_size {block_size} must divide page_size {page_size}")
        if sm_count is not None:
            _sm_count_value(sm_count)
        if max_pages is not None and (not isinstance(max_pages, (int, np.integer))
                                      or max_pages <= 0):
            raise ValueError(f"max_pages must be a positive integer, got {max_pages!r}")
        if isinstance(batch_sizes, (int, np.integer)):
            batch_sizes = [batch_sizes]
        batch_sizes = list(batch_sizes)
        for value in batch_sizes:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"batch_sizes must hold positive integers, got {value!r}")
        if batch_sizes and max_pages is None:
            raise ValueError("batch_sizes needs max_pages (the block-table width) "
                             "to compile programs ahead of the first step")
        self.heads, self.head_dim, self.rows = int(heads), int(head_dim), int(rows)
        self.block_size, self.page_size, self.topk = int(block_size), int(page_size), int(topk)
        self.key_format, self.dense = key_format, bool(dense)
        self.query_format = query_format
        self.explore_policy = explore_policy
        self._options = {
            "sparsity": float(sparsity), "block-size": self.block_size,
            "ema-decay": float(ema_decay), "explore": float(explore),
            "seed": int(seed), "pooling": pooling, "reduction": reduction,
            "mtp-mask": mtp_mask, "mtp-update": mtp_update}
        # Named only when not the default, so that the options (and the GPU
        # cache keys made from them) of random exploration stay as they were.
        if explore_policy != "random":
            self._options["explore-policy"] = explore_policy
        if _bool_flag("reset_input", reset_input):
            if self.dense:
                raise ValueError("reset_input needs SPIN state: a dense indexer has none")
            self._options["reset-input"] = True
        self.reset_input = bool(reset_input)
        for name, value, cpu in (("layer_argument", layer_argument,
                                  "the CPU path compiles any layer on demand"),
                                 ("paged_state", paged_state,
                                  "the CPU path keeps the compact state layout")):
            if _bool_flag(name, value) and (self.dense or str(device) == "cpu"):
                raise ValueError(f"{name} is for SPIN indexers on cuda ({cpu}; a dense "
                                 "indexer keeps no state)")
        self.layer_argument = bool(layer_argument)
        self.paged_state = bool(paged_state)
        if _bool_flag("fused_fp8_pages", fused_fp8_pages) and key_format != "fp8":
            raise ValueError(f"fused_fp8_pages holds fp8 keys and their scales: "
                             f"key_format must be 'fp8', got {key_format!r}")
        self.fused_fp8_pages = bool(fused_fp8_pages)
        if _bool_flag("shared_workspace", shared_workspace) and str(device) == "cpu":
            raise ValueError("shared_workspace is for cuda (the CPU path has no "
                             "scratch buffers)")
        self.shared_workspace = bool(shared_workspace)
        self._workspaces: Dict[int, Any] = {}
        self._batch_sizes = [int(b) for b in batch_sizes]
        self._programs: Dict[Tuple[int, ...], Any] = {}
        # cuda: device copies of recent request-id batches, so that a step
        # can be captured in a CUDA graph after an eager step with the same
        # ids (a capture cannot copy from the host).
        self._device_ids: "collections.OrderedDict" = collections.OrderedDict()
        self.chips: Optional[List[str]] = None
        self.cache_dir: Optional[str] = None
        self.sm_count: Optional[int] = None

        kind = str(device).split(":", 1)[0]
        if kind == "cpu" and str(device) == "cpu":
            self.device = "cpu"
            if not has_compiler:
                raise RuntimeError("spin was built without the compiler: "
                                   "Indexer(device='cpu') needs -DSPIN_ENABLE_COMPILER=ON "
                                   "(device='cuda' runs GPU programs from the cache)")
            for name, value in (("chips", chips), ("cache_dir", cache_dir),
                                ("sm_count", sm_count)):
                if value is not None:
                    raise ValueError(f"{name} is only taken with device='cuda' (the "
                                     "CPU cache follows $SPIN_CACHE_DIR)")
            if max_pages is not None:
                for layer in range(int(layers)):
                    self.program(layer, int(max_pages))
            return
        if kind != "cuda" or not re.fullmatch(r"cuda(:\d+)?", str(device)):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        self.device = str(device)
        self._init_cuda(chips, cache_dir, sm_count)
        if max_pages is not None:
            if not batch_sizes:
                raise ValueError("batch_sizes is required with max_pages on cuda: "
                                 "GPU programs are compiled for one batch size")
            for layer in range(int(layers)):
                for batch in batch_sizes:
                    self.artifact(layer, int(max_pages), int(batch))

    # -- CUDA ---------------------------------------------------------------

    def _init_cuda(self, chips, cache_dir, sm_count) -> None:
        if self.key_format == "f32":
            raise ValueError("key_format='f32' is not supported on cuda (the GPU "
                             "kernels take bf16, f16 and fp8 keys); use device='cpu'")
        if self._options["reduction"] != "A1" and not self.dense:
            raise ValueError(f"reduction={self._options['reduction']!r} is not "
                             "supported on cuda yet (only A1); use device='cpu'")
        if self.explore_policy in _AGE_POLICIES and not self.dense:
            raise ValueError(f"explore_policy={self.explore_policy!r} is not supported on "
                             "cuda (the GPU path explores randomly only); use device='cpu'")
        if chips is None:
            torch = _torch
            if torch is None or not torch.cuda.is_available():
                raise RuntimeError(
                    f"Indexer(device={self.device!r}) needs a CUDA device to pick "
                    "the chip (torch.cuda.is_available() is False): pass chips=[...] "
                    f"(one or more of {', '.join(_CHIPS.values())}) to compile ahead "
                    "of time without a GPU")
            chips = [_device_chip(torch, self._torch_device())]
        if isinstance(chips, str):
            chips = [chips]
        chips = list(chips)
        if not chips:
            raise ValueError("chips must name at least one chip")
        for chip in chips:
            if chip not in _CHIPS.values():
                raise ValueError(f"chips: unknown chip {chip!r} (spin targets "
                                 f"{', '.join(_CHIPS.values())})")
        self.chips = sorted(set(chips))
        if sm_count is None:
            torch = _torch
            if torch is not None and torch.cuda.is_available():
                sm_count = torch.cuda.get_device_properties(
                    self._torch_device()).multi_processor_count
            else:
                sm_count = _DEFAULT_SM_COUNT
        self.sm_count = _sm_count_value(sm_count)
        root = _cache_root(cache_dir)
        if root is None:
            if not has_compiler:
                raise RuntimeError(
                    "the disk cache is off (SPIN_CACHE_DIR=off) and spin was built "
                    "without the compiler: Indexer(device='cuda') has no GPU "
                    "programs to run; set SPIN_CACHE_DIR (or cache_dir=) to a "
                    "cache filled on a machine with the compiler")
            import tempfile
            root = tempfile.mkdtemp(prefix="spin-gpu-")
        self.cache_dir = root

    def _torch_device(self):
        torch = _torch
        device = torch.device(self.device)
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        return device

    def _spec(self, layer: int, max_pages: int, batch: int) -> Dict[str, Any]:
        """What a GPU program depends on besides the compiler (its cache key)."""
        spec = {"function": _INDEXER_FUNCTION, "heads": self.heads,
                "head_dim": self.head_dim, "rows": self.rows, "topk": self.topk,
                "page_size": self.page_size, "max_pages": int(max_pages),
                "key_format": self.key_format, "layer": int(layer),
                "batch": int(batch), "sm_count": self.sm_count,
                "sparsify": None if self.dense else _sparsify_text(self._options)}
        if self.query_format == "fp8":
            # Named only then, so that the other programs keep their keys.
            spec["query_format"] = "fp8"
        if self.layer_argument:
            spec["layer_argument"] = True
        if self.paged_state:
            spec["paged_state"] = True
        if self.fused_fp8_pages:
            spec["fused_fp8_pages"] = True
        return spec

    def artifact(self, layer: int, max_pages: int, batch: int,
                 chips: Optional[Sequence[str]] = None) -> str:
        """The cache directory of the GPU program of ``layer`` for batches of
        ``batch`` requests and block tables ``max_pages`` wide (device="cuda"
        only): compiled for ``chips`` (default: the Indexer's) on first use,
        checked and reused afterwards. Needs no GPU."""
        if self.chips is None:
            raise ValueError("artifact() is for device='cuda' indexers")
        for name, value in (("layer", layer), ("max_pages", max_pages), ("batch", batch)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or \
                    value < (0 if name == "layer" else 1):
                raise ValueError(f"{name} must be a {'non-negative' if name == 'layer' else 'positive'} "
                                 f"integer, got {value!r}")
        from . import cache
        chips = sorted(set(self.chips if chips is None else chips))
        if self.layer_argument:
            layer = 0  # one program for every layer: the layer is a step argument
        spec = self._spec(layer, max_pages, batch)
        name = cache.entry_name("indexer-gpu-", _INDEXER_CACHE_FORMAT,
                                _INDEXER_CACHE_VERSION, spec)
        fresh = build = None
        if has_compiler:
            graph = self._graph(layer, max_pages, batch)
            fresh = {"compiler_version": _spin.compiler_version(),
                     "graph_sha256": hashlib.sha256(graph.encode()).hexdigest()}

            def build(out_dir: str, want: List[str]) -> Dict[str, Any]:
                compile_artifact(graph, _INDEXER_FUNCTION, out_dir,
                                 None if self.dense else self._options, want,
                                 sm_count=self.sm_count,
                                 layer_argument=self.layer_argument,
                                 paged_state=self.paged_state,
                                 fused_fp8_pages=self.fused_fp8_pages)
                return fresh
        try:
            return cache.ensure(self.cache_dir, name, _INDEXER_CACHE_FORMAT,
                                _INDEXER_CACHE_VERSION, spec, chips, fresh, build)
        except cache.MissingEntry as e:
            chips = sorted(set(chips) | set(e.have))
            command = cache.prebuild_command(self, int(layer) + 1, int(max_pages),
                                             [int(batch)], chips, self.cache_dir)
            raise RuntimeError(
                f"no usable GPU program for this Indexer (layer {layer}, batch "
                f"{batch}, block tables {max_pages} pages wide, chips "
                f"{', '.join(chips)}) in the cache directory {self.cache_dir}: "
                f"{e}; spin was built without the compiler and cannot compile it "
                f"here. On a machine with the compiler (no GPU needed), run\n"
                f"    {command}\n"
                f"then copy {self.cache_dir} here (or set $SPIN_CACHE_DIR or "
                "cache_dir= to the copy). python/tests/prebuild_cuda_cache.py "
                "builds the programs of spin's GPU tests.") from None

    def _graph(self, layer: int, max_pages: int, batch: int = 0) -> str:
        """The indexer graph of ``layer``, with the batch fixed as the GPU
        path needs (0: any batch, for the CPU; the key cache and scales keep
        a dynamic page count), with this Indexer's query format."""
        graph = _spin.build_indexer_graph(
            heads=self.heads, head_dim=self.head_dim, rows=self.rows,
            topk=self.topk, page_size=self.page_size, max_pages=int(max_pages),
            key_format=self.key_format, layer=int(layer), batch=int(batch),
            query_format="fp8" if self.query_format == "fp8" else "")
        return graph

    # -- both devices -------------------------------------------------------

    def program(self, layer: int, max_pages: int, batch: Optional[int] = None):
        """The compiled step for ``layer`` and block tables ``max_pages`` wide:
        a :class:`Program` on the CPU (any batch), a loaded
        :class:`CudaProgram` for batches of ``batch`` requests on cuda."""
        if self.device == "cpu":
            key = (int(layer), int(max_pages))
            if key not in self._programs:
                graph = self._graph(layer, max_pages)
                options = None if self.dense else self._options
                self._programs[key] = compile(graph, _INDEXER_FUNCTION, options)
            return self._programs[key]
        if batch is None:
            raise ValueError("batch is required on cuda: GPU programs have a static batch size")
        _require_torch_cuda(f"Indexer(device={self.device!r})")
        device = self._torch_device()
        key = (0 if self.layer_argument else int(layer), int(max_pages), int(batch),
               device.index)
        if key not in self._programs:
            chip = _device_chip(_torch, device)
            if chip not in self.chips:
                raise ValueError(f"this Indexer compiles for {', '.join(self.chips)}, "
                                 f"but {device} is {chip}: add {chip!r} to chips")
            from . import cache
            if self.shared_workspace:
                # The larger buckets first: the smaller programs then take
                # their scratch buffers instead of new ones.
                for larger in sorted(set(self._batch_sizes), reverse=True):
                    if larger > batch:
                        self.program(layer, max_pages, larger)
            path = self.artifact(layer, max_pages, batch)
            with cache.reading(path):  # not replaced while the runtime reads it
                self._programs[key] = load(path, device,
                                           workspace=self.workspace(device))
        return self._programs[key]

    def workspace(self, device=None):
        """With ``shared_workspace=True`` (cuda): the :class:`CudaWorkspace`
        whose scratch buffers all of this Indexer's programs on ``device``
        (default: the Indexer's) share (docs/GPU-ABI.md, "One workspace for
        many programs"); None otherwise. The programs of ahead-of-time
        ``batch_sizes`` are loaded largest first, so that the smaller ones
        take the largest one's buffers."""
        if not self.shared_workspace:
            return None
        device = self._torch_device() if device is None else _torch.device(device)
        if device.index not in self._workspaces:
            self._workspaces[device.index] = CudaWorkspace(device)
        return self._workspaces[device.index]

    def check(self) -> None:
        """On cuda: waits for torch's current stream and raises
        ``RuntimeError`` if a step of a loaded program found bad device data
        since the last check (naming the request, row and value). On the
        CPU bad data raises at the step itself, and this does nothing."""
        if self.device == "cpu":
            return
        for program in list(self._programs.values()):
            program.check()

    def new_state(self, capacity_slots: int, layers: int = 1,
                  max_requests: int = 64):
        """State for up to ``max_requests`` requests of ``capacity_slots``
        slots over ``layers`` layers: a :class:`State` on the CPU, a
        :class:`CudaState` in device memory on cuda (there the block tables
        of every step must be ``capacity_slots / page_size`` pages wide).
        On the CPU it keeps ``last_observed`` when the exploration policy
        needs it."""
        if self.device == "cpu":
            return new_state(capacity_slots, layers, max_requests, self.rows,
                             self.block_size,
                             last_observed=not self.dense and self.explore_policy in _AGE_POLICIES)
        for name, value in (("capacity_slots", capacity_slots), ("layers", layers),
                            ("max_requests", max_requests)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if capacity_slots % self.page_size:
            raise ValueError(f"capacity_slots must be a multiple of page_size "
                             f"{self.page_size} on cuda, got {capacity_slots}")
        if self.paged_state:
            raise ValueError("a paged_state Indexer steps on state tensors: use "
                             "new_state_tensors(..., pages=) and run_batch")
        torch = _require_torch_cuda(f"Indexer(device={self.device!r}).new_state")
        device = self._torch_device()
        torch.cuda.init()
        pool = _spin.GpuStatePool(layers=int(layers), slots=int(max_requests),
                                  capacity=int(capacity_slots), rows=self.rows,
                                  block_size=self.block_size,
                                  stream=torch.cuda.current_stream(device).cuda_stream,
                                  device=int(device.index))
        return CudaState(pool, device, int(max_requests), int(capacity_slots),
                         int(layers), self.rows, self.block_size)

    def _state_fields(self, capacity_slots: int, batch: Optional[int]) -> List[str]:
        """The state fields the GPU programs bind, from the manifest of layer
        0's program for ``batch`` (default: the first of ``batch_sizes``)."""
        if self.device == "cpu":
            raise ValueError("state tensors are for device='cuda' indexers")
        if self.dense:
            raise ValueError("a dense indexer keeps no SPIN state")
        if capacity_slots % self.page_size:
            raise ValueError(f"capacity_slots must be a multiple of page_size "
                             f"{self.page_size}, got {capacity_slots}")
        if batch is None:
            if not self._batch_sizes:
                raise ValueError("batch is required (no batch_sizes were given): the "
                                 "state fields are read from a compiled program")
            batch = self._batch_sizes[0]
        manifest = read_manifest(self.artifact(0, capacity_slots // self.page_size, int(batch)))
        return state_field_names(manifest[abi.KEY["Arguments"]])

    def _state_pages(self, pages: Optional[int]) -> int:
        """``pages`` checked against the layout: required (positive) with
        paged_state, refused without."""
        if not self.paged_state:
            if pages is not None:
                raise ValueError("pages= is for Indexers made with paged_state=True")
            return 0
        if isinstance(pages, bool) or not isinstance(pages, (int, np.integer)) or pages <= 0:
            raise ValueError("a paged_state Indexer needs pages=, the number of state "
                             f"pages (a positive integer), got {pages!r}")
        return int(pages)

    def state_bytes(self, capacity_slots: int, layers: int = 1, max_requests: int = 64,
                    batch: Optional[int] = None, pages: Optional[int] = None) -> int:
        """Device memory of the SPIN state of ``max_requests`` slots of
        ``capacity_slots`` KV slots on ``layers`` layers (device="cuda"),
        as :meth:`new_state` and :meth:`new_state_tensors` allocate it; with
        ``paged_state``, V, D and the MTP scores of ``pages`` state pages
        (``capacity_slots`` is then the block table's reach)."""
        pages = self._state_pages(pages)
        return state_bytes(self._state_fields(capacity_slots, batch), max_requests,
                           capacity_slots, self.rows, self.block_size, layers, pages,
                           self.page_size if pages else 0)

    def new_state_tensors(self, capacity_slots: int, layers: int = 1,
                          max_requests: int = 64, batch: Optional[int] = None,
                          pages: Optional[int] = None):
        """Zeroed state tensors the caller owns (:class:`CudaStateTensors`)
        for ``max_requests`` slots of ``capacity_slots`` KV slots on
        ``layers`` layers (device="cuda"), for :meth:`run_batch` and the
        torch op (``spin.ops``; docs/GPU-ABI.md, "State tensors"); with
        ``paged_state``, ``pages`` state pages of ``page_size`` KV slots hold
        V, D and the MTP scores (docs/GPU-ABI.md, "Paged state")."""
        _require_torch_cuda(f"Indexer(device={self.device!r}).new_state_tensors")
        pages = self._state_pages(pages)
        return CudaStateTensors.allocate(self._state_fields(capacity_slots, batch),
                                         self._torch_device(), max_requests, capacity_slots,
                                         layers, self.rows, self.block_size, pages,
                                         self.page_size if pages else 0)

    def __call__(self, q, w, keys, block_table, lengths, positions,
                 state, *, request_ids, scales=None, layer: int = 0,
                 return_sparsity: bool = False, reset=None):
        """One decode step of ``layer`` for a batch of requests.

        Shapes: ``q`` [B, R, H, D], ``w`` [B, R, H] f32, ``keys`` [P, S, D],
        ``scales`` [P, S] f32 (fp8 keys only), ``block_table`` [B, MB] i32,
        ``lengths`` / ``positions`` [B, R] i32, ``request_ids`` [B] i64,
        ``reset`` [B] bool (``reset_input`` indexers only; optional: a
        flagged row's state starts afresh before the step).
        Returns the top-K slot indices [B, R, K] (int32, -1 padded), and with
        ``return_sparsity`` also the realized block sparsity [B, R] (zeros
        for a dense indexer).

        On the CPU: bf16 data may be float32 (rounded to bf16), uint16 bit
        patterns or torch.bfloat16; fp8 keys (and with ``query_format="fp8"``
        the queries) are uint8 bit patterns or torch.float8_e4m3fn (never
        rounded from floats); outputs are torch tensors when ``q`` is one,
        numpy arrays otherwise.

        On cuda: every tensor is a contiguous CUDA torch tensor on the
        Indexer's device, of the exact dtype (``q`` torch.bfloat16, or
        torch.float16 with f16 keys, or fp8 with ``query_format="fp8"``;
        fp8 keys and queries torch.float8_e4m3fn or uint8 bit patterns),
        ``block_table`` is ``state.capacity / page_size`` pages wide, and
        ``request_ids`` is a host sequence, a CPU tensor or a CUDA tensor
        (copied to the host: a synchronisation). The step is
        issued on torch's current stream without waiting for it; outputs are
        CUDA tensors. Bad device data (block-table entries, lengths,
        positions) is reported by ``indexer.program(...).check()``.
        A step can be captured in a CUDA graph (``torch.cuda.graph``) once
        a step with the same host ``request_ids`` ran eagerly (the Indexer
        keeps device copies of the last 16 id batches) and capture staging
        is reserved: ``indexer.program(layer, pages, batch)
        .reserve_captured_steps(n)``.
        """
        if reset is not None and not self.reset_input:
            raise ValueError("reset flags are taken only by an Indexer made with "
                             "reset_input=True (otherwise call state.reset(request))")
        if self.fused_fp8_pages:
            if scales is not None:
                raise ValueError("a fused_fp8_pages Indexer takes the scales inside the "
                                 "key pages: pass the fused kv_cache as keys, no scales")
            if self.device == "cpu":
                keys, scales = split_fp8_pages(keys, self.page_size, self.head_dim)
                if _is_torch(keys):
                    keys, scales = keys.contiguous(), scales.contiguous()
            else:
                keys = _fused_pages_2d(keys, self.page_size, self.head_dim)
        if self.device != "cpu":
            return self._call_cuda(q, w, keys, block_table, lengths, positions, state,
                                   request_ids, scales, layer, return_sparsity, reset)
        if not isinstance(state, State):
            raise TypeError(f"state must be a spin.State, got {type(state).__name__}")
        pool = state._native()
        if state.block_size != self.block_size or state.rows < self.rows:
            raise ValueError("state was made for another indexer (block size or rows differ)")
        if (not self.dense and self.explore_policy in _AGE_POLICIES
                and not state.has_last_observed):
            raise ValueError(f"explore_policy {self.explore_policy!r} needs a state that keeps "
                             "last_observed: make it with Indexer.new_state or "
                             "spin.new_state(..., last_observed=True)")
        if not 0 <= layer < state.layers:
            raise ValueError(f"layer {layer} is outside the state's {state.layers} layers")
        torch_out = _is_torch(q)
        query_format = _RUNTIME_TYPES[self.query_format]
        key_format = _RUNTIME_TYPES[self.key_format]
        inputs = {
            "q": _tensor("q", q, query_format, 4),
            "w": _tensor("w", w, "f32", 3),
            "keys": _tensor("keys", keys, key_format, 3),
            "block_table": _tensor("block_table", block_table, "i32", 2),
            "lengths": _tensor("lengths", lengths, "i32", 2),
            "positions": _tensor("positions", positions, "i32", 2),
            "request_ids": _tensor("request_ids", request_ids, "i64", 1),
        }
        if self.key_format == "fp8":
            if scales is None:
                raise ValueError("scales is required with key_format='fp8'")
            inputs["scales"] = _tensor("scales", scales, "f32", 2)
        elif scales is not None:
            raise ValueError(f"scales are only taken with fp8 keys, not {self.key_format}")
        q_arr, keys_arr, table = inputs["q"][0], inputs["keys"][0], inputs["block_table"][0]
        batch = q_arr.shape[0]
        expected = {"q": (batch, self.rows, self.heads, self.head_dim),
                    "keys": (None, self.page_size, self.head_dim)}
        for name, shape in expected.items():
            got = inputs[name][0].shape
            if len(got) != len(shape) or any(e is not None and e != g for e, g in zip(shape, got)):
                want = ", ".join("?" if e is None else str(e) for e in shape)
                raise ValueError(f"{name} has shape {tuple(got)}, expected [{want}]")
        if self.dense:
            inputs.pop("positions")
            inputs.pop("request_ids")
        if reset is not None:
            inputs["reset"] = _tensor("reset", reset, "i1", 1)
        program = self.program(layer, table.shape[1])
        topk = np.empty((batch, self.rows, self.topk), dtype=np.int32)
        sparsity = np.zeros((batch, self.rows), dtype=np.float32)
        outputs = {"topk": (topk, "i32")}
        if not self.dense:
            outputs["sparsity"] = (sparsity, "f32")
        program._native.run(pool, inputs, outputs)
        if torch_out:
            topk, sparsity = _torch.from_numpy(topk), _torch.from_numpy(sparsity)
        return (topk, sparsity) if return_sparsity else topk

    def run_batch(self, inputs: Dict[str, Any], state, outputs: Optional[Dict[str, Any]] = None,
                  *, layer: int = 0) -> Dict[str, Any]:
        """One step of ``layer`` whose batch is given by device tensors alone
        (device="cuda"; docs/Serving.md): the program for the batch size of
        ``inputs["q"]`` and the block-table width of ``inputs["block_table"]``
        (compiled or looked up on first use), stepped by
        :meth:`CudaProgram.run_batch` with ``inputs`` (the step's tensors,
        ``positions``, ``request_ids``, ``slots`` and, as the program takes
        them, ``accepted`` and ``reset``) and ``outputs`` (written in place;
        allocated when absent). Captured in a CUDA graph, the step replays for
        whatever the tensors hold at each replay; a graph per batch bucket
        serves every batch up to it through padding rows (slot -1)."""
        if self.device == "cpu":
            raise ValueError("run_batch is for device='cuda' indexers (on the CPU "
                             "call the Indexer with request ids)")
        if self.dense:
            raise ValueError("run_batch steps SPIN state: a dense indexer has none; "
                             "call the Indexer (padding rows are rows of length 0)")
        torch = _require_torch_cuda(f"Indexer(device={self.device!r}).run_batch")
        if not isinstance(inputs, dict):
            raise TypeError(f"inputs must be a dict of tensors, got {type(inputs).__name__}")
        if not isinstance(state, (CudaState, CudaStateTensors)):
            raise TypeError("state must be a spin.CudaState or spin.CudaStateTensors (from "
                            "Indexer.new_state or new_state_tensors on cuda), got "
                            f"{type(state).__name__}")
        if state.block_size != self.block_size or state.rows < self.rows:
            raise ValueError("state was made for another indexer (block size or rows differ)")
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) \
                or not 0 <= layer < state.layers:
            raise ValueError(f"layer {layer} is outside the state's {state.layers} layers")
        for name in ("q", "block_table"):
            value = inputs.get(name)
            if not isinstance(value, torch.Tensor) or value.dim() < 2:
                raise ValueError(f"inputs[{name!r}] must be a CUDA tensor of rank "
                                 f"{4 if name == 'q' else 2}, got "
                                 f"{type(value).__name__ if value is not None else 'nothing'}")
        batch, width = int(inputs["q"].shape[0]), int(inputs["block_table"].shape[1])
        if width * self.page_size != state.capacity:
            raise ValueError(
                f"block_table is {width} pages wide ({width * self.page_size} slots), "
                f"but the state holds capacity_slots={state.capacity}")
        if self.paged_state:
            if not isinstance(state, CudaStateTensors) or state.page_size != self.page_size:
                raise ValueError("a paged_state Indexer steps on paged state tensors "
                                 "(new_state_tensors(..., pages=))")
            if "state_block_table" not in inputs:
                # The KV pages are the state pages unless the caller says
                # otherwise (shared prefix pages need private state pages).
                inputs = dict(inputs, state_block_table=inputs["block_table"])
        elif isinstance(state, CudaStateTensors) and state.page_size:
            raise ValueError("state holds paged tensors, but this Indexer was made "
                             "without paged_state")
        inputs = self._engine_inputs(inputs, batch)
        program = self.program(layer, width, batch)
        step_layer = int(layer) if self.layer_argument else 0
        if isinstance(state, CudaStateTensors) and outputs is not None:
            from . import ops
            if ops.AVAILABLE:
                # The torch op: the same step, visible to torch.compile. It
                # takes every tensor by position, so what the caller may
                # leave out of the direct call is made here as that call
                # would: outputs allocated, no resets, the row status in a
                # buffer of its own.
                inputs, outputs = _complete_op_tensors(program.signature,
                                                       program.status_outputs,
                                                       inputs, outputs, batch,
                                                       program.device)
                ops.run_batch(ops.program_handle(program), inputs, state, outputs,
                              layer=step_layer)
                return outputs
        return program.run_batch(inputs, state, outputs, layer=step_layer)

    def _engine_inputs(self, inputs: Dict[str, Any], batch: int) -> Dict[str, Any]:
        """``inputs`` of :meth:`run_batch` in the program's conventions, from
        those serving engines keep (docs/Serving.md, "The engine's own
        tensors"): the fused key pages as one [pages, page bytes] view;
        positions of int64 (or int32), [B, R] or one per token [B * R], as
        int32 [B, R]; lengths [B] (each request's length with its R rows'
        tokens) as the rows' own lengths [B, R]. Every conversion is a device
        kernel on the current stream (a few bytes a row), no copy of the
        key cache and no host synchronisation, so it lives in a captured
        graph."""
        torch = _torch
        inputs = dict(inputs)
        if self.fused_fp8_pages:
            for name in ("keys", "scales"):
                if name in inputs:
                    raise ValueError(f"a fused_fp8_pages Indexer takes inputs['kv_cache'] "
                                     f"(its pages hold the keys and their scales), not "
                                     f"inputs[{name!r}]")
            if "kv_cache" in inputs:
                inputs["kv_cache"] = _fused_pages_2d(inputs["kv_cache"], self.page_size,
                                                     self.head_dim)
        rows = self.rows
        positions = inputs.get("positions")
        if isinstance(positions, torch.Tensor) and positions.dtype in (torch.int64,
                                                                     torch.int32):
            if positions.dim() == 1 and positions.numel() == batch * rows:
                positions = positions.view(batch, rows)
            inputs["positions"] = _int32_on_device(positions)
        lengths = inputs.get("lengths")
        if isinstance(lengths, torch.Tensor) and lengths.dim() == 1 and \
                lengths.dtype in (torch.int32, torch.int64) and lengths.numel() == batch:
            offsets = torch.arange(1 - rows, 1, device=lengths.device, dtype=lengths.dtype)
            inputs["lengths"] = _int32_on_device(lengths.view(batch, 1) + offsets)
        return inputs

    def _ids_on_device(self, device, request_ids):
        """The device copy of a host batch of request ids, kept for the last
        16 distinct batches; while a CUDA graph is captured it must exist
        already (from an eager step with the same ids)."""
        torch = _torch
        key = (str(device), tuple(CudaProgram._request_ids(request_ids, True)))
        if key in self._device_ids:
            self._device_ids.move_to_end(key)
            return self._device_ids[key]
        if torch.cuda.is_current_stream_capturing():
            raise ValueError(
                f"request ids {list(key[1])} have no device copy yet: run one step with "
                "them before capturing a CUDA graph (the capture cannot copy from the host)")
        ids = torch.tensor(key[1], dtype=torch.int64, device=device)
        self._device_ids[key] = ids
        while len(self._device_ids) > 16:
            self._device_ids.popitem(last=False)
        return ids

    def _call_cuda(self, q, w, keys, block_table, lengths, positions, state,
                   request_ids, scales, layer, return_sparsity, reset):
        torch = _require_torch_cuda(f"Indexer(device={self.device!r})")
        if self.paged_state:
            raise ValueError("a paged_state Indexer is stepped by run_batch on state "
                             "tensors (request ids need a state pool, which is compact)")
        if not isinstance(state, CudaState):
            raise TypeError("state must be a spin.CudaState (from Indexer.new_state "
                            f"on cuda), got {type(state).__name__}")
        state._native()  # raises if closed
        if state.block_size != self.block_size or state.rows < self.rows:
            raise ValueError("state was made for another indexer (block size or rows differ)")
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) \
                or not 0 <= layer < state.layers:
            raise ValueError(f"layer {layer} is outside the state's {state.layers} layers")
        # The batch and the table width pick the program: check those two
        # first; CudaProgram checks every input against the program.
        for name, value, rank in (("q", q, 4), ("block_table", block_table, 2)):
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"input {name!r} must be a torch.Tensor, got "
                                f"{type(value).__name__}")
            if value.dim() != rank:
                raise ValueError(f"input {name!r} must have rank {rank}, got shape "
                                 f"{tuple(value.shape)}")
        batch, width = int(q.shape[0]), int(block_table.shape[1])
        want = (batch, self.rows, self.heads, self.head_dim)
        if tuple(q.shape) != want or batch == 0:
            raise ValueError(f"input 'q' has shape {tuple(q.shape)}, expected "
                             f"[B, {self.rows}, {self.heads}, {self.head_dim}] with B > 0")
        if width * self.page_size != state.capacity:
            raise ValueError(
                f"block_table is {width} pages wide ({width * self.page_size} slots), "
                f"but the state holds capacity_slots={state.capacity}: on cuda the "
                f"block table must be capacity_slots / page_size = "
                f"{state.capacity // self.page_size} pages wide")
        if self.key_format == "fp8" and not self.fused_fp8_pages:
            if scales is None:
                raise ValueError("scales is required with key_format='fp8'")
        elif scales is not None:
            raise ValueError(f"scales are only taken with fp8 keys, not {self.key_format}")
        program = self.program(layer, width, batch)
        inputs = {"q": q, "w": w, "kv_cache" if self.fused_fp8_pages else "keys": keys,
                  "block_table": block_table, "lengths": lengths}
        if scales is not None:
            inputs["scales"] = scales
        if reset is not None:
            inputs["reset"] = reset
        ids = request_ids
        if not self.dense:
            inputs["positions"] = positions
            if isinstance(request_ids, torch.Tensor) and request_ids.is_cuda:
                inputs["request_ids"] = request_ids
            else:
                inputs["request_ids"] = self._ids_on_device(q.device, request_ids)
        if self.dense:
            out = program(inputs, state)
        else:
            out = program(inputs, state, request_ids=ids,
                          layer=int(layer) if self.layer_argument else 0)
        topk = out["topk"]
        if not return_sparsity:
            return topk
        sparsity = out.get("sparsity")
        if sparsity is None:
            sparsity = torch.zeros((batch, self.rows), dtype=torch.float32,
                                   device=topk.device)
        return topk, sparsity


def state_bytes(fields: Sequence[str], slots: int, capacity: int, rows: int,
                block_size: int, layers: int = 1, pages: int = 0,
                page_size: int = 0) -> int:
    """Bytes of the SPIN state of ``fields`` (``CudaProgram.state_fields``)
    for ``slots`` state slots of ``capacity`` KV slots, MTP buffers of
    ``rows`` rows and SPIN blocks of ``block_size`` slots, on ``layers``
    layers: the pool layout of docs/GPU-ABI.md, "State tensors" (the same
    for ``new_state`` and ``new_state_tensors``). With ``page_size`` (the
    paged layout, "Paged state") V, D and the MTP scores take ``pages``
    pages of ``page_size`` KV slots instead, so they grow with the pages
    allocated, not with slots x capacity. ``Indexer.state_bytes`` and
    ``CudaProgram.new_state_tensors(...).nbytes`` give it for theirs."""
    return sum(int(np.prod(shape)) * np.dtype(_NUMPY_TYPES[dtype]).itemsize for shape, dtype in
               state_shapes(fields, slots, capacity, rows, block_size, range(layers),
                            pages, page_size).values())


def _int32_on_device(values):
    """An int32 or int64 torch tensor as int32, on its device. int64 values
    are clamped first, so that one past int32 stays out of range (a step
    reports it in the row status) instead of wrapping into range."""
    if values.dtype == _torch.int32:
        return values
    return values.clamp(-1, 2**31 - 1).to(_torch.int32)


def fp8_page_bytes(page_size: int, head_dim: int) -> int:
    """Bytes of one page of fp8 keys in the serving engines' fused layout
    (docs/GPU-ABI.md, "Fused fp8 key pages"): ``page_size`` key rows of
    ``head_dim`` e4m3 bytes, then their ``page_size`` f32 scales."""
    for name, value in (("page_size", page_size), ("head_dim", head_dim)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(page_size) * (int(head_dim) + 4)


def _fused_pages_2d(kv_cache, page_size: int, head_dim: int):
    """``kv_cache`` as [pages, page bytes] (a view), or a clear error."""
    page = fp8_page_bytes(page_size, head_dim)
    shape = tuple(kv_cache.shape)
    if _is_torch(kv_cache):
        ok_type = kv_cache.dtype in (_torch.uint8, _torch.int8)
        contiguous = kv_cache.is_contiguous()
    else:
        ok_type = kv_cache.dtype in (np.uint8, np.int8)
        contiguous = kv_cache.flags.c_contiguous
    if not ok_type:
        raise TypeError(f"kv_cache has dtype {kv_cache.dtype}, expected uint8 (or int8) "
                        "bytes of the fused fp8 pages")
    inner = int(np.prod(shape[1:])) if len(shape) > 1 else 0
    if len(shape) < 2 or inner != page:
        raise ValueError(f"kv_cache has shape {shape}: expected [pages, ...] with "
                         f"{page} bytes a page (page_size {page_size} x (head_dim "
                         f"{head_dim} + 4))")
    if not contiguous:
        raise ValueError("kv_cache is not contiguous; its pages must be whole")
    return kv_cache.reshape(shape[0], page)


def split_fp8_pages(kv_cache, page_size: int, head_dim: int):
    """(keys, scales) of fp8 key pages in the serving engines' fused layout
    (docs/GPU-ABI.md, "Fused fp8 key pages"): ``kv_cache`` is uint8 of shape
    [pages, ...] with :func:`fp8_page_bytes` bytes a page (for example
    [pages, page_size, 1, head_dim + 4] as engines allocate it); ``keys``
    are the e4m3 bit patterns [pages, page_size, head_dim] (uint8) and
    ``scales`` the f32 [pages, page_size]. torch tensors give views of
    ``kv_cache`` (no copy), numpy arrays contiguous copies."""
    flat = _fused_pages_2d(kv_cache, page_size, head_dim)
    pages, split = flat.shape[0], page_size * head_dim
    if _is_torch(flat):
        flat = flat.view(_torch.uint8)
        return (flat[:, :split].view(pages, page_size, head_dim),
                flat[:, split:].view(_torch.float32))
    flat = flat.view(np.uint8)
    return (np.ascontiguousarray(flat[:, :split]).reshape(pages, page_size, head_dim),
            np.ascontiguousarray(flat[:, split:]).view(np.float32))


def fuse_fp8_pages(keys, scales):
    """The fused fp8 page layout (docs/GPU-ABI.md, "Fused fp8 key pages") of
    fp8 ``keys`` [pages, page_size, head_dim] (uint8 bit patterns, or
    torch.float8_e4m3fn) and f32 ``scales`` [pages, page_size]: a new
    uint8 [pages, fp8_page_bytes(page_size, head_dim)] (numpy or torch, as
    ``keys``), each page's key rows then their scales."""
    if len(keys.shape) != 3 or len(scales.shape) != 2 or \
            tuple(scales.shape) != tuple(keys.shape[:2]):
        raise ValueError(f"keys {tuple(keys.shape)} and scales {tuple(scales.shape)} must be "
                         "[pages, page_size, head_dim] and [pages, page_size]")
    pages, page_size, head_dim = (int(n) for n in keys.shape)
    if _is_torch(keys):
        torch = _torch
        if keys.dtype not in (torch.uint8, _torch_fp8_dtype()) or scales.dtype != torch.float32:
            raise TypeError(f"keys must be uint8 or float8_e4m3fn and scales float32, got "
                            f"{keys.dtype} and {scales.dtype}")
        return torch.cat([keys.reshape(pages, -1).view(torch.uint8),
                          scales.reshape(pages, -1).view(torch.uint8)], dim=1)
    keys, scales = np.asarray(keys), np.asarray(scales)
    if keys.dtype != np.uint8 or scales.dtype != np.float32:
        raise TypeError(f"keys must be uint8 and scales float32, got {keys.dtype} and "
                        f"{scales.dtype}")
    return np.concatenate([np.ascontiguousarray(keys).reshape(pages, -1),
                           np.ascontiguousarray(scales).reshape(pages, -1).view(np.uint8)],
                          axis=1)


_NUMPY_TYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32,
                "i64": np.int64, "fp8e4m3": np.uint8, "bf16": np.uint16,
                "i1": np.bool_, "i8": np.int8}


def _tensor(name: str, value, dtype: str, rank: int):
    """(contiguous numpy view, runtime dtype) for one argument, or a clear error."""
    if _is_torch(value):
        if value.device.type != "cpu":
            raise ValueError(f"{name} is on {value.device}, but this Indexer runs on cpu")
        if not value.is_contiguous():
            raise ValueError(f"{name} is not contiguous; call .contiguous() first")
        if dtype == "bf16" and value.dtype == _torch.bfloat16:
            array = value.view(_torch.int16).numpy().view(np.uint16)
        elif dtype == "fp8e4m3" and value.dtype == _torch_fp8_dtype():
            array = value.view(_torch.uint8).numpy()
        else:
            try:
                array = value.numpy()
            except TypeError:  # a dtype numpy lacks (torch.float8_*, ...)
                raise TypeError(f"{name} has dtype {value.dtype}, expected "
                                f"{_dtype_hint(dtype)}") from None
    elif isinstance(value, np.ndarray):
        array = value
    else:
        raise TypeError(f"{name} must be a numpy array or a torch tensor, "
                        f"got {type(value).__name__}")
    if array.ndim != rank:
        raise ValueError(f"{name} must have rank {rank}, got shape {tuple(array.shape)}")
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError(f"{name} is not C-contiguous; pass np.ascontiguousarray({name})")
    want = _NUMPY_TYPES[dtype]
    if dtype == "bf16" and array.dtype == np.float32:
        array = _f32_to_bf16_bits(array)
    elif dtype == "i1" and array.dtype in (np.uint8, np.int8):
        array = array.view(np.bool_) if np.all((array == 0) | (array == 1)) else None
        if array is None:
            raise ValueError(f"{name} must hold only 0 and 1")
    elif array.dtype != want:
        raise TypeError(f"{name} has dtype {array.dtype}, expected {_dtype_hint(dtype)}")
    return array, dtype


def _dtype_hint(dtype: str) -> str:
    """What the CPU path takes for a runtime element type, in words."""
    fp8 = "uint8 fp8 e4m3 bit patterns"
    if _torch_fp8_dtype() is not None:
        fp8 += " or torch.float8_e4m3fn"
    return {"bf16": "float32 or uint16 bf16 bit patterns", "fp8e4m3": fp8,
            "i1": "bool (or uint8 0/1)"}.get(dtype, np.dtype(_NUMPY_TYPES[dtype]).name)
