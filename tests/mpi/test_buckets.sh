#!/usr/bin/env bash
# Gradient buckets average over 2 and 3 ranks (MPI path), whatever order each rank
# marks parameters ready in; rank 0's weights reach every rank.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Under ASan, the fast unwinder stops inside Open MPI and its leaks then escape
# tests/lsan.supp; full unwinding lets the suppressions match.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
prog=$BUILD/tests/mpi/prog_buckets
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
for np in 1 2 3; do
    out=$(timeout 120 mpirun --oversubscribe -np $np "$prog" check 2>&1)
    rc=$?
    echo "$out"
    [ $rc -eq 0 ] || { echo "FAIL: -np $np exited $rc"; exit 1; }
    echo "$out" | grep -q "ok: $np ranks" || { echo "FAIL: -np $np printed no ok line"; exit 1; }
done
echo "PASS"
