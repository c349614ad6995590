#!/usr/bin/env bash
# The harness of test_cuda_ops (random fills, NaN poison, accumulate set-ups, error
# metrics, every op call) run with the CPU backend in place of the CUDA one, so that it
# is known to work on any machine before a GPU runs it: every comparison must be exact.
set -eu
out=$(MRCNN_CUDA_OPS_SELFCHECK=1 "$BUILD/tests/cuda/test_cuda_ops")
echo "$out"
echo "$out" | grep -q "self-check: CPU backend against CPU backend"
# Exact agreement: no comparison may report a nonzero error.
if echo "$out" | grep "max rel err" | grep -v "max rel err 0 " | grep -q .; then
    echo "self-check: nonzero error between identical backends"; exit 1
fi
n=$(echo "$out" | grep -c "max rel err 0 ")
[ "$n" -ge 300 ] || { echo "self-check: only $n comparisons ran"; exit 1; }
echo "self-check: $n comparisons exact"
