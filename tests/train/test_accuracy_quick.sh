#!/usr/bin/env bash
# The accuracy comparison cannot rot: `QUICK=1 bash bench/accuracy.sh` runs every step
# of the full comparison on a few images and iterations (data, both sides' weights,
# torchvision and mrcnn fp32/bf16/fp16 tiny training, R50 fine-tuning from the ImageNet
# stand-in, the shared evaluator, the isolation check through torchvision's inference,
# the report) and must exit 0 with a valid report.json whose verdict says the pipeline
# ran; AP bounds are not applied at this size. ~1-2 min on 2 cores.
set -u
cd "$ROOT"
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY_TORCH" -c "import torch, torchvision, h5py" 2>/dev/null || skip torch "$PY_TORCH lacks torch/torchvision/h5py"
command -v mpirun > /dev/null || skip mpi "no mpirun"
[ -x "$BUILD/mrcnn" ] && [ -x "$BUILD/mrcnn-prep" ] || { echo "not built: $BUILD/mrcnn, $BUILD/mrcnn-prep"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
if ! OUT=$tmp/acc QUICK=1 BUILD=$BUILD bash bench/accuracy.sh > "$tmp/log" 2>&1; then
    echo "FAIL: QUICK=1 bench/accuracy.sh exited $?"; tail -n 40 "$tmp/log"; exit 1
fi
echo "QUICK run: $(($(date +%s) - t0)) s"
"$PY_TORCH" - "$tmp/acc" <<'PY' || { tail -n 40 "$tmp/log"; exit 1; }
import glob, json, os, sys
out = sys.argv[1]
bad = []
for p in sorted(glob.glob(os.path.join(out, "runs", "*", "meta.json"))) + [os.path.join(out, "run.json")]:
    try:
        json.load(open(p))
    except Exception as e:  # every file the report reads is JSON
        bad.append(f"{p}: {e}")
rep = json.load(open(os.path.join(out, "report.json")))
assert os.path.getsize(os.path.join(out, "report.md")) > 0
runs = glob.glob(os.path.join(out, "runs", "*", "meta.json"))
metas = [json.load(open(p)) for p in runs]
sides = {(m["side"], m["model"], m["precision"]) for m in metas}
want = {("torchvision", "tiny", "fp32"), ("mrcnn", "tiny", "fp32"), ("mrcnn", "tiny", "bf16"), ("mrcnn", "tiny", "fp16"),
        ("torchvision", "r50", "fp32"), ("mrcnn", "r50", "fp32"), ("mrcnn", "r50", "bf16")}
missing = want - sides
not_ok = [m for m in metas if m["status"] != "ok"]
iso = rep.get("isolation") or {}
print(f"report: {rep['verdict']}; {len(metas)} runs; isolation: box {iso.get('torchvision', {}).get('box')} vs "
      f"{iso.get('mrcnn', {}).get('box')}")
for what, cond in [("invalid JSON: " + "; ".join(bad), not bad), (f"runs missing: {sorted(missing)}", not missing),
                   (f"runs not ok: {not_ok}", not not_ok), (f"status {rep['status']}", rep["status"] == 0),
                   ("isolation check did not run", "box" in iso.get("torchvision", {}) and "box" in iso.get("mrcnn", {})),
                   ("no tiny comparison rows", len(rep["tiny"]) == 3), ("no R50 curve rows", len(rep["r50"]) >= 2),
                   (f"missing: {rep['missing']}", not rep["missing"])]:
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
print("ok")
PY
