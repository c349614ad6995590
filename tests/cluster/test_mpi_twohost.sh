#!/usr/bin/env bash
# Open MPI across two hosts (tests/cluster/hosts.sh makes them): mpirun on
# host 1 starts host 2's ranks through an rsh agent, the ranks talk TCP over the veth
# pair (shared memory only within a host), the shard and run directories are on the
# shared file system.
#   1. a 2-rank job spans both hosts (prog_hello prints each rank's hostname);
#   2. device selection with the per-host local ranks Open MPI reports (3 ranks on host
#      1, 1 on host 2): mrcnn's local rank = OMPI_COMM_WORLD_LOCAL_RANK, device = local
#      rank % visible GPUs; the NCCL bootstrap up to where a GPU is needed (the unique id
#      by MPI broadcast reaches every rank; the communicator declines with a reason);
#   3. `mrcnn train`, 2 ranks on 2 hosts vs 2 ranks on 1 host: the same first update,
#      bit for bit (weights and momentum), the shards read with parallel HDF5 from both;
#   4. `mrcnn eval` over the val shards from both hosts: the same detections as on one;
#   5. `mrcnn-prep coco` with a rank on each host writes the same shards as one rank.
source "$(dirname "$0")/common.sh"
for p in mrcnn mrcnn-prep tests/slurm/prog_hello tests/cluster/prog_devsel; do
    [ -x "$BUILD/$p" ] || fail "not built: $BUILD/$p"
done
make_shards 2
ok "shards written on $h1, read from the shared file system by both hosts"

# ---- 1. a job across the hosts ----
out=$(mpirun_on "$h1:1,$h2:1" 2 "$BUILD/tests/slurm/prog_hello" 2 2>&1) || fail "mpirun across the hosts: $out"
echo "$out" | grep -q "rank 0 of 2 on $h1 (allreduce saw 2 ranks)" && echo "$out" | grep -q "rank 1 of 2 on $h2 (allreduce saw 2 ranks)" ||
    fail "expected rank 0 on $h1 and rank 1 on $h2: $out"
ok "mpirun on $h1 runs rank 1 on $h2 (rsh agent), all-reduce over TCP"

# ---- 2. device selection and the NCCL bootstrap ----
mpirun_on "$h1:3,$h2:1" 4 "$BUILD/tests/cluster/prog_devsel" 1 2 4 > "$T/devsel.log" 2>&1 || { cat "$T/devsel.log"; fail "prog_devsel"; }
awk -v h1="$h1" -v h2="$h2" '
    /^devsel / {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        n++
        want_size = v["host"] == h1 ? 3 : 1
        if (v["local_rank"] != v["ompi_local_rank"]) { print "local rank " v["local_rank"] " but Open MPI says " v["ompi_local_rank"] ": " $0; bad++ }
        if (v["local_size"] != want_size) { print "local size " v["local_size"] " on " v["host"] ", want " want_size ": " $0; bad++ }
        if (v["device"] != v["local_rank"] % v["visible"]) { print "device " v["device"] " != local rank % visible: " $0; bad++ }
        # Without a GPU (or in a GPU=0 build) the communicator must decline with a reason.
        if (v["nccl"] != "yes" && v["nccl"] !~ /^no:./) { print "NCCL neither built nor declined with a reason: " $0; bad++ }
        seen[v["host"] "/" v["local_rank"]]++
    }
    /^uniqueid / { split($4, c, "="); ids[c[2]]++; nid++ }
    END {
        if (n != 12) { print "want 12 devsel lines (4 ranks x 3 counts), got " n; bad++ }
        for (k in seen) keys = keys " " k
        if (!(h1 "/0" in seen) || !(h1 "/1" in seen) || !(h1 "/2" in seen) || !(h2 "/0" in seen)) { print "local ranks seen:" keys; bad++ }
        if (nid != 4 || length(ids) != 1) { print "the unique id differs between ranks (or is missing)"; bad++ }
        exit bad > 0
    }' "$T/devsel.log" || { cat "$T/devsel.log"; fail "device selection across hosts"; }
grep '^devsel' "$T/devsel.log" | sort -t= -k2 -n | awk '$0 ~ /visible=4/ {print "  " $0}' | cut -c1-160
ok "local ranks per host ($h1: 0 1 2, $h2: 0) = Open MPI's, device = local rank % visible (1, 2, 4), unique id broadcast to all 4 ranks, NCCL declines without a GPU: $(sed -n 's/.*nccl=no:\(.*\)/\1/p' "$T/devsel.log" | sort -u | head -n 1)"

# ---- 3. the first update: 2 hosts == 1 host ----
TRAIN=(train --config "$ROOT/configs/tiny.yaml" --set "DATASETS.TRAIN=$T/shards/train-index.h5" --max-steps 1
       --set SOLVER.CHECKPOINT_PERIOD=1 --set SOLVER.WARMUP_ITERS=0 --set LOG_PERIOD=1 --comm-timeout 60)
mpirun_on "$h1:2" 2 "$BUILD/mrcnn" "${TRAIN[@]}" --set "OUTPUT_DIR=$T/one" > "$T/one.log" 2>&1 || { cat "$T/one.log"; fail "train, 2 ranks on 1 host"; }
mpirun_on "$h1:1,$h2:1" 2 "$BUILD/mrcnn" "${TRAIN[@]}" --set "OUTPUT_DIR=$T/two" > "$T/two.log" 2>&1 || { cat "$T/two.log"; fail "train, 2 ranks on 2 hosts"; }
mpirun_on "$h1:2" 2 "$BUILD/mrcnn" "${TRAIN[@]}" --set "OUTPUT_DIR=$T/zero" --set SOLVER.BASE_LR=0 > "$T/zero.log" 2>&1 || { cat "$T/zero.log"; fail "train, lr 0"; }
grep -q "world size 2" "$T/two.log" || fail "the 2-host run did not report world size 2: $(head -n 5 "$T/two.log")"
"$PY_TORCH" "$ROOT/tests/cluster/compare_ckpt.py" "$T/two/model_0000001.h5" "$T/one/model_0000001.h5" "$T/zero/model_0000001.h5" ||
    fail "the first update on 2 hosts differs from the one on 1 host"
l1=$(sed -n 1p "$T/one/metrics.json" | grep -o '"total_loss": [^,]*')
l2=$(sed -n 1p "$T/two/metrics.json" | grep -o '"total_loss": [^,]*')
[ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "step-1 losses differ: 1 host $l1, 2 hosts $l2"
ok "mrcnn train: 2 ranks on 2 hosts == 2 ranks on 1 host after one step, bit for bit ($l1)"

# ---- 4. eval: parallel HDF5 reads of the val shards from both hosts ----
EVAL=(eval --config "$ROOT/configs/tiny.yaml" --weights "$T/one/model_0000001.h5" --shards "$T/shards/val-index.h5")
mpirun_on "$h1:2" 2 "$BUILD/mrcnn" "${EVAL[@]}" --out "$T/eval1" > "$T/eval1.log" 2>&1 || { cat "$T/eval1.log"; fail "eval on 1 host"; }
mpirun_on "$h1:1,$h2:1" 2 "$BUILD/mrcnn" "${EVAL[@]}" --out "$T/eval2" > "$T/eval2.log" 2>&1 || { cat "$T/eval2.log"; fail "eval on 2 hosts"; }
cmp -s "$T/eval1/coco_instances_results.json" "$T/eval2/coco_instances_results.json" ||
    fail "eval on 2 hosts gives other detections than on 1 host"
ok "mrcnn eval over the val shards: 2 hosts == 1 host ($(grep -o '"score"' "$T/eval2/coco_instances_results.json" | wc -l) detections)"

# ---- 5. prep: a rank on each host writes what one rank writes ----
PREP=(coco --annotations "$T/raw/annotations/instances_train.json" --images "$T/raw/train" --name train --shards 2)
mpirun_on "$h1:1,$h2:1" 2 "$BUILD/mrcnn-prep" "${PREP[@]}" --out "$T/prep2" > "$T/prep2.log" 2>&1 || { cat "$T/prep2.log"; fail "mrcnn-prep coco on 2 hosts"; }
grep -q "summary (2 ranks)" "$T/prep2.log" || fail "mrcnn-prep did not convert with 2 ranks: $(cat "$T/prep2.log")"
for f in train-00000-of-00002.h5 train-00001-of-00002.h5; do
    h5diff "$T/shards/$f" "$T/prep2/$f" > /dev/null || fail "$f differs between 1 rank and 2 ranks on 2 hosts"
done
on "$h2" "$BUILD/mrcnn-prep" export "$T/prep2/train-index.h5" --out "$T/prep2.json" > /dev/null &&
    on "$h1" "$BUILD/mrcnn-prep" export "$T/shards/train-index.h5" --out "$T/prep1.json" > /dev/null || fail "export"
cmp -s "$T/prep1.json" "$T/prep2.json" || fail "the 2-host shards export other annotations than the 1-rank ones"
ok "mrcnn-prep coco with a rank on each host == 1 rank (h5diff of every shard, exported annotations)"
echo "PASS: Open MPI across two hosts in $(elapsed) s"
