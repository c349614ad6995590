#!/usr/bin/env bash
# The tiny config trained 300 CPU steps in C on synthetic shapes, its checkpoint
# exported to a torchvision state_dict (data_prep/weights.py, folded-BN path) and
# loaded into the same architecture built from torchvision parts: eval-mode boxes,
# scores, labels and pasted masks must match.
set -u
cd "$ROOT"
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY_TORCH" -c "import torch, torchvision, h5py" 2>/dev/null || skip torch "$PY_TORCH lacks torch/torchvision/h5py"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec "$PY_TORCH" tests/model/parity_torch.py detect
