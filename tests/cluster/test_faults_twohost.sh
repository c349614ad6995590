#!/usr/bin/env bash
# Faults between hosts: `mrcnn train`, one rank on each of the two test hosts
# (mpirun on host 1, host 2's rank through the rsh agent, MPI over the veth pair), a
# checkpoint every 2 steps. Once a few steps are done, one fault:
#   kill-host   every process of host 2 (its Open MPI daemon and its rank) gets SIGKILL;
#   link-down   host 2's end of the veth pair goes down (the cable is pulled);
#   blackhole   host 2 drops every packet to host 1 (a blackhole route; the link stays up);
#   pause-ranks host 2's ranks are stopped (SIGSTOP: a rank stuck in the kernel or a
#               debugger; its Open MPI daemon still runs).
# Each must end the job in bounded time (the comm timeout + the abort's 20 s alarm + slack)
# with the documented exit code (README "Exit codes": 137 for a killed rank under mpirun,
# 3 for a hung peer), the time from fault to the job's end is printed, and the newest
# checkpoint must be complete: a 1-rank `--resume` loads it (no fallback to an older one).
# FAULT_CASES (default: all four) picks cases; CLUSTER_COMM_TIMEOUT (default 6) is the
# --comm-timeout, longer than the launcher's keepalive detection (README: keep it so on a
# real cluster); 0 turns the watchdog off: then pause-ranks must FAIL this test.
source "$(dirname "$0")/common.sh"
[ -x "$BUILD/mrcnn" ] && [ -x "$BUILD/mrcnn-prep" ] || fail "not built: $BUILD/mrcnn, $BUILD/mrcnn-prep"
CT=${CLUSTER_COMM_TIMEOUT:-6}
LIMIT=$(awk -v t="$CT" 'BEGIN { printf "%d", t + 20 + 15 }') # timeout + abort alarm + slack
make_shards 1

mp="" # the running mpirun (nsenter) pid, for the cleanup hook
cluster_cleanup_hook() { [ -n "$mp" ] && kill -9 "$mp" 2>/dev/null; th_kill_host "$h2" CONT 2>/dev/null; }

# The documented codes (README "Exit codes"): a host that dies or drops off the network
# under mpirun is a lost Open MPI daemon: mpirun exits 205 (Open MPI 4.1's -51,
# OPAL_ERR_COMM_FAILURE), after the out-of-band keepalive (common.sh: ~3 s here) misses
# it; a network fault may also be caught first by the ranks' watchdog (3); stopped ranks
# are hung peers: 3.
EXIT_LOST_HOST=205
want_code() {
    case $1 in
    # mpirun lost the host's daemon (205), or the daemon reported its rank's SIGKILL before
    # it died itself: mpirun exits 9 then (the signal number, not 128+9; a race, seen here).
    kill-host) echo "$EXIT_LOST_HOST|9|137" ;;
    link-down|blackhole) echo "$EXIT_LOST_HOST|$EXIT_COMM" ;; # keepalive (first, by design) or the watchdog
    pause-ranks) echo "$EXIT_COMM" ;;
    esac
}

# Puts host 2 back as it was for the next case: link up, no blackhole, no process left.
restore_host() {
    case $1 in
    link-down) th_link "$h2" up ;;
    blackhole) th_blackhole "$h2" off ;;
    esac
    th_kill_host "$h2" CONT
    th_kill_host "$h2" KILL
    local i
    for i in $(seq 50); do [ -z "$(th_procs "$h2")" ] && break; sleep 0.1; done
}

summary=""
run_case() {
    local name=$1 out=$T/$1 log=$T/$1.log
    mpirun_on "$h1:1,$h2:1" 2 "$BUILD/mrcnn" train --config "$ROOT/configs/tiny.yaml" \
        --set "DATASETS.TRAIN=$T/shards/train-index.h5" --set "OUTPUT_DIR=$out" --max-steps 100000 \
        --set SOLVER.MAX_ITER=100000 --set SOLVER.CHECKPOINT_PERIOD=2 --set SOLVER.CHECKPOINT_KEEP=3 \
        --set SOLVER.BASE_LR=0.002 --set LOG_PERIOD=1 --comm-timeout "$CT" > "$log" 2>&1 &
    mp=$!
    local i last=""
    for i in $(seq 600); do
        last=$(tail -n 1 "$out/metrics.json" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')
        [ -n "$last" ] && [ "$last" -ge 5 ] && break
        kill -0 $mp 2>/dev/null || { cat "$log"; fail "$name: the job ended before the fault"; }
        sleep 0.1
    done
    [ -n "$last" ] && [ "$last" -ge 5 ] || { tail -n 20 "$log"; fail "$name: no step 5 within 60 s"; }
    local t0 victims=""
    case $name in
    kill-host) victims=$(th_procs "$h2") ;;
    pause-ranks) victims=$(th_procs "$h2" mrcnn) ;;
    esac
    t0=$(date +%s.%N)
    case $name in
    kill-host) kill -KILL $victims ;;
    link-down) th_link "$h2" down ;;
    blackhole) th_blackhole "$h2" on ;;
    pause-ranks) kill -STOP $victims ;;
    esac
    echo "$name: fault injected after step $last"
    local waited=0
    while kill -0 $mp 2>/dev/null && [ $waited -lt $((LIMIT * 10)) ]; do sleep 0.1; waited=$((waited + 1)); done
    local dt
    dt=$(elapsed "$t0")
    if kill -0 $mp 2>/dev/null; then
        echo "---- $log (last 15 lines)"; tail -n 15 "$log"
        echo "FAIL: $name: the job is still running ${LIMIT} s after the fault (not detected in time)"
        kill -9 $mp 2>/dev/null
        th_kill_host "$h1" KILL mpirun
        th_kill_host "$h1" KILL mrcnn
        wait $mp 2>/dev/null
        mp=""
        restore_host "$name"
        return 1
    fi
    wait $mp
    local rc=$?
    mp=""
    local watchdog
    watchdog=$(grep -m1 -o "comm timeout: '[^']*' has not completed after [0-9.]* s" "$log")
    echo "$name: the job ended $dt s after the fault, exit $(exit_why $rc)${watchdog:+; watchdog: $watchdog}"
    local leftover
    leftover=$(th_pids "$h2" | grep -v -x "$(th_holder "$h2")" | tr '\n' ' ')
    [ -n "$leftover" ] && echo "$name: still on $h2 after the job ended: $(for p in $leftover; do tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-40; echo -n '; '; done)"
    restore_host "$name"
    expect_exit "$(want_code "$name")" $rc "$name" || { tail -n 15 "$log"; return 1; }
    # The newest checkpoint is complete: a 1-rank resume loads it, falling back to nothing.
    local newest k
    newest=$(ls -1 "$out"/model_*.h5 2>/dev/null | sort | tail -n 1)
    [ -n "$newest" ] || { echo "FAIL: $name: no checkpoint in $out"; return 1; }
    ls "$out" | grep -q -i 'tmp' && echo "note: $name left a temporary file: $(ls "$out" | grep -i tmp)"
    k=$(basename "$newest" .h5)
    k=$((10#${k#model_}))
    on "$h1" "$BUILD/mrcnn" train --config "$ROOT/configs/tiny.yaml" --set "DATASETS.TRAIN=$T/shards/train-index.h5" \
        --set "OUTPUT_DIR=$out" --resume --max-steps $((k + 1)) --set SOLVER.MAX_ITER=100000 \
        --set SOLVER.BASE_LR=0.002 --set SOLVER.CHECKPOINT_PERIOD=2 > "$out.resume.log" 2>&1 ||
        { cat "$out.resume.log"; echo "FAIL: $name: resuming from $newest failed"; return 1; }
    grep -q "resumed from $newest at step $k " "$out.resume.log" ||
        { grep -i "resum\|checkpoint" "$out.resume.log"; echo "FAIL: $name: the resume did not load $newest (step $k)"; return 1; }
    summary="$summary  $(printf '%-10s exit %-3s in %5s s after the fault; newest checkpoint step %d loads\n' "$name" $rc "$dt" $k)\n"
    echo "ok ($(elapsed) s): $name: exit $rc in $dt s, checkpoint model_$(printf %07d $k).h5 intact"
}

fails=0
for c in ${FAULT_CASES:-kill-host link-down blackhole pause-ranks}; do
    run_case "$c" || fails=$((fails + 1))
done
printf "time to detect (fault -> job ended), --comm-timeout %s:\n$summary" "$CT"
[ $fails -eq 0 ] || fail "$fails fault case(s)"
echo "PASS: faults between hosts in $(elapsed) s"
