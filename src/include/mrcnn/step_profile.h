/* A training step's profile (`mrcnn bench train --profile`, src/train/step_profile.c):
 * one step run under the backend's trace layer (backend_trace.h), summarized so that a change can be judged on the CPU before a GPU
 * sees it: the backend calls by op kind (each is at least one kernel launch on a GPU),
 * the bytes uploaded and read back (the backend's own counters), the host staging time,
 * and the FLOPs of the convolutions, deconvolutions and linear layers by stage. */
#ifndef MRCNN_STEP_PROFILE_H
#define MRCNN_STEP_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "mrcnn/backend.h"
#include "mrcnn/model.h"

#define MRCNN_PROFILE_MAX_OPS 96

/* The FLOP stages, told apart by shape: convolutions over the batch's images (backbone,
 * FPN, RPN head), convolutions and deconvolutions over ROIs (the mask head), linear
 * layers (the box head). */
enum { MRCNN_PROFILE_IMAGE, MRCNN_PROFILE_MASK_HEAD, MRCNN_PROFILE_BOX_HEAD, MRCNN_PROFILE_COUNT };

typedef struct mrcnn_step_profile {
    int n_ops;
    char op[MRCNN_PROFILE_MAX_OPS][48];      // "<table>.<entry>", first seen first
    uint64_t op_calls[MRCNN_PROFILE_MAX_OPS]; // calls of op[i] in the step
    uint64_t calls;                          // all calls (nested ones not counted)
    double flops[MRCNN_PROFILE_COUNT];       // multiply-adds x 2
    double bytes;                            // the tensor arguments' bytes, uploads and reads aside
    mrcnn_backend_stats stats;               // the backend's counters over the step
    double stage_ms;                         // host staging time of the step (mrcnn_model_stage)
    double step_ms;                          // wall time of the traced step (tracing included)
} mrcnn_step_profile;

/* Adds one kept trace listing (one line per call) to p; a convolution is ROI-level when
 * its batch is not n_images or when it lies between the listing's ROIAligns forward and
 * their backward (a mask head on as many rows as images). Fails on a line it cannot read. */
void mrcnn_step_profile_add_listing(mrcnn_step_profile *p, const char *listing, int n_images);
void mrcnn_step_profile_print(FILE *f, const mrcnn_step_profile *p);
/* Runs step(ctx) once (it must run the step directly, not replay a graph) with the
 * trace layer installed on be, then removes the layer; prints the profile to f (NULL:
 * not printed) and fills *out (NULL: not kept). m: the model whose staging slot 0 the
 * step stages (NULL or none staged: staging 0 ms). */
void mrcnn_step_profile_run(mrcnn_backend *be, const mrcnn_model *m, int n_images, void (*step)(void *ctx), void *ctx,
                            FILE *f, mrcnn_step_profile *out);

#endif
