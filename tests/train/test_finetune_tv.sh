#!/usr/bin/env bash
# Fine-tuning through frozen BN trains what torchvision trains: R50-FPN, non-identity
# frozen BN (s over 0.1..5), 1 and 5 steps of the real trainer with momentum, weight
# decay and binding clipping, every trainable tensor against torch.optim.SGD on
# torchvision's W = W'/s within a rounding bound; the trainer without the folded-BN
# preconditioner (how mrcnn trained before) must fail the same bound
# (tests/train/finetune_tv.py derives it). ~90 s on one core.
set -u
cd "$ROOT"
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY_TORCH" -c "import torch, torchvision, h5py" 2>/dev/null || skip torch "$PY_TORCH lacks torch/torchvision/h5py"
[ -x "$BUILD/tests/train/prog_finetune" ] || { echo "not built: $BUILD/tests/train/prog_finetune"; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
exec "$PY_TORCH" tests/train/finetune_tv.py
