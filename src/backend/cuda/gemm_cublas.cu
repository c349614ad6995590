/* Linear layers and the 2x2 stride-2 deconvolution through cuBLAS (cublasGemmEx,
 * fp32 compute for every storage dtype).
 *
 * Row-major to cuBLAS's column-major: a row-major (R, C) matrix is a column-major
 * (C, R) one, so y = x w^T becomes y^T = w x^T with no copies.
 *
 * The deconvolution is a GEMM because its 2x2 windows do not overlap at stride 2:
 * Z (M, 4K) = x (M, C) w^T with w viewed as (4K, C), then Z is scattered to
 * y[n, 2i+r, 2j+s, k] with bias and ReLU. (cuDNN's backward-data would need the
 * filter transposed to (C, 2, 2, K) and gives no fused bias either.) Rows are
 * processed in chunks so that the Z scratch stays bounded. */
#include "cuda_dtype.cuh"
#include "cuda_internal.h"

#define CU_THREADS 256
#define DECONV_SCRATCH_ELEMS (32LL << 20) // Z block: at most 32 M elements per chunk

static cudaDataType_t cublas_dtype(mrcnn_dtype dt) {
    if (dt == MRCNN_DTYPE_F16) return CUDA_R_16F;
    if (dt == MRCNN_DTYPE_BF16) return CUDA_R_16BF;
    return CUDA_R_32F;
}

static cublasComputeType_t compute_type(const cu_state *s, mrcnn_dtype dt) {
    return (dt == MRCNN_DTYPE_F32 && s->tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

static void check_gemm_out(mrcnn_dtype in, mrcnn_dtype out, const char *what) {
    MRCNN_CHECK(out == in || out == MRCNN_DTYPE_F32, "%s: output dtype %d must be the input dtype %d or fp32", what,
                (int)out, (int)in);
}

/* y (n, out) = x (n, in) w^T (w (out, in)) + beta y. */
static void lin_fwd(cu_state *s, int n, int in, int out, const void *x, const void *w, mrcnn_dtype dt, void *y,
                    mrcnn_dtype yt, float beta) {
    if (n == 0 || out == 0) return;
    const float one = 1.0f;
    MRCNN_CHECK_CUBLAS(cublasGemmEx(s->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, cublas_dtype(dt), in, x,
                                    cublas_dtype(dt), in, &beta, y, cublas_dtype(yt), out, compute_type(s, dt),
                                    CUBLAS_GEMM_DEFAULT));
    MRCNN_CUDA_DEBUG_SYNC("cublasGemmEx (linear forward)");
}

/* dx (n, in) = dy (n, out) w (out, in) + beta dx (beta 1: added, 0: written). */
static void lin_bwd_data(cu_state *s, int n, int in, int out, const void *dy, const void *w, mrcnn_dtype dt, void *dx,
                         mrcnn_dtype dxt, float beta) {
    if (n == 0 || in == 0) return;
    if (out == 0) { // no terms: written, dx is zero; added, it is left as it is
        if (beta == 0.0f) MRCNN_CHECK_CUDA(cudaMemsetAsync(dx, 0, (size_t)n * in * cu_dtype_size(dxt), s->stream));
        return;
    }
    const float one = 1.0f;
    MRCNN_CHECK_CUBLAS(cublasGemmEx(s->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w, cublas_dtype(dt), in, dy,
                                    cublas_dtype(dt), out, &beta, dx, cublas_dtype(dxt), in, compute_type(s, dt),
                                    CUBLAS_GEMM_DEFAULT));
    MRCNN_CUDA_DEBUG_SYNC("cublasGemmEx (linear data gradient)");
}

/* dw (out, in) += dy^T (out, n) x (n, in). */
static void lin_bwd_filter(cu_state *s, int n, int in, int out, const void *x, const void *dy, mrcnn_dtype dt, void *dw,
                           mrcnn_dtype dwt) {
    if (n == 0 || in == 0 || out == 0) return;
    const float one = 1.0f;
    MRCNN_CHECK_CUBLAS(cublasGemmEx(s->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, cublas_dtype(dt), in, dy,
                                    cublas_dtype(dt), out, &one, dw, cublas_dtype(dwt), in, compute_type(s, dt),
                                    CUBLAS_GEMM_DEFAULT));
    MRCNN_CUDA_DEBUG_SYNC("cublasGemmEx (linear weight gradient)");
}

static int as_int(int64_t v, const char *what) {
    MRCNN_CHECK(v >= 0 && v <= 2147483647LL, "%s: extent %lld does not fit cuBLAS's int", what, (long long)v);
    return (int)v;
}

/* ---- linear ----------------------------------------------------------------------------- */

/* x (N, ...), w (out, in) with in = x's elements per row, and the other operands were
 * checked in front (backend_validate.c), which allows in = 0 (an empty row); cuBLAS
 * wants int extents. */
static void linear_shapes(const mrcnn_tensor *x, const mrcnn_tensor *w, const char *op, int *n, int *in, int *out) {
    *out = as_int(w->shape[0], op);
    *in = as_int(w->shape[1], op);
    MRCNN_CHECK(*in > 0, "%s: w (out, in) has in = 0", op);
    *n = as_int(cu_numel(x) / *in, op);
}

static void cu_linear_forward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                              const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    cu_state *s = cu_st(be);
    int n, in, out;
    linear_shapes(x, w, "linear_forward", &n, &in, &out);
    const mrcnn_dtype dt = x->dtype;
    check_gemm_out(dt, y->dtype, "linear_forward y");
    const void *wp = cu_as_dtype(s, w, dt, CU_SCRATCH_W);
    lin_fwd(s, n, in, out, x->data, wp, dt, y->data, y->dtype, 0.0f);
    cu_bias_act(s, y->data, y->dtype, n, out, b ? b->data : NULL, b ? b->dtype : MRCNN_DTYPE_F32,
                act == MRCNN_ACT_RELU);
}

/* act = RELU: dy masked by y in one kernel that also sums db (cu_relu_grad_bias). */
static void cu_linear_backward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                               const mrcnn_tensor *dy, mrcnn_activation act, const mrcnn_tensor *y, mrcnn_tensor *dx,
                               mrcnn_grad_mode dx_mode, mrcnn_tensor *dw, mrcnn_tensor *db) {
    cu_state *s = cu_st(be);
    int n, in, out;
    linear_shapes(x, w, "linear_backward", &n, &in, &out);
    const mrcnn_dtype dt = dy->dtype;
    const void *g = dy->data;
    if (act == MRCNN_ACT_RELU) {
        MRCNN_CHECK(y != NULL, "linear_backward: act RELU needs the layer's output y");
        g = cu_relu_grad_bias(s, y->data, y->dtype, dy->data, dt, n, out, db ? db->data : NULL,
                              db ? db->dtype : MRCNN_DTYPE_F32);
    }
    if (dx) {
        check_gemm_out(dt, dx->dtype, "linear_backward dx");
        const void *wp = cu_as_dtype(s, w, dt, CU_SCRATCH_W);
        lin_bwd_data(s, n, in, out, g, wp, dt, dx->data, dx->dtype, dx_mode == MRCNN_GRAD_WRITE ? 0.0f : 1.0f);
    }
    if (dw) {
        check_gemm_out(dt, dw->dtype, "linear_backward dw");
        const void *xp = cu_as_dtype(s, x, dt, CU_SCRATCH_GEMM);
        lin_bwd_filter(s, n, in, out, xp, g, dt, dw->data, dw->dtype);
    }
    if (db && act != MRCNN_ACT_RELU) cu_bias_grad(s, dy->data, dt, n, out, db->data, db->dtype);
}

/* ---- deconv 2x2 stride 2 ---------------------------------------------------------------- */

/* Rows [m0, m0 + rows) of Z (fp32, (rows, 4K), column k*4 + r*2 + s) to y (N, 2H, 2W, K),
 * plus bias and ReLU. Threads run over (row, r*2+s, k), k fastest, so writes coalesce. */
__global__ void k_deconv_scatter(const float *z, int64_t m0, int64_t rows, int h, int w, int k, const void *b, int bt,
                                 int relu, void *y, int yt) {
    const int64_t total = rows * 4 * k;
    CU_GRID_STRIDE(t, total) {
        int kk = (int)(t % k);
        int rs = (int)(t / k % 4);
        int64_t row = t / ((int64_t)4 * k);
        int64_t m = m0 + row;
        int j = (int)(m % w);
        int64_t ni = m / w; // n * H + i
        int i = (int)(ni % h);
        int64_t n = ni / h;
        int r = rs >> 1, s = rs & 1;
        float v = z[row * 4 * k + kk * 4 + rs];
        if (b) v += cu_load(b, kk, bt);
        if (relu) v = v > 0.0f ? v : 0.0f;
        int64_t oh = 2 * i + r, ow = 2 * j + s;
        cu_store(y, ((n * 2 * h + oh) * 2 * w + ow) * k + kk, yt, v);
    }
}

/* dZ rows [m0, m0 + rows) (dtype of dy) gathered from dy (N, 2H, 2W, K). */
__global__ void k_deconv_gather(const void *dy, int dyt, int64_t m0, int64_t rows, int h, int w, int k, void *dz) {
    const int64_t total = rows * 4 * k;
    CU_GRID_STRIDE(t, total) {
        int kk = (int)(t % k);
        int rs = (int)(t / k % 4);
        int64_t row = t / ((int64_t)4 * k);
        int64_t m = m0 + row;
        int j = (int)(m % w);
        int64_t ni = m / w;
        int i = (int)(ni % h);
        int64_t n = ni / h;
        int r = rs >> 1, s = rs & 1;
        int64_t oh = 2 * i + r, ow = 2 * j + s;
        cu_store(dz, row * 4 * k + kk * 4 + rs, dyt, cu_load(dy, ((n * 2 * h + oh) * 2 * w + ow) * k + kk, dyt));
    }
}

/* x (N, H, W, C), w (K, 2, 2, C) and the other operands were checked in front
 * (backend_validate.c), which allows C = 0 or K = 0; the row chunks divide by K. */
static void deconv_shapes(const mrcnn_tensor *x, const mrcnn_tensor *w, const char *op, int *n, int *h, int *wd,
                          int *c, int *k) {
    *n = as_int(x->shape[0], op);
    *h = as_int(x->shape[1], op);
    *wd = as_int(x->shape[2], op);
    *c = as_int(x->shape[3], op);
    *k = as_int(w->shape[0], op);
    MRCNN_CHECK(*c > 0 && *k > 0, "%s: C and K must be positive", op);
}

static int64_t deconv_chunk_rows(int k) {
    int64_t rows = DECONV_SCRATCH_ELEMS / (4LL * k);
    return rows < 1 ? 1 : rows;
}

static void cu_deconv2x2_forward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                                 const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    cu_state *s = cu_st(be);
    int n, h, wd, c, k;
    deconv_shapes(x, w, "deconv2x2_forward", &n, &h, &wd, &c, &k);
    const mrcnn_dtype dt = x->dtype;
    const void *wp = cu_as_dtype(s, w, dt, CU_SCRATCH_W);
    const int64_t m = (int64_t)n * h * wd, chunk = deconv_chunk_rows(k);
    float *z = (float *)cu_scratch(s, CU_SCRATCH_GEMM, (size_t)(m < chunk ? m : chunk) * 4 * k * sizeof(float));
    const size_t xs = cu_dtype_size(dt);
    for (int64_t m0 = 0; m0 < m; m0 += chunk) {
        int64_t rows = m - m0 < chunk ? m - m0 : chunk;
        lin_fwd(s, as_int(rows, "deconv rows"), c, 4 * k, (const char *)x->data + m0 * c * xs, wp, dt, z,
                MRCNN_DTYPE_F32, 0.0f);
        int64_t total = rows * 4 * k;
        k_deconv_scatter<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, s->stream>>>(
            z, m0, rows, h, wd, k, b ? b->data : NULL, b ? b->dtype : MRCNN_DTYPE_F32, act == MRCNN_ACT_RELU, y->data,
            y->dtype);
        MRCNN_CHECK_LAUNCH("deconv2x2 scatter");
    }
}

/* act = RELU: dy masked by y in one kernel that also sums db (cu_relu_grad_bias); the
 * gather then reads the masked gradient. dx_mode WRITE: beta 0 (the chunks' rows of dx
 * are disjoint). */
static void cu_deconv2x2_backward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                                  const mrcnn_tensor *dy, mrcnn_activation act, const mrcnn_tensor *y,
                                  mrcnn_tensor *dx, mrcnn_grad_mode dx_mode, mrcnn_tensor *dw, mrcnn_tensor *db) {
    cu_state *s = cu_st(be);
    int n, h, wd, c, k;
    deconv_shapes(x, w, "deconv2x2_backward", &n, &h, &wd, &c, &k);
    const mrcnn_dtype dt = dy->dtype;
    const int64_t m = (int64_t)n * h * wd, chunk = deconv_chunk_rows(k);
    const void *g = dy->data;
    if (act == MRCNN_ACT_RELU) {
        MRCNN_CHECK(y != NULL, "deconv2x2_backward: act RELU needs the layer's output y");
        g = cu_relu_grad_bias(s, y->data, y->dtype, dy->data, dt, m * 4, k, db ? db->data : NULL,
                              db ? db->dtype : MRCNN_DTYPE_F32);
    }
    if (dx || dw) {
        const void *wp = NULL, *xp = NULL;
        if (dx) {
            check_gemm_out(dt, dx->dtype, "deconv2x2_backward dx");
            wp = cu_as_dtype(s, w, dt, CU_SCRATCH_W);
        }
        if (dw) {
            check_gemm_out(dt, dw->dtype, "deconv2x2_backward dw");
            xp = cu_as_dtype(s, x, dt, CU_SCRATCH_B);
        }
        const size_t es = cu_dtype_size(dt);
        const float beta = dx_mode == MRCNN_GRAD_WRITE ? 0.0f : 1.0f;
        void *dz = cu_scratch(s, CU_SCRATCH_GEMM, (size_t)(m < chunk ? m : chunk) * 4 * k * es);
        for (int64_t m0 = 0; m0 < m; m0 += chunk) {
            int64_t rows = m - m0 < chunk ? m - m0 : chunk;
            int64_t total = rows * 4 * k;
            k_deconv_gather<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, s->stream>>>(g, dt, m0, rows, h, wd, k, dz);
            MRCNN_CHECK_LAUNCH("deconv2x2 gather");
            const int ir = as_int(rows, "deconv rows");
            if (dx)
                lin_bwd_data(s, ir, c, 4 * k, dz, wp, dt, (char *)dx->data + m0 * c * cu_dtype_size(dx->dtype),
                             dx->dtype, beta);
            if (dw) lin_bwd_filter(s, ir, c, 4 * k, (const char *)xp + m0 * c * es, dz, dt, dw->data, dw->dtype);
        }
    }
    if (db && act != MRCNN_ACT_RELU) cu_bias_grad(s, dy->data, dt, m * 4, k, db->data, db->dtype);
}

void cu_fill_gemm_ops(mrcnn_backend *be) {
    be->nn.linear_forward = cu_linear_forward;
    be->nn.linear_backward = cu_linear_backward;
    be->nn.deconv2x2_forward = cu_deconv2x2_forward;
    be->nn.deconv2x2_backward = cu_deconv2x2_backward;
}
