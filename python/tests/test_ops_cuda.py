"""State in tensors the caller owns (spin.CudaStateTensors) and the torch
custom op torch.ops.spin.run_batch (spin.ops).

Without a GPU (CI): the state sizes follow the ABI's field table; the op's
Python wrapper refuses clearly where torch is too old (Debian's 1.13).

On a GPU (``-m cuda``, torch >= 2.4 for the op): device-batch steps on
state tensors equal steps on a state pool, step for step, and the numpy
reference; the op equals the direct call, passes torch.library.opcheck,
traces under torch.compile(fullgraph=True) and replays in a CUDA graph.
"""

import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")
from spin import abi, ops  # noqa: E402

from cuda_test_support import cuda, needs_compiler, needs_cuda, torch  # noqa: E402

needs_compiler = needs_compiler(spin)
needs_op = pytest.mark.skipif(not ops.AVAILABLE,
                              reason="torch.library.custom_op needs torch >= 2.4")


def test_state_sizes_follow_the_field_table():
    """v and d are f32 [slots, capacity], it i64 [slots], the prediction
    record i32 [slots, record], block keys i32 [slots, blocks], the MTP
    buffers per row; every layer has its own."""
    fields = ["v", "d", "it", "pred_at", "pred_keys", "obs_pos", "obs_len"]
    shapes = spin.state_shapes(fields, slots=5, capacity=320, max_rows=3,
                               block_size=64, layers=[0, 2])
    assert shapes["state.0.v"] == ([5, 320], "f32")
    assert shapes["state.2.it"] == ([5], "i64")
    assert shapes["state.2.pred_at"] == ([5, abi.PREDICTION_RECORD_SIZE], "i32")
    assert shapes["state.0.pred_keys"] == ([5, 5], "i32")
    assert shapes["state.0.obs_pos"] == ([5, 3], "i32")
    assert len(shapes) == 2 * len(fields)
    want = 2 * (2 * 5 * 320 * 4 + 5 * 8 + 5 * abi.PREDICTION_RECORD_SIZE * 4 + 5 * 5 * 4
                + 2 * 5 * 3 * 4)
    assert spin.state_bytes(fields, 5, 320, 3, 64, layers=2) == want


@pytest.mark.skipif(ops.AVAILABLE, reason="this torch has torch.library.custom_op")
def test_the_op_says_what_it_needs_on_old_torch():
    with pytest.raises(RuntimeError, match="needs torch >= 2.4"):
        ops.run_batch(1, {}, {}, {})


def test_the_op_gets_what_the_direct_call_lets_the_caller_leave_out():
    """Indexer.run_batch steps state tensors through the op, which takes
    every tensor by position: a missing reset is all false, missing outputs
    and row status buffers are allocated, the caller's own tensors are
    passed as they are and its dicts are not changed."""
    from spin.cuda import _complete_op_tensors
    t = pytest.importorskip("torch")
    signature = [
        {"name": "q", "role": "input", "dtype": "bf16", "shape": [3, 2, 8, 32]},
        {"name": "reset", "role": abi.RESET, "dtype": "i1", "shape": [-1]},
        {"name": "topk", "role": abi.OUTPUT, "dtype": "i32", "shape": [3, 2, 16]},
        {"name": "sparsity", "role": abi.OUTPUT, "dtype": "f32", "shape": [-1, 2]},
    ]
    topk = t.full((3, 2, 16), 5, dtype=t.int32)
    given_in, given_out = {"q": t.zeros((3, 2, 8, 32))}, {"topk": topk}
    inputs, outputs = _complete_op_tensors(signature, ["status", "status_1"], given_in,
                                           given_out, 3, "cpu")
    assert set(given_in) == {"q"} and set(given_out) == {"topk"}
    assert inputs["q"] is given_in["q"] and outputs["topk"] is topk
    assert inputs["reset"].dtype == t.bool and inputs["reset"].shape == (3,)
    assert not inputs["reset"].any()
    assert outputs["sparsity"].dtype == t.float32 and outputs["sparsity"].shape == (3, 2)
    for name in ("status", "status_1"):
        assert outputs[name].dtype == t.int32 and outputs[name].shape == (3,)
    # What the caller gives is kept, a reset included.
    reset = t.ones(3, dtype=t.bool)
    status = t.zeros(3, dtype=t.int32)
    inputs, outputs = _complete_op_tensors(signature, ["status"], dict(given_in, reset=reset),
                                           dict(given_out, status=status), 3, "cpu")
    assert inputs["reset"] is reset and outputs["status"] is status
    # An output sized at run time beyond the batch cannot be made here.
    wide = signature + [{"name": "scores", "role": abi.OUTPUT, "dtype": "f32",
                         "shape": [3, 2, -1]}]
    with pytest.raises(ValueError, match="output 'scores' has a run-time size"):
        _complete_op_tensors(wide, [], given_in, given_out, 3, "cpu")


@needs_compiler
def test_the_indexer_sizes_its_state_from_its_programs(tmp_path):
    """Indexer.state_bytes reads the fields from layer 0's manifest: MTP
    programs add the observation buffers."""
    common = dict(heads=8, head_dim=32, block_size=16, page_size=64, topk=16,
                  sparsity=0.5, key_format="bf16", device="cuda", chips=["sm_90a"],
                  cache_dir=str(tmp_path), sm_count=132, batch_sizes=[2], max_pages=4,
                  reset_input=True)
    one = spin.Indexer(rows=1, **common).state_bytes(256, layers=3, max_requests=8)
    mtp = spin.Indexer(rows=2, **common).state_bytes(256, layers=3, max_requests=8)
    core = 3 * (2 * 8 * 256 * 4 + 8 * 8)
    assert one >= core and mtp > one


#===------------------------------------------------------------------------===#
# On a GPU
#===------------------------------------------------------------------------===#

def _serving(rng, name):
    from test_device_batches_cuda import Serving
    return Serving(name, rng)


@cuda
@needs_cuda
@pytest.mark.parametrize("name", ["spin-bf16", "mtp-fp8-two-layers", "mtp-fp8-shared-program"])
def test_state_tensors_step_as_the_pool_does(rng, name):
    """The same device batches on a pool and on state tensors: equal top-K,
    sparsity and status at every step, and equal to the reference."""
    run = _serving(rng, name)
    tensors = run.programs[0].new_state_tensors(slots=run.slots, layers=run.L)
    assert tensors.nbytes == spin.state_bytes(run.programs[0].state_fields, run.slots,
                                              tensors.capacity, tensors.rows,
                                              tensors.block_size, run.L)
    other = [{k: torch.empty_like(v) for k, v in out.items()} for out in run.outputs]
    for step in range(16):
        rows = run.schedule()
        host, queries = run.write_batch(rows)
        run.issue()
        for layer, program in enumerate(run.programs):
            program.run_batch(dict(run.inputs[layer], **run.batch), tensors, other[layer],
                              layer=layer if run.shared else 0)
        want = run.expect(rows, host, queries)
        torch.cuda.synchronize()
        run.compare(want, f"{name} step {step} (pool)")
        for layer in range(run.L):
            for key in other[layer]:
                assert torch.equal(other[layer][key], run.outputs[layer][key]), \
                    f"step {step} layer {layer} {key}: state tensors differ from the pool"
        for program in run.programs:
            program.check()
        run.advance(rows)
    assert any(v.abs().sum().item() > 0 for k, v in tensors.tensors.items()
               if k.endswith(".v"))


@cuda
@needs_cuda
def test_state_tensors_are_checked(rng):
    run = _serving(rng, "spin-bf16")
    program = run.programs[0]
    tensors = program.new_state_tensors(slots=run.slots, layers=1)
    inputs = dict(run.inputs[0], **run.batch)
    bad = dict(tensors.tensors)
    bad["state.0.d"] = bad["state.0.d"][:3].contiguous()
    with pytest.raises(ValueError, match="state.0.d' has 3 slots but 'state.0.v' has 7"):
        program.run_batch(inputs, spin.CudaStateTensors(bad, tensors.device, 7, 0, 0, 0, 0))
    bad = dict(tensors.tensors)
    bad["state.0.v"] = torch.zeros((run.slots, 8), device="cuda")
    with pytest.raises(ValueError, match="state.0.v' has shape \\[7, 8\\], expected \\[7, "):
        program.run_batch(inputs, spin.CudaStateTensors(bad, tensors.device, 7, 0, 0, 0, 0))
    bad = dict(tensors.tensors)
    v = bad["state.0.v"]
    bad["state.0.v"] = torch.zeros(v.numel() + 1, device="cuda")[1:].view(v.shape)
    with pytest.raises(ValueError, match="state.0.v' starts at address .*, not a "
                       "multiple of 16 bytes"):
        program.run_batch(inputs, spin.CudaStateTensors(bad, tensors.device, 7, 0, 0, 0, 0))
    bad = dict(tensors.tensors)
    del bad["state.0.it"]
    with pytest.raises(ValueError, match="lack 'state.0.it'"):
        program.run_batch(inputs, spin.CudaStateTensors(bad, tensors.device, 7, 0, 0, 0, 0))


def _reset_step(rng, name="mtp-bf16-max"):
    """A batch whose every row starts afresh (a warm-up step: the same
    result at every call, as opcheck needs), its state tensors, output
    tensors, the program's op handle and the outputs of the direct call."""
    run = _serving(rng, name)
    program = run.programs[0]
    while len(run.live) < run.B - 1:
        run.admit()
    rows = sorted(run.live)[:run.B - 1] + [None]
    host, queries = run.write_batch(rows)
    run.batch["reset"].fill_(True)
    tensors = program.new_state_tensors(slots=run.slots, layers=1)
    outputs = {k: torch.empty_like(v) for k, v in run.outputs[0].items()}
    inputs = dict(run.inputs[0], **run.batch)
    want = {k: torch.empty_like(v) for k, v in outputs.items()}
    program.run_batch(inputs, tensors, want)
    return program, inputs, tensors, outputs, ops.program_handle(program), want


@cuda
@needs_cuda
@needs_op
def test_the_op_equals_the_direct_call_and_passes_opcheck(rng):
    program, inputs, tensors, outputs, handle, want = _reset_step(rng)
    assert ops.program_handle(program) == handle
    ops.run_batch(handle, inputs, tensors, outputs)
    torch.cuda.synchronize()
    for key in want:
        assert torch.equal(want[key], outputs[key]), key
    assert (outputs["topk"][:-1] >= 0).any() and (outputs["status"][:-1] == 0).all()
    assert outputs["status"][-1].item() == -1
    names = ops.op_arguments(program)
    args = (handle, 0, [inputs[n] for n in names[0]], [tensors.tensors[n] for n in names[1]],
            [outputs[n] for n in names[2]])
    torch.library.opcheck(torch.ops.spin.run_batch.default, args)
    with pytest.raises(ValueError, match="inputs lacks \\['slots'\\]"):
        ops.run_batch(handle, {k: v for k, v in inputs.items() if k != "slots"},
                      tensors, outputs)


@cuda
@needs_cuda
@needs_op
def test_the_op_compiles_fullgraph_and_replays_in_a_cuda_graph(rng):
    program, inputs, tensors, outputs, handle, want = _reset_step(rng)

    def step(q, inputs, state, outputs):
        inputs = dict(inputs, q=q * 1)  # torch work around the op
        ops.run_batch(handle, inputs, state, outputs)
        return outputs["topk"].clamp(min=-1)

    compiled = torch.compile(step, fullgraph=True)
    got = compiled(inputs["q"], inputs, tensors.tensors, outputs)
    torch.cuda.synchronize()
    assert torch.equal(got, want["topk"]) and torch.equal(outputs["status"], want["status"])
    for key in outputs:
        outputs[key].fill_(5)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.run_batch(handle, inputs, tensors, outputs)
    graph.replay()
    torch.cuda.synchronize()
    for key in want:
        assert torch.equal(outputs[key], want[key]), key
