#!/usr/bin/env bash
# Resume stays bit-exact when frozen BN is folded and the optimizer is preconditioned
# (s^2 per channel): `mrcnn train` on the tiny config from torchvision's tiny model
# with non-identity frozen BN (MODEL.WEIGHTS, imported by data_prep/weights.py), 6
# steps straight == 3 steps + --resume to 6: the same weights bit for bit. s is not in
# the training checkpoint: the resumed process folds MODEL.WEIGHTS again, the same
# arithmetic, so the same s; the log says the preconditioner is on.
set -u
cd "$ROOT"
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY_TORCH" -c "import torch, torchvision, h5py" 2>/dev/null || skip torch "$PY_TORCH lacks torch/torchvision/h5py"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
M=$BUILD/mrcnn P=$BUILD/mrcnn-prep
[ -x "$M" ] && [ -x "$P" ] || { echo "not built: $M / $P"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$P" shapes --out "$tmp/raw" --train 8 --val 2 --size 128x128 > "$tmp/prep.log" 2>&1 &&
    "$P" coco --annotations "$tmp/raw/annotations/instances_train.json" --images "$tmp/raw/train" \
        --out "$tmp/shards" --name train --shards 1 >> "$tmp/prep.log" 2>&1 || { echo "FAIL: fixture"; cat "$tmp/prep.log"; exit 1; }
"$PY_TORCH" - "$tmp" <<'PY' || exit 1
import math, sys
import torch
sys.path.insert(0, "data_prep"); sys.path.insert(0, "tests/model")
import net_tv_models, weights
from torchvision.ops.misc import FrozenBatchNorm2d
m = net_tv_models.build_tiny(2, 128, 128)
g = torch.Generator().manual_seed(5)
with torch.no_grad():
    for mod in m.modules():
        if isinstance(mod, FrozenBatchNorm2d):
            k = mod.weight.numel()
            s = torch.exp(math.log(0.8) + 0.5 * torch.randn(k, generator=g)).clamp(0.1, 5.0)
            s[0], s[-1] = 0.1, 5.0
            mod.running_var.copy_(0.5 + torch.rand(k, generator=g))
            mod.weight.copy_(s * torch.sqrt(mod.running_var + mod.eps))
torch.save(m.state_dict(), f"{sys.argv[1]}/init.pth")
weights.import_state_dict(weights.load_state_dict(f"{sys.argv[1]}/init.pth"), f"{sys.argv[1]}/init.h5")
PY
COMMON="--config $ROOT/configs/tiny.yaml --set DATASETS.TRAIN=$tmp/shards/train-index.h5 --set MODEL.WEIGHTS=$tmp/init.h5
        --set SOLVER.IMS_PER_BATCH=2 --set SOLVER.BASE_LR=0.02 --set SOLVER.WARMUP_ITERS=0 --set LOG_PERIOD=1
        --set SOLVER.CLIP_GRADIENTS.ENABLED=true --set SOLVER.CLIP_GRADIENTS.CLIP_VALUE=1 --set SOLVER.CHECKPOINT_PERIOD=3"
train() { # out [args...]
    local out=$1; shift
    "$M" train $COMMON --set OUTPUT_DIR="$tmp/$out" "$@" >> "$tmp/$out.log" 2>&1 || { echo "FAIL: train $out $*"; tail -20 "$tmp/$out.log"; exit 1; }
}
train straight --max-steps 6
train resumed --max-steps 3
train resumed --max-steps 6 --resume
grep -q "resumed from .*model_0000003.h5 at step 3" "$tmp/resumed.log" || { echo "FAIL: did not resume at step 3"; cat "$tmp/resumed.log"; exit 1; }
[ "$(grep -c "weights of convs with a frozen BN folded in train as torchvision's" "$tmp/resumed.log")" = 2 ] ||
    { echo "FAIL: the preconditioner is not on in both processes"; grep optimizer "$tmp/resumed.log"; exit 1; }
"$PY_TORCH" - "$tmp" <<'PY' || exit 1
import sys
import h5py
import numpy as np
d = sys.argv[1]
a, b = h5py.File(f"{d}/straight/model_0000006.h5", "r")["model"], h5py.File(f"{d}/resumed/model_0000006.h5", "r")["model"]
diff = [k for k in a if not np.array_equal(np.array(a[k]), np.array(b[k]))]
moved = sum(not np.array_equal(np.array(a[k]), np.array(h5py.File(f"{d}/straight/model_0000003.h5", "r")["model"][k])) for k in a)
print(f"resume at step 3 of 6: {len(a)} tensors, {len(diff)} differ; {moved} moved in steps 4..6")
sys.exit(1 if diff or moved == 0 else 0)
PY
echo PASS
