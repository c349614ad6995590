/* `mrcnn plot`: the training curves of one run, or of several overlaid (a change
 * against its baseline), drawn from their metrics.json by gnuplot (plot.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mrcnn/check.h"
#include "mrcnn/metrics.h"
#include "mrcnn/plot.h"

static void plot_usage(FILE *out) {
    fprintf(out,
            "usage: mrcnn plot RUN_DIR [RUN_DIR...] [--out DIR]\n"
            "Draws the training curves of a run (its OUTPUT_DIR, holding metrics.json): total and\n"
            "each loss term on a log axis, the learning rate, img/s and memory, and for fp16 runs\n"
            "the loss scale and skipped steps. With several runs the curves are overlaid, one\n"
            "dash pattern per run (the first solid), for comparing a change against a baseline.\n"
            "  --out DIR   where to write (default: RUN_DIR/plots for one run, else plots-compare)\n"
            "Writes DIR/training.png for one run, DIR/compare.png for several, each with the\n"
            "plotted series as CSV (training.csv, or compare_1.csv, compare_2.csv, ... in the\n"
            "order given) and the gnuplot script (.gp) that drew it. Needs gnuplot (make deps;\n"
            "MRCNN_GNUPLOT names another binary).\n");
}

int mrcnn_cmd_plot(int argc, char **argv) {
    const char *out = NULL;
    const char **runs = MRCNN_CALLOC((size_t)argc + 1, sizeof *runs, "run list");
    int n = 0, rc = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            plot_usage(stdout);
            goto out;
        } else if (!strcmp(argv[i], "--out")) {
            if (i + 1 == argc) {
                fprintf(stderr, "mrcnn plot: --out needs a directory\n");
                rc = 2;
                goto out;
            }
            out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "mrcnn plot: unknown option '%s'\n", argv[i]);
            plot_usage(stderr);
            rc = 2;
            goto out;
        } else {
            runs[n++] = argv[i];
        }
    }
    if (n == 0) {
        fprintf(stderr, "mrcnn plot: name at least one run directory\n");
        plot_usage(stderr);
        rc = 2;
        goto out;
    }
    char dir[1100];
    if (out) snprintf(dir, sizeof dir, "%s", out);
    else if (n == 1) snprintf(dir, sizeof dir, "%s/plots", runs[0]);
    else snprintf(dir, sizeof dir, "plots-compare");
    if (!mrcnn_plot_enabled()) {
        fprintf(stderr, "mrcnn plot: gnuplot is needed (make deps, or MRCNN_GNUPLOT=/path/to/gnuplot)\n");
        rc = 1;
        goto out;
    }
    int steps = mrcnn_plot_training(runs, n, dir, NULL);
    if (steps <= 0) {
        fprintf(stderr, "mrcnn plot: no picture written (see the warnings above)\n");
        rc = 1;
        goto out;
    }
    printf("wrote %s/%s.png (%d runs, %d logged steps)\n", dir, n == 1 ? "training" : "compare", n, steps);
out:
    free(runs);
    return rc;
}
