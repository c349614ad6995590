#!/usr/bin/env bash
# A job that loses a node goes on (jobs/train.sbatch's elastic restarts), on the two-host
# Slurm cluster (tests/cluster/slurm2.sh): train.sbatch --nodes=2, one rank on each host,
# a checkpoint every 2 steps. The ranks hold at step 5 (MRCNN_TEST_HOLD_AT_STEP: checkpoint 4
# is written, the run cannot go on by itself) while every process of host 2 is killed
# (slurmd, the step daemon, the rank: the host is gone); then they are let go. Wanted:
#   - the job is not ended: Slurm declares host 2 DOWN (SlurmdTimeout, short here) and
#     removes it from the allocation (--no-kill); train.sbatch logs the lost node and
#     restarts the step on host 1 alone, which resumes from model_0000004.h5 with world
#     size 1 and finishes: the job COMPLETED, Restarts=0 (no requeue);
#   - its final weights and momentum equal, bit for bit, those of a one-host run resumed
#     from a copy of the same checkpoint (the same math: one rank after step 4 in both).
# Every wait is for a state (the hold line, the host's processes gone, the job's state),
# none for a time; the bounds only turn a hang into a failure.
source "$(dirname "$0")/common.sh"
export SLURM2_SLURMD_TIMEOUT=${SLURM2_SLURMD_TIMEOUT:-8}
source "$ROOT/tests/cluster/slurm2.sh"
source "$ROOT/tests/common/exit_codes.sh"
[ -x "$BUILD/mrcnn" ] && [ -x "$BUILD/mrcnn-prep" ] || fail "not built: $BUILD/mrcnn, $BUILD/mrcnn-prep"
JOBS="" passed=0
cluster_cleanup_hook() {
    [ -n "${SLURM_CONF:-}" ] && for j in $JOBS; do on "$h1" scancel "$j" 2> /dev/null; done
    if [ $passed -eq 0 ] && [ -n "${TH_DIR:-}" ]; then
        for f in "$T"/*.out "$T"/*.log; do [ -f "$f" ] && { echo "---- $f (last 30 lines)"; tail -n 30 "$f"; }; done
        slurm2_logs
    fi
}
slurm2_up
export MRCNN_ROOT=$ROOT MRCNN_BUILD=$BUILD
make_shards 2

MAX=8 HOLD=5 K=4
TRAIN_SET=(--set LOG_PERIOD=1 --set SOLVER.CHECKPOINT_PERIOD=2 --set SOLVER.BASE_LR=0.002)
SB=(--nodes=2 --ntasks-per-node=1 --gpus-per-task=0 --cpus-per-task=1 --time=5)
job=$(on "$h1" env MRCNN_CONFIG=configs/tiny.yaml MRCNN_DATASET="$T/shards/train-index.h5" MRCNN_OUTPUT_DIR="$T/run" \
      MRCNN_MAX_STEPS=$MAX MRCNN_COMM_TIMEOUT=10 MRCNN_TEST_HOLD_AT_STEP=$HOLD MRCNN_TEST_HOLD_UNTIL="$T/release" \
      sbatch --parsable "${SB[@]}" -o "$T/train.out" jobs/train.sbatch "${TRAIN_SET[@]}" 2>&1) || fail "sbatch: $job"
job=${job%%;*}
case "$job" in '' | *[!0-9]*) fail "sbatch --parsable printed '$job', not a job id" ;; esac
JOBS=$job

# ---- the ranks hold at step $HOLD: checkpoint $K is the newest ----
deadline=$((SECONDS + 120))
until grep -q "test hold (MRCNN_TEST_HOLD_AT_STEP): step $HOLD waits" "$T/train.out" 2> /dev/null; do
    [ $SECONDS -lt $deadline ] || fail "job $job did not hold at step $HOLD within 120 s"
    terminal "$(job_state "$job")" && fail "job $job ended before it held at step $HOLD"
    sleep 0.2
done
grep -q " info r0\] world size 2, " "$T/train.out" || fail "the job did not start with a rank on each host"
ckpt=$T/run/model_$(printf %07d $K).h5
[ -s "$ckpt" ] || fail "no $ckpt while the job holds at step $HOLD"
[ -z "$(ls "$T/run" | grep "model_000000[5-9]")" ] || fail "a checkpoint newer than step $K exists: $(ls "$T/run")"
mkdir -p "$T/ref"
cp "$ckpt" "$T/run/run_id" "$T/ref/"

# ---- host 2 dies ----
victims=$(th_procs "$h2" | tr '\n' ' ')
echo "$h2 runs: $(for p in $victims; do cat /proc/$p/comm 2>/dev/null; done | sort | tr '\n' ' ')"
echo "$victims" | grep -q . || fail "nothing runs on $h2"
t_kill=$(date +%s.%N)
th_kill_host "$h2" KILL
deadline=$((SECONDS + 30))
while [ -n "$(th_procs "$h2")" ]; do
    [ $SECONDS -lt $deadline ] || fail "processes still run on $h2 30 s after SIGKILL: $(th_procs "$h2" | tr '\n' ' ')"
    sleep 0.1
done
touch "$T/release"
echo "killed every process of $h2 while the job held at step $HOLD; released the hold"

# ---- the job goes on without it ----
deadline=$((SECONDS + 150))
state=""
while [ $SECONDS -lt $deadline ]; do
    state=$(job_state "$job")
    terminal "$state" && break
    sleep 0.5
done
t_end=$(elapsed "$t_kill")
info=$(on "$h1" scontrol show job "$job" -o 2> /dev/null)
[ "$state" = COMPLETED ] || fail "job $job is '$state' $t_end s after $h2 died, not COMPLETED"
restarts=$(echo "$info" | tr ' ' '\n' | sed -n 's/^Restarts=//p')
[ "${restarts:-0}" -eq 0 ] || fail "job $job was requeued ($restarts), not restarted inside its allocation"
grep -q "train.sbatch: lost node(s) $h2 (step exit [0-9]*); restart 1 of 3 on 1 node(s) \[$h1\], 1 task(s), from .*model_$(printf %07d $K).h5" "$T/train.out" ||
    fail "train.sbatch did not log the lost node and a restart on $h1 from checkpoint $K"
grep -q "resumed from .*model_$(printf %07d $K)\.h5 at step $K " "$T/train.out" ||
    fail "the restarted step did not resume from checkpoint $K"
grep -q " info\( r0\)\?\] world size 1, " "$T/train.out" || fail "the restarted step did not run with world size 1"
[ "$(grep -c "train.sbatch: lost node" "$T/train.out")" -eq 1 ] || fail "more than one restart"
final=$T/run/model_$(printf %07d $MAX).h5
[ -s "$final" ] || fail "the job did not reach step $MAX"
step_rc=$(sed -n 's/.*lost node(s) .* (step exit \([0-9]*\)).*/\1/p' "$T/train.out")
ok "job $job: $h2 killed while holding at step $HOLD; the step ended ($(exit_why "$step_rc")), Slurm dropped $h2, train.sbatch restarted on $h1 from checkpoint $K and the job COMPLETED $t_end s after the kill"

# ---- the same as one host resuming from that checkpoint ----
on "$h1" "$BUILD/mrcnn" train --config configs/tiny.yaml --set "OUTPUT_DIR=$T/ref" --resume --comm-timeout 10 \
    --set "DATASETS.TRAIN=$T/shards/train-index.h5" --max-steps $MAX "${TRAIN_SET[@]}" > "$T/ref.log" 2>&1 ||
    { cat "$T/ref.log"; fail "the one-host run resumed from checkpoint $K failed"; }
grep -q "resumed from .*model_$(printf %07d $K)\.h5 at step $K " "$T/ref.log" || fail "the one-host run did not resume from checkpoint $K"
"$PY_TORCH" "$ROOT/tests/cluster/compare_ckpt.py" "$final" "$T/ref/model_$(printf %07d $MAX).h5" "$ckpt" ||
    fail "the job's final checkpoint differs from a one-host run resumed from checkpoint $K"
ok "the job's step-$MAX weights and momentum == a one-host run resumed from checkpoint $K, bit for bit"
passed=1
echo "PASS: a job that lost a node went on, in $(elapsed) s"
