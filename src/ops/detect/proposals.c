/* RPN proposals: torchvision's filter_proposals, step for step and in its order
 * (top-k per level, sigmoid, clip, small-box removal, score threshold, NMS per level,
 * top-N), writing fixed-capacity outputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/boxes.h"
#include "mrcnn/check.h"
#include "mrcnn/proposals.h"

typedef struct {
    float v;
    int64_t i;
} topk_item;

/* Descending value, lower index first on ties. */
static int by_value_desc(const void *pa, const void *pb) {
    const topk_item *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* The k-th largest of v[0..n) (1 <= k <= n) by quickselect on scratch (n floats). */
static float kth_largest(const float *v, int64_t n, int64_t k, float *scratch) {
    memcpy(scratch, v, (size_t)n * sizeof(float));
    int64_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = scratch[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (scratch[i] > pivot) i++;
            while (scratch[j] < pivot) j--;
            if (i <= j) {
                float t = scratch[i];
                scratch[i] = scratch[j];
                scratch[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            break;
    }
    return scratch[want];
}

/* items gets the top k of v (descending, ties by lower index), as a stable top-k:
 * everything above the k-th value, then the equal ones in index order. */
static int64_t top_k(const float *v, int64_t n, int64_t k, topk_item *items, float *scratch) {
    if (k <= 0) return 0;
    float kth = kth_largest(v, n, k, scratch);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (v[i] > kth) items[m++] = (topk_item){v[i], i};
    for (int64_t i = 0; i < n && m < k; i++)
        if (v[i] == kth) items[m++] = (topk_item){v[i], i};
    qsort(items, (size_t)m, sizeof(topk_item), by_value_desc);
    return m; // below k only when NaN logits make the order undefined
}

void mrcnn_rpn_proposals(const mrcnn_proposal_params *p, int n_images, int n_levels, const int64_t *level_counts,
                         const float *const *objectness, const float *const *deltas, const float *anchors,
                         const int *image_hw, float *boxes, float *scores, int64_t *counts) {
    MRCNN_CHECK(p && level_counts && objectness && deltas && anchors && image_hw && boxes && counts,
                "rpn_proposals: NULL argument");
    MRCNN_CHECK(n_images > 0 && n_levels > 0, "rpn_proposals: %d images, %d levels", n_images, n_levels);
    MRCNN_CHECK(p->pre_nms_top_n > 0 && p->post_nms_top_n > 0, "rpn_proposals: pre/post NMS top-n %d/%d must be positive",
                p->pre_nms_top_n, p->post_nms_top_n);
    int64_t max_level = 0, cand_cap = 0;
    for (int l = 0; l < n_levels; l++) {
        MRCNN_CHECK(level_counts[l] >= 0, "rpn_proposals: level %d has negative count", l);
        if (level_counts[l] > max_level) max_level = level_counts[l];
        cand_cap += level_counts[l] < p->pre_nms_top_n ? level_counts[l] : p->pre_nms_top_n;
    }
    const int64_t P = p->post_nms_top_n;
    // images are independent: one per thread, each with its own buffers (same results
    // for any thread count; ~15 ms an image at 800x1216 with 2000 per level)
#pragma omp parallel
    {
        topk_item *items = MRCNN_MALLOC((size_t)(max_level ? max_level : 1) * sizeof(topk_item), "rpn top-k");
        float *scratch = MRCNN_MALLOC((size_t)(max_level ? max_level : 1) * sizeof(float), "rpn top-k scratch");
        float *cb = MRCNN_MALLOC((size_t)(cand_cap ? cand_cap : 1) * 4 * sizeof(float), "rpn candidate boxes");
        float *cs = MRCNN_MALLOC((size_t)(cand_cap ? cand_cap : 1) * sizeof(float), "rpn candidate scores");
        int32_t *cl = MRCNN_MALLOC((size_t)(cand_cap ? cand_cap : 1) * sizeof(int32_t), "rpn candidate levels");
        int64_t *keep = MRCNN_MALLOC((size_t)(cand_cap ? cand_cap : 1) * sizeof(int64_t), "rpn keep");
#pragma omp for schedule(dynamic, 1)
        for (int n = 0; n < n_images; n++) {
            const int img_h = image_hw[2 * n], img_w = image_hw[2 * n + 1];
            int64_t nc = 0, anchor0 = 0;
            const mrcnn_box_coder coder = mrcnn_box_coder_make(1.0f, 1.0f, 1.0f, 1.0f);
            for (int l = 0; l < n_levels; l++) {
                const int64_t cnt = level_counts[l];
                const float *obj = objectness[l] + (int64_t)n * cnt;
                const float *del = deltas[l] + (int64_t)n * cnt * 4;
                int64_t k = cnt < p->pre_nms_top_n ? cnt : p->pre_nms_top_n;
                k = top_k(obj, cnt, k, items, scratch);
                for (int64_t t = 0; t < k; t++) {
                    int64_t i = items[t].i;
                    float box[4];
                    mrcnn_box_decode(&coder, 1, 1, del + 4 * i, anchors + 4 * (anchor0 + i), box);
                    mrcnn_box_clip(1, box, img_h, img_w);
                    float s = 1.0f / (1.0f + expf(-items[t].v));
                    if (!mrcnn_box_is_large(box, p->min_size) || !(s >= p->score_thresh)) continue;
                    memcpy(cb + 4 * nc, box, sizeof box);
                    cs[nc] = s;
                    cl[nc] = l;
                    nc++;
                }
                anchor0 += cnt;
            }
            int64_t nk = mrcnn_batched_nms(cb, cs, cl, nc, p->nms_thresh, keep);
            if (nk > P) nk = P;
            float *ob = boxes + (int64_t)n * P * 4;
            float *os = scores ? scores + (int64_t)n * P : NULL;
            memset(ob, 0, (size_t)P * 4 * sizeof(float));
            if (os) memset(os, 0, (size_t)P * sizeof(float));
            for (int64_t t = 0; t < nk; t++) {
                memcpy(ob + 4 * t, cb + 4 * keep[t], 4 * sizeof(float));
                if (os) os[t] = cs[keep[t]];
            }
            counts[n] = nk;
        }
        free(items);
        free(scratch);
        free(cb);
        free(cs);
        free(cl);
        free(keep);
    }
}
