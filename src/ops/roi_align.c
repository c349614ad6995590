/* Multi-level ROIAlign over NHWC features with torchvision's CPU kernel semantics
 * (roi_align_kernel.cpp): per bin, a grid of sampling points, bilinear weights with the
 * same clamping at the borders, averaged. The level, frame, sampling points and taps
 * are box_math.h's, shared with the CUDA kernel. Compiled for float and double (ops_real.h).
 * Backward scatters into the features; threads split the channels, so every feature
 * element has one writer and the result does not depend on the thread count. The
 * backward by gather lists the contributions, sorts them by pixel and sums each pixel's
 * list (the CUDA backend's gather kernels do the same with the same listing). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mrcnn/box_math.h"
#include "mrcnn/roi_align.h"
#include "ops_real.h"

/* box_math.h's sampling for this file's real type. */
#ifdef MRCNN_OPS_F64
#define RS(name) mrcnn_##name##_f64
#else
#define RS(name) mrcnn_##name
#endif

/* One sampling point: 4 feature offsets (pixel index, times C later) and weights. */
typedef struct {
    int64_t pos[4];
    real w[4];
} roi_sample;

/* The roi's frame (grid size and divisor per bin), level and image through f, lvl, img;
 * 0 when the row is padding or the roi is empty (RS(roi_frame_make) says when). */
static int roi_locate(const mrcnn_roi_align_desc *d, const real *roi, RS(roi_frame) *f, int *lvl, int *img) {
    if (roi[0] < 0) return 0;
    /* The level in float, as torchvision; a non-finite box gets some level and is then
     * found empty by the frame. */
    const int l = mrcnn_roi_level((float)roi[1], (float)roi[2], (float)roi[3], (float)roi[4], d->canonical_level,
                                  d->canonical_scale, d->first_level, d->n_levels);
    if (!RS(roi_frame_make)(roi + 1, (real)d->spatial_scale[l], d->aligned, d->out_h, d->out_w, d->sampling_ratio, f))
        return 0;
    *lvl = l;
    *img = (int)roi[0];
    return 1;
}

/* roi_locate, and the sampling points of the roi for every bin, bin-major (ph, pw, iy,
 * ix) as the reference kernel visits them; a point outside the map gets zero weights. */
static int roi_prepare(const mrcnn_roi_align_desc *d, const real *roi, roi_sample **buf, int64_t *cap,
                       RS(roi_frame) *f, int *lvl, int *img) {
    int l;
    if (!roi_locate(d, roi, f, &l, img)) return 0;
    const int H = d->level_h[l], W = d->level_w[l];
    int64_t need = (int64_t)d->out_h * d->out_w * f->gh * f->gw;
    if (need > *cap) {
        free(*buf);
        *cap = need;
        *buf = MRCNN_MALLOC((size_t)need * sizeof(roi_sample), "roi_align sampling points");
    }
    roi_sample *s = *buf;
    for (int ph = 0; ph < d->out_h; ph++)
        for (int pw = 0; pw < d->out_w; pw++)
            for (int iy = 0; iy < f->gh; iy++) {
                const real y = RS(roi_sample_coord)(f->y0, f->bh, ph, iy, f->gh);
                for (int ix = 0; ix < f->gw; ix++, s++) {
                    const real x = RS(roi_sample_coord)(f->x0, f->bw, pw, ix, f->gw);
                    if (!RS(bilinear_taps)(y, x, H, W, s->pos, s->w))
                        for (int k = 0; k < 4; k++) {
                            s->pos[k] = 0;
                            s->w[k] = 0;
                        }
                }
            }
    *lvl = l;
    return 1;
}

#ifndef MRCNN_OPS_F64
/* Type-independent: compiled with the float op only. */
void mrcnn_roi_align_desc_check(const mrcnn_roi_align_desc *d) {
    MRCNN_CHECK(d, "roi_align: NULL descriptor");
    MRCNN_CHECK(d->n_images > 0 && d->channels > 0, "roi_align: images %d and channels %d must be positive",
                d->n_images, d->channels);
    MRCNN_CHECK(d->n_levels > 0 && d->n_levels <= MRCNN_ROI_MAX_LEVELS, "roi_align: %d levels, must be in [1, %d]",
                d->n_levels, MRCNN_ROI_MAX_LEVELS);
    for (int l = 0; l < d->n_levels; l++) {
        MRCNN_CHECK(d->level_h[l] > 0 && d->level_w[l] > 0, "roi_align: level %d is %dx%d, must be positive", l,
                    d->level_h[l], d->level_w[l]);
        MRCNN_CHECK(d->spatial_scale[l] > 0, "roi_align: level %d scale %g must be positive", l,
                    (double)d->spatial_scale[l]);
    }
    MRCNN_CHECK(d->out_h > 0 && d->out_w > 0, "roi_align: output %dx%d must be positive", d->out_h, d->out_w);
    MRCNN_CHECK(d->canonical_scale > 0, "roi_align: canonical scale %g must be positive", (double)d->canonical_scale);
}
#endif

static void roi_align_check(const mrcnn_roi_align_desc *d, int64_t r, const real *rois, const void *y) {
    mrcnn_roi_align_desc_check(d);
    MRCNN_CHECK(r >= 0, "roi_align: negative roi count %lld", (long long)r);
    MRCNN_CHECK(r == 0 || (rois && y), "roi_align: NULL rois or output");
    /* Checked here, outside the parallel loops, so that a failure unwinds cleanly. */
    for (int64_t i = 0; i < r; i++)
        MRCNN_CHECK(rois[5 * i] < (real)d->n_images, "roi_align: roi %lld has image index %g outside [0, %d)",
                    (long long)i, (double)rois[5 * i], d->n_images);
}

void MRCNN_OP(roi_align_forward)(const mrcnn_roi_align_desc *d, const real *const *feats, int64_t r, const real *rois,
                             real *y) {
    roi_align_check(d, r, rois, y);
    MRCNN_CHECK(feats, "roi_align_forward: NULL feature list");
    for (int l = 0; l < d->n_levels; l++) MRCNN_CHECK(feats[l], "roi_align_forward: NULL feature level %d", l);
    const int C = d->channels;
    const int64_t bins = (int64_t)d->out_h * d->out_w;
    /* Small calls stay on one thread: forking costs more than the work. */
#pragma omp parallel if (r * bins * C >= OPS_OMP_MIN)
    {
        roi_sample *buf = NULL;
        int64_t cap = 0;
        real *acc = MRCNN_MALLOC((size_t)C * sizeof(real), "roi_align accumulator");
#pragma omp for schedule(dynamic, 4)
        for (int64_t i = 0; i < r; i++) {
            real *out = y + i * bins * C;
            RS(roi_frame) fr;
            int l, b;
            if (!roi_prepare(d, rois + 5 * i, &buf, &cap, &fr, &l, &b)) {
                for (int64_t k = 0; k < bins * C; k++) out[k] = 0;
                continue;
            }
            const real *f = feats[l] + (int64_t)b * d->level_h[l] * d->level_w[l] * C;
            const int per_bin = fr.gh * fr.gw;
            const int cnt = fr.count;
            const roi_sample *s = buf;
            for (int64_t bin = 0; bin < bins; bin++) {
                for (int c = 0; c < C; c++) acc[c] = 0;
                for (int k = 0; k < per_bin; k++, s++) {
                    const real *p0 = f + s->pos[0] * C, *p1 = f + s->pos[1] * C;
                    const real *p2 = f + s->pos[2] * C, *p3 = f + s->pos[3] * C;
                    const real w0 = s->w[0], w1 = s->w[1], w2 = s->w[2], w3 = s->w[3];
                    for (int c = 0; c < C; c++) acc[c] += w0 * p0[c] + w1 * p1[c] + w2 * p2[c] + w3 * p3[c];
                }
                for (int c = 0; c < C; c++) out[bin * C + c] = acc[c] / (real)cnt;
            }
        }
        free(buf);
        free(acc);
    }
}

void MRCNN_OP(roi_align_backward)(const mrcnn_roi_align_desc *d, int64_t r, const real *rois, const real *dy,
                              real *const *dfeats) {
    roi_align_check(d, r, rois, dy);
    MRCNN_CHECK(dfeats, "roi_align_backward: NULL gradient list");
    const int C = d->channels;
    const int64_t bins = (int64_t)d->out_h * d->out_w;
    /* One channel block per thread: each feature element has exactly one writer, the
     * sum order per element is the same for any thread count, and the blocks stay wide
     * enough to vectorize. Each block recomputes the sampling points (cheap). */
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    int block = (C + threads - 1) / threads;
    block = (block + 15) / 16 * 16;
    const int n_blocks = (C + block - 1) / block;
#pragma omp parallel if (r * bins * C >= OPS_OMP_MIN)
    {
        roi_sample *buf = NULL;
        int64_t cap = 0;
#pragma omp for schedule(static)
        for (int cb = 0; cb < n_blocks; cb++) {
            const int c0 = cb * block, c1 = c0 + block < C ? c0 + block : C;
            for (int64_t i = 0; i < r; i++) {
                RS(roi_frame) fr;
                int l, b;
                if (!roi_prepare(d, rois + 5 * i, &buf, &cap, &fr, &l, &b)) continue;
                if (!dfeats[l]) continue;
                real *g = dfeats[l] + (int64_t)b * d->level_h[l] * d->level_w[l] * C;
                const int per_bin = fr.gh * fr.gw;
                const real cnt = (real)fr.count;
                const roi_sample *s = buf;
                const real *gy = dy + i * bins * C;
                for (int64_t bin = 0; bin < bins; bin++) {
                    for (int k = 0; k < per_bin; k++, s++) {
                        for (int q = 0; q < 4; q++) {
                            if (s->w[q] == 0) continue;
                            real *gp = g + s->pos[q] * C;
                            const real w = s->w[q];
                            for (int c = c0; c < c1; c++) gp[c] += gy[bin * C + c] * w / cnt;
                        }
                    }
                }
            }
        }
        free(buf);
    }
}

/* ---- backward by gather ------------------------------------------------------------------ */

#ifndef MRCNN_OPS_F64
/* Type-independent: compiled with the float op only. */
int mrcnn_roi_align_bwd_gather(void) {
    const char *v = getenv("MRCNN_ROI_BWD");
    if (!v || !*v || !strcmp(v, "scatter")) return 0;
    MRCNN_CHECK(!strcmp(v, "gather"), "MRCNN_ROI_BWD=%s: must be scatter or gather", v);
    return 1;
}
#endif

/* The contributions of the backward by gather, in listing order: the feature pixel each
 * reaches (an index over the pixels of every level with a gradient), the dy row it reads
 * (roi * bins + bin) and its weight (merged taps over the bin's count). */
typedef struct {
    int64_t *key, *row; // (n)
    real *w;            // (n)
    int64_t n, cap;
} roi_contribs;

static void contribs_reserve(roi_contribs *c, int64_t more) {
    if (c->n + more <= c->cap) return;
    int64_t cap = c->cap ? c->cap : 1024;
    while (cap < c->n + more) cap *= 2;
    c->key = MRCNN_REALLOC(c->key, (size_t)cap * sizeof(int64_t), "roi_align gather keys");
    c->row = MRCNN_REALLOC(c->row, (size_t)cap * sizeof(int64_t), "roi_align gather rows");
    c->w = MRCNN_REALLOC(c->w, (size_t)cap * sizeof(real), "roi_align gather weights");
    c->cap = cap;
}

/* Phase 1: every roi's bins, each bin's taps merged per pixel (box_math.h, the listing
 * the CUDA kernel makes), in (roi, bin, first-seen) order. base[l]: the index of level
 * l's first pixel, -1 for a level without a gradient. */
static void gather_list(const mrcnn_roi_align_desc *d, int64_t r, const real *rois, const int64_t *base,
                        roi_contribs *c) {
    const int64_t bins = (int64_t)d->out_h * d->out_w;
    int64_t *pix = NULL;
    real *w = NULL;
    int64_t cap = 0;
    for (int64_t i = 0; i < r; i++) {
        RS(roi_frame) f;
        int l, b;
        if (!roi_locate(d, rois + 5 * i, &f, &l, &b) || base[l] < 0) continue;
        const int H = d->level_h[l], W = d->level_w[l];
        const int64_t per_bin = 4 * (int64_t)f.gh * f.gw;
        if (per_bin > cap) {
            cap = per_bin;
            pix = MRCNN_REALLOC(pix, (size_t)cap * sizeof(int64_t), "roi_align gather taps");
            w = MRCNN_REALLOC(w, (size_t)cap * sizeof(real), "roi_align gather tap weights");
        }
        const int64_t img0 = base[l] + (int64_t)b * H * W;
        for (int ph = 0; ph < d->out_h; ph++)
            for (int pw = 0; pw < d->out_w; pw++) {
                const int n = RS(roi_bin_merged_taps)(&f, H, W, ph, pw, pix, w);
                contribs_reserve(c, n);
                for (int j = 0; j < n; j++, c->n++) {
                    c->key[c->n] = img0 + pix[j];
                    c->row[c->n] = i * bins + (int64_t)ph * d->out_w + pw;
                    c->w[c->n] = w[j];
                }
            }
    }
    free(pix);
    free(w);
}

/* Phase 2: a stable counting sort by pixel. Pixel p's contributions end up in
 * [begin[p], begin[p + 1]) of row and w, in listing order. begin (n_pix + 1). */
static void gather_sort(const roi_contribs *c, int64_t n_pix, int64_t *begin, int64_t *row, real *w) {
    memset(begin, 0, (size_t)(n_pix + 1) * sizeof(int64_t));
    for (int64_t e = 0; e < c->n; e++) begin[c->key[e] + 1]++;
    for (int64_t p = 0; p < n_pix; p++) begin[p + 1] += begin[p];
    int64_t *next = MRCNN_MALLOC((size_t)(n_pix + 1) * sizeof(int64_t), "roi_align gather cursors");
    memcpy(next, begin, (size_t)(n_pix + 1) * sizeof(int64_t));
    for (int64_t e = 0; e < c->n; e++) {
        const int64_t k = next[c->key[e]]++;
        row[k] = c->row[e];
        w[k] = c->w[e];
    }
    free(next);
}

/* Phase 3: each pixel's list summed per channel in list order, then added to dfeats in
 * one rounding. A pixel is one thread's, so there is no shared write and the result does
 * not depend on the thread count. */
static void gather_sum(const mrcnn_roi_align_desc *d, const int64_t *base, const int64_t *begin, const int64_t *row,
                       const real *w, int64_t n, const real *dy, real *const *dfeats) {
    const int C = d->channels;
#pragma omp parallel if (n * C >= OPS_OMP_MIN)
    {
        real *acc = MRCNN_MALLOC((size_t)C * sizeof(real), "roi_align gather accumulator");
        for (int l = 0; l < d->n_levels; l++) {
            if (base[l] < 0) continue;
            const int64_t n_pix = (int64_t)d->n_images * d->level_h[l] * d->level_w[l];
            const int64_t *seg = begin + base[l];
#pragma omp for schedule(dynamic, 256)
            for (int64_t p = 0; p < n_pix; p++) {
                if (seg[p] == seg[p + 1]) continue;
                for (int c = 0; c < C; c++) acc[c] = 0;
                for (int64_t k = seg[p]; k < seg[p + 1]; k++) {
                    const real *gy = dy + row[k] * C, wk = w[k];
                    for (int c = 0; c < C; c++) acc[c] += gy[c] * wk;
                }
                real *g = dfeats[l] + p * C;
                for (int c = 0; c < C; c++) g[c] += acc[c];
            }
        }
        free(acc);
    }
}

void MRCNN_OP(roi_align_backward_gather)(const mrcnn_roi_align_desc *d, int64_t r, const real *rois, const real *dy,
                                     real *const *dfeats) {
    roi_align_check(d, r, rois, dy);
    MRCNN_CHECK(dfeats, "roi_align_backward: NULL gradient list");
    int64_t base[MRCNN_ROI_MAX_LEVELS], n_pix = 0;
    for (int l = 0; l < d->n_levels; l++) {
        base[l] = dfeats[l] ? n_pix : -1;
        if (dfeats[l]) n_pix += (int64_t)d->n_images * d->level_h[l] * d->level_w[l];
    }
    roi_contribs c = {0};
    gather_list(d, r, rois, base, &c);
    int64_t *begin = MRCNN_MALLOC((size_t)(n_pix + 1) * sizeof(int64_t), "roi_align gather segments");
    int64_t *row = MRCNN_MALLOC((size_t)(c.n + 1) * sizeof(int64_t), "roi_align gather sorted rows");
    real *w = MRCNN_MALLOC((size_t)(c.n + 1) * sizeof(real), "roi_align gather sorted weights");
    gather_sort(&c, n_pix, begin, row, w);
    free(c.key);
    free(c.row);
    free(c.w);
    gather_sum(d, base, begin, row, w, c.n, dy, dfeats);
    free(begin);
    free(row);
    free(w);
}
