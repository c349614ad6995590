/* Multi-level ROIAlign over NHWC features with torchvision's CPU kernel semantics
 * (roi_align_kernel.cpp): per bin, a grid of sampling points, bilinear weights with the
 * same clamping at the borders, averaged. Compiled for float and double (ops_real.h).
 * Backward scatters into the features; threads split the channels, so every feature
 * element has one writer and the result does not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mrcnn/roi_align.h"
#include "ops_real.h"

#define ROI_ALIGN_MAX_GRID MRCNN_ROI_ALIGN_MAX_GRID

/* One sampling point: 4 feature offsets (pixel index, times C later) and weights. */
typedef struct {
    int64_t pos[4];
    real w[4];
} roi_sample;

/* The sampling points of one roi for every bin, bin-major (ph, pw, iy, ix) as the
 * reference kernel visits them. Returns the grid size per bin through gh, gw and
 * the roi's level and image through lvl, img; 0 when the row is padding or the roi is
 * empty: a non-finite coordinate, a size that overflows, an adaptive grid that is not
 * positive (an inverted aligned box: torchvision's sum over no samples, 0) or larger
 * than ROI_ALIGN_MAX_GRID. Every float -> int conversion below is of a value checked to
 * be finite and in range first (a NaN cast to int is undefined behaviour). */
static int roi_prepare(const mrcnn_roi_align_desc *d, const real *roi, roi_sample **buf, int64_t *cap, int *gh,
                       int *gw, int *lvl, int *img) {
    if (roi[0] < 0) return 0;
    for (int c = 1; c <= 4; c++)
        if (!isfinite(roi[c])) return 0;
    int b = (int)roi[0];
    float box[4] = {(float)roi[1], (float)roi[2], (float)roi[3], (float)roi[4]};
    int l = mrcnn_roi_align_level(d, box);
    const int H = d->level_h[l], W = d->level_w[l];
    const real scale = (real)d->spatial_scale[l];
    const real offset = d->aligned ? (real)0.5 : (real)0.0;
    real x0 = roi[1] * scale - offset, y0 = roi[2] * scale - offset;
    real x1 = roi[3] * scale - offset, y1 = roi[4] * scale - offset;
    real rw = x1 - x0, rh = y1 - y0;
    if (!isfinite(rw) || !isfinite(rh)) return 0;
    if (!d->aligned) {
        rw = rw > (real)1 ? rw : (real)1;
        rh = rh > (real)1 ? rh : (real)1;
    }
    real bh = rh / (real)d->out_h, bw = rw / (real)d->out_w;
    int grid_h = d->sampling_ratio, grid_w = d->sampling_ratio;
    if (d->sampling_ratio <= 0) {
        const real fh = ceil(rh / (real)d->out_h), fw = ceil(rw / (real)d->out_w);
        if (!(fh >= 1 && fw >= 1 && fh <= ROI_ALIGN_MAX_GRID && fw <= ROI_ALIGN_MAX_GRID)) return 0;
        grid_h = (int)fh;
        grid_w = (int)fw;
    }
    int64_t need = (int64_t)d->out_h * d->out_w * grid_h * grid_w;
    if (need > *cap) {
        free(*buf);
        *cap = need;
        *buf = MRCNN_MALLOC((size_t)need * sizeof(roi_sample), "roi_align sampling points");
    }
    roi_sample *s = *buf;
    for (int ph = 0; ph < d->out_h; ph++)
        for (int pw = 0; pw < d->out_w; pw++)
            for (int iy = 0; iy < grid_h; iy++) {
                const real yy = y0 + (real)ph * bh + (real)(iy + .5f) * bh / (real)grid_h;
                for (int ix = 0; ix < grid_w; ix++, s++) {
                    const real xx = x0 + (real)pw * bw + (real)(ix + .5f) * bw / (real)grid_w;
                    real y = yy, x = xx;
                    /* Outside the feature map (or not a number): no contribution. */
                    if (!(y >= (real)-1.0 && y <= (real)H && x >= (real)-1.0 && x <= (real)W)) {
                        for (int k = 0; k < 4; k++) {
                            s->pos[k] = 0;
                            s->w[k] = 0;
                        }
                        continue;
                    }
                    if (y <= 0) y = 0;
                    if (x <= 0) x = 0;
                    int yl = (int)y, xl = (int)x, yh, xh;
                    if (yl >= H - 1) {
                        yh = yl = H - 1;
                        y = (real)yl;
                    } else {
                        yh = yl + 1;
                    }
                    if (xl >= W - 1) {
                        xh = xl = W - 1;
                        x = (real)xl;
                    } else {
                        xh = xl + 1;
                    }
                    real ly = y - (real)yl, lx = x - (real)xl;
                    real hy = (real)1. - ly, hx = (real)1. - lx;
                    s->w[0] = hy * hx;
                    s->w[1] = hy * lx;
                    s->w[2] = ly * hx;
                    s->w[3] = ly * lx;
                    s->pos[0] = (int64_t)yl * W + xl;
                    s->pos[1] = (int64_t)yl * W + xh;
                    s->pos[2] = (int64_t)yh * W + xl;
                    s->pos[3] = (int64_t)yh * W + xh;
                }
            }
    *gh = grid_h;
    *gw = grid_w;
    *lvl = l;
    *img = b;
    return 1;
}

static void roi_align_check(const mrcnn_roi_align_desc *d, int64_t r, const real *rois, const void *y) {
    mrcnn_roi_align_desc_check(d);
    MRCNN_CHECK(r >= 0, "roi_align: negative roi count %lld", (long long)r);
    MRCNN_CHECK(r == 0 || (rois && y), "roi_align: NULL rois or output");
    /* Checked here, outside the parallel loops, so that a failure unwinds cleanly. */
    for (int64_t i = 0; i < r; i++)
        MRCNN_CHECK(rois[5 * i] < (real)d->n_images, "roi_align: roi %lld has image index %g outside [0, %d)",
                    (long long)i, (double)rois[5 * i], d->n_images);
}

void OP(roi_align_forward)(const mrcnn_roi_align_desc *d, const real *const *feats, int64_t r, const real *rois,
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
            int gh, gw, l, b;
            if (!roi_prepare(d, rois + 5 * i, &buf, &cap, &gh, &gw, &l, &b)) {
                for (int64_t k = 0; k < bins * C; k++) out[k] = 0;
                continue;
            }
            const real *f = feats[l] + (int64_t)b * d->level_h[l] * d->level_w[l] * C;
            const int per_bin = gh * gw;
            int cnt = per_bin > 1 ? per_bin : 1;
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

void OP(roi_align_backward)(const mrcnn_roi_align_desc *d, int64_t r, const real *rois, const real *dy,
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
                int gh, gw, l, b;
                if (!roi_prepare(d, rois + 5 * i, &buf, &cap, &gh, &gw, &l, &b)) continue;
                if (!dfeats[l]) continue;
                real *g = dfeats[l] + (int64_t)b * d->level_h[l] * d->level_w[l] * C;
                const int per_bin = gh * gw;
                const real cnt = (real)(per_bin > 1 ? per_bin : 1);
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
