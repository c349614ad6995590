/* Mask R-CNN (ResNet-FPN) on one backend: parameters, forward, losses, backward,
 * inference. The model code reaches the device only through the backend's
 * function pointers, so the same network runs on the CPU and the GPU.
 *
 * Parameters are named views in ONE params arena (with a grads arena of the same
 * layout). Names are torchvision's (new style: inner_blocks.0.0, mask_head.0.0,
 * rpn.head.conv.0.0), with two differences documented in data_prep/weights.py:
 *  - frozen batch-norm is folded into the conv before it at load, so a backbone
 *    conv "X.weight" gets a bias "X.bias" and the BN entries disappear;
 *  - tensors are in the project's layout: conv filters (K, R, S, C), deconv
 *    (K out, 2, 2, C in), fc6 input in NHWC-flatten order (7, 7, C). */
#ifndef MRCNN_MODEL_H
#define MRCNN_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include "mrcnn/arena.h"
#include "mrcnn/backend.h"
#include "mrcnn/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU backend, with its own instance per call (so set_precision stays local):
 * mrcnn_backend_cpu_create_generic (backend.h) plus the model's ops (ROIAlign, the
 * detection ops of detect_ops.h), installed here so that the backend below never calls up into the model
 * (src/model/backend_cpu_model.c). */
mrcnn_backend *mrcnn_backend_cpu_create(void);

/* The one choice of a backend (mrcnn train, eval, predict, bench train): the CPU, or
 * the GPU o->gpu (< 0: none visible to this rank). A GPU backend that does not start
 * (no GPU, a GPU=0 build, a driver error) gives NULL with *why set when o->fallback is
 * NULL; else the CPU backend, after the warning "MODEL.DEVICE=cuda but WHY: FALLBACK"
 * (fallback e.g. "training on the CPU"). Lives here, beside mrcnn_backend_cpu_create,
 * because the full CPU backend is the model's (src/model/backend_cpu_model.c). */
typedef struct mrcnn_backend_open_opts {
    mrcnn_device device; // mrcnn_backend_device_parse(MODEL.DEVICE)
    int gpu;
    const char *fallback;
} mrcnn_backend_open_opts;
mrcnn_backend *mrcnn_backend_open(const mrcnn_backend_open_opts *o, const char **why);

#define MRCNN_FROZEN_BN_EPS 1e-5f /* torchvision's FrozenBatchNorm2d default */
#define MRCNN_FPN_LEVELS 5        /* P2..P6 */

/* ---- parameter registry ---------------------------------------------------- */
typedef struct mrcnn_params {
    mrcnn_arena values; // fp32 master weights
    mrcnn_arena grads;  // same names, shapes and offsets
    bool *trainable;    // (n_entries): frozen entries get no gradient
    char (*bn)[MRCNN_ARENA_NAME_LEN]; // (n_entries): BN prefix folded into this conv weight, or ""
    int n_cap;
    const mrcnn_backend *be; // owner of both blocks once committed
} mrcnn_params;

void mrcnn_params_init(mrcnn_params *p);
/* Registers a parameter; bn names the frozen BN folded into it at load ("" none). */
int mrcnn_params_add(mrcnn_params *p, const char *name, int ndim, const int64_t *shape,
                     bool trainable, const char *bn);
/* Allocates both arenas on the backend's device. */
void mrcnn_params_commit(mrcnn_params *p, const mrcnn_backend *be);
int mrcnn_params_count(const mrcnn_params *p);
int64_t mrcnn_params_numel(const mrcnn_params *p, bool trainable_only);
void mrcnn_params_free(mrcnn_params *p);

/* ---- layers ------------------------------------------------------------------- */
typedef struct mrcnn_conv_layer {
    int w, b;            // param indices: w (K, R, S, C), b (K)
    int cin, cout, ks, stride, pad;
    bool frozen;
} mrcnn_conv_layer;

typedef struct mrcnn_bottleneck {
    mrcnn_conv_layer conv1, conv2, conv3, down;
    bool has_down;
} mrcnn_bottleneck;

typedef struct mrcnn_resnet {
    mrcnn_conv_layer stem;      // 7x7 s2 + folded BN + ReLU, then max-pool 3x3 s2
    int n_blocks[4];            // res2..res5
    mrcnn_bottleneck *blocks[4];
    int out_channels[4];        // C2..C5
    int freeze_at;              // 0 none, 1 stem, 2 stem + res2, ...
} mrcnn_resnet;

typedef struct mrcnn_fpn {
    mrcnn_conv_layer inner[4], layer[4]; // lateral 1x1 and output 3x3, C2..C5
    int out_channels;
} mrcnn_fpn;

typedef struct mrcnn_rpn_head {
    mrcnn_conv_layer conv, cls, bbox; // 3x3 + ReLU; 1x1 -> A; 1x1 -> 4A
    int num_anchors;                  // A per location
} mrcnn_rpn_head;

typedef struct mrcnn_box_head {
    int fc6_w, fc6_b, fc7_w, fc7_b, cls_w, cls_b, bbox_w, bbox_b;
    int in_dim, fc_dim, num_classes; // num_classes includes background
} mrcnn_box_head;

typedef struct mrcnn_mask_head {
    int n_conv;
    mrcnn_conv_layer conv[8];
    int deconv_w, deconv_b; // (D, 2, 2, D)
    mrcnn_conv_layer logits; // 1x1 -> num_classes
    int dim;
} mrcnn_mask_head;

/* ---- the model ---------------------------------------------------------------- */
typedef struct mrcnn_model {
    mrcnn_config cfg;
    mrcnn_backend *be; // not owned
    mrcnn_params params;
    mrcnn_resnet resnet;
    mrcnn_fpn fpn;
    mrcnn_rpn_head rpn;
    mrcnn_box_head box;
    mrcnn_mask_head mask;
    int num_classes; // with background
    /* Reduces counts (3) fp32 (sampled anchors, ROIs, fg ROIs of this rank's batch) over
     * ranks in place, on the device (NULL: one rank), once per step before any loss. The
     * loss normalizers are the results, so 2 ranks x 1 image equal 1 rank x 2 images and
     * no count reaches the host: a binding whose gradient buckets average over ranks
     * averages the counts too (sum / ranks), as mrcnn train does. */
    void (*count_sum)(const mrcnn_backend *be, mrcnn_tensor *counts, void *ctx);
    void *count_ctx;
    /* Gradients are of loss_mult x (sum of the losses); the reported losses stay
     * unscaled (fp16 loss scaling; 0 means 1). */
    float loss_mult;
    /* (1) fp32 on the device, or NULL: a further gradient multiplier that only the
     * device knows (the fp16 loss scale the step decided), so no step reads it. */
    const mrcnn_tensor *loss_scale;
    /* Called once per trainable parameter, in backward order, as soon as its gradient
     * is final in this step (gradient buckets start their all-reduce from it). */
    void (*grad_ready)(int param_index, void *ctx);
    void *grad_ready_ctx;
    bool *grad_reported; // (n params) this step's reports
    /* When set, training uses these proposals (N, cap, 4) with counts (N) instead of
     * the RPN's: finite-difference tests hold them fixed, as the backward does. */
    const float *pinned_proposals;
    const int64_t *pinned_counts;
    int pinned_cap;
} mrcnn_model;

/* Builds the network the config describes and registers its parameters (zeros). */
void mrcnn_model_init(mrcnn_model *m, const mrcnn_config *cfg, mrcnn_backend *be);
void mrcnn_model_free(mrcnn_model *m);
/* Deterministic random weights (tests, training from scratch): Kaiming-uniform
 * convs, normal(0, 0.01) box/cls predictors, as torchvision initializes them. */
void mrcnn_model_init_random(mrcnn_model *m, uint64_t seed);
void mrcnn_model_zero_grads(mrcnn_model *m);

/* ---- activations --------------------------------------------------------------
 * Step-scoped device buffers: every tensor the forward keeps for the backward is
 * allocated here and released together by mrcnn_ws_reset. */
typedef struct mrcnn_ws {
    const mrcnn_backend *be;
    void **ptrs;
    size_t *sizes; // (cap) bytes of each allocation
    int n, cap;
    size_t bytes, peak_bytes;
} mrcnn_ws;
void mrcnn_ws_init(mrcnn_ws *ws, const mrcnn_backend *be);
/* A zeroed contiguous tensor of the backend's device. */
mrcnn_tensor mrcnn_ws_tensor(mrcnn_ws *ws, mrcnn_dtype dtype, int ndim, const int64_t *shape);
mrcnn_tensor mrcnn_ws_like(mrcnn_ws *ws, const mrcnn_tensor *t);
/* Activations (and, through mrcnn_ws_like, their gradients) are stored in the backend's
 * storage dtype on a GPU backend, in fp32 on the CPU (whose rounded-storage mode rounds
 * fp32 instead). Loss inputs, targets, ROIs and loss values stay fp32. */
mrcnn_dtype mrcnn_ws_act_dtype(const mrcnn_ws *ws);
mrcnn_tensor mrcnn_ws_act(mrcnn_ws *ws, int ndim, const int64_t *shape);
/* Device -> host as fp32 whatever t's float dtype (fp32, fp16, bf16): the host side of
 * the model (proposals, detections) works in fp32. */
void mrcnn_read_f32(const mrcnn_backend *be, const mrcnn_tensor *t, float *host);
/* Frees one tensor of this workspace early (backward temporaries), so the peak stays
 * near the forward's saved activations. t->data becomes NULL. */
void mrcnn_ws_release(mrcnn_ws *ws, mrcnn_tensor *t);
void mrcnn_ws_reset(mrcnn_ws *ws);
void mrcnn_ws_free(mrcnn_ws *ws);

/* Registers a conv layer "<name>.weight" (K, R, S, C) and "<name>.bias" (K); bn is
 * the frozen BN folded into it ("" for none). */
mrcnn_conv_layer mrcnn_conv_layer_add(mrcnn_model *m, const char *name, int cin, int cout, int ks,
                                      int stride, int pad, bool frozen, const char *bn);
/* Reports a parameter's gradient final (once per step; frozen ones never). */
void mrcnn_model_grad_ready(mrcnn_model *m, int param_index);
void mrcnn_conv_layer_grad_ready(mrcnn_model *m, const mrcnn_conv_layer *l);
/* Conv layer helpers: y = act(conv(x) + b); backward adds into dx (NULL: skip) and,
 * unless the layer is frozen, into its parameter gradients. */
mrcnn_tensor mrcnn_conv_layer_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_conv_layer *l,
                                      const mrcnn_tensor *x, mrcnn_activation act);
void mrcnn_conv_layer_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_conv_layer *l,
                               const mrcnn_tensor *x, const mrcnn_tensor *y, mrcnn_activation act,
                               const mrcnn_tensor *dy, mrcnn_tensor *dx);

/* ---- backbone + FPN ------------------------------------------------------------ */
typedef struct mrcnn_backbone_out {
    mrcnn_tensor stem;           // (N, H/4, W/4, C0) after max-pool
    mrcnn_tensor stem_conv;      // (N, H/2, W/2, C0) before max-pool
    mrcnn_tensor *block_out[4];  // per stage, per block: (N, h, w, C)
    mrcnn_tensor *block_a1[4], *block_a2[4], *block_sc[4];
    mrcnn_tensor c[4];           // C2..C5 (aliases of the last block outputs)
    mrcnn_tensor inner[4];       // FPN top-down sums (N, h, w, F)
    mrcnn_tensor p[MRCNN_FPN_LEVELS]; // P2..P6 (N, h, w, F)
} mrcnn_backbone_out;

void mrcnn_resnet_build(mrcnn_model *m);
void mrcnn_fpn_build(mrcnn_model *m);
/* images (N, H, W, 3), H and W divisible by 32. */
void mrcnn_backbone_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                            mrcnn_backbone_out *out);
/* dp[l] (N, h, w, F) for each P level (a NULL data pointer: no gradient there). */
void mrcnn_backbone_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                             mrcnn_backbone_out *out, mrcnn_tensor *dp);
void mrcnn_backbone_out_free(mrcnn_backbone_out *out);
/* The two halves: ResNet fills stem..c; dc[s] (N, h, w, C) are the gradients of
 * C2..C5 (NULL data: none). FPN fills inner and p from c and returns dc. */
void mrcnn_resnet_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                          mrcnn_backbone_out *out);
void mrcnn_resnet_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                           mrcnn_backbone_out *out, mrcnn_tensor *dc);
void mrcnn_fpn_forward(mrcnn_model *m, mrcnn_ws *ws, mrcnn_backbone_out *out);
/* Gradients of C_s are wanted only where a ResNet stage at or before s trains. */
void mrcnn_fpn_backward(mrcnn_model *m, mrcnn_ws *ws, mrcnn_backbone_out *out, mrcnn_tensor *dp,
                        mrcnn_tensor *dc);
/* True when some parameter before ResNet unit u (0 stem, 1..4 res2..res5) trains,
 * so the gradient of that unit's input is needed. */
bool mrcnn_resnet_needs_input_grad(const mrcnn_model *m, int unit);

/* ---- RPN head ------------------------------------------------------------------ */
typedef struct mrcnn_rpn_out {
    mrcnn_tensor t[MRCNN_FPN_LEVELS];      // (N, h, w, F) after the 3x3 conv + ReLU
    mrcnn_tensor logits[MRCNN_FPN_LEVELS]; // (N, h, w, A): anchor order (h, w, a)
    mrcnn_tensor deltas[MRCNN_FPN_LEVELS]; // (N, h, w, 4A): (h, w, a, 4)
} mrcnn_rpn_out;
void mrcnn_rpn_head_build(mrcnn_model *m);
void mrcnn_rpn_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_backbone_out *bb,
                            mrcnn_rpn_out *out);
/* dlogits/ddeltas like the outputs; dp gets += gradients of the P levels. */
void mrcnn_rpn_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_backbone_out *bb,
                             const mrcnn_rpn_out *out, const mrcnn_tensor *dlogits,
                             const mrcnn_tensor *ddeltas, mrcnn_tensor *dp);

/* ---- box and mask heads -------------------------------------------------------- */
void mrcnn_box_head_build(mrcnn_model *m);
void mrcnn_mask_head_build(mrcnn_model *m);

typedef struct mrcnn_box_head_out {
    mrcnn_tensor x;      // (R, 7*7*F) pooled features
    mrcnn_tensor h6, h7; // (R, fc_dim) after ReLU
    mrcnn_tensor logits; // (R, num_classes)
    mrcnn_tensor deltas; // (R, 4 * num_classes)
} mrcnn_box_head_out;
void mrcnn_box_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x,
                            mrcnn_box_head_out *out);
/* dx may be NULL (no gradient to the pooled features). */
void mrcnn_box_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_box_head_out *out,
                             const mrcnn_tensor *dlogits, const mrcnn_tensor *ddeltas,
                             mrcnn_tensor *dx);

typedef struct mrcnn_mask_head_out {
    mrcnn_tensor x;         // (R, 14, 14, F) pooled features
    mrcnn_tensor conv[8];   // (R, 14, 14, D) after ReLU
    mrcnn_tensor up;        // (R, 28, 28, D) after deconv + ReLU
    mrcnn_tensor logits;    // (R, 28, 28, num_classes)
} mrcnn_mask_head_out;
void mrcnn_mask_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x,
                             mrcnn_mask_head_out *out);
void mrcnn_mask_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_mask_head_out *out,
                              const mrcnn_tensor *dlogits, mrcnn_tensor *dx);

/* ---- assembly: training step and inference ------------------------------------ */
typedef struct mrcnn_image_gt {
    int n;                 // instances
    const float *boxes;    // (n, 4) host, (x1, y1, x2, y2) input-image pixels
    const int32_t *labels; // (n) in 1..num_classes-1
    const uint8_t *masks;  // (n, img_h, img_w) host, nonzero inside; img_h/w from image_hw
} mrcnn_image_gt;

typedef struct mrcnn_batch {
    mrcnn_tensor images;        // (N, H, W, 3) on the device: normalized and padded
    const int *image_hw;        // (N, 2) host: each image's size before padding
    const mrcnn_image_gt *gt;   // (N) training targets (NULL for inference)
    const int64_t *image_index; // (N) global image indices keying the RNG (NULL: 0..N-1)
    uint32_t epoch;
} mrcnn_batch;

/* torchvision's five loss terms (dict keys loss_objectness, loss_rpn_box_reg,
 * loss_classifier, loss_box_reg, loss_mask). */
typedef struct mrcnn_losses {
    double rpn_objectness, rpn_box_reg, classifier, box_reg, mask, total;
} mrcnn_losses;

/* The five terms as the trainer, the logs and torchvision's dict name them, in this order. */
#define MRCNN_N_LOSSES 5
extern const char *const mrcnn_loss_names[MRCNN_N_LOSSES];
/* out (MRCNN_N_LOSSES) = the terms of l, in mrcnn_loss_names' order. */
void mrcnn_losses_to_array(const mrcnn_losses *l, double *out);

/* Everything one step computed: kept for the backward and readable by tests. Device
 * tensors live in the ws; host arrays are owned here (freed by mrcnn_step_free).
 * Training is device-resident: the detection stages are backend ops (detect_ops.h) with
 * fixed capacities, valid rows first, so the step reads nothing back. The ROI heads run
 * on the valid rows when the backend can tell the count without waiting (count_hint: the
 * CPU) and on the whole capacity otherwise (padding rows add exact zeros). */
typedef struct mrcnn_step {
    int n_images, img_h, img_w;
    mrcnn_tensor images;        // (N, H, W, 3) the batch's images in the activation dtype (aliased when equal)
    mrcnn_backbone_out bb;
    mrcnn_rpn_out rpn;
    int64_t level_counts[MRCNN_FPN_LEVELS];
    int64_t n_anchors;          // per image, all levels
    float *anchors;             // (n_anchors, 4) host, as generated
    mrcnn_tensor anchors_dev;   // (n_anchors, 4) fp32
    mrcnn_tensor image_hw_dev;  // (N, 2) int32: sizes before padding
    mrcnn_gt_batch gt;          // the batch's ground truth on the device (training)
    /* proposals (device; inference and mrcnn_model_read_step also fill the host copies) */
    int prop_cap;               // P
    mrcnn_tensor proposals_dev; // (N, P, 4) fp32
    mrcnn_tensor proposal_scores_dev; // (N, P) fp32 (zeros when pinned)
    mrcnn_tensor proposal_counts_dev; // (N) int32
    float *proposals;           // (N, P, 4) host copy
    float *proposal_scores;     // (N, P) host copy
    int64_t *proposal_counts;   // (N) host copy
    /* counts of this rank's batch, then (after m->count_sum) of all ranks: the loss
     * normalizers. Views of its elements below. */
    mrcnn_tensor counts_dev;    // (3) fp32: sampled anchors, ROIs, fg ROIs
    mrcnn_tensor n_sampled_dev, n_rois_dev, n_fg_dev; // (1) fp32 views of counts_dev
    double rpn_sampled;         // counts_dev[0] after the sum (filled by mrcnn_model_read_step)
    /* ROI heads (training: sampled ROIs, capacity N*S; inference: all proposals) */
    int n_rois;                 // R: rows the box head ran on (the valid rows or the capacity)
    mrcnn_tensor rois_dev;      // (R, 5) (image, x1, y1, x2, y2); padding rows image -1
    mrcnn_tensor roi_labels_dev;      // (R) int32 0 background, -1 padding (training)
    mrcnn_tensor roi_box_labels_dev;  // (R) int32 the label on fg rows, -1 elsewhere (training)
    mrcnn_tensor roi_reg_targets_dev; // (R, 4) fp32 (training)
    mrcnn_tensor roi_reg_weights_dev; // (R, 4) fp32 1 on fg rows (training)
    float *rois;                // (R, 5) host (inference; training: mrcnn_model_read_step)
    int32_t *roi_labels;        // (R) host (mrcnn_model_read_step)
    int *roi_image_start;       // (N + 1) first row of each image (host; valid rows only)
    mrcnn_tensor box_x;         // (R, 7, 7, F)
    mrcnn_box_head_out box;
    int n_fg;                   // Rf (training: rows the mask head ran on; inference: detections)
    mrcnn_tensor fg_rois_dev;   // (Rf, 5); padding rows image -1
    mrcnn_tensor fg_labels_dev; // (Rf) int32, -1 padding
    mrcnn_tensor fg_gt_dev;     // (Rf) int32 matched gt as image * G + j, -1 padding (training)
    float *fg_rois;             // (Rf, 5) host (inference; training: mrcnn_model_read_step)
    int32_t *fg_labels;         // (Rf) host (same)
    int32_t *fg_gt;             // (Rf) host, matched gt index within its image (mrcnn_model_read_step)
    mrcnn_tensor mask_x;        // (Rf, 14, 14, F)
    mrcnn_mask_head_out mask;
    /* gradients of the head outputs (training with backward) */
    mrcnn_tensor dlogits_rpn[MRCNN_FPN_LEVELS], ddeltas_rpn[MRCNN_FPN_LEVELS];
    mrcnn_tensor dcls, ddeltas, dmask_logits;
    /* the five terms on the device, in mrcnn_loss_names' order; the loss outputs are
     * views of its elements. Read with mrcnn_model_read_losses (one read). */
    mrcnn_tensor loss_dev;      // (5) fp32
    mrcnn_losses losses;        // host copy: filled by mrcnn_model_read_losses / read_step when asked
} mrcnn_step;

/* Forward, the five losses and (when backward) the gradients, which are ADDED into
 * m->params.grads (zero them first; accumulation steps add up). */
void mrcnn_model_train_step(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, bool backward,
                            mrcnn_step *st);
/* The stages of the training step, for tests that compare them one by one. */
void mrcnn_model_forward_features(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_step *st);
void mrcnn_model_proposals(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, bool training, mrcnn_step *st);
/* The five terms of a training step: one read of st->loss_dev (total = their sum). out
 * may be &st->losses. */
void mrcnn_model_read_losses(const mrcnn_model *m, const mrcnn_step *st, mrcnn_losses *out);
/* Test and tool view of a training step: fills st->losses, rpn_sampled and the host
 * copies (proposals, rois, roi_labels, roi_image_start, fg_rois, fg_labels, fg_gt) of
 * the valid rows. Several reads: never on the training path. */
void mrcnn_model_read_step(const mrcnn_model *m, mrcnn_step *st);

typedef struct mrcnn_detections {
    int n_images, cap, mask_size;  // N, D, M (28)
    float *boxes;      // (N, D, 4) in the padded input's pixels
    float *scores;     // (N, D)
    int32_t *labels;   // (N, D)
    int *counts;       // (N)
    float *mask_probs; // (N, D, M, M) sigmoid of the label's mask logits
} mrcnn_detections;
void mrcnn_model_detect(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_step *st,
                        mrcnn_detections *det);
void mrcnn_detections_free(mrcnn_detections *det);
void mrcnn_step_free(mrcnn_step *st);

/* ---- checkpoint schema v1 -------------------------------------------------------
 * HDF5: attribute /schema_version = 1; dataset /model/<param name> per parameter in
 * the project layout. Loading also accepts unfolded backbone convs with their BN
 * tensors (/model/<bn>.weight, .bias, .running_mean, .running_var), as written by
 * data_prep/weights.py, and folds them. */
#define MRCNN_CHECKPOINT_SCHEMA_VERSION 1
/* Writes path atomically (temp file, fsync, rename). Host copy of the weights. */
void mrcnn_checkpoint_save_model(const mrcnn_model *m, const char *path);
void mrcnn_checkpoint_load_model(mrcnn_model *m, const char *path);
/* Loads the parameters the file has (e.g. an ImageNet ResNet imported by weights.py:
 * the backbone only) and leaves the others as they are; returns how many it loaded. */
int mrcnn_checkpoint_load_model_partial(mrcnn_model *m, const char *path);
/* The group helpers, for the training checkpoint that adds optimizer state beside
 * /model in the same file (hid_t passed as int64_t to keep HDF5 out of this header). */
void mrcnn_checkpoint_write_model_group(const mrcnn_model *m, int64_t file_id);
void mrcnn_checkpoint_read_model_group(mrcnn_model *m, int64_t file_id, const char *path);

#ifdef __cplusplus
}
#endif
#endif
