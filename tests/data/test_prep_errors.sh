#!/usr/bin/env bash
# mrcnn-prep coco names the real cause (each case failed on e9f6cef as said):
#  - a segmentation list mixing polygons and an RLE object is one bad annotation, skipped
#    and counted as a malformed segmentation (fatal under --strict), as the docs say;
#    before, the whole conversion aborted: "malformed JSON: expected a polygon";
#  - --images naming a file, not a directory, is an error saying so; before, every image
#    was "missing", nothing was converted, and the exit status was 0;
#  - a NUL byte (\u0000) in a category name is refused naming the category id; before,
#    the name was cut at the NUL without a word;
#  - a full disk names the file and ENOSPC ("No space left on device") and leaves no set
#    behind; before: "H5Fclose(f) returned -1". Needs root for a small tmpfs; otherwise
#    the file size limit (ulimit -f: EFBIG, "File too large") stands in.
# About 3 s.
set -u -o pipefail
. "${ROOT:-$(dirname "$0")/../..}/tests/data/prep_env.sh" json
export OMPI_MCA_ess_singleton_isolated=1

"$PREP" shapes --out "$T/a" --train 6 --val 1 --size 64x96 --seed 5 > /dev/null || fail "shapes"
J=$T/a/annotations/instances_train.json
I=$T/a/train
$PY_COCO - "$J" "$T" <<'PY' || fail "making the cases"
import copy, json, sys
src, out = sys.argv[1], sys.argv[2]
d = json.load(open(src))
poly = next(a for a in d["annotations"] if isinstance(a["segmentation"], list))
rle = next(a for a in d["annotations"] if isinstance(a["segmentation"], dict))
m = copy.deepcopy(d)
for a in m["annotations"]:
    if a["id"] == poly["id"]:
        a["segmentation"] = poly["segmentation"] + [rle["segmentation"]]
json.dump(m, open(f"{out}/mixed.json", "w"))
open(f"{out}/mixed.id", "w").write(str(poly["id"]))
n = copy.deepcopy(d)
n["categories"][1]["name"] = n["categories"][1]["name"][:2] + "\0" + n["categories"][1]["name"][2:]
json.dump(n, open(f"{out}/nul.json", "w"))
open(f"{out}/nul.id", "w").write(str(n["categories"][1]["id"]))
PY

# ---- polygons and an RLE in one segmentation list ----
"$PREP" coco --annotations "$T/mixed.json" --images "$I" --out "$T/m" --name m > "$T/o" 2>&1 ||
    { cat "$T/o"; fail "mixed polygon/RLE: the conversion failed (want: that annotation skipped)"; }
grep -qE '^ +1  missing or malformed segmentation$' "$T/o" || { cat "$T/o"; fail "mixed polygon/RLE: not counted once"; }
grep -q "annotation id $(cat "$T/mixed.id"): \"segmentation\" is a list that is not all polygons" "$T/o" ||
    { cat "$T/o"; fail "mixed polygon/RLE: the message does not name the annotation and the cause"; }
"$PREP" inspect "$T/m/m-index.h5" --check > "$T/i" 2>&1 || { cat "$T/i"; fail "mixed: the converted set fails --check"; }
"$PREP" coco --annotations "$T/mixed.json" --images "$I" --out "$T/ms" --name m --strict > "$T/o" 2>&1
expect_exit "$EXIT_ERROR" $? "mixed polygon/RLE under --strict" || { cat "$T/o"; exit 1; }
grep -q "strict.*missing or malformed segmentation" "$T/o" || { cat "$T/o"; fail "mixed under --strict: no reason"; }
echo "mixed polygon/RLE: skipped and counted (fatal under --strict)"

# ---- --images is a file ----
"$PREP" coco --annotations "$J" --images "$J" --out "$T/f" --name f > "$T/o" 2>&1
expect_exit "$EXIT_ERROR" $? "--images naming a file" || { cat "$T/o"; exit 1; }
grep -q "^mrcnn error.*--images $J is not a directory" "$T/o" || { cat "$T/o"; fail "--images FILE: the message does not say it is not a directory"; }
[ -e "$T/f/f-index.h5" ] && fail "--images FILE: an index was written"
echo "--images FILE: exit 1, 'is not a directory'"

# ---- a NUL in a category name ----
"$PREP" coco --annotations "$T/nul.json" --images "$I" --out "$T/n" --name n > "$T/o" 2>&1
expect_exit "$EXIT_ERROR" $? "a NUL in a category name" || { cat "$T/o"; exit 1; }
grep -q "^mrcnn error.*category id $(cat "$T/nul.id"): its \"name\" holds a NUL byte" "$T/o" ||
    { cat "$T/o"; fail "NUL in a category name: the message does not name the category id"; }
[ -e "$T/n/n-index.h5" ] && fail "NUL in a category name: an index was written"
echo "NUL in a category name: refused, naming category id $(cat "$T/nul.id")"

# ---- a full disk ----
bytes=$(du -sb "$I" | cut -f1)
mnt=$T/mnt
mkdir -p "$mnt"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=$(((bytes / 2 / 4096 + 1) * 4096)) mrcnn-prep-test "$mnt" 2> /dev/null; then
    trap 'umount "$mnt" 2>/dev/null; rm -rf "$T"' EXIT
    "$PREP" coco --annotations "$J" --images "$I" --out "$mnt/o" --name d > "$T/o" 2>&1
    rc=$?
    want="No space left on device"
    kind="disk full (tmpfs of $(((bytes / 2 / 4096 + 1) * 4))KiB)"
else
    ( trap '' XFSZ; ulimit -f $((bytes / 2 / 1024)); exec "$PREP" coco --annotations "$J" --images "$I" --out "$mnt/o" --name d ) > "$T/o" 2>&1
    rc=$?
    want="File too large"
    kind="file size limit (not root: no tmpfs)"
fi
expect_exit "$EXIT_ERROR" $rc "$kind" || { cat "$T/o"; exit 1; }
line=$(grep -m1 "^mrcnn error" "$T/o")
[[ $line == *"$want"* && $line == *"/.d.staging/d-00000-of-00001.h5.tmp"* ]] ||
    { cat "$T/o"; fail "$kind: the error does not name the file and '$want'"; }
[ -z "$(ls -A "$mnt/o" 2>/dev/null)" ] || { ls -A "$mnt/o"; fail "$kind: files left in --out"; }
echo "$kind: exit 1: ${line:0:200}"
echo "PASS: the converter's errors name their cause"
