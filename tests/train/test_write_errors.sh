#!/usr/bin/env bash
# Every write of metrics.json and of the TensorBoard event file is checked (stand-in
# model, prog_standin.c); one that fails stops the run with exit 1 and one error naming
# the file and the system's reason, and the file keeps whole records only. Before: the
# writes were unchecked (an fclose whose error was dropped), the run exited 0, and the
# files were cut mid-record (the event file at 4096 bytes).
#  - metrics.json on a full disk: OUTPUT_DIR/metrics.json is a link to /dev/full (ENOSPC);
#  - both on a full 256 KiB tmpfs (root only; whichever file needs the next page first
#    fails), and neither ends in a partial record.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
source "$ROOT/tests/common/exit_codes.sh"
prog=$BUILD/tests/train/prog_standin
source "$ROOT/tests/train/common_fixture.sh"
source "$ROOT/tests/common/checks.sh"
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
[ -w /dev/full ] || { echo "SKIP: no /dev/full"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- metrics.json on a full disk ----
d=$tmp/full
mkdir -p "$d" && ln -s /dev/full "$d/metrics.json"
timeout 60 "${SOLO[@]}" "$prog" "$d" --resume --set SOLVER.MAX_ITER=6 --set LOG_PERIOD=2 > "$tmp/full.log" 2>&1
rc=$?
msg=$(grep -m1 '^mrcnn error' "$tmp/full.log")
if [ $rc -ne "$EXIT_ERROR" ] || ! grep -qF "writing $d/metrics.json failed: No space left on device (the disk is full)" <<< "$msg"; then
    bad "metrics.json on a full disk: exit $rc, want 1 naming it and ENOSPC"; tail -n 4 "$tmp/full.log"
else
    echo "metrics.json on a full disk: exit 1: $(cut -c1-160 <<< "$msg")"
fi
grep -q "step 4/" "$tmp/full.log" && bad "the run went on past the failed write"

# ---- a full disk under the event file and metrics.json (root: a 256 KiB tmpfs) ----
# Both grow every step; whichever needs the next page first gets ENOSPC.
mnt=$tmp/mnt
mkdir -p "$mnt"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=256k mrcnn-test "$mnt" 2>/dev/null; then
    trap 'umount "$mnt" 2>/dev/null; rm -rf "$tmp"' EXIT
    d=$mnt/run
    timeout 120 "${SOLO[@]}" "$prog" "$d" --set SOLVER.MAX_ITER=5000 --set LOG_PERIOD=1 --set SOLVER.CHECKPOINT_PERIOD=1000000 \
        > "$tmp/tmpfs.log" 2>&1
    rc=$?
    msg=$(grep -m1 '^mrcnn error' "$tmp/tmpfs.log")
    if [ $rc -ne "$EXIT_ERROR" ] ||
        ! grep -qE "writing ($d/metrics.json|the TensorBoard event file $d/events.out.tfevents[^ ]*) failed: No space left on device \(the disk is full\)" <<< "$msg"; then
        bad "full tmpfs: exit $rc, want 1 naming metrics.json or the event file and ENOSPC"; tail -n 4 "$tmp/tmpfs.log"
    else
        echo "full tmpfs: exit 1 after $(grep -c '"step"' "$d/metrics.json") records: $(cut -c1-170 <<< "$msg")"
    fi
    "$PY_TORCH" - "$d" <<'PY' || bad "the files hold a partial record"
import glob, json, struct, sys
d = sys.argv[1]
for l in open(f"{d}/metrics.json"):
    json.loads(l)  # whole lines only
(ev,) = glob.glob(f"{d}/events.out.tfevents.*")
b = open(ev, "rb").read()
off = n = 0
while off < len(b):
    (ln,) = struct.unpack_from("<Q", b, off)
    assert off + 16 + ln <= len(b), f"partial record at {off} of {len(b)}"
    off += 16 + ln
    n += 1
print(f"event file: {n} whole records, {len(b)} bytes; metrics.json whole lines")
PY
    umount "$mnt"
else
    echo "note: no tmpfs mount here (not root or no CAP_SYS_ADMIN): only the /dev/full case ran"
fi
[ $fails -eq 0 ] && echo "PASS: failed writes of metrics.json and events stop the run with one error"
[ $fails -eq 0 ]
