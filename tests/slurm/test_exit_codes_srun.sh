#!/usr/bin/env bash
# The exit codes a user sees through srun (README "Exit codes"), on a local
# one-node Slurm cluster (tests/slurm/cluster.sh), with the srun flags of jobs/env.sh
# (--mpi=pmix --kill-on-bad-exit=1), 2 ranks of the stand-in trainer (prog_standin):
#  - SIGTERM to the tasks (scancel -s TERM: what preemption sends): 99;
#  - a task that hangs (SIGSTOP): 3 (comm watchdog);
#  - a task killed by SIGKILL: Slurm ends the step and signals the others, which exit
#    3 when --comm-timeout is shorter than KillWait; with a longer timeout they are
#    killed at KillWait and srun exits 137 (128 + 9), as documented;
#  - an error on every rank: 1;
#  - SIGTERM to srun itself: srun kills the step ("forcing job termination"): 137.
# If Slurm cannot run here, this fails with the reason (it never skips silently).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build/release}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
source "$ROOT/tests/common/exit_codes.sh" # sanitizer reports exit 86, never an expected code
prog=$BUILD/tests/train/prog_standin
[ -x "$prog" ] || { echo "FAIL: not built: $prog"; exit 1; }
T=$(mktemp -d /tmp/mrcnn-srun-codes.XXXXXX)
pids=""
cleanup() {
    local rc=$?
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    if [ -n "${SLURM_CONF:-}" ] && [ -f "${SLURM_CONF:-/nonexistent}" ]; then
        scancel -u "$(id -un)" 2>/dev/null
        for _ in $(seq 50); do
            [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.2
        done
        tests/slurm/cluster.sh stop "$T/cluster"
    fi
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT
source "$ROOT/tests/common/checks.sh" # fails, bad, wait_for
task_pid() { pgrep -f "^[^ ]*prog_standin $1 " | sort -n | tail -n 1; }

mkdir -p "$T/cluster"
start_out=$(MRCNN_SLURM_DIR=$T/cluster tests/slurm/cluster.sh start 2> "$T/cluster-start.err")
rc=$?
if [ $rc -ne 0 ]; then
    cat "$T/cluster-start.err"
    [ $rc -eq 3 ] && { echo "FAIL: Slurm is not installed here (run 'make deps')"; exit 1; }
    echo "FAIL: the local Slurm cluster did not start (cluster.sh exit $rc)"; exit 1
fi
eval "$start_out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
kill_wait=$(sed -n 's/^KillWait=//p' "$SLURM_CONF")
SRUN=(srun --mpi=pmix --kill-on-bad-exit=1 -n 2 --cpus-per-task=1 -J mrcnn-codes)
RUN=(--sleep-ms 50 --set SOLVER.MAX_ITER=5000 --set SOLVER.CHECKPOINT_PERIOD=0)

# start NAME [prog args...]: srun in the background; waits for step 5
start() {
    local name=$1
    shift
    timeout 120 "${SRUN[@]}" "$prog" "$T/$name" "${RUN[@]}" "$@" > "$T/$name.log" 2>&1 &
    sp=$!
    pids="$pids $sp"
    wait_for "$T/$name.log" "step 5/" 60 || { bad "$name: the job did not start"; tail -n 5 "$T/$name.log"; return 1; }
}
expect() { # name rc want what
    if [ "$2" -ne "$3" ]; then bad "$1: srun exited $2, want $3 ($4)"; tail -n 8 "$T/$1.log"; else echo "$1: srun exited $2 ($4)"; fi
}

if start term; then
    scancel -s TERM "$(squeue -h -n mrcnn-codes -o %i | head -n 1)"
    wait $sp
    expect term $? 99 "preempted: checkpoint written"
    grep -q "preemption signal: checkpoint at step [0-9]* written" "$T/term.log" || bad "term: no checkpoint message"
fi
if start stop --comm-timeout 3; then
    v=$(task_pid "$T/stop")
    kill -STOP "$v"
    wait $sp
    rc=$?
    kill -CONT "$v" 2>/dev/null
    expect stop $rc 3 "a hung rank: comm timeout"
    grep -q "comm timeout" "$T/stop.log" || bad "stop: no comm timeout message"
fi
if start kill9-short --comm-timeout 3; then
    kill -9 "$(task_pid "$T/kill9-short")"
    wait $sp
    expect kill9-short $? 3 "a killed rank, --comm-timeout 3 < KillWait $kill_wait"
fi
if start kill9-long --comm-timeout 600; then
    kill -9 "$(task_pid "$T/kill9-long")"
    wait $sp
    expect kill9-long $? 137 "a killed rank, --comm-timeout 600 > KillWait $kill_wait: killed by Slurm"
fi
timeout 120 "${SRUN[@]}" "$prog" "$T/err" --set SOLVER.IMS_PER_BATCH=3 > "$T/err.log" 2>&1
expect err $? 1 "an error on every rank"
if start srunterm; then
    kill -TERM $sp
    wait $sp
    expect srunterm $? 137 "SIGTERM to srun: srun kills the step"
fi

[ $fails -eq 0 ] || { echo "FAIL: $fails case(s)"; exit 1; }
echo PASS
