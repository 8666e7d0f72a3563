"""Device batches (docs/GPU-ABI.md, "Device batches"): steps whose slots,
accepted counts and reset flags are device tensors the caller writes.

Without a GPU (CI): the programs compile, their manifests take the slots
and accepted counts as step arguments, and the Python API refuses bad
calls before anything runs.

On a GPU (``-m cuda``): requests arrive, move between batch rows, leave,
start new turns and (MTP) commit accepted drafts drawn at random, with
padding rows in between; each step's top-K and sparsity are compared with
the independent numpy reference of test/reference (exact inputs: equal
results), first on eager steps, then on one CUDA graph per program captured
once and replayed for every later batch. Bad slots and accepted counts are
skipped and reported by ``check()`` while the other rows stay exact.
"""

import json
import os
import sys

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")
import spin_reference as ref  # noqa: E402  (conftest: test/reference)

from device_batch_cases import CASES, artifact, graph_text, options  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_check  # noqa: E402  (encodings of the GPU check)

from cuda_test_support import (  # noqa: E402
    cuda, needs_compiler, needs_cuda, to_device as _device, torch)

needs_compiler = needs_compiler(spin)


#===------------------------------------------------------------------------===#
# Without a GPU
#===------------------------------------------------------------------------===#

@needs_compiler
@pytest.mark.parametrize("name", sorted(CASES))
def test_device_batch_programs_take_slots_and_accepted_counts(tmp_path, name):
    """The manifest lists slots (and accepted counts for MTP) as step
    arguments; every kernel that reads slots gets the pool's slot count
    (size 0 of a state field) as a parameter, or the select kernel's skip
    flags."""
    case = CASES[name]
    directory = artifact(spin, name, 0, cache_dir=str(tmp_path))
    spin.read_manifest(directory)  # valid for the runtime
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    roles = {a["role"]: a for a in manifest["arguments"]}
    assert roles["slots"]["dtype"] == "i32"
    assert roles["reset"]["shape"] == [case["batch"]]
    assert ("accepted" in roles) == (case["graph"]["rows"] > 1)
    args = manifest["arguments"]
    for launch in manifest["launches"]:
        kernel = launch["kernel"]
        pointers = [args[a["index"]]["role"] for a in launch["args"]
                    if a["kind"] == "argument"]
        dims = [a for a in launch["args"] if a["kind"] == "dim"]
        scratch = [manifest["scratch"][a["index"]]["name"] for a in launch["args"]
                   if a["kind"] == "scratch"]
        if "slots" not in pointers:
            continue
        # The slot count, or the select kernel's skip flags (the EMA update
        # and the MTP buffering follow the select kernel's verdict).
        counted = [args[d["argument"]]["name"] for d in dims if d["dim"] == 0] == ["v"]
        flagged = any(n.endswith("_skip") for n in scratch)
        assert counted or flagged, kernel
    # The select kernel writes its rows' status ("status"; a program of
    # several layers has "status_1", ... in launch order).
    status = [a["index"] for launch in manifest["launches"] for a in launch["args"]
              if a["kind"] == "status"]
    # A shared program takes the layer at run time, in its select kernel.
    layer_args = [a for launch in manifest["launches"] for a in launch["args"]
                  if a["kind"] == "layer"]
    assert len(layer_args) == (1 if case.get("layer_argument") else 0)
    # The select kernel writes every row's verdict, the sparse scoring
    # kernel the bad-page code of a row that met a bad block-table entry.
    takers = sorted(launch["kernel"].rsplit("_", 1)[0] for launch in manifest["launches"]
                    if any(a["kind"] == "status" for a in launch["args"]))
    assert status == [0, 0] and takers == ["spin_score_sparse", "spin_select"]


@needs_compiler
def test_graph_of_the_cases_is_an_indexer_with_reset_flags():
    text = graph_text(spin, "spin-bf16", 0)
    assert "func.func @indexer_layer" in text
    assert options("spin-bf16")["reset-input"] is True


#===------------------------------------------------------------------------===#
# On a GPU
#===------------------------------------------------------------------------===#

class Serving:
    """A case's programs (one per layer) with one state pool whose slots
    the test assigns, the reference state of every slot, and persistent
    device inputs that each step overwrites (as an engine does before a
    graph replay)."""

    def __init__(self, name, rng, slots=7):
        case = CASES[name]
        g = case["graph"]
        self.name, self.rng = name, rng
        self.opts = case["options"]
        self.B, self.L, self.R = case["batch"], case["layers"], g["rows"]
        self.H, self.D, self.K = g["heads"], g["head_dim"], g["topk"]
        self.S, self.MB, self.fmt = g["page_size"], g["max_pages"], g["key_format"]
        self.bs = self.opts["block-size"]
        self.NS = self.MB * self.S
        self.pages = self.MB + 6
        self.slots = slots
        # One program per layer, or one for all (a run-time layer).
        self.shared = bool(case.get("layer_argument"))
        self.programs = [spin.load(artifact(spin, name, layer), "cuda")
                         for layer in (range(1) if self.shared else range(self.L))]
        if self.shared:
            assert self.programs[0].layer_argument
            self.programs = self.programs * self.L
        self.state = self.programs[0].new_state(slots=slots, layers=self.L)
        self.keys, self.scales, self.inputs = [], [], []
        B, R = self.B, self.R
        for layer in range(self.L):
            shape = (self.pages, self.S, self.D)
            stored, decoded = gpu_check.encode(
                rng.integers(-4, 5, size=shape).astype(np.float32), self.fmt)
            scales = None
            if self.fmt == "fp8":
                scales = np.exp2(rng.integers(-2, 3, size=shape[:2])).astype(np.float32)
            self.keys.append(decoded)
            self.scales.append(scales)
            inputs = {"keys": _device(stored, self.fmt),
                      "q": torch.zeros((B, R, self.H, self.D), dtype=torch.bfloat16,
                                       device="cuda"),
                      "w": torch.zeros((B, R, self.H), dtype=torch.float32, device="cuda")}
            if scales is not None:
                inputs["scales"] = _device(scales)
            self.inputs.append(inputs)
        # Shared by the layers' steps, as an engine's batch description.
        self.batch = {
            "block_table": torch.zeros((B, self.MB), dtype=torch.int32, device="cuda"),
            "lengths": torch.zeros((B, R), dtype=torch.int32, device="cuda"),
            "positions": torch.zeros((B, R), dtype=torch.int32, device="cuda"),
            "request_ids": torch.zeros(B, dtype=torch.int64, device="cuda"),
            "slots": torch.full((B,), -1, dtype=torch.int32, device="cuda"),
            "reset": torch.zeros(B, dtype=torch.bool, device="cuda")}
        if R > 1:
            self.batch["accepted"] = torch.zeros(B, dtype=torch.int32, device="cuda")
        self.outputs = [{"topk": torch.zeros((B, R, self.K), dtype=torch.int32, device="cuda"),
                         "sparsity": torch.zeros((B, R), dtype=torch.float32, device="cuda"),
                         "status": torch.full((B,), 77, dtype=torch.int32, device="cuda")}
                        for _ in range(self.L)]
        self.live = {}     # request -> {"slot", "table", "n", "accepted", "fresh"}
        self.refs = {}     # slot -> [LayerState per layer]
        self.next_id = 1000
        self.graph = None

    # -- the requests --------------------------------------------------------

    def admit(self):
        """A new request in a free slot (whose state is stale: its first step
        resets it)."""
        used = {r["slot"] for r in self.live.values()}
        free = [s for s in range(self.slots) if s not in used]
        if not free:
            return None
        slot = int(self.rng.choice(free))
        request = self.next_id
        self.next_id += 1
        top = self.NS - 40 - self.R
        self.live[request] = {
            "slot": slot, "table": self.rng.permutation(self.pages)[:self.MB].astype(np.int32),
            "n": int(self.rng.integers(1, top)), "accepted": 0, "fresh": True}
        return request

    def finish(self, request):
        del self.live[request]  # its slot's state is left stale on purpose

    def new_turn(self, request):
        self.live[request]["fresh"] = True

    # -- one step --------------------------------------------------------------

    def write_batch(self, rows, accepted_override=None, slot_override=None,
                    table_override=None):
        """Writes the batch description: ``rows[b]`` is a request or None
        (padding, with garbage lengths, positions and block-table entries).
        Returns the host copies the reference needs."""
        B, R = self.B, self.R
        table = self.rng.integers(-50, 10 ** 6, size=(B, self.MB)).astype(np.int32)
        n = self.rng.integers(-5, 10 ** 6, size=(B, R)).astype(np.int32)
        p = self.rng.integers(-5, 10 ** 6, size=(B, R)).astype(np.int32)
        ids = self.rng.integers(0, 2 ** 62, size=B).astype(np.int64)
        slots = np.full(B, -1, np.int32)
        reset = np.zeros(B, np.bool_)
        accepted = self.rng.integers(-3, 9, size=B).astype(np.int32)
        for b, request in enumerate(rows):
            if request is None:
                continue
            r = self.live[request]
            table[b] = r["table"]
            n[b] = [r["n"] + i for i in range(R)]
            p[b] = n[b] - 1
            ids[b] = request
            slots[b] = r["slot"]
            reset[b] = r["fresh"]
            accepted[b] = r["accepted"]
        if accepted_override:
            for b, value in accepted_override.items():
                accepted[b] = value
        if slot_override:
            for b, value in slot_override.items():
                slots[b] = value
        if table_override:
            for b, value in table_override.items():
                table[b] = value
        host = {"block_table": table, "lengths": n, "positions": p, "request_ids": ids,
                "slots": slots, "reset": reset}
        if R > 1:
            host["accepted"] = accepted
        for key, value in host.items():
            self.batch[key].copy_(torch.from_numpy(value))
        queries = []
        for layer in range(self.L):
            q = self.rng.integers(-4, 5, size=(B, R, self.H, self.D)).astype(np.float32)
            w = (self.rng.integers(-4, 5, size=(B, R, self.H)) / 4).astype(np.float32)
            stored = gpu_check.encode_exactly(q, "bf16", "q")
            self.inputs[layer]["q"].copy_(
                torch.from_numpy(stored.view(np.int16)).view(torch.bfloat16))
            self.inputs[layer]["w"].copy_(torch.from_numpy(w))
            queries.append((q, w))
        return host, queries

    def issue(self):
        """Every layer's step on the current batch description."""
        for layer, program in enumerate(self.programs):
            program.run_batch(dict(self.inputs[layer], **self.batch), self.state,
                              outputs=self.outputs[layer],
                              layer=layer if self.shared else 0)

    def capture(self):
        """One CUDA graph of every layer's step, replayed for later batches."""
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.issue()

    def expect(self, rows, host, queries, skipped=None):
        """The reference's top-K, sparsity and row status of every layer for
        the live rows of ``rows`` (not those of ``skipped``, a dict of batch
        row -> the error code that skips it), updating the reference state;
        padding and skipped rows expect -1 and 0, and status -1 (padding) or
        their code."""
        B, R = self.B, self.R
        skipped = skipped or {}
        live = [b for b, r in enumerate(rows) if r is not None and b not in skipped]
        status = np.array([skipped[b] if b in skipped else -1 if r is None else 0
                           for b, r in enumerate(rows)], np.int32)
        want = []
        for layer in range(self.L):
            top = np.full((B, R, self.K), -1, np.int32)
            sp = np.zeros((B, R), np.float32)
            if live:
                states = []
                for b in live:
                    slot = int(host["slots"][b])
                    states.append(self.refs.setdefault(
                        slot, [ref.LayerState(self.NS, self.bs) for _ in range(self.L)])[layer])
                q, w = queries[layer]
                got_top, _, got_sp, _ = ref.spin_step(
                    states, [int(host["request_ids"][b]) for b in live], layer,
                    q[live], w[live], self.keys[layer], self.scales[layer],
                    host["block_table"][live], host["lengths"][live],
                    host["positions"][live], k=self.K, bs=self.bs,
                    sparsity=self.opts["sparsity"], explore=self.opts["explore"],
                    seed=self.opts["seed"], pooling=self.opts["pooling"],
                    accepted=[int(host["accepted"][b]) for b in live] if R > 1 else None,
                    reset_flags=[bool(host["reset"][b]) for b in live])
                top[live], sp[live] = got_top, got_sp
            want.append((top, sp, status))
        return want

    def compare(self, want, where):
        for layer, (top, sp, status) in enumerate(want):
            got_top = self.outputs[layer]["topk"].cpu().numpy()
            got_sp = self.outputs[layer]["sparsity"].cpu().numpy()
            got_status = self.outputs[layer]["status"].cpu().numpy()
            np.testing.assert_array_equal(got_top, top, err_msg=f"{where} layer {layer}")
            np.testing.assert_allclose(got_sp, sp, atol=1e-6, err_msg=f"{where} layer {layer}")
            np.testing.assert_array_equal(got_status, status,
                                          err_msg=f"{where} layer {layer}: row status")

    def advance(self, rows):
        """After a step: fresh requests are no longer fresh; single-row
        requests see one more slot; MTP requests accept a random number of
        drafts, replayed at their next step."""
        for request in rows:
            if request is None:
                continue
            r = self.live[request]
            r["fresh"] = False
            if self.R == 1:
                r["n"] += 1
            else:
                r["accepted"] = int(self.rng.integers(0, self.R))
                r["n"] += r["accepted"] + 1

    def schedule(self):
        """This step's rows: some live requests (not all), in random rows,
        padding elsewhere; arrivals, departures and new turns at random. A
        request whose rows would pass the capacity (MTP rows grow by up to
        R slots a step) finishes first."""
        for request in sorted(self.live):
            if self.live[request]["n"] + self.R - 1 > self.NS:
                self.finish(request)
        if len(self.live) < 2 or self.rng.random() < 0.3:
            self.admit()
        if len(self.live) > 2 and self.rng.random() < 0.2:
            self.finish(int(self.rng.choice(sorted(self.live))))
        if self.live and self.rng.random() < 0.1:
            self.new_turn(int(self.rng.choice(sorted(self.live))))
        requests = [r for r in sorted(self.live) if self.rng.random() < 0.8]
        requests = requests[:self.B]
        rows = [None] * self.B
        for b, request in zip(self.rng.permutation(self.B), requests):
            rows[int(b)] = request
        return rows


@cuda
@needs_cuda
@pytest.mark.parametrize("name", sorted(CASES))
def test_device_batches_match_the_reference_eagerly_and_in_one_graph(rng, name):
    run = Serving(name, rng)
    steps, eager = 40, 8
    replays = 0
    for step in range(steps):
        rows = run.schedule()
        host, queries = run.write_batch(rows)
        if step < eager:
            run.issue()
        else:
            if run.graph is None:
                run.capture()
            run.graph.replay()
            replays += 1
        want = run.expect(rows, host, queries)
        torch.cuda.synchronize()
        for program in run.programs:
            program.check()
        run.compare(want, f"{name} step {step} rows {rows}")
        run.advance(rows)
    assert replays == steps - eager
    # Every step above was checked; make sure they were not trivial.
    assert any(st[0].it > 2 for st in run.refs.values())


def three_requests_captured(rng):
    """A single-row SPIN loop after the warm-up and sparse steps of three
    requests in rows 0-2 (row 3 padding), each checked, then captured."""
    run = Serving("spin-bf16", rng)
    for step in range(4):
        while len(run.live) < 3:
            run.admit()
        rows = sorted(run.live)[:3] + [None]
        host, queries = run.write_batch(rows)
        run.issue()
        run.compare(run.expect(rows, host, queries), f"step {step}")
        run.programs[0].check()
        run.advance(rows)
    run.capture()
    return run


@cuda
@needs_cuda
def test_bad_slots_are_skipped_and_reported(rng):
    """A slot outside the pool and a slot an earlier row already has are
    skipped (top-K -1, state untouched) and reported by check(), in a
    replayed graph too; the other rows stay exact."""
    run = three_requests_captured(rng)
    cases = [({3: run.slots}, "state slot 7 is outside \\[0, slots\\)", "BadSlot"),
             ({3: -2}, "state slot -2 is outside", "BadSlot"),
             ({3: None}, "state slot \\d+ is already the slot of an earlier row",
              "DuplicateSlot")]
    codes = {v: k for k, v in spin.abi.DEVICE_ERRORS.items()}
    for override, message, error in cases:
        rows = sorted(run.live)[:3] + [None]
        if override[3] is None:  # the slot of row 0, again in row 3
            override = {3: run.live[rows[0]]["slot"]}
        host, queries = run.write_batch(rows, slot_override=override)
        run.graph.replay()
        want = run.expect(rows, host, queries, skipped={3: codes[error]})
        torch.cuda.synchronize()
        assert spin.abi.row_status(run.outputs[0]["status"][3].item()) == error
        with pytest.raises(RuntimeError, match=f"batch index 3\\b.*, row 0: {message}"):
            run.programs[0].check()
        run.compare(want, f"override {override}")
        run.advance(rows)


@cuda
@needs_cuda
def test_a_bad_kv_page_is_reported_in_the_row_status(rng):
    """A block table naming pages outside the key cache: the row's status
    says BadPage (written by the scoring kernel after the selection's 0),
    its slots there are never selected, its state is untouched (the next
    steps match the reference, which skipped it), check() names the entry,
    and the other rows stay exact, in a replayed graph."""
    run = three_requests_captured(rng)
    codes = {v: k for k, v in spin.abi.DEVICE_ERRORS.items()}
    rows = sorted(run.live)[:3] + [None]
    bad = 1
    host, queries = run.write_batch(rows, table_override={bad: 10 ** 6})
    run.graph.replay()
    want = run.expect(rows, host, queries, skipped={bad: codes["BadPage"]})
    torch.cuda.synchronize()
    top, _, status = want[0]
    got_top = run.outputs[0]["topk"].cpu().numpy()
    got_status = run.outputs[0]["status"].cpu().numpy()
    assert spin.abi.row_status(got_status[bad]) == "BadPage"
    np.testing.assert_array_equal(got_status, status)
    others = [b for b in range(run.B) if b != bad]
    np.testing.assert_array_equal(got_top[others], top[others])
    assert (got_top[bad] == -1).all(), "slots of a bad page were selected"
    with pytest.raises(RuntimeError, match="block-table entry 1000000 is outside"):
        run.programs[0].check()
    run.advance([r for b, r in enumerate(rows) if b != bad])
    for step in range(3):  # the bad row's state was untouched
        host, queries = run.write_batch(rows)
        run.graph.replay()
        want = run.expect(rows, host, queries)
        torch.cuda.synchronize()
        run.compare(want, f"after the bad page, step {step}")
        run.programs[0].check()
        run.advance(rows)


@cuda
@needs_cuda
def test_bad_accepted_counts_are_skipped_and_reported(rng):
    """An accepted count outside [0, buffered rows) skips the request: its
    buffered rows and state stay as they were (a later step with a good
    count commits them), and check() names the count."""
    run = Serving("mtp-fp8-two-layers", rng)
    for step in range(3):
        while len(run.live) < 2:
            run.admit()
        rows = [None] + sorted(run.live)[:2] + [None]
        host, queries = run.write_batch(rows)
        run.issue()
        run.compare(run.expect(rows, host, queries), f"step {step}")
        for program in run.programs:
            program.check()
        run.advance(rows)
    rows = [None] + sorted(run.live)[:2] + [None]
    for bad in (run.R, -1):
        host, queries = run.write_batch(rows, accepted_override={2: bad})
        run.issue()
        want = run.expect(rows, host, queries,
                          skipped={2: [k for k, v in spin.abi.DEVICE_ERRORS.items()
                                       if v == "BadAccepted"][0]})
        torch.cuda.synchronize()
        for program in run.programs:
            with pytest.raises(RuntimeError,
                               match=f"batch index 2, row 0: accepted count {bad} is outside"):
                program.check()
        run.compare(want, f"accepted {bad}")
        # Only the good row advanced.
        run.advance([rows[1]])
    host, queries = run.write_batch(rows)  # the request's own count again
    run.issue()
    run.compare(run.expect(rows, host, queries), "after the refused commits")
    for program in run.programs:
        program.check()


@cuda
@needs_cuda
def test_a_pool_serves_either_admitted_requests_or_device_batches(rng):
    run = Serving("spin-bf16", rng)
    run.state.add(5)
    rows = [None] * run.B
    run.write_batch(rows)
    with pytest.raises(ValueError, match="1 admitted request"):
        run.issue()
    run.state.release(5)
    run.issue()  # all padding: nothing to do, nothing reported
    torch.cuda.synchronize()
    run.programs[0].check()
    assert (run.outputs[0]["topk"] == -1).all().item()
    with pytest.raises(ValueError, match="serves device batches"):
        run.state.add(6)
    inputs = dict(run.inputs[0], **run.batch)
    del inputs["slots"]
    with pytest.raises(ValueError, match="missing input 'slots'"):
        run.programs[0].run_batch(inputs, run.state)
    with pytest.raises(ValueError, match="unknown inputs \\['slots'\\]"):
        run.programs[0](dict(run.inputs[0], **run.batch), run.state, request_ids=[1, 2, 3, 4])
