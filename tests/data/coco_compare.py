"""Compares a COCO instances JSON (the converter's input) with `mrcnn-prep export`'s
output, through pycocotools: the same images, annotations, categories, and masks
whose compressed RLE is identical to pycocotools' annToRLE (polygons and
uncompressed RLE included). Exit 1 with the first differences listed."""
import json
import sys

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO


def main(src_path, exp_path, skip_ids_path=None):
    src, exp = COCO(src_path), COCO(exp_path)
    errors = []
    # Images and annotations that the converter must have dropped (bad input).
    drop_imgs, drop_anns = set(), set()
    if skip_ids_path:
        skip = json.load(open(skip_ids_path))
        drop_imgs, drop_anns = set(skip["images"]), set(skip["annotations"])
    want_imgs = {i for i in src.imgs if i not in drop_imgs}
    if set(exp.imgs) != want_imgs:
        errors.append(f"image ids differ: missing {sorted(want_imgs - set(exp.imgs))[:5]} extra {sorted(set(exp.imgs) - want_imgs)[:5]}")
    for i in want_imgs & set(exp.imgs):
        a, b = src.imgs[i], exp.imgs[i]
        for k in ("file_name", "height", "width"):
            if a[k] != b[k]:
                errors.append(f"image {i}: {k} {a[k]!r} != {b[k]!r}")
    if sorted(src.cats) != sorted(exp.cats):
        errors.append(f"category ids differ: {sorted(src.cats)} vs {sorted(exp.cats)}")
    for c in src.cats:
        if c in exp.cats and src.cats[c]["name"] != exp.cats[c]["name"]:
            errors.append(f"category {c}: name differs")
    want_anns = {a for a in src.anns if a not in drop_anns}
    if set(exp.anns) != want_anns:
        errors.append(f"annotation ids differ: missing {sorted(want_anns - set(exp.anns))[:5]} extra {sorted(set(exp.anns) - want_anns)[:5]}")
    checked = 0
    for aid in want_anns & set(exp.anns):
        a, b = src.anns[aid], exp.anns[aid]
        for k in ("image_id", "category_id"):
            if a[k] != b[k]:
                errors.append(f"annotation {aid}: {k} {a[k]} != {b[k]}")
        if int(a.get("iscrowd", 0)) != b["iscrowd"]:
            errors.append(f"annotation {aid}: iscrowd differs")
        if not np.allclose(np.float32(a["bbox"]), b["bbox"], rtol=0, atol=0):
            errors.append(f"annotation {aid}: bbox {a['bbox']} != {b['bbox']}")
        rs, re_ = src.annToRLE(a), exp.annToRLE(b)
        cs = rs["counts"].decode() if isinstance(rs["counts"], bytes) else rs["counts"]
        ce = re_["counts"] if isinstance(re_["counts"], str) else re_["counts"].decode()
        if cs != ce or list(rs["size"]) != list(re_["size"]):
            errors.append(f"annotation {aid}: RLE differs from pycocotools' annToRLE")
        if not np.array_equal(src.annToMask(a), exp.annToMask(b)):
            errors.append(f"annotation {aid}: decoded masks differ")
        area = a["area"] if "area" in a else float(mask_utils.area(rs))
        if abs(area - b["area"]) > 1e-9 * max(1.0, abs(area)):
            errors.append(f"annotation {aid}: area {area} != {b['area']}")
        checked += 1
    for e in errors[:20]:
        print("DIFF", e)
    print(f"compared {len(want_imgs)} images, {checked} annotation masks: {len(errors)} differences")
    return 1 if errors or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
