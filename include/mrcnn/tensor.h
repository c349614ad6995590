/* A small tensor: a pointer plus shape, strides, dtype and device. It never owns
 * memory by itself; arenas (arena.h) or callers do. */
#ifndef MRCNN_TENSOR_H
#define MRCNN_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MRCNN_MAX_DIMS 6

typedef enum {
    MRCNN_DTYPE_F32 = 0,
    MRCNN_DTYPE_F16,
    MRCNN_DTYPE_BF16,
    MRCNN_DTYPE_I32,
    MRCNN_DTYPE_U8,
    MRCNN_DTYPE_F64,
    MRCNN_DTYPE_I64,
    MRCNN_DTYPE_COUNT
} mrcnn_dtype;

typedef enum { MRCNN_DEVICE_CPU = 0, MRCNN_DEVICE_GPU } mrcnn_device;

typedef struct mrcnn_tensor {
    void *data;
    int64_t shape[MRCNN_MAX_DIMS];  // outermost first, e.g. (N, H, W, C)
    int64_t stride[MRCNN_MAX_DIMS]; // in elements, not bytes
    int ndim;
    mrcnn_dtype dtype;
    mrcnn_device device;
} mrcnn_tensor;

size_t mrcnn_dtype_size(mrcnn_dtype dtype);
const char *mrcnn_dtype_name(mrcnn_dtype dtype);
/* Parses "fp32", "fp16", "bf16", ...; returns -1 for an unknown name. */
int mrcnn_dtype_parse(const char *name);

/* A contiguous (row-major) view of data with the given shape. */
mrcnn_tensor mrcnn_tensor_view(void *data, mrcnn_dtype dtype, mrcnn_device device, int ndim,
                               const int64_t *shape);
int64_t mrcnn_tensor_numel(const mrcnn_tensor *t);
size_t mrcnn_tensor_nbytes(const mrcnn_tensor *t);
bool mrcnn_tensor_is_contiguous(const mrcnn_tensor *t);
/* Same data, new shape with the same element count (contiguous tensors only). */
mrcnn_tensor mrcnn_tensor_reshape(const mrcnn_tensor *t, int ndim, const int64_t *shape);
/* Writes "(2, 3, 4)" into buf. */
const char *mrcnn_tensor_shape_str(const mrcnn_tensor *t, char *buf, size_t len);
/* Fails with "<what>: shape (..) but expected (..)" unless t has exactly this shape;
 * an expected extent of -1 matches any size. */
void mrcnn_tensor_check_shape(const mrcnn_tensor *t, const char *what, int ndim,
                              const int64_t *shape);
void mrcnn_tensor_check_dtype(const mrcnn_tensor *t, const char *what, mrcnn_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
