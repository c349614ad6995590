/* The index arithmetic of the detection kernels that replaced a serial pass per image
 * (detect_ops.cu: the NMS's greedy pass and the balanced sampler's draws;
 * detect_backend.cu: the ROI sampler's rows). Plain C with MRCNN_HD (host and device),
 * so that a CPU test (tests/unit/test_det_grid.c) drives the very functions the kernels
 * call against the serial passes they replace (MRCNN_DET_KERNELS=legacy keeps those).
 *
 * - NMS: the greedy pass is sequential per image, but within a 64-box word of the
 *   suppression bitmask it needs only the word's diagonal block: det_nms_word settles a
 *   word in registers, one iteration per KEPT box (not per box), and the kept boxes'
 *   output rows come from det_nms_rank, so that their global reads and writes happen in
 *   parallel instead of one dependent read per kept box.
 * - Sampler: the host's partial Fisher-Yates (swap i with draw i >= i, i ascending)
 *   reads its draws from counter-based Philox streams, so the draws do not depend on the
 *   swaps; det_fy_source says which original position ends at position i without
 *   doing the swaps, so every position is found at once.
 * - ROI rows: each image's first row is the sum of the sampled counts before it
 *   (det_roi_offsets), computed where it is needed instead of by a one-thread kernel. */
#ifndef MRCNN_CU_DET_GRID_H
#define MRCNN_CU_DET_GRID_H

#include <stdint.h>

#include "mrcnn/rng.h" // MRCNN_HD

/* Trailing zeros of x != 0, and the set bits of x. */
MRCNN_HD int det_ctz64(uint64_t x) {
#ifdef __CUDA_ARCH__
    return __ffsll((long long)x) - 1;
#else
    return __builtin_ctzll(x);
#endif
}

MRCNN_HD int det_popc64(uint64_t x) {
#ifdef __CUDA_ARCH__
    return __popcll((unsigned long long)x);
#else
    return __builtin_popcountll(x);
#endif
}

/* The low lim bits (lim in [0, 64]): the boxes a word holds when fewer than 64 remain. */
MRCNN_HD uint64_t det_word_valid(int lim) {
    return lim >= 64 ? ~(uint64_t)0 : (lim <= 0 ? 0 : (((uint64_t)1 << lim) - 1));
}

/* The greedy pass over one word of 64 boxes in sorted order: box c (c < lim) is kept
 * unless bit c of removed (suppressed by a box kept in an earlier word) is set or a box
 * kept before it in this word suppresses it (diag[c']: the later boxes of the word that
 * box c' suppresses). At most budget (>= 1) boxes are kept, the first ones: the caller's
 * top-n, after which the legacy pass stops. Returns the kept boxes' bits. */
MRCNN_HD uint64_t det_nms_word(uint64_t removed, const uint64_t *diag, int lim, int64_t budget) {
    const uint64_t valid = det_word_valid(lim);
    uint64_t kept = 0, avail = ~removed & valid;
    int64_t n = 0;
    while (avail && n < budget) {
        const int c = det_ctz64(avail);
        kept |= (uint64_t)1 << c;
        n++;
        removed |= diag[c];
        /* boxes after c only; (2 << 63) wraps to 0, leaving none */
        avail = ~removed & valid & ~(((uint64_t)2 << c) - 1);
    }
    return kept;
}

/* The place of kept box c among the word's kept boxes (its output row past the kept
 * boxes of earlier words). */
MRCNN_HD int det_nms_rank(uint64_t kept, int c) { return det_popc64(kept & (((uint64_t)1 << c) - 1)); }

/* The partial Fisher-Yates shuffle: steps i = 0, 1, ... swap positions i and draw[i]
 * (draw[i] >= i). Position i is never touched after step i, so it ends with the value
 * that position draw[i] held before step i; a position p >= i changed before step i
 * only as the draw of an earlier step q (taking what position q held before step q).
 * Returns the original position whose value ends at position i: O(i) reads, no swaps,
 * so all positions can be found at once. */
MRCNN_HD int64_t det_fy_source(const int32_t *draw, int64_t i) {
    int64_t p = draw[i];
    for (int64_t q = i - 1; q >= 0; q--)
        if (draw[q] == p) p = q;
    return p;
}

/* How many of np positives and nn negatives an image draws: the positives up to
 * want_pos, the negatives up to the rest of the batch (the host's sample_balanced). */
MRCNN_HD void det_sample_take(int64_t np, int64_t nn, int batch_size, int64_t want_pos, int64_t *kp, int64_t *kn) {
    *kp = np < want_pos ? np : want_pos;
    const int64_t want_neg = batch_size - *kp;
    *kn = nn < want_neg ? nn : want_neg;
}

/* Image img's first output row (*off) and first fg row (*foff) among the sampled rows of
 * the batch, images end to end: the counts (n_images, 2: positives, negatives) of the
 * images before it. */
MRCNN_HD void det_roi_offsets(const int64_t *cnt, int img, int32_t *off, int32_t *foff) {
    int32_t r = 0, f = 0;
    for (int i = 0; i < img; i++) {
        r += (int32_t)(cnt[2 * i] + cnt[2 * i + 1]);
        f += (int32_t)cnt[2 * i];
    }
    *off = r;
    *foff = f;
}

/* Entries of ascending a[0..n) below v. */
MRCNN_HD int64_t det_count_below(const int64_t *a, int64_t n, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (a[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Sampled entry t of an image (t < kp: positive t, else negative t - kp; both lists
 * ascending, disjoint) -> its rank among the image's rows in ascending candidate order
 * (the host's sorted selection): its place in its own list plus the other list's
 * entries below it. */
MRCNN_HD int64_t det_roi_rank(const int64_t *pos, int64_t kp, const int64_t *neg, int64_t kn, int64_t t) {
    const int positive = t < kp;
    const int64_t a = positive ? t : t - kp, cidx = positive ? pos[a] : neg[a];
    return a + (positive ? det_count_below(neg, kn, cidx) : det_count_below(pos, kp, cidx));
}

/* The padding row that slot t of image img covers in a batch of per_image slots per
 * image, used rows [0, used) first; -1 when t is not a slot or its row is used. Slots
 * (img, t < per_image) cover each row of [0, n_images * per_image) once. */
MRCNN_HD int64_t det_pad_row(int img, int64_t t, int64_t per_image, int64_t used) {
    const int64_t r = (int64_t)img * per_image + t;
    return t < per_image && r >= used ? r : -1;
}

#endif
