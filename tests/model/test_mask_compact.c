/* Compact ground truth (roi_targets.h's mrcnn_mask_crops_make/copy, box_math.h's
 * mrcnn_mask_crop): the CPU backend's mask targets from the crops equal, bit for bit,
 * those of the full-size (N, G, H, W) masks the step used to stage. Masks: random
 * speckle, ellipses, masks touching every image border, empty masks, a mask of the whole
 * image (a crowd region), values other than 1; images smaller than the padded batch;
 * ROIs bigger than their mask, partly outside the image, degenerate or non-finite, and
 * padding rows. The crops themselves are checked to be tight and to hold every nonzero
 * pixel. MRCNN_MASK_COMPACT_BREAK=1 drops each crop's last column (the test must fail). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/box_math.h"
#include "mrcnn/detect_ops.h"
#include "mrcnn/model.h" // mrcnn_backend_cpu_create
#include "mrcnn/roi_targets.h"
#include "test_util.h"

enum { N = 3, G = 8, H = 96, W = 128, M = 28, ROWS_PER_GT = 6 };

static uint64_t rs = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}
static float frnd(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() % 1000001) / 1000000.0f; }

/* Mask j of an h x w image, by kind. */
static void draw(uint8_t *m, int h, int w, int kind) {
    memset(m, 0, (size_t)h * w);
    const uint8_t one = kind % 2 ? 1 : 255;
    switch (kind) {
    case 0: // empty
        break;
    case 1: // an ellipse inside
    case 2: {
        float cy = frnd(10, h - 10), cx = frnd(10, w - 10), ry = frnd(3, 20), rx = frnd(3, 30);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                if ((y - cy) * (y - cy) / (ry * ry) + (x - cx) * (x - cx) / (rx * rx) <= 1) m[y * w + x] = one;
        break;
    }
    case 3: // touching the top-left corner
        for (int y = 0; y < 9; y++)
            for (int x = 0; x < 13 - y; x++) m[y * w + x] = one;
        break;
    case 4: // touching the bottom-right corner
        for (int y = h - 11; y < h; y++)
            for (int x = w - 7; x < w; x++) m[y * w + x] = one;
        break;
    case 5: // speckle over a random rectangle, with holes and an isolated far pixel
    case 6: {
        int y0 = (int)(rnd() % (unsigned)(h / 2)), x0 = (int)(rnd() % (unsigned)(w / 2));
        int y1 = y0 + 1 + (int)(rnd() % (unsigned)(h / 2)), x1 = x0 + 1 + (int)(rnd() % (unsigned)(w / 2));
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) m[y * w + x] = rnd() % 3 ? 0 : (uint8_t)(1 + rnd() % 255);
        m[(h - 1) * w + (int)(rnd() % (unsigned)w)] = one; // on the bottom border
        break;
    }
    case 7: // the whole image (a crowd region)
        memset(m, one, (size_t)h * w);
        break;
    default: // a single pixel on the right border
        m[(int)(rnd() % (unsigned)h) * w + w - 1] = one;
        break;
    }
}

static void test_targets_bit_identical(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    const int hw[2 * N] = {H, W, H - 21, W - 33, H - 40, W}; // the last two smaller than the batch
    int counts[N] = {G, G - 2, 5};
    uint8_t *own[N];              // each image's (counts, h, w) masks, as the loader gives them
    uint8_t *full = calloc((size_t)N * G * H * W, 1); // (N, G, H, W) as the old staging
    for (int i = 0; i < N; i++) {
        const int h = hw[2 * i], w = hw[2 * i + 1];
        own[i] = malloc((size_t)counts[i] * h * w);
        for (int j = 0; j < counts[i]; j++) {
            draw(own[i] + (size_t)j * h * w, h, w, (i * 3 + j) % 9);
            for (int y = 0; y < h; y++)
                memcpy(full + (((size_t)i * G + j) * H + y) * W, own[i] + ((size_t)j * h + y) * w, (size_t)w);
        }
    }
    const uint8_t *rows[N * G]; // each mask's first row: packed, strides NULL
    for (int i = 0; i < N; i++)
        for (int j = 0; j < G; j++)
            rows[i * G + j] = j < counts[i] ? own[i] + (size_t)j * hw[2 * i] * hw[2 * i + 1] : NULL;
    int32_t *crops = malloc(sizeof *crops * (size_t)N * G * MRCNN_MASK_CROP_WORDS);
    const size_t need = mrcnn_mask_crops_make(rows, NULL, counts, hw, N, G, crops);
    uint8_t *pool = malloc(need ? need : 1);
    size_t sum = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < G; j++) {
            const int32_t *c = crops + ((size_t)i * G + j) * MRCNN_MASK_CROP_WORDS;
            if (j >= counts[i]) {
                for (int k = 0; k < MRCNN_MASK_CROP_WORDS; k++) assert_int_equal(c[k], 0);
                continue;
            }
            sum += (size_t)c[3] * c[4];
        }
    assert_true(sum == need);
    if (getenv("MRCNN_MASK_COMPACT_BREAK"))
        for (int k = 0; k < N * G; k++)
            if (crops[k * MRCNN_MASK_CROP_WORDS + 4] > 1) crops[k * MRCNN_MASK_CROP_WORDS + 4]--;
    mrcnn_mask_crops_copy(rows, NULL, counts, hw, N, G, crops, pool);

    /* The same masks read in place, as training's feed gives them: each in its plane of a
     * padded H x W canvas (rows W bytes apart, junk right of and below the image that
     * must not be read), a dropped crowd plane between masks 0 and 1: the same crops,
     * the same pool bytes. */
    uint8_t *canvas = malloc((size_t)N * (G + 1) * H * W);
    for (size_t k = 0; k < (size_t)N * (G + 1) * H * W; k++) canvas[k] = (uint8_t)(1 + k % 251);
    const uint8_t *in_place[N * G];
    int strides[N];
    for (int i = 0; i < N; i++) {
        const int h = hw[2 * i], w = hw[2 * i + 1];
        strides[i] = W;
        for (int j = 0; j < G; j++) {
            uint8_t *plane = canvas + ((size_t)i * (G + 1) + j + (j > 0)) * H * W;
            for (int y = 0; y < h && j < counts[i]; y++)
                memcpy(plane + (size_t)y * W, own[i] + ((size_t)j * h + y) * w, (size_t)w);
            in_place[i * G + j] = j < counts[i] ? plane : NULL;
        }
    }
    int32_t *crops2 = malloc(sizeof *crops2 * (size_t)N * G * MRCNN_MASK_CROP_WORDS);
    assert_true(mrcnn_mask_crops_make(in_place, strides, counts, hw, N, G, crops2) == need);
    assert_memory_equal(crops, crops2, sizeof *crops * (size_t)N * G * MRCNN_MASK_CROP_WORDS);
    uint8_t *pool2 = malloc(need ? need : 1);
    mrcnn_mask_crops_copy(in_place, strides, counts, hw, N, G, crops2, pool2);
    assert_memory_equal(pool, pool2, need);
    free(canvas), free(crops2), free(pool2);

    /* ROIs: per gt, boxes around its mask's rectangle, bigger, shifted partly outside
     * the image, a degenerate one, a non-finite one; padding rows between images. */
    int n_rows = 0;
    const int cap = N * G * ROWS_PER_GT + 4;
    float *rois = calloc((size_t)cap * 5, sizeof(float));
    int32_t *fg_gt = calloc((size_t)cap, sizeof(int32_t));
    for (int i = 0; i < N; i++) {
        const int h = hw[2 * i], w = hw[2 * i + 1];
        for (int j = 0; j < counts[i]; j++)
            for (int r = 0; r < ROWS_PER_GT; r++) {
                float *b = rois + 5 * n_rows;
                b[0] = (float)i;
                const float x1 = frnd(-20, w - 5), y1 = frnd(-20, h - 5);
                switch (r) {
                case 0: b[1] = 0, b[2] = 0, b[3] = (float)w, b[4] = (float)h; break; // the whole image
                case 1: b[1] = -30, b[2] = -30, b[3] = w + 30.5f, b[4] = h + 17.25f; break; // beyond it
                case 2: b[1] = x1, b[2] = y1, b[3] = x1 + frnd(1, 60), b[4] = y1 + frnd(1, 60); break;
                case 3: b[1] = x1, b[2] = y1, b[3] = x1 + 0.25f, b[4] = y1; break; // degenerate
                case 4: b[1] = NAN, b[2] = y1, b[3] = x1, b[4] = y1 + 3; break;    // not finite
                default: b[1] = w - 3.5f, b[2] = h - 2.75f, b[3] = w + 9.0f, b[4] = h + 4.0f; break; // the corner
                }
                fg_gt[n_rows++] = i * G + j;
            }
        fg_gt[n_rows] = -1; // a padding row
        rois[5 * n_rows] = -1;
        n_rows++;
    }
    assert_true(n_rows <= cap);

    const int64_t mm = (int64_t)M * M;
    float *t_full = malloc(sizeof(float) * n_rows * mm), *t_crop = malloc(sizeof(float) * n_rows * mm);
    float *w_full = malloc(sizeof(float) * n_rows * mm), *w_crop = malloc(sizeof(float) * n_rows * mm);
    float *boxes = calloc((size_t)N * G * 4, sizeof(float));
    int32_t *labels = malloc(sizeof(int32_t) * N * G);
    for (int k = 0; k < N * G; k++) labels[k] = k % 3 ? 1 : -1; // ignored instances too: targets do not look
    const mrcnn_device d = MRCNN_DEVICE_CPU;
    mrcnn_gt_batch gt = {
        .n_images = N,
        .max_gt = G,
        .mask_h = H,
        .mask_w = W,
        .boxes = mrcnn_tensor_view(boxes, MRCNN_DTYPE_F32, d, 3, (int64_t[]){N, G, 4}),
        .labels = mrcnn_tensor_view(labels, MRCNN_DTYPE_I32, d, 2, (int64_t[]){N, G}),
        .counts = mrcnn_tensor_view(counts, MRCNN_DTYPE_I32, d, 1, (int64_t[]){N}),
        .masks = mrcnn_tensor_view(full, MRCNN_DTYPE_U8, d, 4, (int64_t[]){N, G, H, W}),
        .image_hw = mrcnn_tensor_view((void *)hw, MRCNN_DTYPE_I32, d, 2, (int64_t[]){N, 2}),
    };
    mrcnn_tensor tr = mrcnn_tensor_view(rois, MRCNN_DTYPE_F32, d, 2, (int64_t[]){n_rows, 5});
    mrcnn_tensor tg = mrcnn_tensor_view(fg_gt, MRCNN_DTYPE_I32, d, 1, (int64_t[]){n_rows});
    mrcnn_tensor tf = mrcnn_tensor_view(t_full, MRCNN_DTYPE_F32, d, 3, (int64_t[]){n_rows, M, M});
    mrcnn_tensor wf = mrcnn_tensor_view(w_full, MRCNN_DTYPE_F32, d, 3, (int64_t[]){n_rows, M, M});
    be->det.mask_targets(be, &gt, &tr, &tg, M, &tf, &wf);
    gt.masks.data = NULL; // the compact path must not need them
    gt.mask_crops = mrcnn_tensor_view(crops, MRCNN_DTYPE_I32, d, 3, (int64_t[]){N, G, MRCNN_MASK_CROP_WORDS});
    gt.mask_pool = mrcnn_tensor_view(pool, MRCNN_DTYPE_U8, d, 1, (int64_t[]){(int64_t)(need ? need : 1)});
    mrcnn_tensor tc = mrcnn_tensor_view(t_crop, MRCNN_DTYPE_F32, d, 3, (int64_t[]){n_rows, M, M});
    mrcnn_tensor wc = mrcnn_tensor_view(w_crop, MRCNN_DTYPE_F32, d, 3, (int64_t[]){n_rows, M, M});
    be->det.mask_targets(be, &gt, &tr, &tg, M, &tc, &wc);
    int64_t differ = 0, nonzero = 0;
    for (int64_t k = 0; k < n_rows * mm; k++) {
        differ += memcmp(&t_full[k], &t_crop[k], sizeof(float)) != 0;
        nonzero += t_full[k] != 0;
    }
    if (differ) fail_msg("%lld of %lld mask-target values differ", (long long)differ, (long long)(n_rows * mm));
    assert_memory_equal(w_full, w_crop, sizeof(float) * n_rows * mm);
    assert_true(nonzero > n_rows * mm / 20); // the comparison is not of zeros alone

    /* The host helper alone too (one image, the crops of image 0). */
    int32_t idx[G];
    for (int j = 0; j < G; j++) idx[j] = j;
    float bx[G * 4];
    for (int j = 0; j < G; j++) bx[4 * j] = -5.0f + j, bx[4 * j + 1] = 2.5f, bx[4 * j + 2] = W + 1.0f, bx[4 * j + 3] = H;
    mrcnn_mask_targets(own[0], counts[0], H, W, bx, idx, counts[0], M, t_full);
    mrcnn_mask_targets_cropped(pool, (int64_t)need, crops, counts[0], H, W, bx, idx, counts[0], M, t_crop);
    assert_memory_equal(t_full, t_crop, sizeof(float) * counts[0] * mm);

    /* A crop outside the pool is refused. */
    int32_t bad[MRCNN_MASK_CROP_WORDS] = {(int32_t)need, 0, 0, 1, 1};
    EXPECT_FAIL(mrcnn_mask_targets_cropped(pool, (int64_t)need, bad, 1, H, W, bx, idx, 1, M, t_crop), "pool");

    for (int i = 0; i < N; i++) free(own[i]);
    free(full), free(crops), free(pool), free(rois), free(fg_gt), free(t_full), free(t_crop), free(w_full),
        free(w_crop), free(boxes), free(labels);
    mrcnn_backend_destroy(be);
}

/* Each crop holds every nonzero pixel of its mask and is tight (its first and last rows
 * and columns have one); an empty mask has an empty crop. */
static void test_crops_tight(void **state) {
    enum { h = 57, w = 83, K = 40 };
    uint8_t *m = malloc((size_t)K * h * w);
    for (int j = 0; j < K; j++) draw(m + (size_t)j * h * w, h, w, j % 9);
    const uint8_t *masks[K];
    for (int j = 0; j < K; j++) masks[j] = m + (size_t)j * h * w;
    int counts[1] = {K}, hw[2] = {h, w};
    int32_t crops[K * MRCNN_MASK_CROP_WORDS];
    size_t need = mrcnn_mask_crops_make(masks, NULL, counts, hw, 1, K, crops);
    uint8_t *pool = malloc(need ? need : 1);
    mrcnn_mask_crops_copy(masks, NULL, counts, hw, 1, K, crops, pool);
    for (int j = 0; j < K; j++) {
        const mrcnn_mask_crop c = mrcnn_mask_crop_load(crops + j * MRCNN_MASK_CROP_WORDS);
        const uint8_t *mj = m + (size_t)j * h * w;
        int any = 0, top = 0, bottom = 0, left = 0, right = 0;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                const int v = mj[y * w + x] != 0;
                any |= v;
                assert_true((mrcnn_mask_crop_at(pool, &c, y, x) != 0) == v);
                if (v && y == c.y0) top = 1;
                if (v && y == c.y0 + c.h - 1) bottom = 1;
                if (v && x == c.x0) left = 1;
                if (v && x == c.x0 + c.w - 1) right = 1;
            }
        if (!any) {
            assert_int_equal(c.h * c.w, 0);
            continue;
        }
        assert_true(top && bottom && left && right);
    }
    free(m), free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_targets_bit_identical), cmocka_unit_test(test_crops_tight)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
