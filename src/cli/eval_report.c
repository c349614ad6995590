#include "eval_report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/cocoeval.h"
#include "mrcnn/plot.h"

void eval_report(const mrcnn_coco_gt *gt, const mrcnn_coco_dets *dets, const char *iou_type, int threads,
                 int per_category, const char *json_path, const char *plots_dir) {
    FILE *jf = NULL;
    if (json_path) {
        jf = fopen(json_path, "w");
        MRCNN_CHECK(jf, "cannot write '%s': %s", json_path, strerror(errno));
        fputc('{', jf);
    }
    int n_done = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *name = pass == 0 ? "bbox" : "segm";
        if (strcmp(iou_type, "both") && strcmp(iou_type, name)) continue;
        mrcnn_coco_eval e;
        mrcnn_coco_evaluate(gt, dets, pass == 0 ? MRCNN_IOU_BBOX : MRCNN_IOU_SEGM, threads, &e);
        printf("Evaluate annotation type *%s*\n", name);
        mrcnn_coco_eval_print(&e, stdout);
        if (per_category) mrcnn_coco_eval_print_per_category(&e, gt, stdout);
        fflush(stdout);
        fprintf(stderr, "%s evaluation: %.2fs\n", name, e.seconds);
        if (jf) {
            fprintf(jf, "%s\"%s\": ", n_done ? ", " : "", name);
            mrcnn_coco_eval_write_json(&e, gt, jf);
        }
        n_done++;
        if (plots_dir) mrcnn_plot_eval(&e, gt, name, plots_dir);
        mrcnn_coco_eval_free(&e);
    }
    if (jf) {
        fputs("}\n", jf);
        MRCNN_CHECK(fclose(jf) == 0, "writing '%s' failed", json_path);
    }
}
