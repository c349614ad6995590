#!/usr/bin/env bash
# `mrcnn eval` hardening: numbers that are not finite or far out of range
# (1e400 parses as inf), integers beyond their range (never truncated to 32 bits), and
# uncompressed RLE whose counts do not add up to h x w (IoU's walk over two masks then
# never ended) are refused where they enter, in results and in ground truth: exit 1 with
# one line naming the file, the record (results[i], annotations[i], images[i]) and the
# field. Valid files still evaluate.
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$ROOT"
BIN=${BUILD:-build/release}/mrcnn
[ -x "$BIN" ] || { echo "FAIL: $BIN is not built"; exit 1; }
. "$ROOT/tests/common/exit_codes.sh"
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# gt FILE [ANNOTATION_JSON] [IMAGE_1_EXTRA]: two images (128x128, 40x40), one category,
# a valid polygon annotation and the given extra one.
gt() {
    local extra=${2:-} img=${3:-}
    printf '%s' '{"images": [{"id": 1, "height": 128, "width": 128'"$img"'}, {"id": 2, "height": 40, "width": 40}],
 "categories": [{"id": 1, "name": "a"}],
 "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 400, "iscrowd": 0,
                  "segmentation": [[10, 10, 30, 10, 30, 30, 10, 30]]}'"${extra:+, $extra}"']}' > "$tmp/$1"
}
res() { printf '%s' "$2" > "$tmp/$1"; }
# check NAME WANT_RC NEEDLE... -- ARGS
check() {
    local name=$1 want=$2
    shift 2
    local needles=()
    while [ "$1" != "--" ]; do needles+=("$1"); shift; done
    shift
    timeout 60 "$BIN" eval "$@" > "$tmp/out" 2>&1
    local rc=$? ok=1 n
    expect_exit "$want" $rc "$name" > "$tmp/why" || ok=0
    local line
    line=$(grep -m1 "mrcnn error" "$tmp/out")
    [ "$want" = 0 ] && line=$(cat "$tmp/out")
    for n in "${needles[@]}"; do [[ "$line" == *"$n"* ]] || ok=0; done
    if [ $ok = 1 ]; then
        echo "ok   $name: $(echo "$line" | head -1 | cut -c1-170)"
    else
        echo "FAIL $name (rc=$rc, wanted $want and: ${needles[*]})"
        cat "$tmp/why"
        grep -v "^ *|" "$tmp/out" | head -4 | sed 's/^/     | /'
        fails=$((fails + 1))
    fi
}
E=$EXIT_ERROR
R='"image_id": 1, "category_id": 1'
gt gt.json
res good.json "[{$R, \"bbox\": [10, 10, 20, 20], \"score\": 0.9, \"segmentation\": {\"size\": [128, 128], \"counts\": [1290, 20, 108, 20, 14946]}}]"
check "valid results still evaluate" 0 "Average Precision" -- --gt "$tmp/gt.json" --results "$tmp/good.json" --iou-type both

# ---- results: non-finite and out-of-range numbers ----
res r1.json "[{$R, \"bbox\": [10, 10, 1e400, 1e400], \"score\": 0.9}]"
check "results bbox w, h = 1e400" $E "r1.json" "results[0]" "'bbox'" "finite" "1e400" -- --gt "$tmp/gt.json" --results "$tmp/r1.json" --iou-type bbox
res r2.json "[{$R, \"bbox\": [10, 10, 20, 20], \"score\": 0.5}, {$R, \"bbox\": [1e400, 10, 10, 10], \"score\": 0.9}]"
check "results bbox x = 1e400" $E "r2.json" "results[1]" "'bbox'" "line 1" -- --gt "$tmp/gt.json" --results "$tmp/r2.json" --iou-type bbox
res r3.json "[{$R, \"bbox\": [10, 10, 20, 20], \"score\": 1e400}]"
check "results score = 1e400" $E "r3.json" "results[0]" "'score'" "finite" -- --gt "$tmp/gt.json" --results "$tmp/r3.json"
res r4.json "[{$R, \"bbox\": [10, 10, 20, 20], \"score\": -1e999}]"
check "results score = -1e999" $E "results[0]" "'score'" -- --gt "$tmp/gt.json" --results "$tmp/r4.json"
res r5.json "[{$R, \"bbox\": [1e30, 10, 20, 20], \"score\": 0.5}]"
check "results bbox far outside the image" $E "r5.json" "results[0]" "'bbox'" "image 1 (128x128)" -- --gt "$tmp/gt.json" --results "$tmp/r5.json" --iou-type bbox
res r6.json "[{$R, \"bbox\": [10, 10, 20, 20], \"score\": 0.5, \"segmentation\": [[10, 10, 1e9, 10, 30, 30]]}]"
check "results polygon coordinate 1e9" $E "r6.json" "results[0]" "'segmentation'" -- --gt "$tmp/gt.json" --results "$tmp/r6.json" --iou-type segm
res r7.json "[{$R, \"bbox\": [10, 10, 20, 20], \"score\": 0.5, \"segmentation\": [[10, 10, 1e400, 10, 30, 30]]}]"
check "results polygon coordinate 1e400" $E "results[0]" "'segmentation'" "finite" -- --gt "$tmp/gt.json" --results "$tmp/r7.json" --iou-type segm

# ---- 3: uncompressed RLE that does not add up to h x w (was an endless loop) ----
res r8.json "[{$R, \"score\": 0.5, \"segmentation\": {\"size\": [128, 128], \"counts\": [0, 20000]}}]"
check "results RLE counts [0, 20000] on 128x128" $E "r8.json" "results[0]" "'counts' add up to 20000" "16384" -- --gt "$tmp/gt.json" --results "$tmp/r8.json" --iou-type segm
res r9.json "[{$R, \"score\": 0.5, \"segmentation\": {\"size\": [128, 128], \"counts\": [5, 10]}}]"
check "results RLE counts short of h x w" $E "results[0]" "add up to 15" -- --gt "$tmp/gt.json" --results "$tmp/r9.json" --iou-type segm
gt g1.json '{"id": 2, "image_id": 1, "category_id": 1, "bbox": [0, 0, 128, 128], "area": 100, "iscrowd": 1, "segmentation": {"size": [128, 128], "counts": [0, 20000]}}'
check "gt RLE counts [0, 20000] on 128x128" $E "g1.json" "annotations[1]" "'counts' add up to 20000" -- --gt "$tmp/g1.json" --results "$tmp/good.json" --iou-type segm

# ---- 7: integers beyond their range are refused, never truncated ----
gt g2.json "" ', "junk": 0, "height": 4294967424'
check "gt image height 2^32 + 128" $E "g2.json" "images[0]" "'height'" "4294967424" -- --gt "$tmp/g2.json" --results "$tmp/good.json"
gt g3.json "" ', "width": -4294967168'
check "gt image width -2^32 + 128" $E "images[0]" "'width'" -- --gt "$tmp/g3.json" --results "$tmp/good.json"
gt g4.json '{"id": 2, "image_id": 1, "category_id": 1, "bbox": [0, 0, 128, 128], "area": 100, "iscrowd": 0, "segmentation": {"size": [4294967424, 128], "counts": "PPYo0"}}'
check "gt RLE size 2^32 + 128" $E "g4.json" "annotations[1]" "'size'" -- --gt "$tmp/g4.json" --results "$tmp/good.json" --iou-type segm
res r10.json "[{$R, \"score\": 0.5, \"segmentation\": {\"size\": [128, 4294967424], \"counts\": [0, 16384]}}]"
check "results RLE size 2^32 + 128" $E "results[0]" "'size'" -- --gt "$tmp/gt.json" --results "$tmp/r10.json" --iou-type segm

# ---- ground truth: non-finite and out-of-range numbers ----
gt g5.json '{"id": 2, "image_id": 1, "category_id": 1, "bbox": [10, 10, 1e400, 1e400], "area": 100, "iscrowd": 0, "segmentation": [[10, 10, 30, 10, 30, 30]]}'
check "gt bbox 1e400" $E "g5.json" "annotations[1]" "'bbox'" "finite" -- --gt "$tmp/g5.json" --results "$tmp/good.json"
gt g6.json '{"id": 2, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 1e400, "iscrowd": 0, "segmentation": [[10, 10, 30, 10, 30, 30]]}'
check "gt area 1e400" $E "annotations[1]" "'area'" -- --gt "$tmp/g6.json" --results "$tmp/good.json"
gt g7.json '{"id": 2, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": -5, "iscrowd": 0, "segmentation": [[10, 10, 30, 10, 30, 30]]}'
check "gt area -5" $E "annotations[1]" "'area'" "negative" -- --gt "$tmp/g7.json" --results "$tmp/good.json"
gt g8.json '{"id": 2, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 5, "iscrowd": 0, "segmentation": [[10, 10, 30, 10, 30, 4e8]]}'
check "gt polygon coordinate 4e8" $E "g8.json" "annotations[1]" "'segmentation'" "image 1 (128x128)" -- --gt "$tmp/g8.json" --results "$tmp/good.json" --iou-type segm
gt g9.json '{"id": 2, "image_id": 1, "category_id": 1, "bbox": [1e30, 10, 20, 20], "area": 5, "iscrowd": 0, "segmentation": [[10, 10, 30, 10, 30, 30]]}'
check "gt bbox far outside the image" $E "annotations[1]" "'bbox'" -- --gt "$tmp/g9.json" --results "$tmp/good.json" --iou-type bbox
gt g10.json '{"id": 2, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 5, "iscrowd": 7, "segmentation": [[10, 10, 30, 10, 30, 30]]}'
check "gt iscrowd 7" $E "annotations[1]" "'iscrowd'" -- --gt "$tmp/g10.json" --results "$tmp/good.json"
gt g11.json '{"id": 2, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 5, "iscrowd": 1e400, "segmentation": [[10, 10, 30, 10, 30, 30]]}'
check "gt iscrowd 1e400" $E "annotations[1]" "'iscrowd'" -- --gt "$tmp/g11.json" --results "$tmp/good.json"
# Boxes and polygons a little outside the image are real data, and stay accepted.
gt g12.json '{"id": 2, "image_id": 2, "category_id": 1, "bbox": [-3, 30, 45, 12.5], "area": 50, "iscrowd": 0, "segmentation": [[-3, 30, 42, 30, 42, 42.5]]}'
res r11.json "[{\"image_id\": 2, \"category_id\": 1, \"bbox\": [-2, 29, 46, 14], \"score\": 0.7, \"segmentation\": [[-2, 29, 44, 29, 44, 43]]}]"
check "boxes and polygons reaching past the image still evaluate" 0 "Average Precision" -- --gt "$tmp/g12.json" --results "$tmp/r11.json" --iou-type both

echo "$fails failures"
[ $fails -eq 0 ]
