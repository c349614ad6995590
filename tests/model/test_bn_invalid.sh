#!/usr/bin/env bash
# A frozen BN that does not fold into a usable map is a load error naming the tensor
# and the channel, never a silent NaN: a negative running_var, a non-finite
# running_var, a zero weight (scale 0: the fold would forget the conv, and W'/s is
# undefined). The tiny model from torchvision parts, imported by data_prep/weights.py.
set -u
cd "$ROOT"
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY_TORCH" -c "import torch, torchvision, h5py" 2>/dev/null || skip torch "$PY_TORCH lacks torch/torchvision/h5py"
prog=$BUILD/tests/model/prog_net_run
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY_TORCH" - "$tmp" <<'PY' || exit 1
import math, os, sys
import torch
sys.path.insert(0, "data_prep"); sys.path.insert(0, "tests/model")
import net_tv_models, weights
d = sys.argv[1]
bn = "backbone.body.layer2.0.bn2"
cases = {"ok": None, "negvar": ("running_var", 3, -0.25), "nanvar": ("running_var", 5, math.nan),
         "infvar": ("running_var", 1, math.inf), "zeroscale": ("weight", 2, 0.0)}
for name, edit in cases.items():
    sd = net_tv_models.build_tiny(1, 64, 64).state_dict()
    if edit:
        sd[f"{bn}.{edit[0]}"][edit[1]] = edit[2]
    torch.save(sd, f"{d}/{name}.pth")
    weights.import_state_dict(weights.load_state_dict(f"{d}/{name}.pth"), f"{d}/{name}.h5")
PY
fail=0
run() { "$prog" configs/tiny.yaml "$tmp/$1.h5" none none --mode load > "$tmp/$1.log" 2>&1; }
run ok || { echo "FAIL: the unedited weights do not load"; cat "$tmp/ok.log"; exit 1; }
expect() { # case pattern
    if run "$1"; then echo "FAIL: $1 loaded"; fail=1
    elif ! grep -q -- "$2" "$tmp/$1.log"; then echo "FAIL: $1: message lacks '$2':"; cat "$tmp/$1.log"; fail=1
    else echo "ok   $1: $(grep -o 'checkpoint .*' "$tmp/$1.log" | head -1)"; fi
}
expect negvar "/model/backbone.body.layer2.0.bn2.running_var\[3\] = -0.25 is negative"
expect nanvar "/model/backbone.body.layer2.0.bn2.running_var holds 1 non-finite values (of 8), the first at channel 5 (nan)"
expect infvar "/model/backbone.body.layer2.0.bn2.running_var holds 1 non-finite values (of 8), the first at channel 1 (inf)"
expect zeroscale "/model/backbone.body.layer2.0.bn2.weight\[2\] = 0 gives the frozen batch-norm scale 0"
[ $fail = 0 ] && echo PASS
exit $fail
