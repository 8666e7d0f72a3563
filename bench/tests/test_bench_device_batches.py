"""bench/bench_device_batches.py without a GPU: its --modes argument, how
a program's bad device data is reported (the configuration and the phase
named) and the checksum that sees a stray write into staged inputs."""

import pytest


class _Program:
    def __init__(self, error=None):
        self.error = error

    def check(self):
        if self.error:
            raise RuntimeError(self.error)


def test_unknown_modes_are_refused_by_name(bench_script, capsys):
    bdb = bench_script("bench_device_batches")
    with pytest.raises(SystemExit):
        bdb.main(["--run", "unused", "--modes", "same,sideways,device"])
    err = capsys.readouterr().err
    assert "unknown mode(s) sideways" in err
    for mode in bdb.MODES:
        assert mode in err


def test_a_failed_check_names_the_configuration_and_the_phase(bench_script):
    bdb = bench_script("bench_device_batches")
    bdb.checked(_Program(), "b16-n128k-same", "the eager steps")  # passes
    with pytest.raises(bdb.CheckFailed) as e:
        bdb.checked(_Program("position 7 is before the last visible slot"),
                    "b96-n128k-same", "the timed replays")
    assert str(e.value) == ("b96-n128k-same: bad device data after the timed "
                            "replays: position 7 is before the last visible slot")


def test_the_staged_checksum_sees_an_overwrite(bench_script):
    torch = pytest.importorskip("torch")
    bdb = bench_script("bench_device_batches")
    gen = torch.Generator().manual_seed(1)
    setup = {"staged": [{"positions": torch.randint(0, 1 << 17, (96, 1), generator=gen,
                                                     dtype=torch.int32),
                         "q": torch.randn(96, 1, 4, 8, generator=gen).to(torch.bfloat16)}
                        for _ in range(3)]}
    before = bdb.byte_sum(torch, bdb.staged_tensors(setup))
    assert before == bdb.byte_sum(torch, bdb.staged_tensors(setup))
    assert bdb.byte_sum(torch, []) == 0
    # Top-K indices written over one entry's positions: what a graph
    # replaying into an output that was freed and reallocated would leave.
    setup["staged"][1]["positions"][:, 0] = torch.arange(96, dtype=torch.int32) * 1361
    assert bdb.byte_sum(torch, bdb.staged_tensors(setup)) != before
