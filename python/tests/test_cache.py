"""spin's program cache (spin.cache) without a GPU: many processes and
threads building and loading the same programs into one cache, replacement
of corrupt and stale entries while readers hold them, a build without the
compiler naming the command that builds a missing entry, and the command
``python3 -m spin.cache`` (list, prebuild, verify, clear, prune).

GPU programs are compiled to PTX for explicit chips, which needs no GPU;
"loading" here is the runtime's manifest validation (spin.read_manifest)
and reading the PTX, under the same lock the CUDA load holds."""

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time

import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")
from spin import cache  # noqa: E402

needs_compiler = pytest.mark.skipif(not spin.has_compiler,
                                    reason="spin built without the compiler")
pytestmark = needs_compiler

PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(spin.__file__)))
# The smallest shape the GPU path compiles (heads a multiple of 8, head dim
# of 32).
TINY = dict(heads=8, head_dim=32, page_size=16, block_size=16, topk=8)
SPARSE = dict(TINY, sparsity=0.5)
DENSE = dict(TINY, dense=True)


# What ``python3 -m spin.cache`` runs, with torch hidden: importing it costs
# a second of CPU per process, and the cache has no use for it.
NO_TORCH = "import sys; sys.modules['torch'] = None; "
CLI = NO_TORCH + "import runpy; runpy.run_module('spin.cache', run_name='__main__')"


def run_cli(*args, env=None, module=False, **kwargs):
    environment = dict(os.environ, PYTHONPATH=PYTHONPATH, PYTHONUNBUFFERED="1")
    environment.update(env or {})
    command = ["-m", "spin.cache"] if module else ["-c", CLI]
    return subprocess.run([sys.executable, *command, *map(str, args)],
                          capture_output=True, text=True, env=environment, **kwargs)


def gpu_entries(root):
    return sorted(n for n in os.listdir(root) if n.startswith(("indexer-gpu-", "gpu-")))


def leftovers(root):
    return sorted(n for n in os.listdir(root) if n.startswith("."))


def digest(path):
    """sha256 of the manifest and the PTX, read while the entry is held."""
    h = hashlib.sha256()
    with cache.reading(path) as present:
        assert present, path
        manifest = spin.read_manifest(path)
        for name in ["manifest.json"] + sorted(manifest["ptx"].values()):
            with open(os.path.join(path, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


#===------------------------------------------------------------------------===#
# Many processes and threads, one cache
#===------------------------------------------------------------------------===#

WORKER = r"""
import hashlib, json, os, random, sys, threading, time, traceback
sys.modules["torch"] = None  # not needed; its import is most of a start's CPU time
import spin
from spin import cache

root, worker, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
TINY = dict(heads=8, head_dim=32, page_size=16, block_size=16, topk=8)
graph = spin._spin.build_indexer_graph(heads=8, head_dim=32, rows=1, topk=8, page_size=16,
                                       max_pages=2, key_format="bf16", layer=0, batch=2)

def indexer_job(options, batch):
    def run():
        ix = spin.Indexer(**TINY, **options, device="cuda", chips=["sm_90a"], cache_dir=root)
        return ix.artifact(0, 2, batch)
    return run

jobs = {
    # the same for every process
    "sparse-b1": indexer_job(dict(sparsity=0.5), 1),
    "dense-b1": indexer_job(dict(dense=True), 1),
    "graph-b2": lambda: cache.graph_artifact(graph, "indexer_layer", None, ["sm_90a"], 132, root),
    # shared by two processes each
    f"dense-b{3 + worker % 4}": indexer_job(dict(dense=True), 3 + worker % 4),
}

def digest(path):
    h = hashlib.sha256()
    with cache.reading(path) as present:
        assert present, path
        manifest = spin.read_manifest(path)
        time.sleep(0.05)  # a CUDA load's PTX JIT takes this long, and longer
        for name in ["manifest.json"] + sorted(manifest["ptx"].values()):
            with open(os.path.join(path, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()

results, errors = {}, []
def thread(seed):
    order = list(jobs)
    random.Random(seed).shuffle(order)
    try:
        for label in order:
            path = jobs[label]()
            results.setdefault(label, set()).add((os.path.basename(path), digest(path)))
    except BaseException:
        errors.append(traceback.format_exc())

while not os.path.exists(go):  # start together
    time.sleep(0.002)
threads = [threading.Thread(target=thread, args=(worker * 10 + t,)) for t in range(2)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"results": {k: sorted(v) for k, v in results.items()}, "errors": errors}))
"""


def run_round(root, go, workers=8):
    if os.path.exists(go):
        os.unlink(go)
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, root, str(w), go],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for w in range(workers)]
    time.sleep(0.5)  # most have imported spin by now; the rest join late
    open(go, "w").close()
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "Traceback" not in err, err
        report = json.loads(out)
        assert report["errors"] == [], report["errors"][0]
        outputs.append(report["results"])
    return outputs


def test_many_processes_build_and_load_the_same_programs(tmp_path):
    """8 processes x 2 threads build and load 3 shared programs and 4 shared
    by pairs, three times: into an empty cache, with one entry corrupt and
    one stale (rebuilt while the others are read), and with every entry
    intact (nothing rebuilt). Every process gets the same valid program for
    a key in every round, nothing raises, and the cache ends with exactly
    one intact entry per key and no leftovers."""
    root = str(tmp_path / "cache")
    go = str(tmp_path / "go")
    seen = {}  # label -> (entry name, digest)

    def check(outputs):
        for results in outputs:
            assert {"sparse-b1", "dense-b1", "graph-b2"} <= set(results)
            for label, values in results.items():
                assert len(values) == 1, (label, values)  # both threads: the same
                seen.setdefault(label, tuple(values[0]))
                assert tuple(values[0]) == seen[label], label
        assert sorted(n for n, _ in seen.values()) == gpu_entries(root)
        assert leftovers(root) == []
        for item in cache.entries(root, verify=True):
            assert item["problem"] is None, item

    check(run_round(root, go))
    assert len(gpu_entries(root)) == 7  # 3 shared + 4 pair-shared

    # A flipped byte in one entry's PTX, another entry of an older compiler.
    corrupt = os.path.join(root, seen["sparse-b1"][0])
    ptx = os.path.join(corrupt, "sm_90a.ptx")
    with open(ptx, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    stale = os.path.join(root, seen["dense-b1"][0])
    record_path = os.path.join(stale, cache.RECORD)
    record = json.load(open(record_path))
    record["compiler_version"] = "0" * 64
    json.dump(record, open(record_path, "w"))
    inodes = {n: os.stat(os.path.join(root, n)).st_ino for n in gpu_entries(root)}
    check(run_round(root, go))
    replaced = {n for n in gpu_entries(root)
                if os.stat(os.path.join(root, n)).st_ino != inodes[n]}
    assert replaced == {seen["sparse-b1"][0], seen["dense-b1"][0]}
    assert json.load(open(record_path))["compiler_version"] == spin._spin.compiler_version()

    inodes = {n: os.stat(os.path.join(root, n)).st_ino for n in gpu_entries(root)}
    check(run_round(root, go))
    assert inodes == {n: os.stat(os.path.join(root, n)).st_ino for n in gpu_entries(root)}


def test_threads_of_one_process_build_one_entry(tmp_path):
    paths, errors = [], []

    def work():
        try:
            ix = spin.Indexer(**DENSE, device="cuda", chips=["sm_90a"], cache_dir=tmp_path)
            paths.append(ix.artifact(0, 2, 1))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(paths)) == 1
    assert gpu_entries(tmp_path) == [os.path.basename(paths[0])] and leftovers(tmp_path) == []


#===------------------------------------------------------------------------===#
# Replacement while a reader holds the entry
#===------------------------------------------------------------------------===#

def _make_stale(path):
    record_path = os.path.join(path, cache.RECORD)
    record = json.load(open(record_path))
    record["compiler_version"] = "0" * 64
    json.dump(record, open(record_path, "w"))


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_a_replacement_waits_for_readers_of_the_old_entry(tmp_path, monkeypatch, exchange):
    if not exchange:  # file systems without RENAME_EXCHANGE
        monkeypatch.setattr(cache, "_exchange", lambda a, b: False)
    indexer = spin.Indexer(**SPARSE, device="cuda", chips=["sm_90a"], cache_dir=tmp_path)
    path = indexer.artifact(0, 2, 1)
    name = os.path.basename(path)
    other = indexer.artifact(0, 2, 2)
    other_digest = digest(other)
    _make_stale(path)
    before = {f: open(os.path.join(path, f), "rb").read() for f in os.listdir(path)}
    done = threading.Event()
    failures = []

    def rebuild():
        try:
            indexer.artifact(0, 2, 1)
        except BaseException as e:  # pragma: no cover - reported below
            failures.append(e)
        done.set()

    with cache.reading(path):
        writer = threading.Thread(target=rebuild)
        writer.start()
        # The writer has compiled the new entry and waits to publish it.
        deadline = time.time() + 60
        while not any(n.startswith(f".tmp-{name}-") and
                      os.path.exists(os.path.join(tmp_path, n, cache.RECORD))
                      for n in os.listdir(tmp_path)):
            assert time.time() < deadline and not done.is_set(), failures
            time.sleep(0.01)
        time.sleep(0.3)
        assert not done.is_set()
        # What this reader holds is untouched, and so are other entries.
        assert {f: open(os.path.join(path, f), "rb").read() for f in os.listdir(path)} == before
        assert digest(other) == other_digest
    writer.join(60)
    assert done.is_set() and failures == []
    assert json.load(open(os.path.join(path, cache.RECORD)))["compiler_version"] == \
        spin._spin.compiler_version()
    assert spin.read_manifest(path)["batch"] == 1
    assert gpu_entries(tmp_path) == sorted([name, os.path.basename(other)])
    assert leftovers(tmp_path) == []


def test_a_reader_of_a_replaced_entry_reads_the_new_one(tmp_path):
    indexer = spin.Indexer(**DENSE, device="cuda", chips=["sm_90a"], cache_dir=tmp_path)
    path = indexer.artifact(0, 2, 1)
    _make_stale(path)
    indexer.artifact(0, 2, 1)
    with cache.reading(path) as present:
        assert present
        assert cache.read_entry(path)[1] is None
    with cache.reading(str(tmp_path / "indexer-gpu-absent")) as present:
        assert not present


#===------------------------------------------------------------------------===#
# A build without the compiler
#===------------------------------------------------------------------------===#

def test_a_missing_entry_names_the_command_that_builds_it(tmp_path, monkeypatch):
    options = dict(SPARSE, explore=0.1, seed=3, pooling="mean")
    monkeypatch.setattr(spin, "has_compiler", False)
    indexer = spin.Indexer(**options, device="cuda", chips=["sm_90a"], cache_dir=tmp_path,
                           sm_count=148)
    with pytest.raises(RuntimeError) as missing:
        indexer.artifact(2, 4, 3)
    text = str(missing.value)
    name = cache.entry_name("indexer-gpu-", spin._INDEXER_CACHE_FORMAT,
                            spin._INDEXER_CACHE_VERSION, indexer._spec(2, 4, 3))
    assert f"{os.path.join(str(tmp_path), name)} is missing" in text
    command = re.search(r"^    (python3 -m spin\.cache prebuild .*)$", text, re.M).group(1)
    assert f"--dir {tmp_path}" in command and "--layers 3" in command
    assert "--sm-count 148" in command and "--pooling mean" in command
    # The command, run where the compiler is, builds it; the lookup then works.
    words = shlex.split(command)
    assert words[:3] == ["python3", "-m", "spin.cache"]
    done = run_cli(*words[3:])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 built" in done.stdout
    path = indexer.artifact(2, 4, 3)
    assert os.path.basename(path) == name
    assert spin.read_manifest(path)["batch"] == 3


def test_a_missing_graph_entry_names_the_command_that_builds_it(tmp_path, monkeypatch):
    graph = spin._spin.build_indexer_graph(heads=8, head_dim=32, rows=1, topk=8,
                                           page_size=16, max_pages=2, key_format="bf16",
                                           layer=0, batch=1)
    model = tmp_path / "model.mlir"
    model.write_text(graph)
    options = {"sparsity": 0.5, "block_size": 16}
    monkeypatch.setattr(spin, "has_compiler", False)
    with pytest.raises(RuntimeError) as missing:
        cache.graph_artifact(graph, "indexer_layer", options, ["sm_90a"], 132,
                             tmp_path / "c")
    text = str(missing.value)
    assert "is missing; spin was built without the compiler" in text
    command = re.search(r"^    (python3 -m spin\.cache prebuild .*)$", text, re.M).group(1)
    words = [str(model) if w == "MODEL.mlir" else w for w in shlex.split(command)]
    done = run_cli(*words[3:])
    assert done.returncode == 0, done.stdout + done.stderr
    path = cache.graph_artifact(graph, "indexer_layer", options, ["sm_90a"], 132,
                                tmp_path / "c")
    assert spin.read_manifest(path)["state"] is not None  # sparsified


def test_compile_for_cuda_and_graph_artifact_share_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("SPIN_CACHE_DIR", str(tmp_path))
    graph = spin._spin.build_indexer_graph(heads=8, head_dim=32, rows=1, topk=8,
                                           page_size=16, max_pages=2, key_format="bf16",
                                           layer=0, batch=1)
    path = spin._cached_artifact(graph, "indexer_layer", None, ["sm_90a"], 132)
    assert os.path.dirname(path) == str(tmp_path)
    # Another chip is added to the same entry; the one it had is kept.
    assert cache.graph_artifact(graph, "indexer_layer", None, ["sm_103a"]) == path
    assert sorted(spin.read_manifest(path)["ptx"]) == ["sm_103a", "sm_90a"]
    assert gpu_entries(tmp_path) == [os.path.basename(path)]


#===------------------------------------------------------------------------===#
# python3 -m spin.cache
#===------------------------------------------------------------------------===#

def test_cli_prebuild_list_and_verify(tmp_path):
    root = tmp_path / "c"
    done = run_cli("prebuild", "--dir", root, "--chips", "sm_90a", *_flags(SPARSE),
                   "--max-pages", "2", "--batch-sizes", "1,2", "--layers", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[1/4] layer 0, batch 1, 2 pages: built in ")
    assert lines[-1].startswith("4 built, 0 already there, 0 failed in " + str(root))
    again = run_cli("prebuild", "--dir", root, "--chips", "sm_90a", *_flags(SPARSE),
                    "--max-pages", "2", "--batch-sizes", "1,2", "--layers", "2")
    assert again.returncode == 0 and "0 built, 4 already there" in again.stdout
    # A runtime-only lookup of the same Indexer finds each program.
    ix = spin.Indexer(**SPARSE, device="cuda", chips=["sm_90a"], cache_dir=root)
    paths = {ix.artifact(layer, 2, batch) for layer in (0, 1) for batch in (1, 2)}
    assert sorted(os.path.basename(p) for p in paths) == gpu_entries(root)

    listed = run_cli("list", "--dir", root, "--json")
    assert listed.returncode == 0, listed.stderr
    report = json.loads(listed.stdout)
    assert report["directory"] == str(root) and len(report["entries"]) == 4
    for item in report["entries"]:
        assert item["kind"] == "indexer" and item["chips"] == ["sm_90a"]
        assert item["compiler_version"] == spin._spin.compiler_version()
        assert item["size"] > 0 and item["problem"] is None
        assert abs(item["last_use"] - time.time()) < 300
        assert item["spec"]["heads"] == 8 and item["spec"]["page_size"] == 16
    assert {(i["spec"]["layer"], i["spec"]["batch"]) for i in report["entries"]} == \
        {(0, 1), (0, 2), (1, 1), (1, 2)}
    table = run_cli("list", "--dir", root, module=True)  # the real python3 -m
    assert table.returncode == 0
    assert table.stdout.startswith(f"{root}: 4 entries, ")
    assert "ENTRY" in table.stdout and "LAST USE" in table.stdout
    assert "layer 1 batch 2 pages 2x16 H8 Dh32 K8 rows 1 bf16 spin sm132" in table.stdout

    verified = run_cli("verify", "--dir", root)
    assert verified.returncode == 0 and verified.stdout.endswith("4 entries, 0 bad\n")
    victim = sorted(paths)[0]
    with open(os.path.join(victim, "sm_90a.ptx"), "a") as f:
        f.write("// changed\n")
    verified = run_cli("verify", "--dir", root)
    assert verified.returncode == 1
    assert (f"{os.path.basename(victim)}: corrupt: sm_90a.ptx does not match its checksum"
            in verified.stdout)
    assert "4 entries, 1 bad" in verified.stdout
    removed = run_cli("verify", "--dir", root, "--remove")
    assert removed.returncode == 0 and "checksum; removed" in removed.stdout
    assert len(gpu_entries(root)) == 3 and leftovers(root) == []


def test_cli_prebuild_from_a_graph(tmp_path):
    graph = spin._spin.build_indexer_graph(heads=8, head_dim=32, rows=1, topk=8,
                                           page_size=16, max_pages=2, key_format="bf16",
                                           layer=0, batch=1)
    model = tmp_path / "model.mlir"
    model.write_text(graph)
    done = run_cli("prebuild", "--dir", tmp_path / "c", "--chips", "sm_90a,sm_100a",
                   "--graph", model, "--function", "indexer_layer",
                   "--options", "sparsity=0.50 block-size=16")
    assert done.returncode == 0, done.stderr
    assert f"[1/1] indexer_layer of {model}: built in" in done.stdout
    # The options' text is normalised as spin.compile's dict would write it.
    path = cache.graph_artifact(graph, "indexer_layer", {"sparsity": 0.5, "block_size": 16},
                                ["sm_100a"], 132, tmp_path / "c")
    assert sorted(spin.read_manifest(path)["ptx"]) == ["sm_100a", "sm_90a"]
    item, = cache.entries(str(tmp_path / "c"))
    assert item["kind"] == "graph" and item["shape"] == "indexer_layer batch 1 spin sm132"


def _flags(options):
    words = []
    for key, value in options.items():
        words += ["--" + key.replace("_", "-")] if value is True else \
            ["--" + key.replace("_", "-"), str(value)]
    return words


@pytest.mark.parametrize("args,message", [
    (["prebuild", "--chips", "sm_89", "--max-pages", "2", "--batch-sizes", "1"],
     "--chips: unknown chip 'sm_89' (spin targets sm_90a, sm_100a, sm_103a)"),
    (["prebuild", "--chips", "sm_90a", "--max-pages", "2", "--batch-sizes", "1,0"],
     "--batch-sizes: 0 is not a positive integer"),
    (["prebuild", "--chips", "sm_90a", "--max-pages", "two", "--batch-sizes", "1"],
     "--max-pages: 'two' is not an integer"),
    (["prebuild", "--chips", "sm_90a", "--max-pages", "2"],
     "prebuild needs --graph MODEL.mlir --function NAME, or Indexer programs"),
    (["prebuild", "--chips", "sm_90a", "--max-pages", "2", "--batch-sizes", "1",
      "--layers", "0"], "--layers: 0 is not a positive integer"),
    (["prebuild", "--chips", "sm_90a", "--max-pages", "2", "--batch-sizes", "1",
      "--sparsity", "1.5"], "sparsity must be in [0, 1], got 1.5"),
    (["prebuild", "--chips", "sm_90a", "--max-pages", "2", "--batch-sizes", "1",
      "--pooling", "median"], "pooling must be one of ('max', 'mean', 'top4'), got 'median'"),
    (["prebuild", "--chips", "sm_90a", "--heads", "x"],
     "argument --heads: invalid int value: 'x'"),
    (["prebuild", "--chips", "sm_90a", "--graph", "/nonexistent/model.mlir",
      "--function", "f"], "--graph: cannot read '/nonexistent/model.mlir'"),
    (["prebuild", "--chips", "sm_90a", "--graph", "/dev/null"],
     "--graph needs --function NAME"),
    (["prebuild", "--chips", "sm_90a", "--graph", "/dev/null", "--function", "f",
      "--heads", "8"], "--heads is an Indexer parameter, not taken with --graph"),
    (["prebuild", "--chips", "sm_90a", "--graph", "/dev/null", "--function", "f",
      "--options", "sparsity"], "--options: 'sparsity' is not NAME=VALUE"),
    (["prune", "--max-size", "2X"],
     "--max-size: '2X' is not a size (bytes, or a number with K, M, G or T)"),
    (["verify", "--dir", "/nonexistent/cache"], "--dir: /nonexistent/cache is not a directory"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_cli_names_bad_input(tmp_path, args, message):
    if "--dir" not in args:
        args = [args[0], "--dir", str(tmp_path / "c"), *args[1:]]
    done = run_cli(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert not (tmp_path / "c").exists() or gpu_entries(tmp_path / "c") == []


def test_cli_prebuild_reports_a_program_that_does_not_compile(tmp_path):
    done = run_cli("prebuild", "--dir", tmp_path, "--chips", "sm_90a", "--heads", "4",
                   "--head-dim", "32", "--max-pages", "2", "--batch-sizes", "1")
    assert done.returncode == 1
    assert "[1/1] layer 0, batch 1, 2 pages: FAILED:" in done.stdout
    assert "heads must be a multiple of 8" in done.stdout
    assert "0 built, 0 already there, 1 failed" in done.stdout
    assert os.listdir(tmp_path) == []


def test_cli_prebuild_needs_the_compiler(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH + "import spin; spin.has_compiler = False; "
         "from spin import cache; sys.exit(cache.main(sys.argv[1:]))",
         "prebuild", "--dir", str(tmp_path), "--chips", "sm_90a", "--max-pages", "2",
         "--batch-sizes", "1"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    assert done.returncode == 1
    assert "prebuild needs the compiler" in done.stderr
    assert "-DSPIN_ENABLE_COMPILER=ON" in done.stderr


def test_cli_prune_removes_the_least_recently_used(tmp_path):
    ix = spin.Indexer(**DENSE, device="cuda", chips=["sm_90a"], cache_dir=tmp_path)
    paths = [ix.artifact(0, 2, batch) for batch in (1, 2, 3)]
    now = time.time()
    for age, path in zip((300, 100, 200), paths):  # batch 2 was used last
        os.utime(path, (now - age, now - age))
    ix.artifact(0, 2, 3)  # a lookup is a use
    sizes = {p: cache._size(p) for p in paths}
    (tmp_path / "notes.txt").write_text("not spin's")
    done = run_cli("prune", "--dir", tmp_path, "--max-size", sizes[paths[1]] + sizes[paths[2]])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("removed 1 entries")
    assert gpu_entries(tmp_path) == sorted(os.path.basename(p) for p in paths[1:])
    done = run_cli("prune", "--dir", tmp_path, "--max-size", "1K")
    assert done.returncode == 0 and gpu_entries(tmp_path) == []
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_cli_clear_and_cpu_entries(tmp_path):
    env = {"SPIN_CACHE_DIR": str(tmp_path)}
    # A CPU program (the C++ JIT cache's file) and a GPU one.
    made = subprocess.run(
        [sys.executable, "-c", NO_TORCH + "import spin; spin.Indexer(heads=4, head_dim=16, "
         "block_size=16, topk=8, key_format='f32').program(0, 4)"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=PYTHONPATH, **env))
    assert made.returncode == 0, made.stderr
    spin.Indexer(**DENSE, device="cuda", chips=["sm_90a"], cache_dir=tmp_path).artifact(0, 2, 1)
    report = json.loads(run_cli("list", "--json", env=env).stdout)
    kinds = sorted(i["kind"] for i in report["entries"])
    assert kinds == ["cpu", "indexer"]
    cpu, = [i for i in report["entries"] if i["kind"] == "cpu"]
    assert cpu["spec"]["function"] == "indexer_layer"
    assert cpu["compiler_version"] == spin._spin.compiler_version()
    assert run_cli("verify", env=env).returncode == 0
    with open(cpu["path"], "r+b") as f:
        f.seek(-10, 2)
        f.write(b"X")
    verified = run_cli("verify", env=env)
    assert verified.returncode == 1
    assert f"{cpu['name']}: corrupt: does not match its checksum" in verified.stdout
    # A killed build's leftovers go with clear; files that are not spin's stay.
    os.mkdir(tmp_path / ".tmp-indexer-gpu-0123-abcd")
    (tmp_path / "mine.json").write_text("{}")
    done = run_cli("clear", env=env)
    assert done.returncode == 0 and done.stdout.startswith("removed 2 entries")
    assert os.listdir(tmp_path) == ["mine.json"]
    assert run_cli("list", env=env).stdout.startswith(f"{tmp_path}: 0 entries")


def test_cli_with_the_cache_off(tmp_path):
    done = run_cli("list", env={"SPIN_CACHE_DIR": "off"})
    assert done.returncode == 2 and "the cache is off (SPIN_CACHE_DIR=off)" in done.stderr


def test_parse_size():
    assert cache.parse_size("1000") == 1000
    assert cache.parse_size("2K") == 2048
    assert cache.parse_size("1.5GiB") == 3 << 29
    assert cache.parse_size("500mb") == 500 << 20
    with pytest.raises(ValueError, match="'-1'"):
        cache.parse_size("-1")
