#!/usr/bin/env bash
# Runs the test suites: every built tests/<suite>/test_* program and every
# tests/<suite>/test_*.sh script. Usage: run_tests.sh [item[,item...]], an item being
# a suite (model) or one test of it (train/test_equivalence.sh, model/test_net_train).
# Env: BUILD (build dir), PY_TORCH, PY_COCO, MRCNN_REQUIRE (capabilities whose absence
# fails instead of skipping). Exit 77 from a test means "skipped", with a line
# "skip [CAP]: reason" in its output.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build/release}
export BUILD ROOT
export PY_TORCH=${PY_TORCH:-/usr/bin/python3} PY_COCO=${PY_COCO:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export CMOCKA_MESSAGE_OUTPUT=stdout
# Busy-waiting OpenMP workers starve the other ranks of an oversubscribed mpirun.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# A sanitizer report exits 86, not 1: an error test that wants exit 1 must not pass
# on a memory error in the error path.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0:exitcode=86}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$ROOT/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=86}
TEST_TIMEOUT=${TEST_TIMEOUT:-900}
# TEST_EXCLUDE=suite/test[,...]: tests left out of this run (CI's second pass, .ci/run).
TEST_EXCLUDE=${TEST_EXCLUDE:-}

all_suites=$(ls -d tests/*/ | xargs -n1 basename | grep -v -E '^(common|fixtures|fuzz)$')
order="unit grad model data eval mpi train cuda slurm"
suites=""
for s in $order; do echo "$all_suites" | grep -qx "$s" && suites="$suites $s"; done
for s in $all_suites; do echo " $order " | grep -q " $s " || suites="$suites $s"; done
declare -A only # suite -> " name name " when the items name single tests of it
if [ $# -gt 0 ] && [ -n "$1" ]; then
    suites=""
    for item in $(echo "$1" | tr ',' ' '); do
        s=${item%%/*}
        echo " $suites " | grep -q " $s " || suites="$suites $s"
        if [ "$s" != "$item" ]; then only[$s]="${only[$s]:- } ${item#*/} "; fi
    done
fi

logdir=$BUILD/test-logs
mkdir -p "$logdir"
passed=0 failed=0 skipped=0
failed_names=""
skipped_names=""
# A skip must name the capability it lacks ("skip [CAP]: reason", tests/common/skip.sh
# and test_skip() print it); a capability listed in MRCNN_REQUIRE (comma-separated:
# gpu, nccl, torch, coco, tensorboard) must not be missing, so such a skip fails, as
# does an exit 77 that names nothing (a crash of the harness must not pass as a skip).
MRCNN_REQUIRE=${MRCNN_REQUIRE:-}
export MRCNN_REQUIRE
skip_ok() {
    skip_line=$(grep -m1 -E '^skip \[[a-z]+\]: ' "$1")
    if [ -z "$skip_line" ]; then
        echo "exit 77 without a 'skip [CAP]: reason' line" >> "$1"; return 1
    fi
    local cap=${skip_line#skip [}
    cap=${cap%%]*}
    case ",$MRCNN_REQUIRE," in
    *",$cap,"*) echo "capability '$cap' is required (MRCNN_REQUIRE=$MRCNN_REQUIRE) but missing" >> "$1"; return 1 ;;
    esac
    return 0
}
summary=""
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
t_all=$(date +%s.%N)
for suite in $suites; do
    [ -d "tests/$suite" ] || { echo "no such suite: $suite"; failed=$((failed + 1)); continue; }
    t0=$(date +%s.%N)
    sp=0 sf=0 ss=0
    mkdir -p "$logdir/$suite"
    tests=""
    for src in tests/$suite/test_*.c; do [ -e "$src" ] && tests="$tests $BUILD/tests/$suite/$(basename "${src%.c}")"; done
    for sh in tests/$suite/test_*.sh; do [ -e "$sh" ] && tests="$tests $sh"; done
    for want in ${only[$suite]:-}; do
        echo "$tests" | tr ' ' '\n' | grep -q "/$want\$" && continue
        echo "  FAIL  $suite/$want: no such test"; sf=$((sf + 1)); failed_names="$failed_names $suite/$want"
    done
    for t in $tests; do
        name=$(basename "$t")
        if [ -n "${only[$suite]:-}" ]; then case "${only[$suite]}" in *" $name "*) ;; *) continue ;; esac; fi
        case ",$TEST_EXCLUDE," in *",$suite/$name,"*) continue ;; esac
        log="$logdir/$suite/$name.log"
        ts=$(date +%s.%N)
        if [ "${t%.sh}" != "$t" ]; then
            timeout "$TEST_TIMEOUT" bash "$t" > "$log" 2>&1
        elif [ -x "$t" ]; then
            timeout "$TEST_TIMEOUT" "$t" > "$log" 2>&1
        else
            echo "not built: $t" > "$log"; false
        fi
        rc=$?
        dt=$(elapsed "$ts")
        if [ $rc -eq 0 ]; then
            sp=$((sp + 1)); printf '  PASS  %-8s %-40s %6.1fs\n' "$suite" "$name" "$dt"
        elif [ $rc -eq 77 ] && skip_ok "$log"; then
            ss=$((ss + 1)); skipped_names="$skipped_names  $suite/$name: $skip_line\n"
            printf '  SKIP  %-8s %-40s %6.1fs  (%s)\n' "$suite" "$name" "$dt" "$(echo "$skip_line" | cut -c1-100)"
        else
            sf=$((sf + 1)); failed_names="$failed_names $suite/$name"
            printf '  FAIL  %-8s %-40s %6.1fs  rc=%d, log: %s\n' "$suite" "$name" "$dt" "$rc" "$log"
            tail -n 30 "$log" | sed 's/^/        | /'
        fi
    done
    dt=$(elapsed "$t0")
    summary="$summary$(printf '  suite %-8s %3d passed %3d failed %3d skipped %7.1fs' "$suite" $sp $sf $ss "$dt")\n"
    passed=$((passed + sp)); failed=$((failed + sf)); skipped=$((skipped + ss))
done
echo
echo "Suite times:"
printf "$summary"
printf '  total %ss\n' "$(elapsed "$t_all")"
[ -n "$skipped_names" ] && printf 'Skipped (MRCNN_REQUIRE=%s):\n%b' "${MRCNN_REQUIRE:-none}" "$skipped_names"
[ -n "$failed_names" ] && echo "Failed:$failed_names"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
