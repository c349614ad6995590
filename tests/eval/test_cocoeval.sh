#!/usr/bin/env bash
# COCO evaluation against pycocotools' COCOeval on generated sets (crowd, empty images,
# > maxDets detections, all area ranges, absent categories, tied scores), bbox and segm:
# stats, summary lines and full precision/recall arrays must agree.
set -u
cd "${ROOT:-$(dirname "$0")/../..}"
BUILD=${BUILD:-build/release}
PY=${PY_COCO:-python3}
for b in "$BUILD/mrcnn" "$BUILD/tests/eval/prog_cocoeval"; do
    [ -x "$b" ] || { echo "FAIL: $b is not built"; exit 1; }
done
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY" -c 'import pycocotools' 2>/dev/null || skip coco "pycocotools is not installed for $PY"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
for seed in 7 11; do
    "$PY" tests/eval/coco_gen.py "$tmp/s$seed" 150 "$seed" || exit 1
    "$PY" tests/eval/cocoeval_check.py "$BUILD" "$tmp/s$seed" || rc=1
done
exit $rc
