#!/usr/bin/env bash
# Hardening of the data path: bad numbers, names, links and sizes in a COCO
# JSON are skipped and counted (fatal with --strict) or refused where they enter; an
# image without annotations is normal data, also under --strict; a failed conversion
# leaves the previous set in --out untouched; every field of a damaged shard is checked
# when the shard is opened, by every reader (inspect, eval's ground truth, the training
# loader), and a flipped byte in any dataset fails its checksum. Every failure must be
# exit 1 with one line naming the file, the field or dataset and the index.
set -u -o pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-build/release}
PREP=$ROOT/$BUILD/mrcnn-prep
POKE=$ROOT/$BUILD/tests/data/prog_h5poke
READ=$ROOT/$BUILD/tests/data/prog_shard_read
for p in "$PREP" "$POKE" "$READ"; do [ -x "$p" ] || { echo "not built: $p"; exit 1; }; done
. "$ROOT/tests/common/skip.sh"
. "$ROOT/tests/common/exit_codes.sh"
PY=${PY_COCO:-python3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
MPI="mpirun --oversubscribe"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
source "$ROOT/tests/common/checks.sh" # fails, bad, wait_for

"$PREP" shapes --out "$T/a" --train 6 --val 2 --size 64x96 --seed 3 > /dev/null || { echo "FAIL: shapes"; exit 1; }
I=$T/a/train
S=$T/a/annotations/instances_train.json
$PY "$ROOT/tests/data/hardening_cases.py" "$S" "$I" "$T/c" > /dev/null || { echo "FAIL: hardening_cases.py"; exit 1; }
n_img=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))['images']))" "$S")
n_ann=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))['annotations']))" "$S")

# ---- 1, 3, 4, 5, 7, 8, 9: the converter's boundary -------------------------------------
while read -r case kind id field; do
    [ "$kind" = "-" ] || [ "$case" = last_truncated ] && continue
    J=$T/c/$case.json
    rm -rf "$T/o"
    "$PREP" coco --annotations "$J" --images "$I" --out "$T/o" --name o > "$T/o.out" 2> "$T/o.err"
    rc=$?
    if [ "$kind" = fatal ]; then
        expect_exit "$EXIT_ERROR" $rc "$case: an out-of-range image $field" || { bad "$case"; head -3 "$T/o.err"; continue; }
        grep -q "mrcnn error.*$field" "$T/o.err" && grep -q "must be" "$T/o.err" \
            || { bad "$case: the error does not name '$field' and its range"; head -3 "$T/o.err"; }
        [ -e "$T/o/o-index.h5" ] && bad "$case: an index was written"
        continue
    fi
    expect_exit 0 $rc "$case without --strict" || { bad "$case"; tail -3 "$T/o.err"; continue; }
    want=1
    [ "$case" = symlinks ] && want=2
    kindtext=${kind//+/ }
    grep -qF -- "$(printf '%8d  %s' "$want" "$kindtext")" "$T/o.out" || { bad "$case: the summary lacks '$want  $kindtext'"; cat "$T/o.out" "$T/o.err" | head -30; }
    if [ "$field" != "-" ]; then
        what="annotation id $id"
        [ "$field" = file_name ] && what="image id"
        grep -q "$what.*$field" "$T/o.err" || { bad "$case: no message names '$what' and '$field'"; cat "$T/o.err"; }
    fi
    "$PREP" inspect "$T/o/o-index.h5" --check > "$T/o.chk" 2>&1 || { bad "$case: inspect --check of the result"; tail -3 "$T/o.chk"; }
    "$PREP" export "$T/o/o-index.h5" --out "$T/o.json" > /dev/null 2>&1 || bad "$case: export"
    case $case in
    name_nul)
        $PY - "$T/o.json" "$n_img" <<'PY' || bad "name_nul: the image named with a NUL byte was stored"
import json, sys
d = json.load(open(sys.argv[1]))
names = [im["file_name"] for im in d["images"]]
assert len(names) == len(set(names)) == int(sys.argv[2]), names
PY
        ;;
    symlinks)
        grep -q '"alias.jpg"' "$T/o.json" || bad "symlinks: a link that stays inside --images was rejected"
        grep -q '"link_out.jpg"\|outside/x.jpg' "$T/o.json" && bad "symlinks: a link out of --images was read"
        ;;
    lonely)
        grep -q '"lonely.jpg"' "$T/o.json" || bad "lonely: the image without annotations was not kept"
        ;;
    esac
    # --strict: fatal, except for an image without annotations (normal data).
    rm -rf "$T/o"
    "$PREP" coco --annotations "$J" --images "$I" --out "$T/o" --name o --strict > "$T/o.out" 2> "$T/o.err"
    rc=$?
    if [ "$case" = lonely ]; then
        expect_exit 0 $rc "lonely: an image without annotations under --strict" || { bad "lonely --strict"; tail -3 "$T/o.err"; }
        "$PREP" export "$T/o/o-index.h5" --out "$T/o.json" > /dev/null 2>&1 && grep -q '"lonely.jpg"' "$T/o.json" \
            || bad "lonely --strict: not kept"
        continue
    fi
    expect_exit "$EXIT_ERROR" $rc "$case with --strict" || { bad "$case --strict"; continue; }
    grep -q "strict" "$T/o.err" || { bad "$case --strict: the message does not say --strict made it fatal"; cat "$T/o.err"; }
    [ -z "$(ls -A "$T/o" 2>/dev/null)" ] || { bad "$case --strict: files left in --out"; ls -A "$T/o"; }
done < "$T/c/cases.txt"
echo "converter cases done ($fails failures so far)"

# ---- 10: a failed conversion leaves the previous set untouched ---------------------------
"$PREP" coco --annotations "$S" --images "$I" --out "$T/re" --shards 3 --name set > /dev/null 2>&1 || bad "first conversion"
cp -a "$T/re" "$T/re.orig"
for np in 1 2; do
    $MPI -np $np "$PREP" coco --annotations "$T/c/last_truncated.json" --images "$I" --out "$T/re" --shards 3 --name set --strict \
        > "$T/re.log" 2>&1
    expect_exit "$EXIT_ERROR" $? "--strict re-conversion with a truncated last image ($np ranks)" || { bad "re-conversion rc"; tail -5 "$T/re.log"; }
    diff -r "$T/re.orig" "$T/re" > "$T/re.diff" 2>&1 || { bad "a failed --strict re-conversion ($np ranks) changed the previous set"; head "$T/re.diff"; }
done
"$PREP" inspect "$T/re/set-index.h5" --check > /dev/null 2>&1 || bad "the previous set no longer passes inspect --check"
# A successful re-conversion replaces the set and leaves nothing else behind.
$MPI -np 2 "$PREP" coco --annotations "$T/c/smaller.json" --images "$I" --out "$T/re" --shards 3 --name set > "$T/re.log" 2>&1 \
    || { bad "re-conversion of a valid set"; tail -5 "$T/re.log"; }
"$PREP" inspect "$T/re/set-index.h5" --check > "$T/re.chk" 2>&1 || bad "the new set fails inspect --check"
grep -q "3 shards, 4 images" "$T/re.chk" || { bad "the new set is not the one converted last"; head -2 "$T/re.chk"; }
# The new shards come in beside the old ones under a new generation's names (plain names
# taken: NAME-SSSSS-of-NNNNN.g1.h5), the index is renamed over the old one, the old shards go.
named=$( (echo set-index.h5; awk '$1 == "check" && $3 == "ok" {print $2}' "$T/re.chk") | sort | tr '\n' ' ')
[ "$(ls -A "$T/re" | sort | tr '\n' ' ')" = "$named" ] && [ "$named" = "set-00000-of-00003.g1.h5 set-00001-of-00003.g1.h5 set-00002-of-00003.g1.h5 set-index.h5 " ] \
    || { bad "unexpected files in --out after a re-conversion (want those the index names: $named)"; ls -A "$T/re"; }
echo "re-conversion cases done ($fails failures so far)"

# ---- 1, 2, 3: damaged shard fields are refused when a shard is opened ----------------------
"$PREP" coco --annotations "$S" --images "$I" --out "$T/v" --shards 2 --name v > /dev/null 2>&1 || { echo "FAIL: convert v"; exit 1; }
"$PREP" inspect "$T/v/v-index.h5" --check > /dev/null 2>&1 || bad "the undamaged set fails inspect --check"
for r in gt read; do "$READ" $r "$T/v/v-index.h5" > /dev/null 2>&1 || bad "prog_shard_read $r of the undamaged set"; done
$MPI -np 1 "$READ" loader "$T/v/v-index.h5" > /dev/null 2>&1 || bad "the loader on the undamaged set"
SH=v-00000-of-00002.h5
# readers DIR FILE WHAT NEEDLE...: every reader in READERS exits 1 with an error line
# holding the file name and every needle. The training loader (an mpirun each, the
# slowest) runs for the cases of the issue and the checksums; it opens shards through
# the same mrcnn_shard_set_open_shard as the others.
ALL="inspect gt read loader"
readers() {
    local dir=$1 file=$2 what=$3
    shift 3
    local r rc
    for r in ${READERS:-inspect gt read}; do
        case $r in
        inspect) "$PREP" inspect "$dir/v-index.h5" --check > "$T/r.log" 2>&1 ;;
        loader) timeout 120 $MPI -np 1 "$READ" loader "$dir/v-index.h5" > "$T/r.log" 2>&1 ;;
        *) timeout 120 "$READ" $r "$dir/v-index.h5" > "$T/r.log" 2>&1 ;;
        esac
        rc=$?
        expect_exit "$EXIT_ERROR" $rc "$what: $r" || { bad "$what: $r"; grep -v "^ " "$T/r.log" | head -4; continue; }
        local line
        line=$(grep -m1 "mrcnn error" "$T/r.log")
        [ -n "$line" ] || line=$(grep -m1 "inspect: .*$file" "$T/r.log")
        local n ok=1
        for n in "$file" "$@"; do [[ "$line" == *"$n"* ]] || ok=0; done
        [ $ok = 1 ] || { bad "$what: $r: the error line lacks one of: $file $*"; echo "     | $line"; }
    done
}
# poke KIND FILE TARGET INDEX VALUE NEEDLE... (KIND set: dataset TARGET[INDEX]; attr: attribute TARGET, INDEX "-")
poke() {
    local kind=$1 file=$2 target=$3 index=$4 value=$5
    shift 5
    rm -rf "$T/d" && cp -a "$T/v" "$T/d"
    if [ "$kind" = set ]; then "$POKE" set "$T/d/$file" "$target" "$index" "$value" || { bad "poke $target"; return; }
    else "$POKE" attr "$T/d/$file" "$target" "$value" || { bad "poke $target"; return; }; fi
    readers "$T/d" "$file" "$target[$index] = $value" "$@"
}
READERS=$ALL poke set $SH annotations/rle_offset 5 1000000000 "annotations/rle_offset" "[5]"
poke set $SH annotations/rle_offset 0 -4 "annotations/rle_offset" "[0]"
READERS=$ALL poke set $SH images/ann_count 0 -3 "images/ann_count" "[0]"
poke set $SH images/ann_count 1 1000000000 "images/ann_count" "[1]"
READERS=$ALL poke set $SH images/ann_start 1 1000000000 "images/ann_start" "[1]"
READERS=$ALL poke set $SH images/ann_start 1 -1 "images/ann_start" "[1]"
READERS=$ALL poke set $SH annotations/image 0 50 "annotations/image" "[0]"
poke set $SH annotations/image 3 -1 "annotations/image" "[3]"
poke set $SH images/offset 1 1000000000000 "images/offset" "[1]"
poke set $SH images/length 0 -1 "images/length" "[0]"
poke set $SH images/length 1 4611686018427387904 "images/length" "[1]"
poke set $SH images/height 0 0 "images/height" "[0]"
READERS=$ALL poke set $SH images/width 1 70000 "images/width" "[1]"
poke set $SH images/names_offset 1 1000000000 "images/names_offset" "[1]"
READERS=$ALL poke set $SH annotations/class 2 99 "annotations/class" "[2]"
poke set $SH annotations/class 2 -1 "annotations/class" "[2]"
poke set $SH annotations/category_id 1 424242 "annotations/category_id" "[1]"
poke set $SH annotations/iscrowd 0 7 "annotations/iscrowd" "[0]"
READERS=$ALL poke set $SH annotations/bbox 2 inf "annotations/bbox" "[0]"
poke set $SH annotations/bbox 4 nan "annotations/bbox" "[1]"
poke set $SH annotations/bbox 8 1e30 "annotations/bbox" "[2]"
poke set $SH annotations/area 0 inf "annotations/area" "[0]"
poke set $SH annotations/area 1 -1 "annotations/area" "[1]"
poke set $SH categories/id 0 2 "categories/id" "[0]"
poke attr $SH num_images - -3 "num_images"
poke attr $SH num_annotations - 1000000 "num_annotations"
READERS=$ALL poke set v-index.h5 shards/num_images 0 -1 "shards/num_images" "[0]"
poke set v-index.h5 shards/num_annotations 1 99 "shards/num_annotations" "attribute num_annotations"
poke set v-index.h5 categories/id 1 1 "categories/id" "[1]"
poke attr v-index.h5 num_classes - 1000 "num_classes"
poke attr v-index.h5 num_shards - 0 "num_shards"
echo "shard field cases done ($fails failures so far)"

# ---- 11: a flipped byte in any dataset fails its checksum ------------------------------------
for ds in images/bytes annotations/rle annotations/bbox images/ann_count annotations/rle_offset images/names categories/id; do
    [ "$("$POKE" filters "$T/v/$SH" $ds)" = "chunked fletcher32" ] || bad "$SH: $ds has no Fletcher32 checksum"
done
for ds in shards/files shards/num_images categories/id categories/names; do
    [ "$("$POKE" filters "$T/v/v-index.h5" $ds)" = "chunked fletcher32" ] || bad "v-index.h5: $ds has no Fletcher32 checksum"
done
# flip FILE DATASET BYTE NEEDLE...
flip() {
    local file=$1 ds=$2 at=$3
    shift 3
    rm -rf "$T/d" && cp -a "$T/v" "$T/d"
    "$POKE" flip "$T/d/$file" "$ds" "$at" > /dev/null || { bad "flip $ds"; return; }
    readers "$T/d" "$file" "flipped byte in $ds" "$ds" "checksum" "$@"
}
READERS="inspect read loader" flip $SH images/bytes 700 "image" # eval's ground truth reads no pixels
READERS=$ALL flip $SH annotations/rle 3 "annotation"
READERS=$ALL flip $SH annotations/bbox 5
flip $SH images/ann_count 0
flip $SH images/height 1
flip v-index.h5 shards/num_images 2
# inspect --check reports a damaged image or RLE as a problem of the check.
rm -rf "$T/d" && cp -a "$T/v" "$T/d"
"$POKE" flip "$T/d/$SH" images/bytes 700 > /dev/null
"$PREP" inspect "$T/d/v-index.h5" --check > "$T/r.log" 2>&1
grep -q "check: FAILED" "$T/r.log" || { bad "inspect --check does not report a damaged image as FAILED"; tail -3 "$T/r.log"; }
echo "checksum cases done"

[ $fails -eq 0 ] || { echo "$fails failures"; exit 1; }
echo "PASS: data hardening"
