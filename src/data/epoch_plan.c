/* Which images each rank takes at each step. Training: a permutation per epoch keyed
 * by (seed, epoch), the same on every rank; the leftover after the last full global
 * batch is dropped, so that every rank runs the same number of steps. With aspect
 * grouping, landscape and portrait images fill separate buckets and a full bucket
 * becomes a step (the two leftovers are dropped). Evaluation: dataset order, every
 * image exactly once; the last step is padded with repeats marked invalid. */
#include "data_internal.h"

#include <stdlib.h>

#include "mrcnn/check.h"
#include "mrcnn/rng.h"

int64_t data_plan_steps(int64_t n, int64_t global_batch, int shuffle, int grouping, const uint8_t *landscape) {
    MRCNN_CHECK(n > 0 && global_batch > 0, "a plan needs images (%lld) and a batch (%lld)", (long long)n,
                (long long)global_batch);
    if (!shuffle) return (n + global_batch - 1) / global_batch;
    if (!grouping) return n / global_batch;
    int64_t l = 0;
    for (int64_t i = 0; i < n; i++) l += landscape[i] != 0;
    return l / global_batch + (n - l) / global_batch;
}

int64_t data_plan_epoch(int64_t n, int64_t global_batch, uint64_t seed, int64_t epoch, int shuffle, int grouping,
                        const uint8_t *landscape, int64_t *out, uint8_t *valid) {
    const int64_t steps = data_plan_steps(n, global_batch, shuffle, grouping, landscape);
    if (!shuffle) {
        for (int64_t k = 0; k < steps * global_batch; k++) {
            out[k] = k < n ? k : k % n;
            valid[k] = k < n;
        }
        return steps;
    }
    int64_t *perm = MRCNN_MALLOC(sizeof(int64_t) * (size_t)n, "epoch permutation");
    mrcnn_rng r = mrcnn_rng_make(seed, (uint32_t)epoch, 0, MRCNN_RNG_SHUFFLE);
    mrcnn_rng_permutation(&r, n, perm);
    if (!grouping) {
        for (int64_t k = 0; k < steps * global_batch; k++) out[k] = perm[k], valid[k] = 1;
    } else {
        int64_t *bucket[2], fill[2] = {0, 0}, done = 0;
        bucket[0] = MRCNN_MALLOC(sizeof(int64_t) * (size_t)global_batch, "aspect bucket");
        bucket[1] = MRCNN_MALLOC(sizeof(int64_t) * (size_t)global_batch, "aspect bucket");
        for (int64_t i = 0; i < n; i++) {
            const int b = landscape[perm[i]] != 0;
            bucket[b][fill[b]++] = perm[i];
            if (fill[b] == global_batch) {
                for (int64_t k = 0; k < global_batch; k++) out[done * global_batch + k] = bucket[b][k], valid[done * global_batch + k] = 1;
                done++;
                fill[b] = 0;
            }
        }
        MRCNN_CHECK(done == steps, "aspect grouping made %lld steps, expected %lld", (long long)done, (long long)steps);
        free(bucket[0]);
        free(bucket[1]);
    }
    free(perm);
    return steps;
}
