#!/usr/bin/env bash
# The loader's resize equals torch's interpolate (bilinear, align_corners=False, for
# the image; nearest for masks), flipped or not, with zero padding; up and down.
set -u -o pipefail
PROG=$ROOT/$BUILD/tests/data/prog_resize
[ -x "$PROG" ] || { echo "not built: $PROG"; exit 1; }
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
$PY_TORCH -c 'import torch' 2>/dev/null || skip torch "torch not importable by $PY_TORCH"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cases=("48 64 80 107 0" "48 64 80 107 1" "90 70 41 32 1" "33 47 33 47 0" "60 40 61 39 1")
for i in "${!cases[@]}"; do
    mkdir -p "$T/$i"
    "$PROG" ${cases[$i]} "$T/$i" || { echo "FAIL: prog_resize ${cases[$i]}"; exit 1; }
    echo "${cases[$i]} $T/$i" >> "$T/list"
done
OMP_NUM_THREADS=1 $PY_TORCH - "$T/list" <<'PY' || { echo "FAIL: resize differs from torch"; exit 1; }
import sys
import numpy as np
import torch
import torch.nn.functional as F
bad = 0
for line in open(sys.argv[1]):
    *nums, d = line.split()
    h, w, nh, nw, flip = map(int, nums)
    ch, cw = nh + 5, nw + 3
    x = np.fromfile(f"{d}/in.u8", np.uint8).reshape(h, w, 3)
    cm = np.fromfile(f"{d}/mask_cm.u8", np.uint8).reshape(w, h).T  # column-major (COCO) -> (h, w)
    out = np.fromfile(f"{d}/out.f32", np.float32).reshape(ch, cw, 3)
    mask = np.fromfile(f"{d}/mask.u8", np.uint8).reshape(ch, cw)
    ref = F.interpolate(torch.from_numpy(x).permute(2, 0, 1)[None].float(), size=(nh, nw), mode="bilinear", align_corners=False)[0].permute(1, 2, 0).numpy()
    mref = F.interpolate(torch.from_numpy(cm)[None, None].float(), size=(nh, nw), mode="nearest")[0, 0].numpy()
    if flip:
        ref, mref = ref[:, ::-1], mref[:, ::-1]
    err = np.abs(out[:nh, :nw] - ref).max()
    ok = err < 1e-3 and np.all(out[nh:] == 0) and np.all(out[:, nw:] == 0)
    mok = np.array_equal(mask[:nh, :nw], mref.astype(np.uint8)) and not mask[nh:].any() and not mask[:, nw:].any()
    print(f"resize {h}x{w} -> {nh}x{nw} flip={flip}: image max |diff| {err:.2e}{'' if ok else ' BAD'}, masks {'equal' if mok else 'DIFFER'}")
    bad += not (ok and mok)
sys.exit(1 if bad else 0)
PY
echo "PASS: resize matches torch"
