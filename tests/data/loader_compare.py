"""Compares the loader's view of a shard set (prog_loader reproduce: loader.json and
img_<id>.rgb) with the source COCO JSON through pycocotools: every image once, every
annotation in order with its category, class index, crowd flag, box and mask; and the
decoded pixels against PIL. Exit 1 on any difference."""
import json
import os
import sys

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

src_path, outdir, img_dir = sys.argv[1:4]
src = COCO(src_path)
got = json.load(open(os.path.join(outdir, "loader.json")))
cat_ids = sorted(src.cats)
errors = []
ids = [g["image_id"] for g in got]
if sorted(ids) != sorted(src.imgs) or len(set(ids)) != len(ids):
    errors.append("the loader's images are not the source's, each once")
n_anns = 0
for g in got:
    iid = g["image_id"]
    im = src.imgs[iid]
    anns = src.loadAnns(src.getAnnIds(imgIds=iid))
    if len(anns) != len(g["anns"]):
        errors.append(f"image {iid}: {len(g['anns'])} annotations, source has {len(anns)}")
        continue
    for a, b in zip(anns, g["anns"]):
        n_anns += 1
        x, y, w, h = np.float32(a["bbox"])
        if b["category_id"] != a["category_id"] or b["class"] != cat_ids.index(a["category_id"]):
            errors.append(f"annotation {a['id']}: category/class differ")
        if b["iscrowd"] != a.get("iscrowd", 0):
            errors.append(f"annotation {a['id']}: iscrowd differs")
        if not np.allclose(b["box"], [x, y, x + w, y + h], atol=1e-3):
            errors.append(f"annotation {a['id']}: box {b['box']} != {[x, y, x + w, y + h]}")
        mine = mask_utils.decode({"size": [im["height"], im["width"]], "counts": b["counts"]})
        if not np.array_equal(mine, src.annToMask(a)):
            errors.append(f"annotation {a['id']}: mask differs from pycocotools' annToMask")
checked = 0
for f in os.listdir(outdir):
    if f.startswith("img_") and f.endswith(".rgb"):
        iid = int(f[4:-4])
        im = src.imgs[iid]
        ref = np.asarray(Image.open(os.path.join(img_dir, im["file_name"])).convert("RGB")).astype(int)
        mine = np.fromfile(os.path.join(outdir, f), dtype=np.uint8).reshape(im["height"], im["width"], 3).astype(int)
        d = np.abs(ref - mine)
        if d.max() > 2 or d.mean() > 0.5:
            errors.append(f"image {iid}: pixels differ from PIL (max {d.max()}, mean {d.mean():.3f})")
        checked += 1
if checked == 0:
    errors.append("no pixels to compare")
for e in errors[:20]:
    print("DIFF", e)
print(f"loader vs source: {len(got)} images, {n_anns} annotations, {checked} images' pixels: {len(errors)} differences")
sys.exit(1 if errors else 0)
