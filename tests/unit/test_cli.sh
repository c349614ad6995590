#!/usr/bin/env bash
# The command-line surface: --help on every command of every binary, an unknown
# command exits 2, and a bad config exits 1 naming the file:line and the key.
set -u
BIN=$ROOT/$BUILD
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$ROOT/tests/common/exit_codes.sh"

for prog in mrcnn mrcnn-prep; do
    [ -x "$BIN/$prog" ] || { [ $prog = mrcnn ] && fail "$BIN/mrcnn not built"; continue; }
    "$BIN/$prog" --help > "$tmp/help" 2>&1 || fail "$prog --help exited non-zero"
    grep -q "usage:" "$tmp/help" || fail "$prog --help prints no usage"
    cmds=$(awk '/^commands:/ {on=1; next} on && /^  [a-z]/ {print $1}' "$tmp/help")
    [ -n "$cmds" ] || fail "$prog --help lists no commands"
    for c in $cmds; do
        "$BIN/$prog" "$c" --help > "$tmp/c" 2>&1 || fail "$prog $c --help exited non-zero: $(head -3 "$tmp/c")"
        grep -qi "usage" "$tmp/c" || fail "$prog $c --help prints no usage"
        echo "ok: $prog $c --help"
    done
    "$BIN/$prog" no-such-command > "$tmp/u" 2>&1
    expect_exit "$EXIT_USAGE" $? "$prog no-such-command" || { cat "$tmp/u"; exit 1; }
    grep -q "unknown command 'no-such-command'" "$tmp/u" || fail "$prog: the unknown command is not named: $(cat "$tmp/u")"
done

printf 'SOLVER:\n  BASE_LR: 0.01\nMODEL:\n  RPN:\n    NMS_TRESH: 0.5\n' > "$tmp/bad.yaml"
"$BIN/mrcnn" config --config "$tmp/bad.yaml" > "$tmp/out" 2>&1
expect_exit "$EXIT_ERROR" $? "a config with an unknown key" || { cat "$tmp/out"; exit 1; }
grep -q "bad.yaml:5: unknown key 'MODEL.RPN.NMS_TRESH'" "$tmp/out" || fail "message lacks file:line and key: $(cat "$tmp/out")"
printf 'SOLVER:\n  MAX_ITER: ten\n' > "$tmp/type.yaml"
"$BIN/mrcnn" config --config "$tmp/type.yaml" > "$tmp/out" 2>&1
expect_exit "$EXIT_ERROR" $? "a config value of the wrong type" || { cat "$tmp/out"; exit 1; }
grep -q "type.yaml:2: SOLVER.MAX_ITER expects an integer, got 'ten'" "$tmp/out" || fail "type message: $(cat "$tmp/out")"
"$BIN/mrcnn" config --set SOLVER.BASE_LR=0.5 | grep -q "^SOLVER.BASE_LR: 0.5$" || fail "--set not applied"
for cfg in "$ROOT"/configs/*.yaml; do
    [ -e "$cfg" ] || continue
    "$BIN/mrcnn" config --config "$cfg" > /dev/null 2> "$tmp/e" || fail "shipped config $cfg does not load: $(cat "$tmp/e")"
    echo "ok: $(basename "$cfg") loads"
done
echo "cli: all checks passed"
