/* The host half of a training step (mrcnn_model_stage, model.h): how a batch's images,
 * ground truth (compact masks: mask_crops.c), sampling streams and pinned proposals are
 * laid out in one staging buffer and uploaded, the anchors cache, and the shape key that
 * says when a captured device half may be replayed. */
#include "mrcnn/anchors.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/model.h"
#include "mrcnn/rng.h"
#include "mrcnn/roi_targets.h"
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- anchors ------------------------------------------------------------------ */

/* The FPN levels' sizes of an H x W batch (H, W divisible by 32) without running the
 * network: P2..P5 at strides 4..32 (resnet.c), P6 a 1x1 stride-2 pool of P5 (fpn.c).
 * run_features checks them against the backbone's outputs. */
void model_level_sizes(int H, int W, int *gh, int *gw) {
    for (int l = 0; l < 4; l++) {
        gh[l] = H >> (l + 2);
        gw[l] = W >> (l + 2);
    }
    mrcnn_pool2d_desc pd = {1, gh[3], gw[3], 1, 1, 2, 0};
    gh[4] = mrcnn_pool2d_out_h(&pd);
    gw[4] = mrcnn_pool2d_out_w(&pd);
}

/* The anchors of an H x W batch: from the cache, or generated and uploaded once. The
 * entry replaced is a free one, else the least recently used one that no staged slot
 * points to (a staged slot's run reads its anchors). */
const mrcnn_model_anchors *model_anchors(mrcnn_model *m, int H, int W) {
    const mrcnn_backend *be = m->be;
    m->anchors_clock++;
    mrcnn_model_anchors *e = NULL;
    for (int i = 0; i < MRCNN_MODEL_ANCHOR_CACHE; i++)
        if (m->anchors[i].img_h == H && m->anchors[i].img_w == W) {
            m->anchors[i].used = m->anchors_clock;
            return &m->anchors[i];
        }
    for (int i = 0; i < MRCNN_MODEL_ANCHOR_CACHE; i++) {
        mrcnn_model_anchors *c = &m->anchors[i];
        bool held = false;
        for (int k = 0; k < m->n_staged; k++) held |= m->staged[k].ready && m->staged[k].anchors == c;
        if (held) continue;
        if (!e || c->img_h == 0 || (e->img_h != 0 && c->used < e->used)) e = c;
        if (c->img_h == 0) break;
    }
    MRCNN_CHECK(e != NULL, "anchors: all %d cached sizes are held by staged micro-batches", MRCNN_MODEL_ANCHOR_CACHE);
    if (e->dev.data) be->mem.free(be, e->dev.data);
    free(e->host);
    memset(e, 0, sizeof *e);
    int gh[MRCNN_FPN_LEVELS], gw[MRCNN_FPN_LEVELS];
    model_level_sizes(H, W, gh, gw);
    const mrcnn_config *c = &m->cfg;
    e->n = mrcnn_anchors_generate(MRCNN_FPN_LEVELS, c->anchor_sizes.v, c->anchor_ratios.v, c->anchor_ratios.n, gh,
                                  gw, H, W, NULL, NULL);
    e->host = MRCNN_MALLOC((size_t)(e->n ? e->n : 1) * 4 * sizeof(float), "anchors");
    mrcnn_anchors_generate(MRCNN_FPN_LEVELS, c->anchor_sizes.v, c->anchor_ratios.v, c->anchor_ratios.n, gh, gw, H, W,
                           e->host, e->level_counts);
    e->dev = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, be->device, 2, (int64_t[]){e->n, 4});
    e->dev.data = be->mem.alloc(be, mrcnn_tensor_nbytes(&e->dev) ? mrcnn_tensor_nbytes(&e->dev) : 1, "anchors");
    if (e->n) be->mem.write(be, &e->dev, e->host);
    e->img_h = H;
    e->img_w = W;
    e->used = m->anchors_clock;
    return e;
}

/* ---- staging (the host half of a training step) --------------------------------- */

/* The gt capacity bucket the staging buffer makes room for when it is (re)allocated: a
 * batch with more instances than the common bucket then stages at the same base, and the
 * common shape keeps its key (and its captured graph). COCO's batches rarely exceed it. */
#define MRCNN_STAGE_GT_RESERVE 64
/* The least mask pool a slot reserves (compact masks, bytes): COCO's batches of a few
 * dozen instances fit, so the pool, and the shape key with it, rarely grows. */
#define MRCNN_STAGE_POOL_MIN ((size_t)4 << 20)

static size_t take(size_t *off, size_t bytes) {
    size_t o = *off;
    *off += (bytes + 255) / 256 * 256;
    return o;
}

static uint64_t fnv1a(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The staging buffer's layout, a function of the shapes and the mask pool's capacity
 * alone: byte offsets from the base (256-byte aligned), end = the bytes it spans. The
 * pool comes last, so that one upload of [small, pool + its used bytes) carries it. */
typedef struct stage_layout {
    size_t img;   // (N, H, W, 3) fp32
    size_t small; // the host mirror covers [small, end)
    size_t hw, rng, box, lab, cnt, crop, pp, pc, pool, end;
} stage_layout;

static stage_layout stage_layout_of(int N, int H, int W, int G, int P, size_t pool_cap) {
    stage_layout l;
    size_t off = 0;
    l.img = take(&off, (size_t)N * H * W * 3 * sizeof(float));
    l.small = off;
    l.hw = take(&off, (size_t)N * 2 * sizeof(int32_t));
    l.rng = take(&off, (size_t)2 * N * MRCNN_RNG_WORDS * sizeof(int32_t));
    l.box = take(&off, (size_t)N * G * 4 * sizeof(float));
    l.lab = take(&off, (size_t)N * G * sizeof(int32_t));
    l.cnt = take(&off, (size_t)N * sizeof(int32_t));
    l.crop = take(&off, (size_t)N * G * MRCNN_MASK_CROP_WORDS * sizeof(int32_t));
    l.pp = take(&off, (size_t)N * P * 4 * sizeof(float));
    l.pc = take(&off, (size_t)N * sizeof(int32_t));
    l.pool = take(&off, pool_cap);
    l.end = off;
    return l;
}

/* The images into the staging buffer: an upload from the host, or a copy of the
 * caller's device tensor (on a GPU an fp32 -> fp32 cast, which copies exactly; the CPU
 * backend's memory is the host's, so there a plain copy, which no more uploads than the
 * GPU's does, and which its cast cannot be: it rounds to the storage dtype). */
static void stage_images(mrcnn_model *m, const mrcnn_batch *b, mrcnn_tensor *dst) {
    const mrcnn_backend *be = m->be;
    if (b->host_images) {
        be->mem.write(be, dst, b->host_images);
        return;
    }
    const mrcnn_tensor *x = &b->images;
    MRCNN_CHECK(x->data && x->dtype == MRCNN_DTYPE_F32 && x->device == be->device && mrcnn_tensor_is_contiguous(x),
                "train step: the batch's images are neither host_images nor a contiguous fp32 tensor of the %s "
                "backend", be->name);
    if (be->device == MRCNN_DEVICE_CPU) memcpy(dst->data, x->data, mrcnn_tensor_nbytes(dst));
    else be->nn.cast(be, x, dst);
}

/* Slot `slot`, made (zeroed) when the model has fewer. */
static mrcnn_staged *stage_slot(mrcnn_model *m, int slot) {
    if (slot >= m->n_staged) {
        m->staged = MRCNN_REALLOC(m->staged, sizeof *m->staged * (size_t)(slot + 1), "staging slots");
        memset(m->staged + m->n_staged, 0, sizeof *m->staged * (size_t)(slot + 1 - m->n_staged));
        m->n_staged = slot + 1;
    }
    return &m->staged[slot];
}

/* The masks as crops (compact ground truth): their rectangles into sg->crops, which say
 * the pool's need; the pool's capacity only grows (a power of two), and with it the key.
 * gt_masks (N * G): each mask's first row, read in place (the gt's own buffer: the one
 * host copy is the crop's); gt_strides, gt_counts (N): each image's row stride and
 * count. Returns the pool bytes used. */
static size_t stage_crops(mrcnn_staged *sg, const mrcnn_batch *b, int N, int G, int H, int W,
                          const uint8_t **gt_masks, int *gt_strides, int *gt_counts) {
    if (N > sg->crop_cap_images || G > sg->crop_cap_gt) {
        free(sg->crops);
        sg->crops = MRCNN_MALLOC(sizeof *sg->crops * (size_t)N * G * MRCNN_MASK_CROP_WORDS, "mask crops");
        sg->crop_cap_images = N;
        sg->crop_cap_gt = G;
    }
    for (int i = 0, at = 0; i < N; i++) { // at: image i's first entry of b->mask_rows
        const mrcnn_image_gt *g = &b->gt[i];
        int ih = b->image_hw[2 * i], iw = b->image_hw[2 * i + 1];
        MRCNN_CHECK(g->n >= 0 && (g->n == 0 || (g->boxes && g->labels)), "train step: image %d has %d instances "
                    "but no boxes or labels", i, g->n);
        MRCNN_CHECK(g->n == 0 || g->masks != NULL || b->mask_rows != NULL,
                    "mask loss: image %d has %d instances but no masks", i, g->n);
        MRCNN_CHECK(ih > 0 && iw > 0 && ih <= H && iw <= W, "train step: image %d is %dx%d in a %dx%d batch", i, ih,
                    iw, H, W);
        gt_strides[i] = b->mask_rows ? b->mask_stride : iw;
        for (int j = 0; j < g->n; j++)
            gt_masks[(size_t)i * G + j] = b->mask_rows ? b->mask_rows[at + j] : g->masks + (size_t)j * ih * iw;
        gt_counts[i] = g->n;
        at += g->n;
    }
    const size_t pool_used = mrcnn_mask_crops_make(gt_masks, gt_strides, gt_counts, b->image_hw, N, G, sg->crops);
    if (pool_used > sg->pool_cap || !sg->pool_cap) {
        size_t cap = MRCNN_STAGE_POOL_MIN > 2 * sg->pool_cap ? MRCNN_STAGE_POOL_MIN : 2 * sg->pool_cap;
        while (cap < pool_used) cap *= 2;
        sg->pool_cap = cap;
    }
    return pool_used;
}

/* Room for layout L in the slot's device buffer and its host mirror. */
static void stage_reserve(const mrcnn_backend *be, mrcnn_staged *sg, const stage_layout *L, int N, int H, int W,
                          int G, int P) {
    if (L->end > sg->cap) {
        /* A new base changes the key of every shape staged in this slot (each is captured
         * again), so the buffer grows with room to spare: at least the layout of gt bucket
         * MRCNN_STAGE_GT_RESERVE and at least twice its old size. */
        size_t want =
            stage_layout_of(N, H, W, G > MRCNN_STAGE_GT_RESERVE ? G : MRCNN_STAGE_GT_RESERVE, P, sg->pool_cap).end;
        if (want < 2 * sg->cap) want = 2 * sg->cap;
        // stream-ordered: the old buffer is released after the work queued on it
        if (sg->buf) be->mem.free(be, sg->buf);
        sg->buf = be->mem.alloc(be, want, "staged batch");
        sg->cap = want;
    }
    if (L->end - L->small > sg->host_cap) {
        free(sg->host);
        sg->host = MRCNN_MALLOC(L->end - L->small, "staged batch (host)");
        sg->host_cap = L->end - L->small;
    }
}

/* The host mirror of everything after the images: image sizes, the sampling streams, the
 * ground truth (boxes and labels padded to G, the crops and their pool), the pinned
 * proposals. */
static void stage_fill_host(const mrcnn_model *m, mrcnn_staged *sg, const stage_layout *L, const mrcnn_batch *b,
                            int N, int G, int P, const uint8_t *const *gt_masks, const int *gt_strides,
                            const int *gt_counts) {
    uint8_t *h = sg->host - L->small; // h + o: the host copy of offset o
    int32_t *hw = (int32_t *)(h + L->hw);
    for (int i = 0; i < N; i++) {
        hw[2 * i] = b->image_hw[2 * i];
        hw[2 * i + 1] = b->image_hw[2 * i + 1];
    }
    mrcnn_rng *rng = (mrcnn_rng *)(h + L->rng);
    for (int i = 0; i < N; i++) {
        int64_t index = b->image_index ? b->image_index[i] : i;
        rng[i] = mrcnn_rng_make((uint64_t)m->cfg.seed, b->epoch, index, MRCNN_RNG_RPN_SAMPLE);
        rng[N + i] = mrcnn_rng_make((uint64_t)m->cfg.seed, b->epoch, index, MRCNN_RNG_ROI_SAMPLE);
    }
    float *boxes = (float *)(h + L->box);
    int32_t *labels = (int32_t *)(h + L->lab), *counts = (int32_t *)(h + L->cnt);
    memset(boxes, 0, (size_t)N * G * 4 * sizeof(float));
    for (int i = 0; i < N * G; i++) labels[i] = -1;
    for (int i = 0; i < N; i++) {
        const mrcnn_image_gt *g = &b->gt[i];
        counts[i] = g->n;
        if (g->n) {
            memcpy(boxes + (size_t)i * G * 4, g->boxes, (size_t)g->n * 4 * sizeof(float));
            memcpy(labels + (size_t)i * G, g->labels, (size_t)g->n * sizeof(int32_t));
        }
    }
    memcpy(h + L->crop, sg->crops, sizeof *sg->crops * (size_t)N * G * MRCNN_MASK_CROP_WORDS);
    mrcnn_mask_crops_copy(gt_masks, gt_strides, gt_counts, b->image_hw, N, G, sg->crops, h + L->pool);
    if (P) {
        memcpy(h + L->pp, m->pinned_proposals, (size_t)N * P * 4 * sizeof(float));
        int32_t *pc = (int32_t *)(h + L->pc);
        for (int i = 0; i < N; i++) pc[i] = (int32_t)m->pinned_counts[i];
    }
}

/* The slot's tensors: views into its device buffer at layout L. */
static void stage_views(mrcnn_staged *sg, const stage_layout *L, mrcnn_device d, int N, int H, int W, int G, int P) {
    char *dev = sg->buf;
    sg->n_images = N;
    sg->img_h = H;
    sg->img_w = W;
    sg->gt_cap = G;
    sg->images = mrcnn_tensor_view(dev + L->img, MRCNN_DTYPE_F32, d, 4, (int64_t[]){N, H, W, 3});
    sg->image_hw = mrcnn_tensor_view(dev + L->hw, MRCNN_DTYPE_I32, d, 2, (int64_t[]){N, 2});
    sg->rngs = mrcnn_tensor_view(dev + L->rng, MRCNN_DTYPE_I32, d, 3, (int64_t[]){2, N, MRCNN_RNG_WORDS});
    sg->gt = (mrcnn_gt_batch){
        .n_images = N,
        .max_gt = G,
        .mask_h = H,
        .mask_w = W,
        .boxes = mrcnn_tensor_view(dev + L->box, MRCNN_DTYPE_F32, d, 3, (int64_t[]){N, G, 4}),
        .labels = mrcnn_tensor_view(dev + L->lab, MRCNN_DTYPE_I32, d, 2, (int64_t[]){N, G}),
        .counts = mrcnn_tensor_view(dev + L->cnt, MRCNN_DTYPE_I32, d, 1, (int64_t[]){N}),
        .masks = mrcnn_tensor_view(NULL, MRCNN_DTYPE_U8, d, 4, (int64_t[]){N, G, H, W}), // compact instead
        .image_hw = sg->image_hw,
        .mask_crops =
            mrcnn_tensor_view(dev + L->crop, MRCNN_DTYPE_I32, d, 3, (int64_t[]){N, G, MRCNN_MASK_CROP_WORDS}),
        .mask_pool = mrcnn_tensor_view(dev + L->pool, MRCNN_DTYPE_U8, d, 1, (int64_t[]){(int64_t)sg->pool_cap}),
    };
    sg->pinned_cap = P;
    sg->pinned_proposals = mrcnn_tensor_view(dev + L->pp, MRCNN_DTYPE_F32, d, 3, (int64_t[]){N, P, 4});
    sg->pinned_counts = mrcnn_tensor_view(dev + L->pc, MRCNN_DTYPE_I32, d, 1, (int64_t[]){N});
}

/* The shape key: everything that decides the device half's calls and addresses; 0 when
 * the backend trims the ROI heads to the data's rows (count_hint answers). */
static uint64_t stage_key(mrcnn_model *m, int slot, const mrcnn_staged *sg, const mrcnn_model_anchors *a) {
    const mrcnn_backend *be = m->be;
    if (!m->hint_probe.data) {
        m->hint_probe = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, be->device, 1, (int64_t[]){1});
        m->hint_probe.data = be->mem.alloc(be, sizeof(float), "count hint probe");
        const float zero = 0;
        be->mem.write(be, &m->hint_probe, &zero);
    }
    if (count_hint(be, &m->hint_probe) >= 0) return 0; // the ROI heads' rows follow the data
    const uint64_t words[] = {(uint64_t)slot,
                              (uint64_t)sg->n_images,
                              (uint64_t)sg->img_h,
                              (uint64_t)sg->img_w,
                              (uint64_t)sg->gt_cap,
                              (uint64_t)sg->pinned_cap,
                              (uint64_t)sg->pool_cap,
                              (uint64_t)be->storage,
                              (uint64_t)be->device,
                              (uint64_t)(uintptr_t)sg->buf,
                              (uint64_t)(uintptr_t)a->dev.data,
                              (uint64_t)(m->count_sum != NULL)};
    uint64_t key = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) key = fnv1a(key, words[i]);
    return key ? key : 1;
}

uint64_t mrcnn_model_stage(mrcnn_model *m, int slot, const mrcnn_batch *b) {
    const double t0 = mrcnn_time_now();
    const mrcnn_backend *be = m->be;
    MRCNN_CHECK(b->gt != NULL, "train step: the batch has no ground truth");
    MRCNN_CHECK(slot >= 0 && slot < 4096, "model stage: slot %d", slot);
    MRCNN_CHECK(b->images.ndim == 4 && b->images.shape[3] == 3 && b->images.shape[0] > 0,
                "train step: images must be (N, H, W, 3) with N > 0");
    const int N = (int)b->images.shape[0], H = (int)b->images.shape[1], W = (int)b->images.shape[2];
    MRCNN_CHECK(H > 0 && W > 0 && H % 32 == 0 && W % 32 == 0,
                "train step: the batch is %dx%d; H and W must be positive multiples of 32", H, W);
    mrcnn_staged *sg = stage_slot(m, slot);
    sg->ready = false; // its anchors may be replaced below
    const mrcnn_model_anchors *a = model_anchors(m, H, W);
    int gmax = 0;
    for (int i = 0; i < N; i++) gmax = b->gt[i].n > gmax ? b->gt[i].n : gmax;
    int G = 8;
    while (G < gmax) G *= 2;
    const int P = m->pinned_proposals ? m->pinned_cap : 0;
    MRCNN_CHECK(!m->pinned_proposals || (P > 0 && m->pinned_counts), "train step: pinned proposals without a "
                "capacity or counts");
    const uint8_t **gt_masks = MRCNN_MALLOC(sizeof *gt_masks * (size_t)N * G, "gt mask pointers");
    int *gt_counts = MRCNN_MALLOC(sizeof *gt_counts * (size_t)N * 2, "gt counts and row strides");
    int *gt_strides = gt_counts + N;
    const size_t pool_used = stage_crops(sg, b, N, G, H, W, gt_masks, gt_strides, gt_counts);
    const stage_layout L = stage_layout_of(N, H, W, G, P, sg->pool_cap);
    stage_reserve(be, sg, &L, N, H, W, G, P);
    stage_fill_host(m, sg, &L, b, N, G, P, gt_masks, gt_strides, gt_counts);
    free(gt_masks);
    free(gt_counts);
    // the views, then two uploads: the images, everything else up to the pool's used bytes
    stage_views(sg, &L, be->device, N, H, W, G, P);
    sg->anchors = a;
    stage_images(m, b, &sg->images);
    mrcnn_tensor rest = mrcnn_tensor_view((char *)sg->buf + L.small, MRCNN_DTYPE_U8, be->device, 1,
                                          (int64_t[]){(int64_t)(L.pool + pool_used - L.small)});
    be->mem.write(be, &rest, sg->host);
    sg->ready = true;
    sg->stage_ms = 1e3 * (mrcnn_time_now() - t0);
    return sg->shape_key = stage_key(m, slot, sg, a);
}
