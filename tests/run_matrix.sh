#!/usr/bin/env bash
# The suites whose numbers depend on BLAS kernels and thread counts, run under each
# OpenBLAS core type and OpenMP thread count: OpenBLAS picks its kernels by CPU
# (DYNAMIC_ARCH), so a tolerance tuned on one machine's rounding passes there and fails
# on another; OPENBLAS_CORETYPE makes this machine round as those would.
# Usage: run_matrix.sh [suite[,suite...]]   (default model,train,eval,cuda)
# Env: MATRIX_CORETYPES ("Haswell Zen Sandybridge"), MATRIX_THREADS ("1 2"),
#      MATRIX_PAIRS ("Haswell:1 Zen:2 ..." instead of the full product), and whatever
#      run_tests.sh takes (BUILD, PY_TORCH, PY_COCO, MRCNN_REQUIRE).
set -u
cd "$(dirname "$0")/.."
suites=${1:-model,train,eval,cuda}
pairs=${MATRIX_PAIRS:-}
if [ -z "$pairs" ]; then
    for ct in ${MATRIX_CORETYPES:-Haswell Zen Sandybridge}; do
        for th in ${MATRIX_THREADS:-1 2}; do pairs="$pairs $ct:$th"; done
    done
fi
BUILD=${BUILD:-build/release}
table="" bad=0 t0=$(date +%s)
for p in $pairs; do
    ct=${p%%:*} th=${p##*:}
    echo "==== OPENBLAS_CORETYPE=$ct OMP_NUM_THREADS=$th: $suites"
    log=$BUILD/test-logs/matrix-$ct-$th.log
    mkdir -p "$(dirname "$log")"
    t=$(date +%s)
    OPENBLAS_CORETYPE=$ct OMP_NUM_THREADS=$th bash tests/run_tests.sh "$suites" 2>&1 | tee "$log" | grep -E '^  (FAIL|SKIP)|^        \|'
    rc=${PIPESTATUS[0]}
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -1)
    [ "$rc" -eq 0 ] || bad=$((bad + 1))
    table="$table$(printf '  %-12s %2s thread(s)  %-40s %4ss  %s' "$ct" "$th" "${line:-no summary (rc $rc)}" $(($(date +%s) - t)) "$([ "$rc" -eq 0 ] || echo "<- FAILED, log $log")")\n"
done
echo
echo "Test matrix ($suites), $(($(date +%s) - t0)) s:"
printf "$table"
# one summed line in the runner's format, so CI's tally counts the matrix too
awk '/^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$/ {p += $1; f += $3; s += $5}
     END {printf "%d passed, %d failed, %d skipped\n", p, f, s}' \
    $(for p in $pairs; do echo "$BUILD/test-logs/matrix-${p%%:*}-${p##*:}.log"; done)
[ "$bad" -eq 0 ]
