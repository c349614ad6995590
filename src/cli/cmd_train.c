/* `mrcnn train`: Mask R-CNN (model.h) on batches from the loader (feed_source.h),
 * trained by the data-parallel loop of trainer.h, one MPI rank per GPU or CPU slot.
 * Exit codes are listed in train.h (99: preempted, checkpoint written, requeue). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "cli.h"
#include "mrcnn/args.h"
#include "mrcnn/backend_open.h"
#include "mrcnn/check.h"
#include "mrcnn/data.h"
#include "mrcnn/dist.h"
#include "mrcnn/feed_source.h"
#include "mrcnn/infer.h"
#include "mrcnn/log.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/model.h"
#include "mrcnn/model_trainable.h"
#include "mrcnn/precision.h"
#include "mrcnn/trainer.h"
#include "eval_shards.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mpirun -np N mrcnn train --config FILE.yaml [--set KEY=VALUE]... [--resume]\n"
            "                                [--comm-timeout S] [--max-steps N] [--bucket-mb MB]\n"
            "Trains Mask R-CNN data-parallel over the MPI ranks (one per GPU with MODEL.DEVICE=cuda,\n"
            "else on the CPU), on DATASETS.TRAIN (a shard index from mrcnn-prep coco).\n"
            "  --config FILE     YAML config (detectron2 keys, _BASE_ inheritance)\n"
            "  --set KEY=VALUE   override one key (repeatable), e.g. --set SOLVER.BASE_LR=0.01\n"
            "  --resume          continue from the newest complete checkpoint in OUTPUT_DIR\n"
            "  --comm-timeout S  a collective that takes longer than S seconds means a rank died or\n"
            "                    hangs: the job aborts with exit code 3 (default 600; 0 = never;\n"
            "                    keep it above a checkpoint's write time)\n"
            "  --max-steps N     stop after N optimizer steps in total (default SOLVER.MAX_ITER)\n"
            "  --bucket-mb MB    gradient all-reduce bucket size (default 25; smaller buckets start\n"
            "                    earlier in backward, larger ones use the network better)\n"
            "SOLVER.IMS_PER_BATCH is the global batch; with SOLVER.REFERENCE_WORLD_SIZE > 0 the batch,\n"
            "LR and schedule are rescaled to the world size (detectron2's rule). Writes OUTPUT_DIR/\n"
            "model_*.h5 checkpoints, metrics.json, TensorBoard events and plots/training.png.\n"
            "Exit codes: 0 done, 1 error, 2 usage, 3 comm timeout, 4 too many non-finite steps,\n"
            "99 preempted by SIGTERM/SIGUSR1 (checkpoint written; requeue with --resume).\n");
}

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

typedef struct {
    const mrcnn_config *cfg;
    mrcnn_dist *dist;
    mrcnn_backend *be;
    mrcnn_model model;
    mrcnn_model_trainable mt; // the trainer's view of the model, over train_batch
    mrcnn_feed_source src;    // the loader's batches
    /* TEST.EVAL_PERIOD: set up at the first evaluation */
    mrcnn_infer *inf;
    mrcnn_dist eval_dist;          // dist with its own communicator (the loader threads use dist's)
    mrcnn_category_table table;
    mrcnn_coco_gt eval_gt;         // rank 0
    int eval_data;                 // table and eval_gt are loaded (eval_open_data)
} binding;

/* Batch-wide loss normalizers: the model's counts (a small device tensor), the sum over
 * ranks divided by the rank count, so each rank's loss is (its share) / (global count /
 * ranks) and the average of the ranks' gradients (the buckets average) is the gradient
 * of the whole batch's loss. In place on the device (MPI on the CPU backend's memory,
 * NCCL's average on the GPU): no count travels through the host. */
static void count_sum(const mrcnn_backend *be, mrcnn_tensor *counts, void *ctx) {
    binding *b = ctx;
    mrcnn_dist_allreduce_tensor(b->dist, be, counts, 1, "loss normalizer all-reduce");
}

/* The trainable's batch source and loader cursor: the feed's (feed_source.h). */
static double train_batch(void *ctx, int64_t step, int micro, mrcnn_batch *out) {
    return mrcnn_feed_source_next(&((binding *)ctx)->src, out);
}

/* DATASETS.TEST's categories and (rank 0) annotations, checked as `mrcnn eval` checks
 * them (a missing or damaged set, duplicate ids, a class count unlike the model's).
 * Called before step 1, so a test set that cannot be evaluated stops the run at start,
 * not after TEST.EVAL_PERIOD steps. */
static void eval_open_data(binding *b) {
    if (b->eval_data) return;
    const mrcnn_config *cfg = b->cfg;
    const char *index = cfg->datasets_test;
    /* the training loader's I/O thread may be inside HDF5 */
    mrcnn_hdf5_lock();
    mrcnn_category_table_load(&b->table, index);
    if (b->dist->rank == 0) mrcnn_coco_gt_from_shards(&b->eval_gt, index);
    mrcnn_hdf5_unlock();
    MRCNN_CHECK(b->table.n == cfg->roi_num_classes,
                "DATASETS.TEST %s has %d categories but the model has MODEL.ROI_HEADS.NUM_CLASSES = %d", index,
                b->table.n, cfg->roi_num_classes);
    b->eval_data = 1;
}

/* The current weights through the same inference and COCO evaluation as `mrcnn eval`
 * (so the last one equals `mrcnn eval --weights <final checkpoint>`). */
static void evaluate(void *ctx, mrcnn_eval_metrics *e) {
    binding *b = ((mrcnn_model_trainable *)ctx)->source_ctx;
    const mrcnn_config *cfg = b->cfg;
    const char *index = cfg->datasets_test;
    const int root = b->dist->rank == 0;
    if (!b->inf) {
        b->eval_dist = *b->dist;
        MRCNN_CHECK_MPI(MPI_Comm_dup(b->dist->comm, &b->eval_dist.comm));
        eval_open_data(b);
        b->inf = mrcnn_infer_create_from_params(cfg, b->dist->device, b->be, &b->model.params.values);
    } else {
        mrcnn_infer_set_weights(b->inf, b->be, &b->model.params.values);
    }
    mrcnn_infer_shards *sh = mrcnn_infer_shards_create(cfg, index, b->eval_dist.comm);
    e->images = mrcnn_infer_shards_num_images(sh);
    mrcnn_coco_dets dets;
    mrcnn_coco_dets_init(&dets);
    eval_shards_infer(&b->eval_dist, b->inf, sh, &b->table, &dets);
    mrcnn_infer_shards_destroy(sh);
    if (root) {
        mrcnn_coco_dets_check(&dets, &b->eval_gt);
        double *ap[2][2] = {{&e->bbox_ap, &e->bbox_ap50}, {&e->segm_ap, &e->segm_ap50}};
        for (int pass = 0; pass < 2; pass++) {
            mrcnn_coco_eval ev;
            mrcnn_coco_evaluate(&b->eval_gt, &dets, pass == 0 ? MRCNN_IOU_BBOX : MRCNN_IOU_SEGM, 0, &ev);
            *ap[pass][0] = ev.stats[0];
            *ap[pass][1] = ev.stats[1];
            mrcnn_coco_eval_free(&ev);
        }
    }
    mrcnn_coco_dets_free(&dets);
}

static void eval_free(binding *b) {
    if (b->eval_data) {
        mrcnn_category_table_free(&b->table);
        if (b->dist->rank == 0) mrcnn_coco_gt_free(&b->eval_gt);
        b->eval_data = 0;
    }
    if (!b->inf) return;
    mrcnn_infer_destroy(b->inf);
    MPI_Comm_free(&b->eval_dist.comm);
}

static void get_cursor(void *ctx, int64_t *epoch, int64_t *step) {
    mrcnn_feed_source_cursor(&((binding *)((mrcnn_model_trainable *)ctx)->source_ctx)->src, epoch, step);
}

static void set_cursor(void *ctx, int64_t epoch, int64_t step) {
    mrcnn_feed_source_set_cursor(&((binding *)((mrcnn_model_trainable *)ctx)->source_ctx)->src, epoch, step);
}

int mrcnn_cmd_train(int argc, char **argv) {
    /* First: a preemption signal during start-up (MPI, the model, the weights) is
     * honoured like one during training (checkpoint after the first step, exit 99),
     * never the default action (killed, 143, nothing written). */
    mrcnn_signals_install();
    const char *config_path = NULL;
    int resume = 0;
    double comm_timeout = 600;
    long long max_steps = 0;
    double bucket_mb = 25;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config_path = argv[++i];
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            i++; // applied below, in order, once the config file is loaded
        } else if (!strcmp(argv[i], "--resume")) {
            resume = 1;
        } else if (!strcmp(argv[i], "--comm-timeout") && i + 1 < argc) {
            if (!mrcnn_arg_double("mrcnn train", "--comm-timeout", argv[++i], 0, 1e7, &comm_timeout)) return 2;
        } else if (!strcmp(argv[i], "--bucket-mb") && i + 1 < argc) {
            if (!mrcnn_arg_double("mrcnn train", "--bucket-mb", argv[++i], 1e-6, 1048576, &bucket_mb)) return 2;
        } else if (!strcmp(argv[i], "--max-steps") && i + 1 < argc) {
            long long v;
            if (!mrcnn_arg_int("mrcnn train", "--max-steps", argv[++i], 1, 2147483647LL, &v)) return 2;
            max_steps = v;
        } else {
            fprintf(stderr, "mrcnn train: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    char err[1024];
    /* A config that cannot be used is a usage error (2), found before anything runs. */
    if (config_path && !mrcnn_config_try_load(&cfg, config_path, err, sizeof err)) {
        fprintf(stderr, "mrcnn train: %s\n", err);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--set") && i + 1 < argc && !mrcnn_config_try_set(&cfg, argv[++i], "--set", err, sizeof err)) {
            fprintf(stderr, "mrcnn train: %s\n", err);
            return 2;
        }

    if (cfg.test_eval_period > 0 && !cfg.datasets_test[0]) {
        fprintf(stderr, "mrcnn train: TEST.EVAL_PERIOD is %d but DATASETS.TEST is empty: set it to the shard index "
                        "to evaluate on (or TEST.EVAL_PERIOD=0)\n", cfg.test_eval_period);
        return 2;
    }
    const mrcnn_device want = mrcnn_backend_device_parse(cfg.model_device);
    mrcnn_dist dist;
    mrcnn_dist_init(&dist, &argc, &argv, MRCNN_DATA_MPI_THREAD_LEVEL,
                    want == MRCNN_DEVICE_GPU ? mrcnn_backend_cuda_device_count() : 0, comm_timeout);
    double f = mrcnn_config_scale_workers(&cfg, dist.world_size);
    if (f != 1.0)
        mrcnn_info("SOLVER.REFERENCE_WORLD_SIZE: scaled by %g for %d ranks: IMS_PER_BATCH %d, BASE_LR %g, MAX_ITER %d",
                   f, dist.world_size, cfg.solver_ims_per_batch, cfg.solver_base_lr, cfg.solver_max_iter);

    /* OUTPUT_DIR is checked (created, writable, not in use by another run) before the
     * model is built, so a bad one fails in seconds, not at the first checkpoint. */
    if (dist.rank == 0) mrcnn_output_dir_claim(cfg.output_dir);

    const mrcnn_backend_open_opts bo = {.device = want, .gpu = dist.device, .fallback = "training on the CPU"};
    mrcnn_backend *be = mrcnn_backend_open(&bo, NULL);
    if (be->device == MRCNN_DEVICE_GPU) {
        char name[160];
        fprintf(stderr, "[rank %d] GPU %d: %s\n", dist.rank, dist.device, be->info.device_name(be, name, sizeof name));
        const char *nccl_why = NULL;
        if (dist.world_size > 1 && !mrcnn_dist_nccl_init(&dist, &nccl_why))
            mrcnn_warn("NCCL unavailable (%s): gradients go through MPI via host memory", nccl_why);
    }
    /* auto resolves here (bf16 on a recent GPU, else fp32); the trainer sees the mode. */
    char mode[sizeof cfg.solver_precision];
    snprintf(mode, sizeof mode, "%s", mrcnn_precision_apply(be, cfg.solver_precision));
    memcpy(cfg.solver_precision, mode, sizeof mode);

    binding b = {.cfg = &cfg, .dist = &dist, .be = be};
    const int per_rank = mrcnn_per_rank_batch(&cfg, dist.world_size);
    mrcnn_feed_source_init(&b.src, &cfg, &dist, be->device, per_rank);
    g_fail_cfg = &cfg;
    g_fail_per_rank = per_rank;
    mrcnn_set_fail_hint(train_fail_hint);
    mrcnn_model_init(&b.model, &cfg, be);
    /* MODEL.WEIGHTS may hold part of the model (an ImageNet backbone imported with
     * data_prep/weights.py): the rest keeps its initialization (SEED). The load logs
     * which tensors were loaded, which initialized and which in the file went unused. */
    mrcnn_model_init_random(&b.model, (uint64_t)cfg.seed);
    if (cfg.model_weights[0]) {
        mrcnn_checkpoint_load_model_partial(&b.model, cfg.model_weights);
        mrcnn_info("initial weights: %s", cfg.model_weights);
    }
    b.model.count_sum = count_sum;
    b.model.count_ctx = &b;
    mrcnn_model_trainable_init(&b.mt, &b.model, train_batch, &b);
    b.mt.tm.get_cursor = get_cursor;
    b.mt.tm.set_cursor = set_cursor;
    b.mt.tm.evaluate = cfg.test_eval_period > 0 ? evaluate : NULL;
    if (cfg.test_eval_period > 0) eval_open_data(&b); // the whole config is checked before step 1
    mrcnn_checkpoint_set_lock(mrcnn_hdf5_lock, mrcnn_hdf5_unlock);

    mrcnn_info("mrcnn train: %d ranks (%s), %lld parameters (%lld trainable), config %s", dist.world_size, be->name,
               (long long)mrcnn_params_numel(&b.model.params, false), (long long)mrcnn_params_numel(&b.model.params, true),
               config_path ? config_path : "(defaults)");
    mrcnn_trainer_opts opts = {.resume = resume, .max_steps = max_steps,
                               .bucket_bytes = (size_t)(bucket_mb * 1024 * 1024)};
    if (opts.bucket_bytes == 0) opts.bucket_bytes = 1;
    int rc = mrcnn_trainer_run(&cfg, &opts, &dist, be, &b.mt.tm);
    if (rc == 0 || rc == MRCNN_EXIT_REQUEUE)
        mrcnn_info("outputs in %s: checkpoints model_*.h5, metrics.json, events.out.tfevents.* (tensorboard --logdir %s)%s",
                   cfg.output_dir, cfg.output_dir, rc == 0 ? ", plots/training.png" : "");
    mrcnn_feed_source_free(&b.src);
    eval_free(&b);
    mrcnn_model_trainable_free(&b.mt);
    mrcnn_model_free(&b.model);
    mrcnn_backend_destroy(be);
    mrcnn_set_fail_hint(NULL);
    g_fail_cfg = NULL;
    mrcnn_dist_finalize(&dist);
    mrcnn_output_dir_release();
    return rc;
}
