#!/usr/bin/env bash
# The loader: reproduces every annotation and mask (pycocotools), covers the permutation
# across 1-3 ranks with equal step counts, flips consistently, resumes exactly, and
# refuses an MPI without MPI_THREAD_MULTIPLE (exit 1).
set -u -o pipefail
. "${ROOT:-$(dirname "$0")/../..}/tests/data/prep_env.sh" "pycocotools, PIL" "$ROOT/$BUILD/tests/data/prog_loader"
PROG=$ROOT/$BUILD/tests/data/prog_loader
MPI="mpirun --oversubscribe"

# 20 training images: not divisible by 3 (ranks) nor by 6 (global batch).
"$PREP" shapes --out "$T/d" --train 20 --val 7 --size 72x96 --seed 11 >/dev/null || fail "shapes"
"$PREP" coco --annotations "$T/d/annotations/instances_train.json" --images "$T/d/train" --out "$T/s" --shards 3 --name tr >/dev/null || fail "convert"
"$PREP" coco --annotations "$T/d/annotations/instances_val.json" --images "$T/d/val" --out "$T/s" --shards 2 --name va >/dev/null || fail "convert val"
IDX=$T/s/tr-index.h5

mkdir -p "$T/r"
$MPI -np 1 "$PROG" reproduce "$IDX" "$T/r" || fail "reproduce"
$PY_COCO "$ROOT/tests/data/loader_compare.py" "$T/d/annotations/instances_train.json" "$T/r" "$T/d/train" || fail "the loader does not reproduce the annotations"
# Evaluation order over 2 ranks still yields every image exactly once (7 val images, padded).
mkdir -p "$T/rv"
$MPI -np 1 "$PROG" reproduce "$T/s/va-index.h5" "$T/rv" > /dev/null || fail "reproduce val"
$PY_COCO "$ROOT/tests/data/loader_compare.py" "$T/d/annotations/instances_val.json" "$T/rv" "$T/d/val" > /dev/null || fail "val reproduce"

# What shapes lacks: multi-polygon and crowd (uncompressed RLE) annotations, a PNG image.
$PY_COCO "$ROOT/tests/data/make_cases.py" "$T/d/annotations/instances_train.json" "$T/d/train" "$T/c" > /dev/null || fail "make_cases.py"
"$PREP" coco --annotations "$T/c/extra.json" --images "$T/d/train" --out "$T/s" --shards 2 --name ex > /dev/null || fail "convert extra"
mkdir -p "$T/rx"
$MPI -np 1 "$PROG" reproduce "$T/s/ex-index.h5" "$T/rx" > /dev/null || fail "reproduce extra"
$PY_COCO "$ROOT/tests/data/loader_compare.py" "$T/c/extra.json" "$T/rx" "$T/d/train" | tail -1 || fail "extra reproduce"

$MPI -np 1 "$PROG" cover "$IDX" 3 3 0 || fail "cover, 1 rank"
$MPI -np 2 "$PROG" cover "$IDX" 2 3 0 || fail "cover, 2 ranks"
$MPI -np 3 "$PROG" cover "$IDX" 2 3 0 || fail "cover, 3 ranks (20 images, global batch 6)"
$MPI -np 3 "$PROG" cover "$IDX" 1 2 1 || fail "cover, 3 ranks, aspect grouping"
$MPI -np 1 "$PROG" flip "$IDX" || fail "flip"
$MPI -np 2 "$PROG" resume "$IDX" || fail "resume"
$MPI -np 1 "$PROG" threadlevel "$IDX" > "$T/tl.log" 2>&1
expect_exit "$EXIT_ERROR" $? "the loader under MPI without MPI_THREAD_MULTIPLE" || { cat "$T/tl.log"; exit 1; }
grep -q "MPI_THREAD_MULTIPLE" "$T/tl.log" || { cat "$T/tl.log"; fail "the thread-level refusal does not say what is needed"; }
echo "PASS: loader"
