#!/usr/bin/env bash
# A run owns its checkpoints (stand-in model, prog_standin.c):
#  - a fresh run into an OUTPUT_DIR that holds an earlier run exits 1 before step 1,
#    naming that run and the two ways on (--resume, another OUTPUT_DIR); the earlier
#    run's checkpoints and metrics.json stay byte for byte (before: the new run's
#    checkpoints were deleted by "keep the newest 3", which counted the old run's
#    higher-numbered ones, and metrics.json was appended to);
#  - every checkpoint and metrics.json record carries the run id of OUTPUT_DIR/run_id;
#  - --resume and retention see only the run's own lineage: with another run's
#    model_0000009.h5 copied in, --resume continues this run's step 2 (before: loaded
#    step 9) and retention keeps that file while trimming the run's own to 3.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
source "$ROOT/tests/common/exit_codes.sh"
prog=$BUILD/tests/train/prog_standin
source "$ROOT/tests/train/common_fixture.sh"
source "$ROOT/tests/common/checks.sh"
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { "${SOLO[@]}" "$prog" "$@" --set SOLVER.CHECKPOINT_PERIOD=1 --set SOLVER.CHECKPOINT_KEEP=3; }

# ---- an earlier run in OUTPUT_DIR: refused ----
old=$tmp/old
run "$old" --set SOLVER.MAX_ITER=9 > "$tmp/old.log" 2>&1 || { bad "the first run failed: $?"; tail -n 5 "$tmp/old.log"; }
old_id=$(cat "$old/run_id" 2>/dev/null)
[ -n "$old_id" ] || bad "no $old/run_id"
(cd "$old" && md5sum model_*.h5 metrics.json) > "$tmp/old.md5" 2>/dev/null
run "$old" --set SOLVER.MAX_ITER=5 > "$tmp/new.log" 2>&1
rc=$?
msg=$(grep -m1 '^mrcnn error' "$tmp/new.log")
if [ $rc -ne 1 ] || ! grep -q "OUTPUT_DIR $old holds an earlier training, run $old_id (3 checkpoints, newest $old/model_0000009.h5, $old/metrics.json): continue it with --resume, or choose another OUTPUT_DIR" <<< "$msg"; then
    bad "fresh run into a used OUTPUT_DIR: exit $rc, want 1 naming run $old_id, --resume and another OUTPUT_DIR"
    tail -n 5 "$tmp/new.log"
else
    echo "fresh run into an earlier run's OUTPUT_DIR: exit 1: $(cut -c1-200 <<< "$msg")"
fi
grep -q "step 1/" "$tmp/new.log" && bad "the refused run trained"
(cd "$old" && md5sum -c --quiet "$tmp/old.md5") || bad "the earlier run's checkpoints or metrics.json changed"
"$PY_TORCH" - "$old" "$old_id" <<'PY' || bad "run ids in checkpoints or metrics.json"
import h5py, json, os, sys
d, rid = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(f"{d}/metrics.json")]
assert recs and all(r.get("run_id") == rid for r in recs), recs[:2]
for f in sorted(os.listdir(d)):
    if f.startswith("model_"):
        with h5py.File(f"{d}/{f}", "r") as h:
            got = h.attrs["run_id"]
            got = got.decode() if isinstance(got, bytes) else str(got)
            assert got == rid, (f, got, rid)
PY

# ---- another run's higher-numbered checkpoint in the directory ----
cur=$tmp/cur
run "$cur" --set SOLVER.MAX_ITER=9 --max-steps 2 > "$tmp/cur.log" 2>&1 || { bad "run cur failed"; tail -n 5 "$tmp/cur.log"; }
cur_id=$(cat "$cur/run_id")
cp "$old/model_0000009.h5" "$cur/"
run "$cur" --set SOLVER.MAX_ITER=9 --max-steps 5 --resume > "$tmp/resume.log" 2>&1 || { bad "resume failed: $?"; tail -n 5 "$tmp/resume.log"; }
grep -q "resumed from $cur/model_0000002.h5 at step 2" "$tmp/resume.log" ||
    { bad "--resume did not continue the run's own step 2"; grep -m2 "resum" "$tmp/resume.log"; }
grep -q "model_0000009.h5 belongs to run $old_id" "$tmp/resume.log" || bad "the other run's checkpoint was not named as skipped"
ck=$(cd "$cur" && ls model_*.h5 | tr '\n' ' ')
[ "$ck" = "model_0000003.h5 model_0000004.h5 model_0000005.h5 model_0000009.h5 " ] ||
    bad "checkpoints after the resumed run: $ck (want the run's own 3, 4, 5 and the other run's 9)"
[ "$(cat "$cur/run_id")" = "$cur_id" ] || bad "--resume changed run_id"
[ $fails -eq 0 ] && echo "PASS: a run owns its checkpoints"
[ $fails -eq 0 ]
