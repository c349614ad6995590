/* Internals of src/data shared between the loader, its epoch plan (epoch_plan.c) and its
 * transforms. */
#ifndef MRCNN_DATA_INTERNAL_H
#define MRCNN_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Per-worker scratch for the transforms (grown, never shrunk). */
typedef struct {
    int *x0, *x1, *y0, *y1; // (cap_w), (cap_w), (cap_h), (cap_h) taps
    float *fx, *fy;         // (cap_w), (cap_h) weights
    float *row0, *row1;     // (cap_w * 3) resampled source rows
    int *i0, *i1;           // (cap_w * 3) flat source-row indices of each output value's taps
    float *f3;              // (cap_w * 3) their weights
    float *srcf, *na, *nb;  // (cap_src * 3) a source row as normalized floats; per-value scale, offset
    int cap_w, cap_h, cap_src;
} data_scratch;
void data_scratch_reserve(data_scratch *sc, int nw, int nh);
void data_scratch_reserve_src(data_scratch *sc, int w);
void data_scratch_free(data_scratch *sc);

/* Output size of the shortest-edge resize. */
void data_resize_shape(int h, int w, int min_size, int max_size, int *nh, int *nw);
/* rgb (h, w, 3) uint8 -> canvas (ch, cw, 3) float: resized to (nh, nw), mirrored when
 * flip, normalized ((v - mean) / std), zero elsewhere. */
void data_resize_normalize(const uint8_t *rgb, int h, int w, int nh, int nw, int flip, const float mean[3],
                           const float std_[3], float *canvas, int ch, int cw, data_scratch *sc);
/* colmajor (w, h) 0/1 (COCO's column-major order) -> out (ch, cw): nearest resize to
 * (nh, nw), mirrored when flip, zero elsewhere. src_box: [x0, y0, x1, y1) in source
 * pixels outside which colmajor is all 0 (a speed hint; NULL: unknown). */
void data_mask_resize(const uint8_t *colmajor, int h, int w, int nh, int nw, int flip, uint8_t *out, int ch, int cw,
                      const int src_box[4], data_scratch *sc);

/* The step plan of one epoch: out (steps * global_batch) global image indices, step by
 * step, rank by rank; valid (same size) is 0 for the eval-mode padding repeats.
 * landscape (n) is 1 for w >= h (aspect grouping). Returns the step count. */
int64_t data_plan_epoch(int64_t n, int64_t global_batch, uint64_t seed, int64_t epoch, int shuffle, int grouping,
                        const uint8_t *landscape, int64_t *out, uint8_t *valid);
/* Steps per epoch of data_plan_epoch (the same for every epoch). */
int64_t data_plan_steps(int64_t n, int64_t global_batch, int shuffle, int grouping, const uint8_t *landscape);

#endif
