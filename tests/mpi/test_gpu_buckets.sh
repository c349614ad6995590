#!/usr/bin/env bash
# Gradient buckets over GPU arenas (needs a GPU and a CUDA build; skips otherwise):
# 1 and 2 ranks; NCCL when each rank has its own GPU, else MPI through host staging.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
prog=$BUILD/tests/mpi/prog_buckets
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
"$prog" check-gpu > /tmp/gpu_buckets_probe.$$ 2>&1
rc=$?
if [ $rc -eq 77 ]; then cat /tmp/gpu_buckets_probe.$$; rm -f /tmp/gpu_buckets_probe.$$; exit 77; fi
cat /tmp/gpu_buckets_probe.$$; rm -f /tmp/gpu_buckets_probe.$$
[ $rc -eq 0 ] || { echo "FAIL: 1 rank exited $rc"; exit 1; }
for np in 2; do
    out=$(timeout 300 mpirun --oversubscribe -np $np "$prog" check-gpu 2>&1)
    rc=$?
    echo "$out"
    [ $rc -eq 0 ] || { echo "FAIL: -np $np exited $rc"; exit 1; }
    echo "$out" | grep -q "ok: $np ranks" || { echo "FAIL: -np $np printed no ok line"; exit 1; }
done
echo PASS
