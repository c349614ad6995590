#!/usr/bin/env bash
# Resume stays bit-exact when frozen BN is folded and the optimizer is preconditioned
# (s^2 per channel): `mrcnn train` on the tiny config from torchvision's tiny model
# with non-identity frozen BN (MODEL.WEIGHTS, imported by data_prep/weights.py), 6
# steps straight == 3 steps + --resume to 6: the same weights bit for bit; the log says
# the preconditioner is on in both processes.
# A training checkpoint carries its fold scales (/fold_scale, as the model file does):
# a NEW fine-tuning run with MODEL.WEIGHTS = the step-3 checkpoint trains with the same
# s (the same preconditioned element count in its log; its own checkpoint's
# /fold_scale bit-equal to s = gamma / sqrt(var + eps) of the imported BN, in float32 as
# the loader computes it), and data_prep/weights.py export of that second-generation
# checkpoint gives torchvision's BN weight = s and W = W'/s (without /fold_scale its
# /config MODEL.WEIGHTS names a folded checkpoint that holds no BN, and s = 1 came out).
# --resume with a MODEL.WEIGHTS that folds another s stops (exit 1) naming the tensor.
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
train second --max-steps 1 --set MODEL.WEIGHTS="$tmp/straight/model_0000003.h5"
pre() { grep -o "[0-9]* weights of convs with a frozen BN folded in train as torchvision's" "$1" | head -1 | cut -d' ' -f1; }
[ -n "$(pre "$tmp/second.log")" ] && [ "$(pre "$tmp/second.log")" = "$(pre "$tmp/straight.log")" ] ||
    { echo "FAIL: fine-tuning from a training checkpoint: preconditioned elements '$(pre "$tmp/second.log")', the first run had '$(pre "$tmp/straight.log")'"; exit 1; }
"$PY_TORCH" - "$tmp" <<'PY' || exit 1
import sys
import h5py
import numpy as np
import torch
sys.path.insert(0, "data_prep")
import weights
d = sys.argv[1]
init = h5py.File(f"{d}/init.h5", "r")["model"]
want = {}
for name in h5py.File(f"{d}/second/model_0000001.h5", "r")["model"]:
    bn = weights.bn_of_folded_bias(name)
    if bn is not None and bn + ".weight" in init:
        gamma, var = np.array(init[bn + ".weight"], np.float32), np.array(init[bn + ".running_var"], np.float32)
        want[name[:-len(".bias")] + ".weight"] = (bn, gamma / np.sqrt(var + np.float32(weights.BN_EPS)))
bad = []
for f in ("straight/model_0000003.h5", "second/model_0000001.h5"):
    h = h5py.File(f"{d}/{f}", "r")
    got = {n: np.array(h["fold_scale"][n]) for n in h["fold_scale"]} if "fold_scale" in h else {}
    bad += [f"{f}: /fold_scale/{n} {'missing' if n not in got else 'differs'}" for n, (_, s) in want.items()
            if n not in got or not np.array_equal(got[n], s)]
sd = weights.export_state_dict(f"{d}/second/model_0000001.h5")
m = h5py.File(f"{d}/second/model_0000001.h5", "r")["model"]
for n, (bn, s) in want.items():
    if not np.array_equal(sd[bn + ".weight"].numpy(), s):
        bad.append(f"export: {bn}.weight is not s (max |diff| {np.abs(sd[bn + '.weight'].numpy() - s).max():.3g})")
    w, wp = sd[n].numpy(), weights.from_project(n, np.array(m[n])).numpy()
    if not np.array_equal(w, wp / s.reshape((-1,) + (1,) * (wp.ndim - 1))):
        bad.append(f"export: {n} is not W'/s")
print(f"fine-tuning from a training checkpoint: {len(want)} folded convs, s over {min(s.min() for _, s in want.values()):.3g}.."
      f"{max(s.max() for _, s in want.values()):.3g}; {len(bad)} problems")
for b in bad[:8]:
    print("  " + b)
sys.exit(1 if bad or not want else 0)
PY
# --resume checks that the checkpoint's /fold_scale is what this process folded: with a
# MODEL.WEIGHTS whose one BN scale differs, the resume stops naming the tensor.
"$PY_TORCH" - "$tmp" <<'PY' || exit 1
import shutil, sys
import h5py
d = sys.argv[1]
shutil.copy(f"{d}/init.h5", f"{d}/init2.h5")
with h5py.File(f"{d}/init2.h5", "r+") as f:
    f["model/backbone.body.bn1.weight"][0] *= 2
PY
"$M" train $COMMON --set OUTPUT_DIR="$tmp/resumed" --set MODEL.WEIGHTS="$tmp/init2.h5" --max-steps 7 --resume > "$tmp/other.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "does not match this run's frozen batch-norm folding: its /fold_scale/backbone.body.conv1.weight\[0\]" "$tmp/other.log" ||
    { echo "FAIL: --resume with other frozen-BN scales: exit $rc"; grep -i "error\|resumed" "$tmp/other.log"; exit 1; }
echo PASS
