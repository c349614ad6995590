/* Convolutions through cuDNN: NHWC activations, KRSC filters (cuDNN's NHWC filter
 * format), fp32 math for every storage dtype. Descriptors and algorithms are made
 * once per shape and kept in a small hash map; the workspace is bounded.
 * conv + bias + ReLU uses cudnnConvolutionBiasActivationForward only where it is
 * faster: that call takes IMPLICIT_PRECOMP_GEMM alone, which often loses to the
 * best plain algorithm followed by the bias + ReLU kernel, so the first call of a
 * shape times both (MRCNN_CONV_FUSED=0|1 pins the choice). A fused call that cuDNN
 * refuses, at any call, moves the shape to the plain path with one warning.
 *
 * Math types: the descriptor starts with the precision's math type (fp32 without TF32:
 * CUDNN_FMA_MATH, which keeps the tensor cores off; otherwise CUDNN_TENSOR_OP_MATH),
 * the algorithm searches run with it, and each direction's chosen result carries the
 * math type cuDNN timed it with (cuDNN pairs an algorithm with a math type). That math
 * type is set on the descriptor before every call of that direction: one descriptor
 * serves forward, data gradient and filter gradient, whose choices may differ. fp32
 * without TF32 accepts only results whose math type is CUDNN_FMA_MATH: a
 * CUDNN_DEFAULT_MATH result may run TF32 on Ampere and later. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_algo_pick.h"
#include "cuda_internal.h"
#include "mrcnn/log.h"

typedef struct conv_key {
    int n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw, dtype, tf32;
} conv_key;

struct cu_conv_algo {
    int used;
    conv_key key;
    int p, q; // output extent
    cudnnTensorDescriptor_t x_desc, y_desc, b_desc;
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    cudnnActivationDescriptor_t act_desc;
    int have_fwd, have_bwd_data, have_bwd_filter;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    /* base_math: the precision's math type (searches, the fused call); the others: each
     * direction's chosen result's; cur_math: what the descriptor holds now. */
    cudnnMathType_t base_math, fwd_math, bwd_data_math, bwd_filter_math, cur_math;
    size_t fwd_ws, bwd_data_ws, bwd_filter_ws, fused_ws;
    int fused; // -1 undecided, 0 plain conv then bias + ReLU kernel, 1 fused call
};

static cudnnDataType_t cudnn_dtype(int dt) {
    if (dt == MRCNN_DTYPE_F16) return CUDNN_DATA_HALF;
    if (dt == MRCNN_DTYPE_BF16) return CUDNN_DATA_BFLOAT16;
    return CUDNN_DATA_FLOAT;
}

static uint64_t key_hash(const conv_key *k) {
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static void entry_init(cu_state *s, cu_conv_algo *e, const conv_key *k) {
    memset(e, 0, sizeof *e);
    e->used = 1;
    e->key = *k;
    e->fused = -1;
    cudnnDataType_t dt = cudnn_dtype(k->dtype);
    MRCNN_CHECK_CUDNN(cudnnCreateTensorDescriptor(&e->x_desc));
    MRCNN_CHECK_CUDNN(cudnnCreateTensorDescriptor(&e->y_desc));
    MRCNN_CHECK_CUDNN(cudnnCreateTensorDescriptor(&e->b_desc));
    MRCNN_CHECK_CUDNN(cudnnCreateFilterDescriptor(&e->w_desc));
    MRCNN_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&e->conv_desc));
    MRCNN_CHECK_CUDNN(cudnnCreateActivationDescriptor(&e->act_desc));
    MRCNN_CHECK_CUDNN(cudnnSetTensor4dDescriptor(e->x_desc, CUDNN_TENSOR_NHWC, dt, k->n, k->c, k->h, k->w));
    MRCNN_CHECK_CUDNN(cudnnSetFilter4dDescriptor(e->w_desc, dt, CUDNN_TENSOR_NHWC, k->k, k->c, k->r, k->s));
    MRCNN_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(e->conv_desc, k->ph, k->pw, k->sh, k->sw, k->dh, k->dw,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    /* FMA_MATH keeps fp32 convs off TF32; half types want the tensor cores. */
    e->base_math = (k->dtype == MRCNN_DTYPE_F32 && !k->tf32) ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    MRCNN_CHECK_CUDNN(cudnnSetConvolutionMathType(e->conv_desc, e->base_math));
    e->cur_math = e->base_math;
    int on, oc, oh, ow;
    MRCNN_CHECK_CUDNN(cudnnGetConvolution2dForwardOutputDim(e->conv_desc, e->x_desc, e->w_desc, &on, &oc, &oh, &ow));
    /* y and dy were checked in front (backend_validate.c) against mrcnn_conv2d_out_h/w's
     * formula; the kernels write and read cuDNN's dims, so the two must agree. */
    const int p = (k->h + 2 * k->ph - k->dh * (k->r - 1) - 1) / k->sh + 1;
    const int q = (k->w + 2 * k->pw - k->dw * (k->s - 1) - 1) / k->sw + 1;
    MRCNN_CHECK(on == k->n && oc == k->k && oh == p && ow == q,
                "conv2d: cuDNN output dims (%d, %d, %d, %d) disagree with (N, P, Q, K) = (%d, %d, %d, %d)", on, oh, ow,
                oc, k->n, p, q, k->k);
    e->p = oh;
    e->q = ow;
    MRCNN_CHECK_CUDNN(cudnnSetTensor4dDescriptor(e->y_desc, CUDNN_TENSOR_NHWC, dt, k->n, k->k, oh, ow));
    MRCNN_CHECK_CUDNN(cudnnSetTensor4dDescriptor(e->b_desc, CUDNN_TENSOR_NHWC, dt, 1, k->k, 1, 1));
    MRCNN_CHECK_CUDNN(cudnnSetActivationDescriptor(e->act_desc, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    (void)s;
}

static void entry_free(cu_conv_algo *e) {
    if (!e->used) return;
    cudnnDestroyTensorDescriptor(e->x_desc);
    cudnnDestroyTensorDescriptor(e->y_desc);
    cudnnDestroyTensorDescriptor(e->b_desc);
    cudnnDestroyFilterDescriptor(e->w_desc);
    cudnnDestroyConvolutionDescriptor(e->conv_desc);
    cudnnDestroyActivationDescriptor(e->act_desc);
    e->used = 0;
}

void cu_conv_cache_free(cu_state *s) {
    for (int i = 0; i < s->cap_algos; i++) entry_free(&s->algos[i]);
    free(s->algos);
    s->algos = NULL;
    s->cap_algos = s->n_algos = 0;
}

static cu_conv_algo *probe(cu_conv_algo *tab, int cap, const conv_key *k) {
    uint64_t i = key_hash(k) & (uint64_t)(cap - 1);
    while (tab[i].used && memcmp(&tab[i].key, k, sizeof *k) != 0) i = (i + 1) & (uint64_t)(cap - 1);
    return &tab[i];
}

static cu_conv_algo *conv_lookup(cu_state *s, const conv_key *k) {
    if (s->cap_algos == 0 || 2 * (s->n_algos + 1) > s->cap_algos) {
        /* Entries move on growth; nobody holds pointers across calls. */
        int cap = s->cap_algos ? 2 * s->cap_algos : 64;
        cu_conv_algo *tab = (cu_conv_algo *)MRCNN_CALLOC((size_t)cap, sizeof *tab, "conv algorithm cache");
        for (int i = 0; i < s->cap_algos; i++)
            if (s->algos[i].used) *probe(tab, cap, &s->algos[i].key) = s->algos[i];
        free(s->algos);
        s->algos = tab;
        s->cap_algos = cap;
    }
    cu_conv_algo *e = probe(s->algos, s->cap_algos, k);
    if (!e->used) {
        entry_init(s, e, k);
        s->n_algos++;
    }
    return e;
}

/* fp32 without TF32 is the reference precision: it accepts CUDNN_FMA_MATH results only
 * (not TENSOR_OP, TENSOR_OP_ALLOW_CONVERSION or DEFAULT, any of which may run on TF32
 * tensor cores) and prefers algorithms without the FFT and Winograd transforms, whose
 * rounding errors exceed plain fp32 summation's (cu_algo_pick: a transform when cuDNN
 * offers nothing else). Every other mode takes the fastest algorithm. */
static int fp32_strict(const conv_key *k) { return k->dtype == MRCNN_DTYPE_F32 && !k->tf32; }

static const char *math_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op-conversion";
    case CUDNN_FMA_MATH: return "fma";
    default: return "?";
    }
}

/* The descriptor's math type, set only when it changes (a host-side call either way). */
static void set_math(cu_conv_algo *e, cudnnMathType_t m) {
    if (e->cur_math == m) return;
    MRCNN_CHECK_CUDNN(cudnnSetConvolutionMathType(e->conv_desc, m));
    e->cur_math = m;
}

/* Nothing cuDNN offered was acceptable: fails with what it offered (algorithm, math
 * type, status, workspace), which says whether the math-type or the workspace rule
 * excluded everything. */
template <typename Perf>
static void no_algorithm(const cu_state *s, const cu_conv_algo *e, const Perf *perf, int n, const char *what) {
    char list[768];
    size_t used = 0;
    list[0] = 0;
    for (int i = 0; i < n && used + 1 < sizeof list; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%d/%s/%s/%zuMB", i ? ", " : "", (int)perf[i].algo,
                         math_name(perf[i].mathType), perf[i].status == CUDNN_STATUS_SUCCESS ? "ok" : "unsupported",
                         perf[i].memory >> 20);
        if (w < 0) break;
        used += (size_t)w;
    }
    MRCNN_CHECK(0, "%s: cuDNN offers no %salgorithm within a %zu MB workspace for x (%d, %d, %d, %d), K %d, %dx%d "
                "(offered algo/math/status/workspace: %s)",
                what, fp32_strict(&e->key) ? "FMA-math " : "", s->workspace_limit >> 20, e->key.n,
                e->key.h, e->key.w, e->key.c, e->key.k, e->key.r, e->key.s, n ? list : "nothing");
}

static void verbose_choice(const cu_conv_algo *e, const char *dir, int algo, cudnnMathType_t math, size_t ws,
                           const cu_state *s) {
    if (!getenv("MRCNN_CONV_VERBOSE")) return;
    static const char *const dt_name[] = {"fp32", "fp16", "bf16"};
    int dt = e->key.dtype == MRCNN_DTYPE_F16 ? 1 : e->key.dtype == MRCNN_DTYPE_BF16 ? 2 : 0;
    fprintf(stderr, "conv algo x (%d, %d, %d, %d) K %d %dx%d s%d %s%s: %s algo %d math %s ws %zu MB (%s)\n", e->key.n,
            e->key.h, e->key.w, e->key.c, e->key.k, e->key.r, e->key.s, e->key.sh, dt_name[dt],
            e->key.tf32 ? " tf32" : "", dir, algo, math_name(math), ws >> 20, s->algo_find ? "find" : "heuristic");
}

static int fwd_transform(cudnnConvolutionFwdAlgo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}

static int bwd_data_transform(cudnnConvolutionBwdDataAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}

static int bwd_filter_transform(cudnnConvolutionBwdFilterAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

#define CU_MAX_ALGOS 16

/* cuDNN's answer as plain candidates, and the pick (conv_algo_pick.h). A strict fp32
 * shape that needed a transform is said once, with its shape: the run goes on, a
 * little less exact than plain fp32 summation there. */
template <typename Perf, typename Algo>
static int pick(const cu_state *s, const cu_conv_algo *e, const Perf *perf, int n, int (*transform)(Algo),
                const char *dir) {
    cu_algo_cand c[CU_MAX_ALGOS];
    for (int i = 0; i < n; i++)
        c[i] = (cu_algo_cand){(int)perf[i].algo, perf[i].status == CUDNN_STATUS_SUCCESS, perf[i].mathType == CUDNN_FMA_MATH,
                              transform(perf[i].algo), perf[i].memory};
    cu_pick_kind kind;
    int i = cu_algo_pick(c, n, fp32_strict(&e->key), s->workspace_limit, &kind);
    if (kind == CU_PICK_RELAXED)
        mrcnn_warn("conv %s x (%d, %d, %d, %d) K %d %dx%d fp32: cuDNN offers no FMA-math algorithm without an FFT or "
                   "Winograd transform; using algorithm %d (FMA math, with its transform)",
                   dir, e->key.n, e->key.h, e->key.w, e->key.c, e->key.k, e->key.r, e->key.s, c[i].algo);
    return i;
}

/* One direction's algorithm: cuDNN's candidates under the precision's math type (search
 * fills perf and n: cudnnFind*, timed on the device, or the _v7 heuristics, as
 * s->algo_find says), the pick, and the choice into *algo, *math, *ws, *have. dir names
 * the direction in the pick's warning, op in the failure, tag in the verbose line. */
template <typename Perf, typename Algo, typename Search>
static void choose(cu_state *s, cu_conv_algo *e, Search search, int (*transform)(Algo), const char *dir,
                   const char *op, const char *tag, Algo *algo, cudnnMathType_t *math, size_t *ws, int *have) {
    Perf perf[CU_MAX_ALGOS];
    int n = 0;
    set_math(e, e->base_math); // the search runs under the precision's math type
    search(perf, &n);
    if (s->algo_find) mrcnn_backend_count(s->owner, 0, 0, 1, 0, 0); // cudnnFind* times on the device and waits
    int i = pick(s, e, perf, n, transform, dir);
    if (i < 0) no_algorithm(s, e, perf, n, op);
    *algo = perf[i].algo;
    *math = perf[i].mathType;
    *ws = perf[i].memory;
    *have = 1;
    verbose_choice(e, tag, (int)*algo, *math, *ws, s);
}

static void choose_fwd(cu_state *s, cu_conv_algo *e) {
    auto search = [&](cudnnConvolutionFwdAlgoPerf_t *perf, int *n) {
        if (s->algo_find)
            MRCNN_CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithm(s->cudnn, e->x_desc, e->w_desc, e->conv_desc,
                                                                   e->y_desc, CU_MAX_ALGOS, n, perf));
        else
            MRCNN_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(s->cudnn, e->x_desc, e->w_desc, e->conv_desc,
                                                                     e->y_desc, CU_MAX_ALGOS, n, perf));
    };
    choose<cudnnConvolutionFwdAlgoPerf_t>(s, e, search, fwd_transform, "forward", "conv2d_forward", "fwd", &e->fwd,
                                          &e->fwd_math, &e->fwd_ws, &e->have_fwd);
}

static void choose_bwd_data(cu_state *s, cu_conv_algo *e) {
    auto search = [&](cudnnConvolutionBwdDataAlgoPerf_t *perf, int *n) {
        if (s->algo_find)
            MRCNN_CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(s->cudnn, e->w_desc, e->y_desc, e->conv_desc,
                                                                        e->x_desc, CU_MAX_ALGOS, n, perf));
        else
            MRCNN_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(s->cudnn, e->w_desc, e->y_desc, e->conv_desc,
                                                                          e->x_desc, CU_MAX_ALGOS, n, perf));
    };
    choose<cudnnConvolutionBwdDataAlgoPerf_t>(s, e, search, bwd_data_transform, "data gradient",
                                              "conv2d_backward (data gradient)", "bwd-data", &e->bwd_data,
                                              &e->bwd_data_math, &e->bwd_data_ws, &e->have_bwd_data);
}

static void choose_bwd_filter(cu_state *s, cu_conv_algo *e) {
    auto search = [&](cudnnConvolutionBwdFilterAlgoPerf_t *perf, int *n) {
        if (s->algo_find)
            MRCNN_CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(s->cudnn, e->x_desc, e->y_desc, e->conv_desc,
                                                                          e->w_desc, CU_MAX_ALGOS, n, perf));
        else
            MRCNN_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(s->cudnn, e->x_desc, e->y_desc,
                                                                            e->conv_desc, e->w_desc, CU_MAX_ALGOS, n,
                                                                            perf));
    };
    choose<cudnnConvolutionBwdFilterAlgoPerf_t>(s, e, search, bwd_filter_transform, "filter gradient",
                                                "conv2d_backward (filter gradient)", "bwd-filter", &e->bwd_filter,
                                                &e->bwd_filter_math, &e->bwd_filter_ws, &e->have_bwd_filter);
}

/* The descriptor was checked in front (backend_validate.c: mrcnn_conv2d_desc_check). */
static cu_conv_algo *conv_entry(cu_state *s, const mrcnn_conv2d_desc *d, int dtype) {
    conv_key k;
    memset(&k, 0, sizeof k);
    k.n = d->n; k.h = d->h; k.w = d->w; k.c = d->c; k.k = d->k; k.r = d->r; k.s = d->s;
    k.sh = d->stride_h; k.sw = d->stride_w; k.ph = d->pad_h; k.pw = d->pad_w; k.dh = d->dil_h; k.dw = d->dil_w;
    k.dtype = dtype;
    k.tf32 = dtype == MRCNN_DTYPE_F32 ? s->tf32 : 0;
    return conv_lookup(s, &k);
}

static const float k_one = 1.0f, k_zero = 0.0f;

static cudnnStatus_t run_fused(cu_state *s, cu_conv_algo *e, const void *x, const void *w, const void *b, void *y) {
    void *ws = cu_workspace(s, e->fused_ws);
    /* The fused call's one algorithm under the precision's math type (what its
     * workspace size was asked with). */
    set_math(e, e->base_math);
    /* The call computes act(conv(x) + alpha2 z + bias) and wants a z of y's shape;
     * nothing documents that alpha2 = 0 keeps z unread, and 0 x NaN is NaN. So z = y
     * with y zeroed first: whatever y held (a NaN-poisoned fresh buffer, a freed
     * activation) cannot enter, for one extra write of y. */
    MRCNN_CHECK_CUDA(cudaMemsetAsync(y, 0, (size_t)e->key.n * e->p * e->q * e->key.k * cu_dtype_size((mrcnn_dtype)e->key.dtype),
                                     s->stream));
    cudnnStatus_t st = cudnnConvolutionBiasActivationForward(
        s->cudnn, &k_one, e->x_desc, x, e->w_desc, w, e->conv_desc, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, ws,
        e->fused_ws, &k_zero, e->y_desc, y, e->b_desc, b, e->act_desc, e->y_desc, y);
    if (st == CUDNN_STATUS_SUCCESS) MRCNN_CUDA_DEBUG_SYNC("cudnnConvolutionBiasActivationForward");
    return st;
}

/* A fused call that cuDNN refused: this shape takes the plain path from now on (the
 * same result: conv, then the bias + ReLU kernel). Said once per process; every shape
 * under MRCNN_CONV_VERBOSE. */
static void fused_refused(cu_conv_algo *e, cudnnStatus_t st, const char *when) {
    static int warned;
    e->fused = 0;
    if (!warned++)
        mrcnn_warn("conv x (%d, %d, %d, %d) K %d %dx%d: the fused conv+bias+ReLU failed %s (%s); this shape, and any "
                   "other whose fused call fails, runs the plain conv and the bias + ReLU kernel",
                   e->key.n, e->key.h, e->key.w, e->key.c, e->key.k, e->key.r, e->key.s, when, cudnnGetErrorString(st));
    else if (getenv("MRCNN_CONV_VERBOSE"))
        fprintf(stderr, "conv x (%d, %d, %d, %d) K %d %dx%d: fused conv+bias+ReLU failed %s (%s), plain path\n", e->key.n,
                e->key.h, e->key.w, e->key.c, e->key.k, e->key.r, e->key.s, when, cudnnGetErrorString(st));
}

/* b in its own dtype bt (an fp32 bias is added unrounded). */
static void run_plain(cu_state *s, cu_conv_algo *e, const void *x, const void *w, const void *b, mrcnn_dtype bt,
                      int relu, void *y) {
    void *ws = cu_workspace(s, e->fwd_ws);
    set_math(e, e->fwd_math);
    MRCNN_CHECK_CUDNN(cudnnConvolutionForward(s->cudnn, &k_one, e->x_desc, x, e->w_desc, w, e->conv_desc, e->fwd, ws,
                                              e->fwd_ws, &k_zero, e->y_desc, y));
    MRCNN_CUDA_DEBUG_SYNC("cudnnConvolutionForward");
    cu_bias_act(s, y, (mrcnn_dtype)e->key.dtype, (int64_t)e->key.n * e->p * e->q, e->key.k, b, bt, relu);
}

static float time_ms(cu_state *s, cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    MRCNN_CHECK_CUDA(cudaEventSynchronize(b));
    mrcnn_backend_count(s->owner, 0, 0, 1, 0, 0);
    MRCNN_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

/* Decides once per shape whether the fused call is used (see the file comment); bc is
 * the bias in the data dtype (the fused call's), b/bt the caller's. */
static void choose_fused(cu_state *s, cu_conv_algo *e, const void *x, const void *w, const void *bc, const void *b,
                         mrcnn_dtype bt, void *y) {
    if (s->fused_mode == 0) {
        e->fused = 0;
        return;
    }
    set_math(e, e->base_math);
    cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(s->cudnn, e->x_desc, e->w_desc, e->conv_desc, e->y_desc,
                                                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                               &e->fused_ws);
    if (st != CUDNN_STATUS_SUCCESS || e->fused_ws > s->workspace_limit) {
        e->fused = 0;
        return;
    }
    st = run_fused(s, e, x, w, bc, y);
    if (st != CUDNN_STATUS_SUCCESS) {
        fused_refused(e, st, "at its first call");
        return;
    }
    if (s->fused_mode == 1) {
        e->fused = 1;
        return;
    }
    cudaEvent_t t0, t1, t2;
    MRCNN_CHECK_CUDA(cudaEventCreate(&t0));
    MRCNN_CHECK_CUDA(cudaEventCreate(&t1));
    MRCNN_CHECK_CUDA(cudaEventCreate(&t2));
    const int reps = 3;
    run_plain(s, e, x, w, b, bt, 1, y); // warm-up of the plain path
    MRCNN_CHECK_CUDA(cudaEventRecord(t0, s->stream));
    for (int i = 0; i < reps && st == CUDNN_STATUS_SUCCESS; i++) st = run_fused(s, e, x, w, bc, y);
    MRCNN_CHECK_CUDA(cudaEventRecord(t1, s->stream));
    for (int i = 0; i < reps; i++) run_plain(s, e, x, w, b, bt, 1, y);
    MRCNN_CHECK_CUDA(cudaEventRecord(t2, s->stream));
    float fused_ms = time_ms(s, t0, t1), plain_ms = time_ms(s, t1, t2);
    e->fused = st == CUDNN_STATUS_SUCCESS && fused_ms < plain_ms;
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cudaEventDestroy(t2);
    if (st != CUDNN_STATUS_SUCCESS) {
        fused_refused(e, st, "while timed against the plain path");
        return;
    }
    if (getenv("MRCNN_CONV_VERBOSE"))
        fprintf(stderr, "conv x (%d, %d, %d, %d) K %d %dx%d s%d: fused %.3f ms, plain %.3f ms -> %s\n", e->key.n, e->key.h,
                e->key.w, e->key.c, e->key.k, e->key.r, e->key.s, e->key.sh, fused_ms / reps, plain_ms / reps,
                e->fused ? "fused" : "plain");
}

/* Shapes, float dtypes and devices are checked in front (backend_validate.c); cuDNN
 * wants x, y (and dx, dy) in one dtype, w and b are cast to it. */
static void cu_conv2d_forward(const mrcnn_backend *be, const mrcnn_conv2d_desc *d, const mrcnn_tensor *x,
                              const mrcnn_tensor *w, const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    cu_state *s = cu_st(be);
    MRCNN_CHECK(y->dtype == x->dtype, "conv2d_forward: y dtype %d differs from x dtype %d", (int)y->dtype,
                (int)x->dtype);
    cu_conv_algo *e = conv_entry(s, d, x->dtype);
    const mrcnn_dtype dt = x->dtype;
    const void *wp = cu_as_dtype(s, w, dt, CU_SCRATCH_W);
    if (!e->have_fwd) choose_fwd(s, e);
    const int relu = act == MRCNN_ACT_RELU;
    const mrcnn_dtype bt = b ? b->dtype : MRCNN_DTYPE_F32;
    if (relu && b && e->fused != 0) {
        const void *bc = cu_as_dtype(s, b, dt, CU_SCRATCH_B);
        if (e->fused < 0) choose_fused(s, e, x->data, wp, bc, b->data, bt, y->data);
        if (e->fused == 1) {
            cudnnStatus_t st = run_fused(s, e, x->data, wp, bc, y->data);
            if (st == CUDNN_STATUS_SUCCESS) return;
            /* Inside a capture that already broke, the failure is the capture's: the
             * trainer reruns the step directly, where the fused call is judged again. */
            if (s->capturing && mrcnn_graph_guard_note("cudnnConvolutionBiasActivationForward inside the captured "
                                                       "region: %s", cudnnGetErrorString(st)))
                return;
            fused_refused(e, st, "after earlier calls succeeded");
        }
    }
    run_plain(s, e, x->data, wp, b ? b->data : NULL, bt, relu, y->data);
}

/* act = RELU: one kernel masks dy by y into scratch and sums the bias gradient in the
 * same pass (cu_relu_grad_bias); both cuDNN calls then read the masked gradient.
 * dx_mode WRITE: beta 0, so dx need not be zeroed first. */
static void cu_conv2d_backward(const mrcnn_backend *be, const mrcnn_conv2d_desc *d, const mrcnn_tensor *x,
                               const mrcnn_tensor *w, const mrcnn_tensor *dy, mrcnn_activation act,
                               const mrcnn_tensor *y, mrcnn_tensor *dx, mrcnn_grad_mode dx_mode, mrcnn_tensor *dw,
                               mrcnn_tensor *db) {
    cu_state *s = cu_st(be);
    const mrcnn_dtype dt = dy->dtype;
    cu_conv_algo *e = conv_entry(s, d, dt);
    const int64_t rows = (int64_t)d->n * e->p * e->q;
    const void *g = dy->data;
    if (act == MRCNN_ACT_RELU) {
        MRCNN_CHECK(y != NULL, "conv2d_backward: act RELU needs the layer's output y");
        g = cu_relu_grad_bias(s, y->data, y->dtype, dy->data, dt, rows, d->k, db ? db->data : NULL,
                              db ? db->dtype : MRCNN_DTYPE_F32);
    }
    if (dx) {
        MRCNN_CHECK(dx->dtype == dt, "conv2d_backward: dx dtype %d differs from dy dtype %d", (int)dx->dtype, (int)dt);
        const void *wp = cu_as_dtype(s, w, dt, CU_SCRATCH_W);
        if (!e->have_bwd_data) choose_bwd_data(s, e);
        void *ws = cu_workspace(s, e->bwd_data_ws);
        set_math(e, e->bwd_data_math);
        MRCNN_CHECK_CUDNN(cudnnConvolutionBackwardData(s->cudnn, &k_one, e->w_desc, wp, e->y_desc, g, e->conv_desc,
                                                       e->bwd_data, ws, e->bwd_data_ws,
                                                       dx_mode == MRCNN_GRAD_WRITE ? &k_zero : &k_one, e->x_desc,
                                                       dx->data));
        MRCNN_CUDA_DEBUG_SYNC("cudnnConvolutionBackwardData");
    }
    if (dw) {
        MRCNN_CHECK(x->dtype == dt, "conv2d_backward: x dtype %d differs from dy dtype %d", (int)x->dtype, (int)dt);
        const int64_t nw = (int64_t)d->k * d->r * d->s * d->c;
        if (!e->have_bwd_filter) choose_bwd_filter(s, e);
        /* cuDNN writes dw in the data dtype; an fp32 master gradient gets it added. */
        const int direct = dw->dtype == dt;
        void *target = direct ? dw->data : cu_scratch(s, CU_SCRATCH_GRAD, (size_t)nw * cu_dtype_size(dt));
        void *ws = cu_workspace(s, e->bwd_filter_ws);
        set_math(e, e->bwd_filter_math);
        MRCNN_CHECK_CUDNN(cudnnConvolutionBackwardFilter(s->cudnn, &k_one, e->x_desc, x->data, e->y_desc, g,
                                                         e->conv_desc, e->bwd_filter, ws, e->bwd_filter_ws,
                                                         direct ? &k_one : &k_zero, e->w_desc, target));
        MRCNN_CUDA_DEBUG_SYNC("cudnnConvolutionBackwardFilter");
        if (!direct) cu_accumulate(s, target, dt, dw->data, dw->dtype, nw);
    }
    if (db && act != MRCNN_ACT_RELU) cu_bias_grad(s, dy->data, dt, rows, d->k, db->data, db->dtype);
}

void cu_fill_conv_ops(mrcnn_backend *be) {
    be->nn.conv2d_forward = cu_conv2d_forward;
    be->nn.conv2d_backward = cu_conv2d_backward;
}
