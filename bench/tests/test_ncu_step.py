"""The profiling entry points without a GPU: bench/ncu_step.py's arguments
and the configuration it looks up (a clear error naming the ones there are),
before torch or spin is imported; bench_device_batches.py --profile-mode's
argument checks."""

import json

import pytest


def _artifacts(tmp_path, *names):
    d = tmp_path / "artifacts"
    configs = []
    for name in names:
        (d / name).mkdir(parents=True)
        (d / name / "manifest.json").write_text("{}")
        configs.append(dict(name=name, dir=name, format="fp8", batch=16,
                            slots=262144, k=2048, rows=2, mode="scores"))
    (d / "index.json").write_text(json.dumps({"format": "spin-bench-artifacts",
                                              "configs": configs}))
    return str(d)


def test_steps_must_be_positive(bench_script, capsys):
    ns = bench_script("ncu_step")
    with pytest.raises(SystemExit):
        ns.parse_args(["a", "b", "--steps", "0"])
    assert "--steps must be at least 1, got 0" in capsys.readouterr().err


def test_configuration_is_looked_up_in_the_index(bench_script, tmp_path):
    ns = bench_script("ncu_step")
    d = _artifacts(tmp_path, "fp8-b16-n256k-r2-scores-qfp8", "fp8-b16-n256k-r1-scores-qfp8")
    assert ns.configuration(d, "fp8-b16-n256k-r2-scores-qfp8")["rows"] == 2
    with pytest.raises(SystemExit, match=r"no configuration 'other' in .*index.json "
                                         r"\(have: fp8-b16-n256k-r1-scores-qfp8, "
                                         r"fp8-b16-n256k-r2-scores-qfp8\)"):
        ns.configuration(d, "other")


def test_a_missing_index_is_named(bench_script, tmp_path):
    ns = bench_script("ncu_step")
    with pytest.raises(SystemExit):
        ns.main([str(tmp_path / "none"), "x"])


@pytest.mark.parametrize("argv, message", [
    (["--profile-mode", "device"], "--profile-mode needs --run DIR"),
    (["--run", "x", "--profile-mode", "device", "--timeline"],
     "--profile-mode times nothing: leave out --timeline"),
    (["--run", "x", "--profile-mode", "devices"], "invalid choice: 'devices'"),
])
def test_device_batches_profile_mode_arguments(bench_script, capsys, argv, message):
    """bench_device_batches.py --profile-mode (its graphs' kernels for Nsight
    Compute): refused without --run, with --timeline, or for a mode it does
    not have, before anything is loaded."""
    db = bench_script("bench_device_batches")
    with pytest.raises(SystemExit):
        db.main(argv)
    assert message in capsys.readouterr().err


def test_deepgemm_needs_a_scoring_alone_configuration(bench_script, tmp_path):
    """--deepgemm profiles DeepGEMM's logits at a scoring-alone
    configuration's shape; another configuration is refused by name (with
    torch absent from the check: the refusal comes before any GPU work), and
    a tree without deep_gemm is named."""
    torch = pytest.importorskip("torch")
    ns = bench_script("ncu_step")
    d = tmp_path / "artifacts"
    (d / "dense").mkdir(parents=True)
    (d / "scores").mkdir(parents=True)
    configs = [dict(name="dense", dir="dense", format="fp8", batch=2, slots=4096, k=512,
                    rows=2, mode="dense"),
               dict(name="scores", dir="scores", format="fp8", batch=2, slots=4096, k=0,
                    rows=2, mode="scores")]
    (d / "index.json").write_text(json.dumps({"format": "spin-bench-artifacts",
                                              "configs": configs}))
    args = ns.parse_args([str(d), "dense", "--deepgemm", str(tmp_path)])
    with pytest.raises(SystemExit, match="needs an fp8-key scoring-alone configuration, "
                                         "not 'dense'"):
        ns.run_deepgemm(torch, args, configs[0])
    args = ns.parse_args([str(d), "scores", "--deepgemm", str(tmp_path)])
    with pytest.raises(SystemExit, match="DeepGEMM not available: .* has no deep_gemm/"):
        ns.run_deepgemm(torch, args, configs[1])


def test_sustained_arguments_and_configurations(bench_script, tmp_path, capsys):
    """bench/sustained_gpu.py: its argument checks, the configurations it
    times (fp8-key scores and dense steps, named when missing or of another
    mode), and the summary of a run from its timed replays and nvidia-smi
    readings (burst: the first 40; sustained: the last --keep seconds)."""
    sg = bench_script("sustained_gpu")
    for argv, message in ((["--rounds", "0"], "--rounds must be at least 1"),
                          (["--keep", "3"], "--keep must be in (0, --seconds)")):
        with pytest.raises(SystemExit):
            sg.parse_args(["--artifacts", "a", "--only", "b"] + argv)
        assert message in capsys.readouterr().err
    d = _artifacts(tmp_path, "fp8-b16-n256k-r2-scores-qfp8")
    args = sg.parse_args(["--artifacts", d, "--only", "fp8-b16-n256k-r2-scores-qfp8"])
    assert list(sg.configurations(args)) == ["fp8-b16-n256k-r2-scores-qfp8"]
    args = sg.parse_args(["--artifacts", d, "--only", "other"])
    with pytest.raises(SystemExit, match="no configuration 'other'"):
        sg.configurations(args)
    spans = [(0.01 * i, 100.0 if i < 40 else 200.0 if i < 200 else 300.0)
             for i in range(300)]
    readings = ["1980, 500"] * 10 + ["1500, 700"] * 10
    burst, sustained, clock, power = sg.summarize(spans, readings, 3.0, 1.0)
    assert (burst, sustained, clock, power) == (100.0, 300.0, 1500.0, 700.0)
    assert sg.sustained_text((burst, sustained, clock, power)) == \
        "300.0 us at 1500 MHz, 700 W (210 mJ a call)"
    # Readings nvidia-smi could not give ([N/A]) leave the clock and power out.
    r = sg.summarize(spans, ["[N/A], [N/A]"] * 20, 3.0, 1.0)
    assert r == (100.0, 300.0, None, None)
    assert sg.sustained_text(r) == "300.0 us (clock and power n/a)"
