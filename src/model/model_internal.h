/* Private helpers of src/model/ shared by the assembly (maskrcnn*.c: the network order,
 * staging, inference, construction) and the heads' targets and losses (rpn_head.c,
 * box_head.c, mask_head.c). */
#ifndef MRCNN_MODEL_INTERNAL_H
#define MRCNN_MODEL_INTERNAL_H

#include "mrcnn/check.h"
#include "mrcnn/model.h"

#include <string.h>

/* The first `rows` rows of t (valid rows come first in the detection ops' outputs). */
static inline mrcnn_tensor rows_view(const mrcnn_tensor *t, int64_t rows) {
    int64_t shape[MRCNN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[0] = rows;
    return mrcnn_tensor_view(t->data, t->dtype, t->device, t->ndim, shape);
}

/* Element k of a 1-D fp32 vector as a (1) tensor: the loss outputs and count inputs. */
static inline mrcnn_tensor elem_view(const mrcnn_tensor *v, int k) {
    return mrcnn_tensor_view((float *)v->data + k, MRCNN_DTYPE_F32, v->device, 1, (int64_t[]){1});
}

/* The gradient multiplier (fp16 loss scaling, 1/accumulation): the loss ops scale
 * the gradients by it and leave the loss values as they are. */
static inline float loss_mult(const mrcnn_model *m) { return m->loss_mult > 0 ? m->loss_mult : 1.0f; }

/* A count the host may know without waiting (the CPU), or -1. */
static inline int64_t count_hint(const mrcnn_backend *be, const mrcnn_tensor *count) {
    return be->det.count_hint ? be->det.count_hint(be, count) : -1;
}

/* A ws tensor holding a copy of host data (an upload: not on the training path). */
static inline mrcnn_tensor model_upload(mrcnn_ws *ws, mrcnn_dtype dt, int ndim, const int64_t *shape,
                                        const void *host) {
    mrcnn_tensor t = mrcnn_ws_tensor_uninit(ws, dt, ndim, shape);
    if (mrcnn_tensor_numel(&t)) ws->be->mem.write(ws->be, &t, host);
    return t;
}

/* A gradient buffer shaped like t for an op that writes it whole (dx_mode WRITE): not
 * zeroed (poisoned on the CPU, so an element left unwritten shows as NaN). */
static inline mrcnn_tensor grad_buffer(mrcnn_ws *ws, const mrcnn_tensor *t) {
    return mrcnn_ws_tensor_uninit(ws, t->dtype, t->ndim, t->shape);
}

/* ---- between the assembly's files (maskrcnn*.c) ---- */

/* The FPN levels' sizes gh, gw (MRCNN_FPN_LEVELS) of an H x W batch without running the
 * network (maskrcnn_staging.c). */
void model_level_sizes(int H, int W, int *gh, int *gw);
/* The weights as the layers read them, before a forward's first op: the compute copy
 * (mrcnn_params_refresh) and the padded layers' views (mrcnn_params_padded), made here
 * when missing: at first use they would be made inside the mask head's conditional
 * body (stream.run_if), where nothing may be allocated (maskrcnn_init.c). */
void model_refresh_weights(mrcnn_model *m);
/* The box predictors' padded views, as their forward reads them (box_head.c). */
void model_box_head_views(mrcnn_model *m);
/* The cached anchors of an H x W batch, made and uploaded on first use
 * (maskrcnn_staging.c). */
const mrcnn_model_anchors *model_anchors(mrcnn_model *m, int H, int W);
/* The box head on st->rois_dev (st->n_rois rows), the mask head on st->fg_rois_dev
 * (st->n_fg rows): ROIAlign from the FPN levels, then the head (maskrcnn.c). */
void model_run_box_head(mrcnn_model *m, mrcnn_ws *ws, mrcnn_pass *st);
void model_run_mask_head(mrcnn_model *m, mrcnn_ws *ws, mrcnn_pass *st);

#endif
