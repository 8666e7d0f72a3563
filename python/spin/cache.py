"""spin's program cache on disk, and the command that manages it.

Layout of a cache directory (``$SPIN_CACHE_DIR``, else
``$XDG_CACHE_HOME/spin`` or ``~/.cache/spin``)::

    indexer-gpu-<key>/     GPU program of one spin.Indexer layer, batch size
                           and block-table width: manifest.json, one PTX per
                           chip, spin-cache.json (what it was made for, the
                           compiler version, a SHA-256 per file)
    gpu-<key>/             GPU program of a graph of your own
                           (spin.compile(target="cuda"), graph_artifact())
    0x<hash>.spincache     CPU program (written by the C++ JIT cache: one
                           file, published by renaming a complete temporary)
    .<entry>.lock          exists only while a process builds <entry>
    .tmp-<entry>-*/        an entry being built (or left by a killed build)

The key of a GPU entry is a hash of what the program depends on besides the
compiler (shapes, options, SM count; for graphs the IR's hash), so a build
without the compiler (the GPU runtime alone) finds entries made elsewhere.
Chips and the compiler version are recorded in the entry: with the
compiler, an entry of another compiler version is stale, and one that lacks
a requested chip is incomplete; both are rebuilt (keeping the chips they
had).

Publishing, safe with any number of processes and threads:

* An entry directory is never modified once published. A build writes a
  complete entry into ``.tmp-<entry>-*`` in the cache directory (same file
  system) and publishes it with one ``rename``; a reader sees the entry
  absent or complete, never partial.
* Builders of one entry take an exclusive ``flock`` on ``.<entry>.lock``
  and look again once they hold it, so concurrent processes compile an
  entry once and the others find it. The lock file is removed by its holder
  before unlocking; a waiter that then gets the lock on the removed file sees
  that the path names another file (or none) and locks again.
* Readers hold a shared ``flock`` on the entry directory itself from the
  checksum check until the program is loaded (``reading``), and create
  nothing, so a cache on a read-only file system works.
* A corrupt, stale or incomplete entry is replaced by its builder: it takes
  an exclusive ``flock`` on the old directory (waiting for readers that are
  loading it), swaps the new one in with ``renameat2(RENAME_EXCHANGE)`` (the
  path never disappears; where the file system lacks it, two renames), and
  deletes the old one only then. A reader that waited on the old directory
  finds that the path is now another directory and looks again. Other
  entries are never touched.
* ``clear`` and ``prune`` remove an entry the same way: exclusive lock on the
  directory, rename it aside, delete it.

Last use is the entry directory's modification time, set at each lookup
(best effort: a read-only cache keeps its times). Where ``flock`` is not
supported (some network file systems) publishing stays atomic but a
replacement does not wait for readers.

Command line (``python3 -m spin.cache SUBCOMMAND --help`` for each)::

    python3 -m spin.cache list [--dir DIR] [--json]
    python3 -m spin.cache prebuild --dir DIR --chips sm_90a[,sm_100a,...]
        [--sm-count N] (--max-pages N[,...] --batch-sizes B[,...]
        [--layers L] [--heads ... Indexer parameters]
        | --graph MODEL.mlir --function NAME [--options "sparsity=0.4 ..."])
    python3 -m spin.cache verify [--dir DIR] [--remove]
    python3 -m spin.cache clear [--dir DIR]
    python3 -m spin.cache prune --max-size SIZE [--dir DIR]

Exit status: 0 on success, 1 when work failed (a program did not compile,
``verify`` found a bad entry), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from . import _spin
from .cuda import read_manifest

#: Written into every GPU entry: what it was made for and a checksum per file.
RECORD = "spin-cache.json"
INDEXER_PREFIX = "indexer-gpu-"
GRAPH_PREFIX = "gpu-"
CPU_SUFFIX = ".spincache"
GRAPH_FORMAT = "spin-graph-gpu-cache"
GRAPH_VERSION = 1
_KNOWN_CHIPS = ("sm_90a", "sm_100a", "sm_103a")
#: Leftovers of a killed build or removal older than this are removed by
#: ``prune`` (``clear`` removes every one not in use).
_LEFTOVER_AGE_S = 3600.0


class MissingEntry(Exception):
    """No usable entry and nothing to build it with (a build without the
    compiler): ``path``, ``problem`` (missing, corrupt: ..., incomplete: ...)
    and ``have`` (the chips an intact entry has)."""

    def __init__(self, path: str, problem: str, have: Sequence[str]):
        super().__init__(f"{path} is {problem}")
        self.path, self.problem, self.have = path, problem, list(have)


#===------------------------------------------------------------------------===#
# Where, and what an entry is
#===------------------------------------------------------------------------===#

def cache_root(cache_dir: Optional[str] = None) -> Optional[str]:
    """The disk cache directory: ``cache_dir``, else ``$SPIN_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/spin`` or ``~/.cache/spin`` (as the CPU cache); ``None``
    when it is turned off (``SPIN_CACHE_DIR=off``)."""
    if cache_dir is not None:
        return os.path.abspath(os.fspath(cache_dir))
    root = os.environ.get("SPIN_CACHE_DIR", "")
    if root == "off":
        return None
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                            os.path.expanduser("~/.cache"), "spin")
    return os.path.abspath(root)


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def entry_name(prefix: str, fmt: str, version: int, spec: Dict[str, Any]) -> str:
    """The directory name of the entry for ``spec``."""
    key = hashlib.sha256(json.dumps([fmt, version, spec], sort_keys=True).encode())
    return prefix + key.hexdigest()[:32]


def read_entry(path: str, fmt: Optional[str] = None, version: Optional[int] = None,
               spec: Optional[Dict[str, Any]] = None, checksums: bool = True):
    """(record, None) for an intact entry (made for ``spec`` in format
    ``fmt``/``version`` where given): the record of spin-cache.json plus the
    runtime-validated manifest; else (None, what is wrong). ``checksums``
    off skips hashing the files (only for showing what an entry is)."""
    if not os.path.isdir(path):
        return None, "missing"
    try:
        with open(os.path.join(path, RECORD)) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"unusable: {RECORD} cannot be read ({e})"
    if not isinstance(record, dict) or (fmt is not None and (
            record.get("format") != fmt or record.get("version") != version)):
        return None, "unusable: written by another version of the cache"
    if spec is not None and record.get("spec") != spec:
        return None, "unusable: made for another program"
    files = record.get("files")
    if not isinstance(files, dict) or "manifest.json" not in files:
        return None, f"unusable: {RECORD} lists no files"
    for name, digest in files.items():
        if os.path.basename(name) != name or name in ("", ".", ".."):
            return None, f"unusable: {RECORD} names {name!r}"
        try:
            if not checksums:
                os.stat(os.path.join(path, name))
            elif sha256_file(os.path.join(path, name)) != digest:
                return None, f"corrupt: {name} does not match its checksum"
        except OSError:
            return None, f"corrupt: {name} is missing"
    try:
        record["manifest"] = read_manifest(path)
    except ValueError as e:
        return None, f"corrupt: {e}"
    return record, None


#===------------------------------------------------------------------------===#
# Locks and atomic publication
#===------------------------------------------------------------------------===#

def _same_file(path: str, fd: int) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_ino, st.st_dev) == (held.st_ino, held.st_dev)


def _flock(fd: int, how: int) -> bool:
    """flock; False where the file system does not support it."""
    try:
        fcntl.flock(fd, how)
        return True
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN) and how & fcntl.LOCK_NB:
            raise
        if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
            return False
        raise


@contextlib.contextmanager
def reading(path: str) -> Iterator[bool]:
    """Holds the entry directory ``path`` against replacement and removal
    (a shared lock on it) while its files are read or loaded; yields whether
    it exists. Creates nothing."""
    fd = None
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            fd = None
            break
        _flock(fd, fcntl.LOCK_SH)
        if _same_file(path, fd):
            break
        os.close(fd)  # replaced while we waited: hold the new one
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def _lock_path(root: str, name: str) -> str:
    return os.path.join(root, f".{name}.lock")


@contextlib.contextmanager
def _build_lock(root: str, name: str, blocking: bool = True) -> Iterator[bool]:
    """The exclusive right to build, replace or remove entry ``name``
    (yields False when ``blocking`` is off and another process has it).
    The lock file exists only while held."""
    path = _lock_path(root, name)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            ok = _flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except OSError:  # held by another process
            os.close(fd)
            yield False
            return
        if not ok or _same_file(path, fd):
            break
        os.close(fd)  # its holder removed it: lock the current file
    try:
        yield True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _wait_for_builder(root: str, name: str) -> bool:
    """Waits until no process builds ``name``; True if one did."""
    try:
        fd = os.open(_lock_path(root, name), os.O_RDONLY)
    except OSError:
        return False
    try:
        _flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)
    return True


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Atomically swaps two directory entries (Linux renameat2); False where
    the system or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b),
                 _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def _aside(root: str, name: str) -> str:
    return tempfile.mkdtemp(prefix=f".trash-{name}-", dir=root)


def _publish(root: str, name: str, tmp: str) -> Optional[str]:
    """Makes the complete entry ``tmp`` the entry ``name`` (the caller holds
    its build lock). Returns the directory now holding the replaced entry
    (to delete), or None."""
    path = os.path.join(root, name)
    while True:
        try:
            os.rename(tmp, path)
            return None
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue  # removed meanwhile (clear, prune): publish again
        try:
            _flock(fd, fcntl.LOCK_EX)  # readers of the old entry are done
            if not _same_file(path, fd):
                continue
            if _exchange(tmp, path):
                return tmp
            old = _aside(root, name)
            os.rename(path, os.path.join(old, "entry"))
            os.rename(tmp, path)
            return old
        finally:
            os.close(fd)


def _remove_entry(root: str, name: str) -> bool:
    """Removes entry ``name`` once no reader holds it; False if absent."""
    path = os.path.join(root, name)
    if name.endswith(CPU_SUFFIX):
        try:
            os.unlink(path)  # the C++ cache opens the file whole: unaffected
            return True
        except FileNotFoundError:
            return False
    with _build_lock(root, name):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            _flock(fd, fcntl.LOCK_EX)
            if not _same_file(path, fd):
                return False
            old = _aside(root, name)
            os.rename(path, os.path.join(old, "entry"))
        finally:
            os.close(fd)
    shutil.rmtree(old, ignore_errors=True)
    return True


def _touch(path: str) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


#===------------------------------------------------------------------------===#
# Lookup and build
#===------------------------------------------------------------------------===#

def _check(path, fmt, version, spec, chips, fresh):
    """(record, problem, chips the entry has)."""
    with reading(path):
        record, problem = read_entry(path, fmt, version, spec)
    if record is None:
        return None, problem, []
    have = sorted(record["manifest"]["ptx"])
    if fresh and any(record.get(k) != v for k, v in fresh.items()):
        return None, "stale: made by another compiler version", have
    missing = [c for c in chips if c not in have]
    if missing:
        return None, (f"incomplete: it has PTX for {', '.join(have)}, "
                      f"not {', '.join(missing)}"), have
    return record, None, have


def ensure(root: str, name: str, fmt: str, version: int, spec: Dict[str, Any],
           chips: Sequence[str], fresh: Optional[Dict[str, Any]] = None,
           build: Optional[Callable[[str, List[str]], Dict[str, Any]]] = None) -> str:
    """The path of entry ``name`` of ``root``, intact, made for ``spec`` and
    holding PTX for ``chips`` (and, where ``fresh`` is given, with those
    record fields, e.g. the compiler version). A missing or unusable entry is
    built by ``build(directory, chips)`` (which writes the artifact and
    returns extra record fields) and published; without ``build``
    MissingEntry is raised."""
    path = os.path.join(root, name)
    record, problem, have = _check(path, fmt, version, spec, chips, fresh)
    if record is None and build is None and _wait_for_builder(root, name):
        record, problem, have = _check(path, fmt, version, spec, chips, fresh)
    if record is not None:
        _touch(path)
        return path
    if build is None:
        raise MissingEntry(path, problem, have)
    os.makedirs(root, exist_ok=True)
    with _build_lock(root, name):
        # Another process may have built it while we waited for the lock.
        record, problem, have = _check(path, fmt, version, spec, chips, fresh)
        if record is not None:
            _touch(path)
            return path
        want = sorted(set(chips) | (set(have) & set(_KNOWN_CHIPS)))
        tmp = tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root)
        old = None
        try:
            extra = build(tmp, want) or {}
            files = {f: sha256_file(os.path.join(tmp, f)) for f in sorted(os.listdir(tmp))}
            record = {"format": fmt, "version": version, "spec": spec, "chips": want,
                      **extra, "files": files}
            with open(os.path.join(tmp, RECORD), "w") as f:
                json.dump(record, f, indent=1, sort_keys=True)
                f.write("\n")
            os.chmod(tmp, 0o755 & ~_umask())
            old = _publish(root, name, tmp)
        finally:
            # After a rename tmp is gone; after a swap it holds the old entry.
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None and old != tmp:
                shutil.rmtree(old, ignore_errors=True)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def graph_spec(mlir_text: str, function: str, sparsify: Optional[str],
               sm_count: int) -> Dict[str, Any]:
    """What a graph's GPU program depends on besides the compiler and chips."""
    return {"function": function, "sparsify": sparsify, "sm_count": int(sm_count),
            "graph_sha256": hashlib.sha256(mlir_text.encode()).hexdigest()}


def graph_artifact(mlir_text: str, function: str,
                   pipeline_options: Optional[Dict[str, Any]] = None,
                   chips: Sequence[str] = ("sm_90a",), sm_count: int = 132,
                   cache_dir: Optional[str] = None, layer_argument: bool = False) -> str:
    """The cache entry (an artifact directory for :func:`spin.load`) of
    ``function`` of ``mlir_text`` compiled with ``pipeline_options`` for
    ``chips`` and ``sm_count`` SMs: compiled on first use where spin has the
    compiler, looked up only where it does not (a RuntimeError names the
    entry and the prebuild command). ``cache_dir`` defaults to
    ``$SPIN_CACHE_DIR`` (see :func:`cache_root`). ``layer_argument``: the
    step takes its layer at run time (:func:`spin.compile_artifact`)."""
    import spin
    chips = sorted(set([chips] if isinstance(chips, str) else chips))
    sparsify = spin._sparsify_text(pipeline_options)
    spec = graph_spec(mlir_text, function, sparsify, sm_count)
    if layer_argument:
        spec["layer_argument"] = True  # named only then: other keys unchanged
    root = cache_root(cache_dir)
    if root is None:
        if not spin.has_compiler:
            raise RuntimeError("the disk cache is off (SPIN_CACHE_DIR=off) and spin was "
                               "built without the compiler: no GPU program to load")
        root = tempfile.mkdtemp(prefix="spin-gpu-")
    name = entry_name(GRAPH_PREFIX, GRAPH_FORMAT, GRAPH_VERSION, spec)
    fresh = build = None
    if spin.has_compiler:
        fresh = {"compiler_version": _spin.compiler_version()}

        def build(out_dir, want):
            spin.compile_artifact(mlir_text, function, out_dir, pipeline_options, want,
                                  sm_count=int(sm_count), layer_argument=layer_argument)
            return fresh
    try:
        return ensure(root, name, GRAPH_FORMAT, GRAPH_VERSION, spec, chips, fresh, build)
    except MissingEntry as e:
        chips = sorted(set(chips) | set(e.have))
        command = ["python3", "-m", "spin.cache", "prebuild", "--dir", root,
                   "--graph", "MODEL.mlir", "--function", function]
        if sparsify:
            command += ["--options", sparsify]
        if layer_argument:
            command.append("--layer-argument")
        command += ["--chips", ",".join(chips), "--sm-count", str(int(sm_count))]
        raise RuntimeError(
            f"no usable GPU program for {function} (chips {', '.join(chips)}, "
            f"{sm_count} SMs) in the cache directory {root}: {e}; spin was built "
            "without the compiler and cannot compile it here. On a machine with "
            f"the compiler, with MODEL.mlir holding this IR (sha256 "
            f"{spec['graph_sha256'][:16]}...), run\n    {_shell(command)}\nthen copy "
            f"{root} here (or set $SPIN_CACHE_DIR to the copy)") from None


#===------------------------------------------------------------------------===#
# Indexer parameters on the command line
#===------------------------------------------------------------------------===#

#: Indexer parameters that the prebuild command takes through its own flags.
_OWN_FLAGS = ("device", "chips", "cache_dir", "sm_count", "max_pages", "batch_sizes",
              "layers", "shared_workspace")


def _indexer_parameters():
    import spin
    return [p for p in inspect.signature(spin.Indexer.__init__).parameters.values()
            if p.name != "self" and p.name not in _OWN_FLAGS]


def indexer_arguments(indexer) -> Dict[str, Any]:
    """The constructor arguments (besides device, cache and ahead-of-time
    ones) that make an Indexer like ``indexer``."""
    o = indexer._options
    return {"heads": indexer.heads, "head_dim": indexer.head_dim,
            "block_size": indexer.block_size, "topk": indexer.topk,
            "sparsity": o["sparsity"], "ema_decay": o["ema-decay"],
            "explore": o["explore"], "seed": o["seed"], "pooling": o["pooling"],
            "reduction": o["reduction"], "mtp_mask": o["mtp-mask"],
            "mtp_update": o["mtp-update"], "key_format": indexer.key_format,
            "page_size": indexer.page_size, "rows": indexer.rows,
            "dense": indexer.dense, "explore_policy": indexer.explore_policy,
            # None (the default) unless the queries are fp8: the same programs
            "query_format": "fp8" if indexer.query_format == "fp8" else None,
            "reset_input": indexer.reset_input,
            "layer_argument": indexer.layer_argument,
            "paged_state": indexer.paged_state,
            "fused_fp8_pages": indexer.fused_fp8_pages}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shell(words: Sequence[str]) -> str:
    import shlex
    return " ".join(shlex.quote(str(w)) for w in words)


def prebuild_command(indexer, layers: int, max_pages: int, batch_sizes: Sequence[int],
                     chips: Sequence[str], directory: str) -> str:
    """The command line that builds ``indexer``'s programs of layers
    ``0 .. layers - 1`` into ``directory``."""
    args = indexer_arguments(indexer)
    words = ["python3", "-m", "spin.cache", "prebuild", "--dir", directory]
    for p in _indexer_parameters():
        value = args[p.name]
        default = p.default
        if p.name == "page_size" and value == args["block_size"]:
            continue
        if p.name in ("sparsity", "ema_decay", "explore") and float(value) == float(default):
            continue
        if value == default:
            continue
        if isinstance(value, bool):
            words.append(_flag(p.name))
        else:
            words += [_flag(p.name), value]
    words += ["--max-pages", max_pages, "--batch-sizes", ",".join(str(b) for b in batch_sizes),
              "--layers", layers, "--chips", ",".join(chips), "--sm-count", indexer.sm_count]
    return _shell(words)


#===------------------------------------------------------------------------===#
# What a cache holds
#===------------------------------------------------------------------------===#

def _kind(name: str) -> Optional[str]:
    if name.startswith(INDEXER_PREFIX):
        return "indexer"
    if name.startswith(GRAPH_PREFIX):
        return "graph"
    if name.endswith(CPU_SUFFIX) and name.startswith("0x"):
        return "cpu"
    return None


def _size(path: str) -> int:
    if not os.path.isdir(path):
        return os.path.getsize(path)
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(dirpath, f))
    return total


def _fnv1a(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for c in data:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def _read_cpu_entry(path: str, check: bool):
    """(info, problem) for a CPU cache file (the C++ JIT cache's format:
    magic, key hash, FNV-1a checksum, sizes, then key, graph, module and
    signature; the key is compiler version, function, options, source)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return {}, f"unreadable ({e})"
    parts = data.split(b"\n", 4)
    if len(parts) != 5 or parts[0] != b"spin-cpu-cache 2":
        return {}, "unusable: not a spin CPU cache entry of this version"
    try:
        checksum = int(parts[2], 16)
        sizes = [int(s) for s in parts[3].split(b" ")]
    except ValueError:
        return {}, "corrupt: bad header"
    payload = parts[4]
    key = payload[:sizes[0]].decode("utf-8", "replace").split("\n", 3) if sizes else []
    info = {"compiler_version": key[0].rsplit("-", 1)[-1] if key else None,
            "function": key[1] if len(key) > 1 else None,
            "options": key[2] if len(key) > 2 else None}
    if len(sizes) != 4 or len(payload) != sum(sizes):
        return info, "corrupt: truncated"
    if check and _fnv1a(payload) != checksum:
        return info, "corrupt: does not match its checksum"
    return info, None


def _shape_text(kind: str, spec: Dict[str, Any], manifest: Optional[Dict[str, Any]]) -> str:
    if kind == "indexer":
        s = spec
        text = (f"layer {s.get('layer')} batch {s.get('batch')} pages {s.get('max_pages')}x"
                f"{s.get('page_size')} H{s.get('heads')} Dh{s.get('head_dim')} "
                f"K{s.get('topk')} rows {s.get('rows')} {s.get('key_format')} "
                f"{'q fp8 ' if s.get('query_format') == 'fp8' else ''}"
                f"{'dense' if s.get('sparsify') is None else 'spin'}")
    else:
        batch = manifest.get("batch") if manifest else "?"
        text = (f"{spec.get('function')} batch {batch} "
                f"{'as written' if not spec.get('sparsify') else 'spin'}")
    return f"{text} sm{spec.get('sm_count')}"


def entries(root: str, verify: bool = False) -> List[Dict[str, Any]]:
    """What ``root`` holds, one dict per entry: name, kind (indexer, graph,
    cpu), path, size, last_use (seconds since the epoch), compiler_version,
    chips, spec, shape (a short text) and problem (None for an intact
    entry; the files' checksums are checked only with ``verify``)."""
    out = []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return out
    for name in names:
        kind = _kind(name)
        if kind is None:
            continue
        path = os.path.join(root, name)
        try:
            st = os.stat(path)
            size = _size(path)
        except OSError:
            continue  # removed meanwhile
        item = {"name": name, "kind": kind, "path": path, "size": size,
                "last_use": st.st_mtime, "compiler_version": None, "chips": [],
                "spec": None, "shape": "", "problem": None}
        if kind == "cpu":
            info, item["problem"] = _read_cpu_entry(path, verify)
            item["compiler_version"] = info.get("compiler_version")
            item["spec"] = {"function": info.get("function"), "options": info.get("options")}
            item["shape"] = f"{info.get('function')} {info.get('options')}"
        else:
            with reading(path) as present:
                record, problem = (read_entry(path, checksums=verify) if present
                                   else (None, "missing"))
            if record is None:
                # The record may still say what it was for.
                with contextlib.suppress(OSError, ValueError):
                    with open(os.path.join(path, RECORD)) as f:
                        record = json.load(f)
                item["problem"] = problem
            if isinstance(record, dict):
                item["compiler_version"] = record.get("compiler_version")
                item["chips"] = record.get("chips") or []
                item["spec"] = record.get("spec")
                if isinstance(item["spec"], dict):
                    item["shape"] = _shape_text(kind, item["spec"], record.get("manifest"))
        out.append(item)
    return out


def _leftovers(root: str, min_age: float) -> List[str]:
    """Temporary and renamed-aside directories no process works on, older
    than ``min_age`` seconds."""
    found = []
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return found
    now = time.time()
    for name in names:
        path = os.path.join(root, name)
        if name.startswith(".trash-") or name.startswith(".tmp-") or (
                name.startswith("0x") and ".spincache." in name and name.endswith(".tmp")):
            with contextlib.suppress(OSError):
                if now - os.lstat(path).st_mtime < min_age:
                    continue
                if name.startswith(".tmp-"):
                    entry = name[len(".tmp-"):].rsplit("-", 1)[0]
                    with _build_lock(root, entry, blocking=False) as free:
                        if not free:
                            continue  # being built now
                found.append(path)
    return found


def _remove_path(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


#===------------------------------------------------------------------------===#
# The command
#===------------------------------------------------------------------------===#

class _UsageError(Exception):
    pass


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def parse_size(text: str) -> int:
    """'500M', '2G', '1.5GiB', '1000' (bytes) -> bytes; ValueError naming it."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    factor = 1
    if t and t[-1] in scale:
        factor, t = scale[t[-1]], t[:-1]
    try:
        value = float(t)
    except ValueError:
        value = -1.0
    if not t or value < 0 or value != value:
        raise ValueError(f"--max-size: {text!r} is not a size (bytes, or a number "
                         "with K, M, G or T)")
    return int(value * factor)


def _int_list(flag: str, text: str, minimum: int = 1) -> List[int]:
    values = []
    for word in text.replace(" ", ",").split(","):
        if not word:
            continue
        try:
            value = int(word)
        except ValueError:
            raise _UsageError(f"{flag}: {word!r} is not an integer") from None
        if value < minimum:
            raise _UsageError(f"{flag}: {value} is not a positive integer")
        values.append(value)
    if not values:
        raise _UsageError(f"{flag}: no value given")
    return values


def _chips(text: str) -> List[str]:
    chips = [c for c in text.replace(" ", ",").split(",") if c]
    for chip in chips:
        if chip not in _KNOWN_CHIPS:
            raise _UsageError(f"--chips: unknown chip {chip!r} (spin targets "
                              f"{', '.join(_KNOWN_CHIPS)})")
    if not chips:
        raise _UsageError("--chips: no chip given")
    return sorted(set(chips))


def _option_value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def parse_options(text: str) -> Dict[str, Any]:
    """'sparsity=0.4 explore=0.05' (or comma-separated) -> a dict of
    spin-sparsify-pipeline options; _UsageError naming a bad word."""
    options = {}
    for word in text.replace(",", " ").split():
        key, sep, value = word.partition("=")
        if not sep or not key or not value:
            raise _UsageError(f"--options: {word!r} is not NAME=VALUE")
        options[key] = _option_value(value)
    return options


def _directory(args, must_exist: bool) -> str:
    root = cache_root(args.dir)
    if root is None:
        raise _UsageError("the cache is off (SPIN_CACHE_DIR=off): pass --dir DIR")
    if must_exist and not os.path.isdir(root):
        raise _UsageError(f"--dir: {root} is not a directory")
    return root


def _cmd_list(args) -> int:
    root = _directory(args, must_exist=False)
    items = entries(root)
    if args.json:
        json.dump({"directory": root, "entries": items}, sys.stdout, indent=1, default=str)
        print()
        return 0
    print(f"{root}: {len(items)} entries, {_human(sum(i['size'] for i in items))}")
    if not items:
        return 0
    rows = [("ENTRY", "KIND", "SHAPE", "CHIPS", "COMPILER", "SIZE", "LAST USE")]
    for i in items:
        state = f" ({i['problem']})" if i["problem"] else ""
        rows.append((i["name"], i["kind"], i["shape"] + state, ",".join(i["chips"]) or "-",
                     (i["compiler_version"] or "-")[:12], _human(i["size"]),
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(i["last_use"]))))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    return 0


def _cmd_verify(args) -> int:
    root = _directory(args, must_exist=True)
    items = entries(root, verify=True)
    compiler = _spin.compiler_version() if getattr(_spin, "has_compiler", False) else None
    bad = 0
    for i in items:
        note = ""
        if i["problem"] is None and compiler and i["compiler_version"] not in (None, compiler):
            note = " (intact; made by another compiler version: rebuilt on use here)"
        status = "ok" if i["problem"] is None else i["problem"]
        if i["problem"] is not None:
            bad += 1
            if args.remove and _remove_entry(root, i["name"]):
                status += "; removed"
        print(f"{i['name']}: {status}{note}", flush=True)
    print(f"{len(items)} entries, {bad} bad")
    return 1 if bad and not args.remove else 0


def _cmd_clear(args) -> int:
    root = _directory(args, must_exist=False)
    removed, freed = 0, 0
    for i in entries(root):
        if _remove_entry(root, i["name"]):
            removed += 1
            freed += i["size"]
    for path in _leftovers(root, 0.0):
        _remove_path(path)
    print(f"removed {removed} entries ({_human(freed)}) from {root}")
    return 0


def _cmd_prune(args) -> int:
    root = _directory(args, must_exist=False)
    try:
        limit = parse_size(args.max_size)
    except ValueError as e:
        raise _UsageError(str(e)) from None
    for path in _leftovers(root, _LEFTOVER_AGE_S):
        _remove_path(path)
    items = sorted(entries(root), key=lambda i: (i["problem"] is None, i["last_use"]))
    total = sum(i["size"] for i in items)
    removed, freed = 0, 0
    for i in items:  # unusable ones first, then the least recently used
        if total <= limit:
            break
        if _remove_entry(root, i["name"]):
            removed += 1
            freed += i["size"]
        total -= i["size"]
    print(f"removed {removed} entries ({_human(freed)}); {root} holds "
          f"{_human(max(total, 0))} (limit {_human(limit)})")
    return 0


def _prebuild_jobs(args) -> Tuple[str, List[Tuple[str, Callable[[], str]]]]:
    import spin
    root = _directory(args, must_exist=False)
    chips = _chips(args.chips)
    sm_count = args.sm_count
    if sm_count is not None and sm_count <= 0:
        raise _UsageError(f"--sm-count: {sm_count} is not a positive integer")
    if sm_count is None:
        sm_count = spin._DEFAULT_SM_COUNT
    indexer_given = [p.name for p in _indexer_parameters()
                     if getattr(args, p.name) is not None and getattr(args, p.name) is not False]
    if args.graph is not None:
        if args.function is None:
            raise _UsageError("--graph needs --function NAME (the function to compile)")
        for flag, value in (("--max-pages", args.max_pages),
                            ("--batch-sizes", args.batch_sizes), ("--layers", args.layers)):
            if value is not None:
                raise _UsageError(f"{flag} is for Indexer programs, not with --graph")
        # --layer-argument compiles a graph as it does an Indexer's programs.
        layer_argument = bool(getattr(args, "layer_argument", False))
        indexer_given = [n for n in indexer_given if n != "layer_argument"]
        if indexer_given:
            raise _UsageError(f"{_flag(indexer_given[0])} is an Indexer parameter, "
                              "not taken with --graph (use --options)")
        try:
            with open(args.graph) as f:
                text = f.read()
        except OSError as e:
            raise _UsageError(f"--graph: cannot read {args.graph!r} ({e.strerror})") from None
        options = parse_options(args.options) if args.options else None
        label = f"{args.function} of {args.graph}"
        return root, [(label, lambda: graph_artifact(text, args.function, options, chips,
                                                     sm_count, root,
                                                     layer_argument=layer_argument))]
    if args.function is not None or args.options is not None:
        raise _UsageError("--function and --options go with --graph")
    if args.max_pages is None or args.batch_sizes is None:
        raise _UsageError("prebuild needs --graph MODEL.mlir --function NAME, or Indexer "
                          "programs: --max-pages N and --batch-sizes B[,B...]")
    pages = _int_list("--max-pages", args.max_pages)
    batches = _int_list("--batch-sizes", args.batch_sizes)
    layers = 1 if args.layers is None else args.layers
    if layers <= 0:
        raise _UsageError(f"--layers: {layers} is not a positive integer")
    kwargs = {p.name: getattr(args, p.name) for p in _indexer_parameters()
              if getattr(args, p.name) is not None}
    try:
        indexer = spin.Indexer(**kwargs, device="cuda", chips=chips, cache_dir=root,
                               sm_count=sm_count)
    except ValueError as e:
        raise _UsageError(str(e)) from None
    jobs = []
    for p in pages:
        for b in batches:
            for layer in range(layers):
                jobs.append((f"layer {layer}, batch {b}, {p} pages",
                             lambda layer=layer, p=p, b=b: indexer.artifact(layer, p, b)))
    return root, jobs


def _inodes(root: str) -> Dict[str, int]:
    found = {}
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(root):
            with contextlib.suppress(OSError):
                found[name] = os.stat(os.path.join(root, name)).st_ino
    return found


def _cmd_prebuild(args) -> int:
    import spin
    if not spin.has_compiler:
        print("error: prebuild needs the compiler, and this spin was built without it "
              "(the GPU runtime alone): run it where spin was built with "
              "-DSPIN_ENABLE_COMPILER=ON (no GPU needed) and copy the directory here",
              file=sys.stderr)
        return 1
    root, jobs = _prebuild_jobs(args)
    t0 = time.time()
    built = found = failed = 0
    inodes = _inodes(root)  # an entry built or replaced gets a new inode
    for n, (label, job) in enumerate(jobs, 1):
        t = time.time()
        try:
            path = job()
        except (ValueError, RuntimeError) as e:
            failed += 1
            print(f"[{n}/{len(jobs)}] {label}: FAILED: {e}", flush=True)
            continue
        name = os.path.basename(path)
        inode = os.stat(path).st_ino
        new = inodes.get(name) != inode
        inodes[name] = inode
        built += new
        found += not new
        print(f"[{n}/{len(jobs)}] {label}: {'built' if new else 'found'} in "
              f"{time.time() - t:.1f} s -> {name}", flush=True)
    print(f"{built} built, {found} already there, {failed} failed in {root} "
          f"({time.time() - t0:.0f} s); copy it to the GPU machine and set "
          f"SPIN_CACHE_DIR to it there")
    return 1 if failed else 0


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", help="the cache directory (default: $SPIN_CACHE_DIR, "
                                      "else $XDG_CACHE_HOME/spin or ~/.cache/spin)")
    parser = argparse.ArgumentParser(
        prog="python3 -m spin.cache",
        description="Inspect, fill and clean spin's program cache.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("list", parents=[common],
                       help="entries with their shapes, chips, compiler version, size, last use")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("verify", parents=[common], help="check every entry's checksums")
    p.add_argument("--remove", action="store_true", help="remove the bad entries")
    sub.add_parser("clear", parents=[common], help="remove every entry")
    p = sub.add_parser("prune", parents=[common],
                       help="remove the least recently used entries down to a size")
    p.add_argument("--max-size", required=True, metavar="SIZE",
                   help="e.g. 2G, 500M or a byte count")
    p = sub.add_parser(
        "prebuild", parents=[common],
        help="compile GPU programs into the cache (for GPU machines without the compiler)",
        description="Compiles GPU programs into the cache directory (no GPU needed): "
                    "an Indexer's programs for each block-table width (--max-pages), "
                    "batch size and layer, or one function of a model graph.")
    p.add_argument("--chips", required=True, help="comma-separated: sm_90a, sm_100a, sm_103a")
    p.add_argument("--sm-count", type=int, help="the serving GPU's SM count (132 for an "
                                                "H100 SXM or H200, 148 for a B200 or B300; "
                                                "default 132)")
    g = p.add_argument_group("a model graph")
    g.add_argument("--graph", metavar="MODEL.mlir", help="an MLIR module with spin ops")
    g.add_argument("--function", help="the function to compile")
    g.add_argument("--options", help='spin-sparsify-pipeline options, e.g. '
                                     '"sparsity=0.4 explore=0.05" (default: as written)')
    g = p.add_argument_group("spin.Indexer programs")
    g.add_argument("--max-pages", metavar="N[,N...]", help="block-table widths")
    g.add_argument("--batch-sizes", metavar="B[,B...]", help="batch buckets")
    g.add_argument("--layers", type=int, help="layers 0 .. L-1 (default 1)")
    for param in _indexer_parameters():
        default = param.default
        if isinstance(default, bool):
            g.add_argument(_flag(param.name), dest=param.name, action="store_true",
                           default=None, help=f"Indexer {param.name}")
        else:
            # A parameter that defaults to None is an int (page_size) or, by
            # its annotation, a str (query_format).
            kind = (type(default) if default is not None
                    else str if "str" in str(param.annotation) else int)
            g.add_argument(_flag(param.name), dest=param.name, type=kind, default=None,
                           help=f"Indexer {param.name} (default {default!r})")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    handler = {"list": _cmd_list, "verify": _cmd_verify, "clear": _cmd_clear,
               "prune": _cmd_prune, "prebuild": _cmd_prebuild}[args.command]
    try:
        return handler(args)
    except _UsageError as e:
        parser.exit(2, f"{parser.prog} {args.command}: error: {e}\n")
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
