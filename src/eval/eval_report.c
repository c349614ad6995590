/* The report both forms of `mrcnn eval` print (eval_run.h). */
#include "mrcnn/eval_run.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/cocoeval.h"

void mrcnn_eval_report(const mrcnn_coco_gt *gt, const mrcnn_coco_dets *dets, const mrcnn_eval_report_opts *o) {
    FILE *jf = NULL;
    if (o->json_path) {
        jf = fopen(o->json_path, "w");
        MRCNN_CHECK(jf, "cannot write '%s': %s", o->json_path, strerror(errno));
        fputc('{', jf);
    }
    int n_done = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *name = pass == 0 ? "bbox" : "segm";
        if (strcmp(o->iou_type, "both") && strcmp(o->iou_type, name)) continue;
        mrcnn_coco_eval e;
        mrcnn_coco_evaluate(gt, dets, pass == 0 ? MRCNN_IOU_BBOX : MRCNN_IOU_SEGM, o->threads, &e);
        printf("Evaluate annotation type *%s*\n", name);
        mrcnn_coco_eval_print(&e, stdout);
        if (o->per_category) mrcnn_coco_eval_print_per_category(&e, gt, stdout);
        fflush(stdout);
        fprintf(stderr, "%s evaluation: %.2fs\n", name, e.seconds);
        if (jf) {
            fprintf(jf, "%s\"%s\": ", n_done ? ", " : "", name);
            mrcnn_coco_eval_write_json(&e, gt, jf);
        }
        n_done++;
        if (o->plots_dir) mrcnn_plot_eval(&e, gt, name, o->plots_dir);
        mrcnn_coco_eval_free(&e);
    }
    if (jf) {
        fputs("}\n", jf);
        MRCNN_CHECK(fclose(jf) == 0, "writing '%s' failed", o->json_path);
    }
}
