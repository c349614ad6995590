/* Balanced positive/negative sampling (torchvision's BalancedPositiveNegativeSampler) of
 * the RPN's anchors (rpn_targets.c) and the box head's ROIs (roi_sampling.c), on the
 * project RNG, so that a choice depends only on (seed, epoch, image, purpose). */
#include <stdlib.h>

#include "mrcnn/boxes.h"
#include "mrcnn/check.h"

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Chooses k of the cand[0..m) in place (partial Fisher-Yates from draw `base`) and
 * writes them ascending to out. k == m takes all without drawing. */
static void choose(int64_t *cand, int64_t m, int64_t k, const mrcnn_rng *rng, uint64_t base, int64_t *out) {
    if (k < m) {
        for (int64_t i = 0; i < k; i++) {
            int64_t j = i + (int64_t)mrcnn_rng_below(rng, base + (uint64_t)i, (uint32_t)(m - i));
            int64_t t = cand[i];
            cand[i] = cand[j];
            cand[j] = t;
        }
        qsort(cand, (size_t)k, sizeof(int64_t), cmp_i64);
    }
    for (int64_t i = 0; i < k; i++) out[i] = cand[i];
}

void mrcnn_sample_balanced(const int32_t *labels, int64_t n, int batch_size, float positive_fraction,
                           const mrcnn_rng *rng, int64_t *pos_idx, int64_t *n_pos, int64_t *neg_idx,
                           int64_t *n_neg) {
    MRCNN_CHECK(n >= 0 && batch_size >= 0, "sample_balanced: negative count %lld or batch size %d", (long long)n,
                batch_size);
    MRCNN_CHECK(positive_fraction >= 0 && positive_fraction <= 1, "sample_balanced: positive fraction %g outside [0, 1]",
                (double)positive_fraction);
    MRCNN_CHECK(n_pos && n_neg && (n == 0 || labels), "sample_balanced: NULL argument");
    MRCNN_CHECK(n < (int64_t)UINT32_MAX, "sample_balanced: %lld candidates exceed the RNG's 32-bit range", (long long)n);
    int64_t np = 0, nn = 0;
    for (int64_t i = 0; i < n; i++) {
        np += labels[i] > 0;
        nn += labels[i] == 0;
    }
    /* int(batch * fraction) in Python truncates the double product. */
    int64_t want_pos = (int64_t)((double)batch_size * (double)positive_fraction);
    int64_t kp = np < want_pos ? np : want_pos;
    int64_t want_neg = batch_size - kp;
    int64_t kn = nn < want_neg ? nn : want_neg;
    MRCNN_CHECK(kp == 0 || pos_idx, "sample_balanced: NULL pos_idx");
    MRCNN_CHECK(kn == 0 || neg_idx, "sample_balanced: NULL neg_idx");
    MRCNN_CHECK(rng || (kp == np && kn == nn), "sample_balanced: NULL rng but random choices are needed");
    int64_t *pos = MRCNN_MALLOC((size_t)(np ? np : 1) * sizeof(int64_t), "sampler positives");
    int64_t *neg = MRCNN_MALLOC((size_t)(nn ? nn : 1) * sizeof(int64_t), "sampler negatives");
    np = nn = 0;
    for (int64_t i = 0; i < n; i++) {
        if (labels[i] > 0)
            pos[np++] = i;
        else if (labels[i] == 0)
            neg[nn++] = i;
    }
    choose(pos, np, kp, rng, 0, pos_idx);
    choose(neg, nn, kn, rng, (uint64_t)1 << 40, neg_idx);
    *n_pos = kp;
    *n_neg = kn;
    free(pos);
    free(neg);
}
