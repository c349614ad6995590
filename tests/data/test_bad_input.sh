#!/usr/bin/env bash
# Every kind of bad input: reported with a message and a count (and skipped, or kept
# and flagged), and fatal with --strict; malformed JSON always fatal with its position.
set -u -o pipefail
. "${ROOT:-$(dirname "$0")/../..}/tests/data/prep_env.sh" pycocotools

"$PREP" shapes --out "$T/a" --train 6 --val 1 --size 64x96 --seed 9 >/dev/null || fail "shapes"
$PY_COCO "$ROOT/tests/data/make_cases.py" "$T/a/annotations/instances_train.json" "$T/a/train" "$T/c" >/dev/null || fail "make_cases.py"
I=$T/a/train

# Everything at once, not strict: exit 0, each kind counted, the rest converted intact.
"$PREP" coco --annotations "$T/c/mixed.json" --images "$I" --out "$T/m" --shards 2 --name mixed > "$T/m.out" 2> "$T/m.err" \
    || { cat "$T/m.out" "$T/m.err"; fail "non-strict conversion of bad input failed"; }
expect_count() { # count, kind text
    grep -qE "^ +$1  $2\$" "$T/m.out" || { cat "$T/m.out"; fail "summary lacks '$1  $2'"; }
}
expect_count 1 "missing or unreadable image"
expect_count 2 "truncated or corrupt image"
expect_count 1 "file_name escapes the image folder"
expect_count 1 "image without annotations \(kept, flagged\)"
expect_count 1 "annotation with unknown image"
expect_count 1 "annotation with unknown category"
expect_count 2 "box under 1 pixel wide or high"
expect_count 1 "polygon with fewer than 3 points"
expect_count 4 "annotation of a skipped image"
grep -q "truncated JPEG" "$T/m.err" || { cat "$T/m.err"; fail "no 'truncated JPEG' message"; }
grep -q "does_not_exist.jpg" "$T/m.err" || fail "the missing file is not named"
grep -q "category_id" "$T/m.err" || fail "the unknown category is not explained"
"$PREP" inspect "$T/m/mixed-index.h5" --check > /dev/null || fail "inspect --check after skipping"
"$PREP" export "$T/m/mixed-index.h5" --out "$T/m.json" > /dev/null || fail "export"
$PY_COCO "$ROOT/tests/data/coco_compare.py" "$T/c/mixed.json" "$T/m.json" "$T/c/skip.json" > "$T/cmp.log" \
    || { cat "$T/cmp.log"; fail "the kept content differs from the source"; }
$PY_COCO - "$T/m.json" <<'PY' || fail "the flagged image without annotations was not kept"
import json, sys
d = json.load(open(sys.argv[1]))
assert any(im["file_name"] == "lonely.jpg" for im in d["images"])
PY

# Each kind alone with --strict: exit 1, the kind named, no index written.
for k in missing truncated corrupt escape unknown_image unknown_category zero_box negative_box short_polygon; do
    rm -rf "$T/s"
    "$PREP" coco --annotations "$T/c/strict_$k.json" --images "$I" --out "$T/s" --strict --name s > "$T/s.out" 2>&1
    expect_exit "$EXIT_ERROR" $? "--strict with bad input '$k'" || { cat "$T/s.out"; exit 1; }
    grep -q "strict" "$T/s.out" || { cat "$T/s.out"; fail "'$k': the message does not say --strict made it fatal"; }
    [ -e "$T/s/s-index.h5" ] && fail "'$k': an index was written after a fatal error"
    ls "$T/s" 2>/dev/null | grep -v tmp | grep -q . && fail "'$k': a shard without .tmp exists after a fatal error"
    # ...and without --strict the same input converts.
    "$PREP" coco --annotations "$T/c/strict_$k.json" --images "$I" --out "$T/s" --name s > /dev/null 2>&1 || fail "'$k' non-strict failed"
done

# An image without annotations is normal data (COCO train2017 has about a thousand):
# counted and noted, kept, never fatal, with --strict too.
rm -rf "$T/s"
"$PREP" coco --annotations "$T/c/strict_no_annotations.json" --images "$I" --out "$T/s" --strict --name s > "$T/s.out" 2>&1
expect_exit 0 $? "--strict with an image without annotations" || { cat "$T/s.out"; exit 1; }
"$PREP" export "$T/s/s-index.h5" --out "$T/s.json" > /dev/null || fail "export of the strict set with an image without annotations"
$PY_COCO - "$T/s.json" <<'PY' || fail "--strict: the image without annotations was not kept"
import json, sys
assert any(im["file_name"] == "lonely.jpg" for im in json.load(open(sys.argv[1]))["images"])
PY

# Strict in a multi-rank run: the failure takes the whole job down, with exit 1.
mpirun --oversubscribe -np 2 "$PREP" coco --annotations "$T/c/strict_truncated.json" --images "$I" --out "$T/s2" --shards 2 --strict > "$T/s2.out" 2>&1
expect_exit "$EXIT_ERROR" $? "--strict with 2 ranks and a truncated JPEG" || { cat "$T/s2.out"; exit 1; }
grep -q "strict" "$T/s2.out" || { cat "$T/s2.out"; fail "2 ranks: the message does not say --strict made it fatal"; }

# Malformed JSON: always fatal (exit 1), with line and byte offset.
for b in truncated syntax; do
    "$PREP" coco --annotations "$T/c/broken_$b.json" --images "$I" --out "$T/b" > "$T/b.out" 2>&1
    expect_exit "$EXIT_ERROR" $? "malformed JSON ($b)" || { cat "$T/b.out"; exit 1; }
    grep -q "malformed JSON: line [0-9]*, column [0-9]* (byte [0-9]*)" "$T/b.out" || { cat "$T/b.out"; fail "no line/byte in the JSON error ($b)"; }
done
echo "PASS: every bad input reported and counted, fatal with --strict"
