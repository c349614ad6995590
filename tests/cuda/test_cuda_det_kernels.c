/* The CUDA detection kernels two ways (src/backend/cuda/detect_internal.h, included by
 * path): the default batch sort (one cub::DeviceRadixSort over the whole batch) against
 * MRCNN_DET_KERNELS=legacy (a block per (image, level) or per image), which must give the
 * same bytes: det.proposals (fp32 and bf16 logits, ties, NaN and infinite logits, an
 * empty level, and the 8 x 800x1216 bench shape), the batched balanced sampler at the
 * RPN's shape, mrcnn_cuda_topk, mrcnn_cuda_nms (with classes and tied scores) and
 * det.detect_boxes (under and past its candidate cap, with tied scores). Both use the same order keys and
 * the same decode, so even NaNs land alike; test_cuda_detect compares each with the
 * host. Without a GPU, or in a GPU=0 build, it prints "skip [gpu]: ..." and exits 77. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/half.h"
#include "mrcnn/rng.h"
#include "test_util.h"
#ifdef MRCNN_HAVE_CUDA_HEADERS
#include "../../src/backend/cuda/detect_internal.h"

static mrcnn_backend *G;
static uint64_t g_seed = 7100;

static void *up(const void *h, size_t bytes) {
    void *d = G->mem.alloc(G, bytes + 16, "test buffer");
    unsigned char *tmp = NULL;
    if (!h) { // a 0xff poison: NaN floats, -1 ints
        tmp = malloc(bytes + 1);
        memset(tmp, 0xff, bytes + 1);
        h = tmp;
    }
    int64_t n = (int64_t)bytes;
    mrcnn_tensor t = mrcnn_tensor_view(d, MRCNN_DTYPE_U8, G->device, 1, &n);
    G->mem.write(G, &t, h);
    G->mem.sync(G);
    free(tmp);
    return d;
}

static void *down(const void *d, size_t bytes) {
    void *h = malloc(bytes + 1);
    int64_t n = (int64_t)bytes;
    mrcnn_tensor t = mrcnn_tensor_view((void *)d, MRCNN_DTYPE_U8, G->device, 1, &n);
    G->mem.read(G, &t, h);
    return h;
}

static mrcnn_tensor dev(void *d, mrcnn_dtype dt, int ndim, const int64_t *shape) {
    return mrcnn_tensor_view(d, dt, G->device, ndim, shape);
}

static void kernels(const char *mode) { setenv("MRCNN_DET_KERNELS", mode, 1); }

/* The bytes of the two runs' outputs, first difference named. */
static void expect_same_bytes(const void *a, const void *b, size_t bytes, size_t elem, const char *what) {
    if (memcmp(a, b, bytes) == 0) return;
    for (size_t i = 0; i < bytes; i += elem)
        if (memcmp((const char *)a + i, (const char *)b + i, elem) != 0)
            fail_msg("%s: element %zu differs between the legacy and the batch-sort kernels", what, i / elem);
}

static void guarded(void (*body)(void)) {
    mrcnn_test_catch_begin();
    if (setjmp(mrcnn_test_jmp) == 0) {
        body();
        mrcnn_test_catch_end();
        unsetenv("MRCNN_DET_KERNELS");
        return;
    }
    mrcnn_test_catch_end();
    unsetenv("MRCNN_DET_KERNELS");
    fail_msg("failure inside the backend: %s", mrcnn_test_msg);
}
#define GUARDED_TEST(name) \
    static void name(void **state) { guarded(name##_body); }

/* Logits with ties (1/64 steps); specials spread in: NaN, +-inf, -0 and +0. */
static float *tied_logits(int64_t n, int specials) {
    float *x = malloc((size_t)n * 4);
    test_fill_uniform(x, n, -8, 8, g_seed++);
    for (int64_t i = 0; i < n; i++) x[i] = floorf(x[i] * 64.0f) / 64.0f;
    if (specials)
        for (int64_t i = 5; i < n; i += 997) x[i] = (i / 997) % 4 == 0 ? NAN : (i / 997) % 4 == 1 ? INFINITY
                                                                         : (i / 997) % 4 == 2 ? -0.0f : -INFINITY;
    return x;
}

static float *random_boxes(int64_t n, float w, float h) {
    float *b = malloc((size_t)n * 16), *u = malloc((size_t)n * 16);
    test_fill_uniform(u, n * 4, 0, 1, g_seed++);
    for (int64_t i = 0; i < n; i++) {
        const float bw = 4 + 0.3f * w * u[4 * i], bh = 4 + 0.3f * h * u[4 * i + 1];
        const float x = -10 + w * u[4 * i + 2], y = -10 + h * u[4 * i + 3];
        b[4 * i] = x, b[4 * i + 1] = y, b[4 * i + 2] = x + bw, b[4 * i + 3] = y + bh;
        if (i % 7 == 6) memcpy(b + 4 * i, b + 4 * (i / 2), 16); // IoU ties
    }
    free(u);
    return b;
}

static void proposals_case(mrcnn_dtype dt, int N, int L, const int64_t *counts, int pre, int post, int specials) {
    int64_t na = 0;
    for (int l = 0; l < L; l++) na += counts[l];
    const int32_t hw_one[2] = {800, 1216};
    int32_t *hw = malloc((size_t)N * 8);
    for (int i = 0; i < N; i++) hw[2 * i] = hw_one[0] - 16 * i, hw[2 * i + 1] = hw_one[1];
    float *anchors = random_boxes(na, 1216, 800);
    void *d_an = up(anchors, (size_t)na * 16), *d_hw = up(hw, (size_t)N * 8);
    mrcnn_tensor lg[MRCNN_DET_MAX_LEVELS], dl[MRCNN_DET_MAX_LEVELS];
    for (int l = 0; l < L; l++) {
        const int64_t n = (int64_t)N * counts[l];
        float *x = tied_logits(n, specials), *dd = malloc((size_t)n * 16 + 16);
        test_fill_uniform(dd, n * 4, -0.5f, 0.5f, g_seed++);
        const void *xb = x, *db = dd;
        uint16_t *x16 = NULL, *d16 = NULL;
        if (dt == MRCNN_DTYPE_BF16) {
            x16 = malloc((size_t)n * 2 + 2), d16 = malloc((size_t)n * 8 + 2);
            for (int64_t i = 0; i < n; i++) x16[i] = mrcnn_f32_to_bf16(x[i]);
            for (int64_t i = 0; i < 4 * n; i++) d16[i] = mrcnn_f32_to_bf16(dd[i]);
            xb = x16, db = d16;
        }
        const size_t es = dt == MRCNN_DTYPE_BF16 ? 2 : 4;
        lg[l] = dev(up(xb, (size_t)n * es), dt, 2, (int64_t[]){N, counts[l]});
        dl[l] = dev(up(db, (size_t)n * 4 * es), dt, 3, (int64_t[]){N, counts[l], 4});
        free(x), free(dd), free(x16), free(d16);
    }
    mrcnn_proposals_desc d = {.n_images = N, .n_levels = L, .pre_nms_top_n = pre, .post_nms_top_n = post,
                              .nms_thresh = 0.7f, .min_size = 1e-3f, .score_thresh = 0.0f};
    for (int l = 0; l < L; l++) d.level_counts[l] = counts[l];
    mrcnn_tensor an = dev(d_an, MRCNN_DTYPE_F32, 2, (int64_t[]){na, 4});
    mrcnn_tensor ih = dev(d_hw, MRCNN_DTYPE_I32, 2, (int64_t[]){N, 2});
    void *got[2][3];
    const char *mode[2] = {"legacy", "sort"};
    const size_t bb = (size_t)N * post * 16, sb = (size_t)N * post * 4, cb = (size_t)N * 4;
    for (int m = 0; m < 2; m++) {
        kernels(mode[m]);
        void *db = up(NULL, bb), *ds = up(NULL, sb), *dc = up(NULL, cb);
        mrcnn_tensor bx = dev(db, MRCNN_DTYPE_F32, 3, (int64_t[]){N, post, 4});
        mrcnn_tensor sc = dev(ds, MRCNN_DTYPE_F32, 2, (int64_t[]){N, post});
        mrcnn_tensor ct = dev(dc, MRCNN_DTYPE_I32, 1, (int64_t[]){N});
        G->det.proposals(G, &d, lg, dl, &an, &ih, &bx, &sc, &ct);
        got[m][0] = down(db, bb), got[m][1] = down(ds, sb), got[m][2] = down(dc, cb);
        G->mem.free(G, db), G->mem.free(G, ds), G->mem.free(G, dc);
    }
    const int32_t *kept = got[1][2];
    printf("  det.proposals %s, %d images, %lld anchors each: kept %d (image 0) alike\n", mrcnn_dtype_name(dt), N,
           (long long)na, kept[0]);
    expect_same_bytes(got[0][2], got[1][2], cb, 4, "proposal counts");
    expect_same_bytes(got[0][0], got[1][0], bb, 4, "proposal boxes");
    expect_same_bytes(got[0][1], got[1][1], sb, 4, "proposal scores");
    for (int m = 0; m < 2; m++)
        for (int q = 0; q < 3; q++) free(got[m][q]);
    for (int l = 0; l < L; l++) G->mem.free(G, lg[l].data), G->mem.free(G, dl[l].data);
    G->mem.free(G, d_an), G->mem.free(G, d_hw);
    free(anchors), free(hw);
}

static void test_proposals_same_body(void) {
    const int64_t small[] = {5000, 900, 0, 37};
    proposals_case(MRCNN_DTYPE_F32, 3, 4, small, 1000, 300, 1);
    proposals_case(MRCNN_DTYPE_BF16, 3, 4, small, 1000, 300, 1);
    const int64_t bench[] = {182400, 45600, 11400, 2850, 741}; // 800x1216, strides 4..64, 3 anchors
    proposals_case(MRCNN_DTYPE_BF16, 8, 5, bench, 2000, 2000, 0);
}

static void test_topk_same_body(void) {
    const int rows = 8, k = 2000;
    const int64_t n = 182400;
    float *x = tied_logits((int64_t)rows * n, 1);
    void *dx = up(x, (size_t)rows * n * 4);
    void *got[2][2];
    const char *mode[2] = {"legacy", "sort"};
    for (int m = 0; m < 2; m++) {
        kernels(mode[m]);
        void *dv = up(NULL, (size_t)rows * k * 4), *di = up(NULL, (size_t)rows * k * 8);
        mrcnn_cuda_topk(G, dx, rows, n, k, dv, di);
        got[m][0] = down(dv, (size_t)rows * k * 4), got[m][1] = down(di, (size_t)rows * k * 8);
        G->mem.free(G, dv), G->mem.free(G, di);
    }
    expect_same_bytes(got[0][1], got[1][1], (size_t)rows * k * 8, 8, "topk indices");
    expect_same_bytes(got[0][0], got[1][0], (size_t)rows * k * 4, 4, "topk values");
    printf("  topk %d rows of %lld, k %d alike\n", rows, (long long)n, k);
    for (int m = 0; m < 2; m++) free(got[m][0]), free(got[m][1]);
    G->mem.free(G, dx);
    free(x);
}

static void test_nms_same_body(void) {
    const int64_t n = 10000;
    float *b = random_boxes(n, 1216, 800), *s = tied_logits(n, 0);
    int32_t *cls = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) cls[i] = (int32_t)(i % 5);
    void *db = up(b, (size_t)n * 16), *ds = up(s, (size_t)n * 4), *dc = up(cls, (size_t)n * 4);
    void *got[2][2];
    const char *mode[2] = {"legacy", "sort"};
    for (int m = 0; m < 2; m++) {
        kernels(mode[m]);
        void *dk = up(NULL, (size_t)n * 8), *dn = up(NULL, 8);
        mrcnn_cuda_nms(G, db, ds, dc, n, 0.5f, dk, dn);
        got[m][0] = down(dk, (size_t)n * 8), got[m][1] = down(dn, 8);
        G->mem.free(G, dk), G->mem.free(G, dn);
    }
    expect_same_bytes(got[0][1], got[1][1], 8, 8, "nms count");
    expect_same_bytes(got[0][0], got[1][0], (size_t)n * 8, 8, "nms keep");
    printf("  nms of %lld boxes in 5 classes: %lld kept alike\n", (long long)n, (long long)*(int64_t *)got[1][1]);
    for (int m = 0; m < 2; m++) free(got[m][0]), free(got[m][1]);
    G->mem.free(G, db), G->mem.free(G, ds), G->mem.free(G, dc);
    free(b), free(s), free(cls);
}

/* K classes with background; R rois, 4 images. repeat > 0: row r's logits are row
 * r % repeat's, so that scores tie across rows (and at the candidate cap's cut). */
static void detect_case(int K, float score_thresh, int repeat) {
    const int N = 4, D = 100;
    const int64_t R = 4000;
    float *rois = malloc((size_t)R * 20), *bx = random_boxes(R, 1216, 800);
    for (int64_t r = 0; r < R; r++) {
        rois[5 * r] = r < R - 100 ? (float)(r * N / R) : -1.0f; // padding rows last
        memcpy(rois + 5 * r + 1, bx + 4 * r, 16);
    }
    float *lg = tied_logits(R * K, 0), *dl = malloc((size_t)R * K * 16);
    if (repeat > 0)
        for (int64_t r = repeat; r < R; r++) memcpy(lg + r * K, lg + (r % repeat) * K, (size_t)K * 4);
    test_fill_uniform(dl, R * K * 4, -0.5f, 0.5f, g_seed++);
    const int32_t hw[8] = {800, 1216, 800, 1216, 640, 1000, 800, 1216};
    void *d_rois = up(rois, (size_t)R * 20), *d_lg = up(lg, (size_t)R * K * 4), *d_dl = up(dl, (size_t)R * K * 16);
    void *d_hw = up(hw, sizeof hw);
    mrcnn_tensor t_rois = dev(d_rois, MRCNN_DTYPE_F32, 2, (int64_t[]){R, 5});
    mrcnn_tensor t_lg = dev(d_lg, MRCNN_DTYPE_F32, 2, (int64_t[]){R, K});
    mrcnn_tensor t_dl = dev(d_dl, MRCNN_DTYPE_F32, 2, (int64_t[]){R, K * 4});
    mrcnn_tensor t_hw = dev(d_hw, MRCNN_DTYPE_I32, 2, (int64_t[]){N, 2});
    mrcnn_detect_desc d = {.n_images = N, .num_classes = K, .max_detections = D, .score_thresh = score_thresh,
                           .nms_thresh = 0.5f, .min_size = 1e-2f, .coder = {10.0f, 10.0f, 5.0f, 5.0f, 4.135166645f}};
    const size_t sz[4] = {(size_t)N * D * 20, (size_t)N * D * 4, (size_t)N * D * 4, 4};
    void *got[2][4];
    const char *mode[2] = {"legacy", "sort"};
    for (int m = 0; m < 2; m++) {
        kernels(mode[m]);
        void *o[4];
        for (int q = 0; q < 4; q++) o[q] = up(NULL, sz[q]);
        mrcnn_tensor ob = dev(o[0], MRCNN_DTYPE_F32, 2, (int64_t[]){(int64_t)N * D, 5});
        mrcnn_tensor os = dev(o[1], MRCNN_DTYPE_F32, 1, (int64_t[]){(int64_t)N * D});
        mrcnn_tensor ol = dev(o[2], MRCNN_DTYPE_I32, 1, (int64_t[]){(int64_t)N * D});
        mrcnn_tensor oc = dev(o[3], MRCNN_DTYPE_F32, 1, (int64_t[]){1});
        G->det.detect_boxes(G, &d, &t_lg, &t_dl, &t_rois, &t_hw, &ob, &os, &ol, &oc);
        for (int q = 0; q < 4; q++) got[m][q] = down(o[q], sz[q]), G->mem.free(G, o[q]);
    }
    const char *what[4] = {"detect_boxes boxes", "detect_boxes scores", "detect_boxes labels", "detect_boxes count"};
    for (int q = 0; q < 4; q++) expect_same_bytes(got[0][q], got[1][q], sz[q], 4, what[q]);
    printf("  detect_boxes, %d classes, %lld candidates per image: %g detections alike\n", K,
           (long long)(R / N * (K - 1)), (double)*(float *)got[1][3]);
    for (int m = 0; m < 2; m++)
        for (int q = 0; q < 4; q++) free(got[m][q]);
    G->mem.free(G, d_rois), G->mem.free(G, d_lg), G->mem.free(G, d_dl), G->mem.free(G, d_hw);
    free(rois), free(bx), free(lg), free(dl);
}

/* The RPN's sampling shape: 8 images of 242,991 anchors, 256 drawn, half positive at most;
 * image 3 has no positives, image 5 fewer than the batch of negatives. */
static void test_sampler_same_body(void) {
    const int N = 8, batch = 256, pos_cap = 128;
    const int64_t n = 242991, total = (int64_t)N * n;
    int32_t *labels = malloc((size_t)total * 4);
    float *u = malloc((size_t)total * 4);
    test_fill_uniform(u, total, 0, 1, g_seed++);
    for (int64_t p = 0; p < total; p++) {
        const int img = (int)(p / n);
        const float pp = img == 3 ? 0.0f : 0.001f, pn = img == 5 ? 0.0005f : 0.9f;
        labels[p] = u[p] < pp ? 1 + (int32_t)(p % 3) : (u[p] < pp + pn ? 0 : -1);
    }
    mrcnn_rng rngs[8];
    for (int i = 0; i < N; i++) rngs[i] = mrcnn_rng_make(11, 2, i, MRCNN_RNG_RPN_SAMPLE);
    void *dl = up(labels, (size_t)total * 4), *dr = up(rngs, sizeof rngs);
    const size_t pb = (size_t)N * pos_cap * 8, nb = (size_t)N * batch * 8, cb = (size_t)N * 16;
    void *got[2][3];
    const char *mode[2] = {"legacy", "sort"};
    for (int m = 0; m < 2; m++) {
        kernels(mode[m]);
        void *work = up(NULL, cu_sample_work_bytes(N, n));
        void *dp = up(NULL, pb), *dn = up(NULL, nb), *dc = up(NULL, cb);
        cu_sample_balanced_batched(G, N, dl, n, batch, 0.5f, dr, work, dp, pos_cap, dn, batch, dc);
        got[m][0] = down(dp, pb), got[m][1] = down(dn, nb), got[m][2] = down(dc, cb);
        G->mem.free(G, work), G->mem.free(G, dp), G->mem.free(G, dn), G->mem.free(G, dc);
    }
    /* rows past an image's counts are not written: compare the counts, then the drawn rows */
    expect_same_bytes(got[0][2], got[1][2], cb, 8, "sampler counts");
    const int64_t *c = got[1][2];
    for (int i = 0; i < N; i++) {
        expect_same_bytes((int64_t *)got[0][0] + (int64_t)i * pos_cap, (int64_t *)got[1][0] + (int64_t)i * pos_cap,
                          (size_t)c[2 * i] * 8, 8, "sampled positives");
        expect_same_bytes((int64_t *)got[0][1] + (int64_t)i * batch, (int64_t *)got[1][1] + (int64_t)i * batch,
                          (size_t)c[2 * i + 1] * 8, 8, "sampled negatives");
    }
    printf("  sample_balanced, %d images of %lld: image 0 %lld + %lld, image 5 %lld + %lld alike\n", N, (long long)n,
           (long long)c[0], (long long)c[1], (long long)c[10], (long long)c[11]);
    for (int m = 0; m < 2; m++)
        for (int q = 0; q < 3; q++) free(got[m][q]);
    G->mem.free(G, dl), G->mem.free(G, dr);
    free(labels), free(u);
}

static void test_detect_boxes_same_body(void) {
    detect_case(11, 0.05f, 0);
    detect_case(21, 0.0f, 7); // 20,000 candidates per image: past the cap, ties at its cut
}

GUARDED_TEST(test_proposals_same)
GUARDED_TEST(test_sampler_same)
GUARDED_TEST(test_topk_same)
GUARDED_TEST(test_nms_same)
GUARDED_TEST(test_detect_boxes_same)

int main(void) {
    const char *why = NULL;
    G = mrcnn_backend_cuda_create(0, &why);
    if (!G) return test_gpu_skip(why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proposals_same),
        cmocka_unit_test(test_sampler_same),
        cmocka_unit_test(test_topk_same),
        cmocka_unit_test(test_nms_same),
        cmocka_unit_test(test_detect_boxes_same),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mrcnn_backend_destroy(G);
    return rc;
}
#else
int main(void) { return test_gpu_skip("this build has no CUDA (built with GPU=0)"); }
#endif
