/* `mrcnn train`: the command line; the job itself is train_job.h's. Exit codes are
 * listed in train.h (99: preempted, checkpoint written, requeue). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mrcnn/args.h"
#include "mrcnn/backend.h"
#include "mrcnn/config.h"
#include "mrcnn/train.h"
#include "mrcnn/train_job.h"

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

/* The options into o and config_path; the --set assignments are applied later, in order,
 * once the config file is loaded. Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, mrcnn_train_job_opts *o) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            o->config_path = argv[++i];
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            i++;
        } else if (!strcmp(argv[i], "--resume")) {
            o->resume = 1;
        } else if (!strcmp(argv[i], "--comm-timeout") && i + 1 < argc) {
            if (!mrcnn_arg_double("mrcnn train", "--comm-timeout", argv[++i], 0, 1e7, &o->comm_timeout)) return 2;
        } else if (!strcmp(argv[i], "--bucket-mb") && i + 1 < argc) {
            if (!mrcnn_arg_double("mrcnn train", "--bucket-mb", argv[++i], 1e-6, 1048576, &o->bucket_mb)) return 2;
        } else if (!strcmp(argv[i], "--max-steps") && i + 1 < argc) {
            long long v;
            if (!mrcnn_arg_int("mrcnn train", "--max-steps", argv[++i], 1, 2147483647LL, &v)) return 2;
            o->max_steps = v;
        } else {
            fprintf(stderr, "mrcnn train: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

int mrcnn_cmd_train(int argc, char **argv) {
    /* First: a preemption signal during start-up (MPI, the model, the weights) is
     * honoured like one during training (checkpoint after the first step, exit 99),
     * never the default action (killed, 143, nothing written). */
    mrcnn_signals_install();
    mrcnn_train_job_opts o = {.comm_timeout = 600, .bucket_mb = 25};
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    char err[1024];
    /* A config that cannot be used is a usage error (2), found before anything runs. */
    if (o.config_path && !mrcnn_config_try_load(&cfg, o.config_path, err, sizeof err)) {
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
    if (mrcnn_backend_device_parse(cfg.model_device) == MRCNN_DEVICE_GPU)
        o.visible_gpus = mrcnn_backend_cuda_device_count();
    return mrcnn_train_job_run(&cfg, &o, &argc, &argv);
}
