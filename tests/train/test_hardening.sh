#!/usr/bin/env bash
# Fatal errors of `mrcnn train` end the run cleanly:
#  - a corrupt JPEG inside a shard, found by a loader worker thread while the main
#    thread computes (inside OpenBLAS): exit 1 with one `mrcnn error` line naming the
#    image, on 1 rank without mpirun, with mpirun -np 1 and -np 2 (was SIGSEGV, 139:
#    exit() ran the atexit handlers under the running threads);
#  - a checkpoint that cannot be written (file size limit: EFBIG, with SIGXFSZ ignored
#    by the shell or not; a full tmpfs when this machine lets root mount one: ENOSPC):
#    exit 1 naming the file and the reason, no temporary checkpoint left behind, the
#    previous checkpoint intact;
#  - weights whose stored bytes were flipped (MODEL.WEIGHTS, mrcnn eval --weights) fail
#    their checksum: exit 1 naming the file (they used to load, silently wrong), and
#    so do weights holding NaN.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
# Sanitizer reports exit 86, so they never pass as an expected error exit.
source "$ROOT/tests/common/exit_codes.sh"
M=$BUILD/mrcnn
[ -x "$M" ] && [ -x "$BUILD/mrcnn-prep" ] || { echo "not built: $M"; exit 1; }
source "$ROOT/tests/train/common_fixture.sh"
tmp=$(mktemp -d)
mnt=""
cleanup() { [ -n "$mnt" ] && umount "$mnt" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fixture_shards "$tmp" || exit 1
IDX=$tmp/shards/train-index.h5
COMMON="--config $ROOT/configs/tiny.yaml --set DATASETS.TRAIN=$IDX --set LOG_PERIOD=1"
source "$ROOT/tests/common/checks.sh" # fails, bad, wait_for
no_crash() { # log: no sign of a crash in the fatal path
    ! grep -q -E "Segmentation fault|End of error message|AddressSanitizer|runtime error|core dumped" "$1"
}

# ---- 1. a corrupt image found by a loader thread ----
cp -r "$tmp/shards" "$tmp/bad"
"$PY_TORCH" - "$tmp/bad/train-00000-of-00001.h5" <<'PY' || { echo "FAIL: corrupting the shard"; exit 1; }
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    off, ln, b = f["images/offset"][()], f["images/length"][()], f["images/bytes"]
    # The first batches decode; the later images have their entropy-coded data
    # overwritten, so a worker fails while the main thread is inside a step.
    for i in range(4, len(off)):
        o, n = int(off[i]), int(ln[i])
        junk = np.frombuffer(np.random.default_rng(i).bytes(n // 2), np.uint8)
        b[o + n // 4: o + n // 4 + len(junk)] = junk
PY
BADC="--config $ROOT/configs/tiny.yaml --set DATASETS.TRAIN=$tmp/bad/train-index.h5 --set LOG_PERIOD=1 --max-steps 20"
before=$fails
for i in 1 2 3; do
    log=$tmp/corrupt$i.log
    "${SOLO[@]}" "$M" train $BADC --set OUTPUT_DIR="$tmp/corrupt$i" > "$log" 2>&1
    rc=$?
    n=$(grep -c "^mrcnn error" "$log")
    if [ $rc -ne 1 ] || [ "$n" -ne 1 ] || ! grep -q "^mrcnn error .*corrupt JPEG" "$log" || ! no_crash "$log"; then
        bad "corrupt image, 1 rank, run $i: exit $rc (want 1), $n 'mrcnn error' lines (want 1)"; tail -n 15 "$log"
    fi
done
[ $fails -eq $before ] && echo "corrupt image, 1 rank without mpirun: exit 1, one error line (3 runs)"
for np in 1 2; do
    log=$tmp/corrupt_np$np.log
    mpirun --oversubscribe -np $np "$M" train $BADC --set OUTPUT_DIR="$tmp/corrupt_np$np" > "$log" 2>&1
    rc=$?
    if [ $rc -ne 1 ] || ! grep -q "^mrcnn error .*corrupt JPEG" "$log" || ! no_crash "$log"; then
        bad "corrupt image, mpirun -np $np: exit $rc, want 1 with the message"; tail -n 15 "$log"
    fi
    echo "corrupt image, mpirun -np $np: exit $rc"
done

# ---- 2. a checkpoint that cannot be written ----
# A wider box head makes a checkpoint of ~20 MB: a file size limit of half of it stays
# above what MPI_Init itself writes (PMIx's shared-memory store, a few MB). A good run
# first: its checkpoint size sizes the limits below.
COMMON="$COMMON --set MODEL.ROI_BOX_HEAD.FC_DIM=1024"
"${SOLO[@]}" "$M" train $COMMON --set OUTPUT_DIR="$tmp/good" --max-steps 2 --set SOLVER.CHECKPOINT_PERIOD=1 > "$tmp/good.log" 2>&1 ||
    { echo "FAIL: the reference run"; tail -n 20 "$tmp/good.log"; exit 1; }
size=$(stat -c %s "$tmp/good/model_0000002.h5")
limit_kb=$((size / 2048)) # half a checkpoint
tmp_left() { ls -a "$1" 2>/dev/null | grep -E '\.tmp' ; }
fsize_case() { # name ignore-in-shell(0/1)
    local name=$1 dir=$tmp/$1 log=$tmp/$1.log rc
    if [ "$2" = 1 ]; then
        ( trap '' XFSZ; ulimit -f $limit_kb; exec "${SOLO[@]}" "$M" train $COMMON --set OUTPUT_DIR="$dir" --max-steps 2 \
            --set SOLVER.CHECKPOINT_PERIOD=1 ) > "$log" 2>&1
    else
        ( ulimit -f $limit_kb; exec "${SOLO[@]}" "$M" train $COMMON --set OUTPUT_DIR="$dir" --max-steps 2 \
            --set SOLVER.CHECKPOINT_PERIOD=1 ) > "$log" 2>&1
    fi
    rc=$?
    if [ $rc -ne 1 ] || ! grep -q "^mrcnn error .*checkpoint.*\.model_0000001\.h5\.tmp.*File too large" "$log" ||
        ! no_crash "$log"; then
        bad "$name: exit $rc (want 1 and an error naming the temporary file and 'File too large')"; tail -n 15 "$log"
    fi
    if [ -n "$(tmp_left "$dir")" ]; then bad "$name: temporary checkpoint left behind: $(tmp_left "$dir")"; fi
    echo "$name: exit $rc; $(grep -m1 '^mrcnn error' "$log" | cut -c1-200)"
}
fsize_case fsize_ignored 1
fsize_case fsize_default 0

# ENOSPC on a small tmpfs (root only: mount needs CAP_SYS_ADMIN): the first checkpoint
# fits, the second does not.
mnt=$tmp/mnt
mkdir -p "$mnt"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=$((size * 3 / 2 / 4096 * 4096 + 65536)) mrcnn-test "$mnt" 2>/dev/null; then
    dir=$mnt/run log=$tmp/enospc.log
    "${SOLO[@]}" "$M" train $COMMON --set OUTPUT_DIR="$dir" --max-steps 3 --set SOLVER.CHECKPOINT_PERIOD=1 > "$log" 2>&1
    rc=$?
    if [ $rc -ne 1 ] || ! grep -q "^mrcnn error .*checkpoint.*No space left on device" "$log" || ! no_crash "$log"; then
        bad "disk full: exit $rc (want 1 naming 'No space left on device')"; tail -n 15 "$log"
    fi
    [ -z "$(tmp_left "$dir")" ] || bad "disk full: temporary checkpoint left behind: $(tmp_left "$dir")"
    "$PY_TORCH" -c "
import h5py, sys
with h5py.File('$dir/model_0000001.h5', 'r') as f:
    assert f.attrs['complete'] == 1 and f.attrs['step'] == 1
" || bad "disk full: the previous checkpoint is not intact"
    echo "disk full (tmpfs of $(df -k "$mnt" | awk 'NR==2 {print $2}') KiB): exit $rc; $(grep -m1 '^mrcnn error' "$log" | cut -c1-200)"
    umount "$mnt" && mnt=""
else
    mnt=""
    echo "note: no tmpfs mount here (not root or no CAP_SYS_ADMIN): the ENOSPC case is covered by the file size limit"
fi

# ---- 3. weights that fail their checksum, or hold NaN ----
ck=$tmp/good/model_0000002.h5
biggest=$("$PY_TORCH" -c "
import h5py
with h5py.File('$ck', 'r') as f:
    print(max(f['model'], key=lambda k: f['model'][k].size))")
cp "$ck" "$tmp/flipped.h5"
flip_weight_byte "$tmp/flipped.h5" "model/$biggest" || { echo "FAIL: flipping a byte"; exit 1; }
cp "$ck" "$tmp/nan.h5"
"$PY_TORCH" -c "
import h5py, numpy as np
with h5py.File('$tmp/nan.h5', 'r+') as f:
    d = f['model/$biggest']; v = d[()]; v.flat[3] = np.nan; d[...] = v" || { echo "FAIL: writing a NaN"; exit 1; }
weights_case() { # name file what
    local log=$tmp/$1.log rc
    "${SOLO[@]}" "$M" train $COMMON --set OUTPUT_DIR="$tmp/$1" --max-steps 1 --set MODEL.WEIGHTS="$2" > "$log" 2>&1
    rc=$?
    if [ $rc -ne 1 ] || ! grep -q "^mrcnn error .*$(basename "$2").*$3" "$log" || ! no_crash "$log"; then
        bad "MODEL.WEIGHTS $1: exit $rc (want 1 naming the file and '$3')"; tail -n 8 "$log"
    fi
    echo "MODEL.WEIGHTS $1: exit $rc; $(grep -m1 '^mrcnn error' "$log" | cut -c1-220)"
}
weights_case flipped "$tmp/flipped.h5" "checksum"
weights_case nan "$tmp/nan.h5" "non-finite"
log=$tmp/eval_flipped.log
"${SOLO[@]}" "$M" eval --config "$ROOT/configs/tiny.yaml" --set MODEL.ROI_BOX_HEAD.FC_DIM=1024 --weights "$tmp/flipped.h5" \
    --shards "$IDX" --out "$tmp/evalout" > "$log" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "flipped.h5.*checksum" "$log"; then bad "mrcnn eval --weights flipped: exit $rc"; tail -n 8 "$log"; fi
echo "mrcnn eval --weights with a flipped byte: exit $rc"

[ $fails -eq 0 ] || { echo "FAIL: $fails case(s)"; exit 1; }
echo PASS
