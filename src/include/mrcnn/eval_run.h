/* `mrcnn eval`'s work as library calls, so that the cli only parses arguments: the
 * report both forms print (src/eval/eval_report.c), and a model's inference over a shard
 * set spread across the MPI ranks, gathered and evaluated (src/eval/eval_shards.c), which
 * training's periodic evaluation also runs (TEST.EVAL_PERIOD). */
#ifndef MRCNN_EVAL_RUN_H
#define MRCNN_EVAL_RUN_H

#include "mrcnn/cocoeval.h"
#include "mrcnn/config.h"
#include "mrcnn/dist.h"
#include "mrcnn/infer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the report prints and writes. */
typedef struct mrcnn_eval_report_opts {
    const char *iou_type;  // bbox | segm | both
    int threads;           // 0: all cores (or OMP_NUM_THREADS)
    int per_category;      // also the per-category table
    const char *json_path; // NULL: no JSON file
    const char *plots_dir; // NULL: no pictures (else precision-recall and per-category AP, plot.h)
} mrcnn_eval_report_opts;

/* pycocotools' summary per IoU type on stdout, optionally the per-category table, the
 * stats as JSON and the pictures. */
void mrcnn_eval_report(const mrcnn_coco_gt *gt, const mrcnn_coco_dets *dets, const mrcnn_eval_report_opts *o);

/* Collective over dist: runs inf on every image of sh (each image on one rank) and
 * gathers the detections to rank 0 into dets (initialized; dataset order; nothing
 * is added on other ranks). Returns this rank's inference seconds. */
double mrcnn_eval_shards_infer(const mrcnn_dist *dist, mrcnn_infer *inf, mrcnn_infer_shards *sh,
                               const mrcnn_category_table *table, mrcnn_coco_dets *dets);

/* `mrcnn eval --shards`: starts MPI (argc/argv go to MPI_Init), runs the model cfg
 * describes with weights on every image of the shard index over the ranks (on the GPUs
 * when MODEL.DEVICE is cuda: visible_gpus, mrcnn_backend_cuda_device_count()), and on
 * rank 0 writes out_dir/coco_instances_results.json and reports it against the shards'
 * own ground truth. Returns the exit code. */
int mrcnn_eval_shards_run(int *argc, char ***argv, const mrcnn_config *cfg, int visible_gpus, const char *weights,
                          const char *index, const char *out_dir, const mrcnn_eval_report_opts *report);

#ifdef __cplusplus
}
#endif
#endif
