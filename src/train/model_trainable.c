/* The Mask R-CNN trainable (model_trainable.h): stage and run over a batch source. */
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/model_trainable.h"

static double mt_stage(void *ctx, int64_t step, int micro, uint64_t *shape_key) {
    mrcnn_model_trainable *mt = ctx;
    mrcnn_batch b;
    memset(&b, 0, sizeof b);
    const double wait_s = mt->next(mt->source_ctx, step, micro, &b);
    const uint64_t key = mrcnn_model_stage(mt->model, micro, &b);
    if (shape_key) *shape_key = key;
    return wait_s;
}

static void mt_ready(int param_index, void *ctx) {
    mrcnn_model_trainable *mt = ctx;
    if (mt->on_ready) mt->on_ready(param_index, mt->bk, mt->on_ready_ctx);
    else mrcnn_buckets_mark_ready(mt->bk, param_index);
}

static void mt_run(void *ctx, int micro, float loss_mult, const mrcnn_tensor *loss_scale, mrcnn_tensor *loss_acc,
                   float acc_mult, mrcnn_buckets *bk) {
    mrcnn_model_trainable *mt = ctx;
    mrcnn_model *m = mt->model;
    m->loss_mult = loss_mult;
    m->loss_scale = loss_scale;
    mt->bk = bk;
    m->grad_ready = bk ? mt_ready : NULL;
    m->grad_ready_ctx = mt;
    mrcnn_pass st;
    mrcnn_model_run(m, micro, &mt->ws, true, &st);
    m->be->step.axpy(m->be, acc_mult, &st.loss_dev, loss_acc); // the terms stay on the device
    mrcnn_pass_free(&st);
    // released here, inside the device half: a captured replay allocates and frees them itself
    mrcnn_ws_reset(&mt->ws);
    mt->bk = NULL;
    m->grad_ready = NULL;
}

static void mt_precond(void *ctx, float *q) {
    mrcnn_model_trainable *mt = ctx;
    mrcnn_params_precond(&mt->model->params, q);
}

void mrcnn_model_trainable_init(mrcnn_model_trainable *mt, mrcnn_model *m, mrcnn_batch_source next,
                                void *source_ctx) {
    MRCNN_CHECK(m != NULL && next != NULL, "model trainable: no model or no batch source");
    memset(mt, 0, sizeof *mt);
    mt->model = m;
    mt->next = next;
    mt->source_ctx = source_ctx;
    mrcnn_ws_init(&mt->ws, m->be);
    mt->tm = (mrcnn_trainable){.ctx = mt,
                               .params = &m->params.values,
                               .grads = &m->params.grads,
                               .trainable = m->params.trainable,
                               .precond = mt_precond,
                               .fold_scale = m->params.fold_scale,
                               .n_losses = MRCNN_N_LOSSES,
                               .loss_names = mrcnn_loss_names,
                               .scales_loss = 1,
                               .stage = mt_stage,
                               .run = mt_run};
}

void mrcnn_model_trainable_free(mrcnn_model_trainable *mt) {
    mrcnn_ws_free(&mt->ws);
    memset(mt, 0, sizeof *mt);
}
