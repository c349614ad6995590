/* A small stand-in model for the checkpoint targets and the seed generator: a handful of
 * named parameters in a params registry (include/mrcnn/model.h), two of them backbone
 * convs with a frozen BN folded in at load (bn names), as mrcnn_model_init registers
 * them. The checkpoint readers only look at m->params and m->be, so the files stay a few
 * KiB instead of the tiny config's ~1 MB. */
#ifndef MRCNN_FUZZ_MODEL_H
#define MRCNN_FUZZ_MODEL_H

#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/config.h"
#include "mrcnn/model.h"

static void fuzz_model_build(mrcnn_model *m, mrcnn_backend *be) {
    memset(m, 0, sizeof *m);
    mrcnn_config_defaults(&m->cfg);
    m->be = be;
    mrcnn_params *p = &m->params;
    mrcnn_params_init(p);
    mrcnn_params_add(p, "backbone.body.conv1.weight", 4, (int64_t[]){4, 3, 3, 3}, false, "backbone.body.bn1");
    mrcnn_params_add(p, "backbone.body.conv1.bias", 1, (int64_t[]){4}, false, "");
    mrcnn_params_add(p, "backbone.body.layer1.0.conv1.weight", 4, (int64_t[]){2, 1, 1, 4}, true, "backbone.body.layer1.0.bn1");
    mrcnn_params_add(p, "backbone.body.layer1.0.conv1.bias", 1, (int64_t[]){2}, true, "");
    mrcnn_params_add(p, "roi_heads.box_predictor.cls_score.weight", 2, (int64_t[]){3, 8}, true, "");
    mrcnn_params_add(p, "roi_heads.box_predictor.cls_score.bias", 1, (int64_t[]){3}, true, "");
    mrcnn_params_add(p, "roi_heads.mask_predictor.mask_fcn_logits.weight", 4, (int64_t[]){3, 1, 1, 2}, true, "");
    mrcnn_params_commit(p, be);
}

#endif
