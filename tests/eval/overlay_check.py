"""Checks `mrcnn predict` pictures against what their detections draw.

Usage: overlay_check.py FONT_C DETECTIONS_JSON MASKS_NPZ SCORE_THRESH ID REFERENCE OVERLAY [ID REFERENCE OVERLAY]...

Re-renders, from DETECTIONS_JSON (COCO results of `mrcnn predict`: boxes, scores,
category names) and MASKS_NPZ (key "ID": the decoded masks of image ID, n x h x w, in
the order of the JSON), what src/eval/overlay.c draws over REFERENCE (the picture the
program decoded), and compares it with OVERLAY:
  - masks blended (src + colour + 1) // 2 and box outlines of thickness t, lowest score
    first; colour = palette[position of the detection among the image's detections, which
    are sorted by score] (the program's detections are sorted by score and those under the
    threshold, all at the end, are neither written nor drawn);
  - then label tabs "name 0.93", highest score first: above the box (inside its top edge
    when there is no room), shifted left to stay inside, moved down one tab height past
    earlier tabs (at most 8 tries, not past the bottom); text in the 5x7 font of
    FONT_C (1 px gap, scale 2 and thickness 2 from a short side of 600 and 400 px), black on
    light tabs and white on dark ones (luma > 150).
Then: every pixel outside the drawn set equals REFERENCE exactly; mask pixels not under a
box outline or tab equal the predicted blend exactly; box outline pixels not under a tab
equal the prediction (box colour, blended by the masks of higher-scoring detections drawn
later); tab pixels are the tab's colour or its text colour, and exactly the predicted glyphs.
Numpy and PIL only (no pycocotools: the masks come decoded)."""
import itertools
import json
import re
import sys

import numpy as np
from PIL import Image

PALETTE = np.array([(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
                    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)], np.int64)
FONT_W, FONT_H = 5, 7
F32 = np.float32


def load_font(path):
    rows = re.findall(r"\{\s*(0x[0-9A-Fa-f]{2}(?:\s*,\s*0x[0-9A-Fa-f]{2}){4})\s*\}", open(path).read())
    assert len(rows) == 95, f"{path}: {len(rows)} glyphs parsed, 95 expected"
    return [[int(v, 16) for v in r.split(",")] for r in rows]


def round_px(v):
    """(int)(v + 0.5f) of src/eval/overlay.c: a float addition, then truncation."""
    return int(F32(v) + F32(0.5))


def right_edges(lo, extent):
    """The roundings (int)(hi + 0.5f) that the box's float right (bottom) edge hi may have.
    detections.json holds lo and extent = (float)(hi - lo), each printed with %.9g and so
    exact, but not hi itself: every float hi with fl(hi - lo) == extent is possible (more
    than one only when the subtraction rounds to a coarser step than hi's, e.g. lo < 0),
    and when those straddle a .5 boundary the drawn 1-px line may lie at either rounding:
    the caller then accepts either, for that line only."""
    lo, extent = F32(lo), F32(extent)
    with np.errstate(over="ignore"):
        guess = F32(lo + extent)
        cands, f = [], guess
        for _ in range(16):
            f = np.nextafter(f, F32(-np.inf))
        for _ in range(33):
            if F32(f - lo) == extent:
                cands.append(f)
            f = np.nextafter(f, F32(np.inf))
    assert cands, (float(lo), float(extent))
    return sorted({round_px(f) for f in cands})


def fill(img, layer, tag, x0, y0, x1, y1, colour):
    """fill_rect of overlay.c (clipped), also marking layer with tag."""
    h, w = img.shape[:2]
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if x0 < x1 and y0 < y1:
        img[y0:y1, x0:x1] = colour
        if layer is not None:
            layer[y0:y1, x0:x1] = tag


def render(src, dets, masks, font, rounded):
    """The picture overlay.c makes, and per pixel what drew it last: 0 nothing, 1 a mask
    blend, 2 a box outline, 3 a label tab; tab_of: which detection's tab (-1 none)."""
    h, w = src.shape[:2]
    short = min(h, w)
    scale, thick = (2 if short >= 600 else 1), (2 if short >= 400 else 1)
    img, what = src.astype(np.int64).copy(), np.zeros((h, w), np.int8)
    for k in reversed(range(len(dets))):
        c = PALETTE[k % 10]
        m = masks[k] > 0
        img[m] = (img[m] + c + 1) // 2
        what[m] = 1
        x0, y0, x1, y1 = rounded[k]
        x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)
        for r in ((x0, y0, x1, y0 + thick), (x0, y1 - thick, x1, y1), (x0, y0, x0 + thick, y1), (x1 - thick, y0, x1, y1)):
            fill(img, what, 2, *r, c)
    tab_of = np.full((h, w), -1, np.int64)
    text_col = np.zeros((len(dets), 3), np.int64)
    placed = []
    th = (FONT_H + 2) * scale
    for k, d in enumerate(dets):
        c = PALETTE[k % 10]
        label = ("%s %.2f" % (d["category_name"], float(F32(d["score"])))).encode()[:159]
        tw = (len(label) * (FONT_W + 1) - 1) * scale + 2 * scale
        x, y = rounded[k][0], rounded[k][1] - th
        if y < 0:
            y = rounded[k][1]
        if x + tw > w:
            x = w - tw
        if x < 0:
            x = 0
        r = [x, y, x + tw, y + th]
        for _ in range(8):
            hit = any(r[0] < p[2] and p[0] < r[2] and r[1] < p[3] and p[1] < r[3] for p in placed)
            if not hit or r[3] + th > h:
                break
            r[1] += th
            r[3] += th
        placed.append(r)
        fill(img, what, 3, *r, c)
        x0, y0, x1, y1 = max(r[0], 0), max(r[1], 0), min(r[2], w), min(r[3], h)
        tab_of[y0:max(y1, y0), x0:max(x1, x0)] = k
        luma = (299 * int(c[0]) + 587 * int(c[1]) + 114 * int(c[2])) // 1000
        text_col[k] = (0, 0, 0) if luma > 150 else (255, 255, 255)
        for i, ch in enumerate(label):
            g = font[ch - 32 if 32 <= ch <= 126 else ord("?") - 32]
            gx = r[0] + scale + i * (FONT_W + 1) * scale
            for cx in range(FONT_W):
                for cy in range(FONT_H):
                    if g[cx] >> cy & 1:
                        px, py = gx + cx * scale, r[1] + scale + cy * scale
                        fill(img, None, 0, px, py, px + scale, py + scale, text_col[k])
    return img, what, tab_of, text_col


def where(mask, n=3):
    ys, xs = np.nonzero(mask)
    return ", ".join(f"(x={x}, y={y})" for x, y in zip(xs[:n], ys[:n]))


def compare(ref, out, img, what, tab_of, text_col):
    """The list of failed checks (empty: the overlay is what the detections draw)."""
    bad = []
    diff = (out != img).any(-1)
    outside = what == 0
    if (out[outside] != ref[outside]).any(-1).any():
        m = outside & (out != ref).any(-1)
        bad.append(f"{m.sum()} pixels outside every mask, box and label differ from the input, at {where(m)}")
    m = (what == 1) & diff
    if m.any():
        y, x = np.argwhere(m)[0]
        bad.append(f"{m.sum()} of {(what == 1).sum()} mask pixels are not the predicted blend, at {where(m)}: "
                   f"{out[y, x].tolist()} instead of {img[y, x].tolist()}")
    m = (what == 2) & diff
    if m.any():
        y, x = np.argwhere(m)[0]
        bad.append(f"{m.sum()} of {(what == 2).sum()} box outline pixels differ from the prediction, at {where(m)}: "
                   f"{out[y, x].tolist()} instead of {img[y, x].tolist()}")
    tabs = what == 3
    if tabs.any():
        k = tab_of[tabs]
        tab_c, txt_c, o = PALETTE[k % 10], text_col[k], out[tabs]
        off = ~((o == tab_c).all(-1) | (o == txt_c).all(-1))
        if off.any():
            m = np.zeros_like(tabs)
            m[tabs] = off
            bad.append(f"{off.sum()} of {tabs.sum()} label tab pixels are neither the tab's colour nor its text "
                       f"colour, at {where(m)}")
        m = tabs & diff
        if m.any():
            bad.append(f"{m.sum()} of {tabs.sum()} label tab pixels differ from the predicted label text, at {where(m)}")
    return bad


def main():
    font_path, dets_path, masks_path, thresh = sys.argv[1:5]
    triples = sys.argv[5:]
    assert triples and len(triples) % 3 == 0, "ID REFERENCE OVERLAY triples expected"
    font = load_font(font_path)
    all_dets = json.load(open(dets_path))
    masks = dict(np.load(masks_path))
    for t in range(0, len(triples), 3):
        image_id, ref_path, out_path = int(triples[t]), triples[t + 1], triples[t + 2]
        ref = np.asarray(Image.open(ref_path).convert("RGB")).astype(np.int64)
        out_im = Image.open(out_path)
        assert out_im.mode == "RGB" and out_im.size == (ref.shape[1], ref.shape[0]), (out_path, out_im.mode, out_im.size)
        out = np.asarray(out_im).astype(np.int64)
        dets = [d for d in all_dets if d["image_id"] == image_id]
        scores = [d["score"] for d in dets]
        assert scores == sorted(scores, reverse=True), f"{out_path}: detections not sorted by score: {scores}"
        assert all(s >= float(thresh) for s in scores), (out_path, scores)
        m = masks.get(str(image_id), np.zeros((0,) + ref.shape[:2], np.uint8))
        assert m.shape == (len(dets),) + ref.shape[:2], (out_path, m.shape, len(dets))
        # box corners as overlay.c rounds them; right and bottom edges may be ambiguous
        choices = []
        for d in dets:
            x, y, bw, bh = d["bbox"]
            choices.append([(round_px(x), round_px(y), x1, y1) for x1 in right_edges(x, bw) for y1 in right_edges(y, bh)])
        n_amb = sum(len(c) > 1 for c in choices)
        assert n_amb <= 6, f"{out_path}: {n_amb} ambiguous box edges (float rounding) is implausibly many"
        first = None
        for rounded in itertools.product(*choices):
            img, what, tab_of, text_col = render(ref, dets, m, font, list(rounded))
            bad = compare(ref, out, img, what, tab_of, text_col)
            if not bad:
                break
            first = first or bad
        else:
            print(f"FAIL: {out_path} is not what its {len(dets)} detections draw over the input:")
            for b in first or bad:
                print("   ", b)
            sys.exit(1)
        counts = [(what == v).sum() for v in (1, 2, 3)]
        assert not dets or all(counts), f"{out_path}: nothing drawn by {len(dets)} detections {counts}"
        print(f"ok: {'/'.join(out_path.rsplit('/', 2)[-2:])}: {out.shape[1]}x{out.shape[0]}, {len(dets)} detections: "
              f"{counts[0]} mask, {counts[1]} box and {counts[2]} label pixels as drawn, "
              f"{(what == 0).sum()} others equal to the input"
              + (f" ({n_amb} box edges of ambiguous rounding)" if n_amb else ""))


if __name__ == "__main__":
    main()
