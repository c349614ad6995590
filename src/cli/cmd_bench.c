/* `mrcnn bench scaling`: measured weak scaling over MPI ranks (CPU here, nodes x GPUs
 * through jobs/scaling.sbatch), or with --model the efficiency predicted for N GPUs
 * from a measured 1-GPU step timeline (scaling_model.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench_scaling.h"
#include "bench_train.h"
#include "cli.h"
#include "mrcnn/metrics.h"
#include "mrcnn/scaling_model.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mrcnn bench scaling [--ranks 1,2,3] [--config FILE] [--set KEY=VALUE]... [--steps N]\n"
            "                           [--warmup N] [--per-rank-batch B] [--launch CMD] [--gpus-per-node G]\n"
            "                           [--bucket-mb M] [--backward-ms D] [--out DIR]\n"
            "       mrcnn bench scaling --model TIMELINE.json [--gpus 8,64] [--gpus-per-node 8]\n"
            "                           [--intra nvlink] [--inter ndr] [--backward-scale K] [--out DIR]\n"
            "\n"
            "Measured: for each rank count n, runs `CMD mrcnn train` with a fixed batch per rank (weak\n"
            "scaling), reads img/s from its metrics.json, and runs an all-reduce probe under the same\n"
            "launcher over the trainer's gradient buckets: all-reduce ms per step alone, and the share of\n"
            "it hidden behind a backward of D ms. Writes DIR/scaling.csv and DIR/scaling.png (img/s and\n"
            "efficiency against ranks, with the ideal line; the plotted series in DIR/scaling_plot.csv;\n"
            "--model: scaling_model.csv, scaling_model.png, scaling_model_plot.csv).\n"
            "  --ranks LIST       rank counts, e.g. 1,2,3 or 1-4 (default 1,2)\n"
            "  --config FILE      trainer config (default configs/tiny.yaml); --set is passed on\n"
            "  --steps N          optimizer steps per run (default 8); --warmup N: first N not timed (2)\n"
            "  --per-rank-batch B images per rank per step (default 1): SOLVER.IMS_PER_BATCH = B * n\n"
            "  --launch CMD       launcher; {n} = ranks, {nodes} = ceil(n / gpus-per-node)\n"
            "                     (default \"mpirun --oversubscribe -np {n}\")\n"
            "  --bucket-mb M      gradient bucket size for the probe (default: the trainer's, 25)\n"
            "  --backward-ms D    the probe's synthetic backward (default: half of the 1st run's step)\n"
            "Model: --model reads the timeline (format in src/include/mrcnn/scaling_model.h) and prints the\n"
            "step time, all-reduce and exposed ms, hidden share and efficiency per GPU count.\n"
            "  --gpus LIST        GPU counts (default 8,64); rings within --gpus-per-node (8) run on\n"
            "                     --intra (default nvlink), larger ones on --inter (default ndr)\n"
            "  links: nvlink, ndr, hdr, eth100 or BW,LAT (GB/s, microseconds per ring step)\n"
            "  --backward-scale K what if backward took K times as long\n"
            "Exit codes: 0 done, 1 a run failed (its log is named), 2 bad command line.\n");
}

static int mkdir_p(const char *dir) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0755);
            *p = '/';
        }
    return mkdir(buf, 0755) == 0 || errno == EEXIST;
}

static int model_mode(int argc, char **argv, const char *timeline_path) {
    int gpus[64], n_gpus = 2, per_node = 8;
    gpus[0] = 8;
    gpus[1] = 64;
    const char *intra_s = "nvlink", *inter_s = "ndr", *out_dir = NULL;
    double bscale = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model")) i++;
        else if (!strcmp(a, "--gpus") && v) {
            if (!(n_gpus = bench_parse_int_list(v, gpus, 64))) {
                fprintf(stderr, "mrcnn bench scaling: --gpus wants a list like 8,64, got '%s'\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--gpus-per-node") && v) {
            per_node = atoi(v);
            i++;
            if (per_node < 1) {
                fprintf(stderr, "mrcnn bench scaling: --gpus-per-node wants a positive integer, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--intra") && v) intra_s = argv[++i];
        else if (!strcmp(a, "--inter") && v) inter_s = argv[++i];
        else if (!strcmp(a, "--out") && v) out_dir = argv[++i];
        else if (!strcmp(a, "--backward-scale") && v) {
            bscale = atof(v);
            i++;
            if (!(bscale > 0)) {
                fprintf(stderr, "mrcnn bench scaling: --backward-scale wants a number > 0, got '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "mrcnn bench scaling --model: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    char err[1024];
    mrcnn_link intra, inter;
    if (!mrcnn_link_parse(intra_s, &intra, err, sizeof err) || !mrcnn_link_parse(inter_s, &inter, err, sizeof err)) {
        fprintf(stderr, "mrcnn bench scaling: %s\n", err);
        return 2;
    }
    mrcnn_timeline t;
    if (!mrcnn_timeline_load(timeline_path, &t, err, sizeof err)) {
        fprintf(stderr, "mrcnn bench scaling: %s\n", err);
        return 1;
    }
    double total_bytes = 0;
    for (int b = 0; b < t.n_buckets; b++) total_bytes += t.bytes[b];
    printf("timeline %s%s%s%s: forward %.2f ms, backward %.2f ms (x%g), other %.2f ms, %d img/GPU, %d buckets, "
           "%.1f MB of gradients\n",
           timeline_path, t.source[0] ? " (" : "", t.source[0] ? t.source : "", t.source[0] ? ")" : "", t.forward_ms,
           t.backward_ms, bscale, t.other_ms, t.images_per_gpu, t.n_buckets, total_bytes / 1e6);
    printf("links: intra-node %s (%g GB/s, %g us/step) up to %d GPUs, inter-node %s (%g GB/s, %g us/step)\n",
           intra.name, intra.bw_gbs, intra.latency_us, per_node, inter.name, inter.bw_gbs, inter.latency_us);
    FILE *csv = NULL;
    char path[1200];
    if (out_dir) {
        if (!mkdir_p(out_dir)) {
            fprintf(stderr, "mrcnn bench scaling: cannot create %s\n", out_dir);
            mrcnn_timeline_free(&t);
            return 1;
        }
        snprintf(path, sizeof path, "%s/scaling_model.csv", out_dir);
        csv = fopen(path, "w");
        if (!csv) {
            fprintf(stderr, "mrcnn bench scaling: cannot create %s\n", path);
            mrcnn_timeline_free(&t);
            return 1;
        }
        fprintf(csv, "gpus,link,step_ms,allreduce_ms,exposed_ms,hidden_share,efficiency,img_per_s\n");
    }
    printf("%6s %-8s %9s %13s %11s %7s %11s %10s\n", "gpus", "link", "step_ms", "allreduce_ms", "exposed_ms",
           "hidden", "efficiency", "img/s");
    double xs[64], ys[64], es[64];
    for (int g = 0; g < n_gpus; g++) {
        mrcnn_scaling_prediction p;
        mrcnn_scaling_predict(&t, gpus[g], per_node, &intra, &inter, bscale, &p);
        printf("%6d %-8s %9.2f %13.3f %11.3f %6.1f%% %10.1f%% %10.1f\n", p.gpus, p.link, p.step_ms, p.comm_ms,
               p.exposed_ms, 100 * p.hidden_share, 100 * p.efficiency, p.img_per_s);
        if (csv)
            fprintf(csv, "%d,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.2f\n", p.gpus, p.link, p.step_ms, p.comm_ms, p.exposed_ms,
                    p.hidden_share, p.efficiency, p.img_per_s);
        xs[g] = p.gpus;
        ys[g] = p.img_per_s;
        es[g] = p.efficiency;
    }
    if (csv) {
        fclose(csv);
        printf("wrote %s\n", path);
        snprintf(path, sizeof path, "%s/scaling_model", out_dir);
        char title[1400];
        snprintf(title, sizeof title, "modelled weak scaling: timeline %s, %s intra-node, %s inter-node", timeline_path,
                 intra.name, inter.name);
        if (bench_plot_scaling(path, title, "GPUs", xs, ys, es, n_gpus, 1)) printf("wrote %s.png\n", path);
    }
    mrcnn_timeline_free(&t);
    return 0;
}

static int cmd_scaling(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--probe")) return bench_scaling_probe(argc, argv);
        if (!strcmp(argv[i], "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mrcnn bench scaling: --model wants a timeline file\n");
                return 2;
            }
            return model_mode(argc, argv, argv[i + 1]);
        }
    }
    return bench_scaling_measure(argc, argv);
}

int mrcnn_cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: mrcnn bench scaling [options]   (mrcnn bench scaling --help)\n"
               "       mrcnn bench train [options]     (mrcnn bench train --help)\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "scaling")) return cmd_scaling(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return bench_train_main(argc - 1, argv + 1);
    fprintf(stderr, "mrcnn bench: unknown benchmark '%s' (scaling, train)\n", argv[1]);
    return 2;
}
