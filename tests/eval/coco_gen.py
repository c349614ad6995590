"""Generates a COCO ground truth and result files that exercise COCOeval's corners:
crowd regions (uncompressed RLE), compressed-RLE and multi-polygon gts, images without
annotations, > 100 detections on some images, every area range, categories without
gt (and detections for them), tied scores, int64 ids with gaps, a gt with id 0.
Usage: coco_gen.py OUTDIR [N_IMAGES] [SEED]  -> OUTDIR/gt.json, res_both.json (bbox +
segm), res_segm.json (segm only: areas from masks, boxes from toBbox), res_bbox.json."""
import json
import os
import random
import sys

import numpy as np
from pycocotools import mask as mu


def poly_around(rng, cx, cy, r, w, h, outside=False):
    k = rng.randint(3, 9)
    angles = sorted(rng.uniform(0, 2 * np.pi) for _ in range(k))
    pts = []
    for a in angles:
        rr = r * rng.uniform(0.5, 1.0)
        x, y = cx + rr * np.cos(a), cy + rr * np.sin(a)
        if not outside:
            x, y = min(max(x, 0.0), w - 0.01), min(max(y, 0.0), h - 0.01)
        pts += [round(x, 2), round(y, 2)]
    return pts


def counts_of(m):
    """Uncompressed RLE counts of a 0/1 mask (column-major, starting with zeros)."""
    flat = m.reshape(-1, order='F')
    runs, cur, n = [], 0, 0
    for v in flat:
        if v != cur:
            runs.append(n)
            n, cur = 0, v
        n += 1
    runs.append(n)
    return runs


def main():
    out = sys.argv[1]
    n_img = int(sys.argv[2]) if len(sys.argv) > 2 else 120
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    rng = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    cat_ids = [1, 3, 7, 12, 90, 2 ** 40 + 5]
    absent = {12}  # a category with no gt at all
    cats = [{'id': c, 'name': 'cat%d' % c, 'supercategory': 'thing'} for c in cat_ids]
    images, anns, dets = [], [], []
    ann_id = 900100581904
    for i in range(n_img):
        img_id = 10 ** 11 + rng.randint(0, 10 ** 9) * 7 + i  # large, unordered
        w, h = rng.randint(40, 220), rng.randint(40, 220)
        images.append({'id': img_id, 'width': w, 'height': h, 'file_name': 'img%d.jpg' % i})
        n_gt = 0 if rng.random() < 0.15 else rng.randint(1, 9)
        gts = []
        for _ in range(n_gt):
            cat = rng.choice([c for c in cat_ids if c not in absent])
            scale = rng.choice([4, 12, 30, 60, 100])  # small .. large objects
            cx, cy = rng.uniform(0, w), rng.uniform(0, h)
            r = min(scale, max(w, h) / 2)
            kind = rng.random()
            ann = {'id': ann_id, 'image_id': img_id, 'category_id': cat}
            ann_id += rng.randint(1, 1000)
            if kind < 0.12:  # crowd region, uncompressed RLE
                m = np.zeros((h, w), dtype=np.uint8)
                x0, y0 = int(max(cx - r, 0)), int(max(cy - r, 0))
                m[y0:int(min(cy + r, h)), x0:int(min(cx + r, w))] = 1
                ann['segmentation'] = {'size': [h, w], 'counts': counts_of(m)}
                ann['iscrowd'] = 1
                rle = mu.encode(np.asfortranarray(m))
                shape = [x0, y0, int(min(cx + r, w)), y0, int(min(cx + r, w)), int(min(cy + r, h)), x0, int(min(cy + r, h))]
            elif kind < 0.22:  # compressed RLE gt
                poly = poly_around(rng, cx, cy, r, w, h)
                rle = mu.frPyObjects([poly], h, w)[0]
                ann['segmentation'] = {'size': [h, w], 'counts': rle['counts'].decode()}
                ann['iscrowd'] = 0
                shape = poly
            else:  # one or two polygons, sometimes reaching outside the image
                polys = [poly_around(rng, cx, cy, r, w, h, outside=rng.random() < 0.2)]
                if rng.random() < 0.2:
                    polys.append(poly_around(rng, rng.uniform(0, w), rng.uniform(0, h), r / 2, w, h))
                rle = mu.merge(mu.frPyObjects(polys, h, w))
                ann['segmentation'] = polys
                shape = polys[0]
                ann['iscrowd'] = 0
            ann['area'] = float(mu.area(rle)) if rng.random() < 0.9 else float(rng.choice([31 * 31, 32 * 32, 96 * 96, 5.5]))
            ann['bbox'] = [float(v) for v in mu.toBbox(rle)]
            if ann['bbox'][2] == 0:
                continue
            anns.append(ann)
            gts.append((ann, shape))
        # detections: jittered copies of gts, false positives, unknown-to-gt categories
        n_det = rng.choice([0, 3, 10, 40, 150]) if rng.random() < 0.3 else rng.randint(0, 25)
        for j in range(n_det):
            if gts and rng.random() < 0.6:
                g, shape = rng.choice(gts)
                cat = g['category_id'] if rng.random() < 0.9 else rng.choice(cat_ids)
                x, y, bw, bh = g['bbox']
                jit = rng.choice([0.0, 0.05, 0.15, 0.3, 0.6])
                bx = x + rng.uniform(-jit, jit) * bw
                by = y + rng.uniform(-jit, jit) * bh
                bw2 = max(1.0, bw * (1 + rng.uniform(-jit, jit)))
                bh2 = max(1.0, bh * (1 + rng.uniform(-jit, jit)))
                # the mask: the gt outline moved and stretched like the box
                sx, sy = bw2 / max(bw, 1e-3), bh2 / max(bh, 1e-3)
                poly = [round(bx + (v - x) * sx if q % 2 == 0 else by + (v - y) * sy, 2) for q, v in enumerate(shape)]
            else:
                cat = rng.choice(cat_ids)
                bw2, bh2 = rng.uniform(2, w / 2), rng.uniform(2, h / 2)
                bx, by = rng.uniform(0, w - bw2), rng.uniform(0, h - bh2)
                poly = None
            box = [round(bx, 2), round(by, 2), round(bw2, 2), round(bh2, 2)]
            fp = poly is None
            if fp:
                poly = poly_around(rng, box[0] + box[2] / 2, box[1] + box[3] / 2, max(box[2], box[3]) / 2, w, h)
            rle = mu.frPyObjects([poly], h, w)[0]
            score = rng.random() if fp or rng.random() < 0.3 else 0.4 + 0.6 * rng.random()
            if rng.random() < 0.5:
                score = round(score, 2)  # many ties
            dets.append({'image_id': img_id, 'category_id': cat, 'score': score, 'bbox': box,
                         'segmentation': {'size': [h, w], 'counts': rle['counts'].decode()}})
    anns[len(anns) // 2]['id'] = 0  # pycocotools reads a match to gt id 0 as no match
    rng.shuffle(images)
    rng.shuffle(dets)
    gt = {'info': {'description': 'mrcnn eval test'}, 'licenses': [], 'images': images,
          'annotations': anns, 'categories': cats}
    with open(os.path.join(out, 'gt.json'), 'w') as f:
        json.dump(gt, f)
    with open(os.path.join(out, 'res_both.json'), 'w') as f:
        json.dump(dets, f)
    with open(os.path.join(out, 'res_segm.json'), 'w') as f:
        json.dump([{k: v for k, v in d.items() if k != 'bbox'} for d in dets], f)
    with open(os.path.join(out, 'res_bbox.json'), 'w') as f:
        json.dump([{k: v for k, v in d.items() if k != 'segmentation'} for d in dets], f)
    print('generated %d images, %d annotations, %d detections in %s' % (len(images), len(anns), len(dets), out))


if __name__ == '__main__':
    main()
