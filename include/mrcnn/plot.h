/* Pictures drawn by gnuplot (pngcairo): the training curves, the evaluation curves and
 * the scaling plots. Each picture NAME.png comes with NAME.csv, the exact series it
 * plots, and NAME.gp, the gnuplot script that drew it (rerun `gnuplot NAME.gp` to redraw
 * or restyle it). gnuplot is a separate process: found once (MRCNN_GNUPLOT, else
 * `gnuplot` on PATH); where it is missing the caller keeps running and is told once
 * that plots are off. Implementation: src/core/plot_gnuplot.c (the driver),
 * src/train/plot.c (training), src/eval/eval_plots.c (evaluation). */
#ifndef MRCNN_PLOT_H
#define MRCNN_PLOT_H

#include <stdio.h>

#include "mrcnn/cocoeval.h"
#include "mrcnn/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when gnuplot can be run; the first call that finds none warns once. */
int mrcnn_plot_enabled(void);
/* Writes `script` to base.gp, preceded by the pngcairo terminal (w x h pixels) and
 * `set output 'base.png'`, and runs gnuplot on it. Returns 1 when base.png was written;
 * 0 with a warning otherwise (plots are never worth a failed run). */
int mrcnn_plot_render(const char *base, int w, int h, const char *script);
/* Writes s into out as a gnuplot single-quoted string ('' for a quote; no escapes). */
void mrcnn_plot_quote(char *out, size_t cap, const char *s);
/* The colour of series i (a fixed, colour-blind-safe cycle), as "#rrggbb". */
const char *mrcnn_plot_color(int i);

/* A growable text buffer for building scripts. */
typedef struct mrcnn_plot_buf {
    char *s; // NUL-terminated
    size_t n, cap;
} mrcnn_plot_buf;
void mrcnn_plot_buf_printf(mrcnn_plot_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mrcnn_plot_buf_free(mrcnn_plot_buf *b);

/* ---- training (src/train/plot.c) ---- */
/* Reads each run_dirs[i]/metrics.json and draws out_dir/training.png (+ .csv per run,
 * .gp): total and each loss term on a log axis, the learning rate, img/s and memory,
 * and, for fp16 runs, the loss scale and skipped steps. config: a one-line description
 * for the title (NULL: read from the run's earlier plots/training.csv, if any).
 * Returns the number of training steps drawn (0: nothing to plot or plots off). */
int mrcnn_plot_training(const char *const *run_dirs, int n_runs, const char *out_dir, const char *config);

/* The trainer's call (rank 0, at each checkpoint and at the end): OUTPUT_DIR/plots/
 * training.png of OUTPUT_DIR/metrics.json, titled with the config's main settings.
 * At a checkpoint it is skipped when the last drawing is more recent than 20 times
 * what that drawing took (checkpoints seconds apart would spend more than 5% of the
 * run drawing); at_end always draws. */
void mrcnn_plot_run(const mrcnn_config *cfg, int at_end);

/* ---- evaluation (src/eval/eval_plots.c) ---- */
/* dir/eval_<iou>_pr.png: precision against recall at IoU .50, .75 and .50:.95, and at
 * .50:.95 per object area, as pycocotools' analyze figures; dir/eval_<iou>_categories.png:
 * AP (.50:.95) per category, sorted. iou: "bbox" or "segm". */
void mrcnn_plot_eval(const mrcnn_coco_eval *e, const mrcnn_coco_gt *gt, const char *iou, const char *dir);

#ifdef __cplusplus
}
#endif
#endif
