#!/usr/bin/env bash
# The tiny config against the same architecture from torchvision parts, every layer
# trainable, stride in the 3x3 and in the 1x1; and the R101 weights loading by name.
set -u
cd "$ROOT"
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY_TORCH" -c "import torch, torchvision, h5py" 2>/dev/null || skip torch "$PY_TORCH lacks torch/torchvision/h5py"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec "$PY_TORCH" tests/model/parity_torch.py tiny
