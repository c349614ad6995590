/* The box math of the detector, one implementation for the CPU and the CUDA backend:
 * pairwise IoU, anchor grids, torchvision's box coder and clipping, the FPN level of a roi
 * (LevelMapper), ROIAlign's sampling (bin grid, sampling points, bilinear taps) and
 * the mask targets' ROIAlign of a binary mask.
 * Like rng.h this is inline on purpose: the host code is the reference the kernels are
 * tested against bit for bit, and separate copies had drifted (NaN handling,
 * FMA contraction). Semantics: torchvision v0.14, in float and in its order of
 * operations; boxes are (x1, y1, x2, y2), width x2 - x1.
 *
 * Every a * b feeding an addition goes through MRCNN_MUL_RN / MRCNN_ADD_RN: on the
 * device these are the round-to-nearest intrinsics, which nvcc never contracts into an
 * FMA, so a kernel rounds exactly as the host does (gcc does not contract in C11 mode);
 * divisions go through MRCNN_DIV_RN, IEEE on the device whatever the division flags.
 * Left: the device's logf, expf and log2f, which may differ from glibc's by an ulp. */
#ifndef MRCNN_BOX_MATH_H
#define MRCNN_BOX_MATH_H

#include <math.h>
#include <stdint.h>

#include "mrcnn/rng.h"       // MRCNN_HD: static inline, and __host__ __device__ under nvcc
#include "mrcnn/roi_align.h" // MRCNN_ROI_ALIGN_MAX_GRID

/* Type-generic on the host (the double ROIAlign below uses them too), float on the
 * device, where only the float forms exist. */
#ifdef __CUDA_ARCH__
#define MRCNN_MUL_RN(a, b) __fmul_rn((a), (b))
#define MRCNN_ADD_RN(a, b) __fadd_rn((a), (b))
#define MRCNN_SUB_RN(a, b) __fsub_rn((a), (b))
#define MRCNN_DIV_RN(a, b) __fdiv_rn((a), (b)) // IEEE even if fast division is ever switched on
#else
#define MRCNN_MUL_RN(a, b) ((a) * (b))
#define MRCNN_ADD_RN(a, b) ((a) + (b))
#define MRCNN_SUB_RN(a, b) ((a) - (b))
#define MRCNN_DIV_RN(a, b) ((a) / (b))
#endif

/* ---- IoU ---------------------------------------------------------------------------- */

MRCNN_HD float mrcnn_box_area(const float *b) { return MRCNN_MUL_RN(b[2] - b[0], b[3] - b[1]); }

/* IoU of p and q given their areas (callers comparing one box with many hoist its
 * area), in torchvision's _box_inter_union order: inter / (area_p + area_q - inter).
 * 0/0 (two empty boxes) is NaN, as in torchvision. */
MRCNN_HD float mrcnn_box_iou_areas(const float *p, float area_p, const float *q, float area_q) {
    float w = (p[2] < q[2] ? p[2] : q[2]) - (p[0] > q[0] ? p[0] : q[0]);
    float h = (p[3] < q[3] ? p[3] : q[3]) - (p[1] > q[1] ? p[1] : q[1]);
    w = w > 0.0f ? w : 0.0f;
    h = h > 0.0f ? h : 0.0f;
    const float inter = MRCNN_MUL_RN(w, h);
    return MRCNN_DIV_RN(inter, MRCNN_SUB_RN(MRCNN_ADD_RN(area_p, area_q), inter));
}

MRCNN_HD float mrcnn_box_iou_pair(const float *p, const float *q) {
    return mrcnn_box_iou_areas(p, mrcnn_box_area(p), q, mrcnn_box_area(q));
}

/* ---- anchors ---------------------------------------------------------------------------- */

/* Coordinate k (x1, y1, x2, y2) of cell anchor a shifted to grid cell (y, x): torchvision's
 * shifts (x * stride_w, y * stride_h) plus the rounded, zero-centered cell anchor. */
MRCNN_HD float mrcnn_anchor_coord(const float *cell, int a, int k, int y, int x, int stride_h, int stride_w) {
    const float shift = (k & 1) ? (float)(y * stride_h) : (float)(x * stride_w);
    return shift + cell[4 * a + k];
}

/* ---- box coder ------------------------------------------------------------------------ */

/* torchvision's BoxCoder: deltas (dx, dy, dw, dh) = (wx, wy, ww, wh) * ((gx - px) / pw,
 * (gy - py) / ph, log(gw / pw), log(gh / ph)) with centers x1 + 0.5 w. Decode clamps
 * dw, dh (after dividing by the weights) at `clip` = log(1000 / 16). */
typedef struct mrcnn_box_coder {
    float wx, wy, ww, wh; // (1, 1, 1, 1) for the RPN, (10, 10, 5, 5) for the ROI heads
    float clip;
} mrcnn_box_coder;

/* delta encodes target relative to box (torchvision's encode_single(target, box)). */
MRCNN_HD void mrcnn_box_encode_one(const mrcnn_box_coder *c, const float *target, const float *box, float *delta) {
    const float ew = box[2] - box[0], eh = box[3] - box[1];
    const float ex = MRCNN_ADD_RN(box[0], MRCNN_MUL_RN(0.5f, ew)), ey = MRCNN_ADD_RN(box[1], MRCNN_MUL_RN(0.5f, eh));
    const float gw = target[2] - target[0], gh = target[3] - target[1];
    const float gx = MRCNN_ADD_RN(target[0], MRCNN_MUL_RN(0.5f, gw));
    const float gy = MRCNN_ADD_RN(target[1], MRCNN_MUL_RN(0.5f, gh));
    delta[0] = MRCNN_DIV_RN(MRCNN_MUL_RN(c->wx, gx - ex), ew);
    delta[1] = MRCNN_DIV_RN(MRCNN_MUL_RN(c->wy, gy - ey), eh);
    delta[2] = MRCNN_MUL_RN(c->ww, logf(MRCNN_DIV_RN(gw, ew)));
    delta[3] = MRCNN_MUL_RN(c->wh, logf(MRCNN_DIV_RN(gh, eh)));
}

/* out = delta applied to box (decode_single); out may alias delta: all of delta is
 * read first. A NaN dw passes the clamp, as in torch.clamp. */
MRCNN_HD void mrcnn_box_decode_one(const mrcnn_box_coder *c, const float *delta, const float *box, float *out) {
    const float w = box[2] - box[0], h = box[3] - box[1];
    const float cx = MRCNN_ADD_RN(box[0], MRCNN_MUL_RN(0.5f, w)), cy = MRCNN_ADD_RN(box[1], MRCNN_MUL_RN(0.5f, h));
    const float dx = MRCNN_DIV_RN(delta[0], c->wx), dy = MRCNN_DIV_RN(delta[1], c->wy);
    float dw = MRCNN_DIV_RN(delta[2], c->ww), dh = MRCNN_DIV_RN(delta[3], c->wh);
    dw = dw > c->clip ? c->clip : dw;
    dh = dh > c->clip ? c->clip : dh;
    const float px = MRCNN_ADD_RN(MRCNN_MUL_RN(dx, w), cx), py = MRCNN_ADD_RN(MRCNN_MUL_RN(dy, h), cy);
    const float pw = MRCNN_MUL_RN(expf(dw), w), ph = MRCNN_MUL_RN(expf(dh), h);
    const float hw = MRCNN_MUL_RN(0.5f, pw), hh = MRCNN_MUL_RN(0.5f, ph);
    out[0] = MRCNN_SUB_RN(px, hw);
    out[1] = MRCNN_SUB_RN(py, hh);
    out[2] = MRCNN_ADD_RN(px, hw);
    out[3] = MRCNN_ADD_RN(py, hh);
}

/* One coordinate clamped to [0, hi] (clip_boxes_to_image); NaN stays NaN. */
MRCNN_HD float mrcnn_box_clamp(float v, float hi) { return v < 0.0f ? 0.0f : (v > hi ? hi : v); }

/* ---- FPN level of a roi ------------------------------------------------------------------ */

/* torchvision's LevelMapper (FPN paper eq. 1), 0-based among n_levels levels that start
 * at first_level: floor(canonical_level + log2(sqrt(area) / canonical_scale) + 1e-6),
 * clamped, in float and in that order. An empty or NaN box gives -inf or NaN and the
 * lowest level, as torch.clamp does. */
MRCNN_HD int mrcnn_roi_level(float x1, float y1, float x2, float y2, int canonical_level, float canonical_scale,
                             int first_level, int n_levels) {
    if (n_levels == 1) return 0;
    const float box[4] = {x1, y1, x2, y2};
    const float s = sqrtf(mrcnn_box_area(box));
    const float lvl = floorf(((float)canonical_level + log2f(MRCNN_DIV_RN(s, canonical_scale))) + 1e-6f);
    const int kmin = first_level, kmax = first_level + n_levels - 1;
    if (!(lvl >= (float)kmin)) return 0;
    if (lvl > (float)kmax) return kmax - kmin;
    return (int)lvl - kmin;
}

/* ---- ROIAlign sampling -------------------------------------------------------------------- */

/* For float: mrcnn_roi_frame, mrcnn_roi_frame_make, mrcnn_roi_sample_coord,
 * mrcnn_bilinear_taps. */
#define MRCNN_BM_REAL float
#define MRCNN_BM(name) mrcnn_##name
#define MRCNN_BM_CEIL ceilf
#include "mrcnn/roi_sample.inc"
#undef MRCNN_BM_REAL
#undef MRCNN_BM
#undef MRCNN_BM_CEIL

/* For double, host only: the same names with _f64, for the double ROIAlign of the
 * finite-difference tests (src/ops/roi_align.c compiled with MRCNN_OPS_F64). */
#ifndef __CUDACC__
#define MRCNN_BM_REAL double
#define MRCNN_BM(name) mrcnn_##name##_f64
#define MRCNN_BM_CEIL ceil
#include "mrcnn/roi_sample.inc"
#undef MRCNN_BM_REAL
#undef MRCNN_BM
#undef MRCNN_BM_CEIL
#endif

/* ---- mask targets: ROIAlign of a binary mask -------------------------------------------- */

/* The uint8 mask m (H x W, nonzero inside) read bilinearly at (y, x) as ROIAlign reads
 * a feature map, so no float copy of a full-image mask is needed; the taps' weighted sum
 * left to right, as in torchvision's kernel. */
MRCNN_HD float mrcnn_mask_bilinear(const uint8_t *m, int H, int W, float y, float x) {
    int64_t pos[4];
    float w[4];
    if (!mrcnn_bilinear_taps(y, x, H, W, pos, w)) return 0.0f;
    float acc = MRCNN_MUL_RN(w[0], m[pos[0]] ? 1.0f : 0.0f);
    for (int k = 1; k < 4; k++) acc = MRCNN_ADD_RN(acc, MRCNN_MUL_RN(w[k], m[pos[k]] ? 1.0f : 0.0f));
    return acc;
}

/* Bin (ph, pw) of frame f over mask m: the mean of its sampling points. */
MRCNN_HD float mrcnn_mask_roi_bin(const uint8_t *m, int H, int W, const mrcnn_roi_frame *f, int ph, int pw) {
    float acc = 0.0f;
    for (int iy = 0; iy < f->gh; iy++) {
        const float y = mrcnn_roi_sample_coord(f->y0, f->bh, ph, iy, f->gh);
        for (int ix = 0; ix < f->gw; ix++) {
            const float x = mrcnn_roi_sample_coord(f->x0, f->bw, pw, ix, f->gw);
            acc = MRCNN_ADD_RN(acc, mrcnn_mask_bilinear(m, H, W, y, x));
        }
    }
    return MRCNN_DIV_RN(acc, (float)f->count);
}

/* ---- compact ground truth: a mask kept as the rectangle around its nonzero pixels ---- */

/* A gt mask of an h_img x w_img image kept as rows [y0, y0 + h) and columns [x0, x0 + w)
 * of it, row-major with row `stride` at byte `offset` of a pool; every pixel outside is
 * zero, so reading it as the full mask gives the very same values (h = w = 0: an empty
 * mask). The staged batch keeps MRCNN_MASK_CROP_WORDS int32 per mask: offset, y0, x0, h,
 * w (stride = w); a full-size mask is the crop (0, 0, h_img, w_img) with the batch's
 * row stride. */
#define MRCNN_MASK_CROP_WORDS 5
typedef struct mrcnn_mask_crop {
    int64_t offset;
    int y0, x0, h, w, stride;
} mrcnn_mask_crop;

MRCNN_HD mrcnn_mask_crop mrcnn_mask_crop_load(const int32_t *words) {
    mrcnn_mask_crop c;
    c.offset = words[0];
    c.y0 = words[1];
    c.x0 = words[2];
    c.h = words[3];
    c.w = words[4];
    c.stride = words[4];
    return c;
}

/* Pixel (y, x) of the image, from the crop. */
MRCNN_HD float mrcnn_mask_crop_at(const uint8_t *pool, const mrcnn_mask_crop *c, int y, int x) {
    const unsigned ry = (unsigned)(y - c->y0), rx = (unsigned)(x - c->x0);
    return ry < (unsigned)c->h && rx < (unsigned)c->w && pool[c->offset + (int64_t)ry * c->stride + rx] ? 1.0f : 0.0f;
}

/* mrcnn_mask_bilinear over the crop of an H x W image mask: the same taps, weights and
 * sum, so the same float. */
MRCNN_HD float mrcnn_mask_crop_bilinear(const uint8_t *pool, const mrcnn_mask_crop *c, int H, int W, float y,
                                        float x) {
    int rc[4];
    float w[4];
    if (!mrcnn_bilinear_corners(y, x, H, W, rc, w)) return 0.0f;
    float acc = MRCNN_MUL_RN(w[0], mrcnn_mask_crop_at(pool, c, rc[0], rc[2]));
    acc = MRCNN_ADD_RN(acc, MRCNN_MUL_RN(w[1], mrcnn_mask_crop_at(pool, c, rc[0], rc[3])));
    acc = MRCNN_ADD_RN(acc, MRCNN_MUL_RN(w[2], mrcnn_mask_crop_at(pool, c, rc[1], rc[2])));
    acc = MRCNN_ADD_RN(acc, MRCNN_MUL_RN(w[3], mrcnn_mask_crop_at(pool, c, rc[1], rc[3])));
    return acc;
}

/* mrcnn_mask_roi_bin over the crop. */
MRCNN_HD float mrcnn_mask_crop_roi_bin(const uint8_t *pool, const mrcnn_mask_crop *c, int H, int W,
                                       const mrcnn_roi_frame *f, int ph, int pw) {
    float acc = 0.0f;
    for (int iy = 0; iy < f->gh; iy++) {
        const float y = mrcnn_roi_sample_coord(f->y0, f->bh, ph, iy, f->gh);
        for (int ix = 0; ix < f->gw; ix++) {
            const float x = mrcnn_roi_sample_coord(f->x0, f->bw, pw, ix, f->gw);
            acc = MRCNN_ADD_RN(acc, mrcnn_mask_crop_bilinear(pool, c, H, W, y, x));
        }
    }
    return MRCNN_DIV_RN(acc, (float)f->count);
}

#endif
