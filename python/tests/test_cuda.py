"""The CUDA runtime from Python: spin.load, CudaProgram and CudaState.

Without a GPU only the manifest checks and the "no CUDA" errors run; the
tests marked ``cuda`` load the hand-written toy artifacts of
runtime/test/Inputs (portable sm_90 PTX) and run them on CUDA torch tensors,
including a step captured in a CUDA graph. They are the GPU runtime checks
of machines without GoogleTest (scripts/gpu-runtime-build).
"""

import collections
import json
import os
import shutil
import threading

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "runtime", "test", "Inputs")
TOY_STEP = os.path.join(INPUTS, "toy_step")
TOY_MTP = os.path.join(INPUTS, "toy_mtp")

HAVE_CUDA = torch is not None and torch.cuda.is_available()
cuda = pytest.mark.cuda
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="torch.cuda.is_available() is False")


def copy_artifact(tmp_path, source=TOY_STEP):
    target = tmp_path / "artifact"
    shutil.copytree(source, target)
    return target


def edit_manifest(directory, change):
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


#===------------------------------------------------------------------------===#
# Without a GPU
#===------------------------------------------------------------------------===#

def test_import_exposes_the_cuda_api():
    for name in ("load", "read_manifest", "CudaProgram", "CudaState"):
        assert name in spin.__all__ and hasattr(spin, name)


def test_read_manifest_describes_the_artifact():
    manifest = spin.read_manifest(TOY_STEP)
    assert manifest["function"] == "toy_step"
    assert manifest["batch"] == 4 and manifest["rows"] == 1
    assert manifest["state"] == {"layers": 1, "capacity": 8, "block_size": 4,
                                 "max_rows": 1}
    assert manifest["ptx"] == {"sm_90": "sm_90.ptx"}
    assert manifest["kernels"] == ["spin_test_step", "spin_test_scale"]
    roles = [(a["role"], a["name"]) for a in manifest["arguments"]]
    assert roles[:3] == [("input", "x"), ("request_ids", "request_ids"), ("slots", "slots")]
    assert manifest["arguments"][3] == {"role": "state", "name": "v", "layer": 0,
                                        "dtype": "f32", "shape": [-1, 8]}


def test_load_of_a_missing_directory_is_a_clear_error():
    with pytest.raises(ValueError, match="^GPU artifact /nonexistent/artifact is not a directory$"):
        spin.load("/nonexistent/artifact")


def test_load_of_a_directory_without_manifest(tmp_path):
    with pytest.raises(ValueError, match="has no manifest.json"):
        spin.load(str(tmp_path))


@pytest.mark.parametrize("change,message", [
    (lambda m: m.update(format="onnx"),
     'format: expected "spin-gpu-artifact", got "onnx"'),
    (lambda m: m.update(version=3), "version: version 3 is not supported"),
    (lambda m: m["launches"][0].update(kernel="nope"),
     'launches\\[0\\].kernel: kernel "nope" is not in the manifest\'s "kernels"'),
    (lambda m: m["launches"][1]["args"][0].update(index=12),
     "launches\\[1\\].args\\[0\\].index: 12 is out of range: the step has 7 arguments"),
    (lambda m: m["arguments"][0].update(dtype="float"),
     'arguments\\[0\\].dtype: unknown element type "float"'),
    (lambda m: m["arguments"][0].update(role="weights"),
     'arguments\\[0\\].role: unknown role "weights"'),
    (lambda m: m["ptx"].update(sm_100a="missing.ptx"),
     'ptx.sm_100a: PTX file "missing.ptx" is not in'),
])
def test_load_of_a_bad_manifest_names_the_field(tmp_path, change, message):
    artifact = copy_artifact(tmp_path)
    edit_manifest(artifact, change)
    with pytest.raises(ValueError, match=str(artifact) + "/manifest.json: " + message):
        spin.load(str(artifact))
    with pytest.raises(ValueError, match=message):
        spin.read_manifest(str(artifact))


def test_load_of_invalid_json(tmp_path):
    artifact = copy_artifact(tmp_path)
    (artifact / "manifest.json").write_text('{"format": "spin-gpu-artifact",, }')
    with pytest.raises(ValueError, match="manifest.json: JSON error at byte 31: "
                                         "unexpected ','"):
        spin.load(str(artifact))


@pytest.mark.skipif(HAVE_CUDA, reason="this machine has CUDA")
def test_load_without_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="^spin.load needs PyTorch with CUDA: "):
        spin.load(TOY_STEP)


def test_native_load_without_a_driver_or_device_is_a_runtime_error():
    # Whether this machine has a driver and a device is not assumed: loading
    # either works or fails with the driver's reason, never crashes.
    from spin import _spin
    try:
        program = _spin.GpuProgram.load(TOY_STEP, 0)
    except RuntimeError as error:
        assert str(error).startswith(("no CUDA driver: libcuda.so.1 not found",
                                      "no usable CUDA device: ",
                                      "the CUDA driver libcuda.so.1",
                                      "CUDA device 0 does not exist")), str(error)
    else:
        assert program.chip == "sm_90"


#===------------------------------------------------------------------------===#
# On a GPU
#===------------------------------------------------------------------------===#

def toy_inputs(ids, device="cuda"):
    batch = len(ids)
    x = (10 * torch.arange(1, batch + 1, dtype=torch.float32)[:, None]
         + torch.arange(8, dtype=torch.float32)[None, :]).to(device)
    return {"x": x, "request_ids": torch.tensor(ids, dtype=torch.int64, device=device)}


@cuda
@needs_cuda
def test_stateful_steps_on_the_device():
    program = spin.load(TOY_STEP)
    assert program.chip == "sm_90"
    assert program.device == torch.device("cuda", torch.cuda.current_device())
    state = program.new_state(slots=4)
    assert (state.capacity, state.layers, state.rows, state.block_size) == (8, 1, 1, 4)
    assert state.add(7) == 0 and state.add(8) == 1
    ids = [8, 7]
    inputs = toy_inputs(ids)
    for step in range(1, 4):
        out = program(inputs, state, request_ids=ids)
        assert set(out) == {"y", "z"}
        assert out["y"].device == inputs["x"].device and out["y"].dtype == torch.float32
        torch.testing.assert_close(out["y"], step * inputs["x"])
        torch.testing.assert_close(out["z"], 3 * step * inputs["x"])
    program.check()
    assert state.iteration(8) == 3 and state.iteration(7) == 3
    v, d = state.ema(8)
    np.testing.assert_array_equal(v, 3 * inputs["x"][0].cpu().numpy())
    assert not d.any()

    # Caller-allocated outputs, a reset, and a request that joins later.
    state.reset(7)
    state.add(9)
    ids = [8, 7, 9]
    inputs = toy_inputs(ids)
    y = torch.full((3, 8), -1.0, device="cuda")
    out = program.run(inputs, state, request_ids=np.array(ids), outputs={"y": y})
    assert out["y"] is y
    torch.testing.assert_close(y[0], 4 * inputs["x"][0])
    torch.testing.assert_close(y[1:], inputs["x"][1:])
    assert len(state) == 3 and 9 in state and 5 not in state


@cuda
@needs_cuda
def test_eager_steps_follow_their_batches_across_reused_uploads():
    # The runtime reuses a staging entry's device copy when it already holds
    # a step's slots (the same batch again): every step must still reach
    # its own requests' state, whatever the batches before it, their
    # sizes and the stream. The toy step adds x to v[slot] and returns it.
    program = spin.load(TOY_STEP)
    state = program.new_state(slots=4)
    for rid in (1, 2, 3):
        state.add(rid)
    expected = {rid: torch.zeros(8, device="cuda") for rid in (1, 2, 3)}
    other = torch.cuda.Stream()
    batches = ([1, 2],) * 6 + ([2, 1], [1, 2], [3, 1], [1, 2], [1, 2, 3], [1, 2]) + ([3, 2],) * 5
    for step, ids in enumerate(batches):
        inputs = toy_inputs(ids)
        inputs["x"] += step
        on_other = step % 7 == 6
        if on_other:
            other.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(other):
                out = program(inputs, state, request_ids=ids)
            torch.cuda.current_stream().wait_stream(other)
        else:
            out = program(inputs, state, request_ids=ids)
        for b, rid in enumerate(ids):
            expected[rid] += inputs["x"][b]
        torch.testing.assert_close(out["y"], torch.stack([expected[r] for r in ids]),
                                   msg=lambda m: f"step {step}, batch {ids}: {m}")
    program.check()
    counts = collections.Counter(r for ids in batches for r in ids)
    assert [state.iteration(r) for r in (1, 2, 3)] == [counts[1], counts[2], counts[3]]


@cuda
@needs_cuda
def test_request_ids_input_is_made_from_the_host_ids():
    program = spin.load(TOY_STEP)
    state = program.new_state(slots=2)
    state.add(3)
    inputs = toy_inputs([3])
    del inputs["request_ids"]
    out = program(inputs, state, request_ids=torch.tensor([3]))
    torch.testing.assert_close(out["y"], inputs["x"])


@cuda
@needs_cuda
def test_argument_errors_name_the_argument():
    program = spin.load(TOY_STEP)
    state = program.new_state(slots=4)
    state.add(1)
    state.add(2)
    ids = [1, 2]
    good = toy_inputs(ids)

    def call(**change):
        inputs = dict(good)
        inputs.update(change)
        return program(inputs, state, request_ids=ids)

    with pytest.raises(TypeError, match="input 'x' has dtype torch.float64, expected "
                                        "torch.float32 \\(f32\\)"):
        call(x=good["x"].double())
    with pytest.raises(ValueError, match="input 'x' is on cpu, but the program runs on cuda"):
        call(x=good["x"].cpu())
    with pytest.raises(ValueError, match="input 'x' is not contiguous"):
        call(x=torch.zeros(8, 2, device="cuda").t())
    with pytest.raises(ValueError, match="input 'x' has shape \\(2, 8, 1\\), expected \\[\\?, 8\\]"):
        call(x=good["x"][:, :, None])
    with pytest.raises(TypeError, match="input 'x' must be a torch.Tensor, got ndarray"):
        call(x=good["x"].cpu().numpy())
    # Shapes are checked by the runtime.
    with pytest.raises(ValueError, match="^input 'x' has shape \\[2, 9\\], expected \\[\\?, 8\\]$"):
        call(x=torch.zeros(2, 9, device="cuda"))
    with pytest.raises(ValueError, match="unknown inputs \\['q'\\]"):
        call(q=good["x"])
    with pytest.raises(ValueError, match="missing input 'x' \\[\\?, 8\\] f32"):
        program({"request_ids": good["request_ids"]}, state, request_ids=ids)
    with pytest.raises(ValueError, match="^request 42 is not in the state pool$"):
        program(good, state, request_ids=[1, 42])
    with pytest.raises(ValueError, match="request_ids is required"):
        program(good, state)
    with pytest.raises(TypeError, match="state must be a spin.CudaState"):
        program(good, None, request_ids=ids)
    with pytest.raises(ValueError, match="unknown outputs \\['w'\\]"):
        program(good, state, request_ids=ids, outputs={"w": good["x"]})
    with pytest.raises(ValueError, match="slots must be a positive integer"):
        program.new_state(slots=0)
    # Nothing was left busy: a good step runs.
    out = program(good, state, request_ids=ids)
    torch.testing.assert_close(out["y"], good["x"])


@cuda
@needs_cuda
def test_check_reports_bad_device_data_once():
    program = spin.load(TOY_STEP)
    state = program.new_state(slots=4)
    state.add(41)
    state.add(42)
    inputs = toy_inputs([41, 42])
    inputs["x"][1, 3] = -2.0
    program(inputs, state, request_ids=[41, 42])
    with pytest.raises(RuntimeError, match="found bad input on the device: request 42 "
                                           "\\(batch index 1\\), row 3: visible length -2"):
        program.check()
    program.check()


@cuda
@needs_cuda
def test_a_step_captured_in_a_cuda_graph_replays():
    program = spin.load(TOY_STEP)
    state = program.new_state(slots=4)
    state.add(5)
    state.add(6)
    ids = [6, 5]
    inputs = toy_inputs(ids)
    outputs = {"y": torch.zeros(2, 8, device="cuda"), "z": torch.zeros(2, 8, device="cuda")}
    torch.cuda.synchronize()
    left = program.captured_steps_left
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        program(inputs, state, request_ids=ids, outputs=outputs)
    assert program.captured_steps_left == left - 1
    torch.cuda.synchronize()
    assert not outputs["y"].any()          # capturing ran nothing
    for replay in (1, 2):
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(outputs["y"], replay * inputs["x"])
        torch.testing.assert_close(outputs["z"], 3 * replay * inputs["x"])
    assert state.iteration(5) == 2
    # An eager step continues from the replayed state.
    out = program(inputs, state, request_ids=ids)
    torch.testing.assert_close(out["y"], 3 * inputs["x"])
    program.check()


@cuda
@needs_cuda
def test_mtp_commits_reach_the_kernels():
    program = spin.load(TOY_MTP)
    state = program.new_state(slots=3)
    assert (state.layers, state.rows) == (2, 2)
    state.add(7)
    state.add(8)
    ids = [8, 7]
    inputs = {"positions": torch.full((2, 2), 5, dtype=torch.int32, device="cuda"),
              "request_ids": torch.tensor(ids, device="cuda")}
    out = program(inputs, state, request_ids=ids)
    assert out["seen"].tolist() == [0, 0]
    assert state.has_pending_rows(7)
    with pytest.raises(ValueError, match="request 8 has an uncommitted verification step "
                                         "on layer 1"):
        program(inputs, state, request_ids=ids)
    with pytest.raises(ValueError, match="accepted must be in \\[0, 1\\]"):
        state.commit(7, 2)
    state.commit(7, 1)
    state.commit(8, 0)
    out = program(inputs, state, request_ids=ids)
    assert out["seen"].tolist() == [2, 102]
    assert state.iteration(7, layer=1) == 2
    state.reset(8)
    assert not state.has_pending_rows(8)


@cuda
@needs_cuda
def test_steps_on_several_streams_race_releases_and_readmissions():
    # Three threads, each with its own program (a program's steps share its
    # scratch buffers, so one program serves one stream at a time) and its
    # own stream, step requests of one shared state, releasing and admitting
    # requests while the others' steps are in flight: slots freed on one
    # stream are handed out on another. Every output must equal what a
    # sequential run gives: the toy step adds x to v[slot] and returns v.
    # The outputs are compared in the main thread once every thread has
    # finished: torch ops issued from several threads at once make
    # compute-sanitizer's racecheck (2025.3) lose track of a launch and hang,
    # with no spin call involved (docs/Reliability.md).
    programs = [spin.load(TOY_STEP) for _ in range(3)]
    state = programs[0].new_state(slots=8)
    start = threading.Barrier(3)
    errors = []
    results = [[] for _ in range(3)]

    def run(t):
        stream = torch.cuda.Stream()
        checks = []
        with torch.cuda.stream(stream):
            keep, rotating = 100 * t + 1, 100 * t + 50
            state.add(keep)
            state.add(rotating)
            totals = {keep: torch.zeros(8, device="cuda"),
                      rotating: torch.zeros(8, device="cuda")}
            start.wait()
            for step in range(60):
                if step % 6 == 5:
                    # A finished request, and a new one in its place.
                    state.release(rotating)
                    del totals[rotating]
                    rotating += 1
                    state.add(rotating)
                    totals[rotating] = torch.zeros(8, device="cuda")
                ids = [keep, rotating] if step % 2 else [rotating, keep]
                inputs = toy_inputs(ids)
                inputs["x"] += step + 1000 * t
                for b, rid in enumerate(ids):
                    totals[rid] = totals[rid] + inputs["x"][b]
                out = programs[t](inputs, state, request_ids=ids)
                checks.append((step, ids, out["y"], torch.stack([totals[r] for r in ids])))
        stream.synchronize()
        results[t] = checks
        programs[t].check()
        for rid in (keep, rotating):
            state.release(rid)

    def work(t):
        try:
            run(t)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {t}: {e!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert len(state) == 0
    assert [len(checks) for checks in results] == [60, 60, 60]
    for t, checks in enumerate(results):
        for step, ids, got, want in checks:
            assert torch.equal(got, want), (
                f"thread {t}, step {step}, requests {ids}: {got.tolist()} != {want.tolist()}")
