# Exit codes for the test scripts that expect a program to fail. A failure is asserted
# by its exact documented code (README.md, "Exit codes": 0 done, 1 error, 2 usage, 3 a
# rank died or hung, 4 too many non-finite steps, 99 preempted), never as "non-zero":
# a crash (139 SIGSEGV, 134 SIGABRT), a sanitizer's report or an unplanned exit path
# must fail the test, not pass it. Source it, then e.g.
#     "$M" predict ... > "$tmp/log" 2>&1
#     expect_exit "$EXIT_ERROR" $? "a missing image" || { cat "$tmp/log"; exit 1; }
EXIT_ERROR=1 EXIT_USAGE=2 EXIT_COMM=3 EXIT_NONFINITE=4 EXIT_REQUEUE=99
# ASan, LeakSanitizer and UBSan exit 1 by default: the code of an ordinary error, so a
# memory error on an error path would pass as the error expected. Here their reports
# exit EXIT_SANITIZER, a code no program uses (later options override earlier ones).
EXIT_SANITIZER=86
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}exitcode=$EXIT_SANITIZER"
export LSAN_OPTIONS="${LSAN_OPTIONS:-}${LSAN_OPTIONS:+:}exitcode=$EXIT_SANITIZER"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-}${UBSAN_OPTIONS:+:}exitcode=$EXIT_SANITIZER"

# exit_why RC: the code in words ("139 (killed by SIGSEGV)").
exit_why() {
    case $1 in
    0) echo "0 (success)" ;;
    1) echo "1 (error)" ;;
    2) echo "2 (usage)" ;;
    3) echo "3 (a rank died or hung)" ;;
    4) echo "4 (too many non-finite steps)" ;;
    99) echo "99 (preempted)" ;;
    "$EXIT_SANITIZER") echo "$1 (a sanitizer's report)" ;;
    124) echo "124 (timed out)" ;;
    *) if [ "$1" -gt 128 ] 2>/dev/null && [ "$1" -lt 160 ]; then
           echo "$1 (killed by SIG$(kill -l $(($1 - 128)) 2>/dev/null || echo $(($1 - 128))))"
       else
           echo "$1"
       fi ;;
    esac
}

# expect_exit WANT RC WHAT: returns 0 when RC is WANT (one code, or several separated by
# "|" where more than one outcome is legitimate), else prints
# "FAIL: WHAT: exit RC (...), WANT expected" and returns 1.
expect_exit() {
    local want=$1 rc=$2 w
    for w in ${want//|/ }; do [ "$rc" = "$w" ] && return 0; done
    local words=""
    for w in ${want//|/ }; do words="${words:+$words or }$(exit_why "$w")"; done
    echo "FAIL: $3: exit $(exit_why "$rc"), $words expected"
    return 1
}
