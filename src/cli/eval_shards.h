/* `mrcnn eval` over shards with a trained model (src/cli/eval_shards.c); cmd_eval.c
 * parses the options and hands them over. */
#ifndef MRCNN_EVAL_SHARDS_H
#define MRCNN_EVAL_SHARDS_H

#include <stdio.h>

typedef struct eval_shards_opts {
    const char *config_path, *weights, *shards, *out_dir, *json_path;
    const char *iou_type; // bbox | segm | both
    const char **sets;    // (n_sets) --set assignments in command-line order
    int n_sets, per_category, threads;
} eval_shards_opts;

void eval_shards_usage(FILE *out);
/* argc/argv go to MPI_Init. Returns the exit code. */
int eval_shards_run(int argc, char **argv, const eval_shards_opts *o);

#endif
