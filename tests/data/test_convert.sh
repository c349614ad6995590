#!/usr/bin/env bash
# COCO -> shards -> export: the same annotations and pycocotools-identical masks;
# 1, 2 and 3 ranks give the same content; the shapes generator is deterministic.
set -u -o pipefail
. "${ROOT:-$(dirname "$0")/../..}/tests/data/prep_env.sh" pycocotools

for c in coco shapes inspect export; do
    "$PREP" $c --help > "$T/help.txt" || fail "$c --help exits non-zero"
    grep -q "usage: .*mrcnn-prep $c" "$T/help.txt" || fail "$c --help prints no usage"
done
"$PREP" --help | grep -q "inspect" || fail "mrcnn-prep --help lists no commands"
"$PREP" nonsense > "$T/u.txt" 2>&1
expect_exit "$EXIT_USAGE" $? "an unknown command" || { cat "$T/u.txt"; exit 1; }
"$PREP" coco --shards 2 > "$T/u.txt" 2>&1
expect_exit "$EXIT_USAGE" $? "coco without --annotations" || { cat "$T/u.txt"; exit 1; }

"$PREP" shapes --out "$T/a" --train 24 --val 8 --size 96x128 --seed 5 >/dev/null || fail "shapes"
"$PREP" shapes --out "$T/b" --train 24 --val 8 --size 96x128 --seed 5 >/dev/null || fail "shapes again"
"$PREP" shapes --out "$T/c" --train 24 --val 8 --size 96x128 --seed 6 >/dev/null || fail "shapes seed 6"
diff -r "$T/a" "$T/b" >/dev/null || fail "shapes with the same seed differ"
cmp -s "$T/a/annotations/instances_train.json" "$T/c/annotations/instances_train.json" && fail "a different seed gives the same JSON"
cmp -s "$T/a/train/000000000001.jpg" "$T/c/train/000000000001.jpg" && fail "a different seed gives the same image"

S=$T/a/annotations/instances_train.json
"$PREP" coco --annotations "$S" --images "$T/a/train" --out "$T/r1" --shards 4 > "$T/r1.log" 2>&1 || { cat "$T/r1.log"; fail "convert, 1 rank"; }
grep -q "24 written of 24" "$T/r1.log" || { cat "$T/r1.log"; fail "not all images written"; }
grep -q "bad input    none" "$T/r1.log" || { cat "$T/r1.log"; fail "clean input reported as bad"; }
"$PREP" inspect "$T/r1/instances_train-index.h5" --check > "$T/check.log" || { cat "$T/check.log"; fail "inspect --check"; }
grep -q "check: ok" "$T/check.log" || fail "inspect --check did not say ok"
# Balanced by bytes: shard sizes differ by at most the largest image.
biggest=$(ls -l "$T/a/train" | awk 'NR > 1 && $5 > m { m = $5 } END { print m }')
awk -v big="$biggest" '/ bytes$/ { b = $(NF-1); if (min == "" || b < min) min = b; if (b > max) max = b }
    END { if (max - min > big || min <= 0) { print "shards unbalanced: " min " .. " max " bytes (largest image " big ")"; exit 1 } }' \
    "$T/check.log" || fail "shards are not balanced by bytes"
"$PREP" export "$T/r1/instances_train-index.h5" --out "$T/r1.json" >/dev/null || fail "export"
# --check finds damage: an image's first bytes, then an RLE string, overwritten in place.
for what in image rle; do
    rm -rf "$T/bad" && cp -r "$T/r1" "$T/bad"
    $PY_COCO - "$T/bad/instances_train-00001-of-00004.h5" "$T/r1.json" "$what" <<'PY' || fail "could not damage a shard"
import json, sys
path, exported, what = sys.argv[1:4]
data = bytearray(open(path, "rb").read())
if what == "image":
    at = data.find(b"\xff\xd8\xff")
    data[at:at + 3] = b"\0\0\0"
else:
    for a in json.load(open(exported))["annotations"]:
        at = data.find(a["segmentation"]["counts"].encode())
        if at >= 0 and len(a["segmentation"]["counts"]) > 4:
            data[at + 2] = ord("0") if data[at + 2] != ord("0") else ord("1")
            break
    else:
        sys.exit(1)
open(path, "wb").write(data)
PY
    "$PREP" inspect "$T/bad/instances_train-index.h5" --check > "$T/bad.log" 2>&1
    expect_exit "$EXIT_ERROR" $? "--check of a damaged $what" || { cat "$T/bad.log"; exit 1; }
    grep -q "check: FAILED" "$T/bad.log" || fail "--check did not report the damaged $what"
done
$PY_COCO "$ROOT/tests/data/coco_compare.py" "$S" "$T/r1.json" | tail -3 || fail "export differs from the source (pycocotools)"

for np in 2 3; do
    mpirun --oversubscribe -np $np "$PREP" coco --annotations "$S" --images "$T/a/train" --out "$T/r$np" --shards 4 > "$T/r$np.log" 2>&1 \
        || { cat "$T/r$np.log"; fail "convert, $np ranks"; }
    "$PREP" export "$T/r$np/instances_train-index.h5" --out "$T/r$np.json" >/dev/null || fail "export ($np ranks)"
    cmp -s "$T/r1.json" "$T/r$np.json" || fail "$np ranks give other content than 1 rank"
    for s in 0 1 2 3; do
        f=instances_train-0000$s-of-00004.h5
        h5diff "$T/r1/$f" "$T/r$np/$f" >/dev/null || fail "$f differs between 1 and $np ranks"
    done
    ls "$T/r$np" | grep -q tmp && fail "temporary files left behind ($np ranks)"
done

# Progress with an ETA only when stderr is a terminal.
grep -q "ETA" "$T/r1.log" && fail "progress printed although not on a terminal"
if command -v script > /dev/null; then
    script -qec "'$PREP' coco --annotations '$S' --images '$T/a/train' --out '$T/tty' --shards 2" /dev/null > "$T/tty.log" 2>&1 \
        || { cat "$T/tty.log"; fail "convert on a terminal"; }
    grep -q "parse: 100.0% .*ETA" "$T/tty.log" && grep -q "write (rank 0): 100.0% .*ETA" "$T/tty.log" \
        || { cat "$T/tty.log"; fail "no progress with ETA on a terminal"; }
fi

# The val split has the usual key order; extra.json adds multi-polygon, crowd
# uncompressed RLE, a missing area and ids beyond 2^32.
"$PREP" coco --annotations "$T/a/annotations/instances_val.json" --images "$T/a/val" --out "$T/v" --name val > /dev/null || fail "convert val"
"$PREP" export "$T/v/val-index.h5" --out "$T/v.json" > /dev/null || fail "export val"
$PY_COCO "$ROOT/tests/data/coco_compare.py" "$T/a/annotations/instances_val.json" "$T/v.json" | tail -1 || fail "val export differs"
$PY_COCO "$ROOT/tests/data/make_cases.py" "$S" "$T/a/train" "$T/cases" > /dev/null || fail "make_cases.py"
"$PREP" coco --annotations "$T/cases/extra.json" --images "$T/a/train" --out "$T/x" --name extra > "$T/x.log" || { cat "$T/x.log"; fail "convert extra"; }
"$PREP" inspect "$T/x/extra-index.h5" --check > /dev/null || fail "inspect --check extra"
"$PREP" export "$T/x/extra-index.h5" --out "$T/x.json" > /dev/null || fail "export extra"
$PY_COCO "$ROOT/tests/data/coco_compare.py" "$T/cases/extra.json" "$T/x.json" | tail -3 || fail "extra export differs (pycocotools)"
"$PREP" inspect "$T/x/extra-index.h5" --render 0 --png "$T/r.png" > /dev/null || fail "render"
$PY_COCO -c "import sys; d=open('$T/r.png','rb').read(); sys.exit(d[:4] != b'\x89PNG')" || fail "render wrote no PNG"
echo "PASS: conversion, export parity with pycocotools, 1/2/3 ranks identical"
