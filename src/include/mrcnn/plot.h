/* Pictures drawn by gnuplot (pngcairo): the training curves, the evaluation curves and
 * the scaling plots. Each picture NAME.png comes with NAME.csv, the exact series it
 * plots, and NAME.gp, the gnuplot script that drew it (rerun `gnuplot NAME.gp` to redraw
 * or restyle it). gnuplot is a separate process: found once (MRCNN_GNUPLOT, else
 * `gnuplot` on PATH); where it is missing the caller keeps running and is told once
 * that plots are off. Implementation: src/core/plot_gnuplot.c; the pictures themselves are
 * declared by their modules (mrcnn/metrics.h: training, mrcnn/cocoeval.h: evaluation). */
#ifndef MRCNN_PLOT_H
#define MRCNN_PLOT_H

#include <stdio.h>


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

#ifdef __cplusplus
}
#endif
#endif
