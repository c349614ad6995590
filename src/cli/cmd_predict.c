/* `mrcnn predict --config CFG --weights CKPT --out DIR IMAGE...`: detections on image
 * files, written as DIR/detections.json (COCO results plus file and category names)
 * and one PNG overlay per image. Every input is checked before the model loads, so a
 * typo fails in a second and nothing is half written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mrcnn/args.h"
#include "cli.h"
#include "mrcnn/check.h"
#include "mrcnn/data.h"
#include "mrcnn/infer.h"
#include "mrcnn/json.h"
#include "mrcnn/log.h"
#include "mrcnn/metrics.h"
#include "mrcnn/overlay.h"
#include "mrcnn/png_write.h"

static void predict_usage(FILE *out) {
    fprintf(out,
            "usage: mrcnn predict --config CFG --weights CKPT --out DIR [--score-thresh T]\n"
            "                     [--set KEY=VALUE]... IMAGE...\n"
            "Runs the model on JPEG or PNG files (resized as INPUT.MIN_SIZE_TEST/MAX_SIZE_TEST)\n"
            "and writes DIR/detections.json (COCO results: image_id = position on the command\n"
            "line, plus file_name and category_name) and DIR/<image name>.png with the masks,\n"
            "boxes and labels drawn over the image.\n"
            "  --weights CKPT     model or training checkpoint (default MODEL.WEIGHTS)\n"
            "  --score-thresh T   keep detections scoring at least T (default 0.5)\n"
            "  --set KEY=VALUE    config override (e.g. MODEL.DEVICE=cuda)\n"
            "Class names come from the shard index of DATASETS.TEST (else DATASETS.TRAIN) when\n"
            "it exists, else \"class N\" with category_id N.\n");
}

/* The input's file name without folders and extension, unique among the outputs. */
static void output_stem(char **argv_images, int i, char *stem, size_t len) {
    const char *p = argv_images[i], *base = strrchr(p, '/');
    base = base ? base + 1 : p;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    snprintf(stem, len, "%.*s", (int)n, base);
    int dup = 0;
    for (int j = 0; j < i; j++) {
        const char *q = argv_images[j], *b = strrchr(q, '/');
        b = b ? b + 1 : q;
        const char *d = strrchr(b, '.');
        size_t m = d && d != b ? (size_t)(d - b) : strlen(b);
        if (m == n && !strncmp(b, base, n)) dup++;
    }
    if (dup) snprintf(stem + strlen(stem), len - strlen(stem), "_%d", dup + 1);
}

static int check_input(const char *path, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open '%s': %s", path, strerror(errno));
        return 0;
    }
    /* A directory opens, and its "size" is LONG_MAX: say what it is instead. */
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fclose(f);
        snprintf(err, err_len, "'%s' is %s, not an image file (give JPEG/PNG files, e.g. DIR/*.jpg)", path,
                 S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
        return 0;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n <= 0) {
        fclose(f);
        snprintf(err, err_len, "'%s' is empty or not a regular file", path);
        return 0;
    }
    uint8_t *d = MRCNN_MALLOC((size_t)n, "image file");
    size_t got = fread(d, 1, (size_t)n, f);
    fclose(f);
    int h, w, ok = got == (size_t)n;
    char why[512] = "short read";
    if (ok) ok = mrcnn_image_check(d, (size_t)n, &h, &w, why, sizeof why);
    free(d);
    if (!ok) snprintf(err, err_len, "'%s' is not a readable JPEG or PNG image: %s", path, why);
    return ok;
}

/* Class names: the dataset the model was trained or is evaluated on, when at hand and of
 * the model's class count. Returns that dataset's index path, or NULL (then "class N"). */
static const char *open_category_table(const mrcnn_config *cfg, mrcnn_category_table *table) {
    const char *index = NULL;
    if (cfg->datasets_test[0] && access(cfg->datasets_test, R_OK) == 0) index = cfg->datasets_test;
    else if (cfg->datasets_train[0] && access(cfg->datasets_train, R_OK) == 0) index = cfg->datasets_train;
    if (index) {
        mrcnn_category_table_load(table, index);
        if (table->n != cfg->roi_num_classes) {
            mrcnn_warn("%s has %d categories but the model %d classes: labelling them \"class N\"", index, table->n,
                       cfg->roi_num_classes);
            mrcnn_category_table_free(table);
            index = NULL;
        }
    }
    return index;
}

/* Detection k of image image_id (file) as one element of detections.json, after a comma
 * unless it is the first (n_out 0); table NULL: categories named "class N". */
static void write_detection(FILE *jf, int64_t n_out, int image_id, const char *file, const mrcnn_instances *inst,
                            int k, const mrcnn_category_table *table) {
    int c = inst->classes[k];
    const float *b = inst->boxes + 4 * k;
    float bw = b[2] - b[0], bh = b[3] - b[1];
    fprintf(jf, "%s\n{\"image_id\": %d, \"file_name\": ", n_out ? "," : "", image_id);
    mrcnn_json_write_string(jf, file);
    fprintf(jf, ", \"category_id\": %lld, \"category_name\": ", table ? (long long)table->ids[c] : (long long)c + 1);
    char cname[64];
    snprintf(cname, sizeof cname, "class %d", c + 1);
    mrcnn_json_write_string(jf, table ? table->names[c] : cname);
    fprintf(jf, ", \"score\": %.9g, \"bbox\": [%.9g, %.9g, %.9g, %.9g], ", inst->scores[k], b[0], b[1], bw, bh);
    char *counts = mrcnn_rle_to_string(&inst->masks[k]);
    fprintf(jf, "\"segmentation\": {\"size\": [%d, %d], \"counts\": ", inst->h, inst->w);
    mrcnn_json_write_string(jf, counts);
    fputs("}}", jf);
    free(counts);
}

/* The command line, except --set's values (applied once the config file is loaded): -1 to
 * go on, else the exit code (0 after --help). images: (argc) entries, n_images used. */
static int parse_args(int argc, char **argv, const char **config_path, const char **weights, const char **out_dir,
                      double *score_thresh, const char **images, int *n_images) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            predict_usage(stdout);
            return 0;
        } else if (has_val && !strcmp(a, "--config")) {
            *config_path = argv[++i];
        } else if (has_val && !strcmp(a, "--weights")) {
            *weights = argv[++i];
        } else if (has_val && !strcmp(a, "--out")) {
            *out_dir = argv[++i];
        } else if (has_val && !strcmp(a, "--set")) {
            if (!strchr(argv[++i], '=')) {
                fprintf(stderr, "mrcnn predict: --set '%s' is not KEY=VALUE\n", argv[i]);
                return 2;
            }
        } else if (has_val && !strcmp(a, "--score-thresh")) {
            if (!mrcnn_arg_double("mrcnn predict", "--score-thresh", argv[++i], 0, 1, score_thresh)) return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "mrcnn predict: unknown or incomplete option '%s'\n", a);
            predict_usage(stderr);
            return 2;
        } else {
            images[(*n_images)++] = a;
        }
    }
    return -1;
}

int mrcnn_cmd_predict(int argc, char **argv) {
    const char *config_path = NULL, *weights = NULL, *out_dir = NULL;
    double score_thresh = 0.5;
    const char **images = calloc((size_t)argc + 1, sizeof *images);
    MRCNN_CHECK(images, "out of memory");
    int n_images = 0;
    int rc = parse_args(argc, argv, &config_path, &weights, &out_dir, &score_thresh, images, &n_images);
    if (rc >= 0) {
        free(images);
        return rc;
    }
    if (!out_dir || !n_images) {
        fprintf(stderr, "mrcnn predict: %s\n", !out_dir ? "--out DIR is required" : "no input images given");
        predict_usage(stderr);
        free(images);
        return 2;
    }
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    char err[2048];
    if (config_path && !mrcnn_config_try_load(&cfg, config_path, err, sizeof err)) {
        fprintf(stderr, "mrcnn predict: %s\n", err);
        free(images);
        return 1;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--set") && i + 1 < argc && !mrcnn_config_try_set(&cfg, argv[++i], "--set", err, sizeof err)) {
            fprintf(stderr, "mrcnn predict: %s\n", err);
            free(images);
            return 1;
        }
    if (!weights) weights = cfg.model_weights;
    if (!weights[0]) {
        fprintf(stderr, "mrcnn predict: no weights: pass --weights CKPT (or set MODEL.WEIGHTS)\n");
        free(images);
        return 2;
    }
    int bad = 0;
    for (int i = 0; i < n_images; i++)
        if (!check_input(images[i], err, sizeof err)) fprintf(stderr, "mrcnn predict: %s\n", err), bad++;
    if (bad) {
        fprintf(stderr, "mrcnn predict: %d of %d inputs are unusable; nothing was written\n", bad, n_images);
        free(images);
        return 1;
    }
    if (!mrcnn_mkdir_p(out_dir)) { // 1 on success
        fprintf(stderr, "mrcnn predict: cannot create the output folder '%s': %s\n", out_dir, strerror(errno));
        free(images);
        return 1;
    }

    mrcnn_category_table table = {0};
    const char *index = open_category_table(&cfg, &table);

    double t0 = mrcnn_time_now();
    mrcnn_infer *inf = mrcnn_infer_create(&cfg, weights, strcmp(cfg.model_device, "cuda") ? -1 : 0);
    char path[4600];
    snprintf(path, sizeof path, "%s/detections.json.tmp", out_dir);
    FILE *jf = fopen(path, "w");
    MRCNN_CHECK(jf, "cannot write '%s': %s", path, strerror(errno));
    fputc('[', jf);
    int64_t n_out = 0;
    for (int i = 0; i < n_images; i++) {
        mrcnn_infer_input in;
        uint8_t *rgb;
        MRCNN_CHECK(mrcnn_infer_load_file(&cfg, images[i], &in, &rgb, err, sizeof err), "%s", err);
        in.image_id = in.image_index = i + 1;
        mrcnn_instances inst;
        mrcnn_infer_run(inf, &in, &inst);
        int kept = 0;
        for (int k = 0; k < inst.n; k++) {
            if (inst.scores[k] < (float)score_thresh) continue; // the overlay compares in float too
            kept++;
            write_detection(jf, n_out++, i + 1, images[i], &inst, k, index ? &table : NULL);
        }
        mrcnn_overlay_draw(rgb, &inst, index ? (const char *const *)table.names : NULL, index ? table.n : 0,
                           (float)score_thresh);
        char stem[1024];
        output_stem((char **)images, i, stem, sizeof stem);
        snprintf(path, sizeof path, "%s/%s.png", out_dir, stem);
        MRCNN_CHECK(mrcnn_png_write_rgb(path, rgb, inst.h, inst.w, NULL, err, sizeof err), "%s", err);
        mrcnn_info("%s: %d detections at score >= %g -> %s", images[i], kept, score_thresh, path);
        mrcnn_instances_free(&inst);
        free(in.canvas);
        free(rgb);
    }
    fputs("\n]\n", jf);
    snprintf(path, sizeof path, "%s/detections.json.tmp", out_dir);
    MRCNN_CHECK(fclose(jf) == 0, "writing '%s' failed", path);
    char final[4600];
    snprintf(final, sizeof final, "%s/detections.json", out_dir);
    MRCNN_CHECK(rename(path, final) == 0, "cannot rename '%s' to '%s': %s", path, final, strerror(errno));
    mrcnn_info("mrcnn predict: %d images, %lld detections in %s (%.1f s on the %s)", n_images, (long long)n_out,
               final, mrcnn_time_now() - t0, mrcnn_infer_backend_name(inf));
    mrcnn_infer_destroy(inf);
    if (index) mrcnn_category_table_free(&table);
    free(images);
    return 0;
}
