#!/usr/bin/env bash
#===- bench/run_gpu_check.sh - the one-command H200 correctness check -----===#
#
# On the GPU machine, from anywhere in the work tree:
#
#   bench/run_gpu_check.sh [gpu_check.py options, e.g. --seed 123 --only fp8]
#
# 1. builds the MLIR-free runtime and its Python module into build-gpu/
#    (scripts/gpu-runtime-build: pip pybind11, the image's python3, no MLIR);
# 2. runs bench/gpu_check.py over gpu-artifacts/ (compiled on the build
#    machine by bench/gpu_artifacts.py and carried here): every artifact
#    against the numpy reference, one line per configuration + a summary;
# 3. runs the runtime's CUDA tests, python/tests/test_cuda.py;
# 4. runs spin.Indexer(device="cuda") against the numpy reference,
#    python/tests/test_indexer_cuda.py, spin-replay --device cuda against
#    the CPU replay's report (python/tests/test_replay_cuda.py), device
#    batches in CUDA graphs (python/tests/test_device_batches_cuda.py), the
#    serving loop (examples/serving_loop.py --check, 1000 graph replays per
#    configuration, compact and paged state, python/tests/
#    test_serving_loop_cuda.py), state tensors and the torch op
#    (python/tests/test_ops_cuda.py: opcheck, torch.compile, CUDA graphs),
#    paged state against the compact layout (python/tests/
#    test_paged_state_cuda.py), fused fp8 key pages against separate keys
#    and scales (python/tests/test_fused_pages_cuda.py), and the example
#    examples/torch_decode_loop.py --device cuda (MTP with two draft tokens,
#    and --draft 0: one token per step), with the GPU programs
#    from cuda-cache/ (SPIN_CACHE_DIR): the runtime-only build cannot
#    compile them, so they are compiled on the build machine by
#
#      SPIN_BUILD_DIR=build /usr/bin/python3 python/tests/prebuild_cuda_cache.py \
#          --out cuda-cache --chips sm_90a
#
#    and cuda-cache/ is carried here with gpu-artifacts/.
#
# 5. runs the CUDA cases of the bad-input matrix (python/tests/
#    test_bad_inputs.py -m cuda: PTX that does not load);
# 6. with SANITIZE=1, bench/run_gpu_sanitizers.sh: gpu_check.py (a fresh
#    seed each time), test_cuda.py, the device-batch tests and the other
#    Python GPU tests under compute-sanitizer's memcheck, racecheck,
#    synccheck and initcheck (docs/Reliability.md has the run times).
#
# Exit status: 0 only if the build, the check and the tests all passed.
# Environment: PYTHON (default python3), BUILD_DIR (default build-gpu),
# ARTIFACTS (default gpu-artifacts), INDEXER_CACHE (default cuda-cache),
# CHECK_TIMEOUT (seconds one configuration may take before the check is
# aborted with a traceback; default 600), SANITIZE (1: step 6).
#
#===----------------------------------------------------------------------===#
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
export BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
ARTIFACTS="${ARTIFACTS:-$ROOT/gpu-artifacts}"
INDEXER_CACHE="${INDEXER_CACHE:-$ROOT/cuda-cache}"

log() { printf '\n== %s\n' "$*"; }

if [ ! -f "$ARTIFACTS/index.json" ]; then
  echo "error: $ARTIFACTS/index.json is missing: run bench/gpu_artifacts.py on" \
       "the build machine and carry gpu-artifacts/ here" >&2
  exit 2
fi
if ! ls "$INDEXER_CACHE"/indexer-gpu-* >/dev/null 2>&1; then
  echo "error: $INDEXER_CACHE holds no Indexer GPU programs: run" \
       "python/tests/prebuild_cuda_cache.py --out cuda-cache --chips sm_90a on" \
       "the build machine and carry cuda-cache/ here" >&2
  exit 2
fi

log "device"
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "(no nvidia-smi)"
"$PYTHON" -c 'import sys, numpy, torch; print("python", sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__, "CUDA", torch.cuda.is_available())' ||
  { echo "error: $PYTHON lacks numpy or torch" >&2; exit 2; }

log "build the runtime ($BUILD_DIR)"
PYTHON="$PYTHON" "$ROOT/scripts/gpu-runtime-build" build || {
  echo "error: scripts/gpu-runtime-build failed" >&2
  exit 1
}

export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

log "bench/gpu_check.py $ARTIFACTS $*"
"$PYTHON" "$ROOT/bench/gpu_check.py" "$ARTIFACTS" \
  --config-timeout "${CHECK_TIMEOUT:-600}" "$@"
check=$?

log "pytest python/tests/test_cuda.py"
SPIN_BUILD_DIR="$BUILD_DIR" "$PYTHON" -m pytest -q -rs "$ROOT/python/tests/test_cuda.py"
tests=$?

log "pytest python/tests/test_indexer_cuda.py test_replay_cuda.py test_device_batches_cuda.py test_serving_loop_cuda.py test_ops_cuda.py test_paged_state_cuda.py test_fused_pages_cuda.py (SPIN_CACHE_DIR=$INDEXER_CACHE)"
SPIN_BUILD_DIR="$BUILD_DIR" SPIN_CACHE_DIR="$INDEXER_CACHE" "$PYTHON" -m pytest -q -rs -s \
  "$ROOT/python/tests/test_indexer_cuda.py" "$ROOT/python/tests/test_replay_cuda.py" \
  "$ROOT/python/tests/test_device_batches_cuda.py" "$ROOT/python/tests/test_serving_loop_cuda.py" \
  "$ROOT/python/tests/test_ops_cuda.py" "$ROOT/python/tests/test_paged_state_cuda.py" \
  "$ROOT/python/tests/test_fused_pages_cuda.py"
indexer=$?

log "examples/torch_decode_loop.py --device cuda (--draft 2, then --draft 0)"
SPIN_CACHE_DIR="$INDEXER_CACHE" "$PYTHON" "$ROOT/examples/torch_decode_loop.py" --device cuda
example=$?
SPIN_CACHE_DIR="$INDEXER_CACHE" "$PYTHON" "$ROOT/examples/torch_decode_loop.py" --device cuda --draft 0
[ $? -eq 0 ] || example=1

# The rest of the matrix needs the compiler, which the runtime-only build
# does not have: it runs in CI.
log "pytest -m cuda python/tests/test_bad_inputs.py (its CUDA cases)"
SPIN_BUILD_DIR="$BUILD_DIR" "$PYTHON" -m pytest -q -m cuda "$ROOT/python/tests/test_bad_inputs.py"
bad=$?

sanitizers=0
if [ "${SANITIZE:-0}" = 1 ]; then
  log "bench/run_gpu_sanitizers.sh (SANITIZE=1)"
  ARTIFACTS="$ARTIFACTS" "$ROOT/bench/run_gpu_sanitizers.sh"
  sanitizers=$?
fi

log "result"
status() { [ "$1" -eq 0 ] && echo passed || echo "FAILED (exit $1)"; }
echo "gpu_check.py:              $(status $check)"
echo "test_cuda.py:              $(status $tests)"
echo "test_indexer/replay/device_batches/serving_loop_cuda: $(status $indexer)"
echo "torch_decode_loop.py cuda: $(status $example)"
echo "test_bad_inputs.py:        $(status $bad)"
[ "${SANITIZE:-0}" = 1 ] && echo "compute-sanitizer:         $(status $sanitizers)"
[ $check -eq 0 ] && [ $tests -eq 0 ] && [ $indexer -eq 0 ] && [ $example -eq 0 ] &&
  [ $bad -eq 0 ] && [ $sanitizers -eq 0 ]
