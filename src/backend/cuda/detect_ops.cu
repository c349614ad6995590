/* Detection ops on device arrays (detect_internal.h), with the float arithmetic of their host
 * references (src/ops/detect/box_iou.c, box_coder.c, matcher.c, nms.c, mask_targets.c).
 * IoU, the box coder, clipping and the mask targets' sampling are box_math.h's, the
 * very code the host runs; where the host has a * b + c, that header and the sums
 * here use __fmul_rn/__fadd_rn so that nvcc cannot contract it into an FMA: IoU values
 * and hence matches and NMS decisions then agree bit for bit. */
#include <cub/device/device_scan.cuh>
#include <math.h>
#include <string.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"
#include "det_grid.h"
#include "det_sort_keys.h"
#include "mrcnn/box_math.h"
#include "detect_internal.h"

#define CU_THREADS 256

static cu_state *cuda_state_of(const mrcnn_backend *be, const char *op) {
    MRCNN_CHECK(be && be->device == MRCNN_DEVICE_GPU && be->state,
                "%s: needs the CUDA backend", op);
    return cu_st(be);
}

/* ---- IoU ------------------------------------------------------------------------------- */

__global__ void k_box_iou(const float *a, int64_t n, const float *b, int64_t m, float *iou) {
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n * m; t += (int64_t)gridDim.x * blockDim.x)
        iou[t] = mrcnn_box_iou_pair(a + 4 * (t / m), b + 4 * (t % m));
}

extern "C" void mrcnn_cuda_box_iou(const mrcnn_backend *be, const float *a, int64_t n, const float *b, int64_t m,
                                   float *iou) {
    cu_state *s = cuda_state_of(be, "cuda_box_iou");
    MRCNN_CHECK(n >= 0 && m >= 0, "cuda_box_iou: negative box count (%lld, %lld)", (long long)n, (long long)m);
    if (n * m == 0) return;
    k_box_iou<<<cu_blocks(n * m, CU_THREADS), CU_THREADS, 0, s->stream>>>(a, n, b, m, iou);
    MRCNN_CHECK_LAUNCH("box_iou");
}

/* ---- box coder ---------------------------------------------------------------------------- */

__global__ void k_box_encode(mrcnn_box_coder c, int64_t n, const float *targets, const float *boxes, float *deltas) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        mrcnn_box_encode_one(&c, targets + 4 * i, boxes + 4 * i, deltas + 4 * i);
}

__global__ void k_box_decode(mrcnn_box_coder c, int64_t n, int k, const float *deltas, const float *boxes,
                             float *out) {
    const int64_t total = n * k;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x)
        mrcnn_box_decode_one(&c, deltas + 4 * t, boxes + 4 * (t / k), out + 4 * t); // out may alias deltas
}

__global__ void k_box_clip(int64_t n, float *boxes, float img_h, float img_w) {
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < 4 * n; t += (int64_t)gridDim.x * blockDim.x)
        boxes[t] = mrcnn_box_clamp(boxes[t], (t & 1) ? img_h : img_w); // x1, y1, x2, y2
}

extern "C" void mrcnn_cuda_box_encode(const mrcnn_backend *be, const mrcnn_box_coder *c, int64_t n,
                                      const float *targets, const float *boxes, float *deltas) {
    cu_state *s = cuda_state_of(be, "cuda_box_encode");
    MRCNN_CHECK(c && n >= 0, "cuda_box_encode: NULL coder or negative count");
    if (n == 0) return;
    k_box_encode<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(*c, n, targets, boxes, deltas);
    MRCNN_CHECK_LAUNCH("box_encode");
}

extern "C" void mrcnn_cuda_box_decode(const mrcnn_backend *be, const mrcnn_box_coder *c, int64_t n, int k,
                                      const float *deltas, const float *boxes, float *out) {
    cu_state *s = cuda_state_of(be, "cuda_box_decode");
    MRCNN_CHECK(c && n >= 0 && k > 0, "cuda_box_decode: NULL coder, negative count or k %d", k);
    if (n == 0) return;
    k_box_decode<<<cu_blocks(n * k, CU_THREADS), CU_THREADS, 0, s->stream>>>(*c, n, k, deltas, boxes, out);
    MRCNN_CHECK_LAUNCH("box_decode");
}

extern "C" void mrcnn_cuda_box_clip(const mrcnn_backend *be, int64_t n, float *boxes, int img_h, int img_w) {
    cu_state *s = cuda_state_of(be, "cuda_box_clip");
    MRCNN_CHECK(img_h > 0 && img_w > 0, "cuda_box_clip: image size %dx%d must be positive", img_h, img_w);
    if (n <= 0) return;
    k_box_clip<<<cu_blocks(4 * n, CU_THREADS), CU_THREADS, 0, s->stream>>>(n, boxes, (float)img_h, (float)img_w);
    MRCNN_CHECK_LAUNCH("box_clip");
}

/* ---- matcher ---------------------------------------------------------------------------------- */

/* rowmax[i] = the host's sequential max of row i: start at row[0], take q > hi. That is
 * fmaxf over the row (NaNs never win) unless row[0] itself is NaN, which then stays. */
__global__ void k_row_max(const float *iou, int64_t n, float *rowmax) {
    __shared__ float sh[CU_THREADS];
    const float *row = iou + (int64_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += CU_THREADS) m = fmaxf(m, row[j]);
    sh[threadIdx.x] = m;
    __syncthreads();
    for (int w = CU_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) rowmax[blockIdx.x] = isnan(row[0]) ? row[0] : sh[0];
}

__global__ void k_match(const float *iou, int g, int64_t n, float high, float low, const float *rowmax,
                        int32_t *matches) {
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        float v = iou[j];
        int32_t arg = 0;
        for (int i = 1; i < g; i++) {
            float q = iou[(int64_t)i * n + j];
            if (q > v) {
                v = q;
                arg = i;
            }
        }
        int32_t m = v < low ? MRCNN_MATCH_BELOW_LOW : (v < high ? MRCNN_MATCH_BETWEEN : arg);
        if (rowmax)
            for (int i = 0; i < g; i++)
                if (iou[(int64_t)i * n + j] == rowmax[i]) m = arg;
        matches[j] = m;
    }
}

__global__ void k_fill_i32(int32_t *p, int64_t n, int32_t v) {
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) p[j] = v;
}

extern "C" void mrcnn_cuda_matcher_match(const mrcnn_backend *be, const float *iou, int g, int64_t n, float high,
                                         float low, int allow_low_quality, int32_t *matches) {
    cu_state *s = cuda_state_of(be, "cuda_matcher_match");
    MRCNN_CHECK(g >= 0 && n >= 0, "cuda_matcher_match: negative size (%d gt, %lld predictions)", g, (long long)n);
    MRCNN_CHECK(low <= high, "cuda_matcher_match: low threshold %g above high threshold %g", (double)low, (double)high);
    if (n == 0) return;
    if (g == 0) {
        k_fill_i32<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(matches, n, MRCNN_MATCH_BELOW_LOW);
        MRCNN_CHECK_LAUNCH("matcher fill");
        return;
    }
    float *rowmax = NULL;
    if (allow_low_quality) {
        rowmax = (float *)cu_scratch(s, CU_SCRATCH_REDUCE, (size_t)g * sizeof(float));
        k_row_max<<<(unsigned)g, CU_THREADS, 0, s->stream>>>(iou, n, rowmax);
        MRCNN_CHECK_LAUNCH("matcher row max");
    }
    k_match<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(iou, g, n, high, low, rowmax, matches);
    MRCNN_CHECK_LAUNCH("matcher");
}

/* ---- NMS ------------------------------------------------------------------------------------------ */

/* Batched over images, one launch of each kernel for the whole batch (the proposals run
 * every image's NMS at once): image i's candidates are rows [i * cap, (i + 1) * cap). */

#define NMS_SORT_THREADS 1024
#define NMS_MAX_WORDS (MRCNN_CUDA_NMS_MAX / 64)

static __device__ __forceinline__ int nms_valid_of(const int32_t *n_valid, int img, int cap) {
    if (!n_valid) return cap;
    const int v = n_valid[img];
    return v < 0 ? 0 : (v > cap ? cap : v);
}

/* The sort's keys: row i of image img is key (img, score), value i (det_sort_keys.h).
 * After cu_det_sort, image img's rows in the host's stable descending order are at
 * [img * cap, (img + 1) * cap) of the sorted values, the layout of order. */
__global__ void k_nms_keys(const float *scores, int cap, int64_t total, uint64_t *keys, int32_t *vals) {
    CU_GRID_STRIDE(p, total) {
        const int img = (int)(p / cap);
        keys[p] = det_sort_key((uint32_t)img, scores[p]);
        vals[p] = (int32_t)(p - (int64_t)img * cap);
    }
}

/* Legacy (MRCNN_DET_KERNELS=legacy): one block per image, a bitonic sort of (score
 * descending, index ascending), which is the host's stable descending order, padded to
 * a power of two with entries that sort last. order gets row numbers within the image.
 * The same order as the batch sort's but where a score is NaN (undefined on the host). */
__global__ void k_nms_sort(const float *scores, int cap, int padded, int *order) {
    extern __shared__ float nms_smem[]; // key[padded], then idx[padded]
    float *key = nms_smem;
    int *idx = (int *)(nms_smem + padded);
    const float *sc = scores + (int64_t)blockIdx.x * cap;
    for (int i = threadIdx.x; i < padded; i += NMS_SORT_THREADS) {
        key[i] = i < cap ? sc[i] : -INFINITY;
        idx[i] = i < cap ? i : 0x7fffffff;
    }
    __syncthreads();
    for (int size = 2; size <= padded; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < padded; i += NMS_SORT_THREADS) {
                int j = i ^ stride;
                if (j > i) {
                    /* "before": i's entry precedes j's in the final order. */
                    int before = key[i] > key[j] || (key[i] == key[j] && idx[i] < idx[j]);
                    int ascending = (i & size) == 0; // this half wants i before j
                    if (before != ascending) {
                        float tk = key[i];
                        key[i] = key[j];
                        key[j] = tk;
                        int ti = idx[i];
                        idx[i] = idx[j];
                        idx[j] = ti;
                    }
                }
            }
            __syncthreads();
        }
    }
    int *ord = order + (int64_t)blockIdx.x * cap;
    for (int i = threadIdx.x; i < cap; i += NMS_SORT_THREADS) ord[i] = idx[i];
}

/* Block (column block cb, row block rb, image z), 64 threads: bit c of
 * mask[(z * cap + rb*64 + t) * blocks + cb] is set when sorted box cb*64 + c comes after
 * sorted box rb*64 + t, has its class, and overlaps it by IoU > thresh (the host's
 * nms_sorted arithmetic). Blocks left of the diagonal or past the valid count write
 * nothing: the greedy pass never reads them. */
__global__ void k_nms_mask(const float *boxes, const int32_t *idxs, const int *order, int cap, const int32_t *n_valid,
                           float thresh, unsigned long long *mask) {
    __shared__ float cb_box[64][4];
    __shared__ int cb_cls[64];
    const int img = blockIdx.z, rb = blockIdx.y, cb = blockIdx.x, blocks = gridDim.x;
    const int nv = nms_valid_of(n_valid, img, cap);
    const int c0 = cb * 64, r = rb * 64 + threadIdx.x;
    if (cb < rb || c0 >= nv) return; // uniform over the block, before any barrier
    const float *bx = boxes + (int64_t)img * cap * 4;
    const int32_t *cl = idxs ? idxs + (int64_t)img * cap : NULL;
    const int *ord = order + (int64_t)img * cap;
    if (c0 + (int)threadIdx.x < nv) {
        int o = ord[c0 + threadIdx.x];
        for (int k = 0; k < 4; k++) cb_box[threadIdx.x][k] = bx[4 * o + k];
        cb_cls[threadIdx.x] = cl ? cl[o] : 0;
    }
    __syncthreads();
    if (r >= nv) return;
    const int o = ord[r];
    const float *bi = bx + 4 * o;
    const int cls = cl ? cl[o] : 0;
    const float iarea = mrcnn_box_area(bi);
    unsigned long long bits = 0;
    const int cn = nv - c0 < 64 ? nv - c0 : 64;
    for (int c = 0; c < cn; c++) {
        if (c0 + c <= r || cb_cls[c] != cls) continue;
        const float *bj = cb_box[c];
        if (mrcnn_box_iou_areas(bi, iarea, bj, mrcnn_box_area(bj)) > thresh) bits |= 1ULL << c;
    }
    mask[((int64_t)img * cap + r) * blocks + cb] = bits;
}

#define NMS_REDUCE_THREADS 256

/* One block per image: the greedy pass in sorted order, 64 boxes at a time. Thread 0
 * settles a column block's boxes among themselves from its diagonal mask words (a few
 * shared-memory reads per box), then all threads OR the kept boxes' mask rows into the
 * later words: two barriers per 64 boxes instead of two per box. Stops at max_keep
 * kept boxes (> 0), the caller's top-n: later boxes could only be kept after them. */
__global__ void k_nms_reduce(const int *order, int cap, const int32_t *n_valid, const unsigned long long *mask,
                             int max_keep, int32_t *keep, int32_t *count) {
    __shared__ unsigned long long removed[NMS_MAX_WORDS];
    __shared__ unsigned long long diag[64];
    __shared__ int kept_c[64];
    __shared__ int nk, kept, stop;
    const int img = blockIdx.x;
    const int nv = nms_valid_of(n_valid, img, cap);
    const int blocks = (cap + 63) / 64, nvb = (nv + 63) / 64;
    const int *ord = order + (int64_t)img * cap;
    const unsigned long long *mk = mask + (int64_t)img * cap * blocks;
    int32_t *kp = keep + (int64_t)img * cap;
    for (int w = threadIdx.x; w < blocks; w += blockDim.x) removed[w] = 0;
    if (threadIdx.x == 0) kept = stop = 0;
    __syncthreads();
    for (int cb = 0; cb < nvb; cb++) {
        if (threadIdx.x < 64) {
            const int r = cb * 64 + threadIdx.x;
            diag[threadIdx.x] = r < nv ? mk[(int64_t)r * blocks + cb] : 0ULL;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long word = removed[cb];
            const int lim = nv - cb * 64 < 64 ? nv - cb * 64 : 64;
            int n = 0, k = kept;
            for (int c = 0; c < lim; c++) {
                if ((word >> c) & 1ULL) continue;
                kp[k++] = ord[cb * 64 + c];
                kept_c[n++] = c;
                word |= diag[c];
                if (max_keep > 0 && k >= max_keep) {
                    stop = 1;
                    break;
                }
            }
            kept = k;
            nk = n;
        }
        __syncthreads();
        if (stop) break; // read after the barrier: the same value in every thread
        for (int w = cb + 1 + threadIdx.x; w < nvb; w += blockDim.x) {
            unsigned long long acc = 0;
            for (int q = 0; q < nk; q++) acc |= mk[(int64_t)(cb * 64 + kept_c[q]) * blocks + w];
            removed[w] |= acc;
        }
        __syncthreads();
    }
    for (int i = kept + threadIdx.x; i < cap; i += blockDim.x) kp[i] = -1;
    if (threadIdx.x == 0) count[img] = kept;
}

/* The default greedy pass, one block per image still (the pass is sequential per
 * image), with a shorter chain: warp 0 settles a word in registers (det_nms_word: one
 * step per kept box, reading the diagonal words from shared memory) and writes its
 * kept rows in parallel (det_nms_rank), where the legacy thread 0 read each kept box's
 * row from global memory in turn; the next word's diagonal is loaded while the block
 * ORs the kept boxes' masks into the later words, one barrier fewer per word. The same
 * boxes in the same order, the same stop at max_keep. */
__global__ void k_nms_reduce_words(const int *order, int cap, const int32_t *n_valid, const unsigned long long *mask,
                                   int max_keep, int32_t *keep, int32_t *count) {
    __shared__ unsigned long long removed[NMS_MAX_WORDS];
    __shared__ uint64_t diag[64];
    __shared__ uint64_t word_kept;
    const int img = blockIdx.x;
    const int nv = nms_valid_of(n_valid, img, cap);
    const int blocks = (cap + 63) / 64, nvb = (nv + 63) / 64;
    const int *ord = order + (int64_t)img * cap;
    const unsigned long long *mk = mask + (int64_t)img * cap * blocks;
    int32_t *kp = keep + (int64_t)img * cap;
    for (int w = threadIdx.x; w < blocks; w += blockDim.x) removed[w] = 0;
    if (threadIdx.x < 64) diag[threadIdx.x] = (int)threadIdx.x < nv ? mk[(int64_t)threadIdx.x * blocks] : 0ULL;
    __syncthreads();
    int kept = 0; // the same in every thread
    for (int cb = 0; cb < nvb; cb++) {
        if (threadIdx.x < 32) {
            const int lim = nv - cb * 64 < 64 ? nv - cb * 64 : 64;
            const int64_t budget = max_keep > 0 ? (int64_t)max_keep - kept : 64;
            const uint64_t bits = det_nms_word(removed[cb], diag, lim, budget);
            for (int c = threadIdx.x; c < 64; c += 32)
                if ((bits >> c) & 1u) kp[kept + det_nms_rank(bits, c)] = ord[cb * 64 + c];
            if (threadIdx.x == 0) word_kept = bits;
        }
        __syncthreads(); // word_kept written, diag read
        const uint64_t bits = word_kept;
        kept += det_popc64(bits);
        if (max_keep > 0 && kept >= max_keep) break; // the same in every thread
        if (threadIdx.x < 64 && cb + 1 < nvb) {
            const int r = (cb + 1) * 64 + threadIdx.x;
            diag[threadIdx.x] = r < nv ? mk[(int64_t)r * blocks + cb + 1] : 0ULL;
        }
        for (int w = cb + 1 + threadIdx.x; w < nvb; w += blockDim.x) {
            unsigned long long acc = 0;
            for (uint64_t m = bits; m; m &= m - 1) acc |= mk[(int64_t)(cb * 64 + det_ctz64(m)) * blocks + w];
            removed[w] |= acc;
        }
        __syncthreads(); // removed[cb + 1] and diag ready; word_kept read
    }
    for (int i = kept + threadIdx.x; i < cap; i += blockDim.x) kp[i] = -1;
    if (threadIdx.x == 0) count[img] = kept;
}

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

/* order (legacy), the suppression masks, then the batch sort's work. */
extern "C" size_t cu_nms_work_bytes(int n_images, int cap) {
    const size_t blocks = (size_t)(cap + 63) / 64;
    return align256((size_t)n_images * cap * sizeof(int)) + align256((size_t)n_images * cap * blocks * 8) +
           cu_det_sort_bytes((int64_t)n_images * cap, n_images > 0 ? n_images : 1);
}

extern "C" void cu_nms_batched(const mrcnn_backend *be, int n_images, int cap, const float *boxes, const float *scores,
                               const int32_t *idxs, const int32_t *n_valid, float thresh, int max_keep, void *work,
                               int32_t *keep, int32_t *count) {
    cu_state *s = cuda_state_of(be, "cuda_nms");
    MRCNN_CHECK(n_images >= 0 && cap >= 0 && cap <= MRCNN_CUDA_NMS_MAX, "cuda_nms: %d images of %d boxes, at most %d",
                n_images, cap, MRCNN_CUDA_NMS_MAX);
    if (n_images == 0) return;
    if (cap == 0) {
        MRCNN_CHECK_CUDA(cudaMemsetAsync(count, 0, (size_t)n_images * sizeof(int32_t), s->stream));
        return;
    }
    int padded = 1;
    while (padded < cap) padded <<= 1;
    const int blocks = (cap + 63) / 64;
    const int *order = (const int *)work;
    const size_t mask_bytes = align256((size_t)n_images * cap * blocks * 8);
    unsigned long long *mask = (unsigned long long *)((char *)work + align256((size_t)n_images * cap * sizeof(int)));
    if (!cu_det_kernels_legacy()) {
        void *sort_work = (char *)mask + mask_bytes;
        const int64_t total = (int64_t)n_images * cap;
        uint64_t *keys;
        int32_t *vals;
        cu_det_sort_inputs(sort_work, total, &keys, &vals);
        k_nms_keys<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, s->stream>>>(scores, cap, total, keys, vals);
        MRCNN_CHECK_LAUNCH("nms keys");
        order = cu_det_sort(be, sort_work, total, n_images);
    } else {
        /* Up to 128 KB of dynamic shared memory (sm_80 and sm_90 allow it on request). */
        const int smem = padded * (int)(sizeof(float) + sizeof(int));
        MRCNN_CHECK_CUDA(cudaFuncSetAttribute(k_nms_sort, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        k_nms_sort<<<(unsigned)n_images, NMS_SORT_THREADS, (size_t)smem, s->stream>>>(scores, cap, padded,
                                                                                      (int *)order);
        MRCNN_CHECK_LAUNCH("nms sort");
    }
    k_nms_mask<<<dim3((unsigned)blocks, (unsigned)blocks, (unsigned)n_images), 64, 0, s->stream>>>(
        boxes, idxs, order, cap, n_valid, thresh, mask);
    MRCNN_CHECK_LAUNCH("nms mask");
    if (cu_det_kernels_legacy())
        k_nms_reduce<<<(unsigned)n_images, NMS_REDUCE_THREADS, 0, s->stream>>>(order, cap, n_valid, mask, max_keep,
                                                                              keep, count);
    else
        k_nms_reduce_words<<<(unsigned)n_images, NMS_REDUCE_THREADS, 0, s->stream>>>(order, cap, n_valid, mask,
                                                                                    max_keep, keep, count);
    MRCNN_CHECK_LAUNCH("nms reduce");
}

/* The one-image API's int64 outputs from the batched kernels' int32 ones. */
__global__ void k_nms_widen(const int32_t *keep32, const int32_t *count32, int64_t n, int64_t *keep, int64_t *count) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        keep[i] = keep32[i];
        if (i == 0) *count = *count32;
    }
}

extern "C" void mrcnn_cuda_nms(const mrcnn_backend *be, const float *boxes, const float *scores, const int32_t *idxs,
                               int64_t n, float thresh, int64_t *keep, int64_t *count) {
    cu_state *s = cuda_state_of(be, "cuda_nms");
    MRCNN_CHECK(n >= 0 && n <= MRCNN_CUDA_NMS_MAX, "cuda_nms: %lld boxes, at most %d", (long long)n,
                MRCNN_CUDA_NMS_MAX);
    if (n == 0) {
        MRCNN_CHECK_CUDA(cudaMemsetAsync(count, 0, sizeof(int64_t), s->stream));
        return;
    }
    const size_t wb = cu_nms_work_bytes(1, (int)n), kb = align256((size_t)n * sizeof(int32_t));
    char *scratch = (char *)cu_scratch(s, CU_SCRATCH_GEMM, wb + kb + 256);
    int32_t *keep32 = (int32_t *)(scratch + wb), *count32 = (int32_t *)(scratch + wb + kb);
    cu_nms_batched(be, 1, (int)n, boxes, scores, idxs, NULL, thresh, 0, scratch, keep32, count32);
    k_nms_widen<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(keep32, count32, n, keep, count);
    MRCNN_CHECK_LAUNCH("nms widen");
}

/* ---- mask targets ------------------------------------------------------------------------------------ */

__global__ void k_mask_targets(const uint8_t *gt_masks, int img_h, int img_w, const float *boxes,
                               const int32_t *gt_index, int n, int m, float *targets) {
    const int64_t total = (int64_t)n * m * m;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int pw = (int)(t % m), ph = (int)(t / m % m);
        const int i = (int)(t / ((int64_t)m * m));
        const uint8_t *mask = gt_masks + (int64_t)gt_index[i] * img_h * img_w;
        mrcnn_roi_frame f; // a box that cannot be sampled gets zeros, as on the host
        targets[t] = mrcnn_roi_frame_make(boxes + 4 * i, 1.0f, 0, m, m, 0, &f)
                         ? mrcnn_mask_roi_bin(mask, img_h, img_w, &f, ph, pw)
                         : 0.0f;
    }
}

extern "C" void mrcnn_cuda_mask_targets(const mrcnn_backend *be, const uint8_t *gt_masks, int n_gt, int img_h,
                                        int img_w, const float *boxes, const int32_t *gt_index, int n, int m,
                                        float *targets) {
    cu_state *s = cuda_state_of(be, "cuda_mask_targets");
    MRCNN_CHECK(n >= 0 && m > 0 && img_h > 0 && img_w > 0 && n_gt >= 0,
                "cuda_mask_targets: %d rois, size %d, image %dx%d, %d gt", n, m, img_h, img_w, n_gt);
    if (n == 0) return;
    MRCNN_CHECK(n_gt > 0, "cuda_mask_targets: %d rois but no gt masks", n);
    const int64_t total = (int64_t)n * m * m;
    k_mask_targets<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, s->stream>>>(gt_masks, img_h, img_w, boxes, gt_index,
                                                                                 n, m, targets);
    MRCNN_CHECK_LAUNCH("mask_targets");
}

/* ---- balanced sampling ---------------------------------------------------------------------------------- */

#define SAMPLE_THREADS 1024

/* k of cand[0..m) by the host's partial Fisher-Yates (thread 0; k is a few hundred),
 * then written ascending to out by a parallel rank sort (the indices are distinct). */
static __device__ void sample_choose(int32_t *cand, int64_t m, int64_t k, const mrcnn_rng *rng, uint64_t base,
                                     int64_t *out) {
    if (k < m) {
        if (threadIdx.x == 0)
            for (int64_t i = 0; i < k; i++) {
                int64_t j = i + (int64_t)mrcnn_rng_below(rng, base + (uint64_t)i, (uint32_t)(m - i));
                int32_t t = cand[i];
                cand[i] = cand[j];
                cand[j] = t;
            }
        __syncthreads();
        for (int64_t a = threadIdx.x; a < k; a += SAMPLE_THREADS) {
            int32_t v = cand[a];
            int64_t rank = 0;
            for (int64_t b = 0; b < k; b++) rank += cand[b] < v;
            out[rank] = v;
        }
    } else {
        for (int64_t a = threadIdx.x; a < k; a += SAMPLE_THREADS) out[a] = cand[a];
    }
}

/* Image img's draws from its compacted positives pos[0..np) and negatives neg[0..nn), on
 * its own stream. Every thread of the block calls it. */
static __device__ void sample_draw(int img, int64_t np, int64_t nn, int batch_size, int64_t want_pos,
                                   const mrcnn_rng *rngs, int32_t *pos, int32_t *neg, int64_t *pos_idx, int pos_cap,
                                   int64_t *neg_idx, int neg_cap, int64_t *counts) {
    int64_t kp, kn;
    det_sample_take(np, nn, batch_size, want_pos, &kp, &kn);
    const mrcnn_rng rng = rngs[img]; // device data: the host staged this batch's streams
    sample_choose(pos, np, kp, &rng, 0, pos_idx + (int64_t)img * pos_cap);
    __syncthreads();
    sample_choose(neg, nn, kn, &rng, (uint64_t)1 << 40, neg_idx + (int64_t)img * neg_cap);
    if (threadIdx.x == 0) {
        counts[2 * img] = kp;
        counts[2 * img + 1] = kn;
    }
}

/* Legacy (MRCNN_DET_KERNELS=legacy): a grid over images, one block each: stable
 * compaction of the image's positives (label > 0) and negatives (== 0) in index order,
 * then the draws. */
__global__ void k_sample_balanced(const int32_t *labels, int64_t n, int batch_size, int64_t want_pos,
                                  const mrcnn_rng *rngs, int32_t *work, int64_t *pos_idx, int pos_cap, int64_t *neg_idx,
                                  int neg_cap, int64_t *counts) {
    __shared__ int warp_pos[SAMPLE_THREADS / 32], warp_neg[SAMPLE_THREADS / 32];
    __shared__ int64_t total_pos, total_neg;
    const int img = (int)blockIdx.x;
    const int32_t *lab = labels + (int64_t)img * n;
    int32_t *pos = work + (int64_t)img * 2 * n, *neg = pos + n;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) total_pos = total_neg = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += SAMPLE_THREADS) {
        const int64_t i = base + threadIdx.x;
        const int32_t l = i < n ? lab[i] : -1;
        const unsigned bp = __ballot_sync(0xffffffffu, l > 0), bn = __ballot_sync(0xffffffffu, l == 0);
        const unsigned below = (1u << lane) - 1u;
        if (lane == 0) {
            warp_pos[warp] = __popc(bp);
            warp_neg[warp] = __popc(bn);
        }
        __syncthreads();
        int64_t op = total_pos, on = total_neg;
        for (int w = 0; w < warp; w++) {
            op += warp_pos[w];
            on += warp_neg[w];
        }
        if (l > 0) pos[op + __popc(bp & below)] = (int32_t)i;
        if (l == 0) neg[on + __popc(bn & below)] = (int32_t)i;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int w = 0; w < SAMPLE_THREADS / 32; w++) {
                total_pos += warp_pos[w];
                total_neg += warp_neg[w];
            }
        __syncthreads();
    }
    sample_draw(img, total_pos, total_neg, batch_size, want_pos, rngs, pos, neg, pos_idx, pos_cap, neg_idx, neg_cap,
                counts);
}

/* The default compaction, over the whole batch at once (det_sort_keys.h): each entry's
 * packed count (one more entry, 0, so that the scan's last value is the batch's total),
 * an exclusive scan in place (cub::DeviceScan), then each entry scattered to its rank. */
__global__ void k_sample_counts(const int32_t *labels, int64_t total, uint64_t *scan) {
    CU_GRID_STRIDE(p, total + 1) scan[p] = p < total ? det_sample_count(labels[p]) : 0;
}

__global__ void k_sample_scatter(const int32_t *labels, int64_t n, int64_t total, const uint64_t *scan,
                                 int32_t *work) {
    CU_GRID_STRIDE(p, total) {
        const int32_t l = labels[p];
        if (l < 0) continue;
        const int64_t img = p / n;
        const uint64_t r = scan[p] - scan[img * n];
        int32_t *pos = work + img * 2 * n, *neg = pos + n;
        if (l > 0) pos[det_count_pos(r)] = (int32_t)(p - img * n);
        else neg[det_count_neg(r)] = (int32_t)(p - img * n);
    }
}

#define FY_MAX 4096 // draws a block holds in shared memory; more take the serial path

/* k of cand[0..m) (k < m, k <= FY_MAX) as sample_choose draws them, without its serial
 * swaps: every draw at once (counter-based Philox: draw i depends on i alone), every
 * position's source at once (det_fy_source), then the same ascending rank sort. cand is
 * only read. Every thread of the block calls it. */
static __device__ void sample_choose_parallel(const int32_t *cand, int64_t m, int64_t k, const mrcnn_rng *rng,
                                              uint64_t base, int64_t *out) {
    __shared__ int32_t draw[FY_MAX], val[FY_MAX];
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x)
        draw[i] = (int32_t)(i + (int64_t)mrcnn_rng_below(rng, base + (uint64_t)i, (uint32_t)(m - i)));
    __syncthreads();
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) val[i] = cand[det_fy_source(draw, i)];
    __syncthreads();
    for (int64_t a = threadIdx.x; a < k; a += blockDim.x) {
        const int32_t v = val[a];
        int64_t rank = 0;
        for (int64_t b = 0; b < k; b++) rank += val[b] < v;
        out[rank] = v;
    }
}

/* The default draws, grid (side, image): block (0, img) draws image img's positives,
 * block (1, img) its negatives (their number needs only the positives' count, which the
 * scan gives), each by sample_choose_parallel; the legacy block per image drew both in
 * turn, one serial swap at a time. */
__global__ void k_sample_draws(const uint64_t *scan, int64_t n, int batch_size, int64_t want_pos,
                               const mrcnn_rng *rngs, int32_t *work, int64_t *pos_idx, int pos_cap, int64_t *neg_idx,
                               int neg_cap, int64_t *counts) {
    const int side = (int)blockIdx.x, img = (int)blockIdx.y;
    const uint64_t c = scan[(int64_t)(img + 1) * n] - scan[(int64_t)img * n];
    int64_t kp, kn;
    det_sample_take(det_count_pos(c), det_count_neg(c), batch_size, want_pos, &kp, &kn);
    int32_t *cand = work + (int64_t)img * 2 * n + (side ? n : 0);
    const int64_t m = side ? det_count_neg(c) : det_count_pos(c), k = side ? kn : kp;
    int64_t *out = side ? neg_idx + (int64_t)img * neg_cap : pos_idx + (int64_t)img * pos_cap;
    const mrcnn_rng rng = rngs[img];
    const uint64_t base = side ? (uint64_t)1 << 40 : 0;
    if (k < m && k <= FY_MAX) sample_choose_parallel(cand, m, k, &rng, base, out);
    else sample_choose(cand, m, k, &rng, base, out); // k == m: a copy; k > FY_MAX: the serial draws
    if (threadIdx.x == 0) counts[2 * img + side] = k;
}

/* CUB's temporary bytes for an in-place exclusive scan of n uint64: a host-side query,
 * remembered per shape. */
static size_t sample_scan_temp_bytes(int64_t n) {
    static thread_local struct {
        int64_t n;
        int device;
        size_t bytes;
    } memo[8];
    static thread_local int n_memo = 0, next_memo = 0;
    int device = 0;
    MRCNN_CHECK_CUDA(cudaGetDevice(&device));
    for (int i = 0; i < n_memo; i++)
        if (memo[i].n == n && memo[i].device == device) return memo[i].bytes;
    size_t bytes = 0;
    MRCNN_CHECK_CUDA(cub::DeviceScan::ExclusiveSum(NULL, bytes, (uint64_t *)NULL, (int)n));
    const int at = n_memo < 8 ? n_memo++ : (next_memo++ & 7);
    memo[at].n = n;
    memo[at].device = device;
    memo[at].bytes = bytes;
    return bytes;
}

/* The compacted lists (n_images, 2, n) int32, then the scan (n_images * n + 1 uint64) and
 * CUB's temp. */
extern "C" size_t cu_sample_work_bytes(int n_images, int64_t n) {
    const int64_t items = (int64_t)n_images * n + 1;
    MRCNN_CHECK(items < 2147483647LL, "cuda_sample_balanced: %d images of %lld entries", n_images, (long long)n);
    return align256((size_t)n_images * 2 * (size_t)(n ? n : 1) * sizeof(int32_t)) + align256((size_t)items * 8) +
           align256(sample_scan_temp_bytes(items));
}

extern "C" void cu_sample_balanced_batched(const mrcnn_backend *be, int n_images, const int32_t *labels, int64_t n,
                                           int batch_size, float positive_fraction, const mrcnn_rng *rngs, void *work,
                                           int64_t *pos_idx, int pos_cap, int64_t *neg_idx, int neg_cap,
                                           int64_t *counts) {
    cu_state *s = cuda_state_of(be, "cuda_sample_balanced");
    MRCNN_CHECK(n_images >= 0 && n >= 0 && n < 2147483647LL && batch_size >= 0,
                "cuda_sample_balanced: %d images, count %lld or batch size %d", n_images, (long long)n, batch_size);
    MRCNN_CHECK(positive_fraction >= 0 && positive_fraction <= 1,
                "cuda_sample_balanced: positive fraction %g outside [0, 1]", (double)positive_fraction);
    MRCNN_CHECK(n_images == 0 || rngs != NULL, "cuda_sample_balanced: NULL rng");
    /* int(batch * fraction) in Python truncates the double product, as on the host. */
    const int64_t want_pos = (int64_t)((double)batch_size * (double)positive_fraction);
    MRCNN_CHECK(pos_cap >= (want_pos < n ? want_pos : n) && neg_cap >= batch_size,
                "cuda_sample_balanced: capacities %d/%d below %lld/%d", pos_cap, neg_cap,
                (long long)(want_pos < n ? want_pos : n), batch_size);
    if (n_images == 0) return;
    if (cu_det_kernels_legacy()) {
        k_sample_balanced<<<(unsigned)n_images, SAMPLE_THREADS, 0, s->stream>>>(
            labels, n, batch_size, want_pos, rngs, (int32_t *)work, pos_idx, pos_cap, neg_idx, neg_cap, counts);
        MRCNN_CHECK_LAUNCH("sample_balanced");
        return;
    }
    const int64_t total = (int64_t)n_images * n;
    uint64_t *scan = (uint64_t *)((char *)work + align256((size_t)n_images * 2 * (size_t)(n ? n : 1) * 4));
    void *temp = (char *)scan + align256((size_t)(total + 1) * 8);
    size_t temp_bytes = sample_scan_temp_bytes(total + 1);
    k_sample_counts<<<cu_blocks(total + 1, CU_THREADS), CU_THREADS, 0, s->stream>>>(labels, total, scan);
    MRCNN_CHECK_LAUNCH("sample counts");
    MRCNN_CHECK_CUDA(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, scan, (int)(total + 1), s->stream));
    MRCNN_CHECK_LAUNCH("sample scan");
    if (total > 0) {
        k_sample_scatter<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, s->stream>>>(labels, n, total, scan,
                                                                                     (int32_t *)work);
        MRCNN_CHECK_LAUNCH("sample scatter");
    }
    k_sample_draws<<<dim3(2, (unsigned)n_images), SAMPLE_THREADS, 0, s->stream>>>(scan, n, batch_size, want_pos, rngs,
                                                                         (int32_t *)work, pos_idx, pos_cap, neg_idx,
                                                                         neg_cap, counts);
    MRCNN_CHECK_LAUNCH("sample draws");
}

extern "C" void mrcnn_cuda_sample_balanced(const mrcnn_backend *be, const int32_t *labels, int64_t n, int batch_size,
                                           float positive_fraction, const mrcnn_rng *rng, int64_t *pos_idx,
                                           int64_t *neg_idx, int64_t *counts) {
    cu_state *s = cuda_state_of(be, "cuda_sample_balanced");
    MRCNN_CHECK(rng != NULL, "cuda_sample_balanced: NULL rng");
    const int64_t want_pos = (int64_t)((double)batch_size * (double)positive_fraction);
    void *work = cu_scratch(s, CU_SCRATCH_GEMM, cu_sample_work_bytes(1, n));
    cu_sample_balanced_batched(be, 1, labels, n, batch_size, positive_fraction, rng, work, pos_idx,
                               (int)(want_pos < n ? want_pos : n), neg_idx, batch_size, counts);
}

/* ---- RLE decode ------------------------------------------------------------------------------------------ */

#define RLE_THREADS 1024

/* One block per mask: ends[off + r] = inclusive prefix sum of the mask's run lengths. */
__global__ void k_rle_scan(const uint32_t *cnts, const int64_t *offsets, int64_t *ends) {
    __shared__ int64_t warp_sum[RLE_THREADS / 32];
    __shared__ int64_t base;
    const int64_t off = offsets[blockIdx.x], m = offsets[blockIdx.x + 1] - off;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) base = 0;
    __syncthreads();
    for (int64_t t0 = 0; t0 < m; t0 += RLE_THREADS) {
        const int64_t r = t0 + threadIdx.x;
        int64_t v = r < m ? (int64_t)cnts[off + r] : 0;
        for (int o = 1; o < 32; o <<= 1) { // inclusive scan within the warp
            int64_t u = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += u;
        }
        if (lane == 31) warp_sum[warp] = v;
        __syncthreads();
        int64_t before = base;
        for (int w = 0; w < warp; w++) before += warp_sum[w];
        if (r < m) ends[off + r] = before + v;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int w = 0; w < RLE_THREADS / 32; w++) base += warp_sum[w];
        __syncthreads();
    }
}

/* One thread per output pixel: binary search of its column-major position among the
 * run ends; odd runs are inside. */
__global__ void k_rle_fill(int n_masks, int h, int w, const int64_t *offsets, const int64_t *ends, uint8_t *masks) {
    const int64_t hw = (int64_t)h * w, total = n_masks * hw;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / hw, p = t % hw;
        const int64_t y = p / w, x = p % w, q = x * h + y;
        const int64_t off = offsets[i], m = offsets[i + 1] - off;
        int64_t lo = 0, hi = m; // first run whose end exceeds q
        while (lo < hi) {
            int64_t mid = (lo + hi) >> 1;
            if (ends[off + mid] > q) hi = mid;
            else lo = mid + 1;
        }
        masks[t] = (lo < m && (lo & 1)) ? 1 : 0;
    }
}

extern "C" void mrcnn_cuda_rle_decode(const mrcnn_backend *be, int n_masks, int h, int w, const uint32_t *cnts,
                                      const int64_t *offsets, int64_t n_runs, uint8_t *masks) {
    cu_state *s = cuda_state_of(be, "cuda_rle_decode");
    MRCNN_CHECK(n_masks >= 0 && h > 0 && w > 0 && n_runs >= 0, "cuda_rle_decode: %d masks of %dx%d, %lld runs",
                n_masks, h, w, (long long)n_runs);
    if (n_masks == 0) return;
    int64_t *ends = (int64_t *)cu_scratch(s, CU_SCRATCH_GEMM, (size_t)(n_runs ? n_runs : 1) * sizeof(int64_t));
    k_rle_scan<<<(unsigned)n_masks, RLE_THREADS, 0, s->stream>>>(cnts, offsets, ends);
    MRCNN_CHECK_LAUNCH("rle scan");
    const int64_t pixels = (int64_t)n_masks * h * w;
    k_rle_fill<<<cu_blocks(pixels, CU_THREADS), CU_THREADS, 0, s->stream>>>(n_masks, h, w, offsets, ends, masks);
    MRCNN_CHECK_LAUNCH("rle fill");
}
