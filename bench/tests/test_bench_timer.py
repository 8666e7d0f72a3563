"""bench/bench_gpu.py's timing without a GPU: Timer against a fake CUDA
clock (what runs inside the timed window, how many calls), and
Bench.decode_timing's rows, which grow by one slot before every step and
are restored afterwards (CPU tensors)."""

import argparse

import pytest

torch = pytest.importorskip("torch")


class _FakeCuda:
    """torch's surface that Timer uses, on a clock that a step advances."""

    int8 = "int8"

    def __init__(self, step_ms):
        self.now = 0.0
        self.step_ms = step_ms
        self.log = []
        fake = self

        class Event:
            def __init__(self, enable_timing=True):
                self.at = None

            def record(self):
                self.at = fake.now
                fake.log.append(("record", self))

            def elapsed_time(self, end):
                return end.at - self.at

        class Flush:
            def zero_(self):
                fake.log.append(("flush", None))

        class Cuda:
            @staticmethod
            def synchronize():
                pass

        Cuda.Event = Event
        self.cuda = Cuda
        self._flush = Flush()

    def empty(self, *args, **kwargs):
        return self._flush

    def step(self):
        self.log.append(("fn", None))
        self.now += self.step_ms


def _args(**overrides):
    values = dict(rep_ms=5.0, min_reps=3, max_reps=1000, warmup_ms=1.0)
    values.update(overrides)
    return argparse.Namespace(**values)


def test_prepare_runs_before_every_call_and_outside_the_timed_window(bench_script):
    bench = bench_script("bench_gpu")
    fake = _FakeCuda(step_ms=0.1)
    timer = bench.Timer(fake, _args())
    prepared = []
    times = timer.times(fake.step, prepare=lambda: (prepared.append(1),
                                                     fake.log.append(("prepare", None))))
    calls = [kind for kind, _ in fake.log if kind == "fn"]
    assert len(prepared) == len(calls)
    # Every call is directly preceded by its prepare (a flush may come first).
    kinds = [kind for kind, _ in fake.log if kind in ("fn", "prepare")]
    assert kinds == ["prepare", "fn"] * len(calls)
    # Each timed repetition: the flush and the prepare, then exactly one
    # call between its start and end events.
    timed = [kind for kind, _ in fake.log[-5 * len(times):]]
    assert timed == ["flush", "prepare", "record", "fn", "record"] * len(times)
    assert times == pytest.approx([0.1 * 1e3] * len(times))


def test_max_calls_bounds_warm_up_and_repetitions(bench_script):
    bench = bench_script("bench_gpu")
    fake = _FakeCuda(step_ms=1e-4)  # a fast step: many repetitions wanted
    timer = bench.Timer(fake, _args(rep_ms=100.0, warmup_ms=100.0))
    times = timer.times(fake.step, max_calls=50)
    calls = sum(1 for kind, _ in fake.log if kind == "fn")
    assert calls <= 50
    assert len(times) >= 1
    unbounded = _FakeCuda(step_ms=1e-4)
    bench.Timer(unbounded, _args(rep_ms=100.0, warmup_ms=100.0)).times(unbounded.step)
    assert sum(1 for kind, _ in unbounded.log if kind == "fn") > 50


def test_decoding_steps_grow_the_rows_by_one_and_restore_them(bench_script):
    bench = bench_script("bench_gpu")
    fake = _FakeCuda(step_ms=0.05)
    runner = object.__new__(bench.Bench)
    runner.timer = bench.Timer(fake, _args())
    n = 16384
    lengths = torch.full((3, 1), n, dtype=torch.int32)
    positions = lengths - 1
    seen = []

    def replay():
        seen.append((lengths.clone(), positions.clone()))
        fake.step()

    result = runner.decode_timing(replay, lengths, positions)
    assert result["median_us"] == pytest.approx(50.0)
    assert 4 <= len(seen) <= bench.DECODE_HEADROOM
    first_lengths, _ = seen[0]
    assert torch.equal(first_lengths, torch.full((3, 1), n - bench.DECODE_HEADROOM + 1,
                                                 dtype=torch.int32))
    for step, (seen_lengths, seen_positions) in enumerate(seen):
        assert torch.equal(seen_lengths, first_lengths + step)
        assert torch.equal(seen_positions, seen_lengths - 1)
        assert int(seen_lengths.max()) <= n
    assert torch.equal(lengths, torch.full((3, 1), n, dtype=torch.int32))
    assert torch.equal(positions, lengths - 1)


def test_decoding_steps_of_a_dense_step_move_the_lengths_only(bench_script):
    bench = bench_script("bench_gpu")
    fake = _FakeCuda(step_ms=0.05)
    runner = object.__new__(bench.Bench)
    runner.timer = bench.Timer(fake, _args())
    lengths = torch.tensor([[4093, 4094, 4095, 4096]] * 2, dtype=torch.int32)
    before = lengths.clone()
    seen = []

    def replay():
        seen.append(lengths.clone())
        fake.step()

    runner.decode_timing(replay, lengths, None)
    assert torch.equal(seen[0], before - bench.DECODE_HEADROOM + 1)
    assert torch.equal(seen[-1], before - bench.DECODE_HEADROOM + len(seen))
    assert torch.equal(lengths, before)


def test_scores_checks_of_the_scoring_alone(bench_script):
    """scores_sanity wants finite scores below each row's length and -inf
    past it; scores_error is the largest difference over the row's largest
    reference score."""
    bg = bench_script("bench_gpu")
    lengths = torch.tensor([[5], [8]], dtype=torch.int32)
    ref = torch.randn(2, 1, 8, dtype=torch.float64).float()
    ref[0, 0, 5:] = float("-inf")
    assert bg.scores_sanity(torch, ref, lengths) == []
    bad = ref.clone()
    bad[0, 0, 6] = 0.0
    assert bg.scores_sanity(torch, bad, lengths) == [
        "scores past the row's length that are not -inf"]
    bad = ref.clone()
    bad[1, 0, 2] = float("nan")
    assert bg.scores_sanity(torch, bad, lengths) == ["non-finite scores below the row's length"]
    assert bg.scores_error(torch, ref, ref) == 0.0
    off = ref.clone()
    off[1, 0, 3] += 0.5
    expected = 0.5 / ref[1, 0].abs().max().item()
    assert abs(bg.scores_error(torch, off, ref) - expected) < 1e-6
