"""Running compiled GPU artifacts on CUDA torch tensors.

A GPU artifact is the directory ``spin-compile --target=sm_90a,...`` writes:
``manifest.json`` plus one PTX module per chip (docs/GPU-ABI.md). The
runtime loads the PTX for the current device through the CUDA driver (no
toolkit needed) and launches a step on torch's current stream, without
synchronising with the host, so steps can be captured in CUDA graphs::

    import torch, spin

    program = spin.load("artifact/")            # torch's current device
    state = program.new_state(slots=64)         # capacity etc. from the manifest
    state.add(7)                                # after prefill
    out = program({"q": q, "w": w, "keys": keys, "block_table": table,
                   "lengths": lengths, "positions": positions},
                  state, request_ids=[7])
    top = out["topk"]                           # a CUDA tensor, same device
    program.check()                             # synchronises; raises on bad data

Argument errors raise ``TypeError``/``ValueError`` naming the argument
before anything is issued; driver and device failures raise
``RuntimeError``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _spin, abi

try:  # torch is optional for the package, required here
    import torch as _torch
except ImportError:  # pragma: no cover - depends on the machine
    _torch = None

__all__ = ["load", "read_manifest", "CudaProgram", "CudaState", "CudaWorkspace"]

#: Roles whose tensors the caller passes in ``inputs``.
_INPUT_ROLES = (abi.INPUT, abi.POSITIONS, abi.REQUEST_IDS, abi.RESET)
# A device batch also takes the rows' slots and accepted counts as tensors.
_BATCH_INPUT_ROLES = _INPUT_ROLES + (abi.SLOTS, abi.ACCEPTED)


def read_manifest(artifact_dir: str) -> Dict[str, Any]:
    """The validated manifest of a GPU artifact as a dict (no GPU needed).

    Raises ``ValueError`` naming the file and the field for a missing
    directory or manifest, invalid JSON, or any field outside
    docs/GPU-ABI.md.
    """
    return _spin.read_manifest(str(artifact_dir))


def _require_torch_cuda(what: str):
    if _torch is None:
        raise RuntimeError(f"{what} needs PyTorch with CUDA: torch is not installed")
    if not _torch.cuda.is_available():
        raise RuntimeError(f"{what} needs PyTorch with CUDA: "
                           "torch.cuda.is_available() is False on this machine")
    return _torch


def _torch_dtypes(dtype: str) -> Tuple[Any, ...]:
    """The torch dtypes accepted for a runtime element type; the first is the
    one outputs are allocated with."""
    t = _torch
    fp8 = getattr(t, "float8_e4m3fn", None)
    table = {
        "f32": (t.float32,), "f16": (t.float16,), "bf16": (t.bfloat16,),
        "fp8e4m3": ((fp8, t.uint8) if fp8 is not None else (t.uint8,)),
        "i1": (t.bool,), "i8": (t.int8, t.uint8), "i32": (t.int32,), "i64": (t.int64,),
    }
    return table[dtype]


def _complete_op_tensors(signature: List[Dict[str, Any]], status_outputs: Sequence[str],
                         inputs: Dict[str, Any], outputs: Dict[str, Any], batch: int,
                         device) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``inputs`` and ``outputs`` of a device-batch step, completed with
    what the torch op (spin.ops) takes by position but the direct call
    (:meth:`CudaProgram.run_batch`) lets the caller leave out, made as that
    call would: a missing "reset" all false (no row starts afresh), missing
    outputs allocated, missing row status outputs written to int32 [B]
    buffers of their own. Returns new dicts; the caller's are unchanged.
    ``batch``: the step's batch size (a signature's -1 dimension)."""
    torch = _torch
    inputs, outputs = dict(inputs), dict(outputs)
    for arg in signature:
        name, role = arg["name"], arg["role"]
        if role == abi.RESET and name not in inputs:
            inputs[name] = torch.zeros(_batch_shape(arg, batch),
                                       dtype=_torch_dtypes(arg["dtype"])[0], device=device)
        elif role == abi.OUTPUT and name not in outputs:
            outputs[name] = _new_output(arg, batch, device)
    for name in status_outputs:
        if name not in outputs:
            outputs[name] = torch.empty([batch], dtype=torch.int32, device=device)
    return inputs, outputs


def _new_output(arg: Dict[str, Any], batch: int, device) -> "Any":
    """An uninitialised tensor for the signature's output ``arg`` of a step
    of ``batch`` rows (its -1 dimension), for callers that did not pass
    it."""
    if any(d < 0 for d in arg["shape"][1:]):
        raise ValueError(f"output {arg['name']!r} has a run-time size beyond the batch: "
                         "pass it in outputs")
    return _torch.empty(_batch_shape(arg, batch), dtype=_torch_dtypes(arg["dtype"])[0],
                        device=device)


def _batch_shape(arg: Dict[str, Any], batch: int) -> List[int]:
    """The signature argument's shape with its -1 (batch) dimension as ``batch``."""
    return [batch if d < 0 else d for d in arg["shape"]]


def _device_of(device) -> "Any":
    torch = _torch
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if device.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {device}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _stream(device) -> int:
    return _torch.cuda.current_stream(device).cuda_stream


class CudaWorkspace:
    """Scratch buffers that the programs loaded with it share
    (docs/GPU-ABI.md, "One workspace for many programs"): a program takes
    the workspace's buffer of each of its scratch buffers' names when that
    one is large enough, else a new one that later programs share. The
    programs one Indexer compiles for several batch sizes name their
    buffers alike, so loading the largest first makes the others take its
    buffers. Programs sharing a workspace must have their steps ordered:
    issue them on one stream (as a serving loop replays its graphs), or
    order them with events."""

    def __init__(self, device=None):
        torch = _require_torch_cuda("spin.CudaWorkspace")
        self.device = _device_of(device)
        torch.cuda.init()  # torch's primary context exists before ours retains it
        self._native = _spin.GpuWorkspace.create(int(self.device.index))

    @property
    def bytes(self) -> int:
        """Bytes of the buffers the workspace holds now."""
        return int(self._native.bytes)

    @property
    def buffers(self) -> int:
        """Buffers the workspace holds now."""
        return int(self._native.buffers)


def load(artifact_dir: str, device=None, workspace: Optional[CudaWorkspace] = None
         ) -> "CudaProgram":
    """Loads a GPU artifact for running on ``device`` (default: torch's
    current CUDA device, or the workspace's), with its scratch buffers from
    ``workspace`` (a :class:`CudaWorkspace`) when one is given.

    The manifest is validated first (``ValueError`` naming the file and the
    field, also on machines without a GPU); then ``RuntimeError`` if torch
    has no CUDA, the driver or device is unusable, or no PTX of the artifact
    fits the device.
    """
    manifest = read_manifest(artifact_dir)
    torch = _require_torch_cuda("spin.load")
    if workspace is not None:
        if not isinstance(workspace, CudaWorkspace):
            raise TypeError(f"workspace must be a spin.CudaWorkspace, got "
                            f"{type(workspace).__name__}")
        if device is not None and _device_of(device) != workspace.device:
            raise ValueError(f"device {_device_of(device)} is not the workspace's "
                             f"{workspace.device}")
        native = _spin.GpuProgram.load_in(workspace._native, str(artifact_dir))
        return CudaProgram(native, manifest, workspace.device)
    device = _device_of(device)
    torch.cuda.init()  # torch's primary context exists before ours retains it
    native = _spin.GpuProgram.load(str(artifact_dir), int(device.index))
    return CudaProgram(native, manifest, device)


class CudaState:
    """SPIN state in device memory for the requests of one or more programs.

    As :class:`spin.State`: ``add`` a request after prefill, ``reset`` it at
    a new turn, ``commit`` the accepted draft count of an MTP verification
    step, ``release`` it when done. Zeroing is issued on torch's current
    stream. ``iteration`` and ``ema`` copy from the device (synchronising).
    """

    def __init__(self, pool: "_spin.GpuStatePool", device, slots: int,
                 capacity: int, layers: int, rows: int, block_size: int):
        self._pool = pool
        self.device = device
        self.slots = slots
        self.capacity = capacity
        self.layers = layers
        self.rows = rows
        self.block_size = block_size

    def _native(self) -> "_spin.GpuStatePool":
        if self._pool is None:
            raise RuntimeError("this CudaState is closed")
        return self._pool

    def add(self, request_id: int) -> int:
        """Starts tracking a request (fresh state); returns its slot."""
        return self._native().acquire(int(request_id), _stream(self.device))

    def reset(self, request_id: int) -> None:
        """Zeroes a request's state: after prefill or at a new turn."""
        self._native().reset(int(request_id), _stream(self.device))

    def commit(self, request_id: int, accepted: int) -> None:
        """Records how many draft tokens of the last MTP step were accepted."""
        self._native().commit(int(request_id), int(accepted))

    def release(self, request_id: int) -> None:
        """Forgets a finished request and frees its slot."""
        self._native().release(int(request_id))

    def slot(self, request_id: int) -> int:
        """The request's slot in the state arrays."""
        return self._native().slot_of(int(request_id))

    def has_pending_rows(self, request_id: int) -> bool:
        """True if an MTP step of the request awaits its commit."""
        return self._native().has_pending_rows(int(request_id))

    def iteration(self, request_id: int, layer: int = 0) -> int:
        """Decode steps since the request's last reset on ``layer``."""
        return self._native().iteration(int(request_id), int(layer), _stream(self.device))

    def ema(self, request_id: int, layer: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """Copies of the request's (V, D) vectors on ``layer``."""
        v, d = self._native().state(int(request_id), int(layer), _stream(self.device))
        return np.asarray(v, dtype=np.float32), np.asarray(d, dtype=np.float32)

    def __contains__(self, request_id: int) -> bool:
        return self._native().contains(int(request_id))

    def __len__(self) -> int:
        return self._native().live_requests()

    def close(self) -> None:
        """Frees the device memory once nothing references it; later use
        raises RuntimeError."""
        self._pool = None


def state_tensor_name(layer: int, field: str) -> str:
    """The name of the tensor holding state ``field`` of ``layer``
    ("state.0.v"), as :meth:`CudaProgram.run_batch` takes it."""
    return f"state.{int(layer)}.{field}"


def state_field_names(arguments: Iterable[Dict[str, Any]]) -> List[str]:
    """The state fields that step ``arguments`` (a signature, or a
    manifest's ``arguments``) bind, each once, in order."""
    names = []
    for a in arguments:
        if a[abi.KEY["Role"]] == abi.STATE and a[abi.KEY["Name"]] not in names:
            names.append(a[abi.KEY["Name"]])
    return names


def state_shapes(fields: Iterable[str], slots: int, capacity: int, max_rows: int,
                 block_size: int, layers: Iterable[int], pages: int = 0,
                 page_size: int = 0) -> Dict[str, Tuple[List[int], str]]:
    """name -> (shape, runtime element type) of every state tensor of
    ``fields`` on ``layers`` for ``slots`` state slots of ``capacity`` KV
    slots (docs/GPU-ABI.md, "State tensors"): the runtime's pool layout,
    from the ABI's field table. With ``page_size`` (the paged layout,
    docs/GPU-ABI.md, "Paged state") the per-KV-slot fields (V, D, obs_z)
    are ``pages`` pages of ``page_size`` entries instead of a row of
    ``capacity`` per slot."""
    sizes = {"slots": int(slots), abi.KEY["Capacity"]: int(capacity),
             abi.KEY["MaxRows"]: int(max_rows),
             "drafts": max(int(max_rows) - 1, 0),
             "blocks": -(-int(capacity) // int(block_size)),
             "prediction": abi.PREDICTION_RECORD_SIZE}
    paged_sizes = dict(sizes, slots=int(pages), **{abi.KEY["Capacity"]: int(page_size)})
    info = {f["name"]: f for f in abi.STATE_FIELDS}
    shapes = {}
    for layer in layers:
        for field in fields:
            f = info[field]
            paged = page_size > 0 and abi.KEY["Capacity"] in f["dims"]
            use = paged_sizes if paged else sizes
            shapes[state_tensor_name(layer, field)] = ([use[d] for d in f["dims"]],
                                                       f["dtype"])
    return shapes


class CudaStateTensors:
    """SPIN state in device tensors the caller owns: one zero-initialised
    tensor per state field and layer (``tensors``, by
    :func:`state_tensor_name`), for device-batch steps
    (:meth:`CudaProgram.run_batch`) and the torch op (``spin.ops``). No pool,
    no request table: the caller's ``slots`` input picks each row's state,
    and a new request's first step sets its ``reset`` flag. ``nbytes`` is
    the memory they take (:func:`spin.state_bytes`). With ``page_size``
    (the paged layout, docs/GPU-ABI.md, "Paged state") V, D and the MTP
    scores are ``pages`` pages of ``page_size`` KV slots, addressed by each
    step's ``state_block_table``; ``capacity`` is then the reach of the
    block table."""

    def __init__(self, tensors: Dict[str, Any], device, slots: int, capacity: int,
                 layers: int, rows: int, block_size: int, pages: int = 0,
                 page_size: int = 0):
        self.tensors = tensors
        self.device = device
        self.slots, self.capacity, self.layers = slots, capacity, layers
        self.rows, self.block_size = rows, block_size
        self.pages, self.page_size = pages, page_size

    @classmethod
    def allocate(cls, fields: Iterable[str], device, slots: int, capacity: int,
                 layers: int, rows: int, block_size: int, pages: int = 0,
                 page_size: int = 0) -> "CudaStateTensors":
        torch = _require_torch_cuda("allocating state tensors")
        checks = [("slots", slots), ("capacity", capacity), ("layers", layers),
                  ("rows", rows), ("block_size", block_size)]
        if page_size:
            checks += [("pages", pages), ("page_size", page_size)]
        for name, value in checks:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        shapes = state_shapes(fields, slots, capacity, rows, block_size, range(layers),
                              pages, page_size)
        tensors = {name: torch.zeros(shape, dtype=_torch_dtypes(dtype)[0], device=device)
                   for name, (shape, dtype) in shapes.items()}
        return cls(tensors, device, int(slots), int(capacity), int(layers), int(rows),
                   int(block_size), int(pages), int(page_size))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


class CudaProgram:
    """A loaded GPU artifact (see :func:`load`)."""

    def __init__(self, native: "_spin.GpuProgram", manifest: Dict[str, Any], device):
        self._native = native
        self.manifest = manifest
        self.device = device
        # Read by every step's binding: fixed for the program's life.
        self._status_outputs = tuple(native.status_outputs)

    @property
    def signature(self) -> List[Dict[str, Any]]:
        """The step's arguments, in call order (as in manifest.json)."""
        return self._native.signature

    @property
    def status_outputs(self) -> List[str]:
        """The names of the optional per-row status outputs ("status", then
        "status_1", ... per SPIN selection of the step): int32 [B] tensors
        given in ``outputs`` get each batch row's status at every step,
        written on the device (read them whenever convenient: no sync is
        needed to produce them). 0: stepped; -1: a padding row; otherwise
        the device error code that skipped the row
        (:func:`spin.abi.row_status` names it). docs/GPU-ABI.md, "Row
        status"."""
        return list(self._status_outputs)

    @property
    def chip(self) -> str:
        """The PTX that was loaded ("sm_90a", or a portable "sm_90")."""
        return self._native.chip

    @property
    def state_fields(self) -> List[str]:
        """The state fields the program binds (on each of its layers), in
        signature order."""
        return state_field_names(self.signature)

    @property
    def page_size(self) -> int:
        """KV slots per state page of a program compiled with paged state
        (docs/GPU-ABI.md, "Paged state"); 0 for the compact layout."""
        section = self.manifest.get(abi.KEY["State"]) or {}
        return int(section.get(abi.KEY["PageSize"], 0))

    def new_state_tensors(self, slots: int = 64, layers: Optional[int] = None,
                          capacity: Optional[int] = None,
                          pages: Optional[int] = None) -> CudaStateTensors:
        """Zeroed state tensors for ``slots`` slots on layers ``0 .. layers -
        1`` (default: the manifest's), of the fields this program binds
        (docs/GPU-ABI.md, "State tensors"); a paged program's V, D and MTP
        scores take ``pages`` state pages (required there)."""
        section = self.manifest.get(abi.KEY["State"]) or {}
        if not section:
            raise ValueError("the artifact keeps no SPIN state")
        page_size = self.page_size
        if page_size and pages is None:
            raise ValueError("this program keeps its state in pages (page_size "
                             f"{page_size}): give pages=, the state pages to allocate")
        if not page_size and pages is not None:
            raise ValueError("pages= is for programs compiled with paged state")
        return CudaStateTensors.allocate(
            self.state_fields, self.device, slots,
            capacity if capacity is not None else section[abi.KEY["Capacity"]],
            layers if layers is not None else section[abi.KEY["Layers"]],
            section[abi.KEY["MaxRows"]], section[abi.KEY["BlockSize"]],
            pages or 0, page_size)

    def new_state(self, slots: int = 64, capacity: Optional[int] = None,
                  layers: Optional[int] = None, rows: Optional[int] = None,
                  block_size: Optional[int] = None) -> CudaState:
        """Device state for up to ``slots`` requests. The other sizes default
        to the manifest's ``state`` section."""
        section = self.manifest.get(abi.KEY["State"]) or {}
        values = {"capacity": capacity, "layers": layers, "rows": rows,
                  "block_size": block_size}
        keys = {"capacity": abi.KEY["Capacity"], "layers": abi.KEY["Layers"],
                "rows": abi.KEY["MaxRows"], "block_size": abi.KEY["BlockSize"]}
        for name, value in list(values.items()):
            if value is None:
                if keys[name] not in section:
                    raise ValueError(f"{name} is required: the artifact's manifest "
                                     "has no state section")
                values[name] = section[keys[name]]
        values["slots"] = slots
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        pool = _spin.GpuStatePool(layers=int(values["layers"]), slots=int(slots),
                                  capacity=int(values["capacity"]),
                                  rows=int(values["rows"]),
                                  block_size=int(values["block_size"]),
                                  stream=_stream(self.device),
                                  device=int(self.device.index))
        return CudaState(pool, self.device, int(slots), int(values["capacity"]),
                         int(values["layers"]), int(values["rows"]),
                         int(values["block_size"]))

    def _tensor(self, what: str, name: str, value, arg: Dict[str, Any]):
        torch = _torch
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{what} {name!r} must be a torch.Tensor, got "
                            f"{type(value).__name__}")
        if value.device != self.device:
            raise ValueError(f"{what} {name!r} is on {value.device}, but the program "
                             f"runs on {self.device}")
        allowed = _torch_dtypes(arg["dtype"])
        if value.dtype not in allowed:
            names = " or ".join(str(t) for t in allowed)
            raise TypeError(f"{what} {name!r} has dtype {value.dtype}, expected "
                            f"{names} ({arg['dtype']})")
        if value.dim() != len(arg["shape"]):
            want = ", ".join("?" if d < 0 else str(d) for d in arg["shape"])
            raise ValueError(f"{what} {name!r} has shape {tuple(value.shape)}, "
                             f"expected [{want}]")
        if not value.is_contiguous():
            raise ValueError(f"{what} {name!r} is not contiguous; call .contiguous() first")
        # Queries and keys (1- and 2-byte elements) are read in 16-byte
        # vectors: a view that starts mid-vector would fault on the device.
        if arg["dtype"] in ("bf16", "f16", "fp8e4m3", "i8") and value.data_ptr() % 16:
            raise ValueError(f"{what} {name!r} starts at address {value.data_ptr():#x}, "
                             "not a multiple of 16 bytes (a view at an odd offset); "
                             "pass an aligned tensor or .clone() it")
        return (value.data_ptr(), list(value.shape), arg["dtype"])

    def __call__(self, inputs: Dict[str, Any], state: Optional[CudaState] = None,
                 request_ids: Optional[Iterable[int]] = None,
                 outputs: Optional[Dict[str, Any]] = None, *, layer: int = 0) -> Dict[str, Any]:
        """Issues one step on torch's current stream; returns the outputs.

        ``inputs`` maps the graph's input names (and "positions",
        "request_ids", optionally "reset") to contiguous CUDA tensors on the
        program's device; a missing "request_ids" input is made from
        ``request_ids`` (pass it explicitly when capturing a CUDA graph).
        ``request_ids`` is the host copy of the batch's ids, which finds the
        requests' slots in ``state``. ``outputs`` (optional) are
        caller-allocated result tensors; missing ones are allocated with
        ``torch.empty`` on the device. Nothing is synchronised: call
        :meth:`check` to learn about bad device data (block-table entries,
        lengths, positions).
        """
        torch = _require_torch_cuda("running a GPU artifact")
        stateful = any(a["role"] == abi.STATE for a in self.signature)
        self._check_state(state, stateful)
        ids = self._request_ids(request_ids, stateful)
        inputs = dict(self._check_dict("inputs", inputs))
        for arg in self.signature:
            name = arg["name"]
            if (arg["role"] == abi.REQUEST_IDS and name not in inputs
                    and ids is not None):
                if torch.cuda.is_current_stream_capturing():
                    raise ValueError("pass the 'request_ids' input tensor when "
                                     "capturing a CUDA graph")
                inputs[name] = torch.tensor(ids, dtype=torch.int64, device=self.device)
        native_in, native_out, outputs = self._bind(
            inputs, outputs, _INPUT_ROLES,
            len(ids) if ids is not None else self.manifest["batch"])
        pool = state._native() if state is not None and stateful else None
        self._native.run(pool, native_in, native_out, ids or [], _stream(self.device),
                         self._layer(layer))
        return outputs

    @property
    def layer_argument(self) -> bool:
        """Whether the step takes its layer at run time (``layer=``; compiled
        with ``layer_argument``): one program for every layer."""
        return bool(self._native.layer_argument)

    def _layer(self, layer) -> int:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or layer < 0:
            raise ValueError(f"layer must be a non-negative integer, got {layer!r}")
        if layer and not self.layer_argument:
            raise ValueError(f"this program was compiled for fixed layers (no "
                             f"layer_argument): it takes no layer={layer}")
        return int(layer)

    def run_batch(self, inputs: Dict[str, Any], state: Union[CudaState, CudaStateTensors],
                  outputs: Optional[Dict[str, Any]] = None, *,
                  layer: int = 0) -> Dict[str, Any]:
        """Issues one step whose batch is given by device tensors alone
        (docs/GPU-ABI.md, "Device batches"); returns the outputs.

        Besides the graph inputs, "positions" and "request_ids" (the ids
        the exploration hash mixes in), ``inputs`` holds "slots" (int32
        [B]: each row's slot in ``state``, chosen by the caller; -1 for a
        padding row, whose top-K row is -1 and whose state is not touched),
        for programs that commit MTP rows "accepted" (int32 [B]: the drafts
        accepted at the row's previous step) and optionally "reset" (bool
        [B]: the slot starts afresh before the step). Nothing is read on the
        host, so a CUDA graph captured from this call replays correctly for
        whatever those tensors hold at each replay. Bad slots and accepted
        counts are skipped on the device and reported by :meth:`check`,
        and per row in a "status" output when one is given
        (:attr:`status_outputs`).
        The first call hands a ``CudaState`` to device batches for good: it
        must have no requests added by id, and it refuses ``add``
        afterwards. ``state`` may instead be :class:`CudaStateTensors`
        (:meth:`new_state_tensors`): tensors the caller owns, stepped in
        place. ``layer``: the run-time layer of a program compiled with
        ``layer_argument`` (:attr:`layer_argument`); its state is that of
        layer ``layer``.
        """
        _require_torch_cuda("running a GPU artifact")
        if not any(a["role"] == abi.STATE for a in self.signature):
            raise ValueError("run_batch is for programs with SPIN state; call the "
                             "program directly (padding rows are rows of length 0)")
        layer = self._layer(layer)
        tensors = isinstance(state, CudaStateTensors)
        if not tensors:
            self._check_state(state, True)
        native_in, native_out, outputs = self._bind(
            self._check_dict("inputs", inputs), outputs, _BATCH_INPUT_ROLES,
            self.manifest["batch"])
        if tensors:
            native_in.update(self._state_tensors(state, layer))
            self._native.run_batch_tensors(native_in, native_out, _stream(self.device),
                                           layer)
        else:
            self._native.run_batch(state._native(), native_in, native_out,
                                   _stream(self.device), layer)
        return outputs

    def _state_tensors(self, state: CudaStateTensors, layer: int = 0) -> Dict[str, Any]:
        """The native refs of the state tensors this program binds (the
        runtime checks their shapes against the compiled state)."""
        if state.device != self.device:
            raise ValueError(f"state is on {state.device}, but the program runs on "
                             f"{self.device}")
        refs = {}
        for a in self.signature:
            if a["role"] != abi.STATE:
                continue
            name = state_tensor_name(a["layer"] + layer, a["name"])
            if name not in state.tensors:
                raise ValueError(f"the state tensors lack {name!r}: the program binds "
                                 f"state field {a['name']!r} of layer {a['layer'] + layer}")
            refs[name] = self._tensor("state tensor", name, state.tensors[name],
                                      {"dtype": a["dtype"], "shape": a["shape"]})
        return refs

    @staticmethod
    def _check_dict(what: str, value) -> Dict[str, Any]:
        if not isinstance(value, dict):
            raise TypeError(f"{what} must be a dict of tensors, got {type(value).__name__}")
        return value

    def _check_state(self, state, stateful: bool) -> None:
        if stateful and not isinstance(state, CudaState):
            raise TypeError("state must be a spin.CudaState (from new_state), got "
                            f"{type(state).__name__}")
        if state is not None and not isinstance(state, CudaState):
            raise TypeError(f"state must be a spin.CudaState, got {type(state).__name__}")
        if state is not None and state.device != self.device:
            raise ValueError(f"state is on {state.device}, but the program runs on "
                             f"{self.device}")

    def _bind(self, inputs: Dict[str, Any], outputs: Optional[Dict[str, Any]],
              roles: Tuple[str, ...], default_batch: int):
        """The native (pointer, shape, dtype) of every input of ``roles`` and
        every output (allocating missing outputs), checked against the
        signature."""
        outputs = dict(self._check_dict("outputs", outputs or {}))
        native_in, batch = {}, None
        for arg in self.signature:
            role, name = arg["role"], arg["name"]
            if role not in roles:
                continue
            if name not in inputs:
                if role == abi.RESET:
                    continue
                want = ", ".join("?" if d < 0 else str(d) for d in arg["shape"])
                raise ValueError(f"missing input {name!r} [{want}] {arg['dtype']}")
            native_in[name] = self._tensor("input", name, inputs[name], arg)
            if batch is None and not abi.is_paged_cache_input(name):
                batch = inputs[name].shape[0]
        known = {a["name"] for a in self.signature if a["role"] in roles}
        unknown = sorted(set(inputs) - known)
        if unknown:
            raise ValueError(f"unknown inputs {unknown}")
        if batch is None:
            batch = default_batch

        native_out = {}
        for arg in self.signature:
            if arg["role"] != abi.OUTPUT:
                continue
            name = arg["name"]
            if name not in outputs:
                outputs[name] = _new_output(arg, batch, self.device)
            native_out[name] = self._tensor("output", name, outputs[name], arg)
        # Row status outputs: written only where the caller gives them.
        status = self._status_outputs
        for name in status:
            if name in outputs:
                native_out[name] = self._tensor(
                    "output", name, outputs[name],
                    {"dtype": "i32", "shape": [self.manifest["batch"]]})
        unknown = sorted(set(outputs) - {a["name"] for a in self.signature
                                         if a["role"] == abi.OUTPUT} - set(status))
        if unknown:
            raise ValueError(f"unknown outputs {unknown}")
        return native_in, native_out, outputs

    run = __call__

    @staticmethod
    def _request_ids(request_ids, stateful: bool) -> Optional[List[int]]:
        if request_ids is None:
            if stateful:
                raise ValueError("request_ids is required for a program with state")
            return None
        if _torch is not None and isinstance(request_ids, _torch.Tensor):
            if request_ids.is_cuda and _torch.cuda.is_current_stream_capturing():
                raise ValueError("request_ids must be a host sequence (a list, a numpy "
                                 "array or a CPU tensor) while capturing a CUDA graph")
            request_ids = request_ids.cpu().numpy()
        array = np.asarray(request_ids)
        if array.ndim != 1 or not (array.size == 0 or np.issubdtype(array.dtype, np.integer)):
            raise ValueError("request_ids must be a 1-D sequence of integers, got "
                             f"{request_ids!r}")
        return [int(i) for i in array]

    def check(self) -> None:
        """Waits for torch's current stream and raises ``RuntimeError`` if a
        kernel found bad data since the last check (naming the request, row
        and value), or if a step failed on the device."""
        self._native.check(_stream(self.device))

    def reserve_captured_steps(self, count: int) -> None:
        """Staging buffers for ``count`` more steps captured in CUDA graphs
        (each captured step keeps one for the life of the program)."""
        self._native.reserve_captured_steps(int(count))

    @property
    def captured_steps_left(self) -> int:
        """Steps that can still be captured without reserving more."""
        return self._native.captured_steps_left

    @property
    def programmatic_launches(self) -> bool:
        """Whether each kernel of a step after the first is a programmatic
        dependent launch, scheduled while its predecessor finishes (on by
        default; docs/GPU-ABI.md, "Launch order"). Set it to False for plain
        launches, e.g. to compare; it applies to later steps."""
        return self._native.programmatic_launches

    @programmatic_launches.setter
    def programmatic_launches(self, on: bool) -> None:
        self._native.programmatic_launches = bool(on)
