/* Mask R-CNN assembly: builds the network, orders the stages of the training step
 * (forward; each head's targets and losses, which the heads own: rpn_head.c,
 * box_head.c, mask_head.c; backward) and runs inference. Everything goes through the
 * backend: the detection stages (anchor targets, proposals, ROI sampling, mask
 * targets, per-class gathers) are its ops (detect_ops.h), so a training step is a
 * sequence of device work with no read; the loss normalizers are device counts. The
 * step is split in two (model.h): mrcnn_model_stage uploads the batch into a staging
 * buffer whose addresses depend only on the shapes, mrcnn_model_run is device work
 * alone, so that it can be captured once and replayed. Inference reads the proposals
 * and the head outputs back for the host's postprocessing. */
#include "mrcnn/anchors.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/model.h"
#include "mrcnn/postprocess.h"
#include "mrcnn/proposals.h"
#include "mrcnn/rng.h"
#include "mrcnn/roi_align.h"
#include "mrcnn/roi_targets.h"
#include "model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mrcnn_model_init(mrcnn_model *m, const mrcnn_config *cfg, mrcnn_backend *be) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->be = be;
    MRCNN_CHECK(cfg->roi_num_classes >= 1, "MODEL.ROI_HEADS.NUM_CLASSES = %d must be at least 1",
                cfg->roi_num_classes);
    m->num_classes = cfg->roi_num_classes + 1;
    mrcnn_params_init(&m->params);
    mrcnn_resnet_build(m);
    mrcnn_fpn_build(m);
    mrcnn_rpn_head_build(m);
    mrcnn_box_head_build(m);
    mrcnn_mask_head_build(m);
    mrcnn_params_commit(&m->params, be);
    m->grad_reported = MRCNN_CALLOC((size_t)mrcnn_params_count(&m->params), sizeof(bool), "grad reports");
}

void mrcnn_model_free(mrcnn_model *m) {
    const mrcnn_backend *be = m->be;
    for (int i = 0; i < m->n_staged; i++) {
        if (m->staged[i].buf) be->mem.free(be, m->staged[i].buf);
        free(m->staged[i].host);
        free(m->staged[i].crops);
    }
    free(m->staged);
    for (int i = 0; i < MRCNN_MODEL_ANCHOR_CACHE; i++) {
        if (m->anchors[i].dev.data) be->mem.free(be, m->anchors[i].dev.data);
        free(m->anchors[i].host);
    }
    if (m->hint_probe.data) be->mem.free(be, m->hint_probe.data);
    for (int s = 0; s < 4; s++) free(m->resnet.blocks[s]);
    free(m->grad_reported);
    mrcnn_params_free(&m->params);
    memset(m, 0, sizeof *m);
}

void mrcnn_model_zero_grads(mrcnn_model *m) {
    mrcnn_tensor all = mrcnn_tensor_view(m->params.grads.base, MRCNN_DTYPE_U8, m->be->device, 1,
                                         (int64_t[]){(int64_t)m->params.grads.size});
    m->be->mem.zero(m->be, &all);
}

static bool name_has(const char *name, const char *part) { return strstr(name, part) != NULL; }

void mrcnn_model_init_random(mrcnn_model *m, uint64_t seed) {
    mrcnn_arena *a = &m->params.values;
    for (int i = 0; i < a->n_entries; i++) {
        const char *name = a->entries[i].name;
        mrcnn_tensor *t = &a->entries[i].tensor;
        int64_t n = mrcnn_tensor_numel(t);
        float *h = MRCNN_CALLOC((size_t)n, sizeof(float), "init buffer");
        mrcnn_rng rng = mrcnn_rng_make(seed, 0, i, MRCNN_RNG_INIT);
        bool is_bias = t->ndim == 1;
        if (!is_bias) {
            int64_t fan_in = n / t->shape[0];
            float stdev = 0;
            if (name_has(name, "rpn.head.cls_logits") || name_has(name, "rpn.head.bbox_pred") ||
                name_has(name, "cls_score"))
                stdev = 0.01f;
            else if (name_has(name, "box_predictor.bbox_pred"))
                stdev = 0.001f;
            if (stdev > 0) {
                for (int64_t j = 0; j < n; j++) h[j] = stdev * mrcnn_rng_normal(&rng, (uint64_t)j);
            } else {
                // He-uniform keeps ReLU activations at a stable scale through depth; the
                // last conv of each residual branch starts small so that 16-33 blocks of
                // sums do not grow the features by orders of magnitude
                float bound = sqrtf(6.0f / (float)fan_in);
                if (name_has(name, "backbone.body.layer") && name_has(name, ".conv3.")) bound *= 0.2f;
                for (int64_t j = 0; j < n; j++)
                    h[j] = bound * (2.0f * mrcnn_rng_uniform(&rng, (uint64_t)j) - 1.0f);
            }
        }
        m->be->mem.write(m->be, t, h);
        free(h);
    }
}

/* ---- helpers ------------------------------------------------------------------ */

static float *read_host(const mrcnn_backend *be, const mrcnn_tensor *t) {
    int64_t n = mrcnn_tensor_numel(t);
    float *h = MRCNN_MALLOC((size_t)(n ? n : 1) * sizeof(float), "host copy");
    mrcnn_read_f32(be, t, h);
    return h;
}

static mrcnn_tensor upload(mrcnn_ws *ws, mrcnn_dtype dt, int ndim, const int64_t *shape,
                           const void *host) {
    mrcnn_tensor t = mrcnn_ws_tensor_uninit(ws, dt, ndim, shape);
    if (mrcnn_tensor_numel(&t)) ws->be->mem.write(ws->be, &t, host);
    return t;
}

static mrcnn_roi_align_desc pooler_desc(const mrcnn_step *st, int F, int out, int sampling,
                                        bool aligned) {
    int lh[4], lw[4];
    for (int l = 0; l < 4; l++) {
        lh[l] = (int)st->bb.p[l].shape[1];
        lw[l] = (int)st->bb.p[l].shape[2];
    }
    return mrcnn_roi_align_desc_make(st->n_images, F, 4, 2, lh, lw, out, sampling, aligned);
}

/* ---- anchors ------------------------------------------------------------------ */

/* The FPN levels' sizes of an H x W batch (H, W divisible by 32) without running the
 * network: P2..P5 at strides 4..32 (resnet.c), P6 a 1x1 stride-2 pool of P5 (fpn.c).
 * run_features checks them against the backbone's outputs. */
static void level_sizes(int H, int W, int *gh, int *gw) {
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
static const mrcnn_model_anchors *model_anchors(mrcnn_model *m, int H, int W) {
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
    level_sizes(H, W, gh, gw);
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

/* ---- stages ------------------------------------------------------------------- */

/* Backbone and RPN head on images (N, H, W, 3) fp32 on the device, with the cached
 * anchors of (H, W). Device work only. */
static void run_features(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images, const mrcnn_model_anchors *a,
                         mrcnn_step *st) {
    st->n_images = (int)images->shape[0];
    st->img_h = (int)images->shape[1];
    st->img_w = (int)images->shape[2];
    // the stem convolves the images in the activation dtype (a GPU backend's bf16/fp16)
    st->images = *images;
    if (images->dtype != mrcnn_ws_act_dtype(ws)) {
        st->images = mrcnn_ws_act_uninit(ws, 4, images->shape);
        m->be->nn.cast(m->be, images, &st->images);
    }
    mrcnn_backbone_forward(m, ws, &st->images, &st->bb);
    mrcnn_rpn_head_forward(m, ws, &st->bb, &st->rpn);
    int gh[MRCNN_FPN_LEVELS], gw[MRCNN_FPN_LEVELS];
    level_sizes(st->img_h, st->img_w, gh, gw);
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++)
        MRCNN_CHECK(st->bb.p[l].shape[1] == gh[l] && st->bb.p[l].shape[2] == gw[l],
                    "model: FPN level %d of a %dx%d batch is %lldx%lld, the anchors were made for %dx%d", l,
                    st->img_h, st->img_w, (long long)st->bb.p[l].shape[1], (long long)st->bb.p[l].shape[2], gh[l],
                    gw[l]);
    MRCNN_CHECK(a->img_h == st->img_h && a->img_w == st->img_w, "model: anchors of %dx%d for a %dx%d batch", a->img_h,
                a->img_w, st->img_h, st->img_w);
    st->n_anchors = a->n;
    st->anchors = a->host;
    st->anchors_dev = a->dev;
    memcpy(st->level_counts, a->level_counts, sizeof st->level_counts);
}

void mrcnn_model_forward_features(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_step *st) {
    memset(st, 0, sizeof *st);
    MRCNN_CHECK(b->images.ndim == 4 && b->images.data,
                "model: the batch's images are not a (N, H, W, 3) device tensor");
    const mrcnn_model_anchors *a = model_anchors(m, (int)b->images.shape[1], (int)b->images.shape[2]);
    run_features(m, ws, &b->images, a, st);
    int32_t *hw = MRCNN_MALLOC((size_t)st->n_images * 2 * sizeof(int32_t), "image sizes");
    for (int i = 0; i < 2 * st->n_images; i++) hw[i] = b->image_hw[i];
    st->image_hw_dev = upload(ws, MRCNN_DTYPE_I32, 2, (int64_t[]){st->n_images, 2}, hw);
    free(hw);
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
    if (slot >= m->n_staged) {
        m->staged = MRCNN_REALLOC(m->staged, sizeof *m->staged * (size_t)(slot + 1), "staging slots");
        memset(m->staged + m->n_staged, 0, sizeof *m->staged * (size_t)(slot + 1 - m->n_staged));
        m->n_staged = slot + 1;
    }
    mrcnn_staged *sg = &m->staged[slot];
    sg->ready = false; // its anchors may be replaced below
    const mrcnn_model_anchors *a = model_anchors(m, H, W);
    int gmax = 0;
    for (int i = 0; i < N; i++) gmax = b->gt[i].n > gmax ? b->gt[i].n : gmax;
    int G = 8;
    while (G < gmax) G *= 2;
    const int P = m->pinned_proposals ? m->pinned_cap : 0;
    MRCNN_CHECK(!m->pinned_proposals || (P > 0 && m->pinned_counts), "train step: pinned proposals without a "
                "capacity or counts");
    /* The masks as crops (compact ground truth): their rectangles first, which say the
     * pool's need; the pool's capacity only grows (a power of two), and with it the key. */
    if (N > sg->crop_cap_images || G > sg->crop_cap_gt) {
        free(sg->crops);
        sg->crops = MRCNN_MALLOC(sizeof *sg->crops * (size_t)N * G * MRCNN_MASK_CROP_WORDS, "mask crops");
        sg->crop_cap_images = N;
        sg->crop_cap_gt = G;
    }
    const uint8_t **gt_masks = MRCNN_MALLOC(sizeof *gt_masks * (size_t)N, "gt mask pointers");
    int *gt_counts = MRCNN_MALLOC(sizeof *gt_counts * (size_t)N, "gt counts");
    for (int i = 0; i < N; i++) {
        const mrcnn_image_gt *g = &b->gt[i];
        int ih = b->image_hw[2 * i], iw = b->image_hw[2 * i + 1];
        MRCNN_CHECK(g->n >= 0 && (g->n == 0 || (g->boxes && g->labels)), "train step: image %d has %d instances "
                    "but no boxes or labels", i, g->n);
        MRCNN_CHECK(g->n == 0 || g->masks != NULL, "mask loss: image %d has %d instances but no masks", i, g->n);
        MRCNN_CHECK(ih > 0 && iw > 0 && ih <= H && iw <= W, "train step: image %d is %dx%d in a %dx%d batch", i, ih,
                    iw, H, W);
        gt_masks[i] = g->masks;
        gt_counts[i] = g->n;
    }
    const size_t pool_used = mrcnn_mask_crops_make(gt_masks, gt_counts, b->image_hw, N, G, sg->crops);
    if (pool_used > sg->pool_cap || !sg->pool_cap) {
        size_t cap = MRCNN_STAGE_POOL_MIN > 2 * sg->pool_cap ? MRCNN_STAGE_POOL_MIN : 2 * sg->pool_cap;
        while (cap < pool_used) cap *= 2;
        sg->pool_cap = cap;
    }
    const stage_layout L = stage_layout_of(N, H, W, G, P, sg->pool_cap);
    const size_t o_img = L.img, small = L.small, o_hw = L.hw, o_rng = L.rng, o_box = L.box, o_lab = L.lab,
                 o_cnt = L.cnt, o_crop = L.crop, o_pp = L.pp, o_pc = L.pc, o_pool = L.pool, off = L.end;
    if (off > sg->cap) {
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
    if (off - small > sg->host_cap) {
        free(sg->host);
        sg->host = MRCNN_MALLOC(off - small, "staged batch (host)");
        sg->host_cap = off - small;
    }
    char *dev = sg->buf;
    uint8_t *h = sg->host - small; // h + o: the host copy of offset o
    // image sizes, the sampling streams, the ground truth
    int32_t *hw = (int32_t *)(h + o_hw);
    for (int i = 0; i < N; i++) {
        hw[2 * i] = b->image_hw[2 * i];
        hw[2 * i + 1] = b->image_hw[2 * i + 1];
    }
    mrcnn_rng *rng = (mrcnn_rng *)(h + o_rng);
    for (int i = 0; i < N; i++) {
        int64_t index = b->image_index ? b->image_index[i] : i;
        rng[i] = mrcnn_rng_make((uint64_t)m->cfg.seed, b->epoch, index, MRCNN_RNG_RPN_SAMPLE);
        rng[N + i] = mrcnn_rng_make((uint64_t)m->cfg.seed, b->epoch, index, MRCNN_RNG_ROI_SAMPLE);
    }
    float *boxes = (float *)(h + o_box);
    int32_t *labels = (int32_t *)(h + o_lab), *counts = (int32_t *)(h + o_cnt);
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
    memcpy(h + o_crop, sg->crops, sizeof *sg->crops * (size_t)N * G * MRCNN_MASK_CROP_WORDS);
    mrcnn_mask_crops_copy(gt_masks, gt_counts, b->image_hw, N, G, sg->crops, h + o_pool);
    free(gt_masks);
    free(gt_counts);
    if (P) {
        memcpy(h + o_pp, m->pinned_proposals, (size_t)N * P * 4 * sizeof(float));
        int32_t *pc = (int32_t *)(h + o_pc);
        for (int i = 0; i < N; i++) pc[i] = (int32_t)m->pinned_counts[i];
    }
    // the views, then two uploads: the images, everything else
    const mrcnn_device d = be->device;
    sg->n_images = N;
    sg->img_h = H;
    sg->img_w = W;
    sg->gt_cap = G;
    sg->images = mrcnn_tensor_view(dev + o_img, MRCNN_DTYPE_F32, d, 4, (int64_t[]){N, H, W, 3});
    sg->image_hw = mrcnn_tensor_view(dev + o_hw, MRCNN_DTYPE_I32, d, 2, (int64_t[]){N, 2});
    sg->rngs = mrcnn_tensor_view(dev + o_rng, MRCNN_DTYPE_I32, d, 3, (int64_t[]){2, N, MRCNN_RNG_WORDS});
    sg->gt = (mrcnn_gt_batch){
        .n_images = N,
        .max_gt = G,
        .mask_h = H,
        .mask_w = W,
        .boxes = mrcnn_tensor_view(dev + o_box, MRCNN_DTYPE_F32, d, 3, (int64_t[]){N, G, 4}),
        .labels = mrcnn_tensor_view(dev + o_lab, MRCNN_DTYPE_I32, d, 2, (int64_t[]){N, G}),
        .counts = mrcnn_tensor_view(dev + o_cnt, MRCNN_DTYPE_I32, d, 1, (int64_t[]){N}),
        .masks = mrcnn_tensor_view(NULL, MRCNN_DTYPE_U8, d, 4, (int64_t[]){N, G, H, W}), // compact instead
        .image_hw = sg->image_hw,
        .mask_crops =
            mrcnn_tensor_view(dev + o_crop, MRCNN_DTYPE_I32, d, 3, (int64_t[]){N, G, MRCNN_MASK_CROP_WORDS}),
        .mask_pool = mrcnn_tensor_view(dev + o_pool, MRCNN_DTYPE_U8, d, 1, (int64_t[]){(int64_t)sg->pool_cap}),
    };
    sg->pinned_cap = P;
    sg->pinned_proposals = mrcnn_tensor_view(dev + o_pp, MRCNN_DTYPE_F32, d, 3, (int64_t[]){N, P, 4});
    sg->pinned_counts = mrcnn_tensor_view(dev + o_pc, MRCNN_DTYPE_I32, d, 1, (int64_t[]){N});
    sg->anchors = a;
    stage_images(m, b, &sg->images);
    // everything after the images up to the pool's used bytes: one upload
    mrcnn_tensor rest =
        mrcnn_tensor_view(dev + small, MRCNN_DTYPE_U8, d, 1, (int64_t[]){(int64_t)(o_pool + pool_used - small)});
    be->mem.write(be, &rest, sg->host);
    sg->ready = true;
    sg->stage_ms = 1e3 * (mrcnn_time_now() - t0);
    // the shape key: everything that decides the device half's calls and addresses
    if (!m->hint_probe.data) {
        m->hint_probe = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, d, 1, (int64_t[]){1});
        m->hint_probe.data = be->mem.alloc(be, sizeof(float), "count hint probe");
        const float zero = 0;
        be->mem.write(be, &m->hint_probe, &zero);
    }
    if (count_hint(be, &m->hint_probe) >= 0) return sg->shape_key = 0; // the ROI heads' rows follow the data
    const uint64_t words[] = {(uint64_t)slot,
                              (uint64_t)N,
                              (uint64_t)H,
                              (uint64_t)W,
                              (uint64_t)G,
                              (uint64_t)P,
                              (uint64_t)sg->pool_cap,
                              (uint64_t)be->storage,
                              (uint64_t)be->device,
                              (uint64_t)(uintptr_t)sg->buf,
                              (uint64_t)(uintptr_t)a->dev.data,
                              (uint64_t)(m->count_sum != NULL)};
    uint64_t key = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) key = fnv1a(key, words[i]);
    return sg->shape_key = key ? key : 1;
}

void mrcnn_model_proposals(mrcnn_model *m, mrcnn_ws *ws, bool training, mrcnn_step *st) {
    const mrcnn_config *c = &m->cfg;
    int N = st->n_images;
    if (training && st->pinned_cap > 0) {
        st->prop_cap = st->pinned_cap;
        st->proposals_dev = st->pinned_proposals;
        st->proposal_scores_dev = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){N, st->pinned_cap});
        st->proposal_counts_dev = st->pinned_counts;
        return;
    }
    mrcnn_proposals_desc d = {
        .n_images = N,
        .n_levels = MRCNN_FPN_LEVELS,
        .pre_nms_top_n = training ? c->rpn_pre_nms_topk_train : c->rpn_pre_nms_topk_test,
        .post_nms_top_n = training ? c->rpn_post_nms_topk_train : c->rpn_post_nms_topk_test,
        .nms_thresh = c->rpn_nms_thresh,
        .min_size = c->rpn_min_size,
        .score_thresh = 0.0f,
    };
    memcpy(d.level_counts, st->level_counts, sizeof d.level_counts);
    int P = d.post_nms_top_n;
    st->prop_cap = P;
    st->proposals_dev = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 3, (int64_t[]){N, P, 4});
    st->proposal_scores_dev = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){N, P});
    st->proposal_counts_dev = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_I32, 1, (int64_t[]){N});
    m->be->det.proposals(m->be, &d, st->rpn.logits, st->rpn.deltas, &st->anchors_dev, &st->image_hw_dev,
                         &st->proposals_dev, &st->proposal_scores_dev, &st->proposal_counts_dev);
}

/* Host copies of the proposals (inference, tests). */
static void read_proposals(const mrcnn_model *m, mrcnn_step *st) {
    int N = st->n_images, P = st->prop_cap;
    free(st->proposals);
    free(st->proposal_scores);
    free(st->proposal_counts);
    st->proposals = MRCNN_MALLOC((size_t)N * P * 4 * sizeof(float) + 1, "proposals");
    st->proposal_scores = MRCNN_MALLOC((size_t)N * P * sizeof(float) + 1, "proposal scores");
    st->proposal_counts = MRCNN_MALLOC((size_t)N * sizeof(int64_t), "proposal counts");
    int32_t *cnt = MRCNN_MALLOC((size_t)N * sizeof(int32_t), "proposal counts");
    if ((int64_t)N * P > 0) {
        m->be->mem.read(m->be, &st->proposals_dev, st->proposals);
        m->be->mem.read(m->be, &st->proposal_scores_dev, st->proposal_scores);
    }
    m->be->mem.read(m->be, &st->proposal_counts_dev, cnt);
    for (int i = 0; i < N; i++) st->proposal_counts[i] = cnt[i];
    free(cnt);
}

/* The box head on st->rois_dev (R = st->n_rois rows). */
static void run_box_head(mrcnn_model *m, mrcnn_ws *ws, mrcnn_step *st) {
    const mrcnn_config *c = &m->cfg;
    int F = m->fpn.out_channels, P = c->box_head_pooler_resolution, R = st->n_rois;
    st->box_x = mrcnn_ws_act_uninit(ws, 4, (int64_t[]){R, P, P, F});
    mrcnn_roi_align_desc d = pooler_desc(st, F, P, c->box_head_sampling_ratio, c->box_head_aligned);
    if (R > 0) m->be->nn.roi_align_forward(m->be, &d, st->bb.p, &st->rois_dev, &st->box_x);
    mrcnn_box_head_forward(m, ws, &st->box_x, &st->box);
}

/* The mask head on st->fg_rois_dev (Rf = st->n_fg rows). */
static void run_mask_head(mrcnn_model *m, mrcnn_ws *ws, mrcnn_step *st) {
    const mrcnn_config *c = &m->cfg;
    int F = m->fpn.out_channels, P = c->mask_head_pooler_resolution, Rf = st->n_fg;
    st->mask_x = mrcnn_ws_act_uninit(ws, 4, (int64_t[]){Rf, P, P, F});
    mrcnn_roi_align_desc d = pooler_desc(st, F, P, c->mask_head_sampling_ratio, c->box_head_aligned);
    if (Rf > 0) m->be->nn.roi_align_forward(m->be, &d, st->bb.p, &st->fg_rois_dev, &st->mask_x);
    mrcnn_mask_head_forward(m, ws, &st->mask_x, &st->mask);
}

void mrcnn_model_run(mrcnn_model *m, int slot, mrcnn_ws *ws, bool backward, mrcnn_step *st) {
    MRCNN_CHECK(slot >= 0 && slot < m->n_staged && m->staged[slot].ready,
                "train step: micro-batch slot %d was not staged (mrcnn_model_stage first)", slot);
    const mrcnn_staged *sg = &m->staged[slot];
    memset(st, 0, sizeof *st);
    run_features(m, ws, &sg->images, sg->anchors, st);
    st->image_hw_dev = sg->image_hw;
    st->gt = sg->gt;
    const int N = sg->n_images;
    st->rng_rpn = mrcnn_tensor_view(sg->rngs.data, MRCNN_DTYPE_I32, sg->rngs.device, 2,
                                    (int64_t[]){N, MRCNN_RNG_WORDS});
    st->rng_roi = mrcnn_tensor_view((int32_t *)sg->rngs.data + (size_t)N * MRCNN_RNG_WORDS, MRCNN_DTYPE_I32,
                                    sg->rngs.device, 2, (int64_t[]){N, MRCNN_RNG_WORDS});
    st->pinned_cap = sg->pinned_cap;
    st->pinned_proposals = sg->pinned_proposals;
    st->pinned_counts = sg->pinned_counts;
    st->loss_dev = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){MRCNN_N_LOSSES});
    st->counts_dev = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){3});
    st->n_sampled_dev = elem_view(&st->counts_dev, 0);
    st->n_rois_dev = elem_view(&st->counts_dev, 1);
    st->n_fg_dev = elem_view(&st->counts_dev, 2);
    mrcnn_rpn_head_targets rt;
    mrcnn_rpn_head_make_targets(m, ws, st, &rt);
    mrcnn_model_proposals(m, ws, true, st);
    mrcnn_box_head_sample_rois(m, ws, st);
    bool trimmed = count_hint(m->be, &st->n_fg_dev) >= 0;
    // the normalizers of all three losses over every rank, in one device all-reduce
    if (m->count_sum) m->count_sum(m->be, &st->counts_dev, m->count_ctx);
    mrcnn_rpn_head_losses(m, ws, backward, st, &rt);
    run_box_head(m, ws, st);
    mrcnn_box_head_losses(m, ws, backward, st);
    run_mask_head(m, ws, st);
    mrcnn_mask_head_loss(m, ws, backward, trimmed, st);
    if (!backward) return;

    const mrcnn_config *c = &m->cfg;
    int F = m->fpn.out_channels;
    memset(m->grad_reported, 0, (size_t)mrcnn_params_count(&m->params) * sizeof(bool));
    mrcnn_tensor dp[MRCNN_FPN_LEVELS];
    for (int l2 = 0; l2 < MRCNN_FPN_LEVELS; l2++) dp[l2] = mrcnn_ws_like(ws, &st->bb.p[l2]);
    if (st->n_fg > 0) {
        mrcnn_tensor dx = mrcnn_ws_like(ws, &st->mask_x);
        mrcnn_mask_head_backward(m, ws, &st->mask, &st->dmask_logits, &dx);
        mrcnn_roi_align_desc d = pooler_desc(st, F, c->mask_head_pooler_resolution,
                                             c->mask_head_sampling_ratio, c->box_head_aligned);
        m->be->nn.roi_align_backward(m->be, &d, &st->fg_rois_dev, &dx, dp);
    }
    if (st->n_rois > 0) {
        mrcnn_tensor dx = mrcnn_ws_like(ws, &st->box_x);
        mrcnn_box_head_backward(m, ws, &st->box, &st->dcls, &st->ddeltas, &dx);
        mrcnn_roi_align_desc d = pooler_desc(st, F, c->box_head_pooler_resolution,
                                             c->box_head_sampling_ratio, c->box_head_aligned);
        m->be->nn.roi_align_backward(m->be, &d, &st->rois_dev, &dx, dp);
    }
    mrcnn_rpn_head_backward(m, ws, &st->bb, &st->rpn, st->dlogits_rpn, st->ddeltas_rpn, dp);
    mrcnn_backbone_backward(m, ws, &st->images, &st->bb, dp);
    // heads that saw no rows this step: their (zero) gradients are final too
    for (int i = 0; i < mrcnn_params_count(&m->params); i++) mrcnn_model_grad_ready(m, i);
}

void mrcnn_model_train_step(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, bool backward,
                            mrcnn_step *st) {
    mrcnn_model_stage(m, 0, b);
    mrcnn_model_run(m, 0, ws, backward, st);
}

void mrcnn_model_read_losses(const mrcnn_model *m, const mrcnn_step *st, mrcnn_losses *out) {
    float v[MRCNN_N_LOSSES];
    m->be->mem.read(m->be, &st->loss_dev, v);
    out->rpn_objectness = v[0];
    out->rpn_box_reg = v[1];
    out->classifier = v[2];
    out->box_reg = v[3];
    out->mask = v[4];
    out->total = out->rpn_objectness + out->rpn_box_reg + out->classifier + out->box_reg + out->mask;
}

/* Rows of a compacted (rows, 5) ROI tensor up to the first padding row, as host arrays. */
static int read_valid_rois(const mrcnn_backend *be, const mrcnn_tensor *rois, const mrcnn_tensor *labels,
                           float **h_rois, int32_t **h_labels) {
    int64_t rows = rois->shape[0];
    float *r = MRCNN_MALLOC((size_t)(rows ? rows : 1) * 5 * sizeof(float), "rois");
    int32_t *l = MRCNN_MALLOC((size_t)(rows ? rows : 1) * sizeof(int32_t), "roi labels");
    if (rows) {
        be->mem.read(be, rois, r);
        be->mem.read(be, labels, l);
    }
    int n = 0;
    while (n < rows && r[n * 5] >= 0) n++;
    *h_rois = r;
    *h_labels = l;
    return n;
}

void mrcnn_model_read_step(const mrcnn_model *m, mrcnn_step *st) {
    const mrcnn_backend *be = m->be;
    int N = st->n_images;
    mrcnn_model_read_losses(m, st, &st->losses);
    float counts[3];
    be->mem.read(be, &st->counts_dev, counts);
    st->rpn_sampled = counts[0];
    read_proposals(m, st);
    free(st->rois);
    free(st->roi_labels);
    free(st->roi_image_start);
    free(st->fg_rois);
    free(st->fg_labels);
    free(st->fg_gt);
    int R = read_valid_rois(be, &st->rois_dev, &st->roi_labels_dev, &st->rois, &st->roi_labels);
    st->roi_image_start = MRCNN_CALLOC((size_t)N + 1, sizeof(int), "roi image starts");
    for (int i = 0, r = 0; i <= N; i++) {
        while (r < R && (int)st->rois[r * 5] < i) r++;
        st->roi_image_start[i] = r;
    }
    int Rf = read_valid_rois(be, &st->fg_rois_dev, &st->fg_labels_dev, &st->fg_rois, &st->fg_labels);
    st->fg_gt = MRCNN_MALLOC((size_t)(st->n_fg ? st->n_fg : 1) * sizeof(int32_t), "fg gt");
    if (st->n_fg) be->mem.read(be, &st->fg_gt_dev, st->fg_gt);
    for (int r = 0; r < Rf; r++) st->fg_gt[r] -= (int)st->fg_rois[r * 5] * st->gt.max_gt;
}

/* ---- inference ------------------------------------------------------------------ */

void mrcnn_model_detect(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_step *st,
                        mrcnn_detections *det) {
    const mrcnn_config *c = &m->cfg;
    mrcnn_model_forward_features(m, ws, b, st);
    mrcnn_model_proposals(m, ws, false, st);
    read_proposals(m, st);
    int N = st->n_images, K = m->num_classes, D = c->roi_detections_per_image;
    int M = 2 * c->mask_head_pooler_resolution;
    // every proposal goes through the box head
    int R = 0;
    for (int i = 0; i < N; i++) R += (int)st->proposal_counts[i];
    st->rois = MRCNN_MALLOC((size_t)(R ? R : 1) * 5 * sizeof(float), "rois");
    st->roi_image_start = MRCNN_CALLOC((size_t)N + 1, sizeof(int), "roi image starts");
    R = 0;
    for (int i = 0; i < N; i++) {
        st->roi_image_start[i] = R;
        for (int j = 0; j < st->proposal_counts[i]; j++, R++) {
            st->rois[R * 5] = (float)i;
            memcpy(st->rois + R * 5 + 1, st->proposals + ((size_t)i * st->prop_cap + j) * 4,
                   4 * sizeof(float));
        }
    }
    st->roi_image_start[N] = R;
    st->n_rois = R;
    st->rois_dev = upload(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){R, 5}, st->rois);
    run_box_head(m, ws, st);
    float *logits = read_host(m->be, &st->box.logits);
    float *deltas = read_host(m->be, &st->box.deltas);
    memset(det, 0, sizeof *det);
    det->n_images = N;
    det->cap = D;
    det->mask_size = M;
    det->boxes = MRCNN_CALLOC((size_t)N * D * 4, sizeof(float), "detections");
    det->scores = MRCNN_CALLOC((size_t)N * D, sizeof(float), "detection scores");
    det->labels = MRCNN_CALLOC((size_t)N * D, sizeof(int32_t), "detection labels");
    det->counts = MRCNN_CALLOC((size_t)N, sizeof(int), "detection counts");
    det->mask_probs = MRCNN_CALLOC((size_t)N * D * M * M, sizeof(float), "mask probabilities");
    mrcnn_detect_params dp = {
        .num_classes = K,
        .score_thresh = c->roi_score_thresh_test,
        .nms_thresh = c->roi_nms_thresh_test,
        .max_detections = D,
        .min_size = 1e-2f,
        .coder = mrcnn_box_coder_make(c->box_reg_weights.v[0], c->box_reg_weights.v[1],
                                      c->box_reg_weights.v[2], c->box_reg_weights.v[3]),
    };
    int Rf = 0;
    for (int i = 0; i < N; i++) {
        int r0 = st->roi_image_start[i], n = st->roi_image_start[i + 1] - r0;
        float *pb = MRCNN_MALLOC((size_t)(n ? n : 1) * 4 * sizeof(float), "proposal boxes");
        for (int j = 0; j < n; j++) memcpy(pb + j * 4, st->rois + (r0 + j) * 5 + 1, 4 * sizeof(float));
        det->counts[i] = mrcnn_detect_postprocess(&dp, n, logits + (size_t)r0 * K,
                                                  deltas + (size_t)r0 * K * 4, pb, b->image_hw[2 * i],
                                                  b->image_hw[2 * i + 1], det->boxes + (size_t)i * D * 4,
                                                  det->scores + (size_t)i * D,
                                                  det->labels + (size_t)i * D);
        Rf += det->counts[i];
        free(pb);
    }
    free(logits);
    free(deltas);
    // the mask head runs on the detections
    st->fg_rois = MRCNN_MALLOC((size_t)(Rf ? Rf : 1) * 5 * sizeof(float), "detection rois");
    st->fg_labels = MRCNN_MALLOC((size_t)(Rf ? Rf : 1) * sizeof(int32_t), "detection labels");
    Rf = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < det->counts[i]; j++, Rf++) {
            st->fg_rois[Rf * 5] = (float)i;
            memcpy(st->fg_rois + Rf * 5 + 1, det->boxes + ((size_t)i * D + j) * 4, 4 * sizeof(float));
            st->fg_labels[Rf] = det->labels[(size_t)i * D + j];
        }
    st->n_fg = Rf;
    st->fg_rois_dev = upload(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){Rf, 5}, st->fg_rois);
    run_mask_head(m, ws, st);
    if (Rf > 0) {
        float *ml = read_host(m->be, &st->mask.logits);
        float *probs = MRCNN_MALLOC((size_t)Rf * M * M * sizeof(float), "mask probs");
        mrcnn_mask_probs(Rf, M, K, ml, st->fg_labels, probs);
        Rf = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < det->counts[i]; j++, Rf++)
                memcpy(det->mask_probs + ((size_t)i * D + j) * M * M, probs + (size_t)Rf * M * M,
                       (size_t)M * M * sizeof(float));
        free(ml);
        free(probs);
    }
}

const char *const mrcnn_loss_names[MRCNN_N_LOSSES] = {"loss_objectness", "loss_rpn_box_reg", "loss_classifier",
                                                       "loss_box_reg", "loss_mask"};

void mrcnn_losses_to_array(const mrcnn_losses *l, double *out) {
    out[0] = l->rpn_objectness;
    out[1] = l->rpn_box_reg;
    out[2] = l->classifier;
    out[3] = l->box_reg;
    out[4] = l->mask;
}

void mrcnn_detections_free(mrcnn_detections *det) {
    free(det->boxes);
    free(det->scores);
    free(det->labels);
    free(det->counts);
    free(det->mask_probs);
    memset(det, 0, sizeof *det);
}

void mrcnn_step_free(mrcnn_step *st) {
    mrcnn_backbone_out_free(&st->bb);
    free(st->proposals);
    free(st->proposal_scores);
    free(st->proposal_counts);
    free(st->rois);
    free(st->roi_labels);
    free(st->roi_image_start);
    free(st->fg_rois);
    free(st->fg_labels);
    free(st->fg_gt);
    memset(st, 0, sizeof *st);
}
