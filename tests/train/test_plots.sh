#!/usr/bin/env bash
# The training pictures (plot.h, src/train/plot.c): `mrcnn plot` of one run and of two
# overlaid, from metrics.json written by the trainer's own writer (prog_plot_metrics:
# five loss terms, fp16 loss scale and skipped steps, a resume that rewrites steps
# 42..60, an eval line); every series in the CSV beside the picture equals metrics.json
# (the last line per step), every column is plotted and its colour is in the PNG.
# Then `mrcnn train`: plots/training.png at the checkpoints with the config in its title,
# and with gnuplot missing (MRCNN_GNUPLOT=/nonexistent) the run succeeds and says once
# that plots are off.
set -u
cd "${ROOT:-$(dirname "$0")/../..}"
. tests/common/skip.sh
M=$BUILD/mrcnn P=$BUILD/mrcnn-prep prog=$BUILD/tests/train/prog_plot_metrics
for b in "$M" "$P" "$prog"; do [ -x "$b" ] || { echo "not built: $b"; exit 1; }; done
command -v "${MRCNN_GNUPLOT:-gnuplot}" > /dev/null || skip gnuplot "gnuplot missing (make deps installs gnuplot-nox)"
/usr/bin/python3 -c 'import PIL' 2> /dev/null || skip torch "python3-pil missing for /usr/bin/python3"
tmp=$(mktemp -d); trap "rm -rf \"$tmp\"" EXIT; [ -n "${KEEP_TMP:-}" ] && trap - EXIT && echo "tmp: $tmp"
fail() { echo "FAIL: $*"; exit 1; }

"$prog" "$tmp/runA" > /dev/null 2>&1 || fail "prog_plot_metrics runA"
"$prog" "$tmp/runB" 3 > /dev/null 2>&1 || fail "prog_plot_metrics runB"
"$M" plot --help | grep -q "RUN_DIR" || fail "mrcnn plot --help"
"$M" plot > /dev/null 2>&1; [ $? -eq 2 ] || fail "mrcnn plot without a run must exit 2"
"$M" plot "$tmp/runA" > "$tmp/plot1.log" 2>&1 || { cat "$tmp/plot1.log"; fail "mrcnn plot runA"; }
"$M" plot "$tmp/runA" "$tmp/runB" --out "$tmp/cmp" > "$tmp/plot2.log" 2>&1 || { cat "$tmp/plot2.log"; fail "mrcnn plot runA runB"; }
MRCNN_GNUPLOT=/nonexistent "$M" plot "$tmp/runA" --out "$tmp/off" > "$tmp/off.log" 2>&1
[ $? -eq 1 ] || fail "mrcnn plot without gnuplot must exit 1"
grep -q "plots are off" "$tmp/off.log" || fail "no 'plots are off' from mrcnn plot: $(cat "$tmp/off.log")"

/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import json, math, sys
sys.path.insert(0, "tests/common")
from plot_check import check, read_csv
d = sys.argv[1]
KEYS = ["total_loss", "loss_cls", "loss_box_reg", "loss_mask", "loss_rpn_cls", "loss_rpn_loc", "lr", "img_per_s",
        "mem_mb", "gpu_mem_mb", "loss_scale", "skipped"]

def expected(run):
    rows = {}
    for line in open("%s/%s/metrics.json" % (d, run)):
        j = json.loads(line)
        if "total_loss" not in j:
            continue  # an eval line
        for s in [s for s in rows if s >= j["step"]]:
            del rows[s]  # a resume rewrites the steps after its checkpoint
        rows[j["step"]] = j
    return [rows[s] for s in sorted(rows)]

def same(csv, run):
    head, rows = read_csv(csv)
    assert head == ["step"] + KEYS, (csv, head)
    want = expected(run)
    assert len(rows) == len(want) == 30, (csv, len(rows), len(want))
    for r, w in zip(rows, want):
        assert r[0] == w["step"], (r[0], w["step"])
        for k in KEYS:
            # both sides parse the same decimal text: equal doubles
            assert r[head.index(k)] == float(w[k]), (csv, w["step"], k, r[head.index(k)], w[k])
    # the resumed tail (lr + 1e-4) won, not the first pass
    assert abs(rows[-1][head.index("lr")] - 0.0021) < 1e-12, rows[-1]
    return head

same(d + "/runA/plots/training.csv", "runA")
p = check(d + "/runA/plots/training", [d + "/runA/plots/training.csv"], (1400, 900))
gp = open(d + "/runA/plots/training.gp").read()
assert "run runA" in gp and "logscale y" in gp and "fp16 loss scaling" in gp, gp[:400]
for label in ["step (iterations)", "loss (log scale)", "throughput (images/s", "memory on rank 0 (MiB)",
              "loss scale", "skipped steps"]:
    assert label in gp, label
same(d + "/cmp/compare_1.csv", "runA")
same(d + "/cmp/compare_2.csv", "runB")
p = check(d + "/cmp/compare", [d + "/cmp/compare_1.csv", d + "/cmp/compare_2.csv"], (1400, 900))
assert "runA (solid) vs runB (dashed)" in open(d + "/cmp/compare.gp").read()
print("training plots: %d series of 2 runs overlaid, 12 of one run, all equal to metrics.json" % len(p))
PY

# ---- the trainer draws them at checkpoints; without gnuplot it still trains ----
"$P" shapes --out "$tmp/raw" --train 4 --val 1 --size 128x128 > /dev/null 2>&1 || fail "shapes"
"$P" coco --annotations "$tmp/raw/annotations/instances_train.json" --images "$tmp/raw/train" \
    --out "$tmp/shards" --name train --shards 1 > "$tmp/prep.log" 2>&1 || { cat "$tmp/prep.log"; fail "coco"; }
T="--config configs/tiny.yaml --set DATASETS.TRAIN=$tmp/shards/train-index.h5 --set LOG_PERIOD=1
   --set SOLVER.CHECKPOINT_PERIOD=2 --max-steps 3"
OMP_NUM_THREADS=1 "$M" train $T --set OUTPUT_DIR="$tmp/t_on" > "$tmp/t_on.log" 2>&1 || { tail -20 "$tmp/t_on.log"; fail "train"; }
[ "$(grep -c "training curves: .*plots/training.png" "$tmp/t_on.log")" -eq 2 ] ||
    fail "want training curves at the step-2 checkpoint and at the end: $(grep -i plot "$tmp/t_on.log")"
grep -q "# config: tiny, fp32, batch" "$tmp/t_on/plots/training.csv" || fail "no config line: $(head -3 "$tmp/t_on/plots/training.csv")"
grep -q "run t_on\( ([0-9a-f-]*)\)\? - tiny, fp32, batch" "$tmp/t_on/plots/training.gp" || fail "no run and config in the title"
/usr/bin/python3 -c "
import sys; sys.path.insert(0, 'tests/common'); from plot_check import check, read_csv
h, r = read_csv('$tmp/t_on/plots/training.csv')
assert [x[0] for x in r] == [1, 2, 3], r
# fp32: the loss scale and skipped steps are logged but get no panel
check('$tmp/t_on/plots/training', ['$tmp/t_on/plots/training.csv'], (1400, 900), skip_cols=('loss_scale', 'skipped'))
assert 'fp16 loss scaling' not in open('$tmp/t_on/plots/training.gp').read()" || fail "trainer's training.png"
MRCNN_GNUPLOT=/nonexistent OMP_NUM_THREADS=1 "$M" train $T --set OUTPUT_DIR="$tmp/t_off" > "$tmp/t_off.log" 2>&1 ||
    { tail -20 "$tmp/t_off.log"; fail "training without gnuplot must still succeed"; }
[ "$(grep -c "plots are off" "$tmp/t_off.log")" -eq 1 ] || fail "'plots are off' must be said once: $(grep -c "plots are off" "$tmp/t_off.log")"
[ ! -e "$tmp/t_off/plots/training.png" ] || fail "a picture without gnuplot?"
[ -e "$tmp/t_off/model_0000003.h5" ] || fail "no final checkpoint without gnuplot"
echo PASS
