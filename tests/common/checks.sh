#!/usr/bin/env bash
# Sourced by the shell tests (never run on its own):
#   bad MESSAGE...              prints "FAIL: MESSAGE" and counts it in $fails (the test
#                               ends with `[ $fails -eq 0 ]` or its own summary)
#   wait_for FILE PATTERN SECS  0 once FILE has a line matching PATTERN, 1 after SECS
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
wait_for() {
    for _ in $(seq 1 $(($3 * 20))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
    return 1
}
