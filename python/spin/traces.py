"""Indexer traces: the on-disk format (docs/trace-format.md) and a synthetic
trace generator.

A trace is a directory a serving engine can write with numpy alone::

    trace/header.json
    trace/layer_000/keys.npy               # optional: shared by all steps of the layer
    trace/layer_000/step_00000/q.npy       # [B, R, H, D]
    trace/layer_000/step_00000/w.npy       # [B, R, H] float32
    trace/layer_000/step_00000/lengths.npy, positions.npy   # [B, R] int32
    trace/layer_000/step_00000/block_table.npy              # [B, MB] int32 (or shared)
    ...

Every array may live in the step directory, in the layer directory (shared
by all steps of the layer) or in the trace root (shared by all layers and
steps); the most specific one wins. ``load_trace`` checks the header and
every file's .npy header and size before anything is read, and raises
``TraceError`` naming the file and the mismatch.

A scores trace (``"kind": "scores"`` in the header) stores the dense indexer
scores ``z.npy`` [B, R, NS] float32 with ``lengths.npy``, ``positions.npy``
and an optional ``request_ids.npy`` [B] int64 instead of the inputs.

Requests may join and leave mid-trace: the header's ``request_ids`` is then
one list of ``batch`` entries per step, an id or ``null`` for a batch index
that holds no request at that step (its rows in the arrays are ignored).

This module needs numpy only (it does not import the compiled ``spin``
extension), so it can be imported from the source tree as ``traces``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

FORMAT = "spin-trace"
VERSION = 1
KEY_FORMATS = ("f32", "f16", "bf16", "fp8")
#: The optional header field ``query_format``: absent (the key format's own
#: queries) or "fp8" (fp8 e4m3 queries as uint8 bit patterns, with fp8 keys).
QUERY_FORMATS = ("fp8",)

#: Arrays of one step: name -> (rank, allowed dtypes per key format).
_ARRAYS = ("q", "w", "keys", "scales", "block_table", "lengths", "positions")
#: Arrays of one step of a scores trace (``"kind": "scores"``).
_SCORE_ARRAYS = ("z", "lengths", "positions")
KINDS = ("inputs", "scores")


class TraceError(ValueError):
    """A trace directory that does not match docs/trace-format.md."""


# ----------------------------------------------------------------------------
# element types


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Rounds float32 to bfloat16 (nearest even); returns uint16 bit patterns."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _fp8_e4m3_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        exp, man = (b >> 3) & 0xF, b & 0x7
        if exp == 0xF and man == 0x7:
            table[b] = np.nan
        elif exp == 0:
            table[b] = sign * (man / 8.0) * 2.0 ** -6
        else:
            table[b] = sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)
    return table


_FP8 = _fp8_e4m3_table()


def fp8_e4m3_bits_to_f64(bits: np.ndarray) -> np.ndarray:
    return _FP8[np.asarray(bits, dtype=np.uint8)]


def _float_dtypes(key_format: str, query_format: Optional[str] = None):
    """Allowed (q dtypes, keys dtypes) for a key format (and fp8 queries)."""
    q_types, k_types = {
        "f32": ((np.float32,), (np.float32,)),
        "f16": ((np.float16,), (np.float16,)),
        "bf16": ((np.uint16, np.float32), (np.uint16, np.float32)),
        "fp8": ((np.uint16, np.float32), (np.uint8,)),
    }[key_format]
    return ((np.uint8,) if query_format == "fp8" else q_types), k_types


def to_f64(array: np.ndarray, what: str, key_format: str) -> np.ndarray:
    """Values of a q or keys array as the compiled path sees them, in float64."""
    if key_format in ("bf16", "fp8") and array.dtype == np.float32:
        array = f32_to_bf16_bits(array)  # the compiled path rounds to bf16
    if array.dtype == np.uint16:
        return bf16_bits_to_f32(array).astype(np.float64)
    if array.dtype == np.uint8:
        return fp8_e4m3_bits_to_f64(array)
    return array.astype(np.float64)


# ----------------------------------------------------------------------------
# reading and validation


def _npy_info(path: str):
    """(shape, dtype) from a .npy header; TraceError if missing or truncated."""
    rel = path
    if not os.path.isfile(path):
        raise TraceError(f"{rel}: missing file")
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            offset = f.tell()
    except Exception as e:  # noqa: BLE001 - any parse failure is a bad file
        raise TraceError(f"{rel}: not a valid .npy file ({e})") from None
    if dtype.hasobject:
        raise TraceError(f"{rel}: object arrays are not allowed")
    if fortran:
        raise TraceError(f"{rel}: Fortran-ordered arrays are not allowed; save C order")
    need = dtype.itemsize  # Python ints: a corrupt header's sizes cannot wrap
    for n in shape:
        need *= int(n)
    have = os.path.getsize(path) - offset
    if have < need:
        raise TraceError(f"{rel}: truncated: header says shape {tuple(shape)} {dtype} "
                         f"({need} data bytes) but the file has {have} data bytes")
    return tuple(shape), dtype


@dataclass
class Trace:
    """An opened, validated trace directory."""

    path: str
    header: dict
    files: Dict[tuple, str] = field(default_factory=dict)  # (layer, step, name) -> path
    #: [B] int64: the requests of the first step (of every step unless the
    #: header lists request_ids per step; an empty batch index reads -1).
    request_ids: np.ndarray = None
    accepted: Optional[np.ndarray] = None  # [steps, B] for rows > 1 (0 where empty)
    resets: Optional[np.ndarray] = None  # [steps, B] bool: a new turn starts
    #: [steps, B] int64 request id of each batch index at each step (-1 where
    #: ``active`` is False).
    ids: Optional[np.ndarray] = None
    #: [steps, B] bool: the batch index holds a request at that step.
    active: Optional[np.ndarray] = None

    @property
    def changing_batch(self) -> bool:
        """True when requests join or leave mid-trace (per-step request_ids)."""
        return bool(isinstance(self.header.get("request_ids"), list) and
                    any(isinstance(x, list) for x in self.header["request_ids"]))

    def first_steps(self) -> np.ndarray:
        """[steps, B] bool: the request at that batch index has its first
        step of the trace there (its dense warm-up after prefill)."""
        T, B = self.active.shape
        first = np.zeros((T, B), dtype=bool)
        seen = set()
        for t in range(T):
            for b in np.flatnonzero(self.active[t]):
                rid = int(self.ids[t, b])
                if rid not in seen:
                    seen.add(rid)
                    first[t, b] = True
        return first

    def last_steps(self) -> Dict[int, int]:
        """Request id -> the last step at which it is in the batch."""
        last = {}
        for t in range(self.active.shape[0]):
            for b in np.flatnonzero(self.active[t]):
                last[int(self.ids[t, b])] = t
        return last

    def max_live_requests(self) -> int:
        """The most requests live at once (from a request's first step to its
        last one, whether or not it is in every batch in between): the
        replay's state pool size."""
        first, last = {}, self.last_steps()
        for t in range(self.active.shape[0]):
            for b in np.flatnonzero(self.active[t]):
                first.setdefault(int(self.ids[t, b]), t)
        live = [sum(1 for r in first if first[r] <= t <= last[r])
                for t in range(self.active.shape[0])]
        return max(live + [1])

    def __getattr__(self, name):
        header = self.__dict__.get("header") or {}
        if name in header:
            return header[name]
        raise AttributeError(name)

    def step(self, layer: int, step: int) -> Dict[str, np.ndarray]:
        """The arrays of one layer and decode step (loaded, value-checked)."""
        out = {}
        scores = self.header.get("kind", "inputs") == "scores"
        for name in _SCORE_ARRAYS if scores else _ARRAYS:
            path = self.files.get((layer, step, name))
            if path is None:
                continue
            try:
                out[name] = np.load(path, allow_pickle=False)
            except Exception as e:  # noqa: BLE001
                raise TraceError(f"{path}: cannot be read ({e})") from None
        if scores:
            _check_score_values(self, layer, step, out)
        else:
            _check_values(self, layer, step, out)
        return out

    @property
    def kind(self) -> str:
        """``"inputs"`` (indexer inputs) or ``"scores"`` (dense scores z)."""
        return self.header.get("kind", "inputs")


def _where(root: str, layer: int, step: int, name: str) -> Optional[str]:
    for d in (os.path.join(root, f"layer_{layer:03d}", f"step_{step:05d}"),
              os.path.join(root, f"layer_{layer:03d}"), root):
        p = os.path.join(d, name + ".npy")
        if os.path.isfile(p):
            return p
    return None


_REQUIRED = {"layers": int, "steps": int, "batch": int, "rows": int, "heads": int,
             "head_dim": int, "page_size": int, "topk": int, "key_format": str}
#: A scores trace has no indexer inputs: heads, head_dim and key_format are
#: not needed (kept and ignored when present).
_REQUIRED_SCORES = {k: v for k, v in _REQUIRED.items()
                    if k not in ("heads", "head_dim", "key_format")}


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _read_request_ids(hp: str, value, T: int, B: int):
    """The header's ``request_ids``: absent (``0..B-1`` at every step), a list
    of ``B`` distinct ids (the same requests at every step), or one such list
    per step whose entries may be ``null`` (no request at that batch index
    that step). Returns ``(ids, active)``, both ``[steps, B]``."""
    if value is None:
        value = list(range(B))
    if not isinstance(value, list):
        raise TraceError(f"{hp}: request_ids must be a list of {B} distinct integers (batch) or "
                         f"one such list per step, got {value!r}")
    per_step = any(isinstance(x, list) for x in value)
    rows = value if per_step else [value]
    if per_step and len(value) != T:
        raise TraceError(f"{hp}: request_ids lists {len(value)} steps, expected {T} (steps) "
                         f"lists of {B} entries (batch)")
    ids = np.full((len(rows), B), -1, dtype=np.int64)
    active = np.zeros((len(rows), B), dtype=bool)
    for t, row in enumerate(rows):
        where = f"request_ids[{t}]" if per_step else "request_ids"
        if not isinstance(row, list) or len(row) != B:
            raise TraceError(f"{hp}: {where} must list {B} entries (batch), got {row!r}")
        seen = {}
        for b, rid in enumerate(row):
            if rid is None and per_step:
                continue
            if not _is_int(rid):
                kind = "an integer or null (no request)" if per_step else "an integer"
                raise TraceError(f"{hp}: {where}[{b}] = {rid!r} is not {kind}")
            if not -2 ** 63 <= rid < 2 ** 63:
                raise TraceError(f"{hp}: {where}[{b}] = {rid} does not fit in int64")
            if rid in seen:
                raise TraceError(f"{hp}: {where} lists request {rid} twice (batch indices "
                                 f"{seen[rid]} and {b}); a request is at one batch index "
                                 "per step")
            seen[rid] = b
            ids[t, b] = rid
            active[t, b] = True
    if not per_step:
        ids, active = np.repeat(ids, T, axis=0), np.repeat(active, T, axis=0)
    return ids, active


def _read_accepted(hp: str, value, T: int, B: int, R: int, active: np.ndarray) -> np.ndarray:
    """The header's ``accepted`` (MTP traces): ``steps`` lists of ``B``
    counts in ``0..R-1``; entries of empty batch indices are ignored and may
    be ``null``. Returns ``[steps, B]`` int64 (0 where empty)."""
    if value is None:
        raise TraceError(f"{hp}: rows={R} (MTP) needs 'accepted': steps x batch "
                         "accepted draft counts")
    if (not isinstance(value, list) or len(value) != T or
            not all(isinstance(row, list) and len(row) == B for row in value)):
        if not isinstance(value, list):
            shape = type(value).__name__
        elif all(isinstance(row, list) for row in value):
            widths = sorted({len(row) for row in value})
            shape = (len(value), widths[0]) if len(widths) == 1 else \
                f"({len(value)} rows of {', '.join(map(str, widths))} entries)"
        else:
            shape = (len(value),)
        raise TraceError(f"{hp}: 'accepted' has shape {shape}, expected "
                         f"[steps, batch] = ({T}, {B})")
    out = np.zeros((T, B), dtype=np.int64)
    for t, row in enumerate(value):
        for b, a in enumerate(row):
            if not active[t, b] and a is None:
                continue
            if not _is_int(a) or not 0 <= a <= R - 1:
                raise TraceError(f"{hp}: 'accepted' values must lie in 0..{R - 1} (rows - 1); "
                                 f"accepted[{t}][{b}] is {a!r}")
            out[t, b] = a if active[t, b] else 0
    return out


def _read_resets(hp: str, value, T: int, B: int) -> np.ndarray:
    """The header's optional ``resets``: ``[step, batch index]`` pairs at which
    a request starts a new turn (its state is reset before that step, which
    is then a dense warm-up). Returns a ``[steps, B]`` bool matrix."""
    resets = np.zeros((T, B), dtype=bool)
    if value is None:
        return resets
    if not isinstance(value, list):
        raise TraceError(f"{hp}: 'resets' must be a list of [step, batch index] pairs, "
                         f"got {value!r}")
    for pair in value:
        if (not isinstance(pair, list) or len(pair) != 2 or
                not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)):
            raise TraceError(f"{hp}: 'resets' entries must be [step, batch index] integer "
                             f"pairs, got {pair!r}")
        t, b = pair
        if not 0 <= t < T:
            raise TraceError(f"{hp}: reset {pair}: step {t} is outside 0..{T - 1} (steps)")
        if not 0 <= b < B:
            raise TraceError(f"{hp}: reset {pair}: batch index {b} is outside 0..{B - 1} "
                             "(batch)")
        if resets[t, b]:
            raise TraceError(f"{hp}: reset {pair} is listed twice")
        resets[t, b] = True
    return resets


def load_trace(path: str) -> Trace:
    """Opens a trace directory and validates all of it (headers and sizes
    of every file; values are checked when a step is loaded)."""
    hp = os.path.join(path, "header.json")
    if not os.path.isdir(path):
        raise TraceError(f"{path}: not a directory")
    if not os.path.isfile(hp):
        raise TraceError(f"{hp}: missing file")
    try:
        with open(hp) as f:
            header = json.load(f)
    except json.JSONDecodeError as e:
        raise TraceError(f"{hp}: not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise TraceError(f"{hp}: must hold a JSON object")
    if header.get("format", FORMAT) != FORMAT:
        raise TraceError(f"{hp}: format is {header.get('format')!r}, expected {FORMAT!r}")
    if header.get("version", VERSION) != VERSION:
        raise TraceError(f"{hp}: version {header.get('version')!r} is not supported "
                         f"(this reader knows version {VERSION})")
    kind = header.get("kind", "inputs")
    if kind not in KINDS:
        raise TraceError(f"{hp}: kind {kind!r} is not one of {KINDS}")
    for key, typ in (_REQUIRED_SCORES if kind == "scores" else _REQUIRED).items():
        if key not in header:
            raise TraceError(f"{hp}: missing field {key!r}")
        value = header[key]
        if typ is int and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise TraceError(f"{hp}: field {key!r} must be a positive integer, got {value!r}")
    if kind == "inputs" and header["key_format"] not in KEY_FORMATS:
        raise TraceError(f"{hp}: key_format {header['key_format']!r} is not one of {KEY_FORMATS}")
    if kind == "inputs" and "query_format" in header:
        qf = header["query_format"]
        if qf not in QUERY_FORMATS:
            raise TraceError(f"{hp}: query_format {qf!r} is not one of {QUERY_FORMATS} "
                             "(leave it out for the key format's own queries)")
        if header["key_format"] != "fp8":
            raise TraceError(f"{hp}: query_format 'fp8' needs key_format 'fp8' (fp8 e4m3 "
                             f"queries need fp8 e4m3 keys), header says "
                             f"{header['key_format']!r}")
    L, T, B, R = header["layers"], header["steps"], header["batch"], header["rows"]
    ids, active = _read_request_ids(hp, header.get("request_ids"), T, B)
    accepted = _read_accepted(hp, header.get("accepted"), T, B, R, active) if R > 1 else None
    resets = _read_resets(hp, header.get("resets"), T, B)
    for t, b in np.argwhere(resets & ~active):
        raise TraceError(f"{hp}: reset [{t}, {b}]: batch index {b} holds no request at step "
                         f"{t} (request_ids[{t}][{b}] is null)")
    trace = Trace(path=path, header=header, request_ids=ids[0].copy(), accepted=accepted,
                  resets=resets, ids=ids, active=active)
    if kind == "scores":
        _load_scores(trace, hp)
        return trace
    H, D, S, fmt = header["heads"], header["head_dim"], header["page_size"], header["key_format"]
    q_types, k_types = _float_dtypes(fmt, header.get("query_format"))
    for layer in range(L):
        ld = _check_dirs(path, layer, L, T)
        for step in range(T):
            sd = os.path.join(ld, f"step_{step:05d}")
            mb = None
            for name in _ARRAYS:
                p = _where(path, layer, step, name)
                if p is None:
                    if name == "scales" and fmt != "fp8":
                        continue
                    raise TraceError(f"{os.path.join(sd, name + '.npy')}: missing file "
                                     "(not in the step, layer or trace directory either)")
                if name == "scales" and fmt != "fp8":
                    raise TraceError(f"{p}: scales are only used with key_format 'fp8', "
                                     f"header says {fmt!r}")
                shape, dtype = _npy_info(p)
                want, types = {
                    "q": ((B, R, H, D), q_types), "w": ((B, R, H), (np.float32,)),
                    "keys": ((None, S, D), k_types), "scales": ((None, S), (np.float32,)),
                    "block_table": ((B, None), (np.int32,)),
                    "lengths": ((B, R), (np.int32,)), "positions": ((B, R), (np.int32,)),
                }[name]
                if len(shape) != len(want) or any(e is not None and e != g
                                                  for e, g in zip(want, shape)):
                    desc = ", ".join("?" if e is None else str(e) for e in want)
                    raise TraceError(f"{p}: shape {shape} does not match the header: expected "
                                     f"[{desc}] ({_shape_names(name)})")
                if dtype.type not in types:
                    what = (f"query_format 'fp8'" if name == "q" and header.get("query_format")
                            else f"key_format {fmt!r}")
                    raise TraceError(f"{p}: dtype {dtype} is not allowed for {name} with "
                                     f"{what} (allowed: "
                                     f"{', '.join(np.dtype(t).name for t in types)})")
                if name == "block_table":
                    mb = shape[1]
                trace.files[(layer, step, name)] = p
            trace.files[(layer, step, "_mb")] = mb
    return trace


def _check_dirs(path: str, layer: int, L: int, T: int) -> str:
    ld = os.path.join(path, f"layer_{layer:03d}")
    if not os.path.isdir(ld):
        raise TraceError(f"{ld}: missing directory (header says {L} layers)")
    extra = os.path.join(path, f"layer_{L:03d}")
    if layer == L - 1 and os.path.isdir(extra):
        raise TraceError(f"{extra}: header says {L} layers but this directory exists")
    for step in range(T):
        sd = os.path.join(ld, f"step_{step:05d}")
        if not os.path.isdir(sd):
            raise TraceError(f"{sd}: missing directory (header says {T} steps)")
    return ld


def _load_scores(trace: Trace, hp: str) -> None:
    """Validates the files of a scores trace (z, lengths, positions and the
    optional request_ids.npy) from their .npy headers; reads request_ids."""
    path, header = trace.path, trace.header
    L, T, B, R, S = (header[k] for k in ("layers", "steps", "batch", "rows", "page_size"))
    ids_seen = None  # (path, ids) of the first request_ids.npy
    for layer in range(L):
        ld = _check_dirs(path, layer, L, T)
        for step in range(T):
            sd = os.path.join(ld, f"step_{step:05d}")
            for name in _SCORE_ARRAYS + ("request_ids",):
                p = _where(path, layer, step, name)
                if p is None:
                    if name == "request_ids":
                        continue
                    raise TraceError(f"{os.path.join(sd, name + '.npy')}: missing file "
                                     "(not in the step, layer or trace directory either)")
                shape, dtype = _npy_info(p)
                want, typ = {"z": ((B, R, None), np.float32),
                             "lengths": ((B, R), np.int32), "positions": ((B, R), np.int32),
                             "request_ids": ((B,), np.int64)}[name]
                if len(shape) != len(want) or any(e is not None and e != g
                                                  for e, g in zip(want, shape)):
                    desc = ", ".join("?" if e is None else str(e) for e in want)
                    raise TraceError(f"{p}: shape {shape} does not match the header: expected "
                                     f"[{desc}] ({_shape_names(name)})")
                if dtype.type is not typ:
                    raise TraceError(f"{p}: dtype {dtype} is not allowed for {name} in a "
                                     f"scores trace (allowed: {np.dtype(typ).name})")
                if name == "z":
                    if shape[2] < 1 or shape[2] % S:
                        raise TraceError(f"{p}: NS = {shape[2]} slots is not a positive "
                                         f"multiple of page_size = {S} (the SPIN block size "
                                         "must divide NS; pad z with -inf)")
                    trace.files[(layer, step, "_ns")] = shape[2]
                if name == "request_ids":
                    if trace.changing_batch:
                        raise TraceError(f"{p}: {hp} lists request_ids per step (requests "
                                         "join or leave), so the trace takes no "
                                         "request_ids.npy; remove it")
                    if ids_seen is None or ids_seen[0] != p:
                        ids = np.load(p, allow_pickle=False)
                        if len(set(ids.tolist())) != B:
                            raise TraceError(f"{p}: request ids must be {B} distinct "
                                             f"integers (batch), got {ids.tolist()}")
                        if ids_seen is None:
                            if "request_ids" in header and \
                                    list(header["request_ids"]) != ids.tolist():
                                raise TraceError(f"{p}: {ids.tolist()} differs from "
                                                 f"{hp} request_ids {header['request_ids']}")
                            ids_seen = (p, ids)
                        elif not np.array_equal(ids, ids_seen[1]):
                            raise TraceError(f"{p}: {ids.tolist()} differs from "
                                             f"{ids_seen[0]} {ids_seen[1].tolist()} (the same "
                                             "requests must be in every step, in order)")
                trace.files[(layer, step, name)] = p
    if ids_seen is not None:
        trace.request_ids = ids_seen[1].astype(np.int64)
        trace.ids = np.repeat(trace.request_ids[None, :], T, axis=0)


def _active_rows(trace: Trace, step: int, arrays: Dict[str, np.ndarray], names):
    """The arrays restricted to the batch indices holding a request at
    ``step`` (the rows of empty ones are never read), with those indices."""
    keep = np.flatnonzero(trace.active[step])
    return keep, {n: (arrays[n][keep] if n in names else arrays[n]) for n in arrays}


def _check_score_values(trace: Trace, layer: int, step: int, arrays: Dict[str, np.ndarray]):
    where = os.path.join(trace.path, f"layer_{layer:03d}", f"step_{step:05d}")
    keep, arrays = _active_rows(trace, step, arrays, ("z", "lengths", "positions"))
    if keep.size == 0:
        return
    z, lengths, positions = arrays["z"], arrays["lengths"], arrays["positions"]
    zp = trace.files[(layer, step, "z")]
    ns = z.shape[2]
    if lengths.min() < 1:
        raise TraceError(f"{where}: lengths.npy has a value {int(lengths.min())} < 1")
    if lengths.max() > ns:
        b, r = np.unravel_index(int(np.argmax(lengths)), lengths.shape)
        raise TraceError(f"{zp}: NS = {ns} slots is smaller than a length: lengths.npy has "
                         f"{int(lengths[b, r])} (request {int(keep[b])}, row {r}); z must hold "
                         "every visible slot")
    if (positions < lengths - 1).any():
        raise TraceError(f"{where}: positions.npy must be >= lengths - 1 (visible slots never "
                         "lie after the query)")
    if (positions >= ns).any():
        raise TraceError(f"{where}: positions.npy has a value {int(positions.max())} >= "
                         f"z.npy's NS = {ns} (the replay's state capacity)")
    visible = np.arange(ns)[None, None, :] < lengths[:, :, None]
    bad = np.isnan(z) & visible
    if bad.any():
        b, r, i = (int(x) for x in np.argwhere(bad)[0])
        raise TraceError(f"{zp}: NaN at request {int(keep[b])}, row {r}, slot {i} (inside the "
                         "row's length; use -inf for slots to ignore)")


def _shape_names(name: str) -> str:
    return {"q": "batch, rows, heads, head_dim", "w": "batch, rows, heads",
            "keys": "pages, page_size, head_dim", "scales": "pages, page_size",
            "block_table": "batch, max_pages", "lengths": "batch, rows",
            "positions": "batch, rows", "z": "batch, rows, slots",
            "request_ids": "batch"}[name]


def _check_values(trace: Trace, layer: int, step: int, arrays: Dict[str, np.ndarray]):
    where = os.path.join(trace.path, f"layer_{layer:03d}", f"step_{step:05d}")
    keep, arrays = _active_rows(trace, step, arrays, ("block_table", "lengths", "positions"))
    if keep.size == 0:
        return
    table, lengths, positions = arrays["block_table"], arrays["lengths"], arrays["positions"]
    pages = arrays["keys"].shape[0]
    cap = table.shape[1] * trace.header["page_size"]
    if lengths.min() < 1:
        raise TraceError(f"{where}: lengths.npy has a value {int(lengths.min())} < 1")
    if lengths.max() > cap:
        raise TraceError(f"{where}: lengths.npy has a value {int(lengths.max())} larger than "
                         f"block_table width x page_size = {cap}")
    if (positions < lengths - 1).any():
        raise TraceError(f"{where}: positions.npy must be >= lengths - 1 (visible slots never "
                         "lie after the query)")
    if (positions >= cap).any():
        raise TraceError(f"{where}: positions.npy has a value >= block_table capacity {cap}")
    S = trace.header["page_size"]
    for b in range(table.shape[0]):
        used = table[b, :-(-int(lengths[b].max()) // S)]
        if used.min() < 0 or used.max() >= pages:
            raise TraceError(f"{where}: block_table.npy row {int(keep[b])} points outside "
                             f"keys.npy ({pages} pages)")


# ----------------------------------------------------------------------------
# writing


def write_header(path: str, **fields) -> None:
    header = {"format": FORMAT, "version": VERSION}
    header.update(fields)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "header.json"), "w") as f:
        json.dump(header, f, indent=1)
        f.write("\n")


def save_step(path: str, layer: int, step: int, **arrays) -> None:
    d = os.path.join(path, f"layer_{layer:03d}", f"step_{step:05d}")
    os.makedirs(d, exist_ok=True)
    for name, array in arrays.items():
        np.save(os.path.join(d, name + ".npy"), array)


def save_layer(path: str, layer: int, **arrays) -> None:
    d = os.path.join(path, f"layer_{layer:03d}")
    os.makedirs(d, exist_ok=True)
    for name, array in arrays.items():
        np.save(os.path.join(d, name + ".npy"), array)


# ----------------------------------------------------------------------------
# synthetic traces


def _pos_encoding(pos: np.ndarray, freqs: np.ndarray) -> np.ndarray:
    """[..., 2F]: cos/sin of each position at each frequency (RoPE-like)."""
    angle = np.asarray(pos, dtype=np.float64)[..., None] * freqs
    return np.concatenate([np.cos(angle), np.sin(angle)], axis=-1)


def generate(path: str, *, layers: int = 2, steps: int = 32, batch: int = 2,
             context: int = 512, heads: int = 4, head_dim: int = 32, topk: int = 32,
             page_size: int = 16, vertical: int = 2, vertical_amp: float = 3.0,
             diagonal: Sequence[int] = (0, 1, 2, 3), diagonal_amp: float = 1.5,
             shifts: Sequence[int] = (), move_every_step: bool = False,
             noise: float = 0.1, layer_noise: float = 0.05, rows: int = 1,
             seed: int = 0, key_format: str = "f32", kind: str = "inputs",
             joins: Sequence[Sequence[int]] = (),
             leaves: Sequence[Sequence[int]] = ()) -> str:
    """Writes a synthetic trace with the structure of the paper's Figure 1.

    * ``vertical``: number of hot runs of ``page_size`` slots (one block each,
      block aligned) per active group -- persistent important slots, the
      vertical lines. Their score is about ``vertical_amp``.
    * ``diagonal``: offsets ``o`` such that slot ``p - o`` is important (a
      RoPE-like band): keys encode their slot position with cos/sin at a few
      frequencies, the query encodes ``p - o``, so the score depends on
      ``p - i`` only. Empty to switch the band off.
    * ``shifts``: decode steps at which the vertical lines move to a new set
      of runs (sudden attention shift); ``move_every_step`` moves them at
      every step (at most ``head_dim // 2`` distinct groups, then reused).
    * ``noise``: Gaussian noise on keys and queries (0: noise-free, exact).
    * ``layer_noise``: per-layer perturbation of keys (layers are similar,
      not equal: the prev-layer predictor is good but not perfect).
    * ``rows`` > 1 writes an MTP trace with random acceptance counts.
    * ``kind="scores"`` writes a scores trace instead: the dense scores z of
      the same inputs (``dense_scores``, stored float32, -inf beyond each
      row's length, NS = block-table width x page_size) with lengths,
      positions and ``request_ids.npy``; the inputs are not kept.
    * ``joins`` / ``leaves``: ``(step, batch index)`` pairs. A join puts a new
      request (the next unused id) at that batch index from that step on,
      replacing the one there; a leave empties the batch index from that
      step on. The header then lists ``request_ids`` per step (null where
      empty; empty rows get lengths and positions 0). A joined request takes
      over the batch index's context (pages, keys, length).

    Half of ``head_dim`` carries content (one direction per group of vertical
    runs), the other half the position encoding. Returns ``path``.
    """
    rng = np.random.default_rng(seed)
    H, D, S, B, R = heads, head_dim, page_size, batch, rows
    if D % 4:
        raise ValueError("head_dim must be a multiple of 4")
    if key_format not in ("f32", "bf16"):
        raise ValueError("the generator writes key_format 'f32' or 'bf16'")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    step_ids = _churn_ids(steps, batch, joins, leaves)
    C = D // 2                               # content dims: one direction per group
    F = (D - C) // 2                         # position frequencies
    freqs = 2 * np.pi / np.geomspace(8.0, 4.0 * (context + steps * R), F)
    if R > 1:
        accepted = rng.integers(0, R, size=(steps, B))
    else:
        accepted = np.zeros((steps, B), dtype=np.int64)
    advance = accepted + 1
    capacity = context + int(advance.sum(axis=0).max()) + R + 1
    mp = -(-capacity // S)
    P = B * mp
    tables = rng.permutation(P).reshape(B, mp).astype(np.int32)
    # which group of vertical runs is active at each step
    n_groups = 1 + (steps if move_every_step else len(shifts))
    n_groups_c = min(n_groups, C)
    group_of_step = np.zeros(steps, dtype=np.int64)
    for t in range(steps):
        if move_every_step:
            group_of_step[t] = t % n_groups_c
        else:
            group_of_step[t] = sum(1 for s in shifts if t >= s) % n_groups_c
    # hot runs per request and group: block-aligned, distinct, inside the prompt
    blocks_in_prompt = context // S
    hot = np.zeros((B, n_groups_c, vertical), dtype=np.int64)  # logical block index
    for b in range(B):
        need = n_groups_c * vertical
        if need > blocks_in_prompt - 2:
            raise ValueError(f"context {context} is too short for {need} hot blocks")
        chosen = 1 + rng.choice(blocks_in_prompt - 2, size=need, replace=False)
        hot[b] = chosen.reshape(n_groups_c, vertical)
    # base keys (logical slot order per request), then scattered into pages
    slots = np.arange(mp * S)
    base = np.zeros((B, mp * S, D))
    base[:, :, C:] = _pos_encoding(slots, freqs)[None]
    for b in range(B):
        for g in range(n_groups_c):
            for blk in hot[b, g]:
                base[b, blk * S:(blk + 1) * S, g] += vertical_amp
    base[:, :, :C] += noise * rng.standard_normal((B, mp * S, C))
    header = dict(layers=layers, steps=steps, batch=B, rows=R, heads=H, head_dim=D,
                  page_size=S, topk=topk, key_format=key_format,
                  request_ids=step_ids if step_ids is not None else
                  [int(100 + b) for b in range(B)],
                  generator=dict(context=context, vertical=vertical, vertical_amp=vertical_amp,
                                 diagonal=list(diagonal), diagonal_amp=diagonal_amp,
                                 shifts=list(shifts), move_every_step=move_every_step,
                                 noise=noise, layer_noise=layer_noise, seed=seed))
    if step_ids is not None:
        header["generator"].update(joins=[[int(x) for x in p] for p in joins],
                                   leaves=[[int(x) for x in p] for p in leaves])
    if R > 1:
        header["accepted"] = [[None if step_ids is not None and step_ids[t][b] is None
                               else int(accepted[t, b]) for b in range(B)]
                              for t in range(steps)]
    write_header(path, **header)
    np.save(os.path.join(path, "block_table.npy"), tables)
    w = np.full((B, R, H), 1.0 / H, dtype=np.float32)
    np.save(os.path.join(path, "w.npy"), w)
    for layer in range(layers):
        lk = base.copy()
        if layer_noise:
            lk[:, :, :C] += layer_noise * rng.standard_normal((B, mp * S, C))
        keys = np.zeros((P, S, D), dtype=np.float32)
        for b in range(B):
            keys[tables[b]] = lk[b].reshape(mp, S, D)
        save_layer(path, layer, keys=f32_to_bf16_bits(keys) if key_format == "bf16" else keys)
    # queries (shared structure across layers, per-layer noise)
    n0 = np.full(B, context, dtype=np.int64)
    for t in range(steps):
        lengths = (n0[:, None] + np.arange(R)[None, :] + 1).astype(np.int32)
        positions = lengths - 1
        if step_ids is not None:
            empty = np.array([x is None for x in step_ids[t]])
            lengths[empty] = 0
            positions[empty] = 0
        qbase = np.zeros((B, R, D))
        qbase[:, :, group_of_step[t]] = 1.0
        if len(diagonal):
            enc = sum(_pos_encoding(positions - o, freqs) for o in diagonal)
            qbase[:, :, C:] = diagonal_amp / (F * len(diagonal)) * enc
        for layer in range(layers):
            q = np.repeat(qbase[:, :, None, :], H, axis=2)
            if noise:
                q = q + noise * rng.standard_normal(q.shape)
            q = q.astype(np.float32)
            save_step(path, layer, t,
                      q=f32_to_bf16_bits(q) if key_format == "bf16" else q,
                      lengths=lengths, positions=positions.astype(np.int32))
        n0 = n0 + advance[t]
    if kind == "scores":
        _inputs_to_scores(path)
    return path


def _churn_ids(steps: int, batch: int, joins, leaves):
    """Per-step request ids (None where empty) for ``generate``'s joins and
    leaves; None when there are neither."""
    if not joins and not leaves:
        return None
    events = {}
    for what, pairs in (("join", joins), ("leave", leaves)):
        for pair in pairs:
            if len(pair) != 2:
                raise ValueError(f"{what} {tuple(pair)} is not a (step, batch index) pair")
            t, b = (int(x) for x in pair)
            if not 0 <= t < steps or not 0 <= b < batch:
                raise ValueError(f"{what} ({t}, {b}) is outside the {steps} steps x "
                                 f"{batch} batch indices")
            if (t, b) in events:
                raise ValueError(f"{what} ({t}, {b}): batch index {b} already has a "
                                 f"{events[(t, b)]} at step {t}")
            events[(t, b)] = what
    occupant = [100 + b for b in range(batch)]
    fresh = 100 + batch
    out = []
    for t in range(steps):
        for b in range(batch):
            if events.get((t, b)) == "join":
                occupant[b], fresh = fresh, fresh + 1
            elif events.get((t, b)) == "leave":
                occupant[b] = None
        out.append(list(occupant))
    return out


def _inputs_to_scores(path: str) -> None:
    """Rewrites a generated inputs trace as a scores trace (same z)."""
    trace = load_trace(path)
    h = dict(trace.header)
    L, T, B, R, fmt = h["layers"], h["steps"], h["batch"], h["rows"], h["key_format"]
    for layer in range(L):
        for t in range(T):
            a = trace.step(layer, t)
            ns = a["block_table"].shape[1] * h["page_size"]
            q = to_f64(a["q"], "q", fmt)
            w = a["w"].astype(np.float64)
            z = np.full((B, R, ns), -np.inf, dtype=np.float32)
            for b in range(B):
                for r in range(R):
                    n = int(a["lengths"][b, r])
                    z[b, r, :n] = dense_scores(q[b, r], w[b, r], a["keys"], a["block_table"][b],
                                               n, fmt, a.get("scales"))
            save_step(path, layer, t, z=z)
            os.remove(os.path.join(path, f"layer_{layer:03d}", f"step_{t:05d}", "q.npy"))
        os.remove(os.path.join(path, f"layer_{layer:03d}", "keys.npy"))
    for name in ("w", "block_table"):
        os.remove(os.path.join(path, name + ".npy"))
    if not trace.changing_batch:  # per-step ids stay in the header
        np.save(os.path.join(path, "request_ids.npy"), trace.request_ids.astype(np.int64))
        h.pop("request_ids", None)
    gen = dict(h.get("generator", {}), heads=h.pop("heads"), head_dim=h.pop("head_dim"),
               key_format=h.pop("key_format"))
    h.pop("format", None)
    h.pop("version", None)
    h["generator"] = gen
    write_header(path, kind="scores", **h)


def dense_scores(q: np.ndarray, w: np.ndarray, keys: np.ndarray, block_table: np.ndarray,
                 n: int, key_format: str, scales: Optional[np.ndarray] = None) -> np.ndarray:
    """z[i] = sum_h w_h relu(q_h . k_i * scale_i), i < n, in float64 (one row:
    q [H, D] and w [H] already float64; keys/scales as stored)."""
    S = keys.shape[1]
    pages = block_table[: -(-n // S)]
    k = to_f64(keys[pages], "keys", key_format).reshape(-1, keys.shape[2])[:n]
    dots = k @ q.T                                            # [n, H]
    if scales is not None:
        dots = dots * scales[pages].reshape(-1)[:n, None].astype(np.float64)
    return np.maximum(dots, 0.0) @ w


def topk_indices(z: np.ndarray, k: int) -> np.ndarray:
    """TopK by score descending, ties to the lower index (SPIN_SPEC §1)."""
    order = np.lexsort((np.arange(z.shape[0]), -z))
    return order[:k]
