/* CUDA-only entry points beyond the backend interface: the detection ops that run
 * on device arrays (boxes.h / roi_targets.h semantics, same float arithmetic), and
 * CUDA backend settings. Defined in libmrcnn_cuda.so, so only GPU=1 builds have them
 * (the Makefile defines MRCNN_HAVE_CUDA_HEADERS there); host code guards calls with
 * that macro. Every pointer is device memory; every call is asynchronous on the
 * backend's stream, like the backend's ops. `be` must be a CUDA backend. */
#ifndef MRCNN_CUDA_OPS_H
#define MRCNN_CUDA_OPS_H

#include <stdint.h>

#include "mrcnn/backend.h"
#include "mrcnn/boxes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mrcnn_backend_cuda_set_tf32: backend.h, beside mrcnn_backend_cuda_create. */
/* High-water mark of the memory be->alloc handed out (the stream-ordered pool's
 * used-memory peak), MiB, since creation or the last reset (reset = 1 restarts it);
 * -1 when the backend allocates without a pool (MRCNN_CUDA_POOL=0 or no support). */
double mrcnn_backend_cuda_pool_peak_mb(const mrcnn_backend *be, int reset);

/* iou (n, m) of a (n, 4) against b (m, 4), as mrcnn_box_iou (bit-identical). */
void mrcnn_cuda_box_iou(const mrcnn_backend *be, const float *a, int64_t n, const float *b, int64_t m, float *iou);

/* As mrcnn_box_encode / mrcnn_box_decode / mrcnn_box_clip (same order of operations;
 * logf/expf may differ from the host's by an ulp). */
void mrcnn_cuda_box_encode(const mrcnn_backend *be, const mrcnn_box_coder *c, int64_t n, const float *targets,
                           const float *boxes, float *deltas);
void mrcnn_cuda_box_decode(const mrcnn_backend *be, const mrcnn_box_coder *c, int64_t n, int k, const float *deltas,
                           const float *boxes, float *out);
void mrcnn_cuda_box_clip(const mrcnn_backend *be, int64_t n, float *boxes, int img_h, int img_w);

/* As mrcnn_matcher_match: iou (g, n) -> matches (n). */
void mrcnn_cuda_matcher_match(const mrcnn_backend *be, const float *iou, int g, int64_t n, float high, float low,
                              int allow_low_quality, int32_t *matches);

/* As mrcnn_batched_nms (idxs NULL: plain NMS) for n <= MRCNN_CUDA_NMS_MAX boxes: keep (n)
 * gets the kept indices in descending score order (ties: lower index first), *count
 * (one device int64) their number; keep rows past the count are -1. */
#define MRCNN_CUDA_NMS_MAX 16384 // 5 levels x 2000 pre-NMS boxes fit
void mrcnn_cuda_nms(const mrcnn_backend *be, const float *boxes, const float *scores, const int32_t *idxs, int64_t n,
                    float thresh, int64_t *keep, int64_t *count);

/* As mrcnn_mask_targets: gt_masks (n_gt, img_h, img_w) uint8, boxes (n, 4), gt_index (n)
 * -> targets (n, m, m). gt_index is not range-checked on the device. */
void mrcnn_cuda_mask_targets(const mrcnn_backend *be, const uint8_t *gt_masks, int n_gt, int img_h, int img_w,
                             const float *boxes, const int32_t *gt_index, int n, int m, float *targets);

/* As mrcnn_sample_balanced for one image, with the same Philox draws (rng is the host
 * struct, passed by value): labels (n) -> pos_idx (capacity min(n, (int)(batch *
 * fraction))) and neg_idx (capacity batch_size) ascending, counts (2 device int64:
 * n_pos, n_neg). n < 2^31. */
void mrcnn_cuda_sample_balanced(const mrcnn_backend *be, const int32_t *labels, int64_t n, int batch_size,
                                float positive_fraction, const mrcnn_rng *rng, int64_t *pos_idx, int64_t *neg_idx,
                                int64_t *counts);

/* Top-k of each row of x (rows, n) fp32, as the proposal code's sort: value descending,
 * lower index first on ties. values (rows, k) and indices (rows, k) get min(n, k)
 * entries per row (rows past that untouched). k <= MRCNN_CUDA_TOPK_MAX. */
#define MRCNN_CUDA_TOPK_MAX 16384
void mrcnn_cuda_topk(const mrcnn_backend *be, const float *x, int rows, int64_t n, int k, float *values,
                     int64_t *indices);

/* COCO RLE (rle.h: runs over the column-major order, zeros first) to row-major uint8
 * masks (n_masks, h, w) of one size, 1 inside: mask i's runs are cnts[offsets[i] ..
 * offsets[i + 1]) (offsets (n_masks + 1) int64, device); n_runs = offsets[n_masks], the
 * length of cnts (given so that no host round trip is needed). Pixels past the runs'
 * total are 0. */
void mrcnn_cuda_rle_decode(const mrcnn_backend *be, int n_masks, int h, int w, const uint32_t *cnts,
                           const int64_t *offsets, int64_t n_runs, uint8_t *masks);

/* y = x converted to y's dtype (fp32, fp16, bf16; round to nearest even), e.g. the bf16
 * copy of fp32 master weights. Same element count; asynchronous. */
void mrcnn_cuda_cast(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y);

/* As mrcnn_anchors_grid; cell (n_cell, 4) is a HOST array (n_cell <= 16), anchors
 * (grid_h, grid_w, n_cell, 4) device memory. */
void mrcnn_cuda_anchors_grid(const mrcnn_backend *be, const float *cell, int n_cell, int grid_h, int grid_w,
                             int stride_h, int stride_w, float *anchors);

/* As mrcnn_gather_class_deltas / _masks and their backward passes, with the logits in
 * dtype dt (fp32, fp16 or bf16; the gathered values and their gradients fp32, as the
 * losses run in fp32). Rows whose label is outside [0, k) are skipped (zero output,
 * no gradient): labels are not range-checked on the device. */
void mrcnn_cuda_gather_class_deltas(const mrcnn_backend *be, int n, int k, const void *deltas, mrcnn_dtype dt,
                                    const int32_t *labels, float *out);
void mrcnn_cuda_gather_class_deltas_backward(const mrcnn_backend *be, int n, int k, const float *dout,
                                             const int32_t *labels, void *ddeltas, mrcnn_dtype dt);
void mrcnn_cuda_gather_class_masks(const mrcnn_backend *be, int n, int m, int k, const void *logits, mrcnn_dtype dt,
                                   const int32_t *labels, float *out);
void mrcnn_cuda_gather_class_masks_backward(const mrcnn_backend *be, int n, int m, int k, const float *dout,
                                            const int32_t *labels, void *dlogits, mrcnn_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
