"""COCO evaluation benchmark: our C `mrcnn eval` against pycocotools' COCOeval in the
same run, on a generated set of N images x 100 detections (bbox and compressed-RLE
masks). Prints seconds for each, the speedup, and checks the 12 stats are identical.
Usage: eval_bench.py MRCNN_BIN DATA_DIR [N_IMAGES] [THREADS]"""
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time

import numpy as np
from pycocotools import mask as mu
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

N_CATS = 20


def polygon(rng, cx, cy, r, w, h):
    k = rng.randint(5, 12)
    ang = np.sort(np.array([rng.uniform(0, 2 * np.pi) for _ in range(k)]))
    rad = np.array([r * rng.uniform(0.6, 1.0) for _ in range(k)])
    xs = np.clip(cx + rad * np.cos(ang), 0, w - 0.01)
    ys = np.clip(cy + rad * np.sin(ang), 0, h - 0.01)
    return [round(float(v), 2) for p in zip(xs, ys) for v in p]


def generate(out, n_img, seed=5):
    rng = random.Random(seed)
    images, anns, dets = [], [], []
    aid = 1
    for i in range(n_img):
        img_id = 100000 + 3 * i
        w, h = rng.randint(400, 640), rng.randint(300, 480)
        images.append({'id': img_id, 'width': w, 'height': h, 'file_name': '%d.jpg' % img_id})
        gts = []
        for _ in range(rng.randint(0, 12)):
            r = rng.choice([8, 20, 45, 90, 150])
            cx, cy = rng.uniform(0, w), rng.uniform(0, h)
            poly = polygon(rng, cx, cy, r, w, h)
            rle = mu.frPyObjects([poly], h, w)[0]
            bb = [float(v) for v in mu.toBbox(rle)]
            if bb[2] == 0 or bb[3] == 0:
                continue
            crowd = 1 if rng.random() < 0.03 else 0
            anns.append({'id': aid, 'image_id': img_id, 'category_id': rng.randint(1, N_CATS), 'iscrowd': crowd,
                         'segmentation': [poly] if not crowd else {'size': [h, w], 'counts': rle['counts'].decode()},
                         'area': float(mu.area(rle)), 'bbox': bb})
            gts.append((anns[-1], poly))
            aid += 1
        for j in range(100):
            if gts and j < 3 * len(gts):
                g, poly = gts[j % len(gts)]
                jit = rng.choice([0.02, 0.05, 0.1, 0.2, 0.4])
                dx, dy = rng.uniform(-jit, jit) * g['bbox'][2], rng.uniform(-jit, jit) * g['bbox'][3]
                p = [round(min(max(v + (dx if q % 2 == 0 else dy), 0), (w if q % 2 == 0 else h) - 0.01), 2)
                     for q, v in enumerate(poly)]
                cat = g['category_id'] if rng.random() < 0.9 else rng.randint(1, N_CATS)
                score = 0.3 + 0.7 * rng.random()
            else:
                r = rng.choice([8, 20, 45, 90])
                p = polygon(rng, rng.uniform(0, w), rng.uniform(0, h), r, w, h)
                cat = rng.randint(1, N_CATS)
                score = 0.6 * rng.random()
            rle = mu.frPyObjects([p], h, w)[0]
            dets.append({'image_id': img_id, 'category_id': cat, 'score': round(score, 3),
                         'bbox': [round(float(v), 2) for v in mu.toBbox(rle)],
                         'segmentation': {'size': [h, w], 'counts': rle['counts'].decode()}})
    cats = [{'id': c, 'name': 'class%d' % c} for c in range(1, N_CATS + 1)]
    with open(os.path.join(out, 'gt.json'), 'w') as f:
        json.dump({'images': images, 'annotations': anns, 'categories': cats}, f)
    with open(os.path.join(out, 'dets.json'), 'w') as f:
        json.dump(dets, f)
    return len(anns), len(dets)


def run_pycocotools(gt_path, res_path, iou_type):
    t0 = time.time()
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(gt_path)
        dt = gt.loadRes(res_path)
        E = COCOeval(gt, dt, iou_type)
        E.evaluate()
        E.accumulate()
        E.summarize()
    return time.time() - t0, np.array(E.stats)


def main():
    mrcnn, data = sys.argv[1], sys.argv[2]
    n_img = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
    threads = sys.argv[4] if len(sys.argv) > 4 else str(os.cpu_count())
    os.makedirs(data, exist_ok=True)
    stamp = os.path.join(data, 'n_images')
    if not (os.path.exists(stamp) and open(stamp).read() == str(n_img)):
        t0 = time.time()
        na, nd = generate(data, n_img)
        open(stamp, 'w').write(str(n_img))
        print('generated %d images, %d gt, %d detections in %.1fs' % (n_img, na, nd, time.time() - t0))
    gt, res = os.path.join(data, 'gt.json'), os.path.join(data, 'dets.json')
    print('results file: %.1f MB; threads for mrcnn eval: %s' % (os.path.getsize(res) / 1e6, threads))
    print('%-5s %14s %14s %9s   %s' % ('type', 'pycocotools s', 'mrcnn eval s', 'speedup', 'stats'))
    bad = 0
    for iou_type in ('bbox', 'segm'):
        t_py, want = run_pycocotools(gt, res, iou_type)
        sj = os.path.join(data, 'stats_%s.json' % iou_type)
        t0 = time.time()
        r = subprocess.run([mrcnn, 'eval', '--gt', gt, '--results', res, '--iou-type', iou_type, '--json', sj,
                            '--threads', threads], capture_output=True, text=True)
        t_c = time.time() - t0
        if r.returncode != 0:
            print('mrcnn eval failed: %s' % r.stderr[-2000:])
            return 1
        got = np.array(json.load(open(sj))[iou_type]['stats'])
        same = (got == want).all()
        bad += not same
        print('%-5s %14.2f %14.2f %8.1fx   %s (AP %.4f, max|d| %.2g)' % (
            iou_type, t_py, t_c, t_py / t_c, 'identical' if same else 'DIFFERENT', want[0], np.max(np.abs(got - want))))
        for line in r.stderr.splitlines():
            if 'evaluation:' in line or line.startswith('loaded'):
                print('      mrcnn: ' + line)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
