#!/usr/bin/env bash
# `mrcnn eval` on bad input: every case must exit 1 (usage errors 2) with a message that
# names the problem (and, for JSON, where it is); a crash or a sanitizer's report fails.
set -u
cd "${ROOT:-$(dirname "$0")/../..}"
BIN=${BUILD:-build/release}/mrcnn
[ -x "$BIN" ] || { echo "FAIL: $BIN is not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/common/exit_codes.sh
cat > "$tmp/gt.json" <<'JSON'
{"images": [{"id": 900100581904, "height": 50, "width": 60}, {"id": 2, "height": 40, "width": 40}],
 "categories": [{"id": 1, "name": "a"}, {"id": 90, "name": "b"}],
 "annotations": [{"id": 1, "image_id": 900100581904, "category_id": 1, "bbox": [1, 2, 10, 20], "area": 200, "iscrowd": 0,
                  "segmentation": [[1, 2, 11, 2, 11, 22, 1, 22]]}]}
JSON
fails=0
# check NAME WANT_RC NEEDLE... -- ARGS
check() {
    local name=$1 want=$2; shift 2
    local needles=()
    while [ "$1" != "--" ]; do needles+=("$1"); shift; done
    shift
    "$BIN" eval "$@" > "$tmp/out" 2>&1
    local rc=$?
    local ok=1
    [ $rc -eq "$want" ] || ok=0
    for n in "${needles[@]}"; do grep -qF -- "$n" "$tmp/out" || ok=0; done
    if [ $ok = 1 ]; then echo "ok   $name (rc=$rc): $(grep -m1 -v '^loaded' "$tmp/out" | cut -c1-150)"
    else echo "FAIL $name (exit $(exit_why $rc), wanted $(exit_why "$want") and: ${needles[*]})"; sed 's/^/     | /' "$tmp/out" | head -5; fails=$((fails + 1)); fi
}
res() { printf '%s' "$2" > "$tmp/$1"; }

res good.json '[{"image_id": 900100581904, "category_id": 1, "bbox": [1, 2, 10, 20], "score": 0.9}]'
check "good results" 0 "Average Precision" "IoU=0.50:0.95" -- --gt "$tmp/gt.json" --results "$tmp/good.json" --iou-type bbox
res trunc.json '[{"image_id": 900100581904, "category_id": 1,
 "bbox": [1, 2, 10'
check "truncated results" "$EXIT_ERROR" "trunc.json" "malformed JSON" "line 2, column 19 (byte 64)" "unexpected end of input" -- --gt "$tmp/gt.json" --results "$tmp/trunc.json"
res comma.json '[{"image_id": 2, "category_id": 1, "bbox": [1, 2, 10, 20], "score": 0.9},]'
check "trailing comma" "$EXIT_ERROR" "malformed JSON" "trailing comma" "byte 73" -- --gt "$tmp/gt.json" --results "$tmp/comma.json"
res img.json '[{"image_id": 2, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5},
{"image_id": 424242424242, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5}]'
check "unknown image id" "$EXIT_ERROR" "results[1]" "line 2" "image_id 424242424242 is not in the ground truth" -- --gt "$tmp/gt.json" --results "$tmp/img.json"
res cat.json '[{"image_id": 2, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5}, {"image_id": 2, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5}, {"image_id": 2, "category_id": 7, "bbox": [1, 2, 3, 4], "score": 0.5}]'
check "unknown category id" "$EXIT_ERROR" "results[2]" "category_id 7 is not in the ground truth" -- --gt "$tmp/gt.json" --results "$tmp/cat.json"
res obj.json '{"annotations": []}'
check "results not an array" "$EXIT_ERROR" "must be a JSON array" -- --gt "$tmp/gt.json" --results "$tmp/obj.json"
res noscore.json '[{"image_id": 2, "category_id": 1, "bbox": [1, 2, 3, 4]}]'
check "result without score" "$EXIT_ERROR" "has no 'score'" "line 1" -- --gt "$tmp/gt.json" --results "$tmp/noscore.json"
res box3.json '[{"image_id": 2, "category_id": 1, "bbox": [1, 2, 3], "score": 1}]'
check "bbox of 3 numbers" "$EXIT_ERROR" "'bbox' must be 4 numbers" -- --gt "$tmp/gt.json" --results "$tmp/box3.json"
res str.json '[{"image_id": "2", "category_id": 1, "bbox": [1, 2, 3, 4], "score": 1}]'
check "string image id" "$EXIT_ERROR" "'image_id' must be an integer" -- --gt "$tmp/gt.json" --results "$tmp/str.json"
res badrle.json '[{"image_id": 2, "category_id": 1, "score": 1, "segmentation": {"size": [40, 40], "counts": "PPP"}}]'
check "malformed RLE string" "$EXIT_ERROR" "results[0]: malformed RLE counts string" -- --gt "$tmp/gt.json" --results "$tmp/badrle.json" --iou-type segm
check "missing results file" "$EXIT_ERROR" "cannot open" "nope.json" -- --gt "$tmp/gt.json" --results "$tmp/nope.json"
printf '{"images": [], "categories": [' > "$tmp/badgt.json"
check "malformed gt" "$EXIT_ERROR" "badgt.json" "malformed JSON" -- --gt "$tmp/badgt.json" --results "$tmp/good.json"
check "bad iou type" "$EXIT_USAGE" "--iou-type must be bbox, segm or both" -- --gt "$tmp/gt.json" --results "$tmp/good.json" --iou-type keypoints
check "missing --gt" "$EXIT_USAGE" "--gt and --results are required" -- --results "$tmp/good.json"
check "help" 0 "usage: mrcnn eval" "--per-category" -- --help
echo "$fails failures"
[ $fails -eq 0 ]
