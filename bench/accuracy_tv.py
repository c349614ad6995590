#!/usr/bin/python3
"""torchvision side of bench/accuracy.sh: builds the initial weights both sides start
from, trains torchvision's Mask R-CNN with the same schedule as `mrcnn train`, and
writes a COCO results file for the evaluator both sides share (`mrcnn eval --gt`).

Run with Debian's Python (torch 1.13 / torchvision 0.14): /usr/bin/python3.

    accuracy_tv.py init-imagenet --out r50.pth --images DIR --json X.json --seed S --size N
    accuracy_tv.py init --model tiny|r50 --seeds "S ..." --classes K --out init_s{seed}.pth
                        [--h5 init_s{seed}.h5] [--imagenet r50.pth]
    accuracy_tv.py train --model tiny|r50 --init init.pth --train-json X --train-dir D
                         --val-json Y --val-dir E --out DIR --seed S [schedule options]
    accuracy_tv.py infer --model tiny|r50 --weights W.pth --classes K --val-json Y --val-dir E
                         --out results.json [--size N --max-size N --kw ...]

Training follows torchvision's references/detection (train.py + engine.py) where it
has a rule, with the schedule expressed in iterations as `mrcnn train` does:
- SGD(momentum, weight_decay on every trainable parameter, biases included: the
  reference's default, equal to SOLVER.WEIGHT_DECAY_BIAS = WEIGHT_DECAY);
- linear warmup from WARMUP_FACTOR over WARMUP_ITERS, then x GAMMA at each of STEPS
  (iteration-based here, as detectron2's WarmupMultiStepLR; the reference steps per
  epoch, which with a few hundred images is the same thing on a coarser grid);
- the loss is the sum of the five loss terms; gradient clipping by global norm when
  --clip > 0 (the reference has none; configs/tiny.yaml clips, so both sides do);
- crowd annotations are dropped from the targets (ConvertCocoPolysToMask does);
- images without annotations are KEPT (the reference removes them from train2017;
  `mrcnn train` keeps them, and both sides must see the same data);
- random horizontal flip p = 0.5; each epoch a new permutation, the remainder dropped.
Images are resized (short side, capped by the long side: detectron2's rule, as the
mrcnn loader does) and normalized here with the same mean/std; the model's own
transform only pads to a multiple of 32 (net_tv_models.no_resize).
Masks are read from `mrcnn-prep export` JSON (compressed RLE only), decoded here.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model"))
import net_tv_models as tvm  # noqa: E402

MEAN = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1)
STD = torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1)


# ---- COCO RLE (compressed strings), as pycocotools' rleToString / rleFrString ----
def rle_string_to_counts(s):
    cnts, p = [], 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            c = ord(s[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(cnts) > 2:
            x += cnts[-2]
        cnts.append(x)
    return cnts


def counts_to_rle_string(cnts):
    out = []
    for i, x in enumerate(cnts):
        x = int(x)
        if i > 2:
            x -= int(cnts[i - 2])
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = (x != -1) if (c & 0x10) else (x != 0)
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


def rle_decode(seg):
    h, w = seg["size"]
    counts = seg["counts"]
    if isinstance(counts, str):
        counts = rle_string_to_counts(counts)
    flat = np.zeros(h * w, dtype=np.uint8)
    pos, val = 0, 0
    for c in counts:
        if val:
            flat[pos:pos + c] = 1
        pos += c
        val ^= 1
    return flat.reshape(w, h).T  # column-major


def rle_encode(mask):
    """(H, W) bool/uint8 -> {"size": [H, W], "counts": str}"""
    h, w = mask.shape
    flat = np.ascontiguousarray(mask.T).reshape(-1).astype(np.int8)
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat.size and flat[0] == 1:
        runs = [0] + runs
    return {"size": [h, w], "counts": counts_to_rle_string(runs)}


# ---- data ----
class CocoSet:
    def __init__(self, json_path, img_dir):
        with open(json_path) as f:
            d = json.load(f)
        self.cat_ids = sorted(c["id"] for c in d["categories"])
        self.label_of = {c: i + 1 for i, c in enumerate(self.cat_ids)}
        self.images = d["images"]  # JSON order (the shard order)
        self.anns = {im["id"]: [] for im in self.images}
        for a in d.get("annotations", []):
            self.anns[a["image_id"]].append(a)
        self.img_dir = img_dir

    def __len__(self):
        return len(self.images)

    def load(self, i, size, max_size, flip, targets=True):
        im = self.images[i]
        img = np.asarray(Image.open(os.path.join(self.img_dir, im["file_name"])).convert("RGB"))
        h, w = img.shape[:2]
        x = torch.from_numpy(img.copy()).permute(2, 0, 1).float()
        boxes, labels, masks = [], [], []
        for a in self.anns[im["id"]] if targets else []:
            if a.get("iscrowd", 0):
                continue
            bx, by, bw, bh = a["bbox"]
            boxes.append([bx, by, bx + bw, by + bh])
            labels.append(self.label_of[a["category_id"]])
            masks.append(rle_decode(a["segmentation"]))
        boxes = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
        m = torch.from_numpy(np.stack(masks)) if masks else torch.zeros((0, h, w), dtype=torch.uint8)
        # detectron2's ResizeShortestEdge rule (the mrcnn loader's): scale = size / short,
        # capped so that the long side <= max_size; new size rounded.
        scale = size / min(h, w)
        if max(h, w) * scale > max_size:
            scale = max_size / max(h, w)
        nh, nw = int(h * scale + 0.5), int(w * scale + 0.5)
        if (nh, nw) != (h, w):
            x = F.interpolate(x[None], size=(nh, nw), mode="bilinear", align_corners=False)[0]
            if m.shape[0]:
                m = F.interpolate(m[None].float(), size=(nh, nw), mode="nearest")[0].byte()
            else:
                m = torch.zeros((0, nh, nw), dtype=torch.uint8)
            boxes = boxes * torch.tensor([nw / w, nh / h, nw / w, nh / h])
        if flip:
            x = x.flip(-1)
            m = m.flip(-1)
            boxes = torch.stack([nw - boxes[:, 2], boxes[:, 1], nw - boxes[:, 0], boxes[:, 3]], 1)
        x = (x - MEAN) / STD
        return x, {"boxes": boxes, "labels": torch.tensor(labels, dtype=torch.int64), "masks": m}, im["id"]


# ---- models ----
def parse_kw(text):
    """"a=1,b=2" -> {"a": 1, "b": 2}: MaskRCNN keyword arguments (ints or floats)."""
    kw = {}
    for item in filter(None, (text or "").split(",")):
        k, v = item.split("=")
        kw[k.strip()] = float(v) if "." in v else int(v)
    return kw


def build(model, seed, classes, size, det_per_img, extra_kw=None):
    kw = build_kw(model, det_per_img)
    kw.update(extra_kw or {})
    if model == "tiny":
        tvm.TINY = dict(tvm.TINY, num_classes=classes + 1)
        return tvm.build_tiny(seed, size, size, **kw)
    return tvm.build_r50(seed, size, size, num_classes=classes + 1, **kw)


def build_kw(model, det_per_img):
    if model == "tiny":
        # configs/tiny.yaml's RPN/ROI sizes
        return dict(rpn_pre_nms_top_n_train=200, rpn_pre_nms_top_n_test=100, rpn_post_nms_top_n_train=100,
                    rpn_post_nms_top_n_test=50, rpn_batch_size_per_image=64, box_batch_size_per_image=64,
                    box_detections_per_img=det_per_img)
    # configs/r50_fpn_1x.yaml: detectron2 defaults (RPN 2000/1000 per image, 256/512 samples)
    return dict(rpn_pre_nms_top_n_train=2000, rpn_pre_nms_top_n_test=1000, rpn_post_nms_top_n_train=2000,
                rpn_post_nms_top_n_test=1000, box_detections_per_img=det_per_img)


def cmd_init_imagenet(a):
    """A stand-in for ImageNet weights (nothing can be downloaded here): a seeded
    torchvision resnet50 whose BN statistics are measured on the training images, so
    that the frozen BN the detector folds in is not the identity."""
    import torchvision
    torch.manual_seed(a.seed)
    net = torchvision.models.resnet50(weights=None)
    for mod in net.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.momentum = None  # cumulative average
            mod.reset_running_stats()
            # non-trivial affine, as a trained network has
            with torch.no_grad():
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    ds = CocoSet(a.json, a.images)
    net.train()
    with torch.no_grad():
        for b in range(a.batches):
            xs = [ds.load((b * 4 + j) % len(ds), a.size, a.size, False)[0] for j in range(4)]
            net(torch.stack(xs))
    torch.save(net.state_dict(), a.out)
    print(f"init-imagenet: resnet50 seed {a.seed}, BN statistics from {a.batches * 4} images -> {a.out}")
    import_h5(a.out, a.h5)


def import_h5(pth, h5):
    """data_prep/weights.py import in this process (one torch start-up less per file)."""
    if not h5:
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data_prep"))
    import weights
    weights.import_state_dict(weights.load_state_dict(pth), h5)
    print(f"  imported -> {h5}")


def cmd_init(a):
    """One initial model per seed (--seed S, or --seeds "1 2 3" with {seed} in --out/--h5)."""
    for seed in ([int(v) for v in a.seeds.split()] if a.seeds else [a.seed]):
        out = a.out.format(seed=seed)
        model = build(a.model, seed, a.classes, a.size, 100)
        if a.imagenet:
            sd = torch.load(a.imagenet, map_location="cpu")
            sd = {k: v for k, v in sd.items() if not k.startswith("fc.")}
            missing, unexpected = model.backbone.body.load_state_dict(sd, strict=False)
            # FrozenBatchNorm2d has no num_batches_tracked; the rest must match
            assert not [k for k in missing], missing
            assert all(k.endswith("num_batches_tracked") for k in unexpected), unexpected
        torch.save(model.state_dict(), out)
        print(f"init: {a.model} seed {seed}{' + ' + a.imagenet if a.imagenet else ''} -> {out}")
        import_h5(out, a.h5.format(seed=seed) if a.h5 else None)


def train_bn_bias(model, name):
    """mrcnn's semantics for a frozen BN under a trainable conv: the conv and its BN are
    one folded conv whose bias trained (before the fold froze it). Makes each such
    FrozenBatchNorm2d's bias a trainable parameter, for an A/B check of that difference."""
    from torchvision.ops.misc import FrozenBatchNorm2d
    frozen = ("conv1", "bn1", "layer1") if name == "r50" else ()
    n = 0
    for mname, mod in model.backbone.body.named_modules():
        if isinstance(mod, FrozenBatchNorm2d) and not mname.startswith(frozen):
            b = mod.bias.detach().clone()
            del mod._buffers["bias"]
            mod.bias = torch.nn.Parameter(b)
            n += b.numel()
    return n


def lr_at(it, a):
    warm = 1.0
    if it < a.warmup_iters:
        al = it / a.warmup_iters
        warm = a.warmup_factor * (1 - al) + al
    decay = a.gamma ** sum(1 for s in a.steps if it >= s)
    return a.lr * warm * decay


def cmd_train(a):
    torch.set_num_threads(a.threads)
    model = build(a.model, a.seed, a.classes, a.size, a.det_per_img, parse_kw(a.kw))
    if a.bn_bias_trainable:
        print(f"A/B: {train_bn_bias(model, a.model)} frozen-BN bias values made trainable", flush=True)
    model.load_state_dict(torch.load(a.init, map_location="cpu"))
    params = [p for p in model.parameters() if p.requires_grad]
    print(f"torchvision {a.model}: {sum(p.numel() for p in model.parameters())} parameters "
          f"({sum(p.numel() for p in params)} trainable)", flush=True)
    opt = torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, weight_decay=a.wd)
    ds = CocoSet(a.train_json, a.train_dir)
    os.makedirs(a.out, exist_ok=True)
    g = torch.Generator().manual_seed(a.seed)
    steps_per_epoch = len(ds) // a.batch
    log = open(os.path.join(a.out, "metrics.jsonl"), "w")
    model.train()
    t0 = time.time()
    it, epoch = 0, 0
    window = []
    while it < a.iters:
        perm = torch.randperm(len(ds), generator=g).tolist()
        flips = (torch.rand(len(ds), generator=g) < 0.5).tolist()
        for s in range(steps_per_epoch):
            if it >= a.iters:
                break
            idx = perm[s * a.batch:(s + 1) * a.batch]
            xs, ts = [], []
            for i in idx:
                x, t, _ = ds.load(i, a.size, a.max_size, a.flip and flips[i])
                xs.append(x)
                ts.append(t)
            lr = lr_at(it, a)
            for pg in opt.param_groups:
                pg["lr"] = lr
            losses = model(xs, ts)
            loss = sum(losses.values())
            if not math.isfinite(loss.item()):
                print(f"step {it + 1}: non-finite loss, skipped", flush=True)
                opt.zero_grad()
                it += 1
                continue
            opt.zero_grad()
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(params, a.clip)
            opt.step()
            it += 1
            rec = {k: v.item() for k, v in losses.items()}
            rec["total_loss"] = loss.item()
            window.append(rec)
            if it % a.log_period == 0 or it == a.iters:
                avg = {k: sum(r[k] for r in window) / len(window) for k in window[0]}
                avg.update(step=it, lr=lr, time=time.time() - t0)
                log.write(json.dumps(avg) + "\n")
                log.flush()
                print(f"step {it}/{a.iters} loss {avg['total_loss']:.4f} lr {lr:.5f} "
                      f"{(time.time() - t0) / it:.3f} s/it", flush=True)
                window = []
        epoch += 1
    train_s = time.time() - t0
    torch.save(model.state_dict(), os.path.join(a.out, "model_final.pth"))

    t1 = time.time()
    n_det, n_img = infer(model, a, os.path.join(a.out, "coco_instances_results.json"))
    with open(os.path.join(a.out, "timing.json"), "w") as f:
        json.dump({"train_s": train_s, "eval_s": time.time() - t1, "iters": a.iters,
                   "s_per_iter": train_s / max(1, a.iters)}, f)
    print(f"done: {a.iters} iterations in {train_s:.1f} s, {n_det} detections on {n_img} images "
          f"({time.time() - t1:.1f} s)", flush=True)


def infer(model, a, out_path):
    """Inference on the validation images (same resize rule at the test size, no flip)
    -> a COCO results file; returns (detections, images)."""
    model.eval()
    vs = CocoSet(a.val_json, a.val_dir)
    res = []
    with torch.no_grad():
        for i in range(len(vs)):
            x, _, image_id = vs.load(i, a.size, a.max_size, False, targets=False)
            im = vs.images[i]
            out = model([x])[0]
            sy, sx = im["height"] / x.shape[1], im["width"] / x.shape[2]
            masks = out["masks"]
            if masks.shape[0] and (masks.shape[-2], masks.shape[-1]) != (im["height"], im["width"]):
                masks = F.interpolate(masks, size=(im["height"], im["width"]), mode="bilinear", align_corners=False)
            for k in range(out["boxes"].shape[0]):
                x1, y1, x2, y2 = out["boxes"][k].tolist()
                x1, x2, y1, y2 = x1 * sx, x2 * sx, y1 * sy, y2 * sy
                res.append({"image_id": image_id, "category_id": vs.cat_ids[int(out["labels"][k]) - 1],
                            "bbox": [round(x1, 3), round(y1, 3), round(x2 - x1, 3), round(y2 - y1, 3)],
                            "score": round(float(out["scores"][k]), 5),
                            "segmentation": rle_encode((masks[k, 0] > 0.5).numpy())})
    with open(out_path, "w") as f:
        json.dump(res, f)
    return len(res), len(vs)


def cmd_infer(a):
    """torchvision's inference with weights trained elsewhere (mrcnn's, exported by
    data_prep/weights.py export): training isolated from inference."""
    torch.set_num_threads(a.threads)
    model = build(a.model, 1, a.classes, a.size, a.det_per_img, parse_kw(a.kw))
    model.load_state_dict(torch.load(a.weights, map_location="cpu"))
    t0 = time.time()
    n_det, n_img = infer(model, a, a.out)
    print(f"infer: {a.weights}: {n_det} detections on {n_img} images ({time.time() - t0:.1f} s) -> {a.out}",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init-imagenet")
    p.add_argument("--out", required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--size", type=int, default=320)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--h5", help="also import it for mrcnn (data_prep/weights.py import) to this file")
    p = sub.add_parser("init")
    p.add_argument("--model", choices=["tiny", "r50"], required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seeds", help='"1 2 3": one model per seed, {seed} in --out and --h5')
    p.add_argument("--h5", help="also import each for mrcnn (data_prep/weights.py import) to this file")
    p.add_argument("--classes", type=int, required=True)
    p.add_argument("--size", type=int, default=320)
    p.add_argument("--imagenet")
    p.add_argument("--out", required=True)
    p = sub.add_parser("train")
    p.add_argument("--model", choices=["tiny", "r50"], required=True)
    p.add_argument("--init", required=True)
    p.add_argument("--classes", type=int, required=True)
    p.add_argument("--train-json", required=True)
    p.add_argument("--train-dir", required=True)
    p.add_argument("--val-json", required=True)
    p.add_argument("--val-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--wd", type=float, default=1e-4)
    p.add_argument("--steps", type=lambda s: [int(v) for v in s.split(",") if v], default=[])
    p.add_argument("--gamma", type=float, default=0.1)
    p.add_argument("--warmup-iters", type=int, default=10)
    p.add_argument("--warmup-factor", type=float, default=0.001)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--size", type=int, default=320)
    p.add_argument("--max-size", type=int, default=320)
    p.add_argument("--flip", type=int, default=1)
    p.add_argument("--det-per-img", type=int, default=100)
    p.add_argument("--bn-bias-trainable", action="store_true",
                   help="A/B: train the frozen BN biases under trainable convs, as mrcnn's folded convs do")
    p.add_argument("--kw", default="", help="MaskRCNN keyword overrides: rpn_post_nms_top_n_train=500,...")
    p.add_argument("--log-period", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p = sub.add_parser("infer")
    p.add_argument("--model", choices=["tiny", "r50"], required=True)
    p.add_argument("--weights", required=True, help="a torchvision state_dict (.pth)")
    p.add_argument("--classes", type=int, required=True)
    p.add_argument("--val-json", required=True)
    p.add_argument("--val-dir", required=True)
    p.add_argument("--out", required=True, help="COCO results JSON")
    p.add_argument("--size", type=int, default=320)
    p.add_argument("--max-size", type=int, default=320)
    p.add_argument("--det-per-img", type=int, default=100)
    p.add_argument("--kw", default="")
    p.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    {"init-imagenet": cmd_init_imagenet, "init": cmd_init, "train": cmd_train, "infer": cmd_infer}[a.cmd](a)


if __name__ == "__main__":
    main()
