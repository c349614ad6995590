#!/usr/bin/env bash
# A rank that dies (SIGKILL) or hangs (SIGSTOP) in a running 3-rank job takes the
# whole job down within a bounded time: a hang exits 3 (MRCNN_EXIT_COMM_TIMEOUT) naming
# the comm timeout; a death exits 137, mpirun passing on the rank's SIGKILL (or 3, should
# a survivor's comm timeout fire before mpirun notices).
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Under ASan, the fast unwinder stops inside Open MPI and its leaks then escape
# tests/lsan.supp; full unwinding lets the suppressions match.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
prog=$BUILD/tests/mpi/prog_buckets
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
tmp=$(mktemp -d)
. "${ROOT:-$(dirname "$0")/../..}/tests/common/exit_codes.sh"
victim=""
cleanup() { [ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
TIMEOUT_S=4
run_case() { # $1: signal
    local sig=$1 dir=$tmp/$1
    mkdir -p "$dir"
    mpirun --oversubscribe -np 3 "$prog" loop "$dir" $TIMEOUT_S > "$dir/out" 2>&1 &
    local mp=$!
    for _ in $(seq 1 200); do
        [ -f "$dir/pid.1" ] && grep -q "step 20" "$dir/out" && break
        sleep 0.1
    done
    grep -q "step 20" "$dir/out" || { echo "FAIL: job did not start"; cat "$dir/out"; kill $mp; return 1; }
    victim=$(cat "$dir/pid.1")
    local t0=$(date +%s.%N)
    kill -"$sig" "$victim"
    # The bound: the watchdog timeout plus abort/teardown slack.
    local limit=$((TIMEOUT_S + 25)) waited=0
    while kill -0 $mp 2>/dev/null && [ $waited -lt $((limit * 10)) ]; do sleep 0.1; waited=$((waited + 1)); done
    if kill -0 $mp 2>/dev/null; then
        echo "FAIL: SIG$sig of rank 1: job still running after ${limit}s"
        kill -CONT "$victim" 2>/dev/null; kill -9 "$victim" 2>/dev/null; kill $mp; wait $mp
        return 1
    fi
    wait $mp
    local rc=$?
    local dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    kill -CONT "$victim" 2>/dev/null
    victim=""
    tail -n 5 "$dir/out"
    echo "SIG$sig of rank 1: job exited rc=$rc after ${dt}s"
    if [ "$sig" = STOP ]; then
        expect_exit "$EXIT_COMM" $rc "SIG$sig of rank 1" || return 1
        grep -q "comm timeout" "$dir/out" || { echo "FAIL: no comm timeout message"; cat "$dir/out"; return 1; }
    fi
    if [ "$sig" = KILL ]; then
        expect_exit "137|$EXIT_COMM" $rc "SIG$sig of rank 1" || return 1
    fi
    return 0
}
run_case KILL || exit 1
run_case STOP || exit 1
echo "PASS"
