#!/usr/bin/env bash
# `mrcnn eval --plots DIR` (src/eval/eval_plots.c) on coco_gen.py's corner-case ground
# truth (crowds, categories without gt, every area range): the precision-recall CSV's
# curves average to the AP, AP50, AP75 and APs/APm/APl of --json's stats, the per-category
# CSV equals its per_category APs sorted, every series is plotted and its colour is in the
# PNG, for bbox and segm.
set -u
cd "${ROOT:-$(dirname "$0")/../..}"
. tests/common/skip.sh
M=$BUILD/mrcnn
[ -x "$M" ] || { echo "not built: $M"; exit 1; }
PY=${PY_COCO:-python3}
$PY -c 'import pycocotools' 2> /dev/null || skip coco "pycocotools missing for $PY (make deps)"
command -v "${MRCNN_GNUPLOT:-gnuplot}" > /dev/null || skip gnuplot "gnuplot missing (make deps installs gnuplot-nox)"
/usr/bin/python3 -c 'import PIL' 2> /dev/null || skip torch "python3-pil missing for /usr/bin/python3"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
$PY tests/eval/coco_gen.py "$tmp" 40 3 > /dev/null || { echo "FAIL: coco_gen.py"; exit 1; }
"$M" eval --help | grep -q -- "--plots DIR" || { echo "FAIL: --plots not in --help"; exit 1; }
"$M" eval --gt "$tmp/gt.json" --results "$tmp/res_both.json" --json "$tmp/stats.json" --plots "$tmp/plots" \
    > "$tmp/eval.log" 2>&1 || { cat "$tmp/eval.log"; echo "FAIL: mrcnn eval --plots"; exit 1; }
/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import json, math, sys
sys.path.insert(0, "tests/common")
from plot_check import check, read_csv
d = sys.argv[1]
stats = json.load(open(d + "/stats.json"))
for iou in ["bbox", "segm"]:
    s = stats[iou]["stats"]
    base = "%s/plots/eval_%s_pr" % (d, iou)
    head, rows = read_csv(base + ".csv")
    assert head == ["recall", "p_iou50", "p_iou75", "p_iou50_95", "p_small", "p_medium", "p_large"], head
    assert len(rows) == 101 and all(abs(r[0] - i / 100) < 1e-12 for i, r in enumerate(rows)), "recall points"
    # each curve's mean over the 101 recall points is its COCO stat (sums of up to
    # 101 x 10 x K terms in another order: 1e-12 relative)
    for col, k in [(1, 1), (2, 2), (3, 0), (4, 3), (5, 4), (6, 5)]:
        vals = [r[col] for r in rows]
        if s[k] < 0:
            assert all(v is None for v in vals), (iou, head[col], "no gt, yet a curve")
            continue
        mean = sum(vals) / len(vals)
        assert abs(mean - s[k]) <= 1e-12 * max(1.0, abs(s[k])), (iou, head[col], mean, s[k])
    check(base, [base + ".csv"], (1200, 520))
    gp = open(base + ".gp").read()
    assert "[%.3f] IoU=.50:.95" % s[0] in gp and "'recall'" in gp and "'precision'" in gp, "legend and axes"
    base = "%s/plots/eval_%s_categories" % (d, iou)
    head, rows = read_csv(base + ".csv")
    assert head == ["rank", "category_id", "name", "AP"], head
    want = sorted([c for c in stats[iou]["per_category"] if c["AP"] is not None and c["AP"] >= 0],
                  key=lambda c: (-c["AP"], 0))
    got = [(int(r[1]), r[2], float(r[3])) for r in rows]
    assert [g[0] for g in got] == [c["id"] for c in want], (got, want)
    for g, c in zip(got, want):
        assert g[1] == c["name"] and g[2] == c["AP"], (g, c)
    assert all(got[i][2] >= got[i + 1][2] for i in range(len(got) - 1)), "not sorted"
    assert len(got) >= 3, "want several categories with gt"
    check(base, [], (800, 520))
    gp = open(base + ".gp").read()
    assert "using ($1-1):4:xtic(3) with boxes" in gp, "the bars are the AP column, labelled by name"
    print("%s: 6 PR curves average to the stats; %d category bars equal per_category" % (iou, len(got)))
PY
echo PASS
