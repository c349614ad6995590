"""Parity of the detection functions (prog_detect) with torchvision's own code on
random inputs. Usage: detect_parity.py <prog_detect> [case ...]. Exit 1 on a mismatch."""
import atexit
import math
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections import OrderedDict

import numpy as np
import torch
import torchvision
from torchvision.models.detection import _utils as det_utils
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.roi_heads import RoIHeads, maskrcnn_inference, paste_masks_in_image, project_masks_on_boxes
from torchvision.models.detection.rpn import RegionProposalNetwork, concat_box_prediction_layers
from torchvision.models.detection.transform import resize_boxes
from torchvision.ops import MultiScaleRoIAlign, batched_nms, box_iou, nms, roi_align

PROG = sys.argv[1]
FAILS = []
torch.set_num_threads(1)


def check(name, ok, detail):
    print(("ok    " if ok else "FAIL  ") + name + ": " + detail, flush=True)
    if not ok:
        FAILS.append(name)


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    den = np.abs(b).max()
    return float(np.abs(a - b).max() / den) if den > 0 else float(np.abs(a - b).max())


# Every case's files under one folder, removed at exit (pass or fail): each run of this
# test used to leave dozens of folders in /tmp.
TMP_ROOT = tempfile.mkdtemp(prefix="detect_parity_")
atexit.register(shutil.rmtree, TMP_ROOT, True)


class Run:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="case_", dir=TMP_ROOT)

    def put(self, name, arr, dtype=None):
        arr = np.asarray(arr)
        if dtype is None:  # floats go as float32, integer arrays keep their type
            dtype = np.float32 if arr.dtype.kind == "f" else arr.dtype
        np.ascontiguousarray(arr, dtype=dtype).tofile(os.path.join(self.dir, name + ".bin"))

    def get(self, name, dtype=np.float32):
        return np.fromfile(os.path.join(self.dir, name + ".bin"), dtype=dtype)

    def call(self, cmd, **kw):
        args = [PROG, cmd, self.dir] + ["%s=%s" % (k, v) for k, v in kw.items()]
        subprocess.run(args, check=True)


def rand_boxes(g, n, lo=0.0, hi=200.0, min_wh=1.0, max_wh=120.0):
    xy = g.uniform(lo, hi, (n, 2))
    wh = g.uniform(min_wh, max_wh, (n, 2))
    return np.concatenate([xy, xy + wh], 1).astype(np.float32)


def case_anchors(g):
    sizes = (32, 64, 128, 256, 512)
    gen = AnchorGenerator(tuple((s,) for s in sizes), ((0.5, 1.0, 2.0),) * 5)
    for (H, W) in [(256, 320), (224, 160), (800, 1344)]:
        grids = [(H // s, W // s) for s in (4, 8, 16, 32)]
        grids.append(((grids[-1][0] - 1) // 2 + 1, (grids[-1][1] - 1) // 2 + 1))  # P6: max-pool 1x1 s2
        feats = [torch.zeros(1, 1, h, w) for h, w in grids]
        il = ImageList(torch.zeros(1, 3, H, W), [(H, W)])
        ref = gen(il, feats)[0].numpy()
        r = Run()
        r.call("anchors", grid_h=",".join(str(h) for h, _ in grids), grid_w=",".join(str(w) for _, w in grids),
               sizes=",".join(map(str, sizes)), image_h=H, image_w=W)
        got = r.get("anchors").reshape(-1, 4)
        check("anchors %dx%d" % (H, W), got.shape == ref.shape and np.array_equal(got, ref),
              "shape %s vs %s, max|d| %g" % (got.shape, ref.shape, np.abs(got - ref).max() if got.shape == ref.shape else -1))


def case_coder(g):
    for w in [(1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)]:
        coder = det_utils.BoxCoder(w)
        boxes = rand_boxes(g, 500)
        targets = rand_boxes(g, 500)
        ref = coder.encode_single(torch.from_numpy(targets), torch.from_numpy(boxes)).numpy()
        r = Run()
        r.put("targets", targets)
        r.put("boxes", boxes)
        r.call("encode", wx=w[0], wy=w[1], ww=w[2], wh=w[3])
        e = rel_err(r.get("deltas").reshape(-1, 4), ref)
        check("encode %s" % (w,), e < 1e-6, "max rel err %.2e" % e)
        k = 3
        deltas = g.normal(0, 1, (500, k * 4)).astype(np.float32) * np.array(w * k, np.float32)
        deltas[:20, 2] = 40.0  # beyond the log(1000/16) clamp
        ref = coder.decode_single(torch.from_numpy(deltas), torch.from_numpy(boxes)).numpy()
        r.put("deltas", deltas)
        r.call("decode", wx=w[0], wy=w[1], ww=w[2], wh=w[3])
        e = rel_err(r.get("decoded").reshape(-1, k * 4), ref)
        check("decode %s" % (w,), e < 1e-6, "max rel err %.2e" % e)


def case_iou(g):
    a = rand_boxes(g, 300)
    b = rand_boxes(g, 200)
    b[:10] = a[:10]
    ref = box_iou(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    r = Run()
    r.put("a", a)
    r.put("b", b)
    r.call("iou")
    e = np.abs(r.get("iou").reshape(300, 200) - ref).max()
    check("box_iou", e < 1e-6, "max abs err %.2e" % e)


def case_matcher(g):
    for high, low, allow in [(0.7, 0.3, 1), (0.5, 0.5, 0), (0.7, 0.3, 0)]:
        # Integer boxes give exact IoU ties, which the low-quality rule must handle.
        gt = np.round(rand_boxes(g, 6, hi=60, max_wh=40))
        pred = np.round(rand_boxes(g, 400, hi=60, max_wh=40))
        pred[50:53] = gt[0]
        # A gt whose best IoU (0.29, twice) is below both thresholds: only the
        # low-quality rule matches it.
        gt[5] = [100, 100, 130, 130]
        pred[60:62] = [110, 110, 140, 140]
        iou = box_iou(torch.from_numpy(gt), torch.from_numpy(pred))
        ref = det_utils.Matcher(high, low, allow_low_quality_matches=bool(allow))(iou).numpy()
        r = Run()
        r.put("iou", iou.numpy())
        r.call("matcher", g=6, high=high, low=low, allow=allow)
        got = r.get("matches", np.int32)
        check("matcher %.1f/%.1f low-quality=%d" % (high, low, allow), np.array_equal(got, ref) and (ref[60] == 5) == bool(allow),
              "%d of %d differ" % (int((got != ref).sum()), ref.size))


def case_nms(g):
    for n, thresh in [(300, 0.5), (800, 0.7), (1500, 0.7)]:
        boxes = rand_boxes(g, n, hi=150, max_wh=80)
        scores = g.uniform(0, 1, n).astype(np.float32)
        idxs = g.integers(0, 5, n).astype(np.int32)
        tb, ts = torch.from_numpy(boxes), torch.from_numpy(scores)
        r = Run()
        r.put("boxes", boxes)
        r.put("scores", scores)
        r.put("idxs", idxs)
        ref = nms(tb, ts, thresh).numpy()
        r.call("nms", thresh=thresh, batched=0)
        got = r.get("keep", np.int64)
        check("nms n=%d t=%.1f" % (n, thresh), np.array_equal(got, ref), "kept %d vs %d" % (got.size, ref.size))
        # n > 1000 takes torchvision's per-class path, smaller n the coordinate-offset path.
        ref = batched_nms(tb, ts, torch.from_numpy(idxs).long(), thresh).numpy()
        r.call("nms", thresh=thresh, batched=1)
        got = r.get("keep", np.int64)
        check("batched_nms n=%d t=%.1f" % (n, thresh), np.array_equal(got, ref), "kept %d vs %d" % (got.size, ref.size))


def make_rpn(pre, post):
    gen = AnchorGenerator(((32,), (64,), (128,), (256,), (512,)), ((0.5, 1.0, 2.0),) * 5)

    class FakeHead(torch.nn.Module):
        def forward(self, x):
            return self.obj, self.deltas

    rpn = RegionProposalNetwork(gen, FakeHead(), 0.7, 0.3, 256, 0.5, dict(training=pre, testing=pre),
                                dict(training=post, testing=post), 0.7)
    return gen, rpn


def level_grids(H, W):
    grids = [(H // s, W // s) for s in (4, 8, 16, 32)]
    grids.append(((grids[-1][0] - 1) // 2 + 1, (grids[-1][1] - 1) // 2 + 1))
    return grids


def case_rpn_targets(g):
    H, W = 256, 320
    gen, rpn = make_rpn(100, 100)
    grids = level_grids(H, W)
    il = ImageList(torch.zeros(1, 3, H, W), [(H, W)])
    anchors = gen(il, [torch.zeros(1, 1, h, w) for h, w in grids])[0]
    for ng in (0, 1, 7, 12):
        gt = rand_boxes(g, ng, hi=250, min_wh=8, max_wh=150)
        if ng == 12:
            gt[8:10] = rand_boxes(g, 2, hi=250, min_wh=1, max_wh=3)  # tiny: low-quality ties only
            gt[10] = anchors[5000].numpy()  # exactly an anchor
            gt[11] = [3.0, 3.0, 4.5, 5.0]
        labels, matched = rpn.assign_targets_to_anchors([anchors], [dict(boxes=torch.from_numpy(gt))])
        r = Run()
        r.put("anchors", anchors.numpy())
        r.put("gt", gt)
        r.call("rpn_targets", fg=0.7, bg=0.3)
        got_l = r.get("labels")
        ok = np.array_equal(got_l, labels[0].numpy())
        detail = "labels: %d differ" % int((got_l != labels[0].numpy()).sum())
        if ng:
            reg = rpn.box_coder.encode_single(matched[0], anchors).numpy()
            e = rel_err(r.get("reg").reshape(-1, 4), reg)
            ok = ok and e < 1e-5
            detail += ", targets max rel err %.2e, %d fg" % (e, int((got_l == 1).sum()))
        check("rpn targets %d gt" % ng, ok, detail)


def case_proposals(g):
    N, H, W = 2, 256, 320
    grids = level_grids(H, W)
    image_sizes = [(256, 320), (200, 290)]
    for pre, post in [(300, 200), (2000, 1000)]:
        gen, rpn = make_rpn(pre, post)
        rpn.eval()
        obj_nchw = [torch.from_numpy(g.normal(0, 2, (N, 3, h, w)).astype(np.float32)) for h, w in grids]
        del_nchw = [torch.from_numpy(g.normal(0, 0.3, (N, 12, h, w)).astype(np.float32)) for h, w in grids]
        rpn.head.obj, rpn.head.deltas = obj_nchw, del_nchw
        il = ImageList(torch.zeros(N, 3, H, W), image_sizes)
        feats = OrderedDict((str(i), torch.zeros(N, 1, h, w)) for i, (h, w) in enumerate(grids))
        with torch.no_grad():
            # RegionProposalNetwork.forward's steps, to get filter_proposals' scores too.
            anchors = gen(il, list(feats.values()))
            obj, dl = concat_box_prediction_layers(obj_nchw, del_nchw)
            props = rpn.box_coder.decode(dl, anchors).view(N, -1, 4)
            ref_boxes, ref_scores = rpn.filter_proposals(props, obj, image_sizes, [h * w * 3 for h, w in grids])
        r = Run()
        counts = []
        for l, (h, w) in enumerate(grids):
            r.put("obj%d" % l, obj_nchw[l].permute(0, 2, 3, 1).numpy())
            r.put("del%d" % l, del_nchw[l].permute(0, 2, 3, 1).numpy())
            counts.append(h * w * 3)
        r.put("anchors", anchors[0].numpy())
        r.put("image_hw", np.array(image_sizes, np.int32))
        r.call("proposals", n=N, counts=",".join(map(str, counts)), pre=pre, post=post, nms=0.7, min_size=1e-3,
               score_thresh=0.0)
        got = r.get("boxes").reshape(N, post, 4)
        got_s = r.get("scores").reshape(N, post)
        cnt = r.get("counts", np.int64)
        for i in range(N):
            ref, ref_s = ref_boxes[i].numpy(), ref_scores[i].numpy()
            ok = cnt[i] == ref.shape[0]
            e = es = float("inf")
            if ok:
                # torch's unstable sort orders equal scores (sigmoid saturates) its own
                # way: compare in a canonical order, (score desc, then coordinates).
                gb, gs = canonical(got[i, :cnt[i]], got_s[i, :cnt[i]])
                rb, rs = canonical(ref, ref_s)
                e, es = rel_err(gb, rb), rel_err(gs, rs)
                ok = np.all(np.diff(got_s[i, :cnt[i]]) <= 0)
            pad_zero = not np.any(got[i, cnt[i]:])
            check("proposals pre=%d post=%d image %d" % (pre, post, i), ok and e < 1e-5 and es < 1e-6 and pad_zero,
                  "count %d vs %d, boxes max rel err %.2e, scores %.2e, padding zero %s" % (cnt[i], ref.shape[0], e, es, pad_zero))


def canonical(boxes, scores):
    order = np.lexsort((boxes[:, 3], boxes[:, 2], boxes[:, 1], boxes[:, 0], -scores))
    return boxes[order], scores[order]


def case_roi_sample(g):
    heads = RoIHeads(None, None, None, 0.5, 0.5, 100000, 0.25, (10.0, 10.0, 5.0, 5.0), 0.05, 0.5, 100)
    for ng in (3, 0):
        prop = rand_boxes(g, 400, hi=250, min_wh=4, max_wh=120)
        gt = rand_boxes(g, ng, hi=250, min_wh=8, max_wh=120)
        gl = g.integers(1, 6, ng).astype(np.int64)
        if ng == 3:
            gt[2], gl[2] = gt[0], gl[0] % 5 + 1  # duplicate box, other class: the first gt wins ties
        p2, matched, labels, reg = heads.select_training_samples(
            [torch.from_numpy(prop)], [dict(boxes=torch.from_numpy(gt), labels=torch.from_numpy(gl))])
        r = Run()
        r.put("proposals", prop)
        r.put("gt", gt)
        r.put("gt_labels", gl, np.int32)
        r.call("roi_sample", batch=100000, frac=0.25, iou=0.5, max_fg=100000)
        rois = r.get("rois").reshape(-1, 4)
        lab = r.get("labels", np.int32)
        mg = r.get("matched", np.int32)
        fg = r.get("fg", np.int32)
        ok = rois.shape == p2[0].shape and np.array_equal(rois, p2[0].numpy()) and np.array_equal(lab, labels[0].numpy())
        ok = ok and np.array_equal(mg, matched[0].numpy()) and np.array_equal(fg, np.where(lab > 0)[0])
        pos = labels[0].numpy() > 0
        e = rel_err(r.get("reg").reshape(-1, 4)[pos], reg[0].numpy()[pos]) if ok else float("inf")
        check("roi sample (take all) %d gt" % ng, ok and e < 1e-5,
              "%d rois vs %d, %d fg, targets max rel err %.2e" % (rois.shape[0], p2[0].shape[0], int(pos.sum()), e))


def case_roi_align(g):
    N, C = 2, 5
    H, W = 128, 160
    image_shapes = [(128, 160), (100, 150)]
    shapes = [(H // s, W // s) for s in (4, 8, 16, 32)]
    for sampling, aligned in [(2, False), (2, True), (0, False)]:
        for out in (7, 14):
            feats = [torch.from_numpy(g.normal(0, 1, (N, C, h, w)).astype(np.float32)).requires_grad_() for h, w in shapes]
            boxes = [rand_boxes(g, 30, lo=-20, hi=150, min_wh=0.3, max_wh=200), rand_boxes(g, 20, lo=-10, hi=140, min_wh=2, max_wh=60)]
            boxes[0][0] = [10, 10, 10.2, 10.5]  # sub-pixel box: the roi size clamps at 1 pixel
            # Boxes on level boundaries, where the mapper's eps decides the level.
            boxes[0][1:5] = [[38.41109085083008, 25.89363670349121, 262.41107177734375, 249.8936004638672],
                             [15.371140480041504, 30.6761417388916, 71.37113189697266, 86.67613220214844],
                             [24.504671096801758, 41.13616180419922, 248.50462341308594, 265.1361083984375],
                             [1.1162877082824707, 5.814689636230469, 57.11627197265625, 61.814674377441406]]
            if not aligned and sampling == 2:
                pool = MultiScaleRoIAlign(["0", "1", "2", "3"], out, sampling)
                y = pool(OrderedDict((str(i), f) for i, f in enumerate(feats)), [torch.from_numpy(b) for b in boxes], image_shapes)
                first, levels, fl = 2, 4, feats
                name = "MultiScaleRoIAlign out=%d" % out
            else:
                # Plain roi_align on one level (aligned / adaptive sampling are not
                # MultiScaleRoIAlign options): level 2, scale 1/4.
                rois_t = torch.cat([torch.cat([torch.full((b.shape[0], 1), float(i)), torch.from_numpy(b)], 1) for i, b in enumerate(boxes)])
                y = roi_align(feats[0], rois_t, out, spatial_scale=0.25, sampling_ratio=sampling if sampling > 0 else -1, aligned=aligned)
                first, levels, fl = 2, 1, feats[:1]
                name = "roi_align out=%d sampling=%d aligned=%d" % (out, sampling, aligned)
            dy = torch.from_numpy(g.normal(0, 1, y.shape).astype(np.float32))
            y.backward(dy)
            rois = np.concatenate([np.concatenate([np.full((b.shape[0], 1), i, np.float32), b], 1) for i, b in enumerate(boxes)])
            rois = np.concatenate([rois, np.array([[-1, 0, 0, 50, 50]], np.float32)])  # a padding row
            dy_nhwc = np.concatenate([dy.permute(0, 2, 3, 1).numpy(), g.normal(0, 1, (1, out, out, C)).astype(np.float32)])
            r = Run()
            r.put("rois", rois)
            r.put("dy", dy_nhwc)
            for l, f in enumerate(fl):
                r.put("feat%d" % l, f.detach().permute(0, 2, 3, 1).numpy())
            r.call("roi_align", n=N, c=C, level_h=",".join(str(s[0]) for s in shapes[:levels]),
                   level_w=",".join(str(s[1]) for s in shapes[:levels]), first_level=first, out=out,
                   sampling=sampling, aligned=int(aligned))
            got = r.get("y").reshape(-1, out, out, C)
            e = rel_err(got[:-1], y.detach().permute(0, 2, 3, 1).numpy())
            pad_zero = not np.any(got[-1])
            eg = max(rel_err(r.get("dfeat%d" % l).reshape(N, shapes[l][0], shapes[l][1], C),
                             fl[l].grad.permute(0, 2, 3, 1).numpy()) for l in range(levels))
            check(name, e < 1e-5 and eg < 1e-5 and pad_zero,
                  "forward max rel err %.2e, backward %.2e, padding row zero %s" % (e, eg, pad_zero))


def blob_masks(g, n, H, W):
    yy, xx = np.mgrid[0:H, 0:W]
    out = np.zeros((n, H, W), np.uint8)
    for i in range(n):
        for _ in range(3):
            cy, cx = g.uniform(0, H), g.uniform(0, W)
            ry, rx = g.uniform(5, H / 3), g.uniform(5, W / 3)
            out[i] |= (((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1).astype(np.uint8)
    return out


def case_mask_targets(g):
    G, H, W, M = 4, 90, 120, 28
    masks = blob_masks(g, G, H, W)
    boxes = rand_boxes(g, 40, lo=-10, hi=110, min_wh=0.5, max_wh=90)
    idx = g.integers(0, G, 40).astype(np.int32)
    ref = project_masks_on_boxes(torch.from_numpy(masks), torch.from_numpy(boxes), torch.from_numpy(idx).long(), M).numpy()
    r = Run()
    r.put("masks", masks, np.uint8)
    r.put("boxes", boxes)
    r.put("gt_index", idx, np.int32)
    r.call("mask_targets", g=G, h=H, w=W, m=M)
    e = np.abs(r.get("targets").reshape(40, M, M) - ref).max()
    check("mask targets (project_masks_on_boxes)", e < 1e-5, "max abs err %.2e" % e)


def case_postprocess(g):
    K, R, M = 6, 300, 28
    H, W = 200, 240
    orig = (300, 350)
    heads = RoIHeads(None, None, None, 0.5, 0.5, 512, 0.25, (10.0, 10.0, 5.0, 5.0), 0.05, 0.5, 100)
    for trial in range(2):
        prop = rand_boxes(g, R, lo=-5, hi=190, min_wh=2, max_wh=90)
        logits = (g.normal(0, 2, (R, K))).astype(np.float32)
        deltas = g.normal(0, 1, (R, K * 4)).astype(np.float32)
        # Smooth mask logits: a coarse grid upsampled, so pasted masks have real shapes.
        coarse = torch.from_numpy(g.normal(0, 4, (100, K, 4, 4)).astype(np.float32))
        mlog = torch.nn.functional.interpolate(coarse, size=(M, M), mode="bilinear", align_corners=False)
        with torch.no_grad():
            b, s, l = heads.postprocess_detections(torch.from_numpy(logits), torch.from_numpy(deltas),
                                                   [torch.from_numpy(prop)], [(H, W)])
            n = b[0].shape[0]
            probs = maskrcnn_inference(mlog[:n], l)[0]
            bo = resize_boxes(b[0], (H, W), orig)
            pasted = paste_masks_in_image(probs, bo, orig).numpy()[:, 0]
        r = Run()
        r.put("logits", logits)
        r.put("deltas", deltas)
        r.put("proposals", prop)
        r.put("mask_logits", mlog.permute(0, 2, 3, 1).numpy())
        r.call("postprocess", k=K, r=R, h=H, w=W, m=M, score_thresh=0.05, nms=0.5, d=100, min_size=1e-2,
               orig_h=orig[0], orig_w=orig[1])
        gb = r.get("det_boxes").reshape(-1, 4)
        ok = gb.shape[0] == n and n > 10
        eb = rel_err(gb, b[0].numpy()) if ok else float("inf")
        es = rel_err(r.get("det_scores"), s[0].numpy()) if ok else float("inf")
        ok = ok and np.array_equal(r.get("det_labels", np.int32), l[0].numpy())
        eo = rel_err(r.get("det_boxes_orig").reshape(-1, 4), bo.numpy()) if ok else float("inf")
        check("postprocess_detections trial %d" % trial, ok and eb < 1e-5 and es < 1e-5 and eo < 1e-5,
              "%d vs %d detections, boxes %.2e, scores %.2e, rescaled %.2e" % (gb.shape[0], n, eb, es, eo))
        if not ok:
            continue
        gm = r.get("masks").reshape(n, orig[0], orig[1])
        em = np.abs(gm - pasted).max()
        gu = r.get("masks_u8", np.uint8).reshape(n, orig[0], orig[1])
        diff = int((gu != (pasted > 0.5)).sum())
        check("paste_masks_in_image", em < 1e-5 and diff == 0 and gu.sum() > 0,
              "max abs err %.2e, %d thresholded pixels differ, %d inside" % (em, diff, int(gu.sum())))


CASES = OrderedDict((k[5:], v) for k, v in list(globals().items()) if k.startswith("case_"))

if __name__ == "__main__":
    names = sys.argv[2:] or list(CASES)
    for name in names:
        CASES[name](np.random.default_rng(zlib.crc32(name.encode())))
    if FAILS:
        print("FAILED: " + ", ".join(FAILS))
        sys.exit(1)
    print("all detection parity checks passed")
