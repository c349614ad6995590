/* `mrcnn train` as one call (train_job.h): Mask R-CNN on batches from the loader,
 * trained by the data-parallel loop of trainer.h, one MPI rank per GPU or CPU slot.
 * Exit codes are listed in train.h (99: preempted, checkpoint written, requeue). */
#include "mrcnn/train_job.h"

#include <stdio.h>
#include <string.h>

#include "mrcnn/backend_open.h"
#include "mrcnn/check.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/data.h"
#include "mrcnn/dist.h"
#include "mrcnn/feed_source.h"
#include "mrcnn/log.h"
#include "mrcnn/model.h"
#include "mrcnn/model_trainable.h"
#include "mrcnn/precision.h"
#include "mrcnn/trainer.h"
#include "train_eval.h"

/* Failures print as usual (check.h's one fatal exit); an out-of-memory one also says
 * which settings to lower. */
static const mrcnn_config *g_fail_cfg = NULL;
static int g_fail_per_rank = 0;
static char g_hint[1024];

static const char *train_fail_hint(const char *message) {
    if (!g_fail_cfg || !(strstr(message, "out of memory") || strstr(message, "cudaMalloc") ||
                         strstr(message, "out of host memory")))
        return NULL;
    snprintf(g_hint, sizeof g_hint,
             "mrcnn train: out of memory with %d images per rank (SOLVER.IMS_PER_BATCH %d / ranks / "
             "SOLVER.ACCUM_STEPS %d) at INPUT.MAX_SIZE_TRAIN %d: lower SOLVER.IMS_PER_BATCH or raise "
             "SOLVER.ACCUM_STEPS (same global batch, fewer images at once), or lower INPUT.MIN_SIZE_TRAIN / "
             "INPUT.MAX_SIZE_TRAIN, MODEL.RPN.POST_NMS_TOPK_TRAIN (%d) or "
             "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE (%d)\n",
             g_fail_per_rank, g_fail_cfg->solver_ims_per_batch, g_fail_cfg->solver_accum_steps,
             g_fail_cfg->input_max_size_train, g_fail_cfg->rpn_post_nms_topk_train,
             g_fail_cfg->roi_batch_size_per_image);
    return g_hint;
}

typedef struct job {
    const mrcnn_config *cfg;
    mrcnn_dist dist;
    mrcnn_backend *be;
    mrcnn_model model;
    mrcnn_model_trainable mt; // the trainer's view of the model, over train_batch
    mrcnn_feed_source src;    // the loader's batches
    train_eval eval;          // TEST.EVAL_PERIOD > 0
} job;

/* Batch-wide loss normalizers: the model's counts (a small device tensor), the sum over
 * ranks divided by the rank count, so each rank's loss is (its share) / (global count /
 * ranks) and the average of the ranks' gradients (the buckets average) is the gradient
 * of the whole batch's loss. In place on the device (MPI on the CPU backend's memory,
 * NCCL's average on the GPU): no count travels through the host. */
static void count_sum(const mrcnn_backend *be, mrcnn_tensor *counts, void *ctx) {
    job *j = ctx;
    mrcnn_dist_allreduce_tensor(&j->dist, be, counts, 1, "loss normalizer all-reduce");
}

/* The trainable's batch source and loader cursor: the feed's (feed_source.h). */
static double train_batch(void *ctx, int64_t step, int micro, mrcnn_batch *out) {
    return mrcnn_feed_source_next(&((job *)ctx)->src, out);
}

static void get_cursor(void *ctx, int64_t *epoch, int64_t *step) {
    mrcnn_feed_source_cursor(&((job *)((mrcnn_model_trainable *)ctx)->source_ctx)->src, epoch, step);
}

static void set_cursor(void *ctx, int64_t epoch, int64_t step) {
    mrcnn_feed_source_set_cursor(&((job *)((mrcnn_model_trainable *)ctx)->source_ctx)->src, epoch, step);
}

static void evaluate(void *ctx, mrcnn_eval_metrics *e) {
    train_eval_run(&((job *)((mrcnn_model_trainable *)ctx)->source_ctx)->eval, e);
}

/* The ranks, OUTPUT_DIR, the backend and the precision mode, in that order. */
static void job_start(job *j, mrcnn_config *cfg, const mrcnn_train_job_opts *o, int *argc, char ***argv) {
    const mrcnn_device want = mrcnn_backend_device_parse(cfg->model_device);
    mrcnn_dist_init(&j->dist, argc, argv, MRCNN_DATA_MPI_THREAD_LEVEL, want == MRCNN_DEVICE_GPU ? o->visible_gpus : 0,
                    o->comm_timeout);
    double f = mrcnn_config_scale_workers(cfg, j->dist.world_size);
    if (f != 1.0)
        mrcnn_info("SOLVER.REFERENCE_WORLD_SIZE: scaled by %g for %d ranks: IMS_PER_BATCH %d, BASE_LR %g, MAX_ITER %d",
                   f, j->dist.world_size, cfg->solver_ims_per_batch, cfg->solver_base_lr, cfg->solver_max_iter);

    /* OUTPUT_DIR is checked (created, writable, not in use by another run) before the
     * model is built, so a bad one fails in seconds, not at the first checkpoint. */
    if (j->dist.rank == 0) mrcnn_output_dir_claim(cfg->output_dir);

    const mrcnn_backend_open_opts bo = {.device = want, .gpu = j->dist.device, .fallback = "training on the CPU"};
    j->be = mrcnn_backend_open(&bo, NULL);
    if (j->be->device == MRCNN_DEVICE_GPU) {
        char name[160];
        fprintf(stderr, "[rank %d] GPU %d: %s\n", j->dist.rank, j->dist.device,
                j->be->info.device_name(j->be, name, sizeof name));
        const char *nccl_why = NULL;
        if (j->dist.world_size > 1 && !mrcnn_dist_nccl_init(&j->dist, &nccl_why))
            mrcnn_warn("NCCL unavailable (%s): gradients go through MPI via host memory", nccl_why);
    }
    /* auto resolves here (bf16 on a recent GPU, else fp32); the trainer sees the mode. */
    char mode[sizeof cfg->solver_precision];
    snprintf(mode, sizeof mode, "%s", mrcnn_precision_apply(j->be, cfg->solver_precision));
    memcpy(cfg->solver_precision, mode, sizeof mode);
}

/* The batch source, the model with its initial weights, its trainable binding and the
 * evaluation data. */
static void job_model(job *j) {
    const mrcnn_config *cfg = j->cfg;
    const int per_rank = mrcnn_per_rank_batch(cfg, j->dist.world_size);
    mrcnn_feed_source_init(&j->src, cfg, &j->dist, j->be->device, per_rank);
    g_fail_cfg = cfg;
    g_fail_per_rank = per_rank;
    mrcnn_set_fail_hint(train_fail_hint);
    mrcnn_model_init(&j->model, cfg, j->be);
    /* MODEL.WEIGHTS may hold part of the model (an ImageNet backbone imported with
     * data_prep/weights.py): the rest keeps its initialization (SEED). The load logs
     * which tensors were loaded, which initialized and which in the file went unused. */
    mrcnn_model_init_random(&j->model, (uint64_t)cfg->seed);
    if (cfg->model_weights[0]) {
        mrcnn_checkpoint_load_model_partial(&j->model, cfg->model_weights);
        mrcnn_info("initial weights: %s", cfg->model_weights);
    }
    j->model.count_sum = count_sum;
    j->model.count_ctx = j;
    mrcnn_model_trainable_init(&j->mt, &j->model, train_batch, j);
    j->mt.tm.get_cursor = get_cursor;
    j->mt.tm.set_cursor = set_cursor;
    j->mt.tm.evaluate = cfg->test_eval_period > 0 ? evaluate : NULL;
    // the whole config is checked before step 1
    if (cfg->test_eval_period > 0) train_eval_init(&j->eval, cfg, &j->dist, j->be, &j->model.params.values);
    mrcnn_checkpoint_set_lock(mrcnn_hdf5_lock, mrcnn_hdf5_unlock);
}

int mrcnn_train_job_run(mrcnn_config *cfg, const mrcnn_train_job_opts *o, int *argc, char ***argv) {
    job j;
    memset(&j, 0, sizeof j);
    j.cfg = cfg;
    job_start(&j, cfg, o, argc, argv);
    job_model(&j);
    mrcnn_info("mrcnn train: %d ranks (%s), %lld parameters (%lld trainable), config %s", j.dist.world_size,
               j.be->name, (long long)mrcnn_params_numel(&j.model.params, false),
               (long long)mrcnn_params_numel(&j.model.params, true), o->config_path ? o->config_path : "(defaults)");
    mrcnn_trainer_opts opts = {.resume = o->resume, .max_steps = o->max_steps,
                               .bucket_bytes = (size_t)(o->bucket_mb * 1024 * 1024)};
    if (opts.bucket_bytes == 0) opts.bucket_bytes = 1;
    int rc = mrcnn_trainer_run(cfg, &opts, &j.dist, j.be, &j.mt.tm);
    if (rc == 0 || rc == MRCNN_EXIT_REQUEUE)
        mrcnn_info("outputs in %s: checkpoints model_*.h5, metrics.json, events.out.tfevents.* (tensorboard --logdir %s)%s",
                   cfg->output_dir, cfg->output_dir, rc == 0 ? ", plots/training.png" : "");
    mrcnn_feed_source_free(&j.src);
    train_eval_free(&j.eval);
    mrcnn_model_trainable_free(&j.mt);
    mrcnn_model_free(&j.model);
    mrcnn_backend_destroy(j.be);
    mrcnn_set_fail_hint(NULL);
    g_fail_cfg = NULL;
    mrcnn_dist_finalize(&j.dist);
    mrcnn_output_dir_release();
    return rc;
}
