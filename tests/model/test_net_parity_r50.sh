#!/usr/bin/env bash
# R50-FPN against torchvision with the same random weights (two draws, two images):
# features, RPN outputs, proposals, the five losses and sampled gradients. Torch's
# ReLU backward uses the C run's masks: a unit within rounding of zero can fall on
# either side, and one such unit moves the gradients before it by ~1e-3 (the units
# where the masks disagree are checked to lie within the forward's rounding of zero).
set -u
cd "$ROOT"
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY_TORCH" -c "import torch, torchvision, h5py" 2>/dev/null || skip torch "$PY_TORCH lacks torch/torchvision/h5py"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec "$PY_TORCH" tests/model/parity_torch.py r50
