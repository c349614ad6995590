/* Non-maximum suppression as torchvision's CPU kernel (nms_kernel.cpp): a stable sort by
 * score, then greedy suppression of IoU > thresh, with the same float arithmetic (the
 * IoU is box_math.h's, as in the CUDA kernel). The batched form keeps classes apart by
 * running NMS within each class, which is what torchvision's coordinate-offset trick
 * computes, and returns the global score order. */
#include <stdlib.h>

#include "mrcnn/boxes.h"
#include "mrcnn/check.h"

typedef struct {
    float score;
    int32_t cls;
    int64_t idx;
} nms_item;

/* Score descending, then lower index first: a stable descending sort. */
static int by_score(const void *pa, const void *pb) {
    const nms_item *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Class, then position in the score order (idx holds the position here). */
static int by_class(const void *pa, const void *pb) {
    const nms_item *a = pa, *b = pb;
    if (a->cls != b->cls) return a->cls < b->cls ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Greedy NMS over order[0..n) (box indices, already by descending score); sets
 * kept[box] = 1 for the survivors. */
static void nms_sorted(const float *boxes, const int64_t *order, int64_t n, float thresh, unsigned char *kept,
                       unsigned char *suppressed) {
    for (int64_t a = 0; a < n; a++) suppressed[a] = 0;
    for (int64_t a = 0; a < n; a++) {
        if (suppressed[a]) continue;
        const float *bi = boxes + 4 * order[a];
        kept[order[a]] = 1;
        const float iarea = mrcnn_box_area(bi);
        for (int64_t b = a + 1; b < n; b++) {
            if (suppressed[b]) continue;
            const float *bj = boxes + 4 * order[b];
            if (mrcnn_box_iou_areas(bi, iarea, bj, mrcnn_box_area(bj)) > thresh) suppressed[b] = 1;
        }
    }
}

int64_t mrcnn_batched_nms(const float *boxes, const float *scores, const int32_t *idxs, int64_t n,
                          float thresh, int64_t *keep) {
    MRCNN_CHECK(n >= 0, "nms: negative box count %lld", (long long)n);
    if (n == 0) return 0;
    MRCNN_CHECK(boxes && scores && keep, "nms: NULL argument");
    nms_item *items = MRCNN_MALLOC((size_t)n * sizeof(nms_item), "nms items");
    int64_t *order = MRCNN_MALLOC((size_t)n * sizeof(int64_t), "nms order");
    int64_t *seg = MRCNN_MALLOC((size_t)n * sizeof(int64_t), "nms class segment");
    unsigned char *kept = MRCNN_CALLOC((size_t)n, 2, "nms flags");
    unsigned char *suppressed = kept + n;
    for (int64_t i = 0; i < n; i++) items[i] = (nms_item){scores[i], idxs ? idxs[i] : 0, i};
    qsort(items, (size_t)n, sizeof(nms_item), by_score);
    for (int64_t i = 0; i < n; i++) order[i] = items[i].idx;
    if (idxs) {
        /* Regroup by class keeping the score order inside each class. */
        for (int64_t i = 0; i < n; i++) items[i].idx = i;
        qsort(items, (size_t)n, sizeof(nms_item), by_class);
        int64_t start = 0;
        while (start < n) {
            int64_t end = start;
            while (end < n && items[end].cls == items[start].cls) {
                seg[end - start] = order[items[end].idx];
                end++;
            }
            nms_sorted(boxes, seg, end - start, thresh, kept, suppressed);
            start = end;
        }
    } else {
        nms_sorted(boxes, order, n, thresh, kept, suppressed);
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (kept[order[i]]) keep[k++] = order[i];
    free(items);
    free(order);
    free(seg);
    free(kept);
    return k;
}
