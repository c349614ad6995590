/* The report both forms of `mrcnn eval` print: pycocotools' summary per IoU type,
 * optionally the per-category table, and the stats as JSON. */
#ifndef MRCNN_EVAL_REPORT_H
#define MRCNN_EVAL_REPORT_H

#include "mrcnn/cocoeval.h"

/* iou_type: bbox | segm | both. json_path NULL: no JSON file. plots_dir NULL: no
 * pictures (else precision-recall and per-category AP pictures there, plot.h). */
void eval_report(const mrcnn_coco_gt *gt, const mrcnn_coco_dets *dets, const char *iou_type, int threads,
                 int per_category, const char *json_path, const char *plots_dir);

#endif
