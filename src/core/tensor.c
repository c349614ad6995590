#include "mrcnn/tensor.h"
#include "mrcnn/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const size_t k_size[MRCNN_DTYPE_COUNT] = {4, 2, 2, 4, 1, 8, 8};
static const char *k_name[MRCNN_DTYPE_COUNT] = {"fp32", "fp16", "bf16", "int32", "uint8", "fp64", "int64"};

size_t mrcnn_dtype_size(mrcnn_dtype dtype) {
    MRCNN_CHECK(dtype >= 0 && dtype < MRCNN_DTYPE_COUNT, "unknown dtype %d", (int)dtype);
    return k_size[dtype];
}

const char *mrcnn_dtype_name(mrcnn_dtype dtype) {
    return (dtype >= 0 && dtype < MRCNN_DTYPE_COUNT) ? k_name[dtype] : "?";
}

int mrcnn_dtype_parse(const char *name) {
    for (int i = 0; i < MRCNN_DTYPE_COUNT; i++)
        if (strcmp(name, k_name[i]) == 0) return i;
    if (strcmp(name, "float32") == 0) return MRCNN_DTYPE_F32;
    if (strcmp(name, "float16") == 0) return MRCNN_DTYPE_F16;
    if (strcmp(name, "bfloat16") == 0) return MRCNN_DTYPE_BF16;
    return -1;
}

mrcnn_tensor mrcnn_tensor_view(void *data, mrcnn_dtype dtype, mrcnn_device device, int ndim,
                               const int64_t *shape) {
    MRCNN_CHECK(ndim >= 0 && ndim <= MRCNN_MAX_DIMS, "tensor rank %d outside [0, %d]", ndim, MRCNN_MAX_DIMS);
    mrcnn_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        MRCNN_CHECK(shape[i] >= 0, "negative extent %lld in dimension %d", (long long)shape[i], i);
        t.shape[i] = shape[i];
        t.stride[i] = stride;
        stride *= shape[i];
    }
    return t;
}

int64_t mrcnn_tensor_numel(const mrcnn_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t mrcnn_tensor_nbytes(const mrcnn_tensor *t) {
    return (size_t)mrcnn_tensor_numel(t) * mrcnn_dtype_size(t->dtype);
}

bool mrcnn_tensor_is_contiguous(const mrcnn_tensor *t) {
    int64_t stride = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != stride) return false;
        stride *= t->shape[i];
    }
    return true;
}

mrcnn_tensor mrcnn_tensor_reshape(const mrcnn_tensor *t, int ndim, const int64_t *shape) {
    MRCNN_CHECK(mrcnn_tensor_is_contiguous(t), "reshape of a non-contiguous tensor");
    mrcnn_tensor r = mrcnn_tensor_view(t->data, t->dtype, t->device, ndim, shape);
    char a[128], b[128];
    MRCNN_CHECK(mrcnn_tensor_numel(&r) == mrcnn_tensor_numel(t), "reshape %s to %s changes the element count",
                mrcnn_tensor_shape_str(t, a, sizeof a), mrcnn_tensor_shape_str(&r, b, sizeof b));
    return r;
}

const char *mrcnn_tensor_shape_str(const mrcnn_tensor *t, char *buf, size_t len) {
    size_t used = 0;
    used += (size_t)snprintf(buf + used, len - used, "(");
    for (int i = 0; i < t->ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (used < len) snprintf(buf + used, len - used, ")");
    return buf;
}

void mrcnn_tensor_check_shape(const mrcnn_tensor *t, const char *what, int ndim, const int64_t *shape) {
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || shape[i] == t->shape[i];
    if (ok) return;
    mrcnn_tensor e = {0};
    e.ndim = ndim;
    for (int i = 0; i < ndim; i++) e.shape[i] = shape[i];
    char a[128], b[128];
    MRCNN_CHECK(ok, "%s: shape %s but expected %s", what, mrcnn_tensor_shape_str(t, a, sizeof a),
                mrcnn_tensor_shape_str(&e, b, sizeof b));
}

void mrcnn_tensor_check_dtype(const mrcnn_tensor *t, const char *what, mrcnn_dtype dtype) {
    MRCNN_CHECK(t->dtype == dtype, "%s: dtype %s but expected %s", what, mrcnn_dtype_name(t->dtype),
                mrcnn_dtype_name(dtype));
}
