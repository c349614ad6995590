/* Mask R-CNN's construction: the network built from the config with its parameters
 * registered (each part builds its own: resnet.c, fpn.c, the heads), freed with
 * everything the model caches (staging slots, anchors), and the deterministic random
 * weights of a model trained from scratch. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "mrcnn/rng.h"
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mrcnn_model_init(mrcnn_model *m, const mrcnn_config *cfg, mrcnn_backend *be) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->be = be;
    MRCNN_CHECK(cfg->roi_num_classes >= 1, "MODEL.ROI_HEADS.NUM_CLASSES = %d must be at least 1",
                cfg->roi_num_classes);
    m->num_classes = cfg->roi_num_classes + 1;
    m->pad_align = be->device == MRCNN_DEVICE_GPU ? 8 : 1;
    mrcnn_params_init(&m->params);
    mrcnn_resnet_build(m);
    mrcnn_fpn_build(m);
    mrcnn_rpn_head_build(m);
    mrcnn_box_head_build(m);
    mrcnn_mask_head_build(m);
    mrcnn_params_commit(&m->params, be);
    m->grad_reported = MRCNN_CALLOC((size_t)mrcnn_params_count(&m->params), sizeof(bool), "grad reports");
}

void model_refresh_weights(mrcnn_model *m) {
    mrcnn_params_refresh(&m->params);
    // the padded layers (pad_in, pad_out): their views, as their forward reads them
    const mrcnn_conv_layer *padded[] = {&m->resnet.stem, &m->rpn.cls, &m->rpn.bbox, &m->mask.logits};
    for (size_t i = 0; i < sizeof padded / sizeof *padded; i++) {
        mrcnn_tensor w, b;
        mrcnn_conv_layer_weights(m, padded[i], &w, &b);
    }
    model_box_head_views(m);
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
