#!/usr/bin/env bash
# The module map of README.md ("Architecture"), checked by tests/common/module_map.py:
# every #include in src/, data_prep/ and include/mrcnn/ goes to a module the includer may
# use, every public header belongs to a module, and the modules have no cycle. Then the
# checker's own test: a wrong include, an unplaced header and a cycle must each fail.
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() { echo "FAIL: $*"; exit 1; }
command -v python3 > /dev/null || { . "$ROOT/tests/common/skip.sh"; skip python "python3 not found"; }
chk=$ROOT/tests/common/module_map.py
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

python3 "$chk" --root "$ROOT" --edges || fail "the code does not follow the module map (above)"

# core may use nothing above it; train -> core already exists, so this is a cycle too.
python3 "$chk" --root "$ROOT" --inject src/core/log.c mrcnn/trainer.h > "$tmp/out" 2>&1 && fail "core including trainer.h passed"
grep -q 'src/core/log.c:[0-9]*: includes "mrcnn/trainer.h" (module train), but module core may use only' "$tmp/out" ||
    fail "the wrong include is not named: $(cat "$tmp/out")"
grep -q 'cycle between modules' "$tmp/out" || fail "core -> train -> core not reported as a cycle: $(cat "$tmp/out")"
echo "ok: src/core/log.c including mrcnn/trainer.h fails, named, with its cycle"

python3 "$chk" --root "$ROOT" --inject src/data/loader.c mrcnn/no_such_header.h > "$tmp/out" 2>&1 && fail "an unplaced header passed"
grep -q 'no_such_header.h", a header in no module' "$tmp/out" || fail "unplaced header not named: $(cat "$tmp/out")"
echo "ok: a header in no module fails"

python3 "$chk" --root "$ROOT" --inject src/eval/infer.c ../data/data_internal.h > "$tmp/out" 2>&1 && fail "a private header of another folder passed"
grep -q 'a private header of src/data' "$tmp/out" || fail "private header not named: $(cat "$tmp/out")"
echo "ok: another folder's private header fails"

python3 "$chk" --root "$ROOT" --inject include/mrcnn/model.h mrcnn/json.h > "$tmp/out" 2>&1 && fail "an installed header including an internal one passed"
grep -q 'an internal header (src/include/mrcnn)' "$tmp/out" || fail "internal header not named: $(cat "$tmp/out")"
echo "ok: an installed header (include/mrcnn) including an internal one (src/include/mrcnn) fails"

# A module is a folder: a source file in a folder the map does not list fails (no per-file exceptions).
mkdir -p "$tmp/tree/src/zzz" "$tmp/tree/include/mrcnn"
echo '#include "mrcnn/check.h"' > "$tmp/tree/src/zzz/new.c"
python3 "$chk" --root "$tmp/tree" > "$tmp/out" 2>&1 && fail "a source file in an unmapped folder passed"
grep -q 'src/zzz/new.c: in no module' "$tmp/out" || fail "unmapped folder not named: $(cat "$tmp/out")"
echo "ok: a source folder that is no module fails"
