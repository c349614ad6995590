"""Writes a COCO-shaped instances JSON of about TARGET bytes for the parse benchmark:
118287 images (640x480), ~7.3 annotations per image with polygons of 6-44 vertices
(drawn from a pool of random star-shaped polygons), 1% crowd annotations with
uncompressed RLE, 80 categories with ids 1..90 as in COCO. Deterministic.
Usage: gen_coco_json.py OUT.json [TARGET_BYTES]"""
import math
import random
import sys

out = sys.argv[1]
target = float(sys.argv[2]) if len(sys.argv) > 2 else 450e6
rng = random.Random(0)
H, W = 480, 640
n_images = 118287
cat_ids = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]


def polygon():
    k = rng.randint(6, 44)
    cx, cy = rng.uniform(60, W - 60), rng.uniform(60, H - 60)
    r = rng.uniform(8, 55)
    pts = []
    for i in range(k):
        a = 2 * math.pi * i / k
        rr = r * rng.uniform(0.6, 1.0)
        pts.append("%.2f,%.2f" % (cx + rr * math.cos(a), cy + rr * math.sin(a)))
    xs = [cx - r, cy - r, 2 * r, 2 * r]
    return "[[" + ",".join(pts) + "]]", "[%.2f,%.2f,%.2f,%.2f]" % tuple(xs), math.pi * r * r * 0.7


pool = [polygon() for _ in range(4000)]


def crowd_rle():
    counts, left, v = [], H * W, 0
    while left > 0:
        c = min(left, rng.randint(1, 400) if v else rng.randint(100, 3000))
        counts.append(c)
        left -= c
        v ^= 1
    return '{"counts":[%s],"size":[%d,%d]}' % (",".join(map(str, counts)), H, W)


with open(out, "w") as f:
    f.write('{"info":{"description":"COCO-shaped benchmark file"},"licenses":[],\n"images":[')
    for i in range(n_images):
        f.write('%s\n{"license":3,"file_name":"%012d.jpg","coco_url":"http://images.cocodataset.org/train2017/%012d.jpg",'
                '"height":%d,"width":%d,"date_captured":"2013-11-14 11:18:45","flickr_url":"http://farm3.staticflickr.com/x.jpg","id":%d}'
                % ("," if i else "", i + 1, i + 1, H, W, i + 1))
    f.write('],\n"annotations":[')
    aid, first = 1, True
    while f.tell() < target - 20000:
        image_id = rng.randint(1, n_images)
        cat = rng.choice(cat_ids)
        if rng.random() < 0.01:
            seg, bbox, area, crowd = crowd_rle(), "[10.0,10.0,100.0,80.0]", 4000.0, 1
        else:
            seg, bbox, area = rng.choice(pool)
            crowd = 0
        f.write('%s\n{"segmentation":%s,"area":%.4f,"iscrowd":%d,"image_id":%d,"bbox":%s,"category_id":%d,"id":%d}'
                % ("" if first else ",", seg, area, crowd, image_id, bbox, cat, 900000000000 + aid if crowd else aid))
        first = False
        aid += 1
    f.write('],\n"categories":[')
    f.write(",".join('{"supercategory":"thing","id":%d,"name":"class%d"}' % (c, c) for c in cat_ids))
    f.write("]}\n")
    print("wrote %s: %d images, %d annotations, %.1f MB" % (out, n_images, aid - 1, f.tell() / 1e6))
