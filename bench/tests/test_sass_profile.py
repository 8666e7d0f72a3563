"""bench/sass_profile.py without a GPU: an exported ncu source page (the
layout of `ncu --page source --csv --print-source sass`) summarised, and a
file that is not one refused with an error naming what is missing."""

import csv
import re

import pytest

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed",
          "stall_barrier", "stall_long_sb", "stall_math",
          "stall_barrier (Not Issued)"]


def _page(tmp_path, rows, kernel="spin_score_dense_0"):
    path = tmp_path / "k.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", kernel, ""])
        w.writerow(HEADER)
        for address, source, samples, executed, barrier, long_sb, math in rows:
            w.writerow([address, source, f"{samples:,}", "0", f"{executed:,}",
                        barrier, long_sb, math, "0"])
    return str(path)


# A loop of three instructions run 1,000 times (a prologue once, a polling
# branch 250 times): 1,000 is the loop's trip count over the grid.
ROWS = [
    ("0x10", "MOV R1, R2", 10, 1, 0, 0, 10),
    ("0x20", "WARPGROUP.DEPBAR.LE gsb0, 0x0", 600, 1000, 600, 0, 0),
    ("0x30", "FMNMX.NAN R3, RZ, R3, !PT", 100, 1000, 0, 0, 100),
    ("0x40", "FFMA R4, R5, R3, R4", 90, 2000, 0, 0, 90),
    ("0x50", "@!P0 BRA 0x30", 200, 250, 0, 200, 0),
]


def test_summary_of_a_source_page(bench_script, tmp_path):
    ns = bench_script("sass_profile")
    kernel, rows = ns.load(_page(tmp_path, ROWS))
    assert kernel == "spin_score_dense_0" and len(rows) == 5
    text = "\n".join(ns.summary(kernel, rows, top=2))
    assert "5 SASS instructions, 1000 warp-state samples" in text
    shares = dict(re.findall(r"^  (\w+) +([\d.]+) %$", text, re.M))
    assert shares == {"barrier": "60.0", "long_sb": "20.0", "math": "20.0"}
    # One trip: DEPBAR and FMNMX once, FFMA twice (2,000 / 1,000); the
    # prologue and the polling branch are not part of it.
    assert "executed >= 1000 times): 4 a warp" in text
    assert "FFMA 2, WARPGROUP 1, FMNMX 1" in text
    assert "60.00 %  WARPGROUP.DEPBAR.LE gsb0, 0x0" in text
    assert "(barrier 60.0)" in text
    assert "FMNMX.NAN" not in text.split("the 2 instructions")[1]


def test_trip_count_given(bench_script, tmp_path):
    ns = bench_script("sass_profile")
    kernel, rows = ns.load(_page(tmp_path, ROWS))
    text = "\n".join(ns.summary(kernel, rows, per=250, top=0))
    assert "executed >= 250 times): 17 a warp" in text
    assert "BRA 1" in text


def test_opcode_drops_predicate_and_modifiers(bench_script):
    ns = bench_script("sass_profile")
    assert ns.opcode("@!P0  BRA 0x7f18dd7a4760") == "BRA"
    assert ns.opcode("QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR16]") == "QGMMA"
    assert ns.number("262,144") == 262144.0 and ns.number("") == 0.0


def test_not_a_source_page(bench_script, tmp_path):
    ns = bench_script("sass_profile")
    path = tmp_path / "details.csv"
    path.write_text('"ID","Metric Name","Metric Value"\n"0","Duration","1"\n')
    with pytest.raises(SystemExit, match="not ncu's source page as CSV"):
        ns.load(str(path))


@pytest.mark.parametrize("argv,message", [
    (["k.csv", "--per", "-1"], "--per must be positive"),
    (["k.csv", "--top", "-2"], "--top must be at least 0"),
])
def test_bad_arguments(bench_script, capsys, argv, message):
    ns = bench_script("sass_profile")
    with pytest.raises(SystemExit):
        ns.parse_args(argv)
    assert message in capsys.readouterr().err
