/* Multi-level ROIAlign (roi_align.h) on the GPU: all images and levels in one
 * launch, one thread per output element (roi, ph, pw, c), channels fastest so that
 * NHWC reads coalesce. The arithmetic follows src/ops/roi_align.c (torchvision's
 * kernel) step by step, in float. The backward scatters with atomicAdd; for fp16 or
 * bf16 features it accumulates into an fp32 scratch first, so each gradient element
 * is rounded once, as the CPU's rounded-storage mode does. */
#include <math.h>
#include <string.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"

#define CU_THREADS 256

typedef struct {
    const void *f[MRCNN_ROI_MAX_LEVELS]; // (N, H_l, W_l, C) each
    float *g[MRCNN_ROI_MAX_LEVELS];      // fp32 gradient targets, NULL: skipped
    int h[MRCNN_ROI_MAX_LEVELS], w[MRCNN_ROI_MAX_LEVELS];
    float scale[MRCNN_ROI_MAX_LEVELS];
    int n_levels, first_level, canonical_level, n_images, c, out_h, out_w, sampling_ratio, aligned;
    float canonical_scale;
} ra_args;

static __device__ int ra_level(const ra_args *a, float x1, float y1, float x2, float y2) {
    if (a->n_levels == 1) return 0;
    float area = (x2 - x1) * (y2 - y1);
    float s = sqrtf(area);
    float lvl = floorf(((float)a->canonical_level + log2f(s / a->canonical_scale)) + 1e-6f);
    int kmin = a->first_level, kmax = a->first_level + a->n_levels - 1;
    if (!(lvl >= (float)kmin)) return 0;
    if (lvl > (float)kmax) return kmax - kmin;
    return (int)lvl - kmin;
}

/* The roi's frame: start, bin size and sampling grid; 0 for a padding row. */
typedef struct {
    int level, img, gh, gw;
    float x0, y0, bw, bh;
} ra_roi;

static __device__ int ra_prepare(const ra_args *a, const float *roi, ra_roi *o) {
    if (!(roi[0] >= 0.0f) || roi[0] >= (float)a->n_images) return 0;
    /* a non-finite or overflowing box is empty, as on the CPU (src/ops/roi_align.c): a
     * NaN cast to int is undefined behaviour and would index anywhere */
    for (int c = 1; c <= 4; c++)
        if (!isfinite(roi[c])) return 0;
    o->img = (int)roi[0];
    o->level = ra_level(a, roi[1], roi[2], roi[3], roi[4]);
    const float scale = a->scale[o->level];
    const float offset = a->aligned ? 0.5f : 0.0f;
    float x0 = roi[1] * scale - offset, y0 = roi[2] * scale - offset;
    float x1 = roi[3] * scale - offset, y1 = roi[4] * scale - offset;
    float rw = x1 - x0, rh = y1 - y0;
    if (!isfinite(rw) || !isfinite(rh)) return 0;
    if (!a->aligned) {
        rw = rw > 1.0f ? rw : 1.0f;
        rh = rh > 1.0f ? rh : 1.0f;
    }
    o->x0 = x0;
    o->y0 = y0;
    o->bh = rh / (float)a->out_h;
    o->bw = rw / (float)a->out_w;
    o->gh = o->gw = a->sampling_ratio;
    if (a->sampling_ratio <= 0) {
        const float fh = ceilf(rh / (float)a->out_h), fw = ceilf(rw / (float)a->out_w);
        if (!(fh >= 1.0f && fw >= 1.0f && fh <= (float)MRCNN_ROI_ALIGN_MAX_GRID && fw <= (float)MRCNN_ROI_ALIGN_MAX_GRID)) return 0;
        o->gh = (int)fh;
        o->gw = (int)fw;
    }
    return 1;
}

/* Bilinear corners and weights of one sampling point; 0 when it falls outside. */
static __device__ int ra_bilinear(float y, float x, int H, int W, int64_t pos[4], float wt[4]) {
    if (!(y >= -1.0f && y <= (float)H && x >= -1.0f && x <= (float)W)) return 0; // NaN too
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int yl = (int)y, xl = (int)x, yh, xh;
    if (yl >= H - 1) {
        yh = yl = H - 1;
        y = (float)yl;
    } else {
        yh = yl + 1;
    }
    if (xl >= W - 1) {
        xh = xl = W - 1;
        x = (float)xl;
    } else {
        xh = xl + 1;
    }
    float ly = y - (float)yl, lx = x - (float)xl;
    float hy = 1.0f - ly, hx = 1.0f - lx;
    wt[0] = hy * hx;
    wt[1] = hy * lx;
    wt[2] = ly * hx;
    wt[3] = ly * lx;
    pos[0] = (int64_t)yl * W + xl;
    pos[1] = (int64_t)yl * W + xh;
    pos[2] = (int64_t)yh * W + xl;
    pos[3] = (int64_t)yh * W + xh;
    return 1;
}

__global__ void k_roi_align_fwd(ra_args a, int ft, const float *rois, int64_t r, void *y, int yt) {
    const int64_t total = r * a.out_h * a.out_w * a.c;
    CU_GRID_STRIDE(i, total) {
        const int c = (int)(i % a.c);
        int64_t t = i / a.c;
        const int pw = (int)(t % a.out_w);
        t /= a.out_w;
        const int ph = (int)(t % a.out_h);
        const int64_t ri = t / a.out_h;
        ra_roi o;
        if (!ra_prepare(&a, rois + 5 * ri, &o)) {
            cu_store(y, i, yt, 0.0f);
            continue;
        }
        const int H = a.h[o.level], W = a.w[o.level];
        const int64_t base = (int64_t)o.img * H * W * a.c + c;
        const void *f = a.f[o.level];
        float acc = 0.0f;
        for (int iy = 0; iy < o.gh; iy++) {
            const float yy = o.y0 + (float)ph * o.bh + (float)(iy + .5f) * o.bh / (float)o.gh;
            for (int ix = 0; ix < o.gw; ix++) {
                const float xx = o.x0 + (float)pw * o.bw + (float)(ix + .5f) * o.bw / (float)o.gw;
                int64_t pos[4];
                float wt[4];
                if (!ra_bilinear(yy, xx, H, W, pos, wt)) continue;
                acc += wt[0] * cu_load(f, base + pos[0] * a.c, ft) + wt[1] * cu_load(f, base + pos[1] * a.c, ft) +
                       wt[2] * cu_load(f, base + pos[2] * a.c, ft) + wt[3] * cu_load(f, base + pos[3] * a.c, ft);
            }
        }
        const int per_bin = o.gh * o.gw;
        cu_store(y, i, yt, acc / (float)(per_bin > 1 ? per_bin : 1));
    }
}

__global__ void k_roi_align_bwd(ra_args a, const float *rois, int64_t r, const void *dy, int dyt) {
    const int64_t total = r * a.out_h * a.out_w * a.c;
    CU_GRID_STRIDE(i, total) {
        const int c = (int)(i % a.c);
        int64_t t = i / a.c;
        const int pw = (int)(t % a.out_w);
        t /= a.out_w;
        const int ph = (int)(t % a.out_h);
        const int64_t ri = t / a.out_h;
        ra_roi o;
        if (!ra_prepare(&a, rois + 5 * ri, &o)) continue;
        float *g = a.g[o.level];
        if (!g) continue;
        const int H = a.h[o.level], W = a.w[o.level];
        g += (int64_t)o.img * H * W * a.c + c;
        const int per_bin = o.gh * o.gw;
        const float cnt = (float)(per_bin > 1 ? per_bin : 1);
        const float gy = cu_load(dy, i, dyt);
        for (int iy = 0; iy < o.gh; iy++) {
            const float yy = o.y0 + (float)ph * o.bh + (float)(iy + .5f) * o.bh / (float)o.gh;
            for (int ix = 0; ix < o.gw; ix++) {
                const float xx = o.x0 + (float)pw * o.bw + (float)(ix + .5f) * o.bw / (float)o.gw;
                int64_t pos[4];
                float wt[4];
                if (!ra_bilinear(yy, xx, H, W, pos, wt)) continue;
                for (int q = 0; q < 4; q++)
                    if (wt[q] != 0.0f) atomicAdd(g + pos[q] * a.c, gy * wt[q] / cnt);
            }
        }
    }
}

static ra_args ra_args_make(const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois, const char *op, int64_t *r) {
    MRCNN_CHECK(d != NULL, "%s: NULL descriptor", op);
    MRCNN_CHECK(d->n_levels > 0 && d->n_levels <= MRCNN_ROI_MAX_LEVELS, "%s: %d levels, must be in [1, %d]", op,
                d->n_levels, MRCNN_ROI_MAX_LEVELS);
    MRCNN_CHECK(d->n_images > 0 && d->channels > 0 && d->out_h > 0 && d->out_w > 0,
                "%s: images %d, channels %d, output %dx%d must be positive", op, d->n_images, d->channels, d->out_h,
                d->out_w);
    cu_check_gpu(rois, op);
    MRCNN_CHECK(rois->dtype == MRCNN_DTYPE_F32 && rois->ndim == 2 && rois->shape[1] == 5,
                "%s: rois must be (R, 5) fp32", op);
    *r = rois->shape[0];
    ra_args a;
    memset(&a, 0, sizeof a);
    a.n_levels = d->n_levels;
    a.first_level = d->first_level;
    a.canonical_level = d->canonical_level;
    a.canonical_scale = d->canonical_scale;
    a.n_images = d->n_images;
    a.c = d->channels;
    a.out_h = d->out_h;
    a.out_w = d->out_w;
    a.sampling_ratio = d->sampling_ratio;
    a.aligned = d->aligned;
    for (int l = 0; l < d->n_levels; l++) {
        MRCNN_CHECK(d->level_h[l] > 0 && d->level_w[l] > 0 && d->spatial_scale[l] > 0,
                    "%s: level %d is %dx%d with scale %g", op, l, d->level_h[l], d->level_w[l],
                    (double)d->spatial_scale[l]);
        a.h[l] = d->level_h[l];
        a.w[l] = d->level_w[l];
        a.scale[l] = d->spatial_scale[l];
    }
    return a;
}

static void cu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y) {
    int64_t r;
    ra_args a = ra_args_make(d, rois, "roi_align_forward", &r);
    MRCNN_CHECK(feats != NULL, "roi_align_forward: NULL feature list");
    const mrcnn_dtype ft = feats[0].dtype;
    for (int l = 0; l < d->n_levels; l++) {
        cu_check_float(&feats[l], "roi_align_forward feature level");
        MRCNN_CHECK(feats[l].dtype == ft, "roi_align_forward: level %d dtype differs from level 0", l);
        cu_check_numel(&feats[l], (int64_t)d->n_images * a.h[l] * a.w[l] * a.c, "roi_align_forward level (N, H, W, C)");
        a.f[l] = feats[l].data;
    }
    cu_check_float(y, "roi_align_forward y");
    const int64_t total = r * a.out_h * a.out_w * a.c;
    cu_check_numel(y, total, "roi_align_forward y (R, out_h, out_w, C)");
    if (total == 0) return;
    k_roi_align_fwd<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(
        a, ft, (const float *)rois->data, r, y->data, y->dtype);
    MRCNN_CHECK_LAUNCH("roi_align_forward");
}

static void cu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats) {
    cu_state *s = cu_st(be);
    int64_t r;
    ra_args a = ra_args_make(d, rois, "roi_align_backward", &r);
    MRCNN_CHECK(dfeats != NULL, "roi_align_backward: NULL gradient list");
    cu_check_float(dy, "roi_align_backward dy");
    const int64_t total = r * a.out_h * a.out_w * a.c;
    cu_check_numel(dy, total, "roi_align_backward dy (R, out_h, out_w, C)");
    /* Half-precision levels accumulate in one fp32 scratch block, level after level. */
    int64_t off[MRCNN_ROI_MAX_LEVELS], scratch_elems = 0;
    for (int l = 0; l < d->n_levels; l++) {
        off[l] = -1;
        if (!dfeats[l].data) continue;
        cu_check_float(&dfeats[l], "roi_align_backward gradient level");
        cu_check_numel(&dfeats[l], (int64_t)d->n_images * a.h[l] * a.w[l] * a.c,
                       "roi_align_backward gradient level (N, H, W, C)");
        if (dfeats[l].dtype == MRCNN_DTYPE_F32) {
            a.g[l] = (float *)dfeats[l].data;
        } else {
            off[l] = scratch_elems;
            scratch_elems += cu_numel(&dfeats[l]);
        }
    }
    if (total == 0) return;
    float *scratch = NULL;
    if (scratch_elems) {
        scratch = (float *)cu_scratch(s, CU_SCRATCH_GEMM, (size_t)scratch_elems * sizeof(float));
        MRCNN_CHECK_CUDA(cudaMemsetAsync(scratch, 0, (size_t)scratch_elems * sizeof(float), s->stream));
        for (int l = 0; l < d->n_levels; l++)
            if (off[l] >= 0) a.g[l] = scratch + off[l];
    }
    k_roi_align_bwd<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, s->stream>>>(a, (const float *)rois->data, r,
                                                                                  dy->data, dy->dtype);
    MRCNN_CHECK_LAUNCH("roi_align_backward");
    for (int l = 0; l < d->n_levels; l++)
        if (off[l] >= 0)
            cu_accumulate(s, scratch + off[l], MRCNN_DTYPE_F32, dfeats[l].data, dfeats[l].dtype, cu_numel(&dfeats[l]));
}

void cu_fill_roi_ops(mrcnn_backend *be) {
    be->roi_align_forward = cu_roi_align_forward;
    be->roi_align_backward = cu_roi_align_backward;
}
