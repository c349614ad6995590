#!/usr/bin/env bash
# COCO evaluation time, ours (C, OpenMP) vs pycocotools, bbox and segm, same data, same run.
# usage: bench/bench_eval.sh [N_IMAGES=5000] [THREADS=all cores]
# env: BUILD (build dir with mrcnn), PY_COCO (python3 with pycocotools), EVAL_BENCH_DATA (cache dir)
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
PY=${PY_COCO:-python3}
[ -x "$BUILD/mrcnn" ] || { echo "bench_eval: $BUILD/mrcnn is not built (make BUILD=$BUILD)"; exit 1; }
"$PY" -c 'import pycocotools' 2>/dev/null || { echo "bench_eval: skip: pycocotools is not installed for $PY"; exit 77; }
exec "$PY" bench/eval_bench.py "$BUILD/mrcnn" "${EVAL_BENCH_DATA:-$BUILD/bench-eval-data}" "${1:-5000}" "${2:-$(nproc)}"
