/* Elementwise and pooling kernels: casts, accumulation, channel copies, bias + ReLU,
 * bias gradient, relu, add, max-pool and the FPN upsample + add. Backward kernels gather (each
 * output element summed by one thread in a fixed order), so results are
 * deterministic and need no atomics.
 *
 * The streaming kernels (accumulate, bias + act, relu, add) are memory-bound: when
 * every operand has one dtype and 16-byte aligned data they move 16 bytes per load and
 * store (8 fp16/bf16 or 4 fp32 elements), else they run the scalar loop. Same math,
 * same rounding: only the access width differs. */
#include <math.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"

#define CU_THREADS 256

/* ---- 16-byte vectors ----------------------------------------------------------------- */

#define CU_VEC_MAX 8 // elements per 16-byte vector (fp16/bf16); fp32 has 4

static inline int cu_vec_elems(mrcnn_dtype dt) { return dt == MRCNN_DTYPE_F32 ? 4 : 8; }

static inline int cu_aligned16(const void *p) { return p == NULL || ((uintptr_t)p & 15) == 0; }

/* Vector v (16 bytes) of p as floats; returns the element count (4 or 8). bf16 widens
 * exactly by a shift; fp16 through __half2float. */
static __device__ __forceinline__ int cu_vload(const void *p, int64_t v, int dt, float *f) {
    const uint4 u = ((const uint4 *)p)[v];
    if (dt == MRCNN_DTYPE_F32) {
        f[0] = __uint_as_float(u.x);
        f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z);
        f[3] = __uint_as_float(u.w);
        return 4;
    }
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const unsigned short lo = (unsigned short)(w[k] & 0xffffu), hi = (unsigned short)(w[k] >> 16);
        if (dt == MRCNN_DTYPE_F16) {
            f[2 * k] = __half2float(__ushort_as_half(lo));
            f[2 * k + 1] = __half2float(__ushort_as_half(hi));
        } else {
            f[2 * k] = __uint_as_float((unsigned)lo << 16);
            f[2 * k + 1] = __uint_as_float((unsigned)hi << 16);
        }
    }
    return 8;
}

/* Round to nearest even, as cu_store does. */
static __device__ __forceinline__ void cu_vstore(void *p, int64_t v, int dt, const float *f) {
    uint4 u;
    if (dt == MRCNN_DTYPE_F32) {
        u.x = __float_as_uint(f[0]);
        u.y = __float_as_uint(f[1]);
        u.z = __float_as_uint(f[2]);
        u.w = __float_as_uint(f[3]);
    } else {
        unsigned w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            unsigned short lo, hi;
            if (dt == MRCNN_DTYPE_F16) {
                lo = __half_as_ushort(__float2half_rn(f[2 * k]));
                hi = __half_as_ushort(__float2half_rn(f[2 * k + 1]));
            } else {
                lo = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * k]));
                hi = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * k + 1]));
            }
            w[k] = (unsigned)lo | ((unsigned)hi << 16);
        }
        u.x = w[0];
        u.y = w[1];
        u.z = w[2];
        u.w = w[3];
    }
    ((uint4 *)p)[v] = u;
}

/* The elements past the last whole vector, by the first thread of the grid. */
#define CU_VEC_TAIL(i, n, per) \
    if (blockIdx.x == 0 && threadIdx.x == 0) \
        for (int64_t i = ((n) / (per)) * (per); i < (n); i++)

/* Elementwise ops of the vector kernels: y = f(x, z) per element. */
enum { EW_ACC = 0, EW_RELU, EW_ADD, EW_ADD_RELU, EW_RELU_BWD };

static __device__ __forceinline__ float ew_apply(int op, float y, float x, float z) {
    switch (op) {
    case EW_ACC: return y + x;                        // y += x
    case EW_RELU: return x > 0.0f ? x : 0.0f;         // y = relu(x)
    case EW_ADD: return x + z;                        // y = x + z
    case EW_ADD_RELU: { float v = x + z; return v > 0.0f ? v : 0.0f; }
    default: return z > 0.0f ? x : 0.0f;              // relu backward: dx = dy where y > 0, else 0 (z = y)
    }
}

/* y = op(y, x, z) over n elements of one dtype dt, all three 16-byte aligned (z may
 * be NULL for ops that do not read it; y is read only for EW_ACC). */
__global__ void k_ew_vec(int op, const void *x, const void *z, void *y, int dt, int64_t n) {
    const int per = dt == MRCNN_DTYPE_F32 ? 4 : 8;
    const int64_t nv = n / per;
    const int read_y = op == EW_ACC;
    CU_GRID_STRIDE(v, nv) {
        float fx[CU_VEC_MAX], fz[CU_VEC_MAX], fy[CU_VEC_MAX];
        cu_vload(x, v, dt, fx);
        if (z) cu_vload(z, v, dt, fz);
        if (read_y) cu_vload(y, v, dt, fy);
#pragma unroll
        for (int k = 0; k < CU_VEC_MAX; k++)
            if (k < per) fy[k] = ew_apply(op, read_y ? fy[k] : 0.0f, fx[k], z ? fz[k] : 0.0f);
        cu_vstore(y, v, dt, fy);
    }
    CU_VEC_TAIL(i, n, per) {
        float yv = read_y ? cu_load(y, i, dt) : 0.0f;
        cu_store(y, i, dt, ew_apply(op, yv, cu_load(x, i, dt), z ? cu_load(z, i, dt) : 0.0f));
    }
}

/* 1 and launched when the vector kernel applies (one dtype, aligned, enough work). */
static int ew_vec(cu_state *s, int op, const void *x, mrcnn_dtype xt, const void *z, mrcnn_dtype zt, void *y,
                  mrcnn_dtype yt, int64_t n, const char *what) {
    if (xt != yt || (z && zt != yt) || !cu_aligned16(x) || !cu_aligned16(z) || !cu_aligned16(y) || n < 64) return 0;
    const int per = cu_vec_elems(yt);
    k_ew_vec<<<cu_blocks(n / per > 0 ? n / per : 1, CU_THREADS), CU_THREADS, 0, s->stream>>>(op, x, z, y, yt, n);
    MRCNN_CHECK_LAUNCH(what);
    return 1;
}

/* ---- casts and accumulation -------------------------------------------------------- */

__global__ void k_cast(const void *x, int xt, void *y, int yt, int64_t n) {
    CU_GRID_STRIDE(i, n) cu_store(y, i, yt, cu_load(x, i, xt));
}

__global__ void k_accumulate(const void *x, int xt, void *y, int yt, int64_t n) {
    CU_GRID_STRIDE(i, n) cu_store(y, i, yt, cu_load(y, i, yt) + cu_load(x, i, xt));
}

void cu_cast(cu_state *s, const void *x, mrcnn_dtype xt, void *y, mrcnn_dtype yt, int64_t n) {
    if (n <= 0) return;
    k_cast<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(x, xt, y, yt, n);
    MRCNN_CHECK_LAUNCH("cast");
}

void cu_accumulate(cu_state *s, const void *x, mrcnn_dtype xt, void *y, mrcnn_dtype yt, int64_t n) {
    if (n <= 0) return;
    if (ew_vec(s, EW_ACC, x, xt, NULL, yt, y, yt, n, "accumulate (vector)")) return;
    k_accumulate<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(x, xt, y, yt, n);
    MRCNN_CHECK_LAUNCH("accumulate");
}

/* ---- channel copy ----------------------------------------------------------------------- */

/* One thread per element of y (M, D): a load and a store, no arithmetic on the value,
 * so -0 and non-finite values pass as they are. */
__global__ void k_channel_copy(const void *x, int xt, int64_t c, void *y, int yt, int64_t m, int64_t d) {
    CU_GRID_STRIDE(i, m * d) {
        const int64_t r = i / d, j = i - r * d;
        cu_store(y, i, yt, j < c ? cu_load(x, r * c + j, xt) : 0.0f);
    }
}

/* nn.channel_copy: shapes, float dtypes and devices are checked in front (backend_validate.c). */
static void cu_channel_copy(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    const int64_t m = y->shape[0], d = y->shape[1];
    if (m * d == 0) return;
    k_channel_copy<<<cu_blocks(m * d, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(
        x->data, x->dtype, x->shape[1], y->data, y->dtype, m, d);
    MRCNN_CHECK_LAUNCH("channel_copy");
}

/* ---- bias + activation, bias gradient --------------------------------------------------- */

__global__ void k_bias_act(void *y, int yt, int64_t m, int k, const void *b, int bt, int relu) {
    const int64_t n = m * k;
    CU_GRID_STRIDE(i, n) {
        float v = cu_load(y, i, yt);
        if (b) v += cu_load(b, i % k, bt);
        if (relu) v = v > 0.0f ? v : 0.0f;
        cu_store(y, i, yt, v);
    }
}

/* Vector form: k is a multiple of the vector width, so a vector lies in one row and
 * its bias elements are consecutive. */
__global__ void k_bias_act_vec(void *y, int yt, int64_t m, int k, const void *b, int bt, int relu) {
    const int per = yt == MRCNN_DTYPE_F32 ? 4 : 8;
    const int64_t nv = m * k / per;
    CU_GRID_STRIDE(v, nv) {
        float f[CU_VEC_MAX];
        cu_vload(y, v, yt, f);
        const int c0 = (int)((v * per) % k);
#pragma unroll
        for (int j = 0; j < CU_VEC_MAX; j++) {
            if (j >= per) break;
            float t = f[j];
            if (b) t += cu_load(b, c0 + j, bt);
            if (relu) t = t > 0.0f ? t : 0.0f;
            f[j] = t;
        }
        cu_vstore(y, v, yt, f);
    }
}

void cu_bias_act(cu_state *s, void *y, mrcnn_dtype yt, int64_t m, int k, const void *b, mrcnn_dtype bt,
                 int relu) {
    if (m * k <= 0 || (!b && !relu)) return;
    if (cu_aligned16(y) && k % cu_vec_elems(yt) == 0) {
        const int64_t nv = m * k / cu_vec_elems(yt);
        k_bias_act_vec<<<cu_blocks(nv, CU_THREADS), CU_THREADS, 0, s->stream>>>(y, yt, m, k, b, bt, relu);
        MRCNN_CHECK_LAUNCH("bias_act (vector)");
        return;
    }
    k_bias_act<<<cu_blocks(m * k, CU_THREADS), CU_THREADS, 0, s->stream>>>(y, yt, m, k, b, bt, relu);
    MRCNN_CHECK_LAUNCH("bias_act");
}

/* Pass 1: block (bx, by) sums column tile bx over its row chunk by into
 * part[by * k + col], in a fixed order. Block shape (32 columns, 8 row lanes). With y
 * (act RELU, cu_relu_grad_bias) it sums g = (y > 0 ? dy : 0) instead, and stores g (dy's
 * dtype) for the ops that read the masked gradient next: the same blocks and order, so
 * db is the same as relu_backward then cu_bias_grad. */
#define BG_COLS 32
#define BG_LANES 8
#define BG_MAX_CHUNKS 256
__global__ void k_bias_grad_partial(const void *y, int yt, const void *dy, int dyt, void *g, int64_t m, int k,
                                    int64_t rows_per_chunk, double *part) {
    __shared__ double acc[BG_LANES][BG_COLS];
    const int col = blockIdx.x * BG_COLS + threadIdx.x;
    const int64_t r0 = (int64_t)blockIdx.y * rows_per_chunk;
    int64_t r1 = r0 + rows_per_chunk;
    if (r1 > m) r1 = m;
    double a = 0;
    if (col < k)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += BG_LANES) {
            const int64_t i = r * k + col;
            float v = cu_load(dy, i, dyt);
            if (y) {
                v = cu_load(y, i, yt) > 0.0f ? v : 0.0f;
                cu_store(g, i, dyt, v); // dy's value or 0, exact in dy's dtype: what cu_bias_grad would read back
            }
            a += v;
        }
    acc[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y == 0 && col < k) {
        double t = 0;
        for (int l = 0; l < BG_LANES; l++) t += acc[l][threadIdx.x];
        part[(int64_t)blockIdx.y * k + col] = t;
    }
}

__global__ void k_bias_grad_final(const double *part, int chunks, int k, void *db, int dbt) {
    CU_GRID_STRIDE(col, (int64_t)k) {
        double t = 0;
        for (int c = 0; c < chunks; c++) t += part[(int64_t)c * k + col];
        cu_store(db, col, dbt, (float)(cu_load(db, col, dbt) + t));
    }
}

/* db += the column sums of dy (m, k), or with y of g = (y > 0 ? dy : 0), stored to g. */
static void bias_grad_run(cu_state *s, const void *y, mrcnn_dtype yt, const void *dy, mrcnn_dtype dyt, void *g,
                          int64_t m, int k, void *db, mrcnn_dtype dbt) {
    int64_t chunks = (m + 1023) / 1024; // about 1024 rows per block
    if (chunks > BG_MAX_CHUNKS) chunks = BG_MAX_CHUNKS;
    int64_t rows_per_chunk = (m + chunks - 1) / chunks;
    chunks = (m + rows_per_chunk - 1) / rows_per_chunk;
    double *part = (double *)cu_scratch(s, CU_SCRATCH_REDUCE, (size_t)chunks * k * sizeof(double));
    dim3 grid((unsigned)((k + BG_COLS - 1) / BG_COLS), (unsigned)chunks);
    dim3 block(BG_COLS, BG_LANES);
    k_bias_grad_partial<<<grid, block, 0, s->stream>>>(y, yt, dy, dyt, g, m, k, rows_per_chunk, part);
    MRCNN_CHECK_LAUNCH("bias_grad_partial");
    k_bias_grad_final<<<cu_blocks(k, CU_THREADS), CU_THREADS, 0, s->stream>>>(part, (int)chunks, k, db, dbt);
    MRCNN_CHECK_LAUNCH("bias_grad_final");
}

void cu_bias_grad(cu_state *s, const void *dy, mrcnn_dtype dyt, int64_t m, int k, void *db, mrcnn_dtype dbt) {
    if (m <= 0 || k <= 0) return;
    bias_grad_run(s, NULL, dyt, dy, dyt, NULL, m, k, db, dbt);
}

/* nn.bias_grad: dtype, shapes and device are checked in front (backend_validate.c). */
static void cu_bias_grad_op(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *db) {
    const int64_t k = db->shape[0];
    cu_bias_grad(cu_st(be), dy->data, dy->dtype, k ? cu_numel(dy) / k : 0, (int)k, db->data, db->dtype);
}

/* ---- relu, add -------------------------------------------------------------------------- */

__global__ void k_relu_fwd(const void *x, int xt, void *y, int yt, int64_t n) {
    CU_GRID_STRIDE(i, n) {
        float v = cu_load(x, i, xt);
        cu_store(y, i, yt, v > 0.0f ? v : 0.0f);
    }
}

__global__ void k_relu_bwd(const void *y, int yt, const void *dy, int dyt, void *dx, int dxt, int64_t n) {
    CU_GRID_STRIDE(i, n) {
        cu_store(dx, i, dxt, cu_load(y, i, yt) > 0.0f ? cu_load(dy, i, dyt) : 0.0f);
    }
}

__global__ void k_add_fwd(const void *a, int at, const void *b, int bt, void *y, int yt, int64_t n, int relu) {
    CU_GRID_STRIDE(i, n) {
        float v = cu_load(a, i, at) + cu_load(b, i, bt);
        cu_store(y, i, yt, relu && !(v > 0.0f) ? 0.0f : v);
    }
}

void cu_add_act(cu_state *s, const void *a, mrcnn_dtype at, const void *b, mrcnn_dtype bt, void *y, mrcnn_dtype yt,
                int64_t n, int relu) {
    if (n <= 0) return;
    if (ew_vec(s, relu ? EW_ADD_RELU : EW_ADD, a, at, b, bt, y, yt, n, relu ? "add_relu (vector)" : "add (vector)"))
        return;
    k_add_fwd<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(a, at, b, bt, y, yt, n, relu);
    MRCNN_CHECK_LAUNCH(relu ? "add_relu" : "add");
}

/* The nn entries below: shapes, float dtypes and devices are checked in front
 * (backend_validate.c); the kernels take each tensor's dtype on its own. */
static void cu_relu_forward(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    int64_t n = cu_numel(x);
    if (n == 0) return;
    if (ew_vec(cu_st(be), EW_RELU, x->data, x->dtype, NULL, y->dtype, y->data, y->dtype, n, "relu_forward (vector)"))
        return;
    k_relu_fwd<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(x->data, x->dtype, y->data, y->dtype, n);
    MRCNN_CHECK_LAUNCH("relu_forward");
}

static void relu_bwd(cu_state *s, const void *y, mrcnn_dtype yt, const void *dy, mrcnn_dtype dyt, void *dx,
                     mrcnn_dtype dxt, int64_t n) {
    if (n == 0) return;
    if (yt == dxt && ew_vec(s, EW_RELU_BWD, dy, dyt, y, yt, dx, dxt, n, "relu_backward (vector)")) return;
    k_relu_bwd<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(y, yt, dy, dyt, dx, dxt, n);
    MRCNN_CHECK_LAUNCH("relu_backward");
}

static void cu_relu_backward(const mrcnn_backend *be, const mrcnn_tensor *y, const mrcnn_tensor *dy,
                             mrcnn_tensor *dx) {
    relu_bwd(cu_st(be), y->data, y->dtype, dy->data, dy->dtype, dx->data, dx->dtype, cu_numel(y));
}

const void *cu_relu_grad_bias(cu_state *s, const void *y, mrcnn_dtype yt, const void *dy, mrcnn_dtype dyt, int64_t m,
                              int k, void *db, mrcnn_dtype dbt) {
    MRCNN_CHECK(y != NULL || m * k == 0, "backward with act RELU: NULL layer output y");
    if (m <= 0 || k <= 0) return dy;
    void *g = cu_scratch(s, CU_SCRATCH_DMASK, (size_t)(m * k) * cu_dtype_size(dyt));
    if (!db) { // the mask alone: relu_backward's (vector) kernel
        relu_bwd(s, y, yt, dy, dyt, g, dyt, m * k);
        return g;
    }
    bias_grad_run(s, y, yt, dy, dyt, g, m, k, db, dbt);
    return g;
}

/* act = RELU: the bottleneck's residual join, one pass (16-byte vectors when aligned). */
static void cu_add_forward(const mrcnn_backend *be, const mrcnn_tensor *a, const mrcnn_tensor *b, mrcnn_activation act,
                           mrcnn_tensor *y) {
    int64_t n = cu_numel(a);
    cu_add_act(cu_st(be), a->data, a->dtype, b->data, b->dtype, y->data, y->dtype, n, act == MRCNN_ACT_RELU);
}

static void cu_add_backward(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *da, mrcnn_tensor *db) {
    int64_t n = cu_numel(dy);
    if (da) {
        cu_accumulate(cu_st(be), dy->data, dy->dtype, da->data, da->dtype, n);
    }
    if (db) {
        cu_accumulate(cu_st(be), dy->data, dy->dtype, db->data, db->dtype, n);
    }
}

/* ---- max-pool ---------------------------------------------------------------------------- */

typedef struct {
    int n, h, w, c, k, stride, pad, p, q;
} pool_geom;

/* PyTorch's rule: a larger value or a NaN takes the window. */
static __device__ __forceinline__ int pool_beats(float v, float best) { return v > best || v != v; }

__global__ void k_maxpool_fwd(pool_geom g, const void *x, int xt, void *y, int yt) {
    const int64_t total = (int64_t)g.n * g.p * g.q * g.c;
    CU_GRID_STRIDE(i, total) {
        int c = (int)(i % g.c);
        int64_t t = i / g.c;
        int q = (int)(t % g.q);
        t /= g.q;
        int p = (int)(t % g.p);
        int n = (int)(t / g.p);
        float best = -INFINITY;
        for (int r = 0; r < g.k; r++) {
            int h = p * g.stride - g.pad + r;
            if (h < 0 || h >= g.h) continue;
            for (int s = 0; s < g.k; s++) {
                int w = q * g.stride - g.pad + s;
                if (w < 0 || w >= g.w) continue;
                float v = cu_load(x, (((int64_t)n * g.h + h) * g.w + w) * g.c + c, xt);
                if (pool_beats(v, best)) best = v;
            }
        }
        cu_store(y, i, yt, best);
    }
}

/* One thread per input element: it sums dy over the windows whose first maximum
 * (scan order r, s; the first NaN stays) is this element. */
__global__ void k_maxpool_bwd(pool_geom g, const void *x, int xt, const void *dy, int dyt, void *dx, int dxt) {
    const int64_t total = (int64_t)g.n * g.h * g.w * g.c;
    CU_GRID_STRIDE(i, total) {
        int c = (int)(i % g.c);
        int64_t t = i / g.c;
        int wi = (int)(t % g.w);
        t /= g.w;
        int hi = (int)(t % g.h);
        int n = (int)(t / g.h);
        /* Windows p with p*stride - pad <= hi <= p*stride - pad + k - 1. */
        int lo_h = hi + g.pad - g.k + 1, lo_w = wi + g.pad - g.k + 1;
        int p0 = lo_h <= 0 ? 0 : (lo_h + g.stride - 1) / g.stride;
        int q0 = lo_w <= 0 ? 0 : (lo_w + g.stride - 1) / g.stride;
        int p1 = (hi + g.pad) / g.stride, q1 = (wi + g.pad) / g.stride;
        if (p1 > g.p - 1) p1 = g.p - 1;
        if (q1 > g.q - 1) q1 = g.q - 1;
        const int64_t img = (int64_t)n * g.h * g.w * g.c;
        float acc = 0.0f;
        int hit = 0;
        for (int p = p0; p <= p1; p++) {
            for (int q = q0; q <= q1; q++) {
                float best = -INFINITY;
                int arg_h = -1, arg_w = -1;
                for (int r = 0; r < g.k; r++) {
                    int h = p * g.stride - g.pad + r;
                    if (h < 0 || h >= g.h) continue;
                    for (int s = 0; s < g.k; s++) {
                        int w = q * g.stride - g.pad + s;
                        if (w < 0 || w >= g.w) continue;
                        float v = cu_load(x, img + ((int64_t)h * g.w + w) * g.c + c, xt);
                        if (arg_h < 0 || (best == best && pool_beats(v, best))) {
                            best = v;
                            arg_h = h;
                            arg_w = w;
                        }
                    }
                }
                if (arg_h == hi && arg_w == wi) {
                    acc += cu_load(dy, (((int64_t)n * g.p + p) * g.q + q) * g.c + c, dyt);
                    hit = 1;
                }
            }
        }
        if (hit) cu_store(dx, i, dxt, cu_load(dx, i, dxt) + acc);
    }
}

/* The shared checks (backend_validate.c) ask only for kernel, stride > 0 and pad >= 0,
 * and a negative extent would pass there as "any": the kernels also need every window
 * to hold an input pixel. */
static pool_geom pool_geom_make(const mrcnn_pool2d_desc *d, const char *op) {
    MRCNN_CHECK(d->n > 0 && d->h > 0 && d->w > 0 && d->c > 0, "%s: input (N, H, W, C) = (%d, %d, %d, %d) must be positive",
                op, d->n, d->h, d->w, d->c);
    MRCNN_CHECK(d->kernel > 0 && d->stride > 0 && d->pad >= 0 && 2 * d->pad <= d->kernel,
                "%s: kernel %d, stride %d, pad %d invalid", op, d->kernel, d->stride, d->pad);
    MRCNN_CHECK(d->h + 2 * d->pad >= d->kernel && d->w + 2 * d->pad >= d->kernel,
                "%s: padded input smaller than the window", op);
    pool_geom g = {d->n, d->h, d->w, d->c, d->kernel, d->stride, d->pad, 0, 0};
    g.p = (d->h + 2 * d->pad - d->kernel) / d->stride + 1;
    g.q = (d->w + 2 * d->pad - d->kernel) / d->stride + 1;
    return g;
}

static void cu_maxpool2d_forward(const mrcnn_backend *be, const mrcnn_pool2d_desc *d, const mrcnn_tensor *x,
                                 mrcnn_tensor *y) {
    pool_geom g = pool_geom_make(d, "maxpool2d_forward");
    int64_t n = (int64_t)g.n * g.p * g.q * g.c;
    k_maxpool_fwd<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(g, x->data, x->dtype, y->data, y->dtype);
    MRCNN_CHECK_LAUNCH("maxpool2d_forward");
}

static void cu_maxpool2d_backward(const mrcnn_backend *be, const mrcnn_pool2d_desc *d, const mrcnn_tensor *x,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dx) {
    pool_geom g = pool_geom_make(d, "maxpool2d_backward");
    int64_t n = (int64_t)g.n * g.h * g.w * g.c;
    k_maxpool_bwd<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(g, x->data, x->dtype, dy->data,
                                                                                     dy->dtype, dx->data, dx->dtype);
    MRCNN_CHECK_LAUNCH("maxpool2d_backward");
}

/* ---- upsample (nearest) + add ---------------------------------------------------------------- */

/* top (N, h, w, C), lateral and y (N, H, W, C): source index floor(dst * in / out). */
__global__ void k_upsample_add_fwd(int n, int h, int w, int H, int W, int c, const void *top, int tt,
                                   const void *lat, int lt, void *y, int yt) {
    const int64_t total = (int64_t)n * H * W * c;
    CU_GRID_STRIDE(i, total) {
        int ch = (int)(i % c);
        int64_t t = i / c;
        int j = (int)(t % W);
        t /= W;
        int r = (int)(t % H);
        int ni = (int)(t / H);
        int sr = (int)((int64_t)r * h / H), sc = (int)((int64_t)j * w / W);
        float v = cu_load(lat, i, lt) + cu_load(top, (((int64_t)ni * h + sr) * w + sc) * c + ch, tt);
        cu_store(y, i, yt, v);
    }
}

/* One thread per top element: destination rows [ceil(a H / h), ceil((a+1) H / h)). */
__global__ void k_upsample_add_bwd_top(int n, int h, int w, int H, int W, int c, const void *dy, int dyt,
                                       void *dtop, int tt) {
    const int64_t total = (int64_t)n * h * w * c;
    CU_GRID_STRIDE(i, total) {
        int ch = (int)(i % c);
        int64_t t = i / c;
        int b = (int)(t % w);
        t /= w;
        int a = (int)(t % h);
        int ni = (int)(t / h);
        int64_t r0 = ((int64_t)a * H + h - 1) / h, r1 = ((int64_t)(a + 1) * H + h - 1) / h;
        int64_t c0 = ((int64_t)b * W + w - 1) / w, c1 = ((int64_t)(b + 1) * W + w - 1) / w;
        if (r1 > H) r1 = H;
        if (c1 > W) c1 = W;
        float acc = 0.0f;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t j = c0; j < c1; j++) acc += cu_load(dy, (((int64_t)ni * H + r) * W + j) * c + ch, dyt);
        cu_store(dtop, i, tt, cu_load(dtop, i, tt) + acc);
    }
}

/* top (N, h, w, C) and big (N, H, W, C) were checked in front (backend_validate.c); an
 * empty top beside a non-empty big passes there, and the forward would read past it. */
static void upsample_shapes(const mrcnn_tensor *top, const mrcnn_tensor *big, const char *op, int *n, int *h, int *w,
                            int *H, int *W, int *c) {
    *n = (int)top->shape[0];
    *h = (int)top->shape[1];
    *w = (int)top->shape[2];
    *c = (int)top->shape[3];
    *H = (int)big->shape[1];
    *W = (int)big->shape[2];
    MRCNN_CHECK(*h > 0 && *w > 0 && *H > 0 && *W > 0, "%s: empty spatial extent", op);
}

static void cu_upsample_add_forward(const mrcnn_backend *be, const mrcnn_tensor *top, const mrcnn_tensor *lateral,
                                    mrcnn_tensor *y) {
    int n, h, w, H, W, c;
    upsample_shapes(top, lateral, "upsample_add_forward", &n, &h, &w, &H, &W, &c);
    int64_t total = (int64_t)n * H * W * c;
    k_upsample_add_fwd<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(
        n, h, w, H, W, c, top->data, top->dtype, lateral->data, lateral->dtype, y->data, y->dtype);
    MRCNN_CHECK_LAUNCH("upsample_add_forward");
}

static void cu_upsample_add_backward(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *dtop,
                                     mrcnn_tensor *dlateral) {
    int64_t total = cu_numel(dy);
    if (dlateral) {
        cu_accumulate(cu_st(be), dy->data, dy->dtype, dlateral->data, dlateral->dtype, total);
    }
    if (dtop) {
        int n, h, w, H, W, c;
        upsample_shapes(dtop, dy, "upsample_add_backward", &n, &h, &w, &H, &W, &c);
        int64_t nt = (int64_t)n * h * w * c;
        k_upsample_add_bwd_top<<<cu_blocks(nt, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(
            n, h, w, H, W, c, dy->data, dy->dtype, dtop->data, dtop->dtype);
        MRCNN_CHECK_LAUNCH("upsample_add_backward");
    }
}

void cu_fill_elementwise_ops(mrcnn_backend *be) {
    be->nn.relu_forward = cu_relu_forward;
    be->nn.relu_backward = cu_relu_backward;
    be->nn.add_forward = cu_add_forward;
    be->nn.add_backward = cu_add_backward;
    be->nn.maxpool2d_forward = cu_maxpool2d_forward;
    be->nn.maxpool2d_backward = cu_maxpool2d_backward;
    be->nn.upsample_add_forward = cu_upsample_add_forward;
    be->nn.upsample_add_backward = cu_upsample_add_backward;
    be->nn.bias_grad = cu_bias_grad_op;
    be->nn.channel_copy = cu_channel_copy;
}
