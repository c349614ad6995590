"""Builds COCO inputs for the converter tests from a `mrcnn-prep shapes` split:
  extra.json       valid, with what shapes lacks: multi-polygon annotations, crowd
                   uncompressed RLE, missing area, ids above 2^32, a PNG image
  mixed.json       every kind of bad input at once (+ skip.json: the ids that must go)
  strict_<k>.json  exactly one bad input of kind k each
  broken_*.json    malformed JSON
Usage: make_cases.py SHAPES_JSON IMAGE_DIR OUT_DIR"""
import copy
import json
import os
import shutil
import sys

src_json, img_dir, out = sys.argv[1:4]
d = json.load(open(src_json))
os.makedirs(out, exist_ok=True)
imgs = d["images"]
first = imgs[0]
H, W = first["height"], first["width"]


def dump(name, data):
    with open(os.path.join(out, name), "w") as f:
        json.dump(data, f)


# Extra files in the image folder: a truncated JPEG, garbage after a JPEG marker, a
# file outside the folder that a "../" name would reach, a copy for the image without
# annotations.
raw = open(os.path.join(img_dir, first["file_name"]), "rb").read()
open(os.path.join(img_dir, "truncated.jpg"), "wb").write(raw[: len(raw) * 6 // 10])
open(os.path.join(img_dir, "garbage.jpg"), "wb").write(b"\xff\xd8\xff" + bytes(range(256)) * 8)
shutil.copy(os.path.join(img_dir, first["file_name"]), os.path.join(img_dir, "lonely.jpg"))
shutil.copy(os.path.join(img_dir, first["file_name"]), os.path.join(img_dir, "..", "escape.jpg"))

next_img = [9_000_000_001]
next_ann = [7_000_000_000_001]


def new_image(name):
    im = {"id": next_img[0], "file_name": name, "height": H, "width": W}
    next_img[0] += 7
    return im


def new_ann(image_id, **kw):
    a = {"id": next_ann[0], "image_id": image_id, "category_id": d["categories"][0]["id"], "iscrowd": 0,
         "bbox": [10, 10, 20, 20], "area": 400.0, "segmentation": [[10, 10, 30, 10, 30, 30, 10, 30]]}
    a.update(kw)
    next_ann[0] += 1
    return a


# ---- extra.json: valid ----
extra = copy.deepcopy(d)
iid = first["id"]
extra["annotations"].append(new_ann(iid, segmentation=[[5, 5, 40, 6, 22, 35], [60.5, 60.25, 90, 61, 75.75, 99.5, 61, 80]],
                                    bbox=[5, 5, 85, 94.5]))
counts = [W * 3 + 5, 12, H - 12, 30, H * W - (W * 3 + 5) - 12 - (H - 12) - 30]
extra["annotations"].append(new_ann(iid, iscrowd=1, segmentation={"size": [H, W], "counts": counts}, bbox=[3, 5, 2, 30]))
a = new_ann(iid)
del a["area"]
extra["annotations"].append(a)
# A PNG image (the shards keep the bytes as given; the loader decodes PNG too).
from PIL import Image
Image.open(os.path.join(img_dir, first["file_name"])).save(os.path.join(img_dir, "as_png.png"))
png = new_image("as_png.png")
extra["images"].append(png)
extra["annotations"].append(new_ann(png["id"]))
dump("extra.json", extra)

# ---- bad inputs ----
kinds = {}
cat0 = d["categories"][0]["id"]
unknown_cat = max(c["id"] for c in d["categories"]) + 100
bad_imgs = {
    "missing": new_image("does_not_exist.jpg"),
    "truncated": new_image("truncated.jpg"),
    "corrupt": new_image("garbage.jpg"),
    "escape": new_image("../escape.jpg"),
}
lonely = new_image("lonely.jpg")
bad_anns = {
    "unknown_image": new_ann(123456789),
    "unknown_category": new_ann(iid, category_id=unknown_cat),
    "zero_box": new_ann(iid, bbox=[4, 4, 0, 10]),
    "negative_box": new_ann(iid, bbox=[4, 4, 10, -3]),
    "short_polygon": new_ann(iid, segmentation=[[1, 1, 20, 20]]),
}
of_skipped = {k: new_ann(im["id"]) for k, im in bad_imgs.items()}

mixed = copy.deepcopy(d)
mixed["images"] += list(bad_imgs.values()) + [lonely]
mixed["annotations"] += list(bad_anns.values()) + list(of_skipped.values())
dump("mixed.json", mixed)
dump("skip.json", {"images": [im["id"] for im in bad_imgs.values()],
                   "annotations": [a["id"] for a in list(bad_anns.values()) + list(of_skipped.values())]})

for k, im in bad_imgs.items():
    case = copy.deepcopy(d)
    case["images"].append(im)
    case["annotations"].append(of_skipped[k])
    dump(f"strict_{k}.json", case)
for k, a in bad_anns.items():
    case = copy.deepcopy(d)
    case["annotations"].append(a)
    dump(f"strict_{k}.json", case)
case = copy.deepcopy(d)
case["images"].append(lonely)
dump("strict_no_annotations.json", case)

# ---- malformed JSON ----
text = json.dumps(d, indent=1)
open(os.path.join(out, "broken_truncated.json"), "w").write(text[: len(text) // 2])
k = text.index('"bbox"', len(text) // 3)
open(os.path.join(out, "broken_syntax.json"), "w").write(text[:k] + "," + text[k:])
print("cases written to", out)
