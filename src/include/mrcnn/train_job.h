/* `mrcnn train` as one call, so that the cli only parses arguments: the MPI ranks (one
 * per GPU or CPU slot), OUTPUT_DIR claimed, the backend, Mask R-CNN (model.h) from
 * SEED and MODEL.WEIGHTS, the loader's batches (feed_source.h), periodic evaluation
 * (TEST.EVAL_PERIOD) and the data-parallel loop of trainer.h (src/train/train_job.c). */
#ifndef MRCNN_TRAIN_JOB_H
#define MRCNN_TRAIN_JOB_H

#include "mrcnn/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrcnn_train_job_opts {
    const char *config_path; // for the log line; NULL: the defaults
    int resume;              // continue from the newest complete checkpoint in OUTPUT_DIR
    double comm_timeout;     // seconds a collective may take before the job aborts (0: never)
    long long max_steps;     // optimizer steps in total (0: SOLVER.MAX_ITER)
    double bucket_mb;        // gradient all-reduce bucket size
    int visible_gpus;        // GPUs the ranks share out (mrcnn_backend_cuda_device_count(); 0: the CPU)
} mrcnn_train_job_opts;

/* cfg: loaded and checked; scaled here to the world size (SOLVER.REFERENCE_WORLD_SIZE)
 * and given the resolved SOLVER.PRECISION. argc/argv go to MPI_Init. Returns the exit
 * code (train.h). */
int mrcnn_train_job_run(mrcnn_config *cfg, const mrcnn_train_job_opts *o, int *argc, char ***argv);

#ifdef __cplusplus
}
#endif
#endif
