/* Training's periodic evaluation (TEST.EVAL_PERIOD): the current weights through the
 * same inference and COCO evaluation as `mrcnn eval` (eval_run.h), so that the last one
 * equals `mrcnn eval --weights <final checkpoint>` (src/train/train_eval.c). */
#ifndef MRCNN_TRAIN_EVAL_H
#define MRCNN_TRAIN_EVAL_H

#include "mrcnn/arena.h"
#include "mrcnn/backend.h"
#include "mrcnn/cocoeval.h"
#include "mrcnn/config.h"
#include "mrcnn/dist.h"
#include "mrcnn/infer.h"
#include "mrcnn/metrics.h"

typedef struct train_eval {
    const mrcnn_config *cfg;
    const mrcnn_dist *dist;
    const mrcnn_backend *be;      // training's, where params live
    const mrcnn_arena *params;    // training's fp32 master weights
    mrcnn_infer *inf;             // NULL until the first evaluation
    mrcnn_dist eval_dist;         // dist with its own communicator (the loader threads use dist's)
    mrcnn_category_table table;
    mrcnn_coco_gt gt;             // rank 0
    int data;                     // table and gt are loaded
} train_eval;

/* Loads DATASETS.TEST's categories and (rank 0) annotations now, checked as `mrcnn eval`
 * checks them (a missing or damaged set, duplicate ids, a class count unlike the
 * model's), so that a test set that cannot be evaluated stops the run at start, not
 * after TEST.EVAL_PERIOD steps. */
void train_eval_init(train_eval *e, const mrcnn_config *cfg, const mrcnn_dist *dist, const mrcnn_backend *be,
                     const mrcnn_arena *params);
/* Collective: evaluates the current params; AP and AP50 per IoU type on rank 0. */
void train_eval_run(train_eval *e, mrcnn_eval_metrics *m);
void train_eval_free(train_eval *e);

#endif
