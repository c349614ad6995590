/* Mask R-CNN's network order: the stages of the training step (forward; each head's
 * targets and losses, which the heads own: rpn_head.c, box_head.c, mask_head.c;
 * backward) and the first stages of inference. Everything goes through the backend:
 * the detection stages (anchor targets, proposals, ROI sampling, mask targets,
 * per-class gathers) are its ops (detect_ops.h), so a training step is a sequence of
 * device work with no read; the loss normalizers are device counts. The step is split
 * in two (model.h): mrcnn_model_stage (maskrcnn_staging.c) uploads the batch into a
 * staging buffer whose addresses depend only on the shapes, mrcnn_model_run here is
 * device work alone, so that it can be captured once and replayed. Inference and the
 * reads of a step: maskrcnn_infer.c; construction: maskrcnn_init.c. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "mrcnn/proposals.h"
#include "mrcnn/roi_align.h"
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

static mrcnn_roi_align_desc pooler_desc(const mrcnn_pass *st, int F, int out, int sampling,
                                        bool aligned) {
    int lh[4], lw[4];
    for (int l = 0; l < 4; l++) {
        lh[l] = (int)st->bb.p[l].shape[1];
        lw[l] = (int)st->bb.p[l].shape[2];
    }
    return mrcnn_roi_align_desc_make(st->n_images, F, 4, 2, lh, lw, out, sampling, aligned);
}

/* ---- stages ------------------------------------------------------------------- */

/* The box and the mask head's poolers (both take the box head's ALIGNED, as torchvision's
 * MultiScaleRoIAlign does), for the forward and the backward alike. */
static mrcnn_roi_align_desc box_pooler(const mrcnn_model *m, const mrcnn_pass *st) {
    const mrcnn_config *c = &m->cfg;
    return pooler_desc(st, m->fpn.out_channels, c->box_head_pooler_resolution, c->box_head_sampling_ratio,
                       c->box_head_aligned);
}

static mrcnn_roi_align_desc mask_pooler(const mrcnn_model *m, const mrcnn_pass *st) {
    const mrcnn_config *c = &m->cfg;
    return pooler_desc(st, m->fpn.out_channels, c->mask_head_pooler_resolution, c->mask_head_sampling_ratio,
                       c->box_head_aligned);
}

/* Backbone and RPN head on images (N, H, W, 3) fp32 on the device, with the cached
 * anchors of (H, W). Device work only. */
static void run_features(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images, const mrcnn_model_anchors *a,
                         mrcnn_pass *st) {
    st->n_images = (int)images->shape[0];
    st->img_h = (int)images->shape[1];
    st->img_w = (int)images->shape[2];
    st->images = *images; // the stem casts and pads them in one pass (resnet.c)
    mrcnn_backbone_forward(m, ws, &st->images, &st->bb);
    mrcnn_rpn_head_forward(m, ws, &st->bb, &st->rpn);
    int gh[MRCNN_FPN_LEVELS], gw[MRCNN_FPN_LEVELS];
    model_level_sizes(st->img_h, st->img_w, gh, gw);
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

void mrcnn_model_forward_features(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_pass *st) {
    memset(st, 0, sizeof *st);
    MRCNN_CHECK(b->images.ndim == 4 && b->images.data,
                "model: the batch's images are not a (N, H, W, 3) device tensor");
    const mrcnn_model_anchors *a = model_anchors(m, (int)b->images.shape[1], (int)b->images.shape[2]);
    model_refresh_weights(m); // the weights may have changed since the last forward
    run_features(m, ws, &b->images, a, st);
    int32_t *hw = MRCNN_MALLOC((size_t)st->n_images * 2 * sizeof(int32_t), "image sizes");
    for (int i = 0; i < 2 * st->n_images; i++) hw[i] = b->image_hw[i];
    st->image_hw_dev = model_upload(ws, MRCNN_DTYPE_I32, 2, (int64_t[]){st->n_images, 2}, hw);
    free(hw);
}

void mrcnn_model_proposals(mrcnn_model *m, mrcnn_ws *ws, bool training, mrcnn_pass *st) {
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

/* The box head on st->rois_dev (R = st->n_rois rows). */
void model_run_box_head(mrcnn_model *m, mrcnn_ws *ws, mrcnn_pass *st) {
    const mrcnn_config *c = &m->cfg;
    int F = m->fpn.out_channels, P = c->box_head_pooler_resolution, R = st->n_rois;
    st->box_x = mrcnn_ws_act_uninit(ws, 4, (int64_t[]){R, P, P, F});
    mrcnn_roi_align_desc d = box_pooler(m, st);
    if (R > 0) m->be->nn.roi_align_forward(m->be, &d, st->bb.p, &st->rois_dev, &st->box_x);
    mrcnn_box_head_forward(m, ws, &st->box_x, &st->box);
}

/* The mask head on st->fg_rois_dev (Rf = st->n_fg rows). */
void model_run_mask_head(mrcnn_model *m, mrcnn_ws *ws, mrcnn_pass *st) {
    const mrcnn_config *c = &m->cfg;
    int F = m->fpn.out_channels, P = c->mask_head_pooler_resolution, Rf = st->n_fg;
    st->mask_x = mrcnn_ws_act_uninit(ws, 4, (int64_t[]){Rf, P, P, F});
    mrcnn_roi_align_desc d = mask_pooler(m, st);
    if (Rf > 0) m->be->nn.roi_align_forward(m->be, &d, st->bb.p, &st->fg_rois_dev, &st->mask_x);
    mrcnn_mask_head_forward(m, ws, &st->mask_x, &st->mask);
}

/* Rows [a, b) of t. */
static mrcnn_tensor rows_range(const mrcnn_tensor *t, int64_t a, int64_t b) {
    mrcnn_tensor v = rows_view(t, b - a);
    int64_t row = t->shape[0] > 0 ? mrcnn_tensor_numel(t) / t->shape[0] : 0;
    if (t->data) v.data = (char *)t->data + (size_t)(a * row) * mrcnn_dtype_size(t->dtype);
    return v;
}

/* One chunk of the training mask head's rows (st->mask_chunk_end), a run_if body. */
typedef struct {
    mrcnn_model *m;
    mrcnn_ws *ws;
    mrcnn_pass *st;
    mrcnn_tensor *dp; // (MRCNN_FPN_LEVELS) the levels' gradients (backward)
    int k;            // the chunk
    bool ready;       // one chunk: the head's gradients are final after it
} mask_chunk;

/* The chunk's pooled rows, the head on them, and their label's logits into mask_gd. */
static void mask_chunk_forward(void *ctx) {
    const mask_chunk *c = ctx;
    mrcnn_model *m = c->m;
    mrcnn_pass *st = c->st;
    const int64_t a = c->k ? st->mask_chunk_end[c->k - 1] : 0, b = st->mask_chunk_end[c->k];
    mrcnn_tensor x = rows_range(&st->mask_x, a, b), rois = rows_range(&st->fg_rois_dev, a, b);
    mrcnn_roi_align_desc d = mask_pooler(m, st);
    if (b > a) m->be->nn.roi_align_forward(m->be, &d, st->bb.p, &rois, &x);
    mrcnn_mask_head_forward(m, c->ws, &x, &st->mask_chunk[c->k]);
    if (b == a) return;
    mrcnn_tensor labels = rows_range(&st->fg_labels_dev, a, b), gd = rows_range(&st->mask_gd, a, b);
    m->be->det.gather_class_masks(m->be, &st->mask_chunk[c->k].logits, &labels, &gd);
}

/* mask_dg's rows back through the chunk's head and its ROIAlign into the levels. */
static void mask_chunk_backward(void *ctx) {
    const mask_chunk *c = ctx;
    mrcnn_model *m = c->m;
    mrcnn_pass *st = c->st;
    const int64_t a = c->k ? st->mask_chunk_end[c->k - 1] : 0, b = st->mask_chunk_end[c->k];
    if (b == a) return;
    const mrcnn_mask_head_out *out = &st->mask_chunk[c->k];
    mrcnn_tensor dlogits = mrcnn_ws_like(c->ws, &out->logits);
    mrcnn_tensor dg = rows_range(&st->mask_dg, a, b), labels = rows_range(&st->fg_labels_dev, a, b);
    m->be->det.gather_class_masks_backward(m->be, &dg, &labels, &dlogits);
    mrcnn_tensor dx = grad_buffer(c->ws, &out->x); // the head writes it whole
    mrcnn_mask_head_backward(m, c->ws, out, &dlogits, &dx, c->ready);
    mrcnn_roi_align_desc d = mask_pooler(m, st);
    mrcnn_tensor rois = rows_range(&st->fg_rois_dev, a, b);
    m->be->nn.roi_align_backward(m->be, &d, &rois, &dx, c->dp);
}

/* Each chunk, or (gated) each chunk whose first row this rank's fg count passes. */
static void mask_chunks_run(mrcnn_model *m, mrcnn_ws *ws, bool gated, mrcnn_tensor *dp, void (*body)(void *),
                            mrcnn_pass *st) {
    for (int k = 0; k < st->n_mask_chunks; k++) {
        mask_chunk ch = {.m = m, .ws = ws, .st = st, .dp = dp, .k = k, .ready = !gated};
        if (gated) m->be->stream.run_if(m->be, &st->mask_count_dev, k ? st->mask_chunk_end[k - 1] : 0, body, &ch);
        else body(&ch);
    }
}

/* The training mask head on st->fg_rois_dev (Rf = st->n_fg rows) in chunks; gated: Rf
 * is the capacity, and a chunk past the positives runs nothing. */
static void run_mask_head_chunks(mrcnn_model *m, mrcnn_ws *ws, bool gated, mrcnn_pass *st) {
    const int F = m->fpn.out_channels, P = m->cfg.mask_head_pooler_resolution, Rf = st->n_fg;
    st->mask_x = mrcnn_ws_act_uninit(ws, 4, (int64_t[]){Rf, P, P, F});
    // the gathers write the rows of the chunks that run; the others weigh 0 in the loss and must be finite
    const int64_t sh[3] = {Rf, 2 * P, 2 * P};
    st->mask_gd = gated ? mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 3, sh) : mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 3, sh);
    st->n_mask_chunks = mrcnn_mask_head_chunks(Rf, st->n_images, gated, st->mask_chunk_end);
    mask_chunks_run(m, ws, gated, NULL, mask_chunk_forward, st);
    st->mask = st->mask_chunk[0];
}

void mrcnn_model_run(mrcnn_model *m, int slot, mrcnn_ws *ws, bool backward, mrcnn_pass *st) {
    MRCNN_CHECK(slot >= 0 && slot < m->n_staged && m->staged[slot].ready,
                "train step: micro-batch slot %d was not staged (mrcnn_model_stage first)", slot);
    const mrcnn_staged *sg = &m->staged[slot];
    memset(st, 0, sizeof *st);
    // once per step, inside its captured region: a later micro-batch sees the same weights
    if (slot == 0) model_refresh_weights(m);
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
    // the mask head's chunks follow this rank's positives, the sum below counts every rank's
    st->mask_count_dev = st->n_fg_dev;
    if (!trimmed && m->count_sum) {
        st->mask_count_dev = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){1});
        m->be->step.axpy(m->be, 1.0f, &st->n_fg_dev, &st->mask_count_dev);
    }
    // the normalizers of all three losses over every rank, in one device all-reduce
    if (m->count_sum) m->count_sum(m->be, &st->counts_dev, m->count_ctx);
    mrcnn_rpn_head_losses(m, ws, backward, st, &rt);
    model_run_box_head(m, ws, st);
    mrcnn_box_head_losses(m, ws, backward, st);
    run_mask_head_chunks(m, ws, !trimmed, st);
    mrcnn_mask_head_loss(m, ws, backward, trimmed, st);
    if (!backward) return;

    memset(m->grad_reported, 0, (size_t)mrcnn_params_count(&m->params) * sizeof(bool));
    mrcnn_tensor dp[MRCNN_FPN_LEVELS];
    for (int l2 = 0; l2 < MRCNN_FPN_LEVELS; l2++) dp[l2] = mrcnn_ws_like(ws, &st->bb.p[l2]);
    if (st->n_fg > 0) {
        mask_chunks_run(m, ws, !trimmed, dp, mask_chunk_backward, st);
        // every chunk has added its part (outside the chunks: no all-reduce in a conditional body)
        if (!trimmed) mrcnn_mask_head_grads_ready(m);
    }
    if (st->n_rois > 0) {
        mrcnn_tensor dx = grad_buffer(ws, &st->box_x); // the head writes it whole
        mrcnn_box_head_backward(m, ws, &st->box, &st->dcls, &st->ddeltas, &dx);
        mrcnn_roi_align_desc d = box_pooler(m, st);
        m->be->nn.roi_align_backward(m->be, &d, &st->rois_dev, &dx, dp);
    }
    mrcnn_rpn_head_backward(m, ws, &st->bb, &st->rpn, st->dlogits_rpn, st->ddeltas_rpn, dp);
    mrcnn_backbone_backward(m, ws, &st->images, &st->bb, dp);
    // heads that saw no rows this step: their (zero) gradients are final too
    for (int i = 0; i < mrcnn_params_count(&m->params); i++) mrcnn_model_grad_ready(m, i);
}

void mrcnn_model_train_step(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, bool backward,
                            mrcnn_pass *st) {
    mrcnn_model_stage(m, 0, b);
    mrcnn_model_run(m, 0, ws, backward, st);
}

void mrcnn_model_read_losses(const mrcnn_model *m, const mrcnn_pass *st, mrcnn_losses *out) {
    float v[MRCNN_N_LOSSES];
    m->be->mem.read(m->be, &st->loss_dev, v);
    out->rpn_objectness = v[0];
    out->rpn_box_reg = v[1];
    out->classifier = v[2];
    out->box_reg = v[3];
    out->mask = v[4];
    out->total = out->rpn_objectness + out->rpn_box_reg + out->classifier + out->box_reg + out->mask;
}

const char *const mrcnn_loss_names[MRCNN_N_LOSSES] = {"loss_objectness", "loss_rpn_box_reg", "loss_classifier",
                                                       "loss_box_reg", "loss_mask"};

void mrcnn_pass_free(mrcnn_pass *st) {
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
