#!/usr/bin/env bash
# The harness of test_gpu_model (fixtures, proposal pinning, gradient metrics, the
# training loop and its curve check) run with the CPU backend in the GPU's slot, so it
# is known to work on any machine before a GPU runs it: every comparison must be exact
# (bf16 rounded storage against itself too); 20 training steps instead of 200.
set -eu
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OPENBLAS_NUM_THREADS=1
out=$(MRCNN_GPU_MODEL_SELFCHECK=1 MRCNN_GPU_MODEL_STEPS=20 "$BUILD/tests/cuda/test_gpu_model" 2>&1) || {
    echo "$out"; echo "self-check: test_gpu_model failed"; exit 1; }
echo "$out"
echo "$out" | grep -q "self-check: CPU backend against CPU backend, 20 training steps"
echo "$out" | grep -q "PASSED.*4 test"
# both precisions compared the five losses and the gradients, exactly
[ "$(echo "$out" | grep -cE ": [a-z_]+ +[0-9.]+ vs [0-9.]+  rel err 0.00e\+00$")" -eq 10 ] || { echo "self-check: loss comparisons not exact"; exit 1; }
[ "$(echo "$out" | grep -c "gradients max rel err 0.00e+00 .*cosine 1.0000000")" -eq 2 ] \
    || { echo "self-check: gradient comparisons not exact"; exit 1; }
[ "$(echo "$out" | grep -cE "steps +[0-9]+- *[0-9]+: cpu fp32 [0-9.]+  cpu fp32 ")" -eq 10 ] || { echo "self-check: expected 10 fp32 windows"; exit 1; }
[ "$(echo "$out" | grep -cE "steps +[0-9]+- *[0-9]+: cpu fp32 [0-9.]+  cpu bf16 ")" -eq 10 ] || { echo "self-check: expected 10 bf16 windows"; exit 1; }
echo "self-check: ok"
