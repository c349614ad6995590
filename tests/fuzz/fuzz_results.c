/* COCO results (detections) JSON as `mrcnn eval --gt G --results R` reads it
 * (src/eval/coco_load.c: mrcnn_coco_dets_load against a fixed ground truth), then the
 * evaluator on what loaded (box and mask IoU, stats, reports). Oracle: results whose
 * segmentations are absent or compressed strings are written back
 * (mrcnn_coco_dets_write) and must load back identical (ids, boxes, scores bit for bit).
 * The rasterizer's preconditions (rle.c) failing on accepted input is a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mrcnn/cocoeval.h"

/* Three images (one 1x1), categories with gaps, every segmentation form, a crowd. */
static const char k_gt[] =
    "{\"images\": [{\"id\": 1, \"height\": 40, \"width\": 60}, {\"id\": 7, \"height\": 100, \"width\": 80},"
    " {\"id\": 4294967297, \"height\": 1, \"width\": 1}],\n"
    " \"categories\": [{\"id\": 1, \"name\": \"a\"}, {\"id\": 3, \"name\": \"b\"}, {\"id\": 90, \"name\": \"c\"}],\n"
    " \"annotations\": [\n"
    "  {\"id\": 1, \"image_id\": 1, \"category_id\": 1, \"bbox\": [10, 5, 20, 15], \"area\": 300, \"iscrowd\": 0,"
    "   \"segmentation\": [[10, 5, 30, 5, 30, 20, 10, 20]]},\n"
    "  {\"id\": 2, \"image_id\": 1, \"category_id\": 3, \"bbox\": [0, 0, 5, 5], \"area\": 20, \"iscrowd\": 1,"
    "   \"segmentation\": {\"size\": [40, 60], \"counts\": [0, 5, 35, 5, 35, 5, 35, 5, 35, 5, 2235]}},\n"
    "  {\"id\": 3, \"image_id\": 7, \"category_id\": 90, \"bbox\": [20, 30, 40, 50], \"area\": 1500, \"iscrowd\": 0,"
    "   \"segmentation\": [[20, 30, 60, 30, 40, 80], [25, 35, 30, 35, 30, 40]]},\n"
    "  {\"id\": 4, \"image_id\": 7, \"category_id\": 1, \"bbox\": [1, 1, 2, 2], \"area\": 4, \"iscrowd\": 0,"
    "   \"segmentation\": {\"size\": [100, 80], \"counts\": \"U32R30c`7\"}},\n"
    "  {\"id\": 5, \"image_id\": 4294967297, \"category_id\": 3, \"bbox\": [0, 0, 1, 1], \"area\": 1, \"iscrowd\": 0,"
    "   \"segmentation\": [[0, 0, 1, 0, 1, 1, 0, 1]]}\n"
    " ]}\n";

static mrcnn_coco_gt g_gt;
static FILE *g_null;

static void eval_all(const mrcnn_coco_dets *dets) {
    for (int type = 0; type < 2; type++) {
        static mrcnn_coco_eval e;
        if (!FUZZ_RUN(mrcnn_coco_evaluate(&g_gt, dets, type ? MRCNN_IOU_SEGM : MRCNN_IOU_BBOX, 1, &e))) continue;
        mrcnn_coco_eval_print(&e, g_null);
        mrcnn_coco_eval_print_per_category(&e, &g_gt, g_null);
        mrcnn_coco_eval_write_json(&e, &g_gt, g_null);
        mrcnn_coco_eval_free(&e);
    }
}

static void check_roundtrip(const mrcnn_coco_dets *d, const char *path) {
    for (int64_t i = 0; i < d->n; i++)
        if (d->anns[i].segm.kind != MRCNN_SEGM_NONE && d->anns[i].segm.kind != MRCNN_SEGM_STRING) return;
    static mrcnn_coco_dets back;
    if (!FUZZ_RUN(mrcnn_coco_dets_write(d, path))) fuzz_die("results: writing loaded results failed: %s", fuzz_msg);
    if (!FUZZ_RUN(mrcnn_coco_dets_load(&back, path, &g_gt)))
        fuzz_die("results: results written by mrcnn_coco_dets_write do not load back: %s", fuzz_msg);
    if (back.n != d->n) fuzz_die("results: %lld results written, %lld read back", (long long)d->n, (long long)back.n);
    for (int64_t i = 0; i < d->n; i++) {
        const mrcnn_coco_ann *a = &d->anns[i], *b = &back.anns[i];
        if (a->image_id != b->image_id || a->category_id != b->category_id || a->has_bbox != b->has_bbox ||
            memcmp(&a->score, &b->score, sizeof a->score) || (a->has_bbox && memcmp(a->bbox, b->bbox, sizeof a->bbox)) ||
            a->segm.kind != b->segm.kind ||
            (a->segm.kind == MRCNN_SEGM_STRING &&
             (a->segm.h != b->segm.h || a->segm.w != b->segm.w || strcmp(a->segm.str, b->segm.str))))
            fuzz_die("results: result %lld changes when written and read back", (long long)i);
    }
    mrcnn_coco_dets_free(&back);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    static const char *const sites[] = {"rle.c:", NULL};
    fuzz_set_fatal_sites(sites);
    g_null = fopen("/dev/null", "w");
    char p[600];
    fuzz_path(p, sizeof p, "gt.json");
    fuzz_write_file(p, k_gt, sizeof k_gt - 1);
    if (!FUZZ_RUN(mrcnn_coco_gt_load(&g_gt, p))) fuzz_die("results: the built-in ground truth does not load: %s", fuzz_msg);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[600], out[600];
    if (!path[0]) {
        fuzz_path(path, sizeof path, "results.json");
        fuzz_path(out, sizeof out, "written.json");
    }
    fuzz_write_file(path, data, size);
    static mrcnn_coco_dets dets;
    if (!FUZZ_RUN(mrcnn_coco_dets_load(&dets, path, &g_gt))) return 0;
    eval_all(&dets);
    check_roundtrip(&dets, out);
    mrcnn_coco_dets_free(&dets);
    return 0;
}
