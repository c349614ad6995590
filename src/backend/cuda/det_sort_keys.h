/* The index arithmetic of the detection kernels that sort the whole batch at once
 * (topk.cu, detect_ops.cu): "per segment (an image, or an image's FPN level), value
 * descending, lower index first on ties" becomes ONE stable ascending radix sort
 * (cub::DeviceRadixSort, stable by contract) of 64-bit keys, segment number in the high
 * 32 bits and the value's inverted order key in the low 32. Equal keys keep their input
 * order, and the input is laid out in index order within each segment, so the lower
 * index comes first on ties: the host's stable descending order (proposals.c top_k,
 * nms.c by_score). The sort fills the GPU however few the segments are, where a block
 * per segment left most SMs idle. Plain C with MRCNN_HD (host and device), so that a CPU
 * test (tests/unit/test_det_sort_keys.c) drives the same functions the kernels call. */
#ifndef MRCNN_CU_DET_SORT_KEYS_H
#define MRCNN_CU_DET_SORT_KEYS_H

#include <stdint.h>

#include "mrcnn/rng.h" // MRCNN_HD

/* Larger float, larger key (an order-preserving map of the bits); -0 maps to +0's key,
 * since the host's float comparison ties them. NaNs land past the infinities by their
 * sign bit (the legacy device kernel's order; the host's order with NaNs is undefined). */
MRCNN_HD uint32_t det_order_key(float f) {
    if (f == 0.0f) f = 0.0f;
    union {
        float f;
        uint32_t u;
    } b;
    b.f = f;
    return (b.u & 0x80000000u) ? ~b.u : (b.u | 0x80000000u);
}

/* The sort key of value v in segment seg: segments ascending, then v descending. */
MRCNN_HD uint64_t det_sort_key(uint32_t seg, float v) { return ((uint64_t)seg << 32) | (uint32_t)~det_order_key(v); }

/* One past the highest key bit the sort must look at for n_segments segments: the value's
 * 32 and enough for the largest segment number (fewer bits, fewer radix passes). */
MRCNN_HD int det_sort_end_bit(int64_t n_segments) {
    int b = 0;
    while (b < 31 && ((int64_t)1 << b) < n_segments) b++;
    return 32 + b;
}

/* The part that holds r of consecutive parts starting at first[0 .. n) (ascending; an
 * empty part starts where the next one does): the last part starting at or before r, so
 * an empty part never gets r. */
MRCNN_HD int det_part_of(int64_t r, const int64_t *first, int n) {
    int l = 0;
    while (l + 1 < n && first[l + 1] <= r) l++;
    return l;
}

/* The same over int starts (the candidate slots of an image's rows). */
MRCNN_HD int det_part_of_i32(int64_t r, const int *first, int n) {
    int l = 0;
    while (l + 1 < n && (int64_t)first[l + 1] <= r) l++;
    return l;
}

/* Where rank t of segment (img, part) sits in the sorted batch: the batch is per_image
 * entries per image, segments laid end to end in (image, part) order, and the sort by
 * segment first keeps each segment where it was, its entries now in rank order. */
MRCNN_HD int64_t det_sorted_pos(int img, int64_t per_image, int64_t part_first, int64_t t) {
    return (int64_t)img * per_image + part_first + t;
}

/* The first entry of segment seg in a batch sorted by segment, counts[0 .. seg) entries
 * before it (the segments of dropped entries sort after every counted one). */
MRCNN_HD int64_t det_segment_start(const int32_t *counts, int seg) {
    int64_t s = 0;
    for (int i = 0; i < seg; i++) s += counts[i];
    return s;
}

/* The balanced sampler's compaction as one exclusive scan over the batch: entry p's
 * packed count is positives (label > 0) in the high 32 bits, negatives (label 0) in the
 * low 32, so one sum counts both; per image (n entries, fewer than 2^31) neither field
 * carries into the other. After the scan, the rank of entry p among its image's
 * positives (or negatives) is the difference from the scan at the image's first entry:
 * the order of the stable compaction, index order. */
MRCNN_HD uint64_t det_sample_count(int32_t label) {
    return label > 0 ? (uint64_t)1 << 32 : (label == 0 ? (uint64_t)1 : (uint64_t)0);
}
MRCNN_HD int64_t det_count_pos(uint64_t c) { return (int64_t)(c >> 32); }
MRCNN_HD int64_t det_count_neg(uint64_t c) { return (int64_t)(c & 0xffffffffu); }

#endif
