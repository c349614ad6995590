/* Private to src/backend/cuda (and tests/cuda/test_cuda_detect.c, which checks the kernels
 * one by one): the detection kernels on device arrays (boxes.h / roi_targets.h
 * semantics, same float arithmetic) that the backend's det entries (detect_backend.cu)
 * are composed of. Every pointer is device memory; every call is asynchronous on the
 * backend's stream and never waits for the device; `be` must be a CUDA backend. Plain
 * C declarations, so the C test can include this header. */
#ifndef MRCNN_CUDA_DETECT_INTERNAL_H
#define MRCNN_CUDA_DETECT_INTERNAL_H

#include "mrcnn/test_hooks.h"
#include <stdint.h>

#include "mrcnn/backend.h"
#include "mrcnn/boxes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* iou (n, m) of a (n, 4) against b (m, 4), as mrcnn_box_iou (bit-identical). */
MRCNN_TEST_HOOK void mrcnn_cuda_box_iou(const mrcnn_backend *be, const float *a, int64_t n, const float *b, int64_t m, float *iou);

/* As mrcnn_box_encode / mrcnn_box_decode / mrcnn_box_clip (same order of operations;
 * logf/expf may differ from the host's by an ulp). */
MRCNN_TEST_HOOK void mrcnn_cuda_box_encode(const mrcnn_backend *be, const mrcnn_box_coder *c, int64_t n, const float *targets,
                           const float *boxes, float *deltas);
MRCNN_TEST_HOOK void mrcnn_cuda_box_decode(const mrcnn_backend *be, const mrcnn_box_coder *c, int64_t n, int k, const float *deltas,
                           const float *boxes, float *out);
MRCNN_TEST_HOOK void mrcnn_cuda_box_clip(const mrcnn_backend *be, int64_t n, float *boxes, int img_h, int img_w);

/* As mrcnn_matcher_match: iou (g, n) -> matches (n). */
MRCNN_TEST_HOOK void mrcnn_cuda_matcher_match(const mrcnn_backend *be, const float *iou, int g, int64_t n, float high, float low,
                              int allow_low_quality, int32_t *matches);

/* As mrcnn_batched_nms (idxs NULL: plain NMS) for n <= MRCNN_CUDA_NMS_MAX boxes: keep (n)
 * gets the kept indices in descending score order (ties: lower index first), *count
 * (one device int64) their number; keep rows past the count are -1. A one-image call of
 * the batched kernels below. */
#define MRCNN_CUDA_NMS_MAX 16384 // 5 levels x 2000 pre-NMS boxes fit
MRCNN_TEST_HOOK void mrcnn_cuda_nms(const mrcnn_backend *be, const float *boxes, const float *scores, const int32_t *idxs, int64_t n,
                    float thresh, int64_t *keep, int64_t *count);

/* Batched NMS, one launch of each kernel for all images: image i's candidates are rows
 * [i * cap, (i + 1) * cap) of boxes (cap, 4 per row), scores, idxs (class / level; NULL:
 * one class). n_valid (n_images) int32 on the device, or NULL for cap each: the valid
 * candidates are those whose score is above every invalid one's (the caller gives
 * invalid rows score -inf), so that they sort first. The greedy pass stops once
 * max_keep boxes are kept (the caller's top-n, which is exact: suppression only ever
 * looks back). keep (n_images, cap) int32 gets kept row numbers (within the image), -1
 * past the count; count (n_images) int32. work: cu_nms_work_bytes(n_images, cap) bytes
 * of device scratch from the caller (256-aligned), so that the caller can carve all its
 * temporaries from one scratch slot. */
size_t cu_nms_work_bytes(int n_images, int cap);
void cu_nms_batched(const mrcnn_backend *be, int n_images, int cap, const float *boxes, const float *scores,
                    const int32_t *idxs, const int32_t *n_valid, float thresh, int max_keep, void *work,
                    int32_t *keep, int32_t *count);

/* As mrcnn_mask_targets: gt_masks (n_gt, img_h, img_w) uint8, boxes (n, 4), gt_index (n)
 * -> targets (n, m, m). gt_index is not range-checked on the device. */
MRCNN_TEST_HOOK void mrcnn_cuda_mask_targets(const mrcnn_backend *be, const uint8_t *gt_masks, int n_gt, int img_h, int img_w,
                             const float *boxes, const int32_t *gt_index, int n, int m, float *targets);

/* As mrcnn_sample_balanced for one image, with the same Philox draws (rng points to the
 * stream's mrcnn_rng in device memory): labels (n) -> pos_idx (capacity min(n, (int)(batch *
 * fraction))) and neg_idx (capacity batch_size) ascending, counts (2 device int64:
 * n_pos, n_neg). n < 2^31. A one-image call of cu_sample_balanced_batched. */
MRCNN_TEST_HOOK void mrcnn_cuda_sample_balanced(const mrcnn_backend *be, const int32_t *labels, int64_t n, int batch_size,
                                float positive_fraction, const mrcnn_rng *rng, int64_t *pos_idx, int64_t *neg_idx,
                                int64_t *counts);

/* The sampler over a batch (by default the compaction is one scan over the whole batch,
 * the draws a block per (side, image), all of a block's draws at once (det_grid.h);
 * MRCNN_DET_KERNELS=legacy: one block per image for both, serial draws): image i's
 * labels are
 * labels[i * n .. (i + 1) * n), its stream rngs[i] (n_images structs in device memory:
 * the (N, MRCNN_RNG_WORDS) int32 tensor of detect_ops.h, read by the kernel);
 * pos_idx (n_images, pos_cap) and neg_idx (n_images, neg_cap) int64 ascending, counts
 * (n_images, 2) int64. pos_cap >= min(n, (int)(batch * fraction)), neg_cap >= batch.
 * work: cu_sample_work_bytes(n_images, n) bytes of device scratch. */
size_t cu_sample_work_bytes(int n_images, int64_t n);
void cu_sample_balanced_batched(const mrcnn_backend *be, int n_images, const int32_t *labels, int64_t n,
                                int batch_size, float positive_fraction, const mrcnn_rng *rngs, void *work,
                                int64_t *pos_idx, int pos_cap, int64_t *neg_idx, int neg_cap, int64_t *counts);

/* Top-k of each row of x (rows, n) fp32, as the proposal code's sort: value descending,
 * lower index first on ties. values (rows, k) and indices (rows, k) get min(n, k)
 * entries per row (rows past that untouched). k <= MRCNN_CUDA_TOPK_MAX. */
#define MRCNN_CUDA_TOPK_MAX 16384
MRCNN_TEST_HOOK void mrcnn_cuda_topk(const mrcnn_backend *be, const float *x, int rows, int64_t n, int k, float *values,
                     int64_t *indices);

/* The proposals' first stage in one launch over all (image, level) pairs (topk.cu):
 * per pair the top min(count_l, pre_nms_top_n) logits (the order of mrcnn_cuda_topk),
 * each decoded (1, 1, 1, 1) against its anchor, clipped to the image (image_hw (N, 2)
 * int32 on the device), its score the sigmoid of the logit. Image i's candidates go to
 * rows i * cap + slot0[l] + t of cand_boxes (4 per row), cand_scores and cand_levels
 * (level l), in level then rank order; a candidate dropped by min_size or score_thresh
 * gets score -inf (cu_nms_batched's invalid rows). n_valid (N) int32 counts the rest
 * (zeroed here first). */
#define CU_DET_MAX_LEVELS 8
typedef struct cu_det_levels {
    int n_levels;
    const void *logits[CU_DET_MAX_LEVELS]; // (N, count_l) in dtype logit_dt[l]
    const void *deltas[CU_DET_MAX_LEVELS]; // (N, count_l, 4) in dtype delta_dt[l]
    int logit_dt[CU_DET_MAX_LEVELS], delta_dt[CU_DET_MAX_LEVELS];
    int64_t count[CU_DET_MAX_LEVELS];   // anchors per image of level l
    int64_t anchor0[CU_DET_MAX_LEVELS]; // first anchor of level l in the (A_total, 4) anchors
    int slot0[CU_DET_MAX_LEVELS];       // first candidate slot of level l in an image's rows
    int k[CU_DET_MAX_LEVELS];           // min(count_l, pre_nms_top_n)
} cu_det_levels;
/* work: cu_proposals_work_bytes(n_images, lv) bytes of device scratch (256-aligned); free
 * again when the call returns (in stream order), so the caller may reuse it for the NMS. */
size_t cu_proposals_work_bytes(int n_images, const cu_det_levels *lv);
void cu_proposals_topk_decode(const mrcnn_backend *be, int n_images, const cu_det_levels *lv, const float *anchors,
                              const int32_t *image_hw, float min_size, float score_thresh, int cap, void *work,
                              float *cand_boxes, float *cand_scores, int32_t *cand_levels, int32_t *n_valid);

/* Which kernels sort the detection ops' candidates (topk.cu): by default one stable
 * radix sort over the whole batch (cub::DeviceRadixSort on det_sort_keys.h's keys), the
 * NMS's greedy pass a 64-box word at a time, the sampler's draws in parallel and the ROI
 * rows in one grid (det_grid.h); MRCNN_DET_KERNELS=legacy: the former block per (image,
 * level) or per image (radix select and bitonic sorts in shared memory, box-by-box
 * greedy pass, serial draws, a one-thread prefix), kept so that a GPU check can compare
 * the two. Same results either way. Read at each call, so a test can switch it; any other
 * value than "legacy" or "sort" fails. */
int cu_det_kernels_legacy(void);

/* The batch sort (topk.cu): n (key, value) pairs sorted stably by the key's low end_bit
 * bits (det_sort_end_bit(n_segments)), n < 2^31. work holds cu_det_sort_bytes(n,
 * n_segments) bytes (256-aligned); the caller writes its keys and values where
 * cu_det_sort_inputs points, then cu_det_sort returns the sorted values (inside work).
 * The CUB temporary storage is part of work (its size queried once per shape), so
 * nothing is allocated while a step runs or is captured. */
size_t cu_det_sort_bytes(int64_t n, int64_t n_segments);
void cu_det_sort_inputs(void *work, int64_t n, uint64_t **keys, int32_t **values);
const int32_t *cu_det_sort(const mrcnn_backend *be, void *work, int64_t n, int64_t n_segments);

/* COCO RLE (rle.h: runs over the column-major order, zeros first) to row-major uint8
 * masks (n_masks, h, w) of one size, 1 inside: mask i's runs are cnts[offsets[i] ..
 * offsets[i + 1]) (offsets (n_masks + 1) int64, device); n_runs = offsets[n_masks], the
 * length of cnts (given so that no host round trip is needed). Pixels past the runs'
 * total are 0. */
MRCNN_TEST_HOOK void mrcnn_cuda_rle_decode(const mrcnn_backend *be, int n_masks, int h, int w, const uint32_t *cnts,
                           const int64_t *offsets, int64_t n_runs, uint8_t *masks);

/* As mrcnn_anchors_grid; cell (n_cell, 4) is a HOST array (n_cell <= 16), anchors
 * (grid_h, grid_w, n_cell, 4) device memory. */
MRCNN_TEST_HOOK void mrcnn_cuda_anchors_grid(const mrcnn_backend *be, const float *cell, int n_cell, int grid_h, int grid_w,
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

/* Installs be->det's detection stages (detect_backend.cu); the gathers are
 * cu_fill_gather_ops's (model_gathers.cu). */
void cu_fill_detect_ops(mrcnn_backend *be);
/* Installs be->det's inference ops (proposal_rois, detect_boxes, mask_probs: infer_ops.cu). */
void cu_fill_infer_ops(mrcnn_backend *be);

#ifdef __cplusplus
}
#endif
#endif
