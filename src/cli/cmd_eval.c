/* `mrcnn eval`: COCO bbox/segm evaluation of a results JSON against a ground-truth
 * JSON, a drop-in for pycocotools' COCOeval (same 12 numbers, same summary lines);
 * or, with --config/--weights/--shards, inference over shards first (eval_run.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/args.h"
#include "mrcnn/backend.h"
#include "cli.h"
#include "mrcnn/check.h"
#include "mrcnn/cocoeval.h"
#include "mrcnn/config.h"
#include "mrcnn/eval_run.h"
#include "mrcnn/log.h"

static void eval_usage(FILE *out) {
    fprintf(out,
            "usage: mrcnn eval --gt INSTANCES.json --results DETS.json [--iou-type bbox|segm|both]\n"
            "                  [--json STATS.json] [--per-category] [--threads N] [--plots DIR]\n"
            "Evaluates COCO-format detections against COCO ground truth with exactly the\n"
            "semantics of pycocotools' COCOeval and prints its 12-line summary.\n"
            "  --gt FILE         ground truth (instances_*.json)\n"
            "  --results FILE    results: a JSON array of {image_id, category_id, score, bbox\n"
            "                    and/or segmentation (compressed RLE)}\n"
            "  --iou-type T      bbox, segm or both (default: both when the first result has a\n"
            "                    segmentation, else bbox)\n"
            "  --json FILE       write {\"bbox\": {\"stats\": [12 in pycocotools' order], \"AP\": ...,\n"
            "                    \"per_category\": [...]}, \"segm\": {...}}\n"
            "  --per-category    also print AP, AP50, AP75 per category\n"
            "  --threads N       worker threads (default: all cores, or OMP_NUM_THREADS)\n"
            "  --plots DIR       pictures (gnuplot): DIR/eval_<bbox|segm>_pr.png, precision-recall at\n"
            "                    IoU .50/.75/.50:.95 and per area, and eval_<bbox|segm>_categories.png,\n"
            "                    AP per category; each with the plotted series as .csv beside it\n"
            "\n   or: mpirun -np K mrcnn eval --config CFG --weights CKPT [--shards INDEX] [--out DIR]\n"
            "                  [--iou-type bbox|segm|both] [--set KEY=VALUE]... [--json STATS.json]\n"
            "                  [--per-category] [--threads N] [--plots DIR]\n"
            "Runs the model on every image of a shard set (DATASETS.TEST unless --shards), spread\n"
            "over the ranks, writes DIR/coco_instances_results.json (DIR: --out, default\n"
            "OUTPUT_DIR/inference) and evaluates it against the shards' annotations.\n"
            "  --weights CKPT    model or training checkpoint (default MODEL.WEIGHTS)\n"
            "  --set KEY=VALUE   config override, e.g. --set DATASETS.TEST=val-index.h5\n");
}

/* The model form: the config (--config, then each --set in order), the weights, the shard
 * index and the results folder from the options or the config's defaults, then the run. */
static int eval_model(int argc, char **argv, const char *config_path, const char *weights, const char *shards,
                      const char *out, const char **sets, int n_sets, const mrcnn_eval_report_opts *report) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    char err[1024];
    if (config_path && !mrcnn_config_try_load(&cfg, config_path, err, sizeof err)) {
        fprintf(stderr, "mrcnn eval: %s\n", err);
        return 1;
    }
    for (int i = 0; i < n_sets; i++)
        if (!mrcnn_config_try_set(&cfg, sets[i], "--set", err, sizeof err)) {
            fprintf(stderr, "mrcnn eval: %s\n", err);
            return 1;
        }
    if (!weights) weights = cfg.model_weights;
    const char *index = shards ? shards : cfg.datasets_test;
    if (!weights[0] || !index[0]) {
        fprintf(stderr, "mrcnn eval: %s\n", !weights[0] ? "no weights: pass --weights CKPT (or set MODEL.WEIGHTS)"
                                                        : "no data: pass --shards INDEX (or set DATASETS.TEST)");
        return 2;
    }
    char out_dir[4096];
    snprintf(out_dir, sizeof out_dir, "%s", out ? out : "");
    if (!out) snprintf(out_dir, sizeof out_dir, "%s/inference", cfg.output_dir);
    const int gpus = !strcmp(cfg.model_device, "cuda") ? mrcnn_backend_cuda_device_count() : 0;
    return mrcnn_eval_shards_run(&argc, &argv, &cfg, gpus, weights, index, out_dir, report);
}

/* sets: room for argc --set assignments, owned by the caller so no return path leaks it. */
static int eval_main(int argc, char **argv, const char **sets) {
    const char *gt_path = NULL, *res_path = NULL, *type = NULL, *json_path = NULL;
    const char *config_path = NULL, *weights = NULL, *shards = NULL, *out_dir = NULL, *plots_dir = NULL;
    int per_cat = 0, threads = 0, n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            eval_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--per-category")) {
            per_cat = 1;
        } else if (has_val && !strcmp(a, "--gt")) {
            gt_path = argv[++i];
        } else if (has_val && !strcmp(a, "--results")) {
            res_path = argv[++i];
        } else if (has_val && !strcmp(a, "--iou-type")) {
            type = argv[++i];
        } else if (has_val && !strcmp(a, "--config")) {
            config_path = argv[++i];
        } else if (has_val && !strcmp(a, "--weights")) {
            weights = argv[++i];
        } else if (has_val && !strcmp(a, "--shards")) {
            shards = argv[++i];
        } else if (has_val && !strcmp(a, "--out")) {
            out_dir = argv[++i];
        } else if (has_val && !strcmp(a, "--set")) {
            if (!strchr(argv[i + 1], '=')) {
                fprintf(stderr, "mrcnn eval: --set '%s' is not KEY=VALUE\n", argv[i + 1]);
                return 2;
            }
            sets[n_sets++] = argv[++i];
        } else if (has_val && !strcmp(a, "--plots")) {
            plots_dir = argv[++i];
        } else if (has_val && !strcmp(a, "--json")) {
            json_path = argv[++i];
        } else if (has_val && !strcmp(a, "--threads")) {
            /* More threads than this only thrash (and past a few ten thousand libgomp fails). */
            long long v;
            if (!mrcnn_arg_int("mrcnn eval", "--threads", argv[++i], 1, 1024, &v)) return 2;
            threads = (int)v;
        } else {
            fprintf(stderr, "mrcnn eval: unknown or incomplete option '%s'\n", a);
            eval_usage(stderr);
            return 2;
        }
    }
    if (type && strcmp(type, "bbox") && strcmp(type, "segm") && strcmp(type, "both")) {
        fprintf(stderr, "mrcnn eval: --iou-type must be bbox, segm or both, not '%s'\n", type);
        return 2;
    }
    int model_mode = config_path || weights || shards || out_dir || n_sets;
    if (model_mode && (gt_path || res_path)) {
        fprintf(stderr, "mrcnn eval: --gt/--results evaluate a results file; --config/--weights/--shards/--out/--set "
                        "run a model: not both\n");
        return 2;
    }
    if (model_mode) {
        const mrcnn_eval_report_opts report = {.iou_type = type ? type : "both", .threads = threads,
                                               .per_category = per_cat, .json_path = json_path,
                                               .plots_dir = plots_dir};
        return eval_model(argc, argv, config_path, weights, shards, out_dir, sets, n_sets, &report);
    }
    if (!gt_path || !res_path) {
        fprintf(stderr, "mrcnn eval: --gt and --results are required (or --config/--weights/--shards to run a model)\n");
        eval_usage(stderr);
        return 2;
    }
    if (type && strcmp(type, "bbox") && strcmp(type, "segm") && strcmp(type, "both")) {
        fprintf(stderr, "mrcnn eval: --iou-type must be bbox, segm or both, not '%s'\n", type);
        return 2;
    }

    double t0 = mrcnn_time_now();
    mrcnn_coco_gt gt;
    mrcnn_coco_gt_load(&gt, gt_path);
    mrcnn_coco_dets dets;
    mrcnn_coco_dets_load(&dets, res_path, &gt);
    fprintf(stderr, "loaded %lld images, %lld categories, %lld annotations, %lld results (t=%.2fs)\n",
            (long long)gt.n_images, (long long)gt.n_cats, (long long)gt.n_anns, (long long)dets.n,
            mrcnn_time_now() - t0);
    if (!type) type = dets.n > 0 && dets.anns[0].segm.kind != MRCNN_SEGM_NONE ? "both" : "bbox";

    const mrcnn_eval_report_opts report = {.iou_type = type, .threads = threads, .per_category = per_cat,
                                           .json_path = json_path, .plots_dir = plots_dir};
    mrcnn_eval_report(&gt, &dets, &report);
    mrcnn_coco_dets_free(&dets);
    mrcnn_coco_gt_free(&gt);
    return 0;
}

int mrcnn_cmd_eval(int argc, char **argv) {
    const char **sets = MRCNN_CALLOC((size_t)argc + 1, sizeof *sets, "--set list");
    int rc = eval_main(argc, argv, sets);
    free(sets);
    return rc;
}
