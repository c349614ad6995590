#!/usr/bin/env bash
# Every __global__ kernel of src/backend/cuda/*.cu and the op-table case (tests/ops/test_op_table.c)
# that launches it through a backend entry, or the test program that calls its launcher
# (tests/ops/kernel_coverage.py says how the chain is found). Fails naming each kernel
# without one. Static: reads the sources, needs no GPU and no build. Env: ROOT.
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v python3 > /dev/null || { . "$ROOT/tests/common/skip.sh"; skip python "python3 not found"; }
python3 "$ROOT/tests/ops/kernel_coverage.py" "$ROOT"
