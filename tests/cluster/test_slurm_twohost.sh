#!/usr/bin/env bash
# Slurm over the two test hosts (tests/cluster/slurm2.sh): munged and slurmd on
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
# Where the ranks ran is read from what the job itself writes to train.out, not from a look
# at the hosts' processes at some moment: a tiny step takes ~0.1 s, so a whole run can be
# over before a scan of /proc ends on a loaded machine (it forks per process). srun -v
# (SLURM_DEBUG=1, in the job's environment only: sbatch's own output stays parsable) logs,
# per run, which host each task was launched on and how each task ended, by host: the
# mrcnn rank on mrcnn-h2 exiting 99 (the trainer's own "checkpointed, requeue me") in the
# first run and 0 in the requeued one; rank 0 logs the world size of each run.
make_shards 2
# The ranks finishing step $HOLD wait there until the preemption signal has arrived
# (MRCNN_TEST_HOLD_AT_STEP, src/train/test_hooks.c), and rank 0 says so in train.out: the test
# signals once that line is there, so the run cannot end before the signal, however fast or
# loaded the machine. The requeued run resumes past step $HOLD and does not hold.
MAX=20 HOLD=3
SB=(--nodes=2 --ntasks-per-node=1 --gpus-per-task=0 --cpus-per-task=1 --time=5 --export=ALL,SLURM_DEBUG=1)
job=$(on "$h1" env MRCNN_CONFIG=configs/tiny.yaml MRCNN_DATASET="$T/shards/train-index.h5" MRCNN_OUTPUT_DIR="$T/run" \
      MRCNN_MAX_STEPS=$MAX MRCNN_COMM_TIMEOUT=30 MRCNN_TEST_HOLD_AT_STEP=$HOLD sbatch --parsable "${SB[@]}" -o "$T/train.out" jobs/train.sbatch \
      --set LOG_PERIOD=1 --set SOLVER.CHECKPOINT_PERIOD=1000 --set SOLVER.BASE_LR=0.002 2>&1) || fail "sbatch: $job"
job=${job%%;*}
case "$job" in '' | *[!0-9]*) fail "sbatch --parsable printed '$job', not a job id" ;; esac
JOBS=$job
signalled=0 next_state=0
deadline=$((SECONDS + 120))
while [ $SECONDS -lt $deadline ]; do
    if grep -q "test hold (MRCNN_TEST_HOLD_AT_STEP): step $HOLD waits" "$T/train.out" 2> /dev/null; then
        on "$h1" scancel -s USR1 "$job" || fail "scancel -s USR1 $job"
        signalled=1
        echo "signalled job $job (SIGUSR1 to its tasks on both nodes) holding at step $HOLD of $MAX"
        break
    fi
    if [ $SECONDS -ge $next_state ]; then # scontrol is slow on a loaded machine: every 2 s
        terminal "$(job_state "$job")" && fail "job $job ended before it held at step $HOLD"
        next_state=$((SECONDS + 2))
    fi
    sleep 0.1
done
[ $signalled -eq 1 ] || fail "job $job did not hold at step $HOLD within 120 s"
state="" restarts=""
deadline=$((SECONDS + 150))
while [ $SECONDS -lt $deadline ]; do
    info=$(on "$h1" scontrol show job "$job" 2> /dev/null)
    state=$(echo "$info" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    restarts=$(echo "$info" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
    terminal "$state" && break
    sleep 0.5
done
[ "$state" = COMPLETED ] || fail "the preempted job $job ended as '$state' (or is still '$state' after 150 s), not COMPLETED"
if [ "${restarts:-0}" -lt 1 ]; then
    grep -q "exiting with 99 (requeue)" "$T/train.out" ||
        fail "job $job completed without being requeued: the SIGUSR1 sent at step $HOLD did not reach the trainer"
    fail "job $job completed without being requeued (Restarts=$restarts)"
fi
grep -q "exiting with 99 (requeue)" "$T/train.out" || fail "the trainer did not checkpoint and exit 99 on SIGUSR1"
grep -q "requeueing job $job" "$T/train.out" || fail "train.sbatch did not requeue after exit 99"
k=$(sed -n 's/.*resumed from .*model_[0-9]*\.h5 at step \([0-9]*\).*/\1/p' "$T/train.out" | head -n 1)
[ -n "$k" ] && [ "$k" -gt 0 ] || fail "the requeued run did not log 'resumed from ... at step k' with k > 0"
[ "$k" -eq "$HOLD" ] || fail "the signal sent while the job held at step $HOLD was handled at step $k"
# Each run of the job (a "==== ... restart N:" banner of jobs/env.sh opens it): 2 nodes and
# 2 tasks; one task launched on each host (task 0 on h1, task 1 on h2); rank 0 saw world size 2;
# and each host's task ended as the trainer ends: exit 99 in the preempted run, 0 in the last.
awk -v h1="$h1" -v h2="$h2" -v job="$job" '
    function has(key) { return ((r, key) in seen) }
    /^==== .* restart [0-9]+:/ {
        r = $0; sub(/.* restart /, "", r); sub(/:.*/, "", r); r += 0; runs++; last = r
        if (index($0, "2 node(s) [mrcnn-h[1-2]], 2 task(s)")) seen[r, "alloc"] = 1
        next
    }
    !runs { next }
    index($0, "srun: launching StepId=" job ".0 on host " h1 ", 1 tasks: 0") { seen[r, "launch1"] = 1 }
    index($0, "srun: launching StepId=" job ".0 on host " h2 ", 1 tasks: 1") { seen[r, "launch2"] = 1 }
    / info r0\] world size 2, / { seen[r, "world"] = 1 }
    index($0, h1 ": task 0: Exited with exit code 99") { seen[r, "end1"] = 99 }
    index($0, h2 ": task 1: Exited with exit code 99") { seen[r, "end2"] = 99 }
    index($0, h1 ": task 0: Completed") { seen[r, "end1"] = 0 }
    index($0, h2 ": task 1: Completed") { seen[r, "end2"] = 0 }
    END {
        if (runs != 2 || last != 1) { print "want 2 runs (restart 0 and 1) in train.out, got " runs; exit 1 }
        for (r = 0; r <= 1; r++) {
            want = r == 0 ? 99 : 0
            if (!has("alloc")) { print "run " r ": not 2 nodes [mrcnn-h[1-2]] and 2 tasks"; bad++ }
            if (!has("launch1")) { print "run " r ": srun did not launch task 0 on " h1; bad++ }
            if (!has("launch2")) { print "run " r ": srun did not launch task 1 on " h2; bad++ }
            if (!has("world")) { print "run " r ": rank 0 did not report world size 2"; bad++ }
            if (!has("end1") || seen[r, "end1"] != want) { print "run " r ": the rank on " h1 " (task 0) did not end with exit code " want; bad++ }
            if (!has("end2") || seen[r, "end2"] != want) { print "run " r ": the rank on " h2 " (task 1) did not end with exit code " want; bad++ }
        }
        exit bad > 0
    }' "$T/train.out" > "$T/ranks.txt" || fail "train.sbatch did not run one rank on each node in both runs: $(cat "$T/ranks.txt")"
[ -s "$T/run/model_$(printf '%07d' $MAX).h5" ] || fail "the resumed run did not reach step $MAX"
ok "train.sbatch --nodes=2: preempted (SIGUSR1), checkpointed at step $k, exit 99 from the ranks on $h1 and $h2, requeued (Restarts=$restarts), resumed from model_$(printf '%07d' "$k").h5 with world size 2, a rank on $h1 and one on $h2 (exit 0 each), finished at step $MAX"
echo "PASS: Slurm on two hosts in $(elapsed) s"
