#!/usr/bin/env python3
"""Report of bench/accuracy.sh: OUT/report.md (AP table, acceptance, wall times, the
ImageNet load log) and OUT/loss_curves.png (both sides' total loss, one panel per model).

    python3 bench/accuracy_report.py OUT

Reads OUT/runs/<side>-<model>-<precision>-s<seed>/{meta.json, stats.json, metrics}:
stats.json is `mrcnn eval --gt ... --json` of the run's results file (the same
evaluator for both sides). AP is COCO AP@[.5:.95] x 100. "spread" is the range
(min..max) over seeds; std is the sample standard deviation.
"""
import glob
import json
import os
import statistics
import sys


def load_runs(out):
    runs = []
    for d in sorted(glob.glob(os.path.join(out, "runs", "*"))):
        mp = os.path.join(d, "meta.json")
        if not os.path.exists(mp):
            continue
        m = json.load(open(mp))
        m["dir"] = d
        sp = os.path.join(d, "stats.json")
        if m["status"] == "ok" and os.path.exists(sp):
            s = json.load(open(sp))
            m["box"] = 100 * s["bbox"]["stats"][0]
            m["mask"] = 100 * s["segm"]["stats"][0]
            m["box50"] = 100 * s["bbox"]["stats"][1]
            m["mask50"] = 100 * s["segm"]["stats"][1]
        m["curve"] = curve(d, m["side"])
        m["step_s"] = step_time(d, m["side"])
        runs.append(m)
    return runs


def curve(d, side):
    pts = []
    if side == "mrcnn":
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
    if side == "mrcnn":
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


def main():
    out = sys.argv[1]
    runs = load_runs(out)
    info = json.load(open(os.path.join(out, "run.json"))) if os.path.exists(os.path.join(out, "run.json")) else {}
    groups = {}
    for r in runs:
        groups.setdefault((r["model"], r["side"], r["precision"]), []).append(r)
    lines = ["# mrcnn vs torchvision: accuracy (bench/accuracy.sh)", ""]
    if info:
        lines += [f"Data: {info.get('train_images')} train / {info.get('val_images')} val images "
                  f"(R50 scored on the first {info.get('r50_val_images')}), shapes `{info.get('shapes')}`. "
                  f"tiny: {info.get('tiny_iters')} iterations at {info.get('tiny_size')} px; "
                  f"R50-FPN: {info.get('r50_iters')} iterations at {info.get('r50_size')} px. "
                  f"Total wall time {info.get('wall_s')} s ({info.get('par')} processes at a time"
                  f"{', QUICK' if info.get('quick') else ''}).", ""]
    lines += ["AP = COCO AP@[.5:.95] x 100 by `mrcnn eval --gt` on both result files; mean ± std [min, max] "
              "over seeds. Late loss: mean total loss over the last 20% of iterations (all seeds). Wall time: "
              "train s: the training process per run (mrcnn: the whole `mrcnn train`, start-up, weight load and "
              "checkpoint included; torchvision: its training loop), infer s: inference on the val images per run, "
              "step s: median seconds per training step from the log windows (the same measure on both sides).", "",
              "| model | side | precision | seeds ok | box AP | mask AP | box AP50 | mask AP50 | late loss | train s | infer s | step s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    sides = ["torchvision", "mrcnn", "torchvision-bnbias"]
    order = sorted(groups, key=lambda k: (k[0] != "tiny", sides.index(k[1]) if k[1] in sides else 9,
                                          ["fp32", "bf16", "fp16"].index(k[2]) if k[2] in ("fp32", "bf16", "fp16") else 9))
    summary = {}
    for k in order:
        rs = groups[k]
        ok = [r for r in rs if "box" in r]
        iters = info.get("tiny_iters" if k[0] == "tiny" else "r50_iters") or 1
        b, mk = stat([r["box"] for r in ok]), stat([r["mask"] for r in ok])
        b50, m50 = stat([r["box50"] for r in ok]), stat([r["mask50"] for r in ok])
        tr = stat([float(r["train_s"]) for r in ok])
        ev = stat([float(r["eval_s"]) for r in ok])
        summary[k] = (b, mk)
        late = [y for r in ok for x, y in r["curve"] if x > 0.8 * iters]
        late_s = f"{sum(late) / len(late):.3f}" if late else "-"
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {len(ok)}/{len(rs)} | {fmt(b)} | {fmt(mk)} | "
                     f"{b50['mean']:.1f} | {m50['mean']:.1f} | {late_s} | " if ok else
                     f"| {k[0]} | {k[1]} | {k[2]} | 0/{len(rs)} | - | - | - | - | - | ")
        if ok:
            st = [r["step_s"] for r in ok if r["step_s"]]
            lines[-1] += f"{tr['mean']:.0f} | {ev['mean']:.0f} | " + (f"{statistics.median(st):.3f} |" if st else "- |")
        else:
            lines[-1] += "- | - | - |"
    lines += ["", "## Acceptance: mrcnn's mean AP within torchvision's seed range, or higher", "",
              "| model | precision | box: mrcnn mean vs torchvision [min, max] | mask: same | verdict |",
              "|---|---|---|---|---|"]
    verdicts = []
    for k in order:
        if k[1] != "mrcnn":
            continue
        tv = summary.get((k[0], "torchvision", "fp32"))
        mb, mm = summary[k]
        if not tv or not tv[0] or not mb:
            lines.append(f"| {k[0]} | {k[2]} | - | - | incomplete |")
            continue
        tb, tm = tv
        ok_b = mb["mean"] >= tb["lo"]
        ok_m = mm["mean"] >= tm["lo"]
        v = "pass" if ok_b and ok_m else "FAIL"
        if v == "pass" and (mb["mean"] > tb["hi"] or mm["mean"] > tm["hi"]):
            v = "pass (higher)"
        verdicts.append(v)
        lines.append(f"| {k[0]} | {k[2]} | {mb['mean']:.2f} vs [{tb['lo']:.2f}, {tb['hi']:.2f}] | "
                     f"{mm['mean']:.2f} vs [{tm['lo']:.2f}, {tm['hi']:.2f}] | {v} |")
    failed = [r["dir"] for r in runs if r["status"] != "ok"]
    skipped_path = os.path.join(out, "skipped.txt")
    skipped = [s.strip() for s in open(skipped_path)] if os.path.exists(skipped_path) else []
    skipped = [s for s in skipped if s]
    if failed or skipped:
        lines += ["", "## Missing", ""]
        lines += [f"- failed: `{f}`" for f in failed]
        lines += [f"- skipped (deadline): `{s}`" for s in skipped]
    # the ImageNet load log
    il = os.path.join(out, "runs", "imagenet-load", "train.log")
    if os.path.exists(il):
        lines += ["", "## Fine-tuning load (MODEL.WEIGHTS = the ImageNet resnet50 imported by weights.py)", "", "```"]
        for line in open(il):
            if "] weights " in line or "initial weights" in line or "parameters (" in line:
                lines.append(line.rstrip()[:300] + (" ..." if len(line.rstrip()) > 300 else ""))
        lines.append("```")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(out, runs)


def plot(out, runs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = [m for m in ("tiny", "r50") if any(r["model"] == m for r in runs)]
    if not models:
        return
    fig, axes = plt.subplots(1, len(models), figsize=(7 * len(models), 4.5), squeeze=False)
    colors = {("torchvision", "fp32"): "black", ("mrcnn", "fp32"): "tab:blue", ("mrcnn", "bf16"): "tab:orange",
              ("mrcnn", "fp16"): "tab:green", ("torchvision-bnbias", "fp32"): "tab:gray"}
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
            ax.plot(steps, mean, color=c, lw=1.4, ls="--" if side.startswith("torchvision") else "-", marker=".",
                    label=f"{side} {prec}: mean of {len(rs)} seeds, band min-max")
            ax.fill_between(steps, lo, hi, color=c, alpha=0.12, lw=0)
        ax.set_title(f"{model}: total loss (log-window means), same initial weights per seed")
        ax.set_xlabel("iteration")
        ax.set_ylabel("loss")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "loss_curves.png"), dpi=110)


if __name__ == "__main__":
    main()
