"""The GPU path's MTP kernels, run on the host against the reference.

convert-spin-to-gpu lowers an MTP layer's buffering (spin_observe_N), the
replay of the accepted rows (spin_commit_N, spin_commit_N_finish; the finish
alone under mtp-update=row0, which replays nothing) and the
reset that drops buffered rows (spin_reset_N: a kernel of its own where the
selection has no predict kernel, as with the mean pooling used here) to
kernels whose threads are independent: no barriers, warp shuffles or shared
memory, but for the vote of the scan for repeated slots, which the host
emulates per thread (exact for these batches, whose slots are distinct). Running every
thread of every CTA in turn is then one of their legal executions, so these
tests execute the generated code without a GPU: the kernel module of a
compiled MTP graph is lowered to LLVM IR (the NVVM lowering of the GPU
pipeline, mlir-translate), the MTP kernels are extracted and made host code
(global pointers become plain pointers, the special registers thread and
CTA ids become functions of a small C driver), and llc plus the C compiler
build them. The f32 arithmetic is the kernels' own (separate multiply and
add, no contraction: mul.rn/add.rn in the PTX).

Random steps (ragged rows, random union masks, non-finite scores, a skipped
request, a bad row, several CTAs per request) check, bit for bit against
test/reference/spin_reference.py: row 0 folded into V and D by observe (it
unchanged) and what it buffers (obs_rows, obs_pos, obs_len, obs_mask, obs_z
of the scored slots of rows 1..; nothing for a skipped request or one with
a bad row, and no other entry written), V, D, it and obs_rows after the
commit of rows 1..a (prefix, a = 0..d) or none (row0), and the
reset (V, D, it, obs_rows and the prediction cache's pred_at record of the
flagged request only); and the observe kernel of a paged-state program, V,
D and obs_z through each request's state table. Skipped when spin-opt, the
LLVM tools or a C compiler are missing.
"""

import ctypes
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(_ROOT, "test", "reference"))
import spin_reference as sr  # noqa: E402
import trace_io  # noqa: E402

LLVM_BIN = os.environ.get("SPIN_LLVM_BIN", "/usr/lib/llvm-22/bin")
ALPHA = 0.5


def _tools():
    exe = trace_io.find_spin_exec()
    spin_opt = os.path.join(os.path.dirname(exe), "spin-opt") if exe else None
    tools = {"spin-opt": spin_opt, "cc": shutil.which("cc") or shutil.which("gcc")}
    for name in ("mlir-opt", "mlir-translate", "llvm-as", "llvm-extract", "llc"):
        tools[name] = os.path.join(LLVM_BIN, name)
    missing = [n for n, p in tools.items() if not p or not os.access(p, os.X_OK)]
    return tools, missing


def _graph(B, R, pages, page, heads=16, dh=64):
    ns = pages * page
    q, w = f"tensor<{B}x{R}x{heads}x{dh}xbf16>", f"tensor<{B}x{R}x{heads}xf32>"
    keys, table = f"tensor<?x{page}x{dh}xbf16>", f"tensor<{B}x{pages}xi32>"
    n, z, t = f"tensor<{B}x{R}xi32>", f"tensor<{B}x{R}x{ns}xf32>", f"tensor<{B}x{R}x8xi32>"
    return f"""func.func @verify(%q: {q}, %w: {w}, %keys: {keys}, %table: {table},
                   %lengths: {n}) -> {t} {{
  %z = spin.dense_indexer q(%q : {q}) w(%w : {w}) keys(%keys : {keys})
      block_table(%table : {table}) lengths(%lengths : {n}) -> {z}
  %t = spin.topk %z lengths(%lengths : {n}) {{k = 8 : i64}} : {z} -> {t}
  return %t : {t}
}}
"""


_DRIVER = """
#include <stdint.h>
static int tid, ctaid_x, ctaid_y;
int emu_tid_x(void) { return tid; }
int emu_ctaid_x(void) { return ctaid_x; }
int emu_ctaid_y(void) { return ctaid_y; }
/* One thread at a time: its own vote. Exact for batches without repeated
   slots (every lane's part of the scan finds none). */
int emu_ballot(int mask, _Bool p) { (void)mask; return p ? 1 << (tid & 31) : 0; }
typedef void *P;
void RESET(P, P, P, P, P, P, P, int);
void COMMIT(P, P, P, P, P, P, P, P, P, P, int);
void FINISH(P, P, P, P, int);
void OBSERVE(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
#define GRID(gx, gy, threads, call)                            \\
  for (ctaid_y = 0; ctaid_y < (gy); ++ctaid_y)                 \\
    for (ctaid_x = 0; ctaid_x < (gx); ++ctaid_x)               \\
      for (tid = 0; tid < (threads); ++tid)                    \\
        call;
void run_reset(int gx, int gy, int t, P *a, int n) {
  GRID(gx, gy, t, RESET(a[0], a[1], a[2], a[3], a[4], a[5], a[6], n))
}
void run_commit(int gx, int gy, int t, P *a, int n) {
  GRID(gx, gy, t, COMMIT(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                         a[9], n))
}
void run_finish(int gx, int gy, int t, P *a, int n) {
  GRID(gx, gy, t, FINISH(a[0], a[1], a[2], a[3], n))
}
void run_observe(int gx, int gy, int t, P *a, int n) {
  (void)n;
  GRID(gx, gy, t, OBSERVE(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                          a[9], a[10], a[11], a[12], a[13], a[14]))
}
"""


class HostKernels:
    """The MTP kernels of one compiled graph, built for the host, with the
    launch shapes of its plan."""

    def __init__(self, tools, directory, B, R, pages, page, bs, options,
                 gpu_options="", kinds=("reset", "commit", "finish", "observe"),
                 driver=None):
        self.B, self.R, self.C, self.bs = B, R, pages * page, bs
        self.MB, self.NB = self.C // bs, self.C // bs

        def run(*cmd, **kw):
            done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                                  cwd=directory, **kw)
            assert done.returncode == 0, f"{cmd[0]} failed:\n{done.stderr[-3000:]}"
            return done.stdout

        graph = os.path.join(directory, "graph.mlir")
        with open(graph, "w") as f:
            f.write(_graph(B, R, pages, page))
        plan = run(tools["spin-opt"], graph,
                   f"--spin-sparsify-pipeline=sparsity=0.5 block-size={bs} "
                   f"reset-input=true {options}",
                   "--convert-spin-to-gpu" + (f"={gpu_options}" if gpu_options else ""))
        # Launch shapes of the plan: kernel -> (grid x, grid y, threads).
        self.shapes = {}
        for m in re.finditer(r"@spin_kernels::@(spin_\w+) blocks in \(%c(\d+)\w*, "
                             r"%c(\d+)\w*, %c\d+\w*\) threads in \(%c(\d+)", plan):
            self.shapes[m.group(1)] = tuple(int(x) for x in m.groups()[1:])
        patterns = {"reset": r"spin_reset_\d+", "commit": r"spin_commit_\d+",
                    "finish": r"spin_commit_\d+_finish", "observe": r"spin_observe_\d+"}
        names = {kind: next(k for k in self.shapes if re.fullmatch(patterns[kind], k))
                 for kind in kinds}
        self.names = names
        with open(os.path.join(directory, "plan.mlir"), "w") as f:
            f.write(plan)
        lowered = run(tools["mlir-opt"], "plan.mlir",
                      "--pass-pipeline=builtin.module(gpu.module(convert-scf-to-cf,"
                      "convert-gpu-to-nvvm,convert-nvvm-to-llvm,canonicalize,"
                      "reconcile-unrealized-casts))")
        # The kernel module's body as a module of its own.
        start = lowered.index("gpu.module @spin_kernels")
        body = lowered[lowered.index("{", start) + 1:]
        body = body[:body.rstrip().rstrip("}").rstrip().rfind("}")]
        with open(os.path.join(directory, "kernels.mlir"), "w") as f:
            f.write("module {\n" + body + "\n}\n")
        run(tools["mlir-translate"], "--mlir-to-llvmir", "kernels.mlir", "-o", "kernels.ll")
        run(tools["llvm-as"], "kernels.ll", "-o", "kernels.bc")
        run(tools["llvm-extract"], *[f"--func={n}" for n in names.values()],
            "kernels.bc", "-S", "-o", "mtp.ll")
        text = open(os.path.join(directory, "mtp.ll")).read()
        text = text.replace(" addrspace(1)", "").replace("ptx_kernel ", "")
        text = re.sub(r"@llvm\.nvvm\.read\.ptx\.sreg\.(tid|ctaid)\.([xy])", r"@emu_\1_\2", text)
        text = text.replace("@llvm.nvvm.vote.ballot.sync", "@emu_ballot")
        text = re.sub(r'"nvvm\.maxntid"="[0-9,]*"', "nounwind", text)
        # Programmatic-launch control (griddepcontrol) orders whole grids:
        # nothing to do when one CTA runs after another.
        text = "\n".join(line for line in text.splitlines()
                          if "griddepcontrol" not in line) + "\n"
        assert "nvvm" not in text, "an NVVM intrinsic is left in the MTP kernels"
        with open(os.path.join(directory, "host.ll"), "w") as f:
            f.write(text)
        run(tools["llc"], "-O2", "-relocation-model=pic", "-filetype=obj", "host.ll",
            "-o", "host.o")
        driver = driver or _DRIVER
        for kind, name in names.items():
            driver = driver.replace(kind.upper(), name)
        # A kind the plan does not launch (no replay kernel under
        # mtp-update=row0) keeps no declaration or runner in the driver.
        for kind in set(patterns) - set(names):
            driver = re.sub(rf"void {kind.upper()}\(.*?\);\n", "", driver)
            driver = re.sub(rf"void run_{kind}\(.*?\n}}\n", "", driver, flags=re.S)
        with open(os.path.join(directory, "driver.c"), "w") as f:
            f.write(driver)
        run(tools["cc"], "-O1", "-shared", "-fPIC", "driver.c", "host.o", "-o", "libmtp.so")
        self.lib = ctypes.CDLL(os.path.join(directory, "libmtp.so"))

    def launch(self, kind, arrays, slot_count=0):
        """Runs every thread of the kernel `kind` in turn; `slot_count` is the
        pool's slot count, the kernels' last (i32) parameter but the
        observe kernel's."""
        gx, gy, threads = self.shapes[self.names[kind]]
        ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        getattr(self.lib, "run_" + kind)(gx, gy, threads, ptrs, int(slot_count))


def _step_rows(k, rng):
    """A verification step's rows, skip flags, union mask, block list and
    sparse scores (and each row's scores by slot, for the reference)."""
    B, R, C, bs, MB = k.B, k.R, k.C, k.bs, k.MB
    # Rows N_r = n + r at p_r = N_r - 1 + gap, sometimes near the capacity.
    n0 = rng.integers(1, C - R - 10, B)
    if rng.random() < 0.25:
        n0[0] = C - R - int(rng.integers(0, 3))
    gap = np.where(rng.random(B) < 0.5, 0, rng.integers(1, 3, B))
    gap = np.minimum(gap, C - (n0 + R - 1))
    lengths = (n0[:, None] + np.arange(R)).astype(np.int32)
    positions = (lengths - 1 + gap[:, None]).astype(np.int32)
    skip = np.zeros(B, np.int32)
    trouble = rng.integers(0, 4)
    if trouble == 1:
        skip[B - 1] = 1                                   # a bad page
    elif trouble == 2:
        lengths[0, R - 1] = positions[0, R - 1] + 2       # a bad row
    # The union mask (forced blocks included), its block list, and the
    # sparse scores in list order (NaN past a row's length, junk past the
    # list), with a few infinities.
    mask = np.zeros((B, MB), np.int8)
    blocks = np.full((B, MB), -1, np.int32)
    counts = np.zeros(B, np.int32)
    scores = rng.standard_normal((B * R, MB * bs)).astype(np.float32)
    z_by_slot = np.full((B, R, C), -np.inf, np.float32)
    for b in range(B):
        nb = -(-min(int(lengths[b].max()), C) // bs)   # a bad row may reach past C
        extra = rng.choice(nb, size=int(rng.integers(0, nb + 1)), replace=False)
        chosen = sorted({0, nb - 1} | set(extra.tolist()))
        mask[b, chosen] = 1
        blocks[b, :len(chosen)] = chosen
        counts[b] = len(chosen)
        slot_of = (np.repeat(np.array(chosen) * bs, bs)
                   + np.tile(np.arange(bs), len(chosen)))
        for r in range(R):
            z = rng.standard_normal(slot_of.size).astype(np.float32)
            z[rng.random(slot_of.size) < 0.02] = np.inf
            # Past the row's length: NaN, or finite junk that only the
            # kernels' length tests keep out of the state.
            past = slot_of >= lengths[b, r]
            z[past] = np.nan if rng.random() < 0.5 else 1e3 * rng.standard_normal(past.sum())
            scores[b * R + r, :slot_of.size] = z
            seen = slot_of < lengths[b, r]
            z_by_slot[b, r, slot_of[seen]] = z[seen]
    return (lengths, positions, skip, mask, blocks, counts, scores, z_by_slot)


def check_step(k, rng, update, where):
    """One buffered step, its commit and a reset, against the reference."""
    B, R, C, bs, MB, NB = k.B, k.R, k.C, k.bs, k.MB, k.NB
    slots_total = B + 2
    slots = rng.permutation(slots_total)[:B].astype(np.int32)
    v = rng.standard_normal((slots_total, C)).astype(np.float32)
    d = rng.standard_normal((slots_total, C)).astype(np.float32)
    it = rng.integers(1, 9, slots_total).astype(np.int64)
    obs_rows = np.zeros(slots_total, np.int32)
    obs_pos = np.full((slots_total, R), -7, np.int32)
    obs_len = np.full((slots_total, R), -7, np.int32)
    obs_mask = np.full((slots_total, NB), 9, np.int8)
    obs_z = np.full((slots_total, R - 1, C), 1234.5, np.float32)   # draft rows 1..
    states = []
    for b in range(B):
        st = sr.LayerState(C, bs)
        st.V, st.D, st.it = v[slots[b]].copy(), d[slots[b]].copy(), int(it[slots[b]])
        states.append(st)
    (lengths, positions, skip, mask, blocks, counts, scores,
     z_by_slot) = _step_rows(k, rng)
    before = [x.copy() for x in (obs_pos, obs_len, obs_mask, obs_z, v, d)]
    k.launch("observe", [scores, positions, lengths, slots, blocks, counts, mask, skip,
                         obs_rows, obs_pos, obs_len, obs_mask, obs_z, v, d])
    for b in range(B):
        s = slots[b]
        label = f"{where}, batch index {b}"
        if skip[b] or np.any(lengths[b] > positions[b] + 1):
            assert obs_rows[s] == 0, f"{label}: a skipped request buffered rows"
            for now, old in zip((obs_pos, obs_len, obs_mask, obs_z, v, d), before):
                assert np.array_equal(now[s], old[s]), f"{label}: a skipped request wrote"
            continue
        # Row 0 is folded into V and D at once (docs/SPIN_SPEC.md §7.2).
        sr.observe(states[b], [z_by_slot[b, r] for r in range(R)],
                   [(int(positions[b, r]), int(lengths[b, r])) for r in range(R)],
                   mask[b].astype(bool), bs, alpha=ALPHA)
        for name, got, want in (("V", v[s], states[b].V), ("D", d[s], states[b].D)):
            bad = np.nonzero(got != want)[0]
            assert bad.size == 0, f"{label}: {name} after row 0's fold differs at {bad[:8]}"
        assert it[s] == states[b].it, f"{label}: the observe changed it"
        assert obs_rows[s] == R, label
        assert np.array_equal(obs_pos[s], positions[b]), label
        assert np.array_equal(obs_len[s], lengths[b]), label
        assert np.array_equal(obs_mask[s], mask[b]), label
        # Row 0's scores are not buffered (no commit reads them): row r is
        # draft row r - 1.
        for r in range(1, R):
            scored = (np.arange(C) < lengths[b, r]) & (np.repeat(mask[b], bs)[:C] != 0)
            want = np.where(scored, z_by_slot[b, r], before[3][s, r - 1])
            got = obs_z[s, r - 1]
            same = (got == want) | (np.isnan(got) & np.isnan(want))
            assert same.all(), f"{label} row {r}: obs_z differs at {np.nonzero(~same)[0][:8]}"
    untouched = np.setdiff1d(np.arange(slots_total), slots)
    for now, old in zip((obs_z, v, d), (before[3], before[4], before[5])):
        assert np.array_equal(now[untouched], old[untouched])

    accepted = rng.integers(0, R, B).astype(np.int32)
    errors = np.zeros(4, np.int32)
    if "commit" in k.names:
        k.launch("commit", [accepted, slots, v, d, obs_rows, obs_pos, obs_len, obs_mask,
                            obs_z, errors], slots_total)
    k.launch("finish", [slots, it, obs_rows, accepted], slots_total)
    assert not errors.any(), f"{where}: the commit reported {errors}"
    for b in range(B):
        st, s = states[b], slots[b]
        sr.commit(st, int(accepted[b]), ALPHA, update)
        label = f"{where}, batch index {b}, accepted {accepted[b]}"
        for name, got, want in (("V", v[s], st.V), ("D", d[s], st.D)):
            bad = np.nonzero(got != want)[0]
            assert bad.size == 0, f"{label}: {name} differs at {bad[:8]}"
        assert it[s] == st.it and obs_rows[s] == 0, label

    flags = np.zeros(B, np.int8)
    flags[0] = 1
    obs_rows[slots] = R
    kept = v[slots[1:]].copy()
    # The prediction cache's record (p, N, it low, it high per slot): the
    # reset clears the reset request's record and no other.
    pred_at = rng.integers(1, 1 << 20, (slots_total, 4)).astype(np.int32)
    pred_kept = pred_at.copy()
    k.launch("reset", [flags, slots, v, d, it, pred_at, obs_rows], slots_total)
    assert not v[slots[0]].any() and not d[slots[0]].any() and it[slots[0]] == 0
    assert obs_rows[slots[0]] == 0 and np.all(obs_rows[slots[1:]] == R)
    assert not pred_at[slots[0]].any(), f"{where}: the reset left pred_at {pred_at[slots[0]]}"
    others = np.setdiff1d(np.arange(slots_total), slots[:1])
    assert np.array_equal(pred_at[others], pred_kept[others]), f"{where}: pred_at of another slot changed"
    assert np.array_equal(v[slots[1:]], kept)


@pytest.mark.parametrize("B,R,pages,page,bs,options,steps", [
    # Mean pooling: no predict kernel, so the reset is a kernel of its own
    # (with max pooling the predict kernel applies it; the GPU tests run
    # that one).
    (2, 3, 8, 16, 16, "pooling=mean", 60),                       # union, prefix
    (3, 4, 64, 256, 64, "pooling=mean", 4),                      # 4 CTAs per request
    (2, 2, 16, 32, 32,
     "pooling=mean mtp-mask=row0 mtp-update=row0 schedule-async=false", 40),
    # The commit replay's groups of 2 and 1 entries (commitGroup): blocks of
    # 2 slots in a capacity of 42, blocks of 1 in an odd capacity (27).
    (2, 2, 7, 6, 2, "pooling=mean", 30),
    (2, 3, 9, 3, 1, "pooling=mean", 30),
    # Seven rows: the replay's per-row bit masks of a group of four entries
    # (blocks of 64 slots), rows' diagonals crossing block boundaries.
    (2, 7, 16, 64, 64, "pooling=mean", 12),
])
def test_mtp_kernels_match_the_reference(tmp_path, seed, B, R, pages, page, bs, options,
                                         steps):
    tools, missing = _tools()
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (spin-opt from SPIN_BUILD_DIR, the LLVM "
                    f"tools from {LLVM_BIN}, a C compiler)")
    update = "row0" if "mtp-update=row0" in options else "prefix"
    # Under mtp-update=row0 the observe kernel folds all there is: the plan
    # launches the finish alone, no replay kernel.
    kinds = ("reset", "finish", "observe") if update == "row0" else \
        ("reset", "commit", "finish", "observe")
    k = HostKernels(tools, str(tmp_path), B, R, pages, page, bs, options, kinds=kinds)
    if update == "row0":
        assert not any(re.fullmatch(r"spin_commit_\d+", n) for n in k.shapes), \
            "mtp-update=row0 launches a commit replay"
    if pages * page >= 8192:
        assert k.shapes[k.names["commit"]][0] > 1 and k.shapes[k.names["observe"]][0] > 1
    rng = np.random.default_rng(seed)
    for step in range(steps):
        check_step(k, rng, update, f"SPIN_TEST_SEED={seed} step {step}")


_PAGED_OBSERVE_DRIVER = """
static int tid, ctaid_x, ctaid_y;
int emu_tid_x(void) { return tid; }
int emu_ctaid_x(void) { return ctaid_x; }
int emu_ctaid_y(void) { return ctaid_y; }
typedef void *P;
void OBSERVE(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, int);
void run_observe(int gx, int gy, int t, P *a, int pages) {
  for (ctaid_y = 0; ctaid_y < gy; ++ctaid_y)
    for (ctaid_x = 0; ctaid_x < gx; ++ctaid_x)
      for (tid = 0; tid < t; ++tid)
        OBSERVE(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                a[10], a[11], a[12], a[13], a[14], a[15], pages);
}
"""


@pytest.mark.parametrize("B,R,pages,page,bs", [(3, 2, 8, 16, 16), (2, 4, 6, 32, 16)])
def test_paged_observe_folds_row_0_through_the_state_table(tmp_path, seed, B, R, pages,
                                                           page, bs):
    """The observe kernel of a paged-state program (docs/GPU-ABI.md, "Paged
    state"): row 0 folded into V and D and rows 1.. buffered in obs_z, all
    through each request's state table, bit for bit against the reference
    on the request's state gathered through its pages; pages no request
    owns are not written. (The commit's paged replay checks its pages with
    a CTA-wide reduction in shared memory, which a host run cannot
    emulate; the GPU tests run it.)"""
    tools, missing = _tools()
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    k = HostKernels(tools, str(tmp_path), B, R, pages, page, bs, "pooling=mean",
                    gpu_options="paged-state=1", kinds=("observe",),
                    driver=_PAGED_OBSERVE_DRIVER)
    rng = np.random.default_rng(seed)
    C, S = k.C, page
    for step in range(8):
        where = f"SPIN_TEST_SEED={seed} step {step}"
        pool = B * pages + 3
        table = rng.permutation(pool)[:B * pages].astype(np.int32).reshape(B, pages)
        slots = rng.permutation(B + 2)[:B].astype(np.int32)
        v = rng.standard_normal((pool, S)).astype(np.float32)
        d = rng.standard_normal((pool, S)).astype(np.float32)
        obs_z = np.full((pool, R - 1, S), 1234.5, np.float32)
        obs_rows = np.zeros(B + 2, np.int32)
        obs_pos = np.full((B + 2, R), -7, np.int32)
        obs_len = np.full((B + 2, R), -7, np.int32)
        obs_mask = np.full((B + 2, k.NB), 9, np.int8)

        def gather(field, b, row=None):
            pages_of = table[b]
            if row is None:
                return field[pages_of].reshape(C)
            return field[pages_of, row].reshape(C)

        (lengths, positions, skip, mask, blocks, counts, scores,
         z_by_slot) = _step_rows(k, rng)
        states = []
        for b in range(B):
            st = sr.LayerState(C, bs)
            st.V, st.D = gather(v, b).copy(), gather(d, b).copy()
            states.append(st)
        before = [x.copy() for x in (v, d, obs_z)]
        k.launch("observe", [scores, positions, lengths, slots, blocks, counts, mask, skip,
                             obs_rows, obs_pos, obs_len, obs_mask, obs_z, v, d, table],
                 pool)
        for b in range(B):
            label = f"{where}, batch index {b}"
            if skip[b] or np.any(lengths[b] > positions[b] + 1):
                for now, old in zip((v, d, obs_z), before):
                    assert np.array_equal(now[table[b]], old[table[b]]), label
                continue
            sr.observe(states[b], [z_by_slot[b, r] for r in range(R)],
                       [(int(positions[b, r]), int(lengths[b, r])) for r in range(R)],
                       mask[b].astype(bool), bs, alpha=ALPHA)
            for name, got, want in (("V", gather(v, b), states[b].V),
                                    ("D", gather(d, b), states[b].D)):
                bad = np.nonzero(got != want)[0]
                assert bad.size == 0, f"{label}: {name} differs at {bad[:8]}"
            for r in range(1, R):
                scored = (np.arange(C) < lengths[b, r]) & (np.repeat(mask[b], bs)[:C] != 0)
                want = np.where(scored, z_by_slot[b, r], gather(before[2], b, r - 1))
                got = gather(obs_z, b, r - 1)
                same = (got == want) | (np.isnan(got) & np.isnan(want))
                assert same.all(), f"{label} row {r}: obs_z differs at {np.nonzero(~same)[0][:8]}"
        owned = np.zeros(pool, bool)
        owned[table.ravel()] = True
        for now, old in zip((v, d, obs_z), before):
            assert np.array_equal(now[~owned], old[~owned]), f"{where}: a free page changed"
