#!/usr/bin/env bash
# --resume and damaged checkpoints, on the stand-in model (prog_standin.c):
#  - the newest checkpoint is complete-marked but damaged: a weight byte flipped
#    (checksum), a dataset missing, a dataset of another shape, a flipped byte in the
#    attributes, weights that hold NaN: --resume names it with the reason and falls
#    back to the previous one, then trains on (it used to stop the run with an error,
#    or for flipped bytes load them silently);
#  - no checkpoint loads: exit 1 listing every file and why;
#  - a run whose steps are all skipped for Inf/NaN ends with exit 4, not 0: fp32 shorter
#    than SOLVER.MAX_NONFINITE, and fp16, whose loss scale used to halve forever.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
# Sanitizer reports exit 86, so they never pass as an expected error exit.
source "$ROOT/tests/common/exit_codes.sh"
prog=${PROG_STANDIN:-$BUILD/tests/train/prog_standin}
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
source "$ROOT/tests/train/common_fixture.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$ROOT/tests/common/checks.sh" # fails, bad, wait_for

"${SOLO[@]}" "$prog" "$tmp/base" --max-steps 6 --set SOLVER.CHECKPOINT_PERIOD=2 --set SOLVER.CHECKPOINT_KEEP=10 > "$tmp/base.log" 2>&1 ||
    { echo "FAIL: the base run"; cat "$tmp/base.log"; exit 1; }
ls "$tmp/base"/model_0000006.h5 > /dev/null || exit 1

# damage NAME PYTHON-or-"flip": a copy of the base run whose newest checkpoint is damaged
damage() {
    rm -rf "$tmp/$1"; cp -r "$tmp/base" "$tmp/$1"; rm -f "$tmp/$1/.lock"
    local f=$tmp/$1/model_0000006.h5
    if [ "$2" = flip ]; then
        flip_weight_byte "$f" model/fc.weight
    elif [ "$2" = flip-attr ]; then
        "$PY_TORCH" - "$f" <<'PY'
import sys
p = sys.argv[1]
d = bytearray(open(p, "rb").read())
i = d.find(b"loader_batch")
assert i > 0, "attribute name not found"
d[i + 3] ^= 0x01
open(p, "wb").write(bytes(d))
PY
    else
        "$PY_TORCH" -c "
import h5py, numpy as np
with h5py.File('$f', 'r+') as f:
    assert f.attrs['complete'] == 1
    $2"
    fi
}
fallback_case() { # name damage expected-reason
    damage "$1" "$2" || { bad "$1: could not damage the file"; return; }
    local log=$tmp/$1.log
    "${SOLO[@]}" "$prog" "$tmp/$1" --resume --max-steps 8 --set SOLVER.CHECKPOINT_PERIOD=2 --set SOLVER.CHECKPOINT_KEEP=10 > "$log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] || ! grep -q "resumed from .*model_0000004.h5 at step 4" "$log" ||
        ! grep -q "resume: checkpoint .*model_0000006.h5 cannot be loaded: .*$3.*; trying an older one" "$log"; then
        bad "$1: exit $rc, want a fallback to step 4 naming model_0000006.h5 and '$3'"; tail -n 12 "$log"
        return
    fi
    echo "$1: $(grep -m1 'cannot be loaded' "$log" | sed 's/.*cannot be loaded: //' | cut -c1-150) -> resumed from step 4"
}
fallback_case flipped-weight flip "Fletcher-32 checksum"
fallback_case missing-dataset "del f['optimizer/momentum/fc.bias']" "'/optimizer/momentum/fc.bias' missing"
fallback_case wrong-shape "del f['model/fc.bias']; f['model/fc.bias'] = np.zeros(5, np.float32)" "dim 0 is 5, the model wants 4"
fallback_case flipped-attribute flip-attr "metadata checksum"
fallback_case nan-weights "d = f['model/fc.weight']; v = d[()]; v[0, 0] = np.nan; d[...] = v" "non-finite"
fallback_case incomplete "f.attrs['complete'] = 0" "incomplete"

# Nothing loads: exit 1 with the list.
damage none flip
for s in 2 4; do flip_weight_byte "$tmp/none/model_000000$s.h5" model/fc.weight; done
"${SOLO[@]}" "$prog" "$tmp/none" --resume --max-steps 8 > "$tmp/none.log" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "^mrcnn error .*--resume: none of the 3 checkpoints in .* can be loaded: .*model_0000006.h5: .*model_0000004.h5: .*model_0000002.h5: " "$tmp/none.log"; then
    bad "no loadable checkpoint: exit $rc, want 1 with the list"; tail -n 8 "$tmp/none.log"
else
    echo "no loadable checkpoint: exit 1; $(grep -m1 '^mrcnn error' "$tmp/none.log" | cut -c1-200)..."
fi

# Every step skipped: never exit 0.
"${SOLO[@]}" "$prog" "$tmp/allnan" --inject-inf 0:1000 --max-steps 5 > "$tmp/allnan.log" 2>&1
rc=$?
if [ $rc -ne 4 ] || ! grep -q "^mrcnn error: all 5 steps of this run .* were skipped" "$tmp/allnan.log"; then
    bad "fp32, 5 steps all non-finite: exit $rc, want 4"; tail -n 5 "$tmp/allnan.log"
else
    echo "fp32, every step of a 5-step run non-finite: exit 4"
fi
"${SOLO[@]}" "$prog" "$tmp/fp16nan" --set SOLVER.PRECISION=fp16 --set SOLVER.MAX_ITER=400 --inject-inf 0:100000 --max-steps 400 \
    > "$tmp/fp16nan.log" 2>&1
rc=$?
if [ $rc -ne 4 ] || ! grep -q "non-finite steps reached SOLVER.MAX_NONFINITE 10" "$tmp/fp16nan.log"; then
    bad "fp16, every step non-finite: exit $rc, want 4 once the loss scale is down to 1"; tail -n 5 "$tmp/fp16nan.log"
else
    echo "fp16, every step non-finite: exit 4 at $(grep -m1 -o 'stopping at step [0-9]*' "$tmp/fp16nan.log")"
fi
# A run with a few skipped steps among good ones still succeeds.
"${SOLO[@]}" "$prog" "$tmp/somenan" --inject-inf 2:3 --max-steps 10 > "$tmp/somenan.log" 2>&1 || { bad "3 of 10 steps non-finite: exit $?"; tail -n 5 "$tmp/somenan.log"; }

[ $fails -eq 0 ] || { echo "FAIL: $fails case(s)"; exit 1; }
echo PASS
