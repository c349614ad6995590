#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz/README.md): run_fuzz.sh SECONDS [TARGET...]
# (make fuzz SECONDS=N, make fuzz-smoke). Each target runs SECONDS seconds over its
# scratch corpus build/fuzz/corpus/T (new inputs go there) and the repository corpus
# tests/fuzz/corpus/T (read only: it grows only when someone adds a file on purpose),
# with -timeout=10 per input (a hang is a bug), -rss_limit_mb=2048, and dictionaries for
# the JSON and YAML targets. Crash, timeout, OOM and leak inputs are kept under
# build/fuzz/crashes/T/, the full log under build/fuzz/logs/T.log. Prints per target the
# executions, exec/s, corpus size and findings; exits 1 if any target found anything.
#
# Environment: FUZZ_DIR (build/fuzz); FUZZ_FORK=1 runs each target in libFuzzer's fork
# mode and keeps going after a finding (-ignore_crashes/-ignore_ooms/-ignore_timeouts),
# to collect several findings in one run; FUZZ_JOBS=N runs N targets at once (default 1);
# FUZZ_ARGS adds libFuzzer flags; FUZZ_UBSAN_SUPP names a UBSan suppressions file. Sanitizer
# options come from the caller (fuzz.mk) or default to the same.
set -uo pipefail
cd "$(dirname "$0")/../.."
FUZZ_DIR=${FUZZ_DIR:-build/fuzz}
SECS=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(json config config_merge rle coco_gt coco_prep results image shard_raw shard_struct ckpt_raw ckpt_struct)
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# FUZZ_UBSAN_SUPP=FILE: UBSan reports matching FILE (check:function lines) are set aside, e.g.
# to keep fuzzing past a known report until its fix lands. Empty by default: every report fails.
[ -n "${FUZZ_UBSAN_SUPP:-}" ] && UBSAN_OPTIONS="$UBSAN_OPTIONS:suppressions=$(realpath "$FUZZ_UBSAN_SUPP")"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

mkdir -p "$FUZZ_DIR/logs" "$FUZZ_DIR/tmp"
export MRCNN_FUZZ_TMP=${MRCNN_FUZZ_TMP:-/dev/shm}

run_one() {
    local t=$1 bin="$FUZZ_DIR/fuzz_$1"
    local scratch="$FUZZ_DIR/corpus/$t" crashes="$FUZZ_DIR/crashes/$t" log="$FUZZ_DIR/logs/$t.log"
    mkdir -p "$scratch" "$crashes" "tests/fuzz/corpus/$t"
    local dict=()
    case $t in
        json | coco_gt | coco_prep | results) dict=(-dict=tests/fuzz/json.dict) ;;
        config | config_merge) dict=(-dict="$FUZZ_DIR/config.dict") ;;
    esac
    local fork=()
    [ "${FUZZ_FORK:-0}" = 1 ] && fork=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
    local stamp="$FUZZ_DIR/tmp/$t.stamp"
    touch "$stamp"
    local start=$SECONDS
    # shellcheck disable=SC2086
    timeout -k 30 $((SECS + 300)) "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -close_fd_mask=3 -artifact_prefix="$crashes/" "${dict[@]}" "${fork[@]}" ${FUZZ_ARGS:-} \
        "$scratch" "tests/fuzz/corpus/$t" </dev/null >"$log" 2>&1
    local rc=$?
    local wall=$((SECONDS - start))
    # The numbers: final stats when libFuzzer printed them, else its last status line.
    local execs eps
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    if [ -z "$execs" ]; then
        local last
        last=$(grep -E '^#[0-9]+' "$log" | tail -1)
        execs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$last")
        eps=$(sed -nE 's/.*exec\/s: ([0-9]+).*/\1/p' <<<"$last")
    fi
    [ -n "$eps" ] || { [ -n "$execs" ] && [ "$wall" -gt 0 ] && eps=$((execs / wall)); }
    local corpus new_findings
    corpus=$(($(find "$scratch" -type f | wc -l) + $(find "tests/fuzz/corpus/$t" -type f | wc -l)))
    new_findings=$(find "$crashes" -type f -newer "$stamp" \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \
        -o -name 'leak-*' \) | wc -l)
    local status=ok
    if [ "$rc" -ne 0 ] || [ "$new_findings" -gt 0 ]; then status=FAIL; fi
    printf '%-13s %-4s %6ss %12s execs %8s exec/s %6s corpus %3s findings (rc %s)\n' "$t" "$status" "$wall" \
        "${execs:-?}" "${eps:-?}" "$corpus" "$new_findings" "$rc"
    if [ "$status" = FAIL ]; then
        grep -E '^==FUZZ== finding|^==[0-9]+==ERROR|SUMMARY: |runtime error|deadly signal|out-of-memory|Timeout after|leak' "$log" |
            sort | uniq -c | sort -rn | head -8 | sed 's/^/    /'
        find "$crashes" -type f -newer "$stamp" | head -5 | sed 's/^/    input: /'
        echo "    log: $log"
        return 1
    fi
    return 0
}

echo "fuzz: ${#TARGETS[@]} targets x ${SECS}s (corpora: $FUZZ_DIR/corpus/T + tests/fuzz/corpus/T; findings: $FUZZ_DIR/crashes/T)"
failed=0
nfail=0
jobs_max=${FUZZ_JOBS:-1}
if [ "$jobs_max" -le 1 ]; then
    for t in "${TARGETS[@]}"; do run_one "$t" || { failed=1; nfail=$((nfail + 1)); }; done
else
    outdir=$(mktemp -d "$FUZZ_DIR/tmp/run.XXXXXX")
    pids=()
    for t in "${TARGETS[@]}"; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 1; done
        (run_one "$t" >"$outdir/$t.out" 2>&1; echo $? >"$outdir/$t.rc") &
        pids+=($!)
    done
    wait
    for t in "${TARGETS[@]}"; do
        cat "$outdir/$t.out"
        [ "$(cat "$outdir/$t.rc")" = 0 ] || { failed=1; nfail=$((nfail + 1)); }
    done
    rm -rf "$outdir"
fi
# Scratch folders of fuzz processes that died without cleaning up (crashes, fork children).
for d in "${MRCNN_FUZZ_TMP:?}"/mrcnn-fuzz-*; do
    [ -d "$d" ] || continue
    pid=${d##*-}
    kill -0 "$pid" 2>/dev/null || rm -rf "$d"
done
# LLVM's libomp leaves /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> behind when a process dies
# without running its exit handlers (every crash, every fork-mode job): those of dead pids go.
for f in /dev/shm/__KMP_REGISTERED_LIB_*; do
    [ -e "$f" ] || continue
    pid=$(basename "$f" | sed -E 's/^__KMP_REGISTERED_LIB_([0-9]+)_.*/\1/')
    [[ $pid =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null && rm -f "$f"
done
# The test runner's summary form, so that .ci/run adds the targets to its count.
echo "$((${#TARGETS[@]} - nfail)) passed, $nfail failed, 0 skipped"
if [ $failed -ne 0 ]; then
    echo "fuzz: FAILED (reproduce: $FUZZ_DIR/fuzz_T INPUT; see tests/fuzz/README.md)"
    exit 1
fi
echo "fuzz: all targets clean"
