/* Mask R-CNN assembly: builds the network, runs the training step (forward, the
 * five torchvision losses, backward) and inference. Device work goes through the
 * backend; the data-dependent box logic (anchor targets, proposals, ROI sampling,
 * mask targets, per-class gathers) runs on the host over arrays read back once per
 * stage, as the detection helpers define it. */
#include "mrcnn/anchors.h"
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "mrcnn/postprocess.h"
#include "mrcnn/proposals.h"
#include "mrcnn/roi_align.h"
#include "mrcnn/roi_targets.h"

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
    for (int s = 0; s < 4; s++) free(m->resnet.blocks[s]);
    free(m->grad_reported);
    mrcnn_params_free(&m->params);
    memset(m, 0, sizeof *m);
}

void mrcnn_model_zero_grads(mrcnn_model *m) {
    mrcnn_tensor all = mrcnn_tensor_view(m->params.grads.base, MRCNN_DTYPE_U8, m->be->device, 1,
                                         (int64_t[]){(int64_t)m->params.grads.size});
    m->be->zero(m->be, &all);
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
        m->be->write(m->be, t, h);
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
    mrcnn_tensor t = mrcnn_ws_tensor(ws, dt, ndim, shape);
    if (mrcnn_tensor_numel(&t)) ws->be->write(ws->be, &t, host);
    return t;
}

static double read_scalar(const mrcnn_backend *be, const mrcnn_tensor *t) {
    float v = 0;
    be->read(be, t, &v);
    return v;
}

/* The loss multiplier (fp16 loss scaling): the ops divide by norm / mult, so the
 * gradients come out scaled by mult and the loss values are divided back. */
static float loss_mult(const mrcnn_model *m) { return m->loss_mult > 0 ? m->loss_mult : 1.0f; }

static void sum_norms(mrcnn_model *m, double *v, int n) {
    if (m->norm_sum) m->norm_sum(v, n, m->norm_ctx);
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

static int64_t image_index(const mrcnn_batch *b, int i) { return b->image_index ? b->image_index[i] : i; }

/* ---- stages ------------------------------------------------------------------- */

void mrcnn_model_forward_features(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_step *st) {
    memset(st, 0, sizeof *st);
    st->n_images = (int)b->images.shape[0];
    st->img_h = (int)b->images.shape[1];
    st->img_w = (int)b->images.shape[2];
    // the stem convolves the images in the activation dtype (a GPU backend's bf16/fp16)
    st->images = b->images;
    if (b->images.dtype != mrcnn_ws_act_dtype(ws)) {
        st->images = mrcnn_ws_act(ws, 4, b->images.shape);
        m->be->cast(m->be, &b->images, &st->images);
    }
    mrcnn_backbone_forward(m, ws, &st->images, &st->bb);
    mrcnn_rpn_head_forward(m, ws, &st->bb, &st->rpn);
    int gh[MRCNN_FPN_LEVELS], gw[MRCNN_FPN_LEVELS];
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        gh[l] = (int)st->bb.p[l].shape[1];
        gw[l] = (int)st->bb.p[l].shape[2];
    }
    const mrcnn_config *c = &m->cfg;
    st->n_anchors = mrcnn_anchors_generate(MRCNN_FPN_LEVELS, c->anchor_sizes.v, c->anchor_ratios.v,
                                           c->anchor_ratios.n, gh, gw, st->img_h, st->img_w, NULL,
                                           NULL);
    st->anchors = MRCNN_MALLOC((size_t)st->n_anchors * 4 * sizeof(float), "anchors");
    mrcnn_anchors_generate(MRCNN_FPN_LEVELS, c->anchor_sizes.v, c->anchor_ratios.v, c->anchor_ratios.n,
                           gh, gw, st->img_h, st->img_w, st->anchors, st->level_counts);
}

void mrcnn_model_proposals(mrcnn_model *m, const mrcnn_batch *b, bool training, mrcnn_step *st) {
    const mrcnn_config *c = &m->cfg;
    mrcnn_proposal_params pp = {
        .pre_nms_top_n = training ? c->rpn_pre_nms_topk_train : c->rpn_pre_nms_topk_test,
        .post_nms_top_n = training ? c->rpn_post_nms_topk_train : c->rpn_post_nms_topk_test,
        .nms_thresh = c->rpn_nms_thresh,
        .min_size = c->rpn_min_size,
        .score_thresh = 0.0f,
    };
    int N = st->n_images;
    if (training && m->pinned_proposals) {
        st->prop_cap = m->pinned_cap;
        st->proposals = MRCNN_MALLOC((size_t)N * m->pinned_cap * 4 * sizeof(float), "proposals");
        st->proposal_scores = MRCNN_CALLOC((size_t)N * m->pinned_cap, sizeof(float), "proposal scores");
        st->proposal_counts = MRCNN_MALLOC((size_t)N * sizeof(int64_t), "proposal counts");
        memcpy(st->proposals, m->pinned_proposals, (size_t)N * m->pinned_cap * 4 * sizeof(float));
        memcpy(st->proposal_counts, m->pinned_counts, (size_t)N * sizeof(int64_t));
        return;
    }
    st->prop_cap = pp.post_nms_top_n;
    st->proposals = MRCNN_CALLOC((size_t)N * pp.post_nms_top_n * 4, sizeof(float), "proposals");
    st->proposal_scores = MRCNN_CALLOC((size_t)N * pp.post_nms_top_n, sizeof(float), "proposal scores");
    st->proposal_counts = MRCNN_CALLOC((size_t)N, sizeof(int64_t), "proposal counts");
    float *obj[MRCNN_FPN_LEVELS], *del[MRCNN_FPN_LEVELS];
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        obj[l] = read_host(m->be, &st->rpn.logits[l]);
        del[l] = read_host(m->be, &st->rpn.deltas[l]);
    }
    mrcnn_rpn_proposals(&pp, N, MRCNN_FPN_LEVELS, st->level_counts, (const float *const *)obj,
                        (const float *const *)del, st->anchors, b->image_hw, st->proposals,
                        st->proposal_scores, st->proposal_counts);
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        free(obj[l]);
        free(del[l]);
    }
}

/* RPN losses: targets per image, sampled weights scattered into per-level NHWC
 * tensors, one BCE and one smooth-L1 per level normalized by the batch's count. */
static void rpn_losses(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, bool backward, mrcnn_step *st) {
    const mrcnn_config *c = &m->cfg;
    int N = st->n_images, A = m->rpn.num_anchors;
    int64_t nA = st->n_anchors;
    float *lab = MRCNN_MALLOC((size_t)N * nA * sizeof(float), "rpn labels");
    float *reg = MRCNN_MALLOC((size_t)N * nA * 4 * sizeof(float), "rpn targets");
    float *ow = MRCNN_CALLOC((size_t)N * nA, sizeof(float), "rpn obj weights");
    float *bw = MRCNN_CALLOC((size_t)N * nA * 4, sizeof(float), "rpn box weights");
    double sampled = 0;
    for (int i = 0; i < N; i++) {
        const mrcnn_image_gt *g = &b->gt[i];
        mrcnn_rpn_assign_targets(st->anchors, nA, g->boxes, g->n, c->rpn_iou_thresholds.v[1],
                                 c->rpn_iou_thresholds.v[0], lab + i * nA, reg + i * nA * 4);
        mrcnn_rng rng = mrcnn_rng_make((uint64_t)c->seed, b->epoch, image_index(b, i),
                                       MRCNN_RNG_RPN_SAMPLE);
        sampled += (double)mrcnn_rpn_sample(lab + i * nA, nA, c->rpn_batch_size_per_image,
                                            c->rpn_positive_fraction, &rng, ow + i * nA, bw + i * nA * 4);
    }
    for (int64_t j = 0; j < (int64_t)N * nA; j++) lab[j] = lab[j] > 0 ? 1.0f : 0.0f;
    sum_norms(m, &sampled, 1);
    st->rpn_sampled = sampled;
    float mult = loss_mult(m), norm = (float)(sampled > 0 ? sampled : 1) / mult;
    // regroup image-major (N, all levels) into level-major (level: N, h, w, A)
    int64_t off = 0;
    double lobj = 0, lbox = 0;
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        int64_t cnt = st->level_counts[l];
        float *tl = MRCNN_MALLOC((size_t)N * cnt * sizeof(float), "level labels");
        float *wl = MRCNN_MALLOC((size_t)N * cnt * sizeof(float), "level weights");
        float *rl = MRCNN_MALLOC((size_t)N * cnt * 4 * sizeof(float), "level targets");
        float *bl = MRCNN_MALLOC((size_t)N * cnt * 4 * sizeof(float), "level box weights");
        for (int i = 0; i < N; i++) {
            memcpy(tl + i * cnt, lab + i * nA + off, (size_t)cnt * sizeof(float));
            memcpy(wl + i * cnt, ow + i * nA + off, (size_t)cnt * sizeof(float));
            memcpy(rl + i * cnt * 4, reg + (i * nA + off) * 4, (size_t)cnt * 4 * sizeof(float));
            memcpy(bl + i * cnt * 4, bw + (i * nA + off) * 4, (size_t)cnt * 4 * sizeof(float));
        }
        const mrcnn_tensor *x = &st->rpn.logits[l], *d = &st->rpn.deltas[l];
        MRCNN_CHECK(mrcnn_tensor_numel(x) == N * cnt && x->shape[3] == A,
                    "RPN level %d: %lld logits but %lld anchors per image", l,
                    (long long)mrcnn_tensor_numel(x), (long long)cnt);
        mrcnn_tensor t = upload(ws, MRCNN_DTYPE_F32, x->ndim, x->shape, tl);
        mrcnn_tensor w = upload(ws, MRCNN_DTYPE_F32, x->ndim, x->shape, wl);
        mrcnn_tensor rt = upload(ws, MRCNN_DTYPE_F32, d->ndim, d->shape, rl);
        mrcnn_tensor rw = upload(ws, MRCNN_DTYPE_F32, d->ndim, d->shape, bl);
        mrcnn_tensor lo = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){1});
        mrcnn_tensor lb = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){1});
        if (backward) {
            st->dlogits_rpn[l] = mrcnn_ws_like(ws, x);
            st->ddeltas_rpn[l] = mrcnn_ws_like(ws, d);
        }
        m->be->bce_logits(m->be, x, &t, &w, norm, &lo, backward ? &st->dlogits_rpn[l] : NULL);
        m->be->smooth_l1(m->be, d, &rt, &rw, c->rpn_smooth_l1_beta, norm, &lb,
                         backward ? &st->ddeltas_rpn[l] : NULL);
        lobj += read_scalar(m->be, &lo) / mult;
        lbox += read_scalar(m->be, &lb) / mult;
        free(tl);
        free(wl);
        free(rl);
        free(bl);
        off += cnt;
    }
    st->losses.rpn_objectness = lobj;
    st->losses.rpn_box_reg = lbox;
    free(lab);
    free(reg);
    free(ow);
    free(bw);
}

/* Samples ROIs per image and compacts them over the batch. */
static void sample_rois(mrcnn_model *m, const mrcnn_batch *b, mrcnn_step *st) {
    const mrcnn_config *c = &m->cfg;
    int N = st->n_images, S = c->roi_batch_size_per_image, F = c->mask_head_max_fg_per_image;
    mrcnn_roi_sample_params sp = {
        .batch_size_per_image = S,
        .positive_fraction = c->roi_positive_fraction,
        .iou_thresh = c->roi_iou_threshold,
        .max_fg = F,
        .coder = mrcnn_box_coder_make(c->box_reg_weights.v[0], c->box_reg_weights.v[1],
                                      c->box_reg_weights.v[2], c->box_reg_weights.v[3]),
    };
    float *rois = MRCNN_MALLOC((size_t)S * 4 * sizeof(float), "sampled rois");
    int32_t *labels = MRCNN_MALLOC((size_t)S * sizeof(int32_t), "roi labels");
    int32_t *matched = MRCNN_MALLOC((size_t)S * sizeof(int32_t), "roi matches");
    float *regt = MRCNN_MALLOC((size_t)S * 4 * sizeof(float), "roi targets");
    int32_t *fg = MRCNN_MALLOC((size_t)(F ? F : 1) * sizeof(int32_t), "fg index");
    st->rois = MRCNN_MALLOC((size_t)N * S * 5 * sizeof(float), "rois");
    st->roi_labels = MRCNN_MALLOC((size_t)N * S * sizeof(int32_t), "roi labels");
    st->roi_reg_targets = MRCNN_MALLOC((size_t)N * S * 4 * sizeof(float), "roi targets");
    st->roi_image_start = MRCNN_CALLOC((size_t)N + 1, sizeof(int), "roi image starts");
    st->fg_rois = MRCNN_MALLOC((size_t)N * (F ? F : 1) * 5 * sizeof(float), "fg rois");
    st->fg_labels = MRCNN_MALLOC((size_t)N * (F ? F : 1) * sizeof(int32_t), "fg labels");
    st->fg_gt = MRCNN_MALLOC((size_t)N * (F ? F : 1) * sizeof(int32_t), "fg gt");
    int R = 0, Rf = 0;
    for (int i = 0; i < N; i++) {
        const mrcnn_image_gt *g = &b->gt[i];
        mrcnn_rng rng = mrcnn_rng_make((uint64_t)c->seed, b->epoch, image_index(b, i),
                                       MRCNN_RNG_ROI_SAMPLE);
        int n_fg = 0;
        int cnt = mrcnn_roi_sample(&sp, st->proposals + (size_t)i * st->prop_cap * 4,
                                   (int)st->proposal_counts[i], g->boxes, g->labels, g->n, &rng, rois,
                                   labels, matched, regt, fg, &n_fg);
        st->roi_image_start[i] = R;
        for (int j = 0; j < cnt; j++, R++) {
            st->rois[R * 5] = (float)i;
            memcpy(st->rois + R * 5 + 1, rois + j * 4, 4 * sizeof(float));
            st->roi_labels[R] = labels[j];
            memcpy(st->roi_reg_targets + R * 4, regt + j * 4, 4 * sizeof(float));
        }
        for (int j = 0; j < n_fg; j++, Rf++) {
            int r = fg[j];
            st->fg_rois[Rf * 5] = (float)i;
            memcpy(st->fg_rois + Rf * 5 + 1, rois + r * 4, 4 * sizeof(float));
            st->fg_labels[Rf] = labels[r];
            st->fg_gt[Rf] = matched[r];
        }
    }
    st->roi_image_start[N] = R;
    st->n_rois = R;
    st->n_fg = Rf;
    free(rois);
    free(labels);
    free(matched);
    free(regt);
    free(fg);
}

static void box_losses(mrcnn_model *m, mrcnn_ws *ws, bool backward, mrcnn_step *st) {
    const mrcnn_backend *be = m->be;
    int R = st->n_rois;
    double norm_d = R;
    sum_norms(m, &norm_d, 1);
    float mult = loss_mult(m), norm = (float)(norm_d > 0 ? norm_d : 1) / mult;
    mrcnn_tensor lab = upload(ws, MRCNN_DTYPE_I32, 1, (int64_t[]){R}, st->roi_labels);
    mrcnn_tensor lc = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){1});
    if (backward) {
        st->dcls = mrcnn_ws_like(ws, &st->box.logits);
        st->ddeltas = mrcnn_ws_like(ws, &st->box.deltas);
    }
    if (R > 0) be->softmax_ce(be, &st->box.logits, &lab, norm, &lc, backward ? &st->dcls : NULL);
    st->losses.classifier = R > 0 ? read_scalar(be, &lc) / mult : 0;
    // box regression on the gt class of the foreground only, gathered on the device
    int32_t *fgl = MRCNN_MALLOC((size_t)(R ? R : 1) * sizeof(int32_t), "fg labels");
    float *wt = MRCNN_CALLOC((size_t)(R ? R : 1) * 4, sizeof(float), "box weights");
    for (int r = 0; r < R; r++) {
        fgl[r] = st->roi_labels[r] > 0 ? st->roi_labels[r] : -1;
        if (fgl[r] > 0) wt[r * 4] = wt[r * 4 + 1] = wt[r * 4 + 2] = wt[r * 4 + 3] = 1.0f;
    }
    int64_t s4[2] = {R, 4};
    mrcnn_tensor fl = upload(ws, MRCNN_DTYPE_I32, 1, (int64_t[]){R}, fgl);
    mrcnn_tensor gd = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 2, s4);
    if (R > 0) be->gather_class_deltas(be, &st->box.deltas, &fl, &gd);
    mrcnn_tensor tg = upload(ws, MRCNN_DTYPE_F32, 2, s4, st->roi_reg_targets);
    mrcnn_tensor wd = upload(ws, MRCNN_DTYPE_F32, 2, s4, wt);
    mrcnn_tensor dg = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 2, s4);
    mrcnn_tensor lb = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){1});
    if (R > 0) be->smooth_l1(be, &gd, &tg, &wd, m->cfg.box_smooth_l1_beta, norm, &lb, backward ? &dg : NULL);
    st->losses.box_reg = R > 0 ? read_scalar(be, &lb) / mult : 0;
    if (backward && R > 0) be->gather_class_deltas_backward(be, &dg, &fl, &st->ddeltas);
    free(fgl);
    free(wt);
}

static void mask_loss(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, bool backward, mrcnn_step *st) {
    const mrcnn_backend *be = m->be;
    int Rf = st->n_fg, M = 2 * m->cfg.mask_head_pooler_resolution;
    double norm_d = (double)Rf * M * M;
    sum_norms(m, &norm_d, 1);
    if (backward) st->dmask_logits = mrcnn_ws_like(ws, &st->mask.logits);
    if (Rf == 0) {
        // torchvision: mask_logits.sum() * 0, a zero loss with zero gradients
        st->losses.mask = 0;
        return;
    }
    float *tgt = MRCNN_MALLOC((size_t)Rf * M * M * sizeof(float), "mask targets");
    float *box = MRCNN_MALLOC((size_t)Rf * 4 * sizeof(float), "mask boxes");
    for (int r = 0; r < Rf; r++) memcpy(box + r * 4, st->fg_rois + r * 5 + 1, 4 * sizeof(float));
    for (int r0 = 0; r0 < Rf;) {
        int i = (int)st->fg_rois[r0 * 5], r1 = r0;
        while (r1 < Rf && (int)st->fg_rois[r1 * 5] == i) r1++;
        const mrcnn_image_gt *g = &b->gt[i];
        MRCNN_CHECK(g->masks != NULL, "mask loss: image %d has %d instances but no masks", i, g->n);
        mrcnn_mask_targets(g->masks, g->n, b->image_hw[2 * i], b->image_hw[2 * i + 1], box + r0 * 4,
                           st->fg_gt + r0, r1 - r0, M, tgt + (size_t)r0 * M * M);
        r0 = r1;
    }
    int64_t sh[3] = {Rf, M, M};
    mrcnn_tensor fl = upload(ws, MRCNN_DTYPE_I32, 1, (int64_t[]){Rf}, st->fg_labels);
    mrcnn_tensor gd = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 3, sh);
    be->gather_class_masks(be, &st->mask.logits, &fl, &gd);
    mrcnn_tensor td = upload(ws, MRCNN_DTYPE_F32, 3, sh, tgt);
    mrcnn_tensor dg = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 3, sh);
    mrcnn_tensor lm = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){1});
    float mult = loss_mult(m);
    be->bce_logits(be, &gd, &td, NULL, (float)(norm_d / mult), &lm, backward ? &dg : NULL);
    st->losses.mask = read_scalar(be, &lm) / mult;
    if (backward) be->gather_class_masks_backward(be, &dg, &fl, &st->dmask_logits);
    free(tgt);
    free(box);
}

static void run_box_head(mrcnn_model *m, mrcnn_ws *ws, mrcnn_step *st) {
    const mrcnn_config *c = &m->cfg;
    int F = m->fpn.out_channels, P = c->box_head_pooler_resolution, R = st->n_rois;
    st->rois_dev = upload(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){R, 5}, st->rois);
    st->box_x = mrcnn_ws_act(ws, 4, (int64_t[]){R, P, P, F});
    mrcnn_roi_align_desc d = pooler_desc(st, F, P, c->box_head_sampling_ratio, c->box_head_aligned);
    if (R > 0) m->be->roi_align_forward(m->be, &d, st->bb.p, &st->rois_dev, &st->box_x);
    mrcnn_box_head_forward(m, ws, &st->box_x, &st->box);
}

static void run_mask_head(mrcnn_model *m, mrcnn_ws *ws, mrcnn_step *st) {
    const mrcnn_config *c = &m->cfg;
    int F = m->fpn.out_channels, P = c->mask_head_pooler_resolution, Rf = st->n_fg;
    st->fg_rois_dev = upload(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){Rf, 5}, st->fg_rois);
    st->mask_x = mrcnn_ws_act(ws, 4, (int64_t[]){Rf, P, P, F});
    mrcnn_roi_align_desc d = pooler_desc(st, F, P, c->mask_head_sampling_ratio, c->box_head_aligned);
    if (Rf > 0) m->be->roi_align_forward(m->be, &d, st->bb.p, &st->fg_rois_dev, &st->mask_x);
    mrcnn_mask_head_forward(m, ws, &st->mask_x, &st->mask);
}

void mrcnn_model_train_step(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, bool backward,
                            mrcnn_step *st) {
    MRCNN_CHECK(b->gt != NULL, "train step: the batch has no ground truth");
    mrcnn_model_forward_features(m, ws, b, st);
    rpn_losses(m, ws, b, backward, st);
    mrcnn_model_proposals(m, b, true, st);
    sample_rois(m, b, st);
    run_box_head(m, ws, st);
    box_losses(m, ws, backward, st);
    run_mask_head(m, ws, st);
    mask_loss(m, ws, b, backward, st);
    mrcnn_losses *l = &st->losses;
    l->total = l->rpn_objectness + l->rpn_box_reg + l->classifier + l->box_reg + l->mask;
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
        m->be->roi_align_backward(m->be, &d, &st->fg_rois_dev, &dx, dp);
    }
    if (st->n_rois > 0) {
        mrcnn_tensor dx = mrcnn_ws_like(ws, &st->box_x);
        mrcnn_box_head_backward(m, ws, &st->box, &st->dcls, &st->ddeltas, &dx);
        mrcnn_roi_align_desc d = pooler_desc(st, F, c->box_head_pooler_resolution,
                                             c->box_head_sampling_ratio, c->box_head_aligned);
        m->be->roi_align_backward(m->be, &d, &st->rois_dev, &dx, dp);
    }
    mrcnn_rpn_head_backward(m, ws, &st->bb, &st->rpn, st->dlogits_rpn, st->ddeltas_rpn, dp);
    mrcnn_backbone_backward(m, ws, &st->images, &st->bb, dp);
    // heads that saw no rows this step: their (zero) gradients are final too
    for (int i = 0; i < mrcnn_params_count(&m->params); i++) mrcnn_model_grad_ready(m, i);
}

/* ---- inference ------------------------------------------------------------------ */

void mrcnn_model_detect(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_step *st,
                        mrcnn_detections *det) {
    const mrcnn_config *c = &m->cfg;
    mrcnn_model_forward_features(m, ws, b, st);
    mrcnn_model_proposals(m, b, false, st);
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
    free(st->anchors);
    free(st->proposals);
    free(st->proposal_scores);
    free(st->proposal_counts);
    free(st->rois);
    free(st->roi_labels);
    free(st->roi_reg_targets);
    free(st->roi_image_start);
    free(st->fg_rois);
    free(st->fg_labels);
    free(st->fg_gt);
    memset(st, 0, sizeof *st);
}
