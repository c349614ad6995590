#!/usr/bin/env bash
# Preemption and crash safety (stand-in model, prog_standin.c):
#  - SIGUSR1 to mpirun (forwarded to the ranks, as Slurm's --signal=USR1@120 does)
#    and SIGTERM to a single rank: the step finishes, a checkpoint is written, every
#    rank exits 99 (MRCNN_EXIT_REQUEUE), and --resume continues from it;
#  - kill -9 of the trainer while it writes a checkpoint leaves the previous one
#    complete and usable: --resume picks it and training continues.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Under ASan, the fast unwinder stops inside Open MPI and its leaks then escape
# tests/lsan.supp; full unwinding lets the suppressions match.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
prog=$BUILD/tests/train/prog_standin
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
tmp=$(mktemp -d)
. "${ROOT:-$(dirname "$0")/../..}/tests/common/exit_codes.sh"
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. "${ROOT:-$(dirname "$0")/../..}/tests/common/checks.sh" # fails, bad, wait_for
signal_case() { # name how
    local name=$1 how=$2 dir=$tmp/$1
    mpirun --oversubscribe -np 2 "$prog" "$dir" --sleep-ms 50 --set SOLVER.MAX_ITER=400 --set SOLVER.CHECKPOINT_PERIOD=0 \
        > "$dir.log" 2>&1 &
    local mp=$!
    pids="$pids $mp"
    wait_for "$dir.log" "step 5/" 30 || { echo "FAIL: $name: job did not start"; cat "$dir.log"; return 1; }
    if [ "$how" = usr1-mpirun ]; then
        kill -USR1 $mp
    else
        local rank_pid
        rank_pid=$(pgrep -f "prog_standin $dir " | sort -n | tail -1)
        [ -n "$rank_pid" ] || { echo "FAIL: no rank process"; return 1; }
        kill -TERM "$rank_pid"
    fi
    wait $mp
    expect_exit "$EXIT_REQUEUE" $? "$name" || { cat "$dir.log"; return 1; }
    grep -q "preemption signal: checkpoint at step [0-9]* written" "$dir.log" || { echo "FAIL: $name: no message"; cat "$dir.log"; return 1; }
    local step
    step=$(ls "$dir" | sed -n 's/^model_0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n | tail -1)
    [ -n "$step" ] && [ "$step" -ge 5 ] && [ "$step" -lt 400 ] || { echo "FAIL: $name: checkpoint step '$step'"; ls "$dir"; return 1; }
    mpirun --oversubscribe -np 2 "$prog" "$dir" --resume --max-steps $((step + 3)) --set SOLVER.MAX_ITER=400 \
        --set SOLVER.CHECKPOINT_PERIOD=0 >> "$dir.log" 2>&1 || { echo "FAIL: $name: resume"; cat "$dir.log"; return 1; }
    grep -q "resumed from .* at step $step" "$dir.log" || { echo "FAIL: $name: resume step"; cat "$dir.log"; return 1; }
    echo "$name: exit 99 with a checkpoint at step $step; resumed and finished"
}
signal_case usr1 usr1-mpirun || exit 1
signal_case term term-one-rank || exit 1

# kill -9 during a checkpoint write: 64 MiB of weights + 64 MiB of momentum per file,
# one checkpoint per step.
dir=$tmp/kill
for attempt in 1 2 3; do
    rm -rf "$dir"; mkdir -p "$dir"
    "$prog" "$dir" --big 16000000 --set SOLVER.CHECKPOINT_PERIOD=1 --set SOLVER.CHECKPOINT_KEEP=2 \
        --set SOLVER.MAX_ITER=400 > "$dir.log" 2>&1 &
    tp=$!
    pids="$pids $tp"
    wait_for "$dir.log" "checkpoint .*model_0000002.h5" 60 || { echo "FAIL: no second checkpoint"; cat "$dir.log"; exit 1; }
    hit=0
    for _ in $(seq 1 2000); do
        if ls "$dir"/.model_*.h5.tmp > /dev/null 2>&1; then kill -9 $tp; hit=1; break; fi
        sleep 0.005
    done
    wait $tp 2>/dev/null
    rc=$?
    # killed by our SIGKILL, not ended on its own (a crash, an error) before it
    [ $hit -eq 1 ] && { expect_exit 137 $rc "the trainer killed during a checkpoint write" || { cat "$dir.log"; exit 1; }; }
    ls "$dir"/.model_*.h5.tmp > /dev/null 2>&1 && [ $hit -eq 1 ] && break
    echo "attempt $attempt: the kill missed the write window; again"
done
ls -la "$dir"
ls "$dir"/.model_*.h5.tmp > /dev/null 2>&1 || { echo "FAIL: could not kill during a write"; exit 1; }
last=$(ls "$dir" | sed -n 's/^model_0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n | tail -1)
"$prog" "$dir" --resume --big 16000000 --max-steps $((last + 1)) --set SOLVER.CHECKPOINT_PERIOD=1 \
    --set SOLVER.MAX_ITER=400 > "$dir.resume.log" 2>&1 || { echo "FAIL: resume after kill -9"; cat "$dir.resume.log"; exit 1; }
grep -q "resumed from .*model_0*$last.h5 at step $last" "$dir.resume.log" || { echo "FAIL: resume"; cat "$dir.resume.log"; exit 1; }
ls "$dir"/.model_*.h5.tmp > /dev/null 2>&1 && { echo "FAIL: stale temporary file left after the next checkpoint"; exit 1; }
echo "kill -9 during a checkpoint write: previous checkpoint (step $last) complete, resumed from it"
echo PASS
