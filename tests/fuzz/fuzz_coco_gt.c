/* COCO ground truth for evaluation (src/eval/coco_load.c: mrcnn_coco_gt_load), then the
 * evaluator on what loaded: the ground truth's own annotations as detections (scores
 * from their ids), box and mask IoU types, stats, the per-category table and the JSON
 * report. The rasterizer's preconditions (rle.c) must never fail on a file the loader
 * accepted: that is a finding, not a rejection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mrcnn/cocoeval.h"

static FILE *g_null;

static void *dup_mem(const void *p, size_t n) {
    if (!p) return NULL;
    void *q = malloc(n ? n : 1);
    memcpy(q, p, n);
    return q;
}

/* A deep copy of a, for mrcnn_coco_dets_add (which takes ownership of the buffers). */
static mrcnn_coco_ann copy_ann(const mrcnn_coco_ann *a) {
    mrcnn_coco_ann c = *a;
    const mrcnn_coco_segm *s = &a->segm;
    int64_t np = 0;
    for (int i = 0; i < s->n_poly; i++) np += s->poly_len[i];
    c.segm.poly_len = dup_mem(s->poly_len, sizeof(int) * (size_t)s->n_poly);
    c.segm.poly = dup_mem(s->poly, sizeof(double) * (size_t)np);
    c.segm.counts = dup_mem(s->counts, sizeof(uint32_t) * (size_t)s->m);
    c.segm.str = s->str ? strdup(s->str) : NULL;
    c.score = (double)((uint64_t)a->id % 1000) / 1000.0;
    return c;
}

static void fuzz_eval_all(const mrcnn_coco_gt *gt, const mrcnn_coco_dets *dets) {
    for (int type = 0; type < 2; type++) {
        static mrcnn_coco_eval e;
        if (!FUZZ_RUN(mrcnn_coco_evaluate(gt, dets, type ? MRCNN_IOU_SEGM : MRCNN_IOU_BBOX, 1, &e))) continue;
        mrcnn_coco_eval_print(&e, g_null);
        mrcnn_coco_eval_print_per_category(&e, gt, g_null);
        mrcnn_coco_eval_write_json(&e, gt, g_null);
        for (int64_t k = 0; k < e.K && k < 4; k++) (void)mrcnn_coco_eval_category_ap(&e, k, -1);
        mrcnn_coco_eval_free(&e);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    static const char *const sites[] = {"rle.c:", NULL};
    fuzz_set_fatal_sites(sites);
    g_null = fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[600];
    if (!path[0]) fuzz_path(path, sizeof path, "gt.json");
    fuzz_write_file(path, data, size);
    static mrcnn_coco_gt gt;
    if (!FUZZ_RUN(mrcnn_coco_gt_load(&gt, path))) return 0;
    mrcnn_coco_dets dets;
    mrcnn_coco_dets_init(&dets);
    for (int64_t i = 0; i < gt.n_anns && i < 256; i++) {
        mrcnn_coco_ann c = copy_ann(&gt.anns[i]);
        mrcnn_coco_dets_add(&dets, &c);
    }
    fuzz_eval_all(&gt, &dets);
    mrcnn_coco_dets_free(&dets);
    mrcnn_coco_gt_free(&gt);
    return 0;
}
