/* ROIAlign's backward by gather (mrcnn_roi_align_backward_gather: list, sort by pixel,
 * sum per pixel) against the scatter (mrcnn_roi_align_backward) on random cases: 1-4
 * levels, 1-3 images, padding rows (image -1), empty, inverted, non-finite and tiny
 * boxes, boxes partly or wholly outside the image, sampling_ratio 0 (adaptive) to 3,
 * aligned 0/1, non-square outputs, levels without a gradient (NULL), a non-zero
 * starting gradient (both add into it).
 *
 * Bound: both compute g0 + sum_t dy_t * w_t over the k taps t with w_t != 0 that reach
 * an element, where w_t = bilinear weight / count >= 0. The scatter rounds each term
 * twice (product, division) and each of its k adds: within gamma_(k+2) * S of the exact
 * sum, S = |g0| + sum_t |dy_t| w_t. The gather merges a bin's taps of one pixel (m <= k
 * of them: m - 1 adds, one division), multiplies (one rounding), sums its list (under
 * k adds) and adds to g0 (one): within gamma_(k+3) * S. So
 * |gather - scatter| <= gamma_(2k+5) * S, gamma_n = n u / (1 - n u), u = 2^-24 in float
 * and 2^-53 in double. S comes from the double scatter on |dy| and |g0| (the weights
 * are non-negative); k from counting the taps with box_math.h's sampling here. The
 * gather is also bit-identical run to run and for 1 or several threads, and the CPU
 * backend runs it under MRCNN_ROI_BWD=gather. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mrcnn/backend.h"
#include "mrcnn/box_math.h"
#include "mrcnn/roi_align.h"
#include "test_util.h"

typedef struct {
    mrcnn_roi_align_desc d;
    int64_t r, ny, nf[MRCNN_ROI_MAX_LEVELS];
    int has_grad[MRCNN_ROI_MAX_LEVELS];
    float *rois, *dy, *g0[MRCNN_ROI_MAX_LEVELS];
} gcase;

static uint64_t g_state;
static double urand(void) { // [0, 1), splitmix64
    uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}
static int irand(int lo, int hi) { return lo + (int)(urand() * (hi - lo + 1)); } // [lo, hi]

/* One roi row: mostly boxes of 1 to 300 input pixels over an image of img_h x img_w,
 * some past or wholly outside its borders, and the odd cases of the header. */
static void make_roi(float *b, int n_images, float img_h, float img_w) {
    const int kind = irand(0, 19);
    b[0] = kind == 0 ? -1.0f : (float)irand(0, n_images - 1);
    const double size = pow(300.0, urand()), aspect = 0.4 + 1.6 * urand();
    const double cx = -0.2 * img_w + 1.4 * img_w * urand(), cy = -0.2 * img_h + 1.4 * img_h * urand();
    b[1] = (float)(cx - 0.5 * size * aspect), b[3] = (float)(cx + 0.5 * size * aspect);
    b[2] = (float)(cy - 0.5 * size / aspect), b[4] = (float)(cy + 0.5 * size / aspect);
    if (kind == 1) b[3] = b[1];                                  // zero width
    if (kind == 2) b[3] = b[1] - 5.0f;                           // inverted
    if (kind == 3) b[1 + irand(0, 3)] = irand(0, 1) ? NAN : INFINITY; // non-finite: empty
    if (kind == 4) b[1] = img_w + 10.0f, b[3] = img_w + 40.0f;  // wholly right of the image
    if (kind == 5) b[2] = -60.0f, b[4] = -20.0f;                 // wholly above it
    if (kind == 6) b[3] = b[1] + 0.3f, b[4] = b[2] + 0.2f;       // under a pixel
}

static float *frand(int64_t n, float lo, float hi) {
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * urand());
    return x;
}

static void case_make(gcase *c, uint64_t seed) {
    g_state = seed * 7919u + 1;
    const int n_levels = irand(1, 4), first = n_levels == 1 ? irand(0, 2) : 2, n = irand(1, 3), C = irand(1, 9);
    const int h0 = irand(3, 20), w0 = irand(3, 20);
    int lh[MRCNN_ROI_MAX_LEVELS], lw[MRCNN_ROI_MAX_LEVELS];
    for (int l = 0; l < n_levels; l++) lh[l] = (h0 >> l) > 0 ? h0 >> l : 1, lw[l] = (w0 >> l) > 0 ? w0 >> l : 1;
    c->d = mrcnn_roi_align_desc_make(n, C, n_levels, first, lh, lw, irand(1, 7), irand(0, 3), irand(0, 1));
    c->d.out_w = irand(1, 7);
    c->r = irand(0, 40);
    c->rois = malloc((size_t)(c->r ? c->r : 1) * 5 * sizeof(float));
    const float img_h = (float)(h0 << first), img_w = (float)(w0 << first);
    for (int64_t i = 0; i < c->r; i++) make_roi(c->rois + 5 * i, n, img_h, img_w);
    c->ny = c->r * c->d.out_h * c->d.out_w * C;
    c->dy = frand(c->ny, -1, 1);
    const int null_level = n_levels > 1 && irand(0, 3) == 0 ? irand(0, n_levels - 1) : -1;
    for (int l = 0; l < n_levels; l++) {
        c->has_grad[l] = l != null_level;
        c->nf[l] = (int64_t)n * lh[l] * lw[l] * C;
        c->g0[l] = frand(c->nf[l], -1, 1);
    }
}

static void case_free(gcase *c) {
    free(c->rois);
    free(c->dy);
    for (int l = 0; l < c->d.n_levels; l++) free(c->g0[l]);
}

/* Copies of g0 (float, NULL where the level has no gradient). */
static void grads_f32(const gcase *c, float **g) {
    for (int l = 0; l < c->d.n_levels; l++) {
        g[l] = NULL;
        if (!c->has_grad[l]) continue;
        g[l] = malloc((size_t)c->nf[l] * sizeof(float));
        memcpy(g[l], c->g0[l], (size_t)c->nf[l] * sizeof(float));
    }
}

/* Double copies of g0 and of x (dy or rois), |.| when abs_ is set. */
static void grads_f64(const gcase *c, double **g, int abs_) {
    for (int l = 0; l < c->d.n_levels; l++) {
        g[l] = NULL;
        if (!c->has_grad[l]) continue;
        g[l] = malloc((size_t)c->nf[l] * sizeof(double));
        for (int64_t i = 0; i < c->nf[l]; i++) g[l][i] = abs_ ? fabs((double)c->g0[l][i]) : (double)c->g0[l][i];
    }
}
static double *to_f64(const float *x, int64_t n, int abs_) {
    double *y = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) y[i] = abs_ ? fabs((double)x[i]) : (double)x[i];
    return y;
}

static void grads_free(const gcase *c, void **g) {
    for (int l = 0; l < c->d.n_levels; l++) free(g[l]);
}

/* k per feature pixel: the taps with a non-zero weight that reach it, counted with
 * box_math.h's sampling in one real type, independently of the gather's listing:
 * count_taps with the float sampling (the float op's), count_taps_f64 with the double
 * one (the _f64 op's taps). */
#define COUNT_TAPS(NAME, REAL, SFX)                                                                            \
    static int32_t **NAME(const gcase *c) {                                                                    \
        const mrcnn_roi_align_desc *d = &c->d;                                                                 \
        int32_t **k = calloc((size_t)d->n_levels, sizeof(int32_t *));                                          \
        for (int l = 0; l < d->n_levels; l++)                                                                  \
            k[l] = calloc((size_t)d->n_images * d->level_h[l] * d->level_w[l], 4);                             \
        for (int64_t i = 0; i < c->r; i++) {                                                                   \
            const float *roi = c->rois + 5 * i;                                                                \
            const REAL box[4] = {roi[1], roi[2], roi[3], roi[4]};                                              \
            if (roi[0] < 0) continue;                                                                          \
            const int l = mrcnn_roi_level(roi[1], roi[2], roi[3], roi[4], d->canonical_level,                  \
                                          d->canonical_scale, d->first_level, d->n_levels);                    \
            mrcnn_roi_frame##SFX f;                                                                            \
            if (!mrcnn_roi_frame_make##SFX(box, d->spatial_scale[l], d->aligned, d->out_h, d->out_w,           \
                                           d->sampling_ratio, &f))                                             \
                continue;                                                                                      \
            const int H = d->level_h[l], W = d->level_w[l];                                                    \
            int32_t *kl = k[l] + (int64_t)roi[0] * H * W;                                                      \
            for (int ph = 0; ph < d->out_h; ph++)                                                              \
                for (int pw = 0; pw < d->out_w; pw++)                                                          \
                    for (int iy = 0; iy < f.gh; iy++)                                                          \
                        for (int ix = 0; ix < f.gw; ix++) {                                                    \
                            int64_t pos[4];                                                                    \
                            REAL w[4];                                                                         \
                            const REAL y = mrcnn_roi_sample_coord##SFX(f.y0, f.bh, ph, iy, f.gh);              \
                            const REAL x = mrcnn_roi_sample_coord##SFX(f.x0, f.bw, pw, ix, f.gw);              \
                            if (!mrcnn_bilinear_taps##SFX(y, x, H, W, pos, w)) continue;                       \
                            for (int q = 0; q < 4; q++) kl[pos[q]] += w[q] != 0;                               \
                        }                                                                                      \
        }                                                                                                      \
        return k;                                                                                              \
    }
COUNT_TAPS(count_taps, float, )
COUNT_TAPS(count_taps_f64, double, _f64)
#undef COUNT_TAPS

static void counts_free(const gcase *c, int32_t **k) {
    for (int l = 0; l < c->d.n_levels; l++) free(k[l]);
    free(k);
}

static double gamma_n(double n, double u) { return n * u / (1 - n * u); }

/* The float and double gathers against the scatters within gamma_(2k+5) S; the float
 * gather bit-identical on a second run and on one thread. Returns the largest k seen. */
static int check_case(uint64_t seed) {
    gcase c;
    case_make(&c, seed);
    const mrcnn_roi_align_desc *d = &c.d;
    float *gs[MRCNN_ROI_MAX_LEVELS], *gg[MRCNN_ROI_MAX_LEVELS], *gg2[MRCNN_ROI_MAX_LEVELS];
    grads_f32(&c, gs), grads_f32(&c, gg), grads_f32(&c, gg2);
    mrcnn_roi_align_backward(d, c.r, c.rois, c.dy, gs);
    mrcnn_roi_align_backward_gather(d, c.r, c.rois, c.dy, gg);
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
    omp_set_num_threads(seed % 2 ? 1 : 3);
#endif
    mrcnn_roi_align_backward_gather(d, c.r, c.rois, c.dy, gg2);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    double *ds[MRCNN_ROI_MAX_LEVELS], *dg[MRCNN_ROI_MAX_LEVELS], *sa[MRCNN_ROI_MAX_LEVELS];
    grads_f64(&c, ds, 0), grads_f64(&c, dg, 0), grads_f64(&c, sa, 1);
    double *rois = to_f64(c.rois, c.r * 5, 0), *dy = to_f64(c.dy, c.ny, 0), *ady = to_f64(c.dy, c.ny, 1);
    mrcnn_roi_align_backward_f64(d, c.r, rois, dy, ds);
    mrcnn_roi_align_backward_gather_f64(d, c.r, rois, dy, dg);
    mrcnn_roi_align_backward_f64(d, c.r, rois, ady, sa); // S = |g0| + sum |dy| w
    int32_t **k = count_taps(&c), **k64 = count_taps_f64(&c);
    int k_max = 0;
    for (int l = 0; l < d->n_levels; l++) {
        if (!c.has_grad[l]) continue;
        assert_memory_equal(gg[l], gg2[l], (size_t)c.nf[l] * sizeof(float));
        for (int64_t i = 0; i < c.nf[l]; i++) {
            const int kk = k[l][i / d->channels], kd = k64[l][i / d->channels];
            k_max = kk > k_max ? kk : k_max;
            /* S is the double op's; the float op's weights differ from its by under
             * 8 (M + 1) u < 1e-3 each (M < 600 feature pixels), |dy| <= 1: k 1e-3 more. */
            const double b32 = gamma_n(2.0 * kk + 5, 0x1p-24) * (sa[l][i] * (1 + 1e-9) + kk * 1e-3);
            const double b64 = gamma_n(2.0 * kd + 5, 0x1p-53) * sa[l][i] * (1 + 1e-9);
            if (fabs((double)gg[l][i] - (double)gs[l][i]) > b32 || fabs(dg[l][i] - ds[l][i]) > b64)
                fail_msg("seed %llu level %d element %lld (k %d, %d): float gather %.9g scatter %.9g (bound %.3g), "
                         "double gather %.17g scatter %.17g (bound %.3g)",
                         (unsigned long long)seed, l, (long long)i, kk, kd, (double)gg[l][i], (double)gs[l][i], b32,
                         dg[l][i], ds[l][i], b64);
        }
    }
    counts_free(&c, k), counts_free(&c, k64);
    grads_free(&c, (void **)gs), grads_free(&c, (void **)gg), grads_free(&c, (void **)gg2);
    grads_free(&c, (void **)ds), grads_free(&c, (void **)dg), grads_free(&c, (void **)sa);
    free(rois), free(dy), free(ady);
    case_free(&c);
    return k_max;
}

static void test_gather_vs_scatter(void **state) {
    (void)state;
    int k_max = 0;
    for (uint64_t seed = 1; seed <= 400; seed++) {
        const int k = check_case(seed);
        k_max = k > k_max ? k : k_max;
    }
    /* The cases reach pixels from many bins, where the sum orders differ. */
    assert_true(k_max >= 16);
    printf("ok: 400 random cases, gather within gamma_(2k+5) S of scatter, pixels reached by up to %d taps\n",
           k_max);
}

/* A case where the two must agree exactly: every tap of one roi on a pixel-aligned grid
 * (aligned, sampling 1, bins of one feature pixel) lands on a pixel centre with weight
 * 1, so each pixel takes one term and both compute g0 + dy exactly rounded once. */
static void test_gather_exact_single_terms(void **state) {
    (void)state;
    const int lh[1] = {8}, lw[1] = {8};
    mrcnn_roi_align_desc d = mrcnn_roi_align_desc_make(1, 5, 1, 0, lh, lw, 4, 1, 1);
    const float rois[5] = {0, 2.0f, 1.0f, 6.0f, 5.0f};
    float *dy = frand(4 * 4 * 5, -1, 1), *a = frand(8 * 8 * 5, -1, 1), *b = malloc(8 * 8 * 5 * sizeof(float));
    float *a0 = malloc(8 * 8 * 5 * sizeof(float));
    memcpy(b, a, 8 * 8 * 5 * sizeof(float));
    memcpy(a0, a, 8 * 8 * 5 * sizeof(float));
    float *ga[1] = {a}, *gb[1] = {b};
    mrcnn_roi_align_backward(&d, 1, rois, dy, ga);
    mrcnn_roi_align_backward_gather(&d, 1, rois, dy, gb);
    assert_memory_equal(a, b, 8 * 8 * 5 * sizeof(float));
    for (int c = 0; c < 5; c++) { // bin (0, 0) is pixel (1, 2); bin (3, 3) pixel (4, 5)
        assert_true(b[(1 * 8 + 2) * 5 + c] == a0[(1 * 8 + 2) * 5 + c] + dy[c]);
        assert_true(b[(4 * 8 + 5) * 5 + c] == a0[(4 * 8 + 5) * 5 + c] + dy[15 * 5 + c]);
    }
    free(dy), free(a), free(b), free(a0);
}

/* The CPU backend's entry runs the gather under MRCNN_ROI_BWD=gather (bit for bit the
 * op's), the scatter when unset or "scatter", and refuses anything else. */
static void test_backend_selects(void **state) {
    (void)state;
    gcase c;
    for (uint64_t seed = 1000;; seed++) { // a case with a gradient on every level and some rois
        case_make(&c, seed);
        int all = c.r > 4;
        for (int l = 0; l < c.d.n_levels; l++) all &= c.has_grad[l];
        if (all) break;
        case_free(&c);
    }
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_tensor rois = mrcnn_tensor_view(c.rois, MRCNN_DTYPE_F32, be->device, 2, (int64_t[]){c.r, 5});
    mrcnn_tensor dy = mrcnn_tensor_view(c.dy, MRCNN_DTYPE_F32, be->device, 4,
                                        (int64_t[]){c.r, c.d.out_h, c.d.out_w, c.d.channels});
    const char *modes[3] = {"gather", "scatter", NULL};
    for (int m = 0; m < 3; m++) {
        float *ref[MRCNN_ROI_MAX_LEVELS], *got[MRCNN_ROI_MAX_LEVELS];
        grads_f32(&c, ref), grads_f32(&c, got);
        mrcnn_tensor t[MRCNN_ROI_MAX_LEVELS];
        for (int l = 0; l < c.d.n_levels; l++)
            t[l] = mrcnn_tensor_view(got[l], MRCNN_DTYPE_F32, be->device, 4,
                                     (int64_t[]){c.d.n_images, c.d.level_h[l], c.d.level_w[l], c.d.channels});
        if (modes[m]) setenv("MRCNN_ROI_BWD", modes[m], 1);
        else unsetenv("MRCNN_ROI_BWD");
        be->nn.roi_align_backward(be, &c.d, &rois, &dy, t);
        if (m == 0) mrcnn_roi_align_backward_gather(&c.d, c.r, c.rois, c.dy, ref);
        else mrcnn_roi_align_backward(&c.d, c.r, c.rois, c.dy, ref);
        for (int l = 0; l < c.d.n_levels; l++) assert_memory_equal(ref[l], got[l], (size_t)c.nf[l] * sizeof(float));
        grads_free(&c, (void **)ref), grads_free(&c, (void **)got);
    }
    setenv("MRCNN_ROI_BWD", "gahter", 1);
    EXPECT_FAIL(mrcnn_roi_align_bwd_gather(), "MRCNN_ROI_BWD=gahter: must be scatter or gather");
    unsetenv("MRCNN_ROI_BWD");
    assert_int_equal(mrcnn_roi_align_bwd_gather(), 0);
    mrcnn_backend_destroy(be);
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_vs_scatter),
        cmocka_unit_test(test_gather_exact_single_terms),
        cmocka_unit_test(test_backend_selects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
