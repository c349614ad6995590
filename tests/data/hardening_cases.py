"""COCO inputs for tests/data/test_hardening.sh, built from a `mrcnn-prep shapes` split:
each case file is the split plus one bad thing. Numbers that Python's json cannot write
(1e400, beyond float32, 2^32 + 64) are spliced in as text. Standard library only.
Usage: hardening_cases.py SHAPES_JSON IMAGE_DIR OUT_DIR
Writes OUT_DIR/<case>.json and OUT_DIR/cases.txt: "case kind id field" per line, where
kind is the summary line ("+" for spaces) the converter must count it under (or "fatal")."""
import copy
import json
import os
import shutil
import sys

src, img_dir, out = sys.argv[1:4]
d = json.load(open(src))
os.makedirs(out, exist_ok=True)
im0 = d["images"][0]
H, W = im0["height"], im0["width"]
cat = d["categories"][0]["id"]
lines = []
next_id = [8_000_000_000_001]
next_img = [7_000_001]


def dump(name, data, kind, ident, field):
    text = json.dumps(data)
    text = text.replace('"@', "").replace('@"', "")  # "@1e400@" -> 1e400
    with open(os.path.join(out, name + ".json"), "w") as f:
        f.write(text)
    lines.append(f"{name} {kind} {ident} {field}")


def ann(image_id, **kw):
    a = {"id": next_id[0], "image_id": image_id, "category_id": cat, "iscrowd": 0, "area": 100.0,
         "bbox": [10, 10, 10, 10], "segmentation": [[10, 10, 20, 10, 20, 20, 10, 20]]}
    a.update(kw)
    next_id[0] += 1
    return a


def with_ann(name, kind, field, **kw):
    case = copy.deepcopy(d)
    a = ann(im0["id"], **kw)
    case["annotations"].append(a)
    dump(name, case, kind, a["id"], field)


BAD = "non-finite+or+out-of-range+number"
# 1. boxes and areas: non-finite, beyond float32, far outside the image
with_ann("box_inf_wh", BAD, "bbox", bbox=[10, 10, "@1e400@", "@1e400@"])
with_ann("box_inf_x", BAD, "bbox", bbox=["@1e400@", 10, 10, 10])
with_ann("box_neg_inf_y", BAD, "bbox", bbox=[10, "@-1e400@", 10, 10])
with_ann("box_float_overflow", BAD, "bbox", bbox=[10, 10, "@1e39@", 5])
with_ann("box_far_outside", BAD, "bbox", bbox=["@1e30@", 10, 5, 5])
with_ann("area_inf", BAD, "area", area="@1e400@")
with_ann("area_negative", BAD, "area", area=-5.0)
with_ann("iscrowd_7", BAD, "iscrowd", iscrowd=7)
# 4. polygons whose coordinates overflow the rasterizer
with_ann("poly_1e9", BAD, "segmentation", segmentation=[[10, 10, "@1e9@", 10, 20, 20]])
with_ann("poly_4e8", BAD, "segmentation", segmentation=[[10, 10, 20, 10, 20, "@4e8@"]])
with_ann("poly_inf", BAD, "segmentation", segmentation=[[10, 10, "@1e400@", 10, 20, 20]])
with_ann("poly_neg_1e9", BAD, "segmentation", segmentation=[[10, 10, 20, 10, 20, 20], [5, 5, "@-1e9@", 5, 9, 9]])
# 3. uncompressed RLE whose counts do not add up to h * w
with_ann("rle_short_sum", "missing+or+malformed+segmentation", "segmentation",
         segmentation={"size": [H, W], "counts": [0, H * W + 50]})
# 7. RLE size beyond 32 bits (2^32 + H would truncate to H)
with_ann("rle_size_2p32", "missing+or+malformed+segmentation", "segmentation",
         segmentation={"size": [2 ** 32 + H, W], "counts": [0, H * W]})

# 5. a file name with a NUL byte: the name of another image, then junk
case = copy.deepcopy(d)
nul = {"id": next_img[0], "file_name": im0["file_name"] + "\u0000" + "junk.jpg", "height": H, "width": W}
case["images"].append(nul)
case["annotations"].append(ann(nul["id"]))
dump("name_nul", case, "file_name+with+a+NUL+byte", nul["id"], "file_name")

# 7. image height/width beyond 32 bits: 2^32 + H truncates to H
for f, v in (("height", 2 ** 32 + H), ("width", 2 ** 32 + W), ("height", -(2 ** 32) + H)):
    case = copy.deepcopy(d)
    case["images"][1][f] = v
    dump(f"image_{f}_{'neg' if v < 0 else 'big'}", case, "fatal", case["images"][1]["id"], f)

# 8. symlinks inside --images: out of the folder (a file, through a folder), and inside it
outside = os.path.join(os.path.dirname(os.path.abspath(img_dir)), "outside")
os.makedirs(outside, exist_ok=True)
shutil.copy(os.path.join(img_dir, im0["file_name"]), os.path.join(outside, "x.jpg"))
for name, target in (("link_out.jpg", "../outside/x.jpg"), ("up", ".."), ("alias.jpg", im0["file_name"])):
    p = os.path.join(img_dir, name)
    if os.path.lexists(p):
        os.remove(p)
    os.symlink(target, p)
case = copy.deepcopy(d)
for name in ("link_out.jpg", "up/outside/x.jpg", "alias.jpg"):
    im = {"id": next_img[0], "file_name": name, "height": H, "width": W}
    next_img[0] += 1
    case["images"].append(im)
    case["annotations"].append(ann(im["id"]))
dump("symlinks", case, "file_name+escapes+the+image+folder", 2, "file_name")

# 9. an image without annotations (normal data, also under --strict)
shutil.copy(os.path.join(img_dir, im0["file_name"]), os.path.join(img_dir, "lonely.jpg"))
case = copy.deepcopy(d)
case["images"].append({"id": next_img[0], "file_name": "lonely.jpg", "height": H, "width": W})
dump("lonely", case, "image+without+annotations+(kept,+flagged)", next_img[0], "-")
next_img[0] += 1

# 10. a truncated JPEG as the last image: found while the last shard is written
raw = open(os.path.join(img_dir, im0["file_name"]), "rb").read()
open(os.path.join(img_dir, "cut.jpg"), "wb").write(raw[: len(raw) * 6 // 10])
case = copy.deepcopy(d)
case["images"].append({"id": next_img[0], "file_name": "cut.jpg", "height": H, "width": W})
case["annotations"].append(ann(next_img[0]))
dump("last_truncated", case, "truncated+or+corrupt+image", next_img[0], "-")
# ...and a different, valid set for the same --out (fewer images)
case = copy.deepcopy(d)
keep = {im["id"] for im in case["images"][:4]}
case["images"] = case["images"][:4]
case["annotations"] = [a for a in case["annotations"] if a["image_id"] in keep]
dump("smaller", case, "-", 0, "-")

with open(os.path.join(out, "cases.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
print(len(lines), "cases written to", out)
