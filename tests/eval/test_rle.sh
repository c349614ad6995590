#!/usr/bin/env bash
# Our RLE (src/core/rle.c) against pycocotools' mask API on ~8000 random and tricky
# cases: encode/decode, area, toBbox, frBbox, polygons, merge, iou, string forms.
set -u
cd "${ROOT:-$(dirname "$0")/../..}"
PROG=${BUILD:-build/release}/tests/eval/prog_rle
PY=${PY_COCO:-python3}
[ -x "$PROG" ] || { echo "FAIL: $PROG is not built"; exit 1; }
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY" -c 'import pycocotools' 2>/dev/null || skip coco "pycocotools is not installed for $PY"
exec "$PY" tests/eval/rle_check.py "$PROG" 1000
