#!/usr/bin/env python3
"""Report of bench/accuracy.sh: OUT/report.md, OUT/report.json (the same numbers and
verdicts, machine-readable) and OUT/loss_curves.png (both sides' total loss, one panel
per model).

    python3 bench/accuracy_report.py OUT [--quick]

Reads OUT/runs/<side>-<model>-<precision>-s<seed>/{meta.json, stats.json, metrics}:
stats.json is `mrcnn eval --gt ... --json` of the run's results file (the same
evaluator for both sides), and OUT/isolation/ (mrcnn's trained tiny weights scored
through torchvision's inference). AP is COCO AP@[.5:.95] x 100; std is the sample
standard deviation over seeds.

Bounds (full run):
- tiny, each mrcnn precision against torchvision fp32, box and mask AP:
  |mean_m - mean_t| <= max(1.0, 2 SE), SE = sqrt(s_m^2/n_m + s_t^2/n_t); and the
  comparison must be able to tell: torchvision's mean box AP >= 30, mask AP >= 25;
- R50 fine-tuning, mrcnn fp32 and bf16: over the last half of the iterations, at least
  CURVE_MIN_INSIDE of the points of the mean curve over seeds inside torchvision's seed
  band [min, max] (the fraction is printed), and the late loss (mean over the last 20%
  of the iterations, averaged over seeds) within torchvision's per-seed [min, max];
- isolation: |AP(torchvision inference) - AP(mrcnn eval)| <= 0.2, box and mask.
--quick (QUICK=1): the pipeline only: every planned run ok, nothing skipped, every
file valid, the isolation check ran; AP and loss bounds are printed, not applied.
Exit status: 0 when the checks hold, 1 when one fails.
"""
import glob
import json
import math
import os
import statistics
import sys

TINY_MIN_BOX, TINY_MIN_MASK = 30.0, 25.0  # torchvision's level for the comparison to tell
AP_ABS_TOL = 1.0                          # AP points, or 2 standard errors when larger
CURVE_MIN_INSIDE = 0.8
ISOLATION_TOL = 0.2
SIDES = ["torchvision", "mrcnn", "mrcnn-old", "torchvision-bnbias"]
PRECS = ["fp32", "bf16", "fp16"]


def load_runs(out):
    runs = []
    for d in sorted(glob.glob(os.path.join(out, "runs", "*"))):
        mp = os.path.join(d, "meta.json")
        if not os.path.isdir(d) or not os.path.exists(mp):
            continue
        with open(mp) as f:
            m = json.load(f)  # invalid JSON is an error of the pipeline: no report
        m["dir"] = d
        sp = os.path.join(d, "stats.json")
        if m["status"] == "ok" and os.path.exists(sp):
            m.update(ap_of(sp))
        m["curve"] = curve(d, m["side"])
        m["step_s"] = step_time(d, m["side"])
        runs.append(m)
    return runs


def ap_of(path):
    with open(path) as f:
        s = json.load(f)
    return dict(box=100 * s["bbox"]["stats"][0], mask=100 * s["segm"]["stats"][0],
                box50=100 * s["bbox"]["stats"][1], mask50=100 * s["segm"]["stats"][1])


def curve(d, side):
    pts = []
    if side.startswith("mrcnn"):
        p = os.path.join(d, "train", "metrics.json")
        if os.path.exists(p):
            for line in open(p):
                r = json.loads(line)
                if "total_loss" in r and "step" in r:
                    pts.append((r["step"], r["total_loss"]))
    else:
        p = os.path.join(d, "metrics.jsonl")
        if os.path.exists(p):
            for line in open(p):
                r = json.loads(line)
                pts.append((r["step"], r["total_loss"]))
    return pts


def step_time(d, side):
    """Median seconds per training step from the log windows (no start-up, loading,
    checkpoint or inference): mrcnn's step_ms, torchvision's time between windows."""
    v = []
    if side.startswith("mrcnn"):
        p = os.path.join(d, "train", "metrics.json")
        if os.path.exists(p):
            v = [json.loads(line)["step_ms"] / 1000 for line in open(p) if '"step_ms"' in line]
    else:
        p = os.path.join(d, "metrics.jsonl")
        if os.path.exists(p):
            rs = [json.loads(line) for line in open(p)]
            v = [(b["time"] - a["time"]) / (b["step"] - a["step"]) for a, b in zip(rs, rs[1:]) if b["step"] > a["step"]]
    return statistics.median(v) if v else None


def stat(v):
    if not v:
        return None
    return dict(n=len(v), mean=statistics.fmean(v), std=statistics.stdev(v) if len(v) > 1 else 0.0,
                lo=min(v), hi=max(v))


def fmt(s):
    if s is None:
        return "-"
    return f"{s['mean']:.2f} ± {s['std']:.2f} [{s['lo']:.2f}, {s['hi']:.2f}]"


def late_loss(r, iters):
    v = [y for x, y in r["curve"] if x > 0.8 * iters]
    return sum(v) / len(v) if v else None


def ap_compare(m, t):
    """mrcnn's and torchvision's AP over seeds -> the difference of means, its standard
    error and the verdict |diff| <= max(AP_ABS_TOL, 2 SE). With one seed on a side its
    spread is unknown: no standard error, no verdict (not ok)."""
    diff = m["mean"] - t["mean"]
    se = math.sqrt(m["std"] ** 2 / m["n"] + t["std"] ** 2 / t["n"])
    bound = max(AP_ABS_TOL, 2 * se)
    enough = m["n"] >= 2 and t["n"] >= 2
    return dict(mrcnn=m["mean"], mrcnn_std=m["std"], mrcnn_n=m["n"], torchvision=t["mean"], torchvision_std=t["std"],
                torchvision_n=t["n"], diff=diff, se=se if enough else None, bound=bound if enough else None,
                ok=enough and abs(diff) <= bound)


def band_check(runs_m, runs_t, iters):
    """The mean loss curve of mrcnn's seeds against torchvision's seed band (per step
    min..max) over the last half of the iterations."""
    common = set.intersection(*(set(x for x, _ in r["curve"]) for r in runs_m + runs_t))
    steps = sorted(x for x in common if x > iters / 2)
    if not steps:
        return None
    tv = [dict(r["curve"]) for r in runs_t]
    mm = [dict(r["curve"]) for r in runs_m]
    inside = 0
    per_seed = [0] * len(mm)
    for x in steps:
        lo, hi = min(p[x] for p in tv), max(p[x] for p in tv)
        mean = sum(p[x] for p in mm) / len(mm)
        inside += lo <= mean <= hi
        for i, p in enumerate(mm):
            per_seed[i] += lo <= p[x] <= hi
    return dict(points=len(steps), inside=inside / len(steps), per_seed=[v / len(steps) for v in per_seed])


def main():
    out = sys.argv[1]
    quick = "--quick" in sys.argv[2:]
    runs = load_runs(out)
    info_p = os.path.join(out, "run.json")
    info = json.load(open(info_p)) if os.path.exists(info_p) else {}
    groups = {}
    for r in runs:
        groups.setdefault((r["model"], r["side"], r["precision"]), []).append(r)
    rep = {"quick": quick, "run": info, "groups": [], "tiny": [], "r50": [], "isolation": None,
           "missing": [], "problems": []}
    lines = ["# mrcnn vs torchvision: accuracy (bench/accuracy.sh)", ""]
    if info:
        lines += [f"Data: {info.get('train_images')} train / {info.get('val_images')} val images "
                  f"(R50 scored on the first {info.get('r50_val_images')}), {info.get('image_size')} px, shapes "
                  f"`{info.get('shapes')}`. tiny: {info.get('tiny_iters')} iterations at {info.get('tiny_size')} px, "
                  f"LR {info.get('tiny_lr')}; R50-FPN: {info.get('r50_iters')} iterations at {info.get('r50_size')} px, "
                  f"LR {info.get('r50_lr')}. Total wall time {info.get('wall_s')} s ({info.get('par')} processes at "
                  f"a time{', QUICK' if info.get('quick') else ''}; load average at the end {info.get('load', '?')}).", ""]
    lines += ["AP = COCO AP@[.5:.95] x 100 by `mrcnn eval --gt` on both result files; mean ± std [min, max] "
              "over seeds. Late loss: mean total loss over the last 20% of iterations (all seeds). train s: "
              "the training process per run (mrcnn: the whole `mrcnn train`; torchvision: its training loop), "
              "infer s: inference on the val images per run, step s: median seconds per training step from the "
              "log windows (the same measure on both sides).", "",
              "| model | side | precision | seeds ok | box AP | mask AP | box AP50 | mask AP50 | late loss | train s | infer s | step s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    order = sorted(groups, key=lambda k: (k[0] != "tiny", SIDES.index(k[1]) if k[1] in SIDES else 9,
                                          PRECS.index(k[2]) if k[2] in PRECS else 9))
    summary = {}
    for k in order:
        rs = groups[k]
        ok = [r for r in rs if "box" in r]
        iters = info.get("tiny_iters" if k[0] == "tiny" else "r50_iters") or 1
        b, mk = stat([r["box"] for r in ok]), stat([r["mask"] for r in ok])
        summary[k] = (b, mk)
        late = [v for v in (late_loss(r, iters) for r in ok) if v is not None]
        late_s = f"{sum(late) / len(late):.3f}" if late else "-"
        row = f"| {k[0]} | {k[1]} | {k[2]} | {len(ok)}/{len(rs)} | "
        if ok:
            b50, m50 = stat([r["box50"] for r in ok]), stat([r["mask50"] for r in ok])
            tr = stat([float(r["train_s"]) for r in ok])
            ev = stat([float(r["eval_s"]) for r in ok])
            st = [r["step_s"] for r in ok if r["step_s"]]
            row += (f"{fmt(b)} | {fmt(mk)} | {b50['mean']:.1f} | {m50['mean']:.1f} | {late_s} | {tr['mean']:.0f} | "
                    f"{ev['mean']:.0f} | " + (f"{statistics.median(st):.3f} |" if st else "- |"))
        else:
            row += "- | - | - | - | - | - | - | - |"
        lines.append(row)
        rep["groups"].append(dict(model=k[0], side=k[1], precision=k[2], runs=len(rs), ok=len(ok), box=b, mask=mk,
                                  late_loss=sum(late) / len(late) if late else None))
    bounds_ok = []

    # ---- tiny: AP, difference of means and its standard error ----
    tv = summary.get(("tiny", "torchvision", "fp32"))
    if any(k[0] == "tiny" for k in groups):
        lines += ["", "## tiny: mrcnn against torchvision (AP, 5 seeds a side by default)", "",
                  f"Pass: |diff| <= max({AP_ABS_TOL:.1f}, 2 SE), SE = sqrt(s_m^2/n_m + s_t^2/n_t). The comparison can "
                  f"tell when torchvision's mean reaches box {TINY_MIN_BOX:.0f} / mask {TINY_MIN_MASK:.0f}.", ""]
        if tv and tv[0]:
            level = tv[0]["mean"] >= TINY_MIN_BOX and tv[1]["mean"] >= TINY_MIN_MASK
            lines.append(f"torchvision fp32: box {fmt(tv[0])}, mask {fmt(tv[1])} (n = {tv[0]['n']}): "
                         f"{'can tell' if level else 'BELOW the level that can tell'} "
                         f"(box >= {TINY_MIN_BOX:.0f}, mask >= {TINY_MIN_MASK:.0f})")
            rep["tiny_level"] = dict(box=tv[0]["mean"], mask=tv[1]["mean"], ok=level)
            bounds_ok.append(level)
        else:
            lines.append("torchvision fp32: no finished run")
            bounds_ok.append(False)
        lines += ["", "| precision | box: mrcnn | box: torchvision | box diff ± SE | box bound | mask: mrcnn | "
                  "mask: torchvision | mask diff ± SE | mask bound | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
        for k in order:
            if k[0] != "tiny" or k[1] != "mrcnn":
                continue
            mb, mm = summary[k]
            if not tv or not tv[0] or not mb:
                lines.append(f"| {k[2]} | - | - | - | - | - | - | - | - | incomplete |")
                rep["tiny"].append(dict(precision=k[2], ok=False, incomplete=True))
                bounds_ok.append(False)
                continue
            cb, cm = ap_compare(mb, tv[0]), ap_compare(mm, tv[1])
            ok = cb["ok"] and cm["ok"]
            bounds_ok.append(ok)
            rep["tiny"].append(dict(precision=k[2], box=cb, mask=cm, ok=ok))
            se = lambda c: f"{c['diff']:+.2f} ± {c['se']:.2f}" if c["se"] is not None else f"{c['diff']:+.2f} ± ?"
            bd = lambda c: f"{c['bound']:.2f}" if c["bound"] is not None else "-"
            verdict = ("pass" if ok else "FAIL") if cb["se"] is not None else \
                f"no verdict (seeds: mrcnn {mb['n']}, torchvision {tv[0]['n']}; needs >= 2 a side)"
            lines.append(f"| {k[2]} | {mb['mean']:.2f} ± {mb['std']:.2f} | {tv[0]['mean']:.2f} ± {tv[0]['std']:.2f} | "
                         f"{se(cb)} | {bd(cb)} | {mm['mean']:.2f} ± {mm['std']:.2f} | "
                         f"{tv[1]['mean']:.2f} ± {tv[1]['std']:.2f} | {se(cm)} | {bd(cm)} | {verdict} |")

    # ---- R50 fine-tuning: loss curves against torchvision's seed band ----
    if any(k[0] == "r50" for k in groups):
        iters = info.get("r50_iters") or 1
        tvr = [r for r in groups.get(("r50", "torchvision", "fp32"), []) if r["curve"]]
        tv_late = [v for v in (late_loss(r, iters) for r in tvr) if v is not None]
        lines += ["", "## R50-FPN fine-tuning from the ImageNet stand-in: loss curves", "",
                  f"Inside: the fraction of the points of the last half (iterations > {iters // 2}) where the mean "
                  f"curve over mrcnn's seeds lies in torchvision's seed band [min, max] (per seed in brackets); "
                  f"pass: >= {CURVE_MIN_INSIDE:.0%} inside and the late loss (mean over seeds of the mean over the last "
                  "20%) within torchvision's per-seed [min, max]. mrcnn-old: the fold without the s^2 "
                  "preconditioner (OLD_MRCNN), shown, not judged.", "",
                  "| side | precision | seeds | inside (per seed) | late loss | torchvision late [min, max] | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for k in order:
            if k[0] != "r50" or not k[1].startswith("mrcnn"):
                continue
            rm = [r for r in groups[k] if r["curve"] and r["status"] == "ok"]
            bc = band_check(rm, tvr, iters) if rm and len(tvr) >= 2 else None
            late = [v for v in (late_loss(r, iters) for r in rm) if v is not None]
            lm = sum(late) / len(late) if late else None
            if bc is None or lm is None or len(tv_late) < 2:
                lines.append(f"| {k[1]} | {k[2]} | {len(rm)} | - | - | - | incomplete |")
                if k[1] == "mrcnn":
                    bounds_ok.append(False)
                rep["r50"].append(dict(side=k[1], precision=k[2], ok=False, incomplete=True))
                continue
            late_ok = min(tv_late) <= lm <= max(tv_late)
            ok = bc["inside"] >= CURVE_MIN_INSIDE and late_ok
            verdict = ("pass" if ok else "FAIL") if k[1] == "mrcnn" else ("(would pass)" if ok else "(outside)")
            if k[1] == "mrcnn":
                bounds_ok.append(ok)
            rep["r50"].append(dict(side=k[1], precision=k[2], seeds=len(rm), band=bc, late_loss=lm,
                                   tv_late=[min(tv_late), max(tv_late)], ok=ok))
            lines.append(f"| {k[1]} | {k[2]} | {len(rm)} | {bc['inside']:.0%} of {bc['points']} "
                         f"({', '.join(f'{v:.0%}' for v in bc['per_seed'])}) | {lm:.3f} | "
                         f"[{min(tv_late):.3f}, {max(tv_late):.3f}] | {verdict} |")

    # ---- training isolated from inference ----
    iso = os.path.join(out, "isolation")
    lines += ["", "## Training isolated from inference", ""]
    if os.path.exists(os.path.join(iso, "meta.json")):
        with open(os.path.join(iso, "meta.json")) as f:
            im = json.load(f)
        a_tv = ap_of(os.path.join(iso, "stats_tv.json")) if os.path.exists(os.path.join(iso, "stats_tv.json")) else None
        a_m = ap_of(os.path.join(iso, "stats_mrcnn.json")) if os.path.exists(os.path.join(iso, "stats_mrcnn.json")) else None
        if a_tv and a_m:
            db, dm = a_tv["box"] - a_m["box"], a_tv["mask"] - a_m["mask"]
            ok = abs(db) <= ISOLATION_TOL and abs(dm) <= ISOLATION_TOL
            rep["isolation"] = dict(run=im.get("run"), torchvision=a_tv, mrcnn=a_m, box_diff=db, mask_diff=dm, ok=ok)
            lines += [f"mrcnn's trained weights (`{im.get('run')}`), exported by `data_prep/weights.py export`, on the "
                      f"{info.get('val_images')} val images: `mrcnn eval` box {a_m['box']:.2f} / mask {a_m['mask']:.2f}; "
                      f"torchvision's inference box {a_tv['box']:.2f} / mask {a_tv['mask']:.2f}; difference "
                      f"{db:+.2f} / {dm:+.2f} (bound {ISOLATION_TOL}): {'pass' if ok else 'FAIL'}"]
            bounds_ok.append(ok)
        else:
            lines.append(f"isolation check incomplete ({iso}: {im.get('status')})")
            rep["problems"].append("isolation check incomplete")
    else:
        lines.append("not run (no tiny mrcnn fp32 run)")
        rep["problems"].append("isolation check not run")

    failed = [r["dir"] for r in runs if r["status"] != "ok"]
    skipped_path = os.path.join(out, "skipped.txt")
    skipped = [s.strip() for s in open(skipped_path)] if os.path.exists(skipped_path) else []
    skipped = [s for s in skipped if s]
    rep["missing"] = [f"failed: {f}" for f in failed] + [f"skipped: {s}" for s in skipped]
    if failed or skipped:
        lines += ["", "## Missing", ""]
        lines += [f"- failed: `{f}`" for f in failed]
        lines += [f"- skipped (deadline): `{s}`" for s in skipped]
    il = os.path.join(out, "runs", "imagenet-load", "train.log")
    if os.path.exists(il):
        lines += ["", "## Fine-tuning load (MODEL.WEIGHTS = the ImageNet resnet50 imported by weights.py)", "", "```"]
        for line in open(il):
            if "] weights " in line or "initial weights" in line or "parameters (" in line or "trainable" in line:
                lines.append(line.rstrip()[:300] + (" ..." if len(line.rstrip()) > 300 else ""))
        lines.append("```")

    pipeline_ok = not failed and not skipped and not rep["problems"] and bool(runs)
    if quick:
        verdict = "pipeline ok (QUICK: bounds not applied)" if pipeline_ok else "pipeline FAILED"
        status = 0 if pipeline_ok else 1
    else:
        all_ok = pipeline_ok and bool(bounds_ok) and all(bounds_ok)
        verdict = "all bounds met" if all_ok else "FAIL (a bound not met, or runs missing)"
        status = 0 if all_ok else 1
    rep["verdict"], rep["status"] = verdict, status
    lines += ["", f"**Verdict: {verdict}**"]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(rep, f, indent=1)
    print("\n".join(lines))
    try:
        plot(out, runs, info)
    except ImportError as e:  # the numbers stand without the picture
        print(f"no plot: {e}")
    return status


def plot(out, runs, info):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = [m for m in ("tiny", "r50") if any(r["model"] == m for r in runs)]
    if not models:
        return
    fig, axes = plt.subplots(1, len(models), figsize=(7 * len(models), 4.8), squeeze=False)
    colors = {("torchvision", "fp32"): "black", ("mrcnn", "fp32"): "tab:blue", ("mrcnn", "bf16"): "tab:orange",
              ("mrcnn", "fp16"): "tab:green", ("mrcnn-old", "fp32"): "tab:red",
              ("torchvision-bnbias", "fp32"): "tab:gray"}
    for ax, model in zip(axes[0], models):
        for (side, prec), c in colors.items():
            rs = [r for r in runs if r["model"] == model and r["side"] == side and r["precision"] == prec and r["curve"]]
            if not rs:
                continue
            steps = sorted(set.intersection(*(set(x for x, _ in r["curve"]) for r in rs)))
            if not steps:
                continue
            per = [dict(r["curve"]) for r in rs]
            mean = [sum(p[x] for p in per) / len(per) for x in steps]
            lo = [min(p[x] for p in per) for x in steps]
            hi = [max(p[x] for p in per) for x in steps]
            label = f"{side} {prec}: " + (f"mean of {len(rs)} seeds, band min-max" if len(rs) > 1 else
                                          f"seed {rs[0]['seed']}")
            if side == "mrcnn-old":
                label += " (fold without the s^2 preconditioner)"
            ax.plot(steps, mean, color=c, lw=1.4, ls="--" if side.startswith("torchvision") else "-", marker=".",
                    label=label)
            ax.fill_between(steps, lo, hi, color=c, alpha=0.15 if side == "torchvision" else 0.08, lw=0)
        iters = info.get("tiny_iters" if model == "tiny" else "r50_iters")
        if iters and model == "r50":
            ax.axvline(iters / 2, color="gray", lw=0.8, ls=":")
        ax.set_title(f"{model}: total loss (log-window means), same initial weights per seed")
        ax.set_xlabel("iteration")
        ax.set_ylabel("loss")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "loss_curves.png"), dpi=110)


if __name__ == "__main__":
    sys.exit(main())
