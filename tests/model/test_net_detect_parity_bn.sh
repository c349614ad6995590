#!/usr/bin/env bash
# test_net_detect_parity.sh from a fine-tuning start: torchvision's tiny model with
# non-identity frozen BN (s over 0.1..5) imported, 150 CPU steps in C, the checkpoint
# (folded convs W' = s W and their /fold_scale) exported by data_prep/weights.py to
# torchvision's parameterization (W'/s, BN weight s): eval-mode boxes, scores, labels
# and pasted masks must match, and the export must be unfolded.
set -u
cd "$ROOT"
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY_TORCH" -c "import torch, torchvision, h5py" 2>/dev/null || skip torch "$PY_TORCH lacks torch/torchvision/h5py"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec "$PY_TORCH" tests/model/parity_torch.py detect-bn
