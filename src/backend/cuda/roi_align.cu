/* Multi-level ROIAlign (roi_align.h) on the GPU: all images and levels in one
 * launch, one thread per output element (roi, ph, pw, c), channels fastest so that
 * NHWC reads coalesce. The level, frame, sampling points and bilinear taps are
 * box_math.h's, the code src/ops/roi_align.c runs (torchvision's kernel), in float.
 * The backward scatters with atomicAdd. fp32 gradients take fp32 atomics in place. For
 * fp16 or bf16 gradients, a level accumulates into an fp32 scratch sized to it, then
 * is added in one rounding (as the CPU's rounded-storage mode does), while the levels'
 * scratch fits a budget (MRCNN_ROI_BWD_SCRATCH_MB, default 256), smallest levels first;
 * a level beyond it takes atomics on the storage dtype itself, two channels per atomic
 * (half2 / bfloat162, native on sm_90), as torchvision's kernel does for half tensors
 * outside autocast (under autocast it runs in fp32, like the scratch path).
 * Why: at 8 x 800x1216 the four levels' fp32 scratch was 661 MB, memset and converted
 * every step; the default budget keeps P3-P5 (163 MB) exact and sends P2 (498 MB) to
 * storage atomics. Their cost is precision: every add rounds (bf16: up to 2^-9 of the
 * running sum), so a pixel that k bin-contributions reach carries about sqrt(k) such
 * roundings instead of one; each thread first sums its bin's taps per distinct pixel
 * in fp32, so k counts bins, not sampling points. MRCNN_ROI_BWD_SCRATCH_MB=100000 gives
 * the exact path back (op benchmark: both variants).
 * MRCNN_ROI_BWD=gather (roi_align.h; default scatter until the op benchmark on a GPU
 * shows the gather is not slower) takes the backward without atomics, for every dtype
 * and no scratch budget: phase 1 lists each (roi, bin)'s taps merged per pixel (box_math.h,
 * the listing the CPU's mrcnn_roi_align_backward_gather makes), phase 2 sorts them by
 * pixel (CUB's stable radix sort: within a pixel, listing order, as the CPU's counting
 * sort), phase 3 sums each pixel's run per channel in fp32 and adds it in one rounding.
 * Deterministic run to run, and a pixel that k bins reach carries one rounding instead
 * of k. Applies to sampling_ratio 1..4 (fixed taps per bin: 4 sr^2 slots per bin, 24
 * bytes each, from the CU_SCRATCH_GEMM scratch); adaptive sampling scatters. */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"
#include "mrcnn/box_math.h"

#define CU_THREADS 256

typedef struct {
    const void *f[MRCNN_ROI_MAX_LEVELS]; // (N, H_l, W_l, C) each
    float *g[MRCNN_ROI_MAX_LEVELS];      // fp32 gradient targets, NULL: skipped
    void *gh[MRCNN_ROI_MAX_LEVELS];      // fp16/bf16 targets for storage atomics (k_roi_align_bwd_half)
    void *gd[MRCNN_ROI_MAX_LEVELS];      // gather targets, any dtype (gdt), NULL: skipped
    int gdt[MRCNN_ROI_MAX_LEVELS];
    uint32_t gbase[MRCNN_ROI_MAX_LEVELS]; // gather: key of the level's first pixel (levels with gd only)
    uint32_t gpix[MRCNN_ROI_MAX_LEVELS];  // gather: the level's pixels, N * H_l * W_l
    int h[MRCNN_ROI_MAX_LEVELS], w[MRCNN_ROI_MAX_LEVELS];
    float scale[MRCNN_ROI_MAX_LEVELS];
    int n_levels, first_level, canonical_level, n_images, c, out_h, out_w, sampling_ratio, aligned;
    float canonical_scale;
} ra_args;

/* The roi's level, image and sampling frame; 0 for a padding row or an empty roi. */
typedef struct {
    int level, img;
    mrcnn_roi_frame f;
} ra_roi;

static __device__ int ra_prepare(const ra_args *a, const float *roi, ra_roi *o) {
    if (!(roi[0] >= 0.0f) || roi[0] >= (float)a->n_images) return 0;
    o->level = mrcnn_roi_level(roi[1], roi[2], roi[3], roi[4], a->canonical_level, a->canonical_scale,
                               a->first_level, a->n_levels);
    /* the frame refuses a non-finite or overflowing box, as on the CPU (box_math.h) */
    if (!mrcnn_roi_frame_make(roi + 1, a->scale[o->level], a->aligned, a->out_h, a->out_w, a->sampling_ratio, &o->f))
        return 0;
    o->img = (int)roi[0];
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
        for (int iy = 0; iy < o.f.gh; iy++) {
            const float yy = mrcnn_roi_sample_coord(o.f.y0, o.f.bh, ph, iy, o.f.gh);
            for (int ix = 0; ix < o.f.gw; ix++) {
                const float xx = mrcnn_roi_sample_coord(o.f.x0, o.f.bw, pw, ix, o.f.gw);
                int64_t pos[4];
                float wt[4];
                if (!mrcnn_bilinear_taps(yy, xx, H, W, pos, wt)) continue;
                acc += wt[0] * cu_load(f, base + pos[0] * a.c, ft) + wt[1] * cu_load(f, base + pos[1] * a.c, ft) +
                       wt[2] * cu_load(f, base + pos[2] * a.c, ft) + wt[3] * cu_load(f, base + pos[3] * a.c, ft);
            }
        }
        cu_store(y, i, yt, acc / (float)o.f.count);
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
        const float cnt = (float)o.f.count;
        const float gy = cu_load(dy, i, dyt);
        for (int iy = 0; iy < o.f.gh; iy++) {
            const float yy = mrcnn_roi_sample_coord(o.f.y0, o.f.bh, ph, iy, o.f.gh);
            for (int ix = 0; ix < o.f.gw; ix++) {
                const float xx = mrcnn_roi_sample_coord(o.f.x0, o.f.bw, pw, ix, o.f.gw);
                int64_t pos[4];
                float wt[4];
                if (!mrcnn_bilinear_taps(yy, xx, H, W, pos, wt)) continue;
                for (int q = 0; q < 4; q++)
                    if (wt[q] != 0.0f) atomicAdd(g + pos[q] * a.c, gy * wt[q] / cnt);
            }
        }
    }
}

/* Storage-dtype atomics: one thread per (roi, ph, pw, channel pair). With even C (and
 * 4-byte aligned levels) the pair's address is 4-byte aligned, so one half2/bfloat162 atomic adds
 * both channels; odd C falls back to one 16-bit atomic per channel. */
static __device__ __forceinline__ void ra_atomic_half(void *g, int64_t idx, int gt, float v0, float v1, int pair) {
    if (gt == MRCNN_DTYPE_F16) {
        __half *p = (__half *)g + idx;
        if (pair) atomicAdd((__half2 *)p, __floats2half2_rn(v0, v1));
        else atomicAdd(p, __float2half_rn(v0));
    } else {
        __nv_bfloat16 *p = (__nv_bfloat16 *)g + idx;
        if (pair) atomicAdd((__nv_bfloat162 *)p, __floats2bfloat162_rn(v0, v1));
        else atomicAdd(p, __float2bfloat16_rn(v0));
    }
}

#define RA_MERGE 16 // distinct feature pixels summed per thread before their atomics

/* One atomic per merged pixel: the summed bilinear weight times the bin's gradient. */
static __device__ __forceinline__ void ra_flush_half(void *g, int64_t base, int c, int gt, int even, int two, float gy0,
                                                     float gy1, const int64_t *mp, const float *mw, int nm) {
    for (int j = 0; j < nm; j++) {
        const int64_t at = base + mp[j] * c;
        if (even) {
            ra_atomic_half(g, at, gt, gy0 * mw[j], gy1 * mw[j], 1);
        } else {
            ra_atomic_half(g, at, gt, gy0 * mw[j], 0.0f, 0);
            if (two) ra_atomic_half(g, at + 1, gt, gy1 * mw[j], 0.0f, 0);
        }
    }
}

__global__ void k_roi_align_bwd_half(ra_args a, int gt, int even, const float *rois, int64_t r, const void *dy,
                                     int dyt) {
    const int cp = (a.c + 1) / 2;
    const int64_t total = r * a.out_h * a.out_w * cp;
    CU_GRID_STRIDE(i, total) {
        const int c = 2 * (int)(i % cp);
        int64_t t = i / cp;
        const int pw = (int)(t % a.out_w);
        t /= a.out_w;
        const int ph = (int)(t % a.out_h);
        const int64_t ri = t / a.out_h;
        ra_roi o;
        if (!ra_prepare(&a, rois + 5 * ri, &o)) continue;
        void *g = a.gh[o.level];
        if (!g) continue;
        const int H = a.h[o.level], W = a.w[o.level];
        const int64_t base = (int64_t)o.img * H * W * a.c + c;
        const int two = c + 1 < a.c;
        const float cnt = (float)o.f.count;
        const int64_t yi = ((ri * a.out_h + ph) * a.out_w + pw) * a.c + c;
        const float gy0 = cu_load(dy, yi, dyt) / cnt, gy1 = two ? cu_load(dy, yi + 1, dyt) / cnt : 0.0f;
        /* A bin's sampling points share taps whenever the bin is under a few feature
         * pixels (small boxes, the ones on P2): sum per distinct pixel in fp32 first, so
         * each pixel takes one atomic and one rounding per bin instead of up to 16. */
        int64_t mp[RA_MERGE];
        float mw[RA_MERGE];
        int nm = 0;
        for (int iy = 0; iy < o.f.gh; iy++) {
            const float yy = mrcnn_roi_sample_coord(o.f.y0, o.f.bh, ph, iy, o.f.gh);
            for (int ix = 0; ix < o.f.gw; ix++) {
                const float xx = mrcnn_roi_sample_coord(o.f.x0, o.f.bw, pw, ix, o.f.gw);
                int64_t pos[4];
                float wt[4];
                if (!mrcnn_bilinear_taps(yy, xx, H, W, pos, wt)) continue;
                for (int q = 0; q < 4; q++) {
                    if (wt[q] == 0.0f) continue;
                    int j = 0;
                    while (j < nm && mp[j] != pos[q]) j++;
                    if (j == nm) {
                        if (nm == RA_MERGE) {
                            ra_flush_half(g, base, a.c, gt, even, two, gy0, gy1, mp, mw, nm);
                            nm = j = 0;
                        }
                        mp[j] = pos[q];
                        mw[j] = 0.0f;
                        nm++;
                    }
                    mw[j] += wt[q];
                }
            }
        }
        ra_flush_half(g, base, a.c, gt, even, two, gy0, gy1, mp, mw, nm);
    }
}

/* The descriptor, rois (R, 5) fp32, the levels and the output were checked in front
 * (backend_validate.c: mrcnn_roi_align_desc_check and the shapes it gives). The kernels
 * take one dtype for all feature levels and one for the half-precision gradient levels. */
static ra_args ra_args_make(const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois, int64_t *r) {
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
        a.h[l] = d->level_h[l];
        a.w[l] = d->level_w[l];
        a.scale[l] = d->spatial_scale[l];
    }
    return a;
}

static void cu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y) {
    int64_t r;
    ra_args a = ra_args_make(d, rois, &r);
    const mrcnn_dtype ft = feats[0].dtype;
    for (int l = 0; l < d->n_levels; l++) {
        MRCNN_CHECK(feats[l].dtype == ft, "roi_align_forward: level %d dtype differs from level 0", l);
        a.f[l] = feats[l].data;
    }
    const int64_t total = r * a.out_h * a.out_w * a.c;
    if (total == 0) return;
    k_roi_align_fwd<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(
        a, ft, (const float *)rois->data, r, y->data, y->dtype);
    MRCNN_CHECK_LAUNCH("roi_align_forward");
}

/* ---- backward by gather (MRCNN_ROI_BWD=gather) ------------------------------------------- */

#define RA_GATHER_MAX_SR 4                                   // sampling_ratio the gather takes
#define RA_GATHER_CAP (4 * RA_GATHER_MAX_SR * RA_GATHER_MAX_SR) // taps of a bin at most

/* Phase 1, one thread per (roi, bin): the bin's taps merged per pixel (box_math.h, the
 * listing src/ops/roi_align.c makes) into the bin's `slots` entries: key = the pixel over
 * all gathered levels, value = (roi * bins + bin) << 32 | the weight's bits. Unused slots,
 * padding rows, empty rois and levels without a gradient get the key `sentinel`, which
 * sorts last and is never summed. */
__global__ void k_roi_gather_list(ra_args a, const float *rois, int64_t r, int slots, uint32_t sentinel,
                                  uint32_t *keys, uint64_t *vals) {
    const int64_t n_bins = r * a.out_h * a.out_w;
    CU_GRID_STRIDE(i, n_bins) {
        const int pw = (int)(i % a.out_w);
        const int64_t t = i / a.out_w;
        const int ph = (int)(t % a.out_h);
        const int64_t ri = t / a.out_h;
        uint32_t *k = keys + i * slots;
        uint64_t *v = vals + i * slots;
        int n = 0;
        ra_roi o;
        if (ra_prepare(&a, rois + 5 * ri, &o) && a.gd[o.level]) {
            int64_t pix[RA_GATHER_CAP];
            float w[RA_GATHER_CAP];
            const int H = a.h[o.level], W = a.w[o.level];
            n = mrcnn_roi_bin_merged_taps(&o.f, H, W, ph, pw, pix, w);
            const int64_t img0 = (int64_t)a.gbase[o.level] + (int64_t)o.img * H * W;
            for (int j = 0; j < n; j++) {
                k[j] = (uint32_t)(img0 + pix[j]);
                v[j] = (uint64_t)i << 32 | __float_as_uint(w[j]);
            }
        }
        for (int j = n; j < slots; j++) {
            k[j] = sentinel;
            v[j] = 0;
        }
    }
}

/* Phase 3, one thread per (pixel run, channel), channels fastest: the run's entries
 * (sorted stably, so in listing order) summed in fp32 and added to the gradient in one
 * rounding. A run is one pixel's, so no two threads write one element: no atomics. */
__global__ void k_roi_gather_sum(ra_args a, const uint32_t *uniq, const int *counts, const int *offs,
                                 const int *n_runs, const uint64_t *vals, const void *dy, int dyt, uint32_t sentinel) {
    const int64_t total = (int64_t)*n_runs * a.c;
    CU_GRID_STRIDE(t, total) {
        const int64_t run = t / a.c;
        const int c = (int)(t % a.c);
        const uint32_t key = uniq[run];
        if (key == sentinel) continue;
        int l = 0; // the key's level: every key below the sentinel has one
        while (l < a.n_levels - 1 && !(a.gd[l] && key >= a.gbase[l] && key - a.gbase[l] < a.gpix[l])) l++;
        float acc = 0.0f;
        for (int e = offs[run], end = offs[run] + counts[run]; e < end; e++) {
            const uint64_t v = vals[e];
            const float gy = cu_load(dy, (int64_t)(v >> 32) * a.c + c, dyt);
            acc = __fadd_rn(acc, __fmul_rn(gy, __uint_as_float((uint32_t)v)));
        }
        const int64_t at = (int64_t)(key - a.gbase[l]) * a.c + c;
        cu_store(a.gd[l], at, a.gdt[l], __fadd_rn(cu_load(a.gd[l], at, a.gdt[l]), acc));
    }
}

static size_t ra_al256(size_t b) { return (b + 255) / 256 * 256; }

/* Phase 2 and the runs: CUB's stable radix sort of (key, value) by key over end_bit
 * bits, then the runs of equal keys (unique key, length) and their offsets. Buffers from
 * one scratch block: keys and values double-buffered (after the sort the idle halves hold
 * the runs), the run count, CUB's temp (the largest of its three calls' needs). */
typedef struct {
    cub::DoubleBuffer<uint32_t> keys;
    cub::DoubleBuffer<uint64_t> vals;
    int *n_runs;
    void *temp;
    size_t t_sort, t_rle, t_scan;
} ra_gather_work;

static size_t ra_gather_bytes(int n, int end_bit, ra_gather_work *g) {
    cub::DoubleBuffer<uint32_t> k(NULL, NULL);
    cub::DoubleBuffer<uint64_t> v(NULL, NULL);
    g->t_sort = g->t_rle = g->t_scan = 0;
    MRCNN_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(NULL, g->t_sort, k, v, n, 0, end_bit));
    MRCNN_CHECK_CUDA(cub::DeviceRunLengthEncode::Encode(NULL, g->t_rle, (const uint32_t *)NULL, (uint32_t *)NULL,
                                                        (int *)NULL, (int *)NULL, n));
    MRCNN_CHECK_CUDA(cub::DeviceScan::ExclusiveSum(NULL, g->t_scan, (const int *)NULL, (int *)NULL, n));
    size_t t = g->t_sort > g->t_rle ? g->t_sort : g->t_rle;
    t = t > g->t_scan ? t : g->t_scan;
    const size_t m = (size_t)n;
    return 2 * ra_al256(m * 4) + 2 * ra_al256(m * 8) + ra_al256(sizeof(int)) + ra_al256(t);
}

static void ra_gather_carve(char *w, int n, ra_gather_work *g) {
    const size_t m = (size_t)n;
    g->keys = cub::DoubleBuffer<uint32_t>((uint32_t *)w, (uint32_t *)(w + ra_al256(m * 4)));
    w += 2 * ra_al256(m * 4);
    g->vals = cub::DoubleBuffer<uint64_t>((uint64_t *)w, (uint64_t *)(w + ra_al256(m * 8)));
    w += 2 * ra_al256(m * 8);
    g->n_runs = (int *)w;
    g->temp = w + ra_al256(sizeof(int));
}

/* The gather's targets and key ranges; the number of gathered pixels (0: none). */
static int64_t ra_gather_levels(const mrcnn_roi_align_desc *d, mrcnn_tensor *dfeats, ra_args *a) {
    int64_t n_pix = 0;
    for (int l = 0; l < d->n_levels; l++) {
        if (!dfeats[l].data) continue;
        const int64_t np = (int64_t)d->n_images * d->level_h[l] * d->level_w[l];
        if (n_pix + np >= (int64_t)UINT32_MAX) return -1;
        a->gd[l] = dfeats[l].data;
        a->gdt[l] = (int)dfeats[l].dtype;
        a->gbase[l] = (uint32_t)n_pix;
        a->gpix[l] = (uint32_t)np;
        n_pix += np;
    }
    return n_pix;
}

/* The backward by gather; returns 0, having done nothing, where it does not apply
 * (adaptive sampling or a sampling_ratio over RA_GATHER_MAX_SR, whose taps per bin have no
 * fixed bound; counts past 32-bit keys or CUB's int sizes): the caller scatters. */
static int cu_roi_align_backward_gather(const mrcnn_backend *be, const mrcnn_roi_align_desc *d,
                                        const mrcnn_tensor *rois, const mrcnn_tensor *dy, mrcnn_tensor *dfeats) {
    if (d->sampling_ratio < 1 || d->sampling_ratio > RA_GATHER_MAX_SR) return 0;
    cu_state *s = cu_st(be);
    int64_t r;
    ra_args a = ra_args_make(d, rois, &r);
    const int64_t n_pix = ra_gather_levels(d, dfeats, &a);
    const int slots = 4 * d->sampling_ratio * d->sampling_ratio;
    const int64_t n_bins = r * a.out_h * a.out_w, n64 = n_bins * slots;
    if (n_pix < 0 || n_bins >= (1LL << 32) || n64 >= INT_MAX) return 0;
    if (n64 == 0 || n_pix == 0) return 1;
    const int n = (int)n64;
    const uint32_t sentinel = (uint32_t)n_pix; // keys lie in [0, n_pix]
    int end_bit = 1;
    while (end_bit < 32 && (1LL << end_bit) <= n_pix) end_bit++;
    ra_gather_work g;
    const size_t bytes = ra_gather_bytes(n, end_bit, &g);
    ra_gather_carve((char *)cu_scratch(s, CU_SCRATCH_GEMM, bytes), n, &g);
    k_roi_gather_list<<<cu_blocks(n_bins, CU_THREADS), CU_THREADS, 0, s->stream>>>(
        a, (const float *)rois->data, r, slots, sentinel, g.keys.Current(), g.vals.Current());
    MRCNN_CHECK_LAUNCH("roi_align_backward gather: list");
    MRCNN_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(g.temp, g.t_sort, g.keys, g.vals, n, 0, end_bit, s->stream));
    MRCNN_CHECK_LAUNCH("roi_align_backward gather: sort");
    /* The idle halves after the sort: unique keys in the keys', run lengths and offsets in
     * the values' (8 bytes per entry: two ints). */
    uint32_t *uniq = g.keys.Alternate();
    int *counts = (int *)g.vals.Alternate(), *offs = counts + n;
    MRCNN_CHECK_CUDA(cub::DeviceRunLengthEncode::Encode(g.temp, g.t_rle, g.keys.Current(), uniq, counts, g.n_runs, n,
                                                        s->stream));
    MRCNN_CHECK_CUDA(cub::DeviceScan::ExclusiveSum(g.temp, g.t_scan, counts, offs, n, s->stream));
    MRCNN_CHECK_LAUNCH("roi_align_backward gather: runs");
    /* The run count stays on the device (no read: graph capture): a grid that strides
     * over it, sized for the largest count (every entry its own pixel), capped at 8192
     * blocks (about 60 per SM on an H100/H200). */
    const unsigned blocks = cu_blocks(n64 * a.c, CU_THREADS) < 8192 ? cu_blocks(n64 * a.c, CU_THREADS) : 8192;
    k_roi_gather_sum<<<blocks, CU_THREADS, 0, s->stream>>>(a, uniq, counts, offs, g.n_runs, g.vals.Current(),
                                                          dy->data, dy->dtype, sentinel);
    MRCNN_CHECK_LAUNCH("roi_align_backward gather: sum");
    return 1;
}

static void cu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats) {
    if (mrcnn_roi_align_bwd_gather() && cu_roi_align_backward_gather(be, d, rois, dy, dfeats)) return;
    cu_state *s = cu_st(be);
    int64_t r;
    ra_args a = ra_args_make(d, rois, &r);
    const int64_t total = r * a.out_h * a.out_w * a.c;
    /* Half-precision levels: fp32 scratch (one rounding) while the budget lasts,
     * smallest levels first; the rest storage-dtype atomics (file comment). */
    const char *env = getenv("MRCNN_ROI_BWD_SCRATCH_MB");
    const int64_t budget = (int64_t)((env && *env ? atof(env) : 256.0) * 1048576.0);
    int64_t off[MRCNN_ROI_MAX_LEVELS], scratch_elems = 0;
    int half_dt = -1, n_direct = 0, odd_ptr = 0;
    for (int l = d->n_levels - 1; l >= 0; l--) {
        off[l] = -1;
        if (!dfeats[l].data) continue;
        if (dfeats[l].dtype == MRCNN_DTYPE_F32) {
            a.g[l] = (float *)dfeats[l].data;
        } else if ((scratch_elems + cu_numel(&dfeats[l])) * (int64_t)sizeof(float) <= budget) {
            off[l] = scratch_elems;
            scratch_elems += cu_numel(&dfeats[l]);
        } else {
            MRCNN_CHECK(half_dt < 0 || half_dt == (int)dfeats[l].dtype,
                        "roi_align_backward: fp16 and bf16 gradient levels mixed in one call");
            half_dt = (int)dfeats[l].dtype;
            a.gh[l] = dfeats[l].data;
            n_direct++;
            if ((uintptr_t)dfeats[l].data % 4 != 0) odd_ptr = 1;
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
    int any_fp32 = 0;
    for (int l = 0; l < d->n_levels; l++) any_fp32 |= a.g[l] != NULL;
    if (any_fp32) {
        k_roi_align_bwd<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, s->stream>>>(a, (const float *)rois->data, r,
                                                                                      dy->data, dy->dtype);
        MRCNN_CHECK_LAUNCH("roi_align_backward");
    }
    if (n_direct) {
        const int64_t pairs = r * a.out_h * a.out_w * ((a.c + 1) / 2);
        k_roi_align_bwd_half<<<cu_blocks(pairs, CU_THREADS), CU_THREADS, 0, s->stream>>>(
            a, half_dt, a.c % 2 == 0 && !odd_ptr, (const float *)rois->data, r, dy->data, dy->dtype);
        MRCNN_CHECK_LAUNCH("roi_align_backward (storage atomics)");
    }
    for (int l = 0; l < d->n_levels; l++)
        if (off[l] >= 0)
            cu_accumulate(s, scratch + off[l], MRCNN_DTYPE_F32, dfeats[l].data, dfeats[l].dtype, cu_numel(&dfeats[l]));
}

void cu_fill_roi_ops(mrcnn_backend *be) {
    be->nn.roi_align_forward = cu_roi_align_forward;
    be->nn.roi_align_backward = cu_roi_align_backward;
}
