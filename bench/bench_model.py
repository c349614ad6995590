#!/usr/bin/env python3
"""torchvision half of bench_model: builds the tiny and R50-FPN Mask R-CNNs with
fixed random weights, writes them (data_prep/weights.py) and a 256x256 batch for the
C side, and times torchvision's training forward+backward per image on the CPU.

    bench_model.py --dir DIR --threads T [--size 256] [--images 2] [--iters 2]"""
import argparse
import os
import sys
import time

import h5py
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "data_prep"))
sys.path.insert(0, os.path.join(ROOT, "tests/model"))
import net_tv_models  # noqa: E402
import weights  # noqa: E402


def blas_libs():
    torch.ones(64, 64) @ torch.ones(64, 64)
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if any(k in os.path.basename(p) for k in ("blas", "mkl", "lapack", "dnnl")):
                libs.add(os.path.realpath(p))
    return sorted(libs)


def batch(n, s, seed=0):
    rng = np.random.default_rng(seed)
    imgs = rng.standard_normal((n, 3, s, s)).astype(np.float32)
    targets = []
    for _ in range(n):
        boxes, masks = [], []
        for _ in range(4):
            w, h = rng.uniform(32, s / 2, 2)
            x, y = rng.uniform(0, s - w), rng.uniform(0, s - h)
            boxes.append([x, y, x + w, y + h])
            m = np.zeros((s, s), np.uint8)
            m[int(y):int(y + h), int(x):int(x + w)] = 1
            masks.append(m)
        targets.append(dict(boxes=np.array(boxes, np.float32), labels=np.array([1, 2, 3, 1], np.int32),
                            masks=np.stack(masks)))
    return imgs, targets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--images", type=int, default=2)
    ap.add_argument("--iters", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = torch.__config__.show()
    blas = [x.split("=")[1] for x in cfg.replace(",", "\n").split("\n") if "BLAS_INFO" in x]
    print(f"torch {torch.__version__}: {torch.get_num_threads()} threads, BLAS_INFO={blas[0] if blas else '?'}, "
          f"mkldnn {torch.backends.mkldnn.is_available()}, loaded: {' '.join(blas_libs())}")
    imgs, targets = batch(a.images, a.size)
    with h5py.File(os.path.join(a.dir, "input.h5"), "w") as f:
        f["images"] = np.ascontiguousarray(imgs.transpose(0, 2, 3, 1))
        f["image_hw"] = np.array([[a.size, a.size]] * a.images, np.int32)
        for i, t in enumerate(targets):
            for k, v in t.items():
                f[f"gt/{i}/{k}"] = v
    s = a.size
    models = {
        "tiny": net_tv_models.build_tiny(0, s, s, rpn_pre_nms_top_n_train=200, rpn_post_nms_top_n_train=100,
                                         rpn_batch_size_per_image=64, box_batch_size_per_image=64),
        "r50": net_tv_models.build_r50(0, s, s, num_classes=81),
    }
    tl = [dict(boxes=torch.from_numpy(t["boxes"]), labels=torch.from_numpy(t["labels"]).long(),
               masks=torch.from_numpy(t["masks"])) for t in targets]
    xs = [torch.from_numpy(x) for x in imgs]
    for name, model in models.items():
        weights.import_state_dict(model.state_dict(), os.path.join(a.dir, f"{name}.h5"))
        model.train()
        times = []
        for it in range(a.iters + 1):
            t0 = time.perf_counter()
            losses = model(xs, tl)
            model.zero_grad()
            sum(losses.values()).backward()
            times.append(time.perf_counter() - t0)
        best = min(times[1:]) / a.images
        print(f"torchvision {name}: forward+backward {best * 1e3:.1f} ms/image (best of {a.iters} after 1 warm-up)")
        with open(os.path.join(a.dir, f"torch_{name}.txt"), "w") as f:
            f.write(f"{best}\n")


if __name__ == "__main__":
    main()
