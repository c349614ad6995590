/* The parameter registry: named views in ONE params arena (with a grads arena of the
 * same layout). Names are torchvision's (new style: inner_blocks.0.0, mask_head.0.0,
 * rpn.head.conv.0.0), with two differences documented in data_prep/weights.py:
 *  - frozen batch-norm is folded into the conv before it at load, so a backbone
 *    conv "X.weight" gets a bias "X.bias" and the BN entries disappear;
 *  - tensors are in the project's layout: conv filters (K, R, S, C), deconv
 *    (K out, 2, 2, C in), fc6 input in NHWC-flatten order (7, 7, C).
 * src/model/params.c. */
#ifndef MRCNN_PARAMS_H
#define MRCNN_PARAMS_H

#include <stdbool.h>
#include <stdint.h>
#include "mrcnn/arena.h"
#include "mrcnn/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameter registry ---------------------------------------------------- */
/* One padded view (mrcnn_params_padded): the entry, its padded extents, the block. */
struct mrcnn_params_pad {
    int index;
    int64_t rows, last;
    mrcnn_tensor t; // (rows, ..., last): the entry's shape with those two extents
};

typedef struct mrcnn_params {
    mrcnn_arena values; // fp32 master weights
    mrcnn_arena grads;  // same names, shapes and offsets
    bool *trainable;    // (n_entries): frozen entries get no gradient
    char (*bn)[MRCNN_ARENA_NAME_LEN]; // (n_entries): BN prefix folded into this conv weight, or ""
    /* (n_entries): the frozen BN's scale s = gamma / sqrt(var + eps), one per output
     * channel (K), that the load folded into this conv weight (W' = s W), or NULL (not
     * folded, or from a file that did not say). SGD on W' is SGD on torchvision's W only
     * with the gradient taken as s^2 g' and the clipping norm over s g' (optimizer.c). */
    float **fold_scale;
    /* (n_entries): where fold_scale[i] points when set, (K) floats, made when a conv with a
     * BN is added, so that a load never allocates what the model keeps (a load that
     * fails half-way leaves nothing the model points to freed or leaked). */
    float **fold_buf;
    /* The weights as the layers compute with them (forward and data gradient), in the
     * activation dtype (mrcnn_ws_act_dtype: a GPU backend's bf16/fp16): made from values
     * by ONE cast of the whole arena per step (mrcnn_params_refresh), not one per layer
     * call. Element j of values is element j of the copy (offsets scaled by the dtype's
     * size, not re-aligned), so the cast is one flat call. base is NULL, and the layers
     * read values itself, when that dtype is fp32 (the CPU backend; fp32 on a GPU). */
    mrcnn_arena copy;
    /* A copy even in fp32 (an exact fp32 -> fp32 cast): runs the copy's path where the
     * compute dtype is fp32 (the CPU backend's tests); refused in the CPU's rounded-storage
     * mode, whose cast rounds. Read at the next refresh. */
    bool separate_copy;
    /* Padded views (mrcnn_params_padded): entries with zero output rows or zero input
     * channels appended for a GPU's tensor-core shapes, refreshed with the copy. */
    struct mrcnn_params_pad *pads; // (n_pads)
    int n_pads, cap_pads;
    int n_cap;
    const mrcnn_backend *be; // owner of the blocks once committed
} mrcnn_params;

void mrcnn_params_init(mrcnn_params *p);
/* Registers a parameter; bn names the frozen BN folded into it at load ("" none). */
int mrcnn_params_add(mrcnn_params *p, const char *name, int ndim, const int64_t *shape,
                     bool trainable, const char *bn);
/* Allocates both arenas on the backend's device (and the compute copy when the
 * backend's precision already asks for one). */
void mrcnn_params_commit(mrcnn_params *p, const mrcnn_backend *be);
/* The compute copy from the values: one be->nn.cast over the whole arena, nothing when
 * the layers read the values themselves. Device work only (inside the captured step: a
 * replay repeats it); the model's forward calls it at its start (mrcnn_model_run's
 * first micro-batch, mrcnn_model_forward_features), so a load, an import, a resume or
 * an SGD update is seen by the next forward. Allocates the copy on first use or when the
 * precision changed since (a warm-up step, never a replayed one). */
void mrcnn_params_refresh(mrcnn_params *p);
/* Entry i as the layers compute with it: the copy's view after mrcnn_params_refresh, or
 * the fp32 value when there is no copy. Weights only: biases, read once per output
 * element, stay fp32 (the values). */
mrcnn_tensor *mrcnn_params_compute(mrcnn_params *p, int i);
/* Entry i with zeros appended: its first dimension to `rows` (zero output rows: the
 * layouts keep the output channel slowest, so the real rows are a prefix) or its last
 * dimension to `last` (zero input channels), not both; in the dtype the layers compute
 * with (a weight: mrcnn_params_compute's; a 1-D bias: fp32). Made on first use, then
 * remade by every mrcnn_params_refresh after the copy: one be->nn.channel_copy per padded
 * entry per step, where a copy per layer call was made before. A bias's `last` is
 * ignored. Returned by value (a later call may move the registry); read-only: gradients
 * still go to the grads arena's own shape. */
mrcnn_tensor mrcnn_params_padded(mrcnn_params *p, int i, int64_t rows, int64_t last);
/* Records the (k) per-output-channel scale folded into entry i (copied; NULL clears). */
void mrcnn_params_set_fold_scale(mrcnn_params *p, int i, const float *scale, int64_t k);
/* The SGD preconditioner of every element of the params arena (n = values.size / 4):
 * s^2 for a trainable folded conv weight (its channel's s), 1 elsewhere. */
void mrcnn_params_precond(const mrcnn_params *p, float *out);
int mrcnn_params_count(const mrcnn_params *p);
int64_t mrcnn_params_numel(const mrcnn_params *p, bool trainable_only);
void mrcnn_params_free(mrcnn_params *p);

#ifdef __cplusplus
}
#endif
#endif
