/* Writes metrics.json through the trainer's own writer (mrcnn_metrics_log) for
 * test_plots.sh: an fp16-like run of 60 steps, logged every 2, with five loss terms,
 * a warm-up learning rate, a dynamic loss scale that halves at the skipped steps, host
 * and device memory; then a resume that repeats steps 41..60, and an eval line.
 *   prog_plot_metrics DIR [SEED]   ->  DIR/metrics.json, DIR/events.out.tfevents.* */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/metrics.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: prog_plot_metrics DIR [SEED]\n");
        return 2;
    }
    const double seed = argc > 2 ? atof(argv[2]) : 0;
    static const char *const names[] = {"loss_cls", "loss_box_reg", "loss_mask", "loss_rpn_cls", "loss_rpn_loc"};
    mrcnn_metrics m;
    mrcnn_metrics_open(&m, argv[1], 1);
    double scale = 65536;
    int64_t skipped = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int step = pass ? 42 : 2; step <= 60; step += 2) {
            mrcnn_step_metrics s;
            memset(&s, 0, sizeof s);
            s.step = step;
            s.max_step = 60;
            s.n_losses = 5;
            s.loss_names = names;
            for (int i = 0; i < 5; i++) s.losses[i] = (0.2 + 0.1 * i + 0.01 * seed) * exp(-step / (20.0 + 5 * i));
            s.losses[4] *= 0.01; // a term two decades below the rest: the axis is logarithmic
            s.total_loss = 0;
            for (int i = 0; i < 5; i++) s.total_loss += s.losses[i];
            s.lr = 0.02 * fmin(1.0, step / 20.0) * (step > 45 ? 0.1 : 1.0) + pass * 1e-4;
            s.img_per_s = 30 + 5 * sin(step / 5.0) + seed;
            s.mem_mb = 1500 + step;
            s.gpu_mem_mb = 4000 + 10 * step;
            if (step % 20 == 0) {
                scale /= 2;
                skipped++;
            }
            s.loss_scale = scale;
            s.skipped = skipped;
            s.step_ms = 100;
            mrcnn_metrics_log(&m, &s);
        }
    }
    mrcnn_eval_metrics e = {.step = 60, .bbox_ap = 0.1, .bbox_ap50 = 0.2, .segm_ap = 0.1, .segm_ap50 = 0.2};
    mrcnn_metrics_log_eval(&m, &e);
    mrcnn_metrics_close(&m);
    return 0;
}
