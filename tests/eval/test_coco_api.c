/* The in-memory path of COCO evaluation (what inference uses): detections added with
 * mrcnn_coco_dets_add_rle, evaluated without a results file; hand-checked numbers and
 * argument errors. The parity with pycocotools is test_cocoeval.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/cocoeval.h"
#include "test_util.h"

/* Two 20x30 images (int64 ids), categories 3 and 1000000000007 (gaps), three objects:
 * a 10x10 square and a 4x4 square in image A (category 3), a crowd region in image B. */
static const char *k_gt =
    "{\"images\": [{\"id\": 900100581904, \"height\": 20, \"width\": 30}, {\"id\": 7, \"height\": 20, \"width\": 30}],\n"
    " \"categories\": [{\"id\": 1000000000007, \"name\": \"big\"}, {\"id\": 3, \"name\": \"sq\"}],\n"
    " \"annotations\": [\n"
    "  {\"id\": 11, \"image_id\": 900100581904, \"category_id\": 3, \"iscrowd\": 0, \"area\": 100, \"bbox\": [0, 0, 10, 10],\n"
    "   \"segmentation\": [[0, 0, 10, 0, 10, 10, 0, 10]]},\n"
    "  {\"id\": 12, \"image_id\": 900100581904, \"category_id\": 3, \"iscrowd\": 0, \"area\": 16, \"bbox\": [20, 10, 4, 4],\n"
    "   \"segmentation\": [[20, 10, 24, 10, 24, 14, 20, 14]]},\n"
    "  {\"id\": 13, \"image_id\": 7, \"category_id\": 1000000000007, \"iscrowd\": 1, \"area\": 600, \"bbox\": [0, 0, 30, 20],\n"
    "   \"segmentation\": {\"size\": [20, 30], \"counts\": [0, 600]}}]}\n";

static char g_gt_path[64];

static int setup(void **state) {
    strcpy(g_gt_path, "/tmp/mrcnn_test_gt_XXXXXX");
    int fd = mkstemp(g_gt_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, k_gt, strlen(k_gt)), (ssize_t)strlen(k_gt));
    close(fd);
    return 0;
}

static int teardown(void **state) {
    unlink(g_gt_path);
    return 0;
}

/* A rectangle mask as an RLE of the 20x30 image. */
static void rect_rle(mrcnn_rle *r, int x0, int y0, int w, int h) {
    uint8_t m[20 * 30] = {0};
    for (int y = y0; y < y0 + h; y++)
        for (int x = x0; x < x0 + w; x++) m[y * 30 + x] = 1;
    mrcnn_rle_from_mask(r, m, 20, 30);
}

static void add(mrcnn_coco_dets *d, int64_t img, int64_t cat, double score, int x, int y, int w, int h) {
    mrcnn_rle r;
    rect_rle(&r, x, y, w, h);
    double box[4] = {x, y, w, h};
    mrcnn_coco_dets_add_rle(d, img, cat, score, box, &r);
    mrcnn_rle_free(&r);
}

static void test_gt_loading(void **state) {
    mrcnn_coco_gt gt;
    mrcnn_coco_gt_load(&gt, g_gt_path);
    assert_int_equal(gt.n_images, 2);
    assert_int_equal(gt.n_cats, 2);
    assert_int_equal(gt.n_anns, 3);
    assert_int_equal(mrcnn_coco_gt_find_image(&gt, 900100581904LL), 0);
    assert_int_equal(mrcnn_coco_gt_find_image(&gt, 7), 1);
    assert_int_equal(mrcnn_coco_gt_find_image(&gt, 8), -1);
    assert_int_equal(mrcnn_coco_gt_find_category(&gt, 1000000000007LL), 0);
    assert_int_equal(gt.anns[2].segm.kind, MRCNN_SEGM_COUNTS);
    assert_int_equal(gt.anns[2].iscrowd, 1);
    assert_int_equal(gt.anns[0].segm.kind, MRCNN_SEGM_POLYGONS);
    assert_string_equal(gt.cats[0].name, "big");
    mrcnn_coco_gt_free(&gt);
}

static void test_perfect_and_partial(void **state) {
    mrcnn_coco_gt gt;
    mrcnn_coco_gt_load(&gt, g_gt_path);
    mrcnn_coco_dets d;
    mrcnn_coco_dets_init(&d);
    add(&d, 900100581904LL, 3, 0.9, 0, 0, 10, 10); // exact: tp at every threshold
    add(&d, 900100581904LL, 3, 0.8, 20, 10, 4, 4); // exact
    add(&d, 7, 1000000000007LL, 0.7, 2, 2, 5, 5);  // inside the crowd region: ignored
    for (int type = 0; type < 2; type++) {
        mrcnn_coco_eval e;
        mrcnn_coco_evaluate(&gt, &d, (mrcnn_iou_type)type, 2, &e);
        assert_int_equal(e.K, 2);
        assert_true(e.cat_ids[0] == 3 && e.cat_ids[1] == 1000000000007LL);
        assert_true(fabs(e.stats[0] - 1.0) < 1e-12);  // AP
        assert_true(fabs(e.stats[8] - 1.0) < 1e-12);  // AR100
        assert_true(fabs(e.stats[3] - 1.0) < 1e-12);  // APs: both squares are small (< 32^2)
        assert_true(e.stats[4] == -1);                // APm: no medium gt
        assert_true(e.stats[5] == -1);                // APl: no large gt
        assert_true(fabs(e.stats[6] - 0.5) < 1e-12);  // AR1: one of two per image
        assert_true(isnan(mrcnn_coco_eval_category_ap(&e, 1, -1))); // only a crowd gt
        assert_true(fabs(mrcnn_coco_eval_category_ap(&e, 0, .5) - 1.0) < 1e-12);
        mrcnn_coco_eval_free(&e);
    }
    /* A false positive above the two hits: precision 1/2 at recall .5, 2/3 at 1. */
    add(&d, 900100581904LL, 3, 0.95, 12, 0, 5, 5);
    mrcnn_coco_eval e;
    mrcnn_coco_evaluate(&gt, &d, MRCNN_IOU_BBOX, 1, &e);
    /* 101 recall points: 0..0.5 -> interpolated precision 2/3 (the envelope), 0.51..1 -> 2/3. */
    double want = 2.0 / (3.0 + 2.220446049250313e-16);
    assert_true(fabs(e.stats[1] - want) < 1e-12);
    assert_true(e.stats[6] == 0);                 // AR1: only the fp counts at maxDets 1
    mrcnn_coco_eval_free(&e);
    mrcnn_coco_dets_free(&d);
    mrcnn_coco_gt_free(&gt);
}

static void test_unknown_ids_in_memory(void **state) {
    mrcnn_coco_gt gt;
    mrcnn_coco_gt_load(&gt, g_gt_path);
    mrcnn_coco_dets d;
    mrcnn_coco_dets_init(&d);
    add(&d, 7, 3, 0.5, 0, 0, 3, 3);
    add(&d, 5, 3, 0.5, 0, 0, 3, 3);
    mrcnn_coco_eval e;
    EXPECT_FAIL(mrcnn_coco_evaluate(&gt, &d, MRCNN_IOU_BBOX, 1, &e), "results[1]: image_id 5 is not in the ground truth");
    mrcnn_coco_dets_free(&d);
    mrcnn_coco_dets_init(&d);
    add(&d, 7, 4, 0.5, 0, 0, 3, 3);
    EXPECT_FAIL(mrcnn_coco_evaluate(&gt, &d, MRCNN_IOU_SEGM, 1, &e), "results[0]: category_id 4 is not in the ground truth");
    mrcnn_coco_dets_free(&d);
    /* Box-branch results (the first has a box) need a box in every result. */
    mrcnn_coco_dets_init(&d);
    add(&d, 7, 3, 0.5, 0, 0, 3, 3);
    mrcnn_rle r;
    rect_rle(&r, 0, 0, 2, 2);
    mrcnn_coco_dets_add_rle(&d, 7, 3, 0.4, NULL, &r);
    mrcnn_rle_free(&r);
    EXPECT_FAIL(mrcnn_coco_evaluate(&gt, &d, MRCNN_IOU_SEGM, 1, &e), "results[1] has no 'bbox'");
    mrcnn_coco_dets_free(&d);
    mrcnn_coco_gt_free(&gt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gt_loading),
        cmocka_unit_test(test_perfect_and_partial),
        cmocka_unit_test(test_unknown_ids_in_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
