/* The CUDA detection kernels two ways (src/backend/cuda/detect_internal.h, included by
 * path): the default batch sort (one cub::DeviceRadixSort over the whole batch) against
 * MRCNN_DET_KERNELS=legacy (a block per (image, level) or per image), which must give the
 * same bytes: det.proposals (fp32 and bf16 logits, ties, NaN and infinite logits, an
 * empty level, and the 8 x 800x1216 bench shape), the batched balanced sampler at the
 * RPN's and the ROI head's shapes and past the parallel draws' FY_MAX, mrcnn_cuda_topk,
 * mrcnn_cuda_nms (with classes and tied scores), the batched NMS at the proposals' shape
 * with valid counts across word edges and the max_keep stop (the word-at-a-time greedy
 * pass), det.roi_sample at the training shape (the one-grid rows) and det.detect_boxes
 * (under and past its candidate cap, with tied scores). Both use the same order keys and
 * the same decode, so even NaNs land alike; the sampler, the batched NMS and roi_sample
 * are also checked against the host here, and test_cuda_detect compares each op with
 * the host. Without a GPU, or in a GPU=0 build, it prints "skip [gpu]: ..." and exits 77. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/boxes.h"
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

/* The batched sampler, N images of n labels, legacy against the default (draws in
 * parallel, a block per image and side) and against the host's mrcnn_sample_balanced
 * per image. Image 3 has no positives, image 5 few negatives. */
static void sampler_case(int N, int64_t n, int batch, float fraction, float p_pos, float p_neg) {
    const int64_t total = (int64_t)N * n, want_pos = (int64_t)((double)batch * (double)fraction);
    const int pos_cap = (int)(want_pos < n ? (want_pos > 0 ? want_pos : 1) : n);
    int32_t *labels = malloc((size_t)total * 4);
    float *u = malloc((size_t)total * 4);
    test_fill_uniform(u, total, 0, 1, g_seed++);
    for (int64_t p = 0; p < total; p++) {
        const int img = (int)(p / n);
        const float pp = img == 3 ? 0.0f : p_pos, pn = img == 5 ? p_neg / 2000 : p_neg;
        labels[p] = u[p] < pp ? 1 + (int32_t)(p % 3) : (u[p] < pp + pn ? 0 : -1);
    }
    mrcnn_rng *rngs = malloc(sizeof(mrcnn_rng) * (size_t)N);
    for (int i = 0; i < N; i++) rngs[i] = mrcnn_rng_make(11, 2, i, MRCNN_RNG_RPN_SAMPLE);
    void *dl = up(labels, (size_t)total * 4), *dr = up(rngs, sizeof(mrcnn_rng) * (size_t)N);
    const size_t pb = (size_t)N * pos_cap * 8, nb = (size_t)N * batch * 8, cb = (size_t)N * 16;
    void *got[2][3];
    const char *mode[2] = {"legacy", "sort"};
    for (int m = 0; m < 2; m++) {
        kernels(mode[m]);
        void *work = up(NULL, cu_sample_work_bytes(N, n));
        void *dp = up(NULL, pb), *dn = up(NULL, nb), *dc = up(NULL, cb);
        cu_sample_balanced_batched(G, N, dl, n, batch, fraction, dr, work, dp, pos_cap, dn, batch, dc);
        got[m][0] = down(dp, pb), got[m][1] = down(dn, nb), got[m][2] = down(dc, cb);
        G->mem.free(G, work), G->mem.free(G, dp), G->mem.free(G, dn), G->mem.free(G, dc);
    }
    /* rows past an image's counts are not written: compare the counts, then the drawn rows */
    expect_same_bytes(got[0][2], got[1][2], cb, 8, "sampler counts");
    const int64_t *c = got[1][2];
    int64_t *hp = malloc((size_t)batch * 8 + 8), *hn = malloc((size_t)batch * 8 + 8);
    for (int i = 0; i < N; i++) {
        const int64_t *gp = (int64_t *)got[1][0] + (int64_t)i * pos_cap, *gn = (int64_t *)got[1][1] + (int64_t)i * batch;
        expect_same_bytes((int64_t *)got[0][0] + (int64_t)i * pos_cap, gp, (size_t)c[2 * i] * 8, 8, "sampled positives");
        expect_same_bytes((int64_t *)got[0][1] + (int64_t)i * batch, gn, (size_t)c[2 * i + 1] * 8, 8, "sampled negatives");
        int64_t np = -1, nn = -1;
        mrcnn_sample_balanced(labels + (int64_t)i * n, n, batch, fraction, &rngs[i], hp, &np, hn, &nn);
        if (np != c[2 * i] || nn != c[2 * i + 1])
            fail_msg("sampler image %d: gpu %lld + %lld, cpu %lld + %lld", i, (long long)c[2 * i],
                     (long long)c[2 * i + 1], (long long)np, (long long)nn);
        for (int64_t q = 0; q < np; q++)
            if (gp[q] != hp[q]) fail_msg("sampler image %d positive %lld: gpu %lld, cpu %lld", i, (long long)q, (long long)gp[q], (long long)hp[q]);
        for (int64_t q = 0; q < nn; q++)
            if (gn[q] != hn[q]) fail_msg("sampler image %d negative %lld: gpu %lld, cpu %lld", i, (long long)q, (long long)gn[q], (long long)hn[q]);
    }
    printf("  sample_balanced, %d images of %lld, batch %d: image 0 %lld + %lld, image 5 %lld + %lld alike, as the cpu\n",
           N, (long long)n, batch, (long long)c[0], (long long)c[1], (long long)c[10], (long long)c[11]);
    for (int m = 0; m < 2; m++)
        for (int q = 0; q < 3; q++) free(got[m][q]);
    G->mem.free(G, dl), G->mem.free(G, dr);
    free(labels), free(u), free(rngs), free(hp), free(hn);
}

static void test_sampler_same_body(void) {
    sampler_case(8, 242991, 256, 0.5f, 0.001f, 0.9f); // the RPN's: 8 images of 242,991 anchors
    sampler_case(8, 2008, 512, 0.25f, 0.08f, 0.8f);   // the ROI sampler's: 2,000 proposals + 8 gt
    sampler_case(8, 30000, 6000, 0.25f, 0.2f, 0.7f);  // 4,500 negatives drawn: past FY_MAX, the serial draws
}

/* The batched NMS at the proposals' shape (8 images, 5 levels of up to 2,000 boxes, the
 * level as the class), valid counts across word edges and 0, tied scores, the stop at
 * max_keep (2,000, 100, none): legacy against the default (the word-at-a-time greedy
 * pass), and the kept rows against the host's mrcnn_batched_nms. */
static void nms_batched_case(int max_keep) {
    const int N = 8, cap = 8741;
    const int nvs[8] = {cap, 0, 1, 64, 65, 5000, cap - 100, cap};
    const int64_t total = (int64_t)N * cap;
    float *b = random_boxes(total, 1216, 800), *s = tied_logits(total, 0);
    int32_t *lvl = malloc((size_t)total * 4), *nv = malloc(32);
    for (int i = 0; i < N; i++) {
        nv[i] = nvs[i];
        for (int j = 0; j < cap; j++) {
            lvl[(int64_t)i * cap + j] = j * 5 / cap;
            if (j >= nv[i]) s[(int64_t)i * cap + j] = -INFINITY; // invalid rows sort last
        }
    }
    void *db = up(b, (size_t)total * 16), *ds = up(s, (size_t)total * 4), *dc = up(lvl, (size_t)total * 4);
    void *dv = up(nv, 32);
    void *got[2][2];
    const char *mode[2] = {"legacy", "sort"};
    for (int m = 0; m < 2; m++) {
        kernels(mode[m]);
        void *work = up(NULL, cu_nms_work_bytes(N, cap)), *dk = up(NULL, (size_t)total * 4), *dn = up(NULL, 32);
        cu_nms_batched(G, N, cap, db, ds, dc, dv, 0.7f, max_keep, work, dk, dn);
        got[m][0] = down(dk, (size_t)total * 4), got[m][1] = down(dn, 32);
        G->mem.free(G, work), G->mem.free(G, dk), G->mem.free(G, dn);
    }
    expect_same_bytes(got[0][1], got[1][1], 32, 4, "batched nms counts");
    expect_same_bytes(got[0][0], got[1][0], (size_t)total * 4, 4, "batched nms keep");
    const int32_t *kc = got[1][1], *kk = got[1][0];
    int64_t *ref = malloc((size_t)cap * 8);
    for (int i = 0; i < N; i++) {
        int64_t nr = mrcnn_batched_nms(b + (int64_t)i * cap * 4, s + (int64_t)i * cap, lvl + (int64_t)i * cap, nv[i],
                                       0.7f, ref);
        if (max_keep > 0 && nr > max_keep) nr = max_keep;
        if (kc[i] != nr) fail_msg("batched nms image %d (%d valid): gpu keeps %d, cpu %lld", i, nv[i], kc[i], (long long)nr);
        for (int j = 0; j < cap; j++) {
            const int64_t want = j < nr ? ref[j] : -1;
            if (kk[(int64_t)i * cap + j] != want)
                fail_msg("batched nms image %d keep[%d]: gpu %d, cpu %lld", i, j, kk[(int64_t)i * cap + j], (long long)want);
        }
    }
    printf("  batched nms, %d images of %d, max_keep %d: %d kept (image 0) alike, as the cpu\n", N, cap, max_keep, kc[0]);
    for (int m = 0; m < 2; m++) free(got[m][0]), free(got[m][1]);
    G->mem.free(G, db), G->mem.free(G, ds), G->mem.free(G, dc), G->mem.free(G, dv);
    free(b), free(s), free(lvl), free(nv), free(ref);
}

static void test_nms_batched_same_body(void) {
    nms_batched_case(2000);
    nms_batched_case(100);
    nms_batched_case(0);
}

/* det.roi_sample at the training shape (8 images, 2,000 proposals, 8 gt, 512 rows and 128
 * fg rows each; an image without gt, one without proposals): legacy (a one-thread prefix,
 * a block per image, a padding pass) against the default (one grid over (slot, image)),
 * byte for byte, and against the CPU backend (the regression targets within 1e-5, the
 * device's logf/expf). */
static void test_roi_sample_same_body(void) {
    enum { N = 8, P = 2000, NG = 8, S = 512, F = 128 };
    const int32_t gcnt[N] = {8, 0, 3, 8, 1, 5, 8, 2}, pcnt[N] = {2000, 1500, 2000, 0, 2000, 37, 2000, 1999};
    int32_t hw[2 * N], glab[N * NG];
    float *gb = calloc((size_t)N * NG * 4, 4), *props = calloc((size_t)N * P * 4, 4), *jit = malloc((size_t)N * P * 16);
    test_fill_uniform(jit, (int64_t)N * P * 4, -12, 12, g_seed++);
    for (int i = 0; i < N; i++) {
        hw[2 * i] = 800 - 16 * i, hw[2 * i + 1] = 1216;
        float *r = random_boxes(NG, 1216, 800), *q = random_boxes(P, 1216, 800);
        for (int j = 0; j < NG; j++) {
            glab[i * NG + j] = j < gcnt[i] ? 1 + (i + j) % 90 : -1;
            if (j < gcnt[i]) memcpy(gb + (i * NG + j) * 4, r + 4 * j, 16);
        }
        for (int j = 0; j < pcnt[i]; j++) { // two thirds near a gt box, so that there are positives
            float *o = props + ((int64_t)i * P + j) * 4;
            if (gcnt[i] > 0 && j % 3 != 2)
                for (int k = 0; k < 4; k++) o[k] = gb[(i * NG + j % gcnt[i]) * 4 + k] + jit[((int64_t)i * P + j) * 4 + k];
            else memcpy(o, q + 4 * j, 16);
            if (o[2] <= o[0]) o[2] = o[0] + 1;
            if (o[3] <= o[1]) o[3] = o[1] + 1;
        }
        free(r), free(q);
    }
    mrcnn_rng rngs[N];
    for (int i = 0; i < N; i++) rngs[i] = mrcnn_rng_make(21, 5, 100 + i, MRCNN_RNG_ROI_SAMPLE);
    uint8_t masks[N * NG * 4] = {0};
    const void *in_h[7] = {props, pcnt, gb, glab, gcnt, hw, rngs};
    const size_t in_b[7] = {(size_t)N * P * 16, sizeof pcnt, (size_t)N * NG * 16, sizeof glab, sizeof gcnt, sizeof hw,
                            sizeof rngs};
    void *in_d[7];
    for (int q = 0; q < 7; q++) in_d[q] = up(in_h[q], in_b[q]);
    void *dm = up(masks, sizeof masks);
    /* the inputs as tensors, on the GPU (d) and the host (h) */
    mrcnn_tensor t[2][7], tm[2];
    const mrcnn_dtype dts[7] = {MRCNN_DTYPE_F32, MRCNN_DTYPE_I32, MRCNN_DTYPE_F32, MRCNN_DTYPE_I32,
                                MRCNN_DTYPE_I32, MRCNN_DTYPE_I32, MRCNN_DTYPE_I32};
    const int64_t shp[7][3] = {{N, P, 4}, {N}, {N, NG, 4}, {N, NG}, {N}, {N, 2}, {N, MRCNN_RNG_WORDS}};
    const int nd[7] = {3, 1, 3, 2, 1, 2, 2};
    for (int q = 0; q < 7; q++) {
        t[0][q] = mrcnn_tensor_view((void *)in_h[q], dts[q], MRCNN_DEVICE_CPU, nd[q], shp[q]);
        t[1][q] = dev(in_d[q], dts[q], nd[q], shp[q]);
    }
    tm[0] = mrcnn_tensor_view(masks, MRCNN_DTYPE_U8, MRCNN_DEVICE_CPU, 4, (int64_t[]){N, NG, 2, 2});
    tm[1] = dev(dm, MRCNN_DTYPE_U8, 4, (int64_t[]){N, NG, 2, 2});
    mrcnn_roi_sample_desc d = {.n_images = N, .prop_cap = P, .batch_size_per_image = S, .max_fg = F,
                               .positive_fraction = 0.25f, .iou_thresh = 0.5f,
                               .coder = mrcnn_box_coder_make(10, 10, 5, 5)};
    /* rois, labels, box_labels, reg_t, reg_w, fg_rois, fg_labels, fg_gt, n_rois, n_fg */
    const int64_t rows[10] = {N * S * 5, N * S, N * S, N * S * 4, N * S * 4, N * F * 5, N * F, N * F, 1, 1};
    const int64_t oshape[10][2] = {{N * S, 5}, {N * S}, {N * S}, {N * S, 4}, {N * S, 4},
                                   {N * F, 5}, {N * F}, {N * F}, {1}, {1}};
    const int ond[10] = {2, 1, 1, 2, 2, 2, 1, 1, 1, 1};
    const int is_int[10] = {0, 1, 1, 0, 0, 0, 1, 1, 0, 0};
    const char *what[10] = {"rois", "labels", "box_labels", "reg_targets", "reg_weights",
                            "fg_rois", "fg_labels", "fg_gt", "n_rois", "n_fg"};
    void *got[3][10];
    mrcnn_backend *cpu = mrcnn_backend_cpu_create();
    const char *mode[2] = {"legacy", "sort"};
    for (int m = 0; m < 3; m++) { // legacy, sort, cpu
        const int host = m == 2;
        if (!host) kernels(mode[m]);
        mrcnn_backend *be = host ? cpu : G;
        mrcnn_tensor o[10];
        void *buf[10];
        for (int q = 0; q < 10; q++) {
            const mrcnn_dtype dt = is_int[q] ? MRCNN_DTYPE_I32 : MRCNN_DTYPE_F32;
            buf[q] = host ? malloc((size_t)rows[q] * 4) : up(NULL, (size_t)rows[q] * 4);
            if (host) memset(buf[q], 0xff, (size_t)rows[q] * 4);
            o[q] = host ? mrcnn_tensor_view(buf[q], dt, MRCNN_DEVICE_CPU, ond[q], oshape[q])
                        : dev(buf[q], dt, ond[q], oshape[q]);
        }
        const mrcnn_tensor *in = t[host ? 0 : 1];
        const mrcnn_gt_batch gt = {N, NG, 2, 2, in[2], in[3], in[4], tm[host ? 0 : 1], in[5], {0}, {0}};
        be->det.roi_sample(be, &d, &in[0], &in[1], &gt, &in[6], &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                           &o[7], &o[8], &o[9]);
        for (int q = 0; q < 10; q++) {
            got[m][q] = host ? buf[q] : down(buf[q], (size_t)rows[q] * 4);
            if (!host) G->mem.free(G, buf[q]);
        }
    }
    for (int q = 0; q < 10; q++) {
        expect_same_bytes(got[0][q], got[1][q], (size_t)rows[q] * 4, 4, what[q]);
        for (int64_t i = 0; i < rows[q]; i++) {
            const float *g = got[1][q], *c = got[2][q];
            const int32_t *gi = got[1][q], *ci = got[2][q];
            const int same = is_int[q] ? gi[i] == ci[i]
                                       : (g[i] == c[i] || (q == 3 && fabs((double)g[i] - c[i]) <= 1e-5 * fmax(1.0, fabs((double)c[i]))));
            if (!same) fail_msg("roi_sample %s[%lld]: gpu %g (%d), cpu %g (%d)", what[q], (long long)i, (double)g[i], gi[i], (double)c[i], ci[i]);
        }
    }
    const float nr = *(float *)got[1][8], nf = *(float *)got[1][9];
    printf("  det.roi_sample %d images of %d proposals: %g rows, %g fg alike, as the cpu\n", N, P, (double)nr, (double)nf);
    assert_true(nf > 0 && nr < N * S && nf < N * F); // positives, and padding rows in both outputs
    mrcnn_backend_destroy(cpu);
    for (int m = 0; m < 3; m++)
        for (int q = 0; q < 10; q++) free(got[m][q]);
    for (int q = 0; q < 7; q++) G->mem.free(G, in_d[q]);
    G->mem.free(G, dm);
    free(gb), free(props), free(jit);
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
GUARDED_TEST(test_nms_batched_same)
GUARDED_TEST(test_roi_sample_same)

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
        cmocka_unit_test(test_nms_batched_same),
        cmocka_unit_test(test_roi_sample_same),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mrcnn_backend_destroy(G);
    return rc;
}
#else
int main(void) { return test_gpu_skip("this build has no CUDA (built with GPU=0)"); }
#endif
