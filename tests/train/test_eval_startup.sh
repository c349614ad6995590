#!/usr/bin/env bash
# DATASETS.TEST is checked before step 1 (`mrcnn train` with TEST.EVAL_PERIOD): a test
# set that evaluation would refuse (here a missing one; a damaged set, duplicate
# annotation ids or another class count go through the same loading and checks) stops
# the run at start with exit 1 naming it, before any step. Before: found at the
# first evaluation, after EVAL_PERIOD steps of training (here 3; in real runs thousands).
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
source "$ROOT/tests/common/exit_codes.sh"
M=$BUILD/mrcnn
source "$ROOT/tests/train/common_fixture.sh"
source "$ROOT/tests/common/checks.sh"
[ -x "$M" ] || { echo "not built: $M"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fixture_shards "$tmp" || exit 1
run() { # name test-set
    "${SOLO[@]}" "$M" train --config "$ROOT/configs/tiny.yaml" --set DATASETS.TRAIN="$tmp/shards/train-index.h5" \
        --set DATASETS.TEST="$2" --set TEST.EVAL_PERIOD=3 --set SOLVER.MAX_ITER=3 --set LOG_PERIOD=1 \
        --set SOLVER.IMS_PER_BATCH=2 --set OUTPUT_DIR="$tmp/out_$1" > "$tmp/$1.log" 2>&1
}
run missing "$tmp/shards/nope-index.h5"
rc=$?
msg=$(grep -m1 '^mrcnn error' "$tmp/missing.log")
if [ $rc -ne "$EXIT_ERROR" ] || ! grep -qF "$tmp/shards/nope-index.h5" <<< "$msg" || grep -q "step 1/" "$tmp/missing.log"; then
    bad "missing DATASETS.TEST: exit $rc, want 1 naming it before step 1"; tail -n 4 "$tmp/missing.log"
else
    echo "missing DATASETS.TEST: exit 1 before step 1: $(cut -c1-160 <<< "$msg")"
fi
[ $fails -eq 0 ] && echo "PASS: DATASETS.TEST is checked before step 1"
[ $fails -eq 0 ]
