#!/usr/bin/env python3
"""Fine-tuning through a frozen BN trains what torchvision trains.

mrcnn folds each frozen BN into its conv at load (W' = s W per output channel) and
trains W'; torchvision keeps FrozenBatchNorm2d and trains W. R50-FPN (FREEZE_AT 2:
torchvision's trainable_layers 3) with non-identity frozen BN, s drawn log-uniformly
over [0.1, 5] per channel, runs K SGD steps of the real trainer (prog_finetune:
mrcnn_trainer_step, momentum, weight decay, clipping that binds) on one fixed batch.
torchvision's side takes the same weights and the same gradients through the chain
rule (dL/dW = s dL/dW' for a folded conv weight, dL/dp for the rest), clips them by
clip_grad_norm_'s rule and steps torch.optim.SGD. Every trainable tensor after step 1
and after step K is compared in torchvision's parameterization (W = W'/s). Sharing the
gradients isolates the optimizer, the part the fold changes (the forward and backward
through a folded conv are tests/model/parity_torch.py's), and keeps the difference
down to rounding, so the bound can be derived:

u = 2^-24. Per element and step both sides compute d = c g + wd p, v = mu v + d,
p -= lr v in fp32 (mrcnn with q = fl(s^2) on g' and the fold's fl(s W)); each of those
results carries a relative rounding of u per operation, so with per-tensor maxima
A_W = max |W|, A_v = max |v|, A_g = max |c g| (torchvision's values) and the clip
factors agreeing to ~4u (both norms formed from the same fp32 gradients, mrcnn's in
double, the replay's in float64; the factor itself rounded to fp32 once on each side):
  dv_k <= mu dv_{k-1} + wd dW_{k-1} + 8u (mu A_v + A_g + wd A_W)
  dW_k <= dW_{k-1} + lr dv_k + 3u (A_W + lr A_v),    dW_0 = 2u A_W
(dW_0: fl(s W) at the fold and W'/s here; 8 and 3 are 2 more operations than each
line has, for q = fl(s^2) and the product c q g'). The test holds every tensor to
4 x that bound. --no-precond (the trainer without the preconditioner: how mrcnn trained
before) must break it, so the test can tell.

    finetune_tv.py [--steps K] [--size PX] [--keep DIR]
Env: BUILD, ROOT."""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

ROOT = os.environ.get("ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("BUILD", "build/release")
sys.path.insert(0, os.path.join(ROOT, "data_prep"))
sys.path.insert(0, os.path.join(ROOT, "tests/model"))
import weights  # noqa: E402
import parity_torch  # noqa: E402
from torchvision.ops.misc import FrozenBatchNorm2d  # noqa: E402

U = 2.0 ** -24
LR, MOMENTUM, WD, CLIP = 0.02, 0.9, 1e-4, 1.0
S_RANGE = (0.1, 5.0)
BOUND_FACTOR = 4.0


def draw_bn(model, seed):
    """Frozen-BN statistics whose scale s = w / sqrt(var + eps) spans S_RANGE: log-normal
    around 0.6 (so that 50 layers neither blow the activations up nor kill them) clipped
    to S_RANGE, with both ends present in every BN."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = S_RANGE
    with torch.no_grad():
        for _, mod in model.named_modules():
            if not isinstance(mod, FrozenBatchNorm2d):
                continue
            k = mod.weight.numel()
            s = torch.exp(math.log(0.6) + 0.6 * torch.randn(k, generator=g)).clamp(lo, hi)
            s[0], s[1] = lo, hi
            var = 0.5 + torch.rand(k, generator=g)
            mod.running_var.copy_(var)
            mod.weight.copy_(s * torch.sqrt(var + mod.eps))
            mod.bias.copy_(0.1 * torch.randn(k, generator=g))
            mod.running_mean.copy_(0.1 * torch.randn(k, generator=g))


def run_c(tmp, model, size, steps, precond):
    pth, h5w, inp = (os.path.join(tmp, n) for n in ("w.pth", "w.h5", "in.h5"))
    out = os.path.join(tmp, f"out{'' if precond else '-noprecond'}.h5")
    if not os.path.exists(h5w):
        torch.save(model.state_dict(), pth)
        weights.import_state_dict(weights.load_state_dict(pth), h5w)
        imgs, targets = parity_torch.make_inputs(7, 1, size, size, parity_torch.R50_SETTINGS["num_classes"])
        parity_torch.write_inputs(inp, imgs, targets)
    cfg = os.path.join(tmp, "c.yaml")
    open(cfg, "w").write("SEED: 1\n")
    sets = parity_torch.c_sets(parity_torch.R50_SETTINGS) + [
        "SOLVER.IMS_PER_BATCH=1", f"SOLVER.BASE_LR={LR}", f"SOLVER.MOMENTUM={MOMENTUM}",
        f"SOLVER.WEIGHT_DECAY={WD}", f"SOLVER.WEIGHT_DECAY_BIAS={WD}", "SOLVER.WARMUP_ITERS=0",
        "SOLVER.CLIP_GRADIENTS.ENABLED=true", f"SOLVER.CLIP_GRADIENTS.CLIP_VALUE={CLIP}",
        "SOLVER.PRECISION=fp32", f"SOLVER.MAX_ITER={steps}", "SOLVER.STEPS=[]"]
    cmd = [os.path.join(BUILD, "tests/train/prog_finetune"), cfg, h5w, inp, out, "--steps", str(steps)]
    for s in sets:
        cmd += ["--set", s]
    if not precond:
        cmd.append("--no-precond")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(f"prog_finetune failed with {r.returncode}")
    print("  C:", r.stdout.strip().replace("\n", "\n  C: "))
    return h5py.File(out, "r"), r.stdout


def replay(model, out, steps):
    """torchvision's SGD on W, fed the C run's gradients through the chain rule."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    cname = {n: weights.canonical_name(n) for n, _ in params}
    scale = {c: np.array(out["fold_scale"][c], np.float32) for c in out["fold_scale"]} if "fold_scale" in out else {}
    opt = torch.optim.SGD([p for _, p in params], lr=LR, momentum=MOMENTUM, weight_decay=WD)
    history = []
    for k in range(1, steps + 1):
        grads = {}
        for n, p in params:
            g = weights.from_project(cname[n], np.array(out[f"step/{k}/grad/{cname[n]}"]))
            if cname[n] in scale:
                g = g * torch.from_numpy(scale[cname[n]]).view(-1, 1, 1, 1)
            grads[n] = g
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
        coef = min(1.0, CLIP / (norm + 1e-6))  # clip_grad_norm_'s rule, the norm in float64
        for n, p in params:
            p.grad = grads[n] * coef if coef < 1.0 else grads[n]
        opt.step()
        vmax = {n: float(opt.state[p]["momentum_buffer"].abs().max()) for n, p in params}
        gmax = {n: float(p.grad.abs().max()) for n, p in params}
        history.append(dict(coef=coef, norm=norm, vmax=vmax, gmax=gmax,
                            w={n: p.detach().clone() for n, p in params}))
    return params, cname, scale, history


def bound(k, a_w, a_v, a_g):
    dv, dw = 0.0, 2 * U * a_w
    for _ in range(k):
        dv = MOMENTUM * dv + WD * dw + 8 * U * (MOMENTUM * a_v + a_g + WD * a_w)
        dw = dw + LR * dv + 3 * U * (a_w + LR * a_v)
    return dw


def compare(label, out, params, cname, scale, history, ks):
    """Worst tensor's error / bound at each k in ks; prints the worst few."""
    worst = {}
    for k in ks:
        h = history[k - 1]
        rows = []
        for n, _ in params:
            c = cname[n]
            w_c = weights.from_project(c, np.array(out[f"step/{k}/values/{c}"])).double()
            if c in scale:
                w_c = w_c / torch.from_numpy(scale[c]).double().view(-1, 1, 1, 1)
            w_t = h["w"][n].double()
            a_w = max(float(w_t.abs().max()), max(float(hh["w"][n].abs().max()) for hh in history[:k]))
            a_v = max(hh["vmax"][n] for hh in history[:k])
            a_g = max(hh["gmax"][n] for hh in history[:k])
            err = float((w_c - w_t).abs().max())
            b = BOUND_FACTOR * bound(k, a_w, a_v, a_g)
            rows.append((err / b, err / max(a_w, 1e-30), n, err, b))
        rows.sort(reverse=True)
        worst[k] = rows[0][0]
        print(f"  {label} after step {k}: {len(rows)} tensors; worst error / bound {rows[0][0]:.3g}, "
              f"worst |dW| / max|W| {max(r[1] for r in rows):.3g}")
        for r in rows[:3]:
            print(f"      {r[2]}: |dW| {r[3]:.3g}, bound {r[4]:.3g} (ratio {r[0]:.3g}, relative {r[1]:.3g})")
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--keep")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fails = []
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = args.keep or tmp_
        os.makedirs(tmp, exist_ok=True)
        model = parity_torch.build_r50(3, args.size, args.size)
        draw_bn(model, 3)
        init_sd = {k: v.clone() for k, v in model.state_dict().items()}
        n_tv = sum(p.numel() for p in model.parameters() if p.requires_grad)
        for precond in (True, False):
            out, log = run_c(tmp, model, args.size, args.steps, precond)
            model.load_state_dict(init_sd)
            params, cname, scale, history = replay(model, out, args.steps)
            label = "mrcnn" if precond else "mrcnn --no-precond (the old fold)"
            if precond:
                c_names = {c for c in out["init"]}
                ok = c_names == set(cname.values())
                print(f"  trainable: mrcnn {len(c_names)} tensors, torchvision {len(cname)} ({n_tv} parameters)"
                      f"{'' if ok else ': the sets differ: ' + str(sorted(c_names ^ set(cname.values()))[:6])}")
                if not ok:
                    fails.append("trainable set")
                # the trainer's first lines say what trains (mrcnn_sgd_log): torchvision's count
                m = re.search(r"optimizer: SGD, momentum [0-9.]+; (\d+) trainable parameters", log)
                groups = re.findall(r"optimizer: group (\w+) +(\d+) parameters .*: lr ([0-9.e-]+) .*weight_decay "
                                    r"([0-9.e-]+)", log)
                print(f"  log: {m.group(1) if m else '?'} trainable parameters; groups "
                      + ", ".join(f"{g[0]} {g[1]} (lr {g[2]}, decay {g[3]})" for g in groups))
                if not m or int(m.group(1)) != n_tv or sum(int(g[1]) for g in groups) != n_tv:
                    fails.append("the logged trainable count is not torchvision's")
                s_all = np.concatenate(list(scale.values()))
                print(f"  folded trainable convs: {len(scale)}, s in [{s_all.min():.3g}, {s_all.max():.3g}]")
                if len(scale) == 0 or s_all.min() > S_RANGE[0] * 1.001 or s_all.max() < S_RANGE[1] * 0.999:
                    fails.append("s range")
                coefs = [h["coef"] for h in history]
                c_coefs = [float(np.array(out[f"step/{k}/grad_scale"])[0]) for k in range(1, args.steps + 1)]
                print("  clip factor per step: torchvision " + ", ".join(f"{c:.6g}" for c in coefs)
                      + "; mrcnn " + ", ".join(f"{c:.6g}" for c in c_coefs))
                if not any(c < 1.0 for c in coefs):
                    fails.append("clipping never binds")
                if any(abs(a - b) > 8 * U * max(a, b) for a, b in zip(coefs, c_coefs)):
                    fails.append("clip factors differ")
            worst = compare(label, out, params, cname, scale, history, sorted({1, args.steps}))
            bad = any(w > 1.0 for w in worst.values())
            if precond and bad:
                fails.append("mrcnn differs from torchvision beyond the rounding bound")
            if not precond and not bad:
                fails.append("--no-precond stays within the bound: the test cannot tell the old fold")
            out.close()
    print("FAIL: " + "; ".join(fails) if fails else "PASS")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
