#!/usr/bin/env bash
# Slurm over the two test hosts (issue 17; tests/cluster/slurm2.sh): munged and slurmd on
# each host, slurmctld on host 1, one partition over both nodes.
#   1. srun --mpi=pmix -N 2 wires ranks on both nodes together (PMIx across hosts);
#   2. device selection with Slurm's per-node local ranks (-N 2 -n 3: 2 tasks on node 1,
#      1 on node 2): mrcnn's local rank = SLURM_LOCALID, device = local rank % visible;
#   3. jobs/train.sbatch --nodes=2 (one rank per node): trains, is preempted with SIGUSR1
#      (what --signal=USR1@120 sends), checkpoints, exits 99, requeues itself, and the
#      requeued run resumes from that checkpoint with a rank on each node and finishes.
source "$(dirname "$0")/common.sh"
source "$ROOT/tests/cluster/slurm2.sh"
for p in mrcnn mrcnn-prep tests/slurm/prog_hello tests/cluster/prog_devsel; do
    [ -x "$BUILD/$p" ] || fail "not built: $BUILD/$p"
done
JOBS=""
cluster_cleanup_hook() {
    local rc=$?
    [ -n "${SLURM_CONF:-}" ] && for j in $JOBS; do on "$h1" scancel "$j" 2> /dev/null; done
    if [ $rc -ne 0 ] && [ -n "${TH_DIR:-}" ]; then
        for f in "$T"/*.out; do [ -f "$f" ] && { echo "---- $f (last 30 lines)"; tail -n 30 "$f"; }; done
        slurm2_logs
    fi
}
slurm2_up
export MRCNN_ROOT=$ROOT MRCNN_BUILD=$BUILD

# ---- 1. PMIx across the nodes ----
out=$(on "$h1" srun --mpi=pmix -N 2 -n 2 "$BUILD/tests/slurm/prog_hello" 2 2>&1) || fail "srun -N 2 prog_hello: $out"
echo "$out" | grep -q "on $h1 (allreduce saw 2 ranks)" && echo "$out" | grep -q "on $h2 (allreduce saw 2 ranks)" ||
    fail "srun -N 2: expected a rank on each node: $out"
ok "srun --mpi=pmix -N 2: one rank on each node, all-reduce across them"

# ---- 2. device selection with Slurm's local ranks ----
on "$h1" srun --mpi=pmix -N 2 -n 3 --distribution=block "$BUILD/tests/cluster/prog_devsel" 1 2 > "$T/devsel.log" 2>&1 ||
    { cat "$T/devsel.log"; fail "srun prog_devsel"; }
awk -v h1="$h1" -v h2="$h2" '
    /^devsel / {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        n++
        want = v["host"] == h1 ? 2 : 1
        if (v["local_rank"] != v["slurm_localid"]) { print "local rank != SLURM_LOCALID: " $0; bad++ }
        if (v["local_size"] != want) { print "local size on " v["host"] " is not " want ": " $0; bad++ }
        if (v["device"] != v["local_rank"] % v["visible"]) { print "device != local rank % visible: " $0; bad++ }
        seen[v["host"] "/" v["local_rank"]]++
    }
    /^uniqueid / { split($4, c, "="); ids[c[2]]++; nid++ }
    END {
        if (n != 6 || !(h1 "/0" in seen) || !(h1 "/1" in seen) || !(h2 "/0" in seen)) { print "want ranks " h1 "/0, " h1 "/1, " h2 "/0 (6 lines), got " n; bad++ }
        if (nid != 3 || length(ids) != 1) { print "the unique id differs between ranks"; bad++ }
        exit bad > 0
    }' "$T/devsel.log" || { cat "$T/devsel.log"; fail "device selection under srun"; }
ok "srun -N 2 -n 3: local rank = SLURM_LOCALID ($h1: 0 1, $h2: 0), device = local rank % visible, unique id broadcast"

# ---- 3. train.sbatch on 2 nodes: preempt, requeue, resume ----
make_shards 2
MAX=40
SB=(--nodes=2 --ntasks-per-node=1 --gpus-per-task=0 --cpus-per-task=1 --time=5)
job=$(on "$h1" env MRCNN_CONFIG=configs/tiny.yaml MRCNN_DATASET="$T/shards/train-index.h5" MRCNN_OUTPUT_DIR="$T/run" \
      MRCNN_MAX_STEPS=$MAX MRCNN_COMM_TIMEOUT=30 sbatch --parsable "${SB[@]}" -o "$T/train.out" jobs/train.sbatch \
      --set LOG_PERIOD=1 --set SOLVER.CHECKPOINT_PERIOD=1000 --set SOLVER.BASE_LR=0.002 2>&1) || fail "sbatch: $job"
job=${job%%;*}
JOBS=$job
signalled=0
for _ in $(seq 900); do
    last=$(tail -n 1 "$T/run/metrics.json" 2> /dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')
    if [ -n "$last" ] && [ "$last" -ge 3 ]; then
        [ -n "$(th_procs "$h2" mrcnn)" ] || fail "job $job trains, but no mrcnn rank runs on $h2"
        on "$h1" scancel -s USR1 "$job" || fail "scancel -s USR1 $job"
        signalled=1
        echo "signalled job $job (SIGUSR1 to its tasks on both nodes) after step $last"
        break
    fi
    terminal "$(job_state "$job")" && fail "job $job ended before it could be signalled"
    sleep 0.1
done
[ $signalled -eq 1 ] || fail "job $job logged no step >= 3 within 90 s"
saw_h2=0 state="" restarts=""
for _ in $(seq 240); do
    info=$(on "$h1" scontrol show job "$job" 2> /dev/null)
    state=$(echo "$info" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    restarts=$(echo "$info" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
    terminal "$state" && break
    [ "${restarts:-0}" -ge 1 ] && [ "$state" = RUNNING ] && [ -n "$(th_procs "$h2" mrcnn)" ] && saw_h2=1
    sleep 0.5
done
[ "$state" = COMPLETED ] || fail "the preempted job $job ended as '$state' (or is still '$state' after 120 s), not COMPLETED"
[ "${restarts:-0}" -ge 1 ] || fail "job $job completed without being requeued (Restarts=$restarts)"
grep -q "2 node(s) \[mrcnn-h\[1-2\]\]" "$T/train.out" || fail "train.sbatch did not run on both nodes: $(grep '^====' "$T/train.out")"
[ "$(grep -c "world size 2" "$T/train.out")" -ge 2 ] || fail "both runs should report world size 2"
grep -q "exiting with 99 (requeue)" "$T/train.out" || fail "the trainer did not checkpoint and exit 99 on SIGUSR1"
grep -q "requeueing job $job" "$T/train.out" || fail "train.sbatch did not requeue after exit 99"
k=$(sed -n 's/.*resumed from .*model_[0-9]*\.h5 at step \([0-9]*\).*/\1/p' "$T/train.out" | head -n 1)
[ -n "$k" ] && [ "$k" -gt 0 ] || fail "the requeued run did not log 'resumed from ... at step k' with k > 0"
[ $saw_h2 -eq 1 ] || fail "no rank of the requeued run was seen on $h2"
[ -s "$T/run/model_$(printf '%07d' $MAX).h5" ] || fail "the resumed run did not reach step $MAX"
ok "train.sbatch --nodes=2: preempted (SIGUSR1), checkpointed at step $k, exit 99, requeued (Restarts=$restarts), resumed from model_$(printf '%07d' "$k").h5 with ranks on $h1 and $h2, finished at step $MAX"
echo "PASS: Slurm on two hosts in $(elapsed) s"
