/* Evaluates a results file and dumps everything cocoeval_check.py compares with
 * pycocotools: stats, then precision (T, R, K, A, M) and recall (T, K, A, M) in C order.
 * Also checks that writing the results and reading them back changes nothing.
 * usage: prog_cocoeval GT RESULTS bbox|segm THREADS OUT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/cocoeval.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: prog_cocoeval GT RESULTS bbox|segm THREADS OUT\n");
        return 2;
    }
    mrcnn_iou_type type = !strcmp(argv[3], "segm") ? MRCNN_IOU_SEGM : MRCNN_IOU_BBOX;
    mrcnn_coco_gt gt;
    mrcnn_coco_gt_load(&gt, argv[1]);
    mrcnn_coco_dets dets;
    mrcnn_coco_dets_load(&dets, argv[2], &gt);
    mrcnn_coco_eval e;
    mrcnn_coco_evaluate(&gt, &dets, type, atoi(argv[4]), &e);
    FILE *f = fopen(argv[5], "w");
    if (!f) return 1;
    size_t np = (size_t)MRCNN_COCO_T * MRCNN_COCO_R * (size_t)e.K * MRCNN_COCO_A * MRCNN_COCO_M;
    size_t nr = (size_t)MRCNN_COCO_T * (size_t)e.K * MRCNN_COCO_A * MRCNN_COCO_M;
    for (int s = 0; s < 12; s++) fprintf(f, "%.17g\n", e.stats[s]);
    for (size_t i = 0; i < np; i++) fprintf(f, "%.17g\n", e.precision[i]);
    for (size_t i = 0; i < nr; i++) fprintf(f, "%.17g\n", e.recall[i]);
    fclose(f);

    /* Round trip through mrcnn_coco_dets_write. */
    char path[] = "/tmp/mrcnn_dets_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    mrcnn_coco_dets_write(&dets, path);
    mrcnn_coco_dets again;
    mrcnn_coco_dets_load(&again, path, &gt);
    unlink(path);
    mrcnn_coco_eval e2;
    mrcnn_coco_evaluate(&gt, &again, type, 1, &e2);
    int same = again.n == dets.n && !memcmp(e.precision, e2.precision, np * sizeof(double)) &&
               !memcmp(e.recall, e2.recall, nr * sizeof(double));
    if (!same) fprintf(stderr, "prog_cocoeval: results written and read back evaluate differently\n");
    mrcnn_coco_eval_free(&e);
    mrcnn_coco_eval_free(&e2);
    mrcnn_coco_dets_free(&dets);
    mrcnn_coco_dets_free(&again);
    mrcnn_coco_gt_free(&gt);
    return same ? 0 : 1;
}
