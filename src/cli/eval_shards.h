/* `mrcnn eval` over shards with a trained model (src/cli/eval_shards.c); cmd_eval.c
 * parses the options and hands them over. */
#ifndef MRCNN_EVAL_SHARDS_H
#define MRCNN_EVAL_SHARDS_H

#include <stdio.h>

#include "mrcnn/cocoeval.h"
#include "mrcnn/dist.h"
#include "mrcnn/infer.h"

typedef struct eval_shards_opts {
    const char *config_path, *weights, *shards, *out_dir, *json_path, *plots_dir;
    const char *iou_type; // bbox | segm | both
    const char **sets;    // (n_sets) --set assignments in command-line order
    int n_sets, per_category, threads;
} eval_shards_opts;

void eval_shards_usage(FILE *out);
/* argc/argv go to MPI_Init. Returns the exit code. */
int eval_shards_run(int argc, char **argv, const eval_shards_opts *o);
/* Collective over dist: runs inf on every image of sh (each image on one rank) and
 * gathers the detections to rank 0 into dets (initialized; dataset order; nothing
 * is added on other ranks). Also what `mrcnn train` evaluates with (TEST.EVAL_PERIOD).
 * Returns this rank's inference seconds. */
double eval_shards_infer(const mrcnn_dist *dist, mrcnn_infer *inf, mrcnn_infer_shards *sh,
                         const mrcnn_category_table *table, mrcnn_coco_dets *dets);

#endif
