#!/usr/bin/env bash
# OUTPUT_DIR is claimed at start, on the stand-in model (prog_standin.c)
# and on `mrcnn train`:
#  - a second training into the OUTPUT_DIR of a running one exits 1 at once naming the
#    holder's host and pid; the first one finishes untouched (before: both exited 0,
#    the second deleting the first's checkpoints and interleaving metrics.json);
#  - after the holder ended (even by kill -9) the directory is free again;
#  - a missing OUTPUT_DIR is created with its parents;
#  - an OUTPUT_DIR that cannot be used (a file, or a directory this user cannot write)
#    fails before the first step, naming it (before: found at the first checkpoint).
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
# Sanitizer reports exit 86, so they never pass as an expected error exit.
source "$ROOT/tests/common/exit_codes.sh"
prog=$BUILD/tests/train/prog_standin
M=$BUILD/mrcnn
source "$ROOT/tests/train/common_fixture.sh"
[ -x "$prog" ] && [ -x "$M" ] || { echo "not built: $prog / $M"; exit 1; }
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
source "$ROOT/tests/common/checks.sh" # fails, bad, wait_for

# ---- two runs, one directory ----
dir=$tmp/shared
"${SOLO[@]}" "$prog" "$dir" --sleep-ms 100 --set SOLVER.MAX_ITER=60 --set SOLVER.CHECKPOINT_PERIOD=10 > "$tmp/first.log" 2>&1 &
first=$!
pids="$pids $first"
wait_for "$tmp/first.log" "step 3/" 60 || { echo "FAIL: the first run did not start"; cat "$tmp/first.log"; exit 1; }
t0=$(date +%s)
timeout 60 "${SOLO[@]}" "$prog" "$dir" --set SOLVER.MAX_ITER=60 > "$tmp/second.log" 2>&1
rc=$?
dt=$(($(date +%s) - t0))
if [ $rc -ne 1 ] || ! grep -q "^mrcnn error .*OUTPUT_DIR $dir is in use by another training (host $(hostname), pid $first," "$tmp/second.log"; then
    bad "second run into a used OUTPUT_DIR: exit $rc after ${dt}s, want 1 naming host $(hostname) and pid $first"
    tail -n 5 "$tmp/second.log"
else
    echo "second run: exit 1 after ${dt}s: $(grep -m1 '^mrcnn error' "$tmp/second.log" | cut -c1-160)"
fi
grep -q "step 1/" "$tmp/second.log" && bad "the second run trained"
wait $first
rc=$?
[ $rc -eq 0 ] || { bad "the first run ended with $rc"; tail -n 5 "$tmp/first.log"; }
"$PY_TORCH" - "$dir" <<'PY' || bad "the first run's outputs were disturbed"
import json, os, sys
d = sys.argv[1]
steps = [json.loads(l)["step"] for l in open(f"{d}/metrics.json")]
assert steps == list(range(1, 61)), steps
ck = sorted(f for f in os.listdir(d) if f.startswith("model_"))
assert ck == ["model_0000040.h5", "model_0000050.h5", "model_0000060.h5"], ck
PY
# Free again once the holder is gone, also after kill -9 (--resume: the directory holds
# the first run, which a fresh run may not mix with; tests/train/test_run_lineage.sh).
"${SOLO[@]}" "$prog" "$dir" --resume --sleep-ms 100 --set SOLVER.MAX_ITER=200 > "$tmp/killed.log" 2>&1 &
victim=$!
pids="$pids $victim"
wait_for "$tmp/killed.log" "step 62/" 60 || bad "the run to kill did not start"
kill -9 $victim
wait $victim 2>/dev/null
"${SOLO[@]}" "$prog" "$dir" --resume --set SOLVER.MAX_ITER=200 --max-steps 62 > "$tmp/after.log" 2>&1 ||
    { bad "after the holder was killed: exit $?"; tail -n 5 "$tmp/after.log"; }
echo "two runs in one OUTPUT_DIR: the second stopped at once; the directory is free after the holder ends"

# ---- a missing OUTPUT_DIR is created ----
"${SOLO[@]}" "$prog" "$tmp/a/b/c" --max-steps 2 > "$tmp/nested.log" 2>&1 && [ -s "$tmp/a/b/c/model_0000002.h5" ] ||
    { bad "nested missing OUTPUT_DIR"; tail -n 5 "$tmp/nested.log"; }

# ---- unusable OUTPUT_DIRs fail at start ----
unusable() { # name dir [runner...]
    local name=$1 d=$2 log=$tmp/$1.log
    shift 2
    "$@" "${SOLO[@]}" "$prog" "$d" --max-steps 3 --set SOLVER.CHECKPOINT_PERIOD=5000 > "$log" 2>&1
    local rc=$?
    if [ $rc -ne 1 ] || ! grep -q "^mrcnn error .*OUTPUT_DIR $d" "$log" || grep -q "step 1/" "$log"; then
        bad "$name: exit $rc, want 1 naming OUTPUT_DIR $d before any step"; tail -n 5 "$log"
    else
        echo "$name: $(grep -m1 '^mrcnn error' "$log" | cut -c1-150)"
    fi
}
echo "a file" > "$tmp/afile"
unusable file "$tmp/afile"
unusable below-file "$tmp/afile/sub"
# Not writable: as root, permissions do not apply, so run as nobody.
mkdir -p "$tmp/ro"
chmod 555 "$tmp/ro"
if [ "$(id -u)" != 0 ]; then
    unusable read-only "$tmp/ro"
elif command -v setpriv > /dev/null && setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null &&
    setpriv --reuid=nobody --regid=nogroup --clear-groups test -x "$prog" 2>/dev/null; then
    chmod 755 "$tmp"
    unusable read-only "$tmp/ro" setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/tmp
else
    echo "note: cannot run as an unprivileged user here; the read-only case is left to non-root runs"
fi

# ---- the same through `mrcnn train` (fails before the model is built) ----
"${SOLO[@]}" "$M" train --config "$ROOT/configs/tiny.yaml" --set OUTPUT_DIR="$tmp/afile" --set DATASETS.TRAIN=/nonexistent-index.h5 \
    --max-steps 1 > "$tmp/cli.log" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "^mrcnn error .*OUTPUT_DIR $tmp/afile exists but is not a directory" "$tmp/cli.log"; then
    bad "mrcnn train into a file: exit $rc"; tail -n 5 "$tmp/cli.log"
fi

[ $fails -eq 0 ] || { echo "FAIL: $fails case(s)"; exit 1; }
echo PASS
