"""The compiler-runtime contract, as the native module exposes it.

Every name that crosses between the compiler and the runtime is defined once,
in ``runtime/include/spin/Runtime/Abi.def``; this module gives Python code the
same names instead of spelling them again:

* ``STATE_FIELDS``: the per-layer state arrays, in pool layout order, each a
  dict with ``name``, ``dtype``, ``dims`` (``slots``, ``capacity``,
  ``max_rows``, ``blocks``, ``prediction``) and ``group`` (``core``,
  ``observation``, ``prediction``, ``staleness``);
* ``state_fields(group)``: the names of one group's fields;
* ``ROLES`` / ``OUTPUTS``: argument roles and result kinds by their C++
  enumerator (``ROLES["RequestIds"] == "request_ids"``), and each as a
  constant (``REQUEST_IDS``, ``STATE``, ``TOPK``, ...);
* ``KEY``: manifest.json member names by enumerator (``KEY["MaxRows"]``);
* ``DEVICE_ERRORS``: the device error codes by value (``{4: "BadSlot"}``),
  and ``row_status(code)``, what a row status output's value means;
* ``block_budget``: SPIN's block budget, computed by the runtime's rule;
* ``is_paged_cache_input(name)``: whether an input is a key cache (no batch
  dimension), by the runtime's rule.
"""

from typing import Dict, Tuple

from . import _spin

_abi = _spin.abi

STATE_FIELDS: Tuple[dict, ...] = tuple(dict(f) for f in _abi.state_fields)
PREDICTION_RECORD_SIZE: int = int(_abi.prediction_record_size)
ROLES: Dict[str, str] = dict(_abi.roles)
OUTPUTS: Dict[str, str] = dict(_abi.outputs)
KEY: Dict[str, str] = dict(_abi.manifest_keys)
MANIFEST_FORMAT: str = str(_abi.manifest_format)
MANIFEST_VERSION: int = int(_abi.manifest_version)

#: Argument roles, as manifests and signatures name them.
INPUT: str = ROLES["Input"]
POSITIONS: str = ROLES["Positions"]
REQUEST_IDS: str = ROLES["RequestIds"]
ACCEPTED: str = ROLES["Accepted"]
RESET: str = ROLES["Reset"]
SLOTS: str = ROLES["Slots"]
STATE: str = ROLES["State"]
OUTPUT: str = ROLES["Output"]
DEVICE_ERRORS: Dict[int, str] = {int(k): str(v) for k, v in dict(_abi.device_errors).items()}

#: Result kinds (the k-th result of a kind is named with the suffix ``_k``).
TOPK: str = OUTPUTS["TopK"]
SPARSITY: str = OUTPUTS["Sparsity"]
SCORES: str = OUTPUTS["Scores"]


def row_status(code: int) -> str:
    """What a row status value means (docs/GPU-ABI.md, "Row status"):
    "stepped", "padding", or the device error that skipped the row
    ("BadSlot", "DuplicateSlot", "BadAccepted", "BadLength",
    "BadPosition", "BadStatePage") or its state update ("BadPage": a
    block-table entry outside the key cache)."""
    code = int(code)
    if code == 0:
        return "stepped"
    if code == -1:
        return "padding"
    if code in DEVICE_ERRORS:
        return DEVICE_ERRORS[code]
    raise ValueError(f"{code} is not a row status")


def is_paged_cache_input(name: str) -> bool:
    """Whether input ``name`` is a key cache (``keys``, ``scales``,
    ``kv_cache`` or their ``_k`` forms): its size 0 counts pages, not the
    batch (the runtime's rule)."""
    return bool(_abi.is_paged_cache_input(str(name)))


def block_budget(blocks: int, block_size: int, topk: int, sparsity: float) -> int:
    """SPIN_SPEC §3.4's block budget m for ``blocks`` blocks: the rule the
    compiled code applies (spin/Runtime/Semantics.h), not a copy of it."""
    return int(_abi.block_budget(int(blocks), int(block_size), int(topk), float(sparsity)))


def state_fields(group: str) -> Tuple[str, ...]:
    """The names of the state fields of ``group``, in pool layout order."""
    names = tuple(f["name"] for f in STATE_FIELDS if f["group"] == group)
    if not names:
        known = sorted({f["group"] for f in STATE_FIELDS})
        raise ValueError(f"unknown state-field group {group!r} (known: {', '.join(known)})")
    return names
