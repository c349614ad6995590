#!/usr/bin/env bash
# The structure check (tests/common/structure_check.py) on the tree: no extern function
# without a caller outside tests/, no include or call against the module map, no function
# over 100 lines, beyond its KNOWN list. Then the checker's own test, in one run: an injected
# wrong include, an unused function, a call up the module order and a 101-line function
# must each fail, named (a 100-line function rides along in the first run and must pass);
# so must a test hook that no test names or that the library calls.
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() { echo "FAIL: $*"; exit 1; }
command -v python3 > /dev/null || { . "$ROOT/tests/common/skip.sh"; skip python "python3 not found"; }
chk=$ROOT/tests/common/structure_check.py
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

python3 "$chk" --root "$ROOT" --inject-long src/core/log.c 100 ||
    fail "the code breaks the structure rules (above), or a 100-line function failed"

python3 "$chk" --root "$ROOT" --inject-include src/core/log.c mrcnn/trainer.h \
    --inject-function src/data/loader.c mrcnn_loader_never_called \
    --inject-call src/core/rle.c mrcnn_trainer_run --inject-long src/core/tensor.c 101 > "$tmp/out" 2>&1 &&
    fail "the injected violations passed: $(cat "$tmp/out")"
grep -q 'src/core/log.c:[0-9]*: includes "mrcnn/trainer.h" (module train), but module core may use only' "$tmp/out" ||
    fail "the wrong include is not named: $(cat "$tmp/out")"
echo "ok: src/core/log.c including mrcnn/trainer.h fails, named"
grep -q 'src/data/loader.c:[0-9]*: function mrcnn_loader_never_called has no caller outside tests/ (named nowhere)' "$tmp/out" ||
    fail "the unused function is not named: $(cat "$tmp/out")"
echo "ok: an unused extern function in src/data/loader.c fails, named"
grep -q 'src/core/rle.c:[0-9]*: calls mrcnn_trainer_run (module train), but module core may use only: nothing' "$tmp/out" ||
    fail "the call up is not named: $(cat "$tmp/out")"
echo "ok: src/core/rle.c calling mrcnn_trainer_run (train) fails, named"
grep -q 'src/core/tensor.c:[0-9]*: function structure_check_injected_long is 101 lines' "$tmp/out" ||
    fail "the long function is not named: $(cat "$tmp/out")"
echo "ok: a 101-line function fails, named; a 100-line one passes"

# Test hooks (MRCNN_TEST_HOOK): one that no test names and one that the library calls
# each fail, named; the tree's own hooks passed in the first run.
python3 "$chk" --root "$ROOT" --inject-hook src/core/log.c mrcnn_log_hook_unnamed \
    --inject-hook src/data/loader.c mrcnn_loader_hook_called --inject-call src/data/shard.c mrcnn_loader_hook_called \
    > "$tmp/out" 2>&1 && fail "the injected test hooks passed: $(cat "$tmp/out")"
grep -q 'src/core/log.c:[0-9]*: test hook mrcnn_log_hook_unnamed is named nowhere, not even in tests/' "$tmp/out" ||
    fail "the hook no test names is not named: $(cat "$tmp/out")"
echo "ok: a test hook that no test names fails, named"
grep -q 'src/data/loader.c:[0-9]*: test hook mrcnn_loader_hook_called is called by src/data/shard.c:[0-9]*: drop its MRCNN_TEST_HOOK marker' "$tmp/out" ||
    fail "the hook the library calls is not named: $(cat "$tmp/out")"
echo "ok: a test hook that the library calls fails, named"
