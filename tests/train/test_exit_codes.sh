#!/usr/bin/env bash
# The exit codes a user sees (README, "Exit codes"), launched directly and by mpirun
# (tests/slurm/test_exit_codes_srun.sh checks the same through srun):
#  - SIGTERM during start-up of `mrcnn train` (MPI init, model, weights): 99 with a
#    checkpoint after the first step, and --resume continues (was 143, nothing written:
#    the handlers were installed only when the training loop started);
#  - a rank that hangs (SIGSTOP): 3 from the comm watchdog, with its message;
#  - an error on every rank (a batch that does not split): 1; too many non-finite
#    steps: 4; both through mpirun;
#  - what no program can change, as documented: a rank killed by SIGKILL makes mpirun
#    end the job at once with 137 (128 + 9); SIGTERM to mpirun makes it exit 1 (Open
#    MPI 4.x sets its own exit status when signalled; SIGUSR1 is forwarded: 99).
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
# Sanitizer reports exit 86, so they never pass as an expected error exit.
source "$ROOT/tests/common/exit_codes.sh"
prog=$BUILD/tests/train/prog_standin
M=$BUILD/mrcnn
[ -x "$prog" ] && [ -x "$M" ] && [ -x "$BUILD/mrcnn-prep" ] || { echo "not built: $prog / $M"; exit 1; }
source "$ROOT/tests/train/common_fixture.sh"
tmp=$(mktemp -d)
pids=""
victim=""
cleanup() {
    [ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
source "$ROOT/tests/common/checks.sh" # fails, bad, wait_for
rank_pid() { # dir: the pid of one rank of prog_standin (not mpirun's)
    pgrep -f "^[^ ]*prog_standin $1 " | sort -n | tail -n 1
}

# ---- SIGTERM during start-up ----
# Deterministically inside `mrcnn train`'s start-up: --config is a FIFO, so the process
# waits in the config's open() (kernel wait channel wait_for_partner) until the YAML is
# written into it; the signal arrives there, before MPI, the model and the loop.
fixture_shards "$tmp" || exit 1
early_case() { # name how
    local out=$tmp/$1 log=$tmp/$1.log fifo=$tmp/$1.yaml p rc k
    mkfifo "$fifo"
    "${SOLO[@]}" "$M" train --config "$fifo" --set DATASETS.TRAIN="$tmp/shards/train-index.h5" \
        --set OUTPUT_DIR="$out" --set LOG_PERIOD=1 --max-steps 50 > "$log" 2>&1 &
    p=$!
    pids="$pids $p"
    if [ "$2" = fifo ]; then
        for _ in $(seq 1 200); do
            [ "$(cat /proc/$p/wchan 2>/dev/null)" = wait_for_partner ] && break
            sleep 0.05
        done
        [ "$(cat /proc/$p/wchan 2>/dev/null)" = wait_for_partner ] || sleep 2 # no wchan here: main is reached by then
        kill -TERM $p
        cat "$ROOT/configs/tiny.yaml" > "$fifo"
    else
        cat "$ROOT/configs/tiny.yaml" > "$fifo"
        sleep "$2"
        kill -TERM $p
    fi
    wait $p
    rc=$?
    k=$(sed -n 's/.*preemption signal: checkpoint at step \([0-9]*\) written.*/\1/p' "$log")
    if [ $rc -ne 99 ] || [ -z "$k" ] || [ ! -s "$out/model_$(printf %07d "$k").h5" ]; then
        bad "$1: SIGTERM during start-up: exit $rc, want 99 and a checkpoint"; tail -n 5 "$log"
        return
    fi
    "${SOLO[@]}" "$M" train --config "$ROOT/configs/tiny.yaml" --set DATASETS.TRAIN="$tmp/shards/train-index.h5" \
        --set OUTPUT_DIR="$out" --set LOG_PERIOD=1 --max-steps $((k + 1)) --resume >> "$log" 2>&1 ||
        bad "$1: resume after an early SIGTERM: exit $?"
    grep -q "resumed from .*model_$(printf %07d "$k").h5 at step $k" "$log" || bad "$1: no resume from step $k"
    echo "$1: exit 99, checkpoint at step $k, resumed"
}
early_case term-in-config-open fifo
early_case term-after-0.3s 0.3

# ---- a hung rank: 3 ----
dir=$tmp/hang
mpirun --oversubscribe -np 2 "$prog" "$dir" --sleep-ms 50 --comm-timeout 3 --set SOLVER.MAX_ITER=2000 \
    --set SOLVER.CHECKPOINT_PERIOD=0 > "$dir.log" 2>&1 &
mp=$!
pids="$pids $mp"
if wait_for "$dir.log" "step 5/" 60; then
    victim=$(rank_pid "$dir")
    kill -STOP "$victim"
    wait $mp
    rc=$?
    kill -CONT "$victim" 2>/dev/null
    kill -9 "$victim" 2>/dev/null
    victim=""
    if [ $rc -ne 3 ] || ! grep -q "^mrcnn error \[rank [0-9]\] comm timeout: .* has not completed after" "$dir.log"; then
        bad "SIGSTOP of a rank: exit $rc, want 3 with the comm timeout message"; tail -n 8 "$dir.log"
    else
        echo "SIGSTOP of a rank under mpirun: exit 3 (comm timeout)"
    fi
else
    bad "the hang job did not start"; tail -n 5 "$dir.log"
fi

# ---- errors (1) and non-finite steps (4) through mpirun ----
mpirun --oversubscribe -np 2 "$prog" "$tmp/err" --set SOLVER.IMS_PER_BATCH=3 > "$tmp/err.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "^mrcnn error" "$tmp/err.log" || { bad "an error on 2 ranks: exit $rc, want 1"; tail -n 5 "$tmp/err.log"; }
echo "an error on both ranks under mpirun: exit $rc"
mpirun --oversubscribe -np 2 "$prog" "$tmp/nf" --inject-inf 2:100 --set SOLVER.MAX_NONFINITE=3 --max-steps 20 > "$tmp/nf.log" 2>&1
rc=$?
[ $rc -eq 4 ] || { bad "too many non-finite steps on 2 ranks: exit $rc, want 4"; tail -n 5 "$tmp/nf.log"; }
echo "too many non-finite steps under mpirun: exit $rc"

# ---- what mpirun itself decides (documented in the README) ----
if mpirun --version 2>&1 | grep -q "Open MPI) 4\."; then
    dir=$tmp/kill9
    mpirun --oversubscribe -np 2 "$prog" "$dir" --sleep-ms 50 --set SOLVER.MAX_ITER=2000 --set SOLVER.CHECKPOINT_PERIOD=0 \
        > "$dir.log" 2>&1 &
    mp=$!
    pids="$pids $mp"
    if wait_for "$dir.log" "step 5/" 60; then
        kill -9 "$(rank_pid "$dir")"
        wait $mp
        rc=$?
        [ $rc -eq 137 ] || { bad "kill -9 of a rank under mpirun: exit $rc, the README says 137"; tail -n 5 "$dir.log"; }
        echo "kill -9 of a rank under mpirun: exit $rc (mpirun ends the job at once: 128 + 9)"
    else
        bad "the kill -9 job did not start"
    fi
    dir=$tmp/termmpirun
    mpirun --oversubscribe -np 2 "$prog" "$dir" --sleep-ms 50 --set SOLVER.MAX_ITER=2000 --set SOLVER.CHECKPOINT_PERIOD=0 \
        > "$dir.log" 2>&1 &
    mp=$!
    pids="$pids $mp"
    if wait_for "$dir.log" "step 5/" 60; then
        kill -TERM $mp
        wait $mp
        rc=$?
        [ $rc -eq 1 ] || { bad "SIGTERM to mpirun: exit $rc, the README says 1"; tail -n 5 "$dir.log"; }
        echo "SIGTERM to mpirun: exit $rc (Open MPI's own status when signalled)"
    else
        bad "the SIGTERM job did not start"
    fi
else
    echo "note: not Open MPI 4.x; the launcher-specific codes documented for it are not checked"
fi

[ $fails -eq 0 ] || { echo "FAIL: $fails case(s)"; exit 1; }
echo PASS
