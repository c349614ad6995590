#!/usr/bin/env bash
# Errors that name their real cause (each case failed on 0584fb6 as said; about 6 s):
#  - MODEL.ROI_HEADS.NUM_CLASSES below the data's categories: refused when the training
#    set is opened, naming both counts; before: "softmax_ce_forward: label 3 outside
#    [-1,2)" at the first step that sampled such an object;
#  - a checkpoint given as a data set (DATASETS.TRAIN, eval --shards, inspect), a shard
#    index or a shard given as weights (MODEL.WEIGHTS, eval --weights), a shard given as
#    the index: each says what the file is; before, each blamed the schema version;
#  - --resume of a finished run: says so, trains nothing and writes nothing (exit 0);
#    before, it rewrote the last checkpoint, whose lr had run down to 0;
#  - --set without KEY=VALUE is a usage error (exit 2) in config, eval and predict as in
#    train; before, exit 1;
#  - duplicate annotation ids in eval's ground truth are found by the converter's rule
#    (mrcnn/ids.h) and counted; before, eval had its own sort and named the first pair only.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_MCA_ess_singleton_isolated=1
source "$ROOT/tests/common/exit_codes.sh"
source "$ROOT/tests/common/checks.sh"
source "$ROOT/tests/train/common_fixture.sh"
M=$BUILD/mrcnn
P=$BUILD/mrcnn-prep
[ -x "$M" ] && [ -x "$P" ] || { echo "not built: $M, $P"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${SOLO[@]}" "$P" shapes --out "$tmp/raw" --train 6 --val 1 --size 96x96 > /dev/null 2>&1 &&
    "${SOLO[@]}" "$P" coco --annotations "$tmp/raw/annotations/instances_train.json" --images "$tmp/raw/train" \
        --out "$tmp/shards" --name train > /dev/null 2>&1 || { echo "FAIL: fixture shards"; exit 1; }
IDX=$tmp/shards/train-index.h5
SHARD=$tmp/shards/train-00000-of-00001.h5
train() { # out-dir-name extra-args...
    local out=$tmp/$1
    shift
    "${SOLO[@]}" "$M" train --config "$ROOT/configs/tiny.yaml" --set DATASETS.TRAIN="$IDX" --set SOLVER.MAX_ITER=2 \
        --set SOLVER.IMS_PER_BATCH=2 --set SOLVER.CHECKPOINT_PERIOD=0 --set LOG_PERIOD=1 --set OUTPUT_DIR="$out" "$@"
}
# expect NAME WANT-EXIT NEEDLE LOG: the exit code and the first error line holding NEEDLE
expect() {
    local name=$1 want=$2 rc=$3 needle=$4 log=$5
    expect_exit "$want" "$rc" "$name" || { tail -n 5 "$log"; return; }
    grep -qF -- "$needle" "$log" || { bad "$name: no '$needle' in: $(grep -m1 -E 'error|mrcnn' "$log" | cut -c1-300)"; return; }
    echo "$name: exit $rc: $(grep -m1 -F -- "$needle" "$log" | cut -c1-170)"
}

train ok > "$tmp/ok.log" 2>&1 || { echo "FAIL: a 2-step training"; tail "$tmp/ok.log"; exit 1; }
CKPT=$tmp/ok/model_0000002.h5
[ -f "$CKPT" ] || { echo "FAIL: no $CKPT"; ls "$tmp/ok"; exit 1; }

train nc --set MODEL.ROI_HEADS.NUM_CLASSES=1 > "$tmp/nc.log" 2>&1
expect "NUM_CLASSES 1 < 3 categories" "$EXIT_ERROR" $? "has 3 categories, but MODEL.ROI_HEADS.NUM_CLASSES is 1: set NUM_CLASSES to 3" "$tmp/nc.log"
grep -q "step 1/" "$tmp/nc.log" && bad "NUM_CLASSES: a step ran before the error"

train ck --set DATASETS.TRAIN="$CKPT" > "$tmp/ck.log" 2>&1
expect "a checkpoint as DATASETS.TRAIN" "$EXIT_ERROR" $? "$CKPT: this is a checkpoint (it holds /model), not a shard set" "$tmp/ck.log"
"${SOLO[@]}" "$P" inspect "$CKPT" > "$tmp/ci.log" 2>&1
expect "a checkpoint to mrcnn-prep inspect" "$EXIT_ERROR" $? "this is a checkpoint (it holds /model), not a shard set" "$tmp/ci.log"
"${SOLO[@]}" "$M" eval --config "$ROOT/configs/tiny.yaml" --weights "$CKPT" --shards "$CKPT" --out "$tmp/e1" > "$tmp/e1.log" 2>&1
expect "a checkpoint as eval --shards" "$EXIT_ERROR" $? "this is a checkpoint (it holds /model), not a shard set" "$tmp/e1.log"

train iw --set MODEL.WEIGHTS="$IDX" > "$tmp/iw.log" 2>&1
expect "a shard index as MODEL.WEIGHTS" "$EXIT_ERROR" $? "$IDX is a shard set's file (written by mrcnn-prep coco), not a checkpoint" "$tmp/iw.log"
"${SOLO[@]}" "$M" eval --config "$ROOT/configs/tiny.yaml" --weights "$SHARD" --shards "$IDX" --out "$tmp/e2" > "$tmp/e2.log" 2>&1
expect "a shard as eval --weights" "$EXIT_ERROR" $? "$SHARD is a shard set's file (written by mrcnn-prep coco), not a checkpoint" "$tmp/e2.log"
train si --set DATASETS.TRAIN="$SHARD" > "$tmp/si.log" 2>&1
expect "a shard as DATASETS.TRAIN" "$EXIT_ERROR" $? "this is one shard of set 'train', not its index: name the set by train-index.h5" "$tmp/si.log"

# --resume of the finished 2-step run: nothing written, the checkpoint as it was.
( cd "$tmp/ok" && find . -type f ! -name .lock -printf '%p %s %T@\n' | sort && md5sum model_*.h5 ) > "$tmp/before"
train ok --resume > "$tmp/re.log" 2>&1
expect "--resume of a finished run" 0 $? "is finished (step 2 of 2): nothing trained, nothing written" "$tmp/re.log"
( cd "$tmp/ok" && find . -type f ! -name .lock -printf '%p %s %T@\n' | sort && md5sum model_*.h5 ) > "$tmp/after"
diff "$tmp/before" "$tmp/after" > "$tmp/diff" || { bad "--resume of a finished run changed its files"; cat "$tmp/diff"; }

# --set FOO: a usage error everywhere
"$M" config --set FOO > "$tmp/s1.log" 2>&1
expect "config --set FOO" "$EXIT_USAGE" $? "--set 'FOO' is not KEY=VALUE" "$tmp/s1.log"
"$M" eval --set FOO --weights "$CKPT" --shards "$IDX" --out "$tmp/e3" > "$tmp/s2.log" 2>&1
expect "eval --set FOO" "$EXIT_USAGE" $? "--set 'FOO' is not KEY=VALUE" "$tmp/s2.log"
"$M" predict --set FOO --weights "$CKPT" --out "$tmp/p" "$tmp/raw/train/$(ls "$tmp/raw/train" | head -n1)" > "$tmp/s3.log" 2>&1
expect "predict --set FOO" "$EXIT_USAGE" $? "--set 'FOO' is not KEY=VALUE" "$tmp/s3.log"

# Duplicate annotation ids: evaluation finds them by the converter's rule (mrcnn/ids.h:
# the smallest duplicated id, its first and second positions, and how many there are).
"${PY_COCO:-python3}" - "$tmp/raw/annotations/instances_train.json" "$tmp/dup.json" <<'PY' || bad "making dup.json"
import json, sys
d = json.load(open(sys.argv[1]))
a = d["annotations"]
for k in (2, 4):
    a[k]["id"] = a[0]["id"]
a[5]["id"] = a[3]["id"]
json.dump(d, open(sys.argv[2], "w"))
open(sys.argv[2] + ".want", "w").write("duplicate annotation id %d (annotations[0] and [2]; 3 duplicates in all)" % min(a[0]["id"], a[3]["id"]) if a[0]["id"] < a[3]["id"] else "duplicate annotation id %d (annotations[3] and [5]; 3 duplicates in all)" % a[3]["id"])
PY
echo "[]" > "$tmp/none.json"
"$M" eval --gt "$tmp/dup.json" --results "$tmp/none.json" > "$tmp/dup.log" 2>&1
expect "duplicate annotation ids in eval --gt" "$EXIT_ERROR" $? "$(cat "$tmp/dup.json.want")" "$tmp/dup.log"

[ $fails -eq 0 ] && echo "PASS: each error names its cause"
[ $fails -eq 0 ]
