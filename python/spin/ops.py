"""spin's GPU step as a torch custom op: ``torch.ops.spin.run_batch``.

A serving engine compiles its decode step with ``torch.compile`` and replays
it in CUDA graphs; a Python call into spin would break the graph. The op
takes a device-batch step (docs/GPU-ABI.md, "Device batches") whose state is
in tensors the caller owns (:class:`spin.CudaStateTensors`) and writes the
state and the caller's output tensors in place::

    from spin import ops                           # not loaded by import spin
    handle = ops.program_handle(program)           # once, outside compile
    ops.run_batch(handle, inputs, state, outputs, layer=0)

``run_batch`` orders the tensors as the op takes them:
``torch.ops.spin.run_batch(handle, layer, inputs: Tensor[], state:
Tensor(a!)[], outputs: Tensor(b!)[]) -> ()``, with the names of
:func:`op_arguments` (``layer``: the run-time layer of a program compiled
with ``layer_argument``, else 0). The
op has a fake (meta) implementation (it returns nothing and allocates
nothing), so it traces under ``torch.compile(fullgraph=True)``, and it is
checked with ``torch.library.opcheck`` on the GPU machine
(python/tests/test_ops_cuda.py). It needs torch >= 2.4
(``torch.library.custom_op``); :data:`AVAILABLE` says whether it is
registered.
"""

import re
import threading
from typing import Any, Dict, List, Tuple

from . import abi

try:
    import torch
except ImportError:  # pragma: no cover - spin works without torch
    torch = None

#: Whether torch.ops.spin.run_batch is registered (torch >= 2.4).
AVAILABLE = torch is not None and hasattr(torch, "library") and \
    hasattr(torch.library, "custom_op")

_lock = threading.Lock()
_programs: Dict[int, Any] = {}
_names: Dict[int, Tuple[Tuple[str, ...], Tuple[str, ...], Tuple[str, ...]]] = {}
#: id(program) -> handle (the programs are kept alive in _programs, so their
#: ids stay theirs): Indexer.run_batch looks its program up at every step.
_handles: Dict[int, int] = {}


def op_arguments(program, layer: int = 0) -> Tuple[Tuple[str, ...], Tuple[str, ...],
                                                  Tuple[str, ...]]:
    """The names of the op's ``inputs``, ``state`` and ``outputs`` lists for
    ``program`` (a :class:`spin.CudaProgram`) at run-time layer ``layer``,
    in order: every device-batch input the program takes ("reset" included
    where it takes one), the state tensors it binds
    (:func:`spin.cuda.state_tensor_name`), its outputs, then its row status
    outputs."""
    return _op_names(_signature_of(program), layer)


def _signature_of(program):
    from .cuda import _BATCH_INPUT_ROLES
    signature = program.signature
    inputs = tuple(a["name"] for a in signature if a["role"] in _BATCH_INPUT_ROLES)
    state = tuple((a["layer"], a["name"]) for a in signature if a["role"] == abi.STATE)
    outputs = tuple(a["name"] for a in signature if a["role"] == abi.OUTPUT)
    return inputs, state, outputs + tuple(program.status_outputs)


def _op_names(signature, layer):
    from .cuda import state_tensor_name
    inputs, state, outputs = signature
    return inputs, tuple(state_tensor_name(at + layer, field) for at, field in state), outputs


def program_handle(program) -> int:
    """The integer the op names ``program`` by (registered on first use;
    call it outside ``torch.compile`` and graph captures). The program
    stays alive while registered."""
    handle = _handles.get(id(program))
    if handle is not None:
        return handle
    if not any(a["role"] == abi.STATE for a in program.signature):
        raise ValueError("the op steps SPIN state: this program keeps none")
    with _lock:
        handle = _handles.get(id(program))
        if handle is None:
            handle = len(_programs) + 1
            _programs[handle] = program
            _names[handle] = _signature_of(program)
            _handles[id(program)] = handle
        return handle


def _require():
    if not AVAILABLE:
        raise RuntimeError("torch.ops.spin.run_batch needs torch >= 2.4 "
                           "(torch.library.custom_op); this torch is "
                           f"{getattr(torch, '__version__', 'missing')}")


def run_batch(handle: int, inputs: Dict[str, Any], state, outputs: Dict[str, Any],
              layer: int = 0) -> None:
    """One device-batch step through the op: ``inputs`` and ``outputs``
    (dicts of CUDA tensors, the status outputs included) and ``state``
    (:class:`spin.CudaStateTensors` or a dict by state tensor name) are put
    in the op's order; every name of :func:`op_arguments` must be given.
    ``layer``: the run-time layer (programs compiled with
    ``layer_argument``)."""
    _require()
    signature = _names.get(handle)
    if signature is None:
        raise ValueError(f"{handle!r} is not a program handle (spin.ops.program_handle)")
    names = _op_names(signature, layer)
    tensors = getattr(state, "tensors", state)
    # Other layers' tensors of the fields the program binds may come along
    # (a model's state holds every layer): the step takes its layer's.
    fields = {field for _, field in signature[1]}
    other_layer = re.compile(r"state\.\d+\.(\w+)$")
    lists = []
    for what, given, wanted in (("inputs", inputs, names[0]), ("state", tensors, names[1]),
                                ("outputs", outputs, names[2])):
        missing = [n for n in wanted if n not in given]
        if missing:
            raise ValueError(f"{what} lacks {missing} (the op takes {list(wanted)})")
        unknown = sorted(set(given) - set(wanted))
        if what == "state":
            unknown = [n for n in unknown
                       if (m := other_layer.match(n)) is None or m.group(1) not in fields]
        if unknown:
            raise ValueError(f"unknown {what} {unknown} (the op takes {list(wanted)})")
        lists.append([given[n] for n in wanted])
    torch.ops.spin.run_batch(handle, layer, *lists)


if AVAILABLE:
    @torch.library.custom_op("spin::run_batch", mutates_args=("state", "outputs"),
                             device_types="cuda")
    def _run_batch(handle: int, layer: int, inputs: List[torch.Tensor],
                   state: List[torch.Tensor], outputs: List[torch.Tensor]) -> None:
        from .cuda import CudaStateTensors
        program = _programs[handle]
        input_names, state_names, output_names = _op_names(_names[handle], layer)
        tensors = dict(zip(state_names, state))
        first = state[0]
        view = CudaStateTensors(tensors, first.device, int(first.shape[0]), 0, 0, 0, 0)
        program.run_batch(dict(zip(input_names, inputs)), view,
                          dict(zip(output_names, outputs)), layer=layer)

    @_run_batch.register_fake
    def _run_batch_fake(handle, layer, inputs, state, outputs) -> None:
        return None
