#!/usr/bin/env python3
#===- bench/sass_profile.py - where a kernel's warps wait, per instruction -===#
#
# Summarises the source page of an Nsight Compute report, exported as CSV
# with the SASS of the profiled kernel:
#
#   ncu --profile-from-start off --clock-control none \
#       --kernel-name regex:spin_score --launch-count 1 --set full \
#       --import-source no -o REPORT python3 bench/ncu_step.py bench-artifacts NAME
#   ncu --import REPORT.ncu-rep --page source --csv --print-source sass > K.csv
#   python3 bench/sass_profile.py K.csv [--per COUNT] [--top N]
#
# (The CSV comes back from the GPU machine small where the report would
# not; this runs anywhere, with the standard library only.)
#
# Prints the warp-state samples by stall reason over the whole kernel, the
# instructions of one trip of its hottest loop (those executed at least
# `--per` times: by default the most common execution count, which for a
# scoring kernel is its tiles x 4 warps a warpgroup) by opcode, and
# the `--top` instructions with the most samples with their leading
# reasons. docs/benchmarks-kernels.md ("Where a multiplier's time goes")
# has a reading of it.
#
#===----------------------------------------------------------------------===#

import argparse
import collections
import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Summarise ncu's source page (--page source --csv "
                    "--print-source sass): stall reasons, the hottest loop's "
                    "instructions by opcode, the instructions most waited on.")
    p.add_argument("csv", help="the exported source page")
    p.add_argument("--per", type=int, default=0,
                   help="executions of one loop trip (default: the most "
                        "common execution count)")
    p.add_argument("--top", type=int, default=15,
                   help="instructions listed by samples (default 15)")
    args = p.parse_args(argv)
    if args.per < 0:
        p.error(f"--per must be positive (0: found), got {args.per}")
    if args.top < 0:
        p.error(f"--top must be at least 0, got {args.top}")
    return args


def number(text):
    """ncu's numbers carry thousands separators; empty cells count 0."""
    text = text.replace(",", "").strip()
    return float(text) if text else 0.0


def load(path):
    """(kernel name, rows as dicts) of an exported source page."""
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    header = next((i for i, row in enumerate(lines)
                   if "Source" in row and SAMPLES in row), None)
    if header is None:
        raise SystemExit(f"error: {path} is not ncu's source page as CSV (no "
                         f"'Source' and '{SAMPLES}' columns; export it with "
                         "--page source --csv --print-source sass)")
    kernel = next((row[1] for row in lines[:header]
                   if len(row) > 1 and row[0] == "Kernel Name"), "?")
    names = lines[header]
    rows = [dict(zip(names, row)) for row in lines[header + 1:]
            if len(row) == len(names)]
    if not rows:
        raise SystemExit(f"error: {path} has a header but no instructions")
    return kernel, rows


def opcode(source):
    """The SASS opcode without predicate and modifiers ('@!P0 BRA x' -> BRA)."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def loop_count(rows):
    """The most common execution count (the larger on a tie): a loop's body
    is most of a kernel's instructions, each run once a trip."""
    counts = collections.Counter(number(r.get(EXECUTED, "")) for r in rows)
    counts.pop(0.0, None)
    if not counts:
        return 0
    return max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]


def summary(kernel, rows, per=0, top=15):
    """The report as lines of text."""
    reasons = [k for k in rows[0] if k.startswith("stall_")
               and "Not Issued" not in k]
    total = sum(number(r[SAMPLES]) for r in rows)
    out = [f"kernel {kernel}: {len(rows)} SASS instructions, "
           f"{total:.0f} warp-state samples"]
    if total <= 0:
        out.append("no samples (was the report taken with --set full?)")
        return out
    by_reason = {k: sum(number(r[k]) for r in rows) for k in reasons}
    out.append("samples by reason:")
    for k, v in sorted(by_reason.items(), key=lambda kv: -kv[1]):
        if v > 0:
            out.append(f"  {k[len('stall_'):]:<20} {100 * v / total:5.1f} %")
    per = per or loop_count(rows)
    if per > 0:
        trip = [r for r in rows if number(r.get(EXECUTED, "")) >= per]
        mix = collections.Counter()
        for r in trip:
            mix[opcode(r["Source"])] += number(r[EXECUTED]) / per
        out.append(f"one trip of the hottest loop (instructions executed "
                   f">= {per:.0f} times): {sum(mix.values()):.0f} a warp")
        out.append("  " + ", ".join(f"{op} {n:.0f}"
                                    for op, n in mix.most_common()))
    ranked = sorted(rows, key=lambda r: -number(r[SAMPLES]))[:top]
    if ranked:
        out.append(f"the {len(ranked)} instructions with the most samples:")
    for r in ranked:
        share = 100 * number(r[SAMPLES]) / total
        lead = sorted(((number(r[k]), k) for k in reasons), reverse=True)[:3]
        why = ", ".join(f"{k[len('stall_'):]} {100 * v / total:.1f}"
                        for v, k in lead if v > 0)
        out.append(f"  {share:5.2f} %  {r['Source'].strip()[:64]:<64} "
                   f"x{number(r.get(EXECUTED, '')):.0f}  ({why})")
    return out


def main(argv=None):
    args = parse_args(argv)
    kernel, rows = load(args.csv)
    print("\n".join(summary(kernel, rows, args.per, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
