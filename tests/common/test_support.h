/* Helpers the tests share that the library does not need: host tensors without a
 * backend, the loss scaler's policy as host code (the reference for the backend's
 * step.decide, which runs it in the step's control vector) and the first difference of
 * two kept trace listings. */
#ifndef MRCNN_TEST_SUPPORT_H
#define MRCNN_TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "mrcnn/backend_trace.h"
#include "mrcnn/tensor.h"
#include "mrcnn/train.h"

/* A host tensor: calloc'ed (zeroed); free with test_tensor_free. */
mrcnn_tensor test_tensor_alloc(mrcnn_dtype dtype, int ndim, const int64_t *shape);
void test_tensor_free(mrcnn_tensor *t);

/* One step of torch.cuda.amp.GradScaler's policy on s: nonfinite = the gradients hold
 * Inf/NaN (the step is skipped, the scale halved); growth_interval clean steps in a row
 * double it. Returns 1 when the step is to be applied, 0 when skipped. */
int test_loss_scaler_update(mrcnn_loss_scaler *s, int nonfinite);

/* The first call where two kept listings (mrcnn_backend_trace_keep_listing) differ: its
 * index (from 0), with both lines in msg ("call #i: <a's line> | <b's line>", or that
 * one window has fewer calls); -1 when they are equal or a listing was not kept. */
int64_t test_trace_diff(const mrcnn_trace_summary *a, const mrcnn_trace_summary *b, char *msg, size_t len);

#endif
