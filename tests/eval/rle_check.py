"""Compares prog_rle (our C RLE) with pycocotools' mask API on random and tricky cases.
Usage: rle_check.py PROG_RLE [N_CASES]. Exit 0 when every answer is identical."""
import random
import subprocess
import sys

import numpy as np
from pycocotools import mask as mu


def rnd_mask(rng, h, w):
    m = np.zeros((h, w), dtype=np.uint8)
    kind = rng.random()
    if kind < 0.1:
        return m  # empty
    if kind < 0.15:
        m[:] = 1  # full
        return m
    for _ in range(rng.randint(1, 4)):
        x0, y0 = rng.randrange(w), rng.randrange(h)
        x1, y1 = rng.randint(x0, w), rng.randint(y0, h)
        m[y0:y1, x0:x1] = 1
    if rng.random() < 0.5:
        noise = np.array([[rng.random() < 0.1 for _ in range(w)] for _ in range(h)], dtype=bool)
        m[noise] ^= 1
    return m


def rnd_coord(rng, lim):
    r = rng.random()
    if r < 0.1:
        return rng.uniform(-0.3 * lim - 2, 0)  # outside, negative
    if r < 0.2:
        return rng.uniform(lim, 1.4 * lim + 2)  # outside, beyond
    if r < 0.4:
        return rng.randint(0, lim) + rng.choice([0.0, 0.5, 0.1, 0.9, 0.3, 0.7])  # on grid/half points
    return rng.uniform(0, lim)


def rnd_poly(rng, h, w):
    k = rng.randint(3, 14)
    pts = [(rnd_coord(rng, w), rnd_coord(rng, h)) for _ in range(k)]
    r = rng.random()
    if r < 0.08:
        pts = [pts[0]] * k  # all points equal
    elif r < 0.15:
        pts = [(pts[0][0] + i, pts[0][1] + 2 * i) for i in range(k)]  # collinear
    elif r < 0.2:
        pts = pts + pts[:2]  # repeated points
    elif r < 0.25:  # large, clamped on every side
        pts = [(-5.0, -5.0), (w + 5.0, -3.0), (w + 4.0, h + 5.0), (-2.0, h + 3.0)]
    return [v for p in pts for v in p]


def fmt(x):
    return repr(float(x))


def main():
    prog = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    rng = random.Random(1234)
    cmds, expect = [], []

    def rle_str(r):
        return r['counts'].decode() if isinstance(r['counts'], bytes) else r['counts']

    for _ in range(n):
        h, w = rng.randint(1, 37), rng.randint(1, 37)
        # encode / area / toBbox / string
        m = rnd_mask(rng, h, w)
        r = mu.encode(np.asfortranarray(m))
        bb = mu.toBbox(r)
        cmds.append('encode %d %d %s' % (h, w, ''.join(str(int(v)) for v in m.reshape(-1))))
        expect.append(('str', [rle_str(r), float(mu.area(r))] + [float(v) for v in bb]))
        # decode a pycocotools string, and string round trip
        cmds.append('decode %d %d %s' % (h, w, rle_str(r)))
        expect.append(('str', [''.join(str(int(v)) for v in m.reshape(-1)), float(mu.area(r))]
                       + [float(v) for v in bb] + [rle_str(r)]))
        # polygons
        poly = rnd_poly(rng, h, w)
        pr = mu.frPyObjects([poly], h, w)[0]
        cmds.append('poly %d %d %d %s' % (h, w, len(poly) // 2, ' '.join(fmt(v) for v in poly)))
        expect.append(('str', [rle_str(pr)]))
        # toBbox and area of the polygon's RLE (non-trivial shapes)
        cmds.append('decode %d %d %s' % (h, w, rle_str(pr)))
        pm = mu.decode(pr)
        expect.append(('str', [''.join(str(int(v)) for v in pm.reshape(-1)), float(mu.area(pr))]
                       + [float(v) for v in mu.toBbox(pr)] + [rle_str(pr)]))
        # boxes
        box = [rnd_coord(rng, w), rnd_coord(rng, h), rng.uniform(0, w), rng.uniform(0, h)]
        if rng.random() < 0.3:
            box = [float(rng.randint(-2, w)), float(rng.randint(-2, h)), float(rng.randint(0, w)), float(rng.randint(0, h))]
        br = mu.frPyObjects(np.array([box], dtype=np.double), h, w)[0]
        cmds.append('frbbox %d %d %s' % (h, w, ' '.join(fmt(v) for v in box)))
        expect.append(('str', [rle_str(br)]))
        # merge, union and intersection of 1..4 masks
        k = rng.randint(1, 4)
        parts = []
        for _ in range(k):
            if rng.random() < 0.5:
                parts.append(mu.encode(np.asfortranarray(rnd_mask(rng, h, w))))
            else:
                parts.append(mu.frPyObjects([rnd_poly(rng, h, w)], h, w)[0])
        inter = rng.randint(0, 1)
        mr = mu.merge(parts, intersect=inter)
        cmds.append('merge %d %d %d %d %s' % (h, w, inter, k, ' '.join(rle_str(p) for p in parts)))
        expect.append(('str', [rle_str(mr)]))
        # iou with crowd flags; sometimes a gt of another size
        nd, ng = rng.randint(1, 4), rng.randint(1, 4)
        dts = [mu.encode(np.asfortranarray(rnd_mask(rng, h, w))) for _ in range(nd)]
        gts = []
        for _ in range(ng):
            if rng.random() < 0.1:
                h2, w2 = h + 1, w
                gts.append(mu.encode(np.asfortranarray(rnd_mask(rng, h2, w2))))
            elif rng.random() < 0.5:
                gts.append(mu.frPyObjects([rnd_poly(rng, h, w)], h, w)[0])
            else:
                gts.append(mu.encode(np.asfortranarray(rnd_mask(rng, h, w))))
        crowd = [rng.randint(0, 1) for _ in range(ng)]
        iou = np.array(mu.iou(dts, gts, crowd)).reshape(nd, ng)
        cmds.append('iou %d %d %s %s %s' % (nd, ng, ' '.join(map(str, crowd)),
                                            ' '.join('%d %d %s' % (r['size'][0], r['size'][1], rle_str(r)) for r in dts),
                                            ' '.join('%d %d %s' % (r['size'][0], r['size'][1], rle_str(r)) for r in gts)))
        expect.append(('num', [float(v) for v in iou.reshape(-1)]))
        # box iou
        db = [[rnd_coord(rng, w), rnd_coord(rng, h), rng.uniform(0, w), rng.uniform(0, h)] for _ in range(nd)]
        gb = [[rnd_coord(rng, w), rnd_coord(rng, h), rng.uniform(0, w), rng.uniform(0, h)] for _ in range(ng)]
        if rng.random() < 0.3:
            db[0] = list(gb[0])
        biou = np.array(mu.iou(np.array(db), np.array(gb), crowd)).reshape(nd, ng)
        cmds.append('biou %d %d %s %s %s' % (nd, ng, ' '.join(map(str, crowd)),
                                             ' '.join(fmt(v) for b in db for v in b), ' '.join(fmt(v) for b in gb for v in b)))
        expect.append(('num', [float(v) for v in biou.reshape(-1)]))
    # strings that must be rejected: cut short, bad characters, runs not adding up to h*w
    good = rle_str(mu.encode(np.asfortranarray(np.eye(6, dtype=np.uint8))))
    for bad in [good[:-1] + 'o', good + '1', good[:-2], 'a b', '\x7f']:
        cmds.append('decode 6 6 %s' % bad.replace(' ', '~'))
        expect.append(('str', ['bad']))
    cmds.append('decode 0 0 ')
    expect.append(('str', ['-', 0.0, 0.0, 0.0, 0.0, 0.0]))

    out = subprocess.run([prog], input='\n'.join(cmds) + '\n', capture_output=True, text=True)
    if out.returncode != 0:
        print('prog_rle failed rc=%d: %s' % (out.returncode, out.stderr[-2000:]))
        return 1
    lines = out.stdout.split('\n')
    bad = 0
    for i, (kind, want) in enumerate(expect):
        got = lines[i].split() if i < len(lines) else []
        if kind == 'num':
            ok = len(got) == len(want) and all(float(g) == x for g, x in zip(got, want))
        else:
            ok = len(got) == len(want) and all(g == x if isinstance(x, str) else float(g) == x for g, x in zip(got, want))
        if not ok:
            bad += 1
            if bad <= 10:
                print('MISMATCH case %d: %s\n  ours:   %s\n  pycoco: %s' % (i, cmds[i][:300], ' '.join(got)[:300], ' '.join(map(str, want))[:300]))
    print('%d cases, %d mismatches' % (len(expect), bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
