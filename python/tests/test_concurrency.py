"""Steps of different requests from several threads on one shared state,
with releases, re-admissions, resets and MTP commits racing them, checked
against the same per-thread scripts run one after another on a fresh state
(issue 28, item 5). The compiled CPU step releases the GIL, so the threads'
steps, and the pool's bookkeeping around them, really overlap."""

import threading

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")

H, D, S, BS, K, R = 8, 64, 16, 16, 24, 2
PAGES, WIDTH = 96, 64
THREADS, STEPS = 4, 14


def make_indexer():
    return spin.Indexer(heads=H, head_dim=D, block_size=BS, topk=K, sparsity=0.5,
                        rows=R, key_format="f32", explore=0.25)


def thread_script(seed):
    """One thread's steps: its inputs, accepted counts and lifecycle events.

    Two requests at a time; at step 5 the second finishes and a new request
    is admitted in its place; at step 9 the first starts a new turn (reset);
    from step 11 the thread re-admits the id it released at step 5.
    """
    rng = np.random.default_rng(seed)
    base = 1000 * (seed + 1)
    steps = []
    ids = [base, base + 1]
    # Rows long enough that the compiled step dominates a call, so that
    # the threads' steps overlap.
    n0 = rng.integers(WIDTH * S // 2, WIDTH * S - 3 * STEPS - R, size=2)
    for step in range(STEPS):
        events = []
        if step == 5:
            events = [("release", base + 1), ("add", base + 2)]
            ids = [base, base + 2]
        if step == 9:
            events = [("reset", base)]
        if step == 11:
            events = [("release", base + 2), ("add", base + 1)]
            ids = [base, base + 1]
        n = (n0[:, None] + 3 * step + np.arange(R)[None, :]).astype(np.int32)
        steps.append(dict(
            ids=np.asarray(ids, dtype=np.int64), events=events, lengths=n,
            q=rng.integers(-4, 5, size=(2, R, H, D)).astype(np.float32),
            w=(rng.integers(-4, 5, size=(2, R, H)) / 4).astype(np.float32),
            table=np.stack([rng.permutation(PAGES)[:WIDTH] for _ in range(2)]).astype(np.int32),
            accepted=rng.integers(0, R, size=2)))
    return steps


def run_script(indexer, keys, state, script, out, start=None):
    if start is not None:
        start.wait()
    pending = set()  # ids with a buffered MTP step to commit
    for i in script[0]["ids"]:
        state.add(int(i))
    for step in script:
        for kind, rid in step["events"]:
            if kind == "release":
                pending.discard(rid)
                state.release(rid)
            elif kind == "add":
                state.add(rid)
            else:
                state.reset(rid)
                pending.discard(rid)
        for rid, a in zip(step["ids"], step["accepted"]):
            if int(rid) in pending:
                state.commit(int(rid), int(a))
        n = step["lengths"]
        out.append(np.asarray(indexer(step["q"], step["w"], keys, step["table"], n, n - 1,
                                      state, request_ids=step["ids"])))
        pending.update(int(i) for i in step["ids"])
    for i in script[-1]["ids"]:
        out.append(np.concatenate(state.ema(int(i))))
        state.release(int(i))


def test_threads_stepping_releasing_and_readmitting_match_sequential_runs():
    indexer = make_indexer()
    keys = np.random.default_rng(99).integers(-4, 5, size=(PAGES, S, D)).astype(np.float32)
    scripts = [thread_script(t) for t in range(THREADS)]

    def fresh_state():
        return indexer.new_state(capacity_slots=WIDTH * S, max_requests=3 * THREADS)

    sequential = []
    state = fresh_state()
    for script in scripts:
        sequential.append([])
        run_script(indexer, keys, state, script, sequential[-1])
    assert len(state) == 0

    for round_ in range(3):
        state = fresh_state()
        results = [[] for _ in scripts]
        errors = []
        start = threading.Barrier(THREADS)

        def work(t):
            try:
                run_script(indexer, keys, state, scripts[t], results[t], start)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"thread {t}: {e!r}")

        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        assert len(state) == 0
        for t in range(THREADS):
            assert len(results[t]) == len(sequential[t])
            for i, (got, want) in enumerate(zip(results[t], sequential[t])):
                np.testing.assert_array_equal(
                    got, want, err_msg=f"round {round_}, thread {t}, output {i}")


def test_a_request_stepped_from_two_threads_at_once_is_refused_not_corrupted():
    """Two threads stepping the same request: each step either runs or is
    refused with a clear error; the request's state equals that of as many
    sequential steps as ran."""
    # Long enough rows that the compiled step, not the Python around it,
    # takes most of a call: the two threads' steps then overlap.
    pages, width, heads, dim = 160, 128, 8, 64
    rng = np.random.default_rng(5)
    keys = rng.integers(-4, 5, size=(pages, S, dim)).astype(np.float32)
    single = spin.Indexer(heads=heads, head_dim=dim, block_size=BS, topk=K, sparsity=0.5,
                          rows=1, key_format="f32")
    rid = 4242
    one = dict(ids=np.asarray([rid], dtype=np.int64),
               q=rng.integers(-4, 5, size=(1, 1, heads, dim)).astype(np.float32),
               w=(rng.integers(-4, 5, size=(1, 1, heads)) / 4).astype(np.float32),
               table=rng.permutation(pages)[:width][None, :].astype(np.int32),
               lengths=np.asarray([[width * S - 5]], dtype=np.int32))
    state = single.new_state(capacity_slots=width * S, max_requests=2)
    state.add(rid)
    ran, refused, other = [], [], []
    start = threading.Barrier(2)

    def work():
        start.wait()
        for _ in range(60):
            n = one["lengths"]
            try:
                single(one["q"], one["w"], keys, one["table"], n, n - 1, state,
                       request_ids=one["ids"])
                ran.append(1)
            except ValueError as e:
                (refused if "already inside another step" in str(e) else other).append(str(e))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not other, other[:3]
    assert len(ran) + len(refused) == 120
    assert ran and state.iteration(rid) == len(ran)
    # The same number of steps, sequentially, gives the same state.
    again = single.new_state(capacity_slots=width * S, max_requests=2)
    again.add(rid)
    for _ in range(len(ran)):
        n = one["lengths"]
        single(one["q"], one["w"], keys, one["table"], n, n - 1, again, request_ids=one["ids"])
    for got, want in zip(state.ema(rid), again.ema(rid)):
        np.testing.assert_array_equal(got, want)
