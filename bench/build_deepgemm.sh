#!/usr/bin/env bash
#===- bench/build_deepgemm.sh - build DeepGEMM in place on the GPU machine -===#
#
# Usage, on the GPU machine (CUDA toolkit, python3 with torch):
#
#   bash bench/build_deepgemm.sh [DIR]
#
# DIR (default: $DEEPGEMM_DIR, else third_party/DeepGEMM) is a DeepGEMM
# source tree (v2.6.1, commit 54e22612) with its two submodules unpacked
# into DIR/third-party/cutlass (include/ is enough) and DIR/third-party/fmt,
# as /work/shared/TOOLCHAIN.md ("Building DeepGEMM on the GPU machine")
# describes. It is git-ignored (/third_party/) and never part of the
# project: carry it to the GPU machine, build it there, import it from
# there (bench/bench_gpu.py --deepgemm DIR).
#
# What it does, in DIR: links deep_gemm/include/cutlass and
# deep_gemm/include/cute to the cutlass include folders (DeepGEMM's JIT
# compiles its kernels against them at run time), runs
# `CXX=/usr/bin/g++ CC=/usr/bin/gcc DG_USE_LOCAL_VERSION=0 python3 setup.py
# build` (about 80 s; the system g++: with the image's default g++ in
# /opt/gcc, DeepGEMM's run-time JIT crashes inside std::regex) and links the
# built extension into deep_gemm/, then imports it. Idempotent: an extension
# already built and importable is kept (FORCE=1 rebuilds).
#
# Run it on the GPU machine only: the links it makes (and build/) belong
# there; a carried tree with resolved links would hold cutlass twice.
#
# Environment: PYTHON (default python3), FORCE, DEEPGEMM_DIR.
# Exit status: 0 built (or already built) and importable; 1 the build or the
# import failed; 2 no DeepGEMM tree at DIR.
#
#===----------------------------------------------------------------------===#
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-${DEEPGEMM_DIR:-$ROOT/third_party/DeepGEMM}}"
PYTHON="${PYTHON:-python3}"
FORCE="${FORCE:-0}"

fail() { echo "build_deepgemm.sh: $1" >&2; exit "${2:-1}"; }

if [ ! -f "$DIR/setup.py" ] || [ ! -d "$DIR/deep_gemm" ]; then
  fail "no DeepGEMM source tree at $DIR (expected setup.py and deep_gemm/): unpack
  deepseek-ai/DeepGEMM 54e22612 there (git archive from a fetched mirror), with
  NVIDIA/cutlass f3fde583 include/ in $DIR/third-party/cutlass/include and
  fmtlib/fmt 553ec11e in $DIR/third-party/fmt, and carry it to this machine" 2
fi
DIR="$(cd "$DIR" && pwd)"
CUTLASS="$DIR/third-party/cutlass/include"
for sub in "$CUTLASS/cutlass" "$CUTLASS/cute" "$DIR/third-party/fmt/include"; do
  [ -d "$sub" ] || fail "$sub is missing: unpack DeepGEMM's submodules (cutlass f3fde583 include/, fmt 553ec11e) into $DIR/third-party/" 2
done

cd "$DIR"
# The JIT's include path: deep_gemm/include/{cutlass,cute} (as DeepGEMM's
# develop.sh links them; relative links, so that the tree can move). -n:
# replace an existing link, never descend into it.
ln -sfn ../../third-party/cutlass/include/cutlass deep_gemm/include/cutlass
ln -sfn ../../third-party/cutlass/include/cute deep_gemm/include/cute
[ -f deep_gemm/include/cute/tensor.hpp ] && [ -d deep_gemm/include/cutlass/arch ] ||
  fail "deep_gemm/include/{cute,cutlass} do not reach $CUTLASS"

importable() {
  (cd / && PYTHONPATH="$DIR${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c \
    "import deep_gemm, sys; print('deep_gemm', deep_gemm.__version__, 'from', deep_gemm.__file__)")
}

linked="$(find deep_gemm -maxdepth 1 -name '_C*.so' 2>/dev/null | head -n 1)"
if [ "$FORCE" != 1 ] && [ -n "$linked" ] && [ -e "$linked" ] && importable; then
  echo "build_deepgemm.sh: already built ($linked); FORCE=1 rebuilds"
else
  start=$SECONDS
  echo "== DeepGEMM: python3 setup.py build in $DIR (about 80 s)"
  rm -f deep_gemm/_C*.so
  # `setup.py build` puts the extension and a copy of the package under
  # build/lib.*; the source tree imports the extension through a link.
  CXX=/usr/bin/g++ CC=/usr/bin/gcc DG_USE_LOCAL_VERSION=0 "$PYTHON" setup.py build ||
    fail "python3 setup.py build failed in $DIR (above)"
  so="$(find build -name '_C*.so' -type f | head -n 1)"
  [ -n "$so" ] || fail "setup.py build left no _C*.so under $DIR/build"
  ln -sf "../$so" deep_gemm/
  echo "   built in $((SECONDS - start)) s: $so"
  importable || fail "the built extension does not import (above)"
fi

echo "DeepGEMM is importable from $DIR:"
echo "  PYTHONPATH=$DIR python3 -c 'import deep_gemm'"
echo "  python3 bench/bench_gpu.py --deepgemm $DIR ...   (or DEEPGEMM_DIR=$DIR)"
