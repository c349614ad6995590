/* Choosing a backend for a run (src/backend/open/backend_open.c). */
#ifndef MRCNN_BACKEND_OPEN_H
#define MRCNN_BACKEND_OPEN_H

#include "mrcnn/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one choice of a backend (mrcnn train, eval, predict, bench train): the CPU, or
 * the GPU o->gpu (< 0: none visible to this rank). A GPU backend that does not start
 * (no GPU, a GPU=0 build, a driver error) gives NULL with *why set when o->fallback is
 * NULL; else the CPU backend, after the warning "MODEL.DEVICE=cuda but WHY: FALLBACK"
 * (fallback e.g. "training on the CPU"). */
typedef struct mrcnn_backend_open_opts {
    mrcnn_device device; // mrcnn_backend_device_parse(MODEL.DEVICE)
    int gpu;
    const char *fallback;
} mrcnn_backend_open_opts;
mrcnn_backend *mrcnn_backend_open(const mrcnn_backend_open_opts *o, const char **why);

#ifdef __cplusplus
}
#endif

#endif
