"""spin.Indexer(device="cuda").

Without a GPU (CI): an Indexer with explicit chips compiles its GPU programs
into the disk cache, the cache is checked (corrupt, stale and incomplete
entries are rebuilt), a build without the compiler finds the cached
programs and names a missing one, and what the GPU path does not support
yet is refused with a clear error.

On a GPU (tests marked ``cuda``, skipped when torch sees no CUDA device):
the Indexer's top-K, realized sparsity and state over several decode steps
against the independent numpy reference of test/reference (the one
bench/gpu_check.py uses), and examples/torch_decode_loop.py --device cuda.
On a GPU machine with the runtime-only build, the GPU programs come from
the cache directory $SPIN_CACHE_DIR, filled beforehand on a machine with the
compiler by python/tests/prebuild_cuda_cache.py (bench/run_gpu_check.sh
does both ends).
"""

import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")
import spin_reference as ref  # noqa: E402  (conftest: test/reference)

from cuda_indexer_cases import CASES, EXAMPLE, ROOT, load_example, make_indexer  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_check  # noqa: E402  (the GPU check's fp8 encoding and tolerances)

from cuda_test_support import (  # noqa: E402
    HAVE_CUDA, cuda, needs_compiler, needs_cuda, to_device, torch)

needs_compiler = needs_compiler(spin)

SMALL = dict(heads=8, head_dim=64, page_size=64, block_size=64, topk=16, sparsity=0.5)


def entries(directory):
    return sorted(d for d in os.listdir(directory) if d.startswith("indexer-gpu-"))


def readme_cuda_example():
    """The README's Python example for device="cuda"."""
    text = open(os.path.join(ROOT, "README.md")).read()
    start = text.index("```python\nimport torch\nimport spin\n") + len("```python\n")
    return text[start:text.index("```", start)]


#===------------------------------------------------------------------------===#
# Without a GPU
#===------------------------------------------------------------------------===#

@needs_compiler
def test_explicit_chips_fill_the_cache_without_a_gpu(tmp_path):
    indexer = spin.Indexer(**SMALL, device="cuda", chips=["sm_90a"], cache_dir=tmp_path,
                           max_pages=8, batch_sizes=[1, 3], layers=2)
    assert indexer.chips == ["sm_90a"] and indexer.cache_dir == str(tmp_path)
    found = entries(tmp_path)
    assert len(found) == 4  # 2 layers x 2 batch sizes
    seen = set()
    for layer in (0, 1):
        for batch in (1, 3):
            path = indexer.artifact(layer, 8, batch)
            assert os.path.basename(path) in found
            manifest = spin.read_manifest(path)  # the runtime's validation
            assert manifest["batch"] == batch and manifest["rows"] == 1
            assert manifest["ptx"] == {"sm_90a": "sm_90a.ptx"}
            assert manifest["state"]["capacity"] == 8 * 64
            assert manifest["state"]["layers"] >= layer + 1
            assert {a["layer"] for a in manifest["arguments"] if a["role"] == "state"} == {layer}
            shapes = {a["name"]: a["shape"] for a in manifest["arguments"]}
            assert shapes["q"] == [batch, 1, 8, 64] and shapes["topk"] == [batch, 1, 16]
            assert shapes["keys"] == [-1, 64, 64]
            with open(os.path.join(path, "sm_90a.ptx")) as f:
                assert ".target sm_90a" in f.read()
            seen.add(path)
    assert len(seen) == 4
    # The same Indexer again finds every program: nothing is rewritten.
    stamps = {p: os.stat(os.path.join(p, "sm_90a.ptx")).st_mtime_ns for p in seen}
    again = spin.Indexer(**SMALL, device="cuda", chips="sm_90a", cache_dir=tmp_path,
                         max_pages=8, batch_sizes=[3, 1], layers=2)
    assert {again.artifact(l, 8, b) for l in (0, 1) for b in (1, 3)} == seen
    assert stamps == {p: os.stat(os.path.join(p, "sm_90a.ptx")).st_mtime_ns for p in seen}
    # Other options are other programs.
    other = spin.Indexer(**{**SMALL, "sparsity": 0.25}, device="cuda", chips=["sm_90a"],
                         cache_dir=tmp_path)
    assert other.artifact(0, 8, 1) not in seen


@needs_compiler
def test_cache_dir_follows_spin_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPIN_CACHE_DIR", str(tmp_path / "env"))
    indexer = spin.Indexer(**SMALL, device="cuda", chips=["sm_90a"])
    assert indexer.cache_dir == str(tmp_path / "env")
    assert indexer.artifact(0, 4, 2).startswith(str(tmp_path / "env") + os.sep)
    # An explicit cache_dir wins over the variable.
    explicit = spin.Indexer(**SMALL, device="cuda", chips=["sm_90a"], cache_dir=tmp_path / "arg")
    assert explicit.cache_dir == str(tmp_path / "arg")


@needs_compiler
def test_corrupt_stale_and_incomplete_entries_are_rebuilt(tmp_path):
    indexer = spin.Indexer(**SMALL, device="cuda", chips=["sm_90a"], cache_dir=tmp_path)
    path = indexer.artifact(0, 4, 2)
    ptx = os.path.join(path, "sm_90a.ptx")
    original = open(ptx).read()
    # A changed byte in the PTX: caught by the checksum, rebuilt.
    open(ptx, "w").write(original.replace(".target sm_90a", ".target sm_80", 1))
    assert indexer.artifact(0, 4, 2) == path
    assert open(ptx).read() == original
    # A missing manifest: rebuilt.
    os.unlink(os.path.join(path, "manifest.json"))
    indexer.artifact(0, 4, 2)
    spin.read_manifest(path)
    # An entry of another compiler version: rebuilt and re-stamped.
    record_path = os.path.join(path, "spin-cache.json")
    record = json.load(open(record_path))
    assert record["compiler_version"] == spin._spin.compiler_version()
    record["compiler_version"] = "0" * 64
    json.dump(record, open(record_path, "w"))
    indexer.artifact(0, 4, 2)
    assert json.load(open(record_path))["compiler_version"] == spin._spin.compiler_version()
    # A chip the entry lacks is added; the ones it has are kept.
    wider = spin.Indexer(**SMALL, device="cuda", chips=["sm_100a"], cache_dir=tmp_path)
    assert wider.artifact(0, 4, 2) == path
    assert spin.read_manifest(path)["ptx"] == {"sm_90a": "sm_90a.ptx",
                                               "sm_100a": "sm_100a.ptx"}
    assert entries(tmp_path) == [os.path.basename(path)]
    assert not [d for d in os.listdir(tmp_path) if d.startswith(".")]  # no leftovers


@needs_compiler
def test_a_build_without_the_compiler_uses_the_cache(tmp_path, monkeypatch):
    spin.Indexer(**SMALL, device="cuda", chips=["sm_90a"], cache_dir=tmp_path,
                 max_pages=4, batch_sizes=[2])
    monkeypatch.setattr(spin, "has_compiler", False)
    # What the runtime-only build does: find the entry (no compiler version
    # to compare with; the runtime validates the manifest).
    indexer = spin.Indexer(**SMALL, device="cuda", chips=["sm_90a"], cache_dir=tmp_path,
                           max_pages=4, batch_sizes=[2])
    path = indexer.artifact(0, 4, 2)
    # Not cached: a clear error naming the cache directory and the entry.
    with pytest.raises(RuntimeError) as missing:
        indexer.artifact(0, 4, 3)
    text = str(missing.value)
    assert text.startswith("no usable GPU program for this Indexer (layer 0, batch 3, "
                           "block tables 4 pages wide, chips sm_90a) in the cache "
                           f"directory {tmp_path}: {tmp_path}{os.sep}indexer-gpu-")
    assert "is missing; spin was built without the compiler" in text
    assert "prebuild_cuda_cache.py" in text and "SPIN_CACHE_DIR" in text
    with pytest.raises(RuntimeError, match="batch 3"):
        spin.Indexer(**SMALL, device="cuda", chips=["sm_90a"], cache_dir=tmp_path,
                     max_pages=4, batch_sizes=[2, 3])
    # A chip the entry lacks, and a corrupt entry, are named too.
    with pytest.raises(RuntimeError, match="is incomplete: it has PTX for sm_90a, not sm_103a"):
        spin.Indexer(**SMALL, device="cuda", chips=["sm_103a"],
                     cache_dir=tmp_path).artifact(0, 4, 2)
    with open(os.path.join(path, "sm_90a.ptx"), "a") as f:
        f.write("// changed\n")
    with pytest.raises(RuntimeError, match="is corrupt: sm_90a.ptx does not match its checksum"):
        indexer.artifact(0, 4, 2)
    # With the disk cache off there is nothing to run.
    monkeypatch.setenv("SPIN_CACHE_DIR", "off")
    with pytest.raises(RuntimeError, match="the disk cache is off"):
        spin.Indexer(**SMALL, device="cuda", chips=["sm_90a"])


@pytest.mark.skipif(spin.has_compiler, reason="the build has the compiler (see the "
                                                "test above for the lookup without it)")
def test_the_runtime_only_build_reads_the_prebuilt_cache():
    """On a GPU machine's runtime-only build, with SPIN_CACHE_DIR set to the
    directory prebuild_cuda_cache.py filled: its programs are found, and one
    it lacks is a clear error."""
    if os.environ.get("SPIN_CACHE_DIR") in (None, "", "off"):
        pytest.skip("SPIN_CACHE_DIR does not name a prebuilt cache")
    indexer = make_indexer(spin, "bf16-max", chips=["sm_90a"])
    case = CASES["bf16-max"]
    path = indexer.artifact(0, case["max_pages"], case["batch"])
    assert path.startswith(os.path.abspath(os.environ["SPIN_CACHE_DIR"]) + os.sep)
    assert spin.read_manifest(path)["batch"] == case["batch"]
    with pytest.raises(RuntimeError, match="no usable GPU program .* is missing; spin was "
                                           "built without the compiler"):
        indexer.artifact(0, case["max_pages"], case["batch"] + 1)


@pytest.mark.skipif(spin.has_compiler, reason="the build has the compiler (see the "
                    "runtime-only build of bench/run_gpu_check.sh)")
@needs_cuda
def test_the_runtime_only_build_compiles_graphs_from_the_prebuilt_cache():
    """spin.compile(target="cuda") without the compiler: the multi-layer
    graph prebuild_cuda_cache.py compiled loads (its three layers launching
    one set of shared kernels), and the same graph with other options is a
    clear error naming the entry and the prebuild command."""
    if os.environ.get("SPIN_CACHE_DIR") in (None, "", "off"):
        pytest.skip("SPIN_CACHE_DIR does not name a prebuilt cache")
    from cuda_indexer_cases import multilayer_graph
    text, function, options = multilayer_graph()
    program = spin.compile(text, function, options, target="cuda")
    assert program.manifest["state"]["layers"] == 3
    with open(os.path.join(program.manifest["directory"], "manifest.json")) as f:
        manifest = json.load(f)
    kernels = {k["name"] for k in manifest["kernels"]}
    assert {launch["kernel"] for launch in manifest["launches"]} == kernels
    assert len(manifest["launches"]) == 3 * len(kernels)  # every layer, every kernel
    with pytest.raises(RuntimeError, match="python3 -m spin.cache prebuild"):
        spin.compile(text, function, dict(options, sparsity=0.25), target="cuda")


@needs_compiler
def test_disk_cache_off_compiles_into_a_private_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("SPIN_CACHE_DIR", "off")
    indexer = spin.Indexer(**SMALL, device="cuda", chips=["sm_90a"])
    assert indexer.cache_dir and os.path.isdir(indexer.cache_dir)
    spin.read_manifest(indexer.artifact(0, 4, 1))


@needs_compiler
@pytest.mark.parametrize("name", ["mtp-bf16-union-prefix", "mtp-bf16-row0"])
def test_mtp_programs_compile_without_a_gpu(tmp_path, name):
    """An MTP Indexer's program takes the accepted counts and binds the
    pending-observation fields of its layer (docs/Runtime-ABI.md); its
    kernels buffer the rows and replay the accepted ones."""
    case = CASES[name]
    rows = case["indexer"]["rows"]
    indexer = make_indexer(spin, name, chips=["sm_90a"], cache_dir=tmp_path)
    path = indexer.artifact(0, case["max_pages"], case["batch"])
    manifest = spin.read_manifest(path)  # the runtime's validation
    assert manifest["rows"] == rows and manifest["state"]["max_rows"] == rows
    args = {a["name"]: a for a in manifest["arguments"]}
    assert args["accepted"]["role"] == "accepted"
    assert args["accepted"]["shape"] == [case["batch"]]
    fields = [a["name"] for a in manifest["arguments"] if a["role"] == "state"]
    assert fields == ["v", "d", "it", "obs_rows", "obs_pos", "obs_len", "obs_mask", "obs_z"]
    assert args["topk"]["shape"] == [case["batch"], rows, case["indexer"]["topk"]]
    with open(os.path.join(path, "manifest.json")) as f:
        kernels = [launch["kernel"] for launch in json.load(f)["launches"]]
    commit = [k for k in kernels if k.startswith("spin_commit_")]
    if case["indexer"].get("mtp_update") == "row0":
        # The observe kernel folds row 0 at its step: nothing to replay, the
        # finish alone advances `it`.
        assert len(commit) == 1 and commit[0].endswith("_finish")
    else:
        assert len(commit) == 2 and commit[1] == commit[0] + "_finish"
    assert kernels.index(commit[-1]) < min(i for i, k in enumerate(kernels)
                                           if k.startswith("spin_select_"))
    assert any(k.startswith("spin_observe_") for k in kernels)
    assert not any(k.startswith("spin_update_") for k in kernels)


@needs_compiler
def test_dense_indexers_take_several_rows_on_cuda(tmp_path):
    indexer = spin.Indexer(**SMALL, rows=3, dense=True, device="cuda", chips=["sm_90a"],
                           cache_dir=tmp_path, max_pages=4, batch_sizes=[2])
    manifest = spin.read_manifest(indexer.artifact(0, 4, 2))
    assert manifest["rows"] == 3 and manifest["state"] is None


@pytest.mark.parametrize("options,error,message", [
    (dict(chips=["sm_89"]), ValueError, "chips: unknown chip 'sm_89' \\(spin targets "
                                        "sm_90a, sm_100a, sm_103a\\)"),
    (dict(chips=[]), ValueError, "chips must name at least one chip"),
    (dict(chips=["sm_90a"], key_format="f32"), ValueError,
     "key_format='f32' is not supported on cuda"),
    (dict(chips=["sm_90a"], reduction="A2"), ValueError,
     "reduction='A2' is not supported on cuda yet"),
    (dict(chips=["sm_90a"], batch_sizes=[2]), ValueError, "batch_sizes needs max_pages"),
    (dict(chips=["sm_90a"], max_pages=4), ValueError,
     "batch_sizes is required with max_pages on cuda"),
    (dict(chips=["sm_90a"], max_pages=4, batch_sizes=[0]), ValueError,
     "batch_sizes must hold positive integers, got 0"),
    (dict(chips=["sm_90a"], layers=0), ValueError, "layers must be a positive integer"),
    (dict(chips=["sm_90a"], sm_count=0), ValueError,
     "sm_count must be a positive integer \\(got 0\\)"),
    (dict(chips=["sm_90a"], sm_count=True), ValueError,
     "sm_count must be a positive integer \\(got True\\)"),
    (dict(chips=["sm_90a"], sm_count=132.0), ValueError,
     "sm_count must be a positive integer \\(got 132.0\\)"),
])
def test_bad_cuda_configuration_is_rejected(tmp_path, options, error, message):
    options = {**SMALL, **options}
    with pytest.raises(error, match=message):
        spin.Indexer(device="cuda", cache_dir=tmp_path, **options)
    assert not os.listdir(tmp_path)


@needs_compiler
def test_sm_count_sizes_the_scoring_grid_and_keys_the_cache(tmp_path):
    def score_grid(path):
        with open(os.path.join(path, "manifest.json")) as f:
            raw = json.load(f)
        return next(launch["grid"] for launch in raw["launches"]
                    if launch["kernel"].startswith("spin_score"))

    dense = {**SMALL, "dense": True}
    paths = {}
    for sm_count in (132, 148):
        indexer = spin.Indexer(**dense, device="cuda", chips=["sm_90a"], cache_dir=tmp_path,
                               sm_count=sm_count)
        assert indexer.sm_count == sm_count
        paths[sm_count] = indexer.artifact(0, 2048, 16)
    # 16 rows of 131072 slots: 16 x 16 CTAs on 132 SMs, 18 x 16 on 148
    # (docs/GPU-ABI.md; test_gpu_compile.py checks the rule itself).
    assert score_grid(paths[132]) == [16, 16, 1]
    assert score_grid(paths[148]) == [18, 16, 1]
    assert len(entries(tmp_path)) == 2
    if not HAVE_CUDA:
        # Without a device the default is the H200's 132: the same program.
        default = spin.Indexer(**dense, device="cuda", chips=["sm_90a"], cache_dir=tmp_path)
        assert default.sm_count == 132
        assert default.artifact(0, 2048, 16) == paths[132]


@needs_compiler
def test_an_unsupported_shape_names_the_compiler_diagnostic(tmp_path):
    indexer = spin.Indexer(**{**SMALL, "heads": 4}, device="cuda", chips=["sm_90a"],
                           cache_dir=tmp_path)
    with pytest.raises(ValueError, match="heads must be a multiple of 8"):
        indexer.artifact(0, 4, 1)
    assert not os.listdir(tmp_path)  # nothing half-written


@pytest.mark.skipif(HAVE_CUDA, reason="this machine has CUDA")
def test_without_a_gpu_the_chip_must_be_named(tmp_path):
    with pytest.raises(RuntimeError, match="needs a CUDA device to pick the chip .*"
                                           "pass chips=\\[...\\]"):
        spin.Indexer(**SMALL, device="cuda", cache_dir=tmp_path)
    indexer = spin.Indexer(**SMALL, device="cuda:1", chips=["sm_90a"], cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match="needs PyTorch with CUDA"):
        indexer.new_state(capacity_slots=256)


@needs_compiler
def test_prebuild_script_covers_the_gpu_tests_and_the_example(tmp_path, monkeypatch):
    out = tmp_path / "cache"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "python", "tests",
                                                        "prebuild_cuda_cache.py"),
                           "--out", str(out), "--chips", "sm_90a"],
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.path.dirname(
                              os.path.dirname(spin.__file__))))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "programs in" in done.stdout
    # Everything the GPU tests and the example construct is found by a build
    # without the compiler.
    monkeypatch.setattr(spin, "has_compiler", False)
    monkeypatch.setenv("SPIN_CACHE_DIR", str(out))
    for name in CASES:
        make_indexer(spin, name, chips=["sm_90a"])
    for draft in (0, 2):
        load_example().make_indexer("cuda", draft, chips=["sm_90a"])
    # The README's example builds the same Indexer (here with the chip named).
    call = re.search(r"indexer = (spin\.Indexer\(.*?\))\s+#", readme_cuda_example(),
                     re.S).group(1)
    named = types.SimpleNamespace(Indexer=lambda **kw: spin.Indexer(chips=["sm_90a"], **kw))
    assert eval(call, {"spin": named}).device == "cuda"
    with pytest.raises(RuntimeError, match="no usable GPU program"):
        make_indexer(spin, "bf16-max", chips=["sm_100a"])


def test_example_runs_on_the_cpu():
    if torch is None or not spin.has_compiler:
        pytest.skip("needs torch and the compiler")
    done = subprocess.run([sys.executable, EXAMPLE, "--device", "cpu", "--steps", "3"],
                          capture_output=True, text=True, env=_package_env())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith(f"step  {i}:") for i, line in enumerate(lines))
    assert all("; accepted [" in line for line in lines)  # MTP commits (draft 2)
    # Request 1 started a new turn at step 1: fewer iterations than the others.
    iterations = json.loads(lines[-1].split("iterations ")[1])
    assert iterations[1] < iterations[0] and iterations[0] == iterations[2] > 0


#===------------------------------------------------------------------------===#
# On a GPU
#===------------------------------------------------------------------------===#

def _package_env():
    return dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(spin.__file__)))


class Lockstep:
    """One case's Indexer on the GPU and the reference, step by step, on
    exact inputs (integers in [-4, 4], weights in quarters, power-of-two fp8
    scales: every f32 operation is exact, so results must be equal)."""

    def __init__(self, name, rng, exact=True, key_values=None):
        """``key_values(shape)``, if given, makes the keys (else random)."""
        case = CASES[name]
        self.name, self.rng, self.exact = name, rng, exact
        self.opts = dict(case["indexer"])
        self.B, self.MB, self.L = case["batch"], case["max_pages"], case["layers"]
        self.S, self.bs = self.opts["page_size"], self.opts["block_size"]
        self.H, self.D, self.K = self.opts["heads"], self.opts["head_dim"], self.opts["topk"]
        self.fmt = self.opts["key_format"]
        self.dense = self.opts.get("dense", False)
        self.R = self.opts.get("rows", 1)
        self.NS = self.MB * self.S
        self.pages = self.MB + 5
        self.indexer = make_indexer(spin, name)
        self.state = self.indexer.new_state(capacity_slots=self.NS, layers=self.L,
                                            max_requests=self.B + 2)
        self.keys, self.keys_dev, self.scales, self.scales_dev = [], [], [], []
        for layer in range(self.L):
            shape = (self.pages, self.S, self.D)
            if key_values is not None:
                values = key_values(shape).astype(np.float32)
            elif exact:
                values = rng.integers(-4, 5, size=shape).astype(np.float32)
            else:
                values = rng.standard_normal(shape).astype(np.float32)
            stored, decoded = gpu_check.encode(values, self.fmt)
            self.keys.append(decoded)
            self.keys_dev.append(self._device(stored, self.fmt))
            scales = None
            if self.fmt == "fp8":
                scales = np.exp2(rng.integers(-2, 3, size=shape[:2])).astype(np.float32)
            self.scales.append(scales)
            self.scales_dev.append(None if scales is None else self._device(scales))
        self.states = {}    # (layer, request) -> reference LayerState
        self.requests = {}  # request -> [table, length, position gap]
        self.accepted = {}  # request -> its last commit (MTP)

    _device = staticmethod(to_device)

    def add(self, request, length, gap=0):
        table = self.rng.permutation(self.pages)[:self.MB].astype(np.int32)
        self.requests[request] = [table, int(length), int(gap)]
        self.state.add(request)
        for layer in range(self.L):
            self.states[layer, request] = ref.LayerState(self.NS, self.bs)

    def release(self, request):
        self.state.release(request)
        del self.requests[request]
        self.accepted.pop(request, None)
        for layer in range(self.L):
            del self.states[layer, request]

    def reset(self, request):
        self.state.reset(request)
        self.accepted.pop(request, None)
        for layer in range(self.L):
            ref.reset(self.states[layer, request])

    def commit(self, request, accepted):
        """MTP: ``accepted`` draft tokens of the request's last step were
        accepted; its next step replays rows 0..accepted (on the GPU at its
        next step; the reference at its next spin_step too)."""
        self.state.commit(request, int(accepted))
        self.accepted[request] = int(accepted)
        self.requests[request][1] += int(accepted) + 1

    def step(self, order, ids_as="list"):
        """One step of every layer over the requests ``order``; checks the
        top-K and the sparsity of each layer against the reference. With
        MTP (R rows) row r of a request sees N + r slots at position
        N - 1 + gap + r, and lengths advance only at ``commit``."""
        B, R = len(order), self.R
        table = np.stack([self.requests[r][0] for r in order])
        n = np.array([[self.requests[r][1] + i for i in range(R)] for r in order], np.int32)
        p = n - 1 + np.array([[self.requests[r][2]] for r in order], np.int32)
        q_fmt = "f16" if self.fmt == "f16" else "bf16"
        ids = {"list": list(order), "numpy": np.array(order, np.int64),
               "cpu": torch.tensor(order, dtype=torch.int64),
               "cuda": torch.tensor(order, dtype=torch.int64, device="cuda")}[ids_as]
        for layer in range(self.L):
            if self.exact:
                q = self.rng.integers(-4, 5, size=(B, R, self.H, self.D)).astype(np.float32)
                w = (self.rng.integers(-4, 5, size=(B, R, self.H)) / 4).astype(np.float32)
            else:
                q = ref.bf16_to_f32(ref.f32_to_bf16_bits(
                    self.rng.standard_normal((B, R, self.H, self.D)).astype(np.float32)))
                q[np.abs(q) < 2.0 ** -14] = 0.0
                w = (0.5 * self.rng.standard_normal((B, R, self.H))).astype(np.float32)
            q_stored = gpu_check.encode_exactly(q, q_fmt, "q")
            top, sparsity = self.indexer(
                self._device(q_stored, q_fmt), self._device(w), self.keys_dev[layer],
                self._device(table), self._device(n), self._device(p), self.state,
                request_ids=ids, scales=self.scales_dev[layer], layer=layer,
                return_sparsity=True)
            assert top.device.type == "cuda" and top.dtype == torch.int32
            assert tuple(top.shape) == (B, R, self.K) and tuple(sparsity.shape) == (B, R)
            got_top, got_sp = top.cpu().numpy(), sparsity.cpu().numpy()
            if self.dense:
                z = ref.dense_scores(q, w, self.keys[layer], self.scales[layer], table, n)
                want_top, want_sp, mask = ref.topk(z, n, self.K), np.zeros((B, R)), None
            else:
                want_top, mask, want_sp, z = ref.spin_step(
                    [self.states[layer, r] for r in order], list(order), layer, q, w,
                    self.keys[layer], self.scales[layer], table, n, p, k=self.K,
                    bs=self.bs, sparsity=self.opts["sparsity"],
                    explore=self.opts.get("explore", 0.0), seed=self.opts.get("seed", 0),
                    pooling=self.opts.get("pooling", "max"),
                    mtp_mask=self.opts.get("mtp_mask", "union"),
                    mtp_update=self.opts.get("mtp_update", "prefix"),
                    accepted=[self.accepted.get(r, 0) for r in order])
            where = f"{self.name} layer {layer}, requests {list(order)}"
            if self.exact:
                np.testing.assert_array_equal(got_top, want_top, err_msg=where)
            else:
                c = {"scheme": "noninteger", "key_format": self.fmt,
                     "block_size": self.bs, "page_size": self.S}
                problems = []
                for b in range(B):
                    for i in range(R):
                        problems += gpu_check.compare_row(
                            c, f"{where} batch index {b} row {i}", want_top[b, i],
                            got_top[b, i], want_sp[b, i], got_sp[b, i], z[b, i],
                            int(n[b, i]), None if mask is None else mask[b])
                assert not problems, "\n".join(problems)
            np.testing.assert_allclose(got_sp, want_sp, atol=1e-6, err_msg=where)
        self.indexer.check()
        if R == 1:
            for r in order:
                self.requests[r][1] += 1
        return got_sp

    def check_states(self):
        for (layer, request), st in self.states.items():
            assert self.state.iteration(request, layer) == st.it, (layer, request)
            v, d = self.state.ema(request, layer)
            if self.exact:
                np.testing.assert_array_equal(v, st.V, err_msg=f"V {layer} {request}")
                np.testing.assert_array_equal(d, st.D, err_msg=f"D {layer} {request}")
            else:
                tol = gpu_check.STATE_REL[self.fmt]
                for got, want in ((v, st.V), (d, st.D)):
                    np.testing.assert_allclose(got, want, rtol=0,
                                               atol=tol * max(np.abs(want).max(), 1e-30))


def _ragged_lengths(run, steps):
    """Lengths of the first requests: a short one, one around a block
    boundary, one near the capacity (all stay below it for ``steps``)."""
    top = run.NS - steps - 8
    return [int(run.rng.integers(1, 2 * run.bs)),
            run.bs * int(run.rng.integers(2, max(3, top // run.bs))) - 1,
            int(run.rng.integers(top - 20, top))]


@cuda
@needs_cuda
@pytest.mark.parametrize("name", ["bf16-max", "bf16-top4-explore", "fp8-mean",
                                  "f16-max-two-layers", "dense-bf16"])
def test_steps_match_the_reference(rng, name):
    """Warm-up, then sparse steps over ragged lengths (one request with a
    position gap), the batch in a new order every step, a host reset of one
    request, a released request whose slot a new one reuses; exploration
    where the case has it; the state read back at the end."""
    steps = 8
    run = Lockstep(name, rng)
    lengths = _ragged_lengths(run, steps)
    ids = [2 ** 40 + 7, -3, 12][:run.B]
    for i, request in enumerate(ids):
        run.add(request, lengths[i], gap=5 if i == 1 else 0)
    forms = ["list", "numpy", "cpu", "cuda"]
    realized = []
    for t in range(steps):
        if t == 4 and not run.dense:
            run.reset(ids[0])
        if t == 5:
            run.release(ids[-1])
            ids[-1] = 99
            run.add(99, int(rng.integers(run.bs, run.NS // 2)))
        order = [ids[i] for i in rng.permutation(len(ids))]
        sp = run.step(order, ids_as=forms[t % len(forms)])
        realized.append(sp)
    if not run.dense:
        run.check_states()
        assert not realized[0].any()               # warm-up: dense
        assert any(sp.max() > 0 for sp in realized[1:])


@cuda
@needs_cuda
@pytest.mark.parametrize("name", ["bf16-max", "fp8-mean"])
def test_steps_at_repeated_and_skipped_positions_match_the_reference(rng, name):
    """With max pooling the state predicts a request's next step at
    (p + 1, N + 1) after its update; a step at the same position again, or
    further ahead, computes its prediction itself. Every step equals the
    reference, whichever way the block scores came."""
    run = Lockstep(name, rng)
    lengths = _ragged_lengths(run, 12)
    ids = [5, 6, 7][:run.B]
    for i, request in enumerate(ids):
        run.add(request, lengths[i])
    # Length change after each step's own +1: 0 decodes, -1 repeats the
    # position, +2 skips ahead.
    for move in [0, 0, -1, 0, +2, -1, 0, 0]:
        run.step(list(ids))
        for request in ids:
            run.requests[request][1] = max(1, run.requests[request][1] + move)
    run.check_states()


@cuda
@needs_cuda
@pytest.mark.parametrize("name", ["mtp-bf16-union-prefix", "mtp-fp8-explore-two-layers",
                                  "mtp-bf16-row0"])
def test_mtp_steps_match_the_reference(rng, name):
    """MTP verification steps (SPIN_SPEC §4): d + 1 rows per request with
    ragged lengths and position gaps, a warm-up, then sparse steps whose
    buffered rows are committed with 0..d accepted drafts (every count
    occurs) and replayed at the request's next step; a host reset drops a
    request's buffered rows and its commit; a released request's slot is
    reused. Top-K and sparsity of every row, and V, D, it after every step,
    equal the reference's."""
    steps = 7
    run = Lockstep(name, rng)
    d = run.R - 1
    top = run.NS - (steps + 1) * (d + 1) - 8
    lengths = [int(rng.integers(1, 2 * run.bs)),
               run.bs * int(rng.integers(2, max(3, top // run.bs))) - 1,
               int(rng.integers(top - 20, top))]
    ids = [2 ** 41 + 3, -9, 17][:run.B]
    for i, request in enumerate(ids):
        run.add(request, lengths[i], gap=4 if i == 1 else 0)
    counts = set()
    for t in range(steps):
        if t == 3:
            run.reset(ids[0])           # drops its buffered rows and commit
        if t == 5:
            run.release(ids[-1])
            ids[-1] = 77
            run.add(77, int(rng.integers(run.bs, run.NS // 3)))
        order = [ids[i] for i in rng.permutation(len(ids))]
        sp = run.step(order)
        if t == 0:
            assert not sp.any()         # warm-up: every block of every row
        run.check_states()
        for i, request in enumerate(order):
            accepted = (t + i) % (d + 1) if t < d + 1 else int(rng.integers(0, d + 1))
            counts.add(accepted)
            run.commit(request, accepted)
    assert counts == set(range(d + 1))
    # One more step replays the last commits; the state still matches.
    run.step([ids[i] for i in rng.permutation(len(ids))])
    run.check_states()


@cuda
@needs_cuda
def test_mtp_noninteger_f16_steps_within_the_gpu_check_tolerance(rng):
    steps = 5
    run = Lockstep("mtp-nonint-f16", rng, exact=False)
    for request, length in zip((5, 6), (40, run.NS // 2)):
        run.add(request, length)
    for t in range(steps):
        run.step([5, 6] if t % 2 else [6, 5])
        run.check_states()
        run.commit(5, t % run.R)
        run.commit(6, (t + 1) % run.R)


@cuda
@needs_cuda
def test_noninteger_bf16_steps_within_the_gpu_check_tolerance(rng):
    steps = 6
    run = Lockstep("nonint-bf16", rng, exact=False)
    for request, length in zip((5, 6), _ragged_lengths(run, steps)[1:]):
        run.add(request, length)
    for _ in range(steps):
        run.step([5, 6])
    run.check_states()


@cuda
@needs_cuda
@pytest.mark.parametrize("fill", ["zeros", "two-values"])
def test_long_rows_of_equal_scores_match_the_reference(rng, fill):
    """Rows of 20K and 17K slots whose scores are all equal (zero keys), or
    take two values (keys of 0 or 1 by page): more entries share the top-K's
    threshold bin than its candidate buffer holds (16384 a row), so the
    top-K selects over the whole row, and ties go to the lower slots."""
    def keys(shape):
        if fill == "zeros":
            return np.zeros(shape)
        return np.broadcast_to(rng.integers(0, 2, size=(shape[0], 1, 1)), shape)
    run = Lockstep("dense-long-fp8", rng, key_values=keys)
    run.add(1, run.NS - 3)
    run.add(2, 17000)
    for order in ([1, 2], [2, 1]):
        run.step(order)


@cuda
@needs_cuda
def test_argument_errors_name_the_argument(rng):
    run = Lockstep("fp8-mean", rng)
    for request in (1, 2, 3):
        run.add(request, 100)
    B, H, D = 3, run.H, run.D
    good = dict(q=torch.zeros(B, 1, H, D, dtype=torch.bfloat16, device="cuda"),
                w=torch.zeros(B, 1, H, device="cuda"), keys=run.keys_dev[0],
                block_table=Lockstep._device(np.stack([run.requests[r][0] for r in (1, 2, 3)])),
                lengths=torch.full((B, 1), 100, dtype=torch.int32, device="cuda"),
                positions=torch.full((B, 1), 99, dtype=torch.int32, device="cuda"),
                scales=run.scales_dev[0])

    def call(state=run.state, ids=(1, 2, 3), **change):
        a = {**good, **change}
        return run.indexer(a["q"], a["w"], a["keys"], a["block_table"], a["lengths"],
                           a["positions"], state, request_ids=list(ids), scales=a["scales"])

    with pytest.raises(TypeError, match="input 'q' has dtype torch.float32, expected "
                                        "torch.bfloat16 \\(bf16\\)"):
        call(q=good["q"].float())
    with pytest.raises(ValueError, match="input 'w' is on cpu, but the program runs on cuda"):
        call(w=good["w"].cpu())
    with pytest.raises(ValueError, match="input 'keys' is not contiguous"):
        call(keys=good["keys"].transpose(1, 2).contiguous().transpose(1, 2))
    with pytest.raises(ValueError, match="input 'q' has shape \\(3, 1, 8, 32\\), "
                                         "expected \\[B, 1, 8, 64\\]"):
        call(q=good["q"][..., :32].contiguous())
    with pytest.raises(TypeError, match="input 'block_table' must be a torch.Tensor, got ndarray"):
        call(block_table=good["block_table"].cpu().numpy())
    with pytest.raises(ValueError, match="block_table is 6 pages wide \\(384 slots\\), but the "
                                         "state holds capacity_slots=768: on cuda the block "
                                         "table must be capacity_slots / page_size = 12"):
        call(block_table=good["block_table"][:, :6].contiguous())
    with pytest.raises(TypeError, match="input 'lengths' has dtype torch.int64"):
        call(lengths=good["lengths"].long())
    with pytest.raises(ValueError, match="scales is required with key_format='fp8'"):
        call(scales=None)
    with pytest.raises(ValueError, match="request 42 is not in the state pool"):
        call(ids=(1, 2, 42))
    with pytest.raises(TypeError, match="state must be a spin.CudaState"):
        call(state=spin.Indexer(**SMALL, key_format="f32").new_state(capacity_slots=768)
             if spin.has_compiler else object())
    with pytest.raises(ValueError, match="layer 1 is outside the state's 1 layers"):
        run.indexer(good["q"], good["w"], good["keys"], good["block_table"],
                    good["lengths"], good["positions"], run.state, request_ids=[1, 2, 3],
                    scales=good["scales"], layer=1)
    # Nothing was issued by the refused calls: a good step runs.
    top = call()
    run.indexer.check()
    assert top.shape == (3, 1, run.K)
    run.state.close()
    with pytest.raises(RuntimeError, match="this CudaState is closed"):
        call()


@cuda
@needs_cuda
def test_bad_block_table_entries_are_reported_by_check(rng):
    run = Lockstep("bf16-max", rng)
    for request in (4, 5, 6):
        run.add(request, 200)
    run.step([4, 5, 6])
    run.requests[5][0] = run.requests[5][0].copy()
    run.requests[5][0][0] = 1000  # outside the key cache's pages
    table = Lockstep._device(np.stack([run.requests[r][0] for r in (4, 5, 6)]))
    q = torch.zeros(3, 1, run.H, run.D, dtype=torch.bfloat16, device="cuda")
    n = torch.full((3, 1), 201, dtype=torch.int32, device="cuda")
    run.indexer(q, torch.ones(3, 1, run.H, device="cuda"), run.keys_dev[0], table, n,
                n - 1, run.state, request_ids=[4, 5, 6])
    with pytest.raises(RuntimeError, match="request 5 \\(batch index 1\\).*1000"):
        run.indexer.check()
    run.indexer.check()  # reported once


@cuda
@needs_cuda
def test_example_runs_on_cuda():
    done = subprocess.run([sys.executable, EXAMPLE, "--device", "cuda", "--draft", "0",
                           "--steps", "6"], capture_output=True, text=True,
                          env=_package_env())
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"step {i:2d}" for i in range(6)]
    sparsity = [[float(x) for x in re.search(r"per layer ([0-9., ]+);", line).group(1)
                 .split(", ")] for line in lines]
    assert sparsity[0] == [0.0, 0.0]                  # warm-up
    assert all(0.0 < s < 1.0 for s in sparsity[1])    # SPIN after it
    # Request 1 starts a new turn at step 3 (its iterations restart).
    assert lines[-1].endswith("iterations [6, 3, 6]")


@cuda
@needs_cuda
def test_example_runs_mtp_on_cuda():
    """--draft 2: three query rows per request, commits of 0..2 accepted
    draft tokens; a committed verification step counts as one iteration
    (at the request's next step)."""
    done = subprocess.run([sys.executable, EXAMPLE, "--device", "cuda", "--draft", "2",
                           "--steps", "6"], capture_output=True, text=True,
                          env=_package_env())
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"step {i:2d}" for i in range(6)]
    assert all("; accepted [" in line for line in lines)
    sparsity = [[float(x) for x in re.search(r"per layer ([0-9., ]+);", line).group(1)
                 .split(", ")] for line in lines]
    assert sparsity[0] == [0.0, 0.0]                  # warm-up
    assert all(0.0 < s < 1.0 for s in sparsity[1])    # SPIN after it
    # Iterations count committed steps: step t's line shows t (request 1
    # restarted at step 3: 2 there at the end).
    assert lines[-1].endswith("iterations [5, 2, 5]")


@cuda
@needs_cuda
def test_readme_cuda_example_runs_as_written():
    done = subprocess.run([sys.executable, "-c", readme_cuda_example()],
                          capture_output=True, text=True, env=_package_env())
    assert done.returncode == 0, done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("(3, 1, 128) [")
    sparsity = json.loads(line[len("(3, 1, 128) "):])
    assert len(sparsity) == 3 and all(0.0 < s < 1.0 for s in sparsity)  # past the warm-up


@cuda
@needs_cuda
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")  # the refused capture
def test_a_step_captured_in_a_cuda_graph_matches_the_eager_step(rng):
    """After one eager step with the same request ids, an Indexer step can
    be captured in a CUDA graph; replayed on one state it gives what the
    same step run eagerly gives on a twin state (top-K, sparsity, V, D,
    it). Without that eager step the capture is refused with a message."""
    run = Lockstep("bf16-max", rng)
    ix = run.indexer
    assert run.B == 3  # the batch of the prebuilt programs
    ids = [11, 12, 13]
    twin = ix.new_state(capacity_slots=run.NS, layers=run.L, max_requests=8)
    tables = {}
    lengths = {11: run.bs * 3 + 5, 12: run.NS - 20, 13: run.bs}
    for r in ids:
        run.state.add(r)
        twin.add(r)
        tables[r] = rng.permutation(run.pages)[:run.MB].astype(np.int32)

    def inputs():
        B = len(ids)
        q = rng.integers(-4, 5, size=(B, 1, run.H, run.D)).astype(np.float32)
        w = (rng.integers(-4, 5, size=(B, 1, run.H)) / 4).astype(np.float32)
        n = np.array([[lengths[r]] for r in ids], np.int32)
        return (run._device(gpu_check.encode_exactly(q, "bf16", "q"), "bf16"),
                run._device(w), run.keys_dev[0], run._device(np.stack([tables[r] for r in ids])),
                run._device(n), run._device(n - 1))

    def step(args, state):
        return ix(*args, state, request_ids=ids, layer=0, return_sparsity=True)

    for _ in range(2):  # a warm-up and a sparse step, on both states
        args = inputs()
        step(args, run.state)
        step(args, twin)
    torch.cuda.synchronize()
    ix.program(0, run.MB, len(ids)).reserve_captured_steps(1)
    args = inputs()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured_top, captured_sp = step(args, run.state)
    graph.replay()
    eager_top, eager_sp = step(args, twin)
    torch.cuda.synchronize()
    ix.check()
    assert captured_sp.max().item() > 0  # a sparse step
    assert torch.equal(captured_top, eager_top) and torch.equal(captured_sp, eager_sp)
    for r in ids:
        assert run.state.iteration(r, 0) == twin.iteration(r, 0) == 3
        for got, want in zip(run.state.ema(r, 0), twin.ema(r, 0)):
            np.testing.assert_array_equal(got, want)

    # Ids never stepped eagerly have no device copy to capture.
    fresh = [14, 15, 16]
    for r in ids:
        run.state.release(r)
    for r in fresh:
        run.state.add(r)
    ix.program(0, run.MB, len(fresh)).reserve_captured_steps(1)
    args = inputs()
    with pytest.raises(ValueError, match="run one step with them before capturing"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            ix(*args, run.state, request_ids=fresh, layer=0)
