#!/usr/bin/env bash
# Regenerates the seed files of the fuzz corpora that are made by programs rather than
# written by hand (make fuzz-seeds): the shard set (mrcnn-prep shapes + coco, the fuzz
# build's own instrumented mrcnn-prep), the COCO JSON files shapes writes, one of its
# JPEGs, and the checkpoints of the stand-in model (fuzz_seedgen). The contents are
# deterministic; HDF5 object headers may differ in their timestamps from run to run.
set -euo pipefail
cd "$(dirname "$0")/../.."
FUZZ_DIR=${FUZZ_DIR:-build/fuzz}
C=tests/fuzz/corpus
T=$(mktemp -d "${TMPDIR:-/tmp}/mrcnn-fuzz-seeds.XXXXXX")
trap 'rm -rf "$T"' EXIT

"$FUZZ_DIR/mrcnn-prep" shapes --out "$T/shapes" --train 2 --val 1 --size 32x40 >/dev/null
"$FUZZ_DIR/mrcnn-prep" coco --annotations "$T/shapes/annotations/instances_train.json" --images "$T/shapes/train" \
    --out "$T/shards" --shards 1 --name seed >/dev/null 2>&1
mkdir -p $C/shard_raw $C/coco_gt $C/coco_prep $C/image $C/ckpt_raw $C/json
cp "$T/shards/seed-index.h5" "$T/shards/seed-00000-of-00001.h5" $C/shard_raw/
for s in train val; do
    cp "$T/shapes/annotations/instances_$s.json" $C/coco_gt/shapes_$s.json
    cp "$T/shapes/annotations/instances_$s.json" $C/coco_prep/shapes_$s.json
done
cp "$T/shapes/annotations/instances_val.json" $C/json/shapes_val.json
cp "$T/shapes/train/000000000001.jpg" $C/image/shapes_32x40.jpg
"$FUZZ_DIR/fuzz_seedgen" $C/ckpt_raw >/dev/null
ls -l $C/shard_raw $C/ckpt_raw
