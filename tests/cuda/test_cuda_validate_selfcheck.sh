#!/usr/bin/env bash
# test_cuda_validate's shared-check cases run with the CPU backend in the GPU's slot, so
# that the harness and the messages it expects are known to hold on any machine before a
# GPU runs them (the CUDA entries' own checks are skipped there: the CPU's differ).
set -eu
out=$(MRCNN_CUDA_VALIDATE_SELFCHECK=1 "$BUILD/tests/cuda/test_cuda_validate" 2>&1)
echo "$out"
echo "$out" | grep -q "self-check: the CPU backend in the GPU's slot"
echo "$out" | grep -q "PASSED  \] 3 test" || { echo "self-check: expected 3 cases to pass"; exit 1; }
