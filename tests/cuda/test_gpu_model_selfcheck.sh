#!/usr/bin/env bash
# The harness of test_gpu_model (fixtures, proposal pinning, gradient metrics, the
# training loop and its curve check) run with the CPU backend in the GPU's slot, so it
# is known to work on any machine before a GPU runs it: every comparison must be exact
# (bf16 rounded storage against itself too), whatever BLAS kernels this machine picks;
# 20 training steps instead of 200, 3 seeds.
set -eu
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OPENBLAS_NUM_THREADS=1
out=$(MRCNN_GPU_MODEL_SELFCHECK=1 MRCNN_GPU_MODEL_STEPS=20 "$BUILD/tests/cuda/test_gpu_model" 2>&1) || {
    echo "$out"; echo "self-check: test_gpu_model failed"; exit 1; }
echo "$out"
echo "$out" | grep -q "self-check: CPU backend against CPU backend, 20 training steps"
echo "$out" | grep -q "PASSED.*5 test"
# both precisions compared the five losses and the gradients, exactly
[ "$(echo "$out" | grep -cE ": [a-z_]+ +[0-9.]+ vs [0-9.]+  rel err 0.00e\+00$")" -eq 10 ] || { echo "self-check: loss comparisons not exact"; exit 1; }
[ "$(echo "$out" | grep -c "gradients max rel err 0.00e+00 .*cosine 1.0000000")" -eq 2 ] \
    || { echo "self-check: gradient comparisons not exact"; exit 1; }
# both precisions' seed-averaged curves: 10 windows each, identical (allowed 0), and
# the seeds really differ (a spread), else the statistics would check nothing
for p in fp32 bf16; do
    [ "$(echo "$out" | grep -cE "steps +[0-9]+- *[0-9]+: cpu $p [0-9.]+ \(sd [0-9.]+\)  cpu $p [0-9.]+ \(sd [0-9.]+\)  allowed 0.0000$")" -eq 10 ] \
        || { echo "self-check: expected 10 exact $p windows"; exit 1; }
    echo "$out" | grep -E "steps +[0-9]+- *[0-9]+: cpu $p " | grep -qvE "\(sd 0.0000\)  cpu" \
        || { echo "self-check: the $p seeds gave identical curves"; exit 1; }
done
echo "self-check: ok"
