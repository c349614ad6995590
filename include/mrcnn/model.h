/* Mask R-CNN (ResNet-FPN) on one backend: the model, the training step, inference.
 * The model code reaches the device only through the backend's function pointers, so
 * the same network runs on the CPU and the GPU. Its parts have their own headers:
 * params.h (the parameter registry), layers.h (workspace, conv layers), backbone.h
 * (ResNet + FPN), heads.h (RPN, box and mask heads with their targets and losses),
 * checkpoint.h (the weights file); this header includes all but checkpoint.h. */
#ifndef MRCNN_MODEL_H
#define MRCNN_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include "mrcnn/arena.h"
#include "mrcnn/backbone.h"
#include "mrcnn/backend.h"
#include "mrcnn/config.h"
#include "mrcnn/heads.h"
#include "mrcnn/layers.h"
#include "mrcnn/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- staging: the host half of a training step ---------------------------------- */
/* Anchors of one padded batch size, generated and uploaded once (the model keeps a few,
 * least recently used first out). */
typedef struct mrcnn_model_anchors {
    int img_h, img_w;                       // the padded batch size they are for (0: a free entry)
    int64_t n;                              // per image, all levels
    int64_t level_counts[MRCNN_FPN_LEVELS]; // H_l * W_l * A
    float *host;                            // (n, 4) host, as generated
    mrcnn_tensor dev;                       // (n, 4) fp32 on the device, its own allocation
    uint64_t used;                          // the cache's clock at its last use
} mrcnn_model_anchors;
#define MRCNN_MODEL_ANCHOR_CACHE 8

/* One staged micro-batch (mrcnn_model_stage): everything the device half reads, as views
 * into one device buffer that persists across steps. Its layout is a function of the
 * shapes alone (bump offsets from the base, reset each stage), so equal shapes give
 * equal addresses and a captured device half stays valid for the next batch of the
 * same shape. The buffer only grows (a new base changes the shape key), and then with
 * room to spare (the layout of gt bucket 64, and at least twice its old size), so that one
 * batch with many instances does not move the base under the common shapes. */
typedef struct mrcnn_staged {
    void *buf;                  // the staging buffer (be->mem.alloc), cap bytes
    size_t cap;                 // bytes reserved: at least the current layout's
    uint8_t *host;              // host mirror of everything after the images: one upload
    size_t host_cap;
    bool ready;                 // staged at least once
    int n_images, img_h, img_w; // N, H, W
    int gt_cap;                 // G: the ground-truth capacity bucket (max(8, next power of 2 of the max count))
    mrcnn_tensor images;        // (N, H, W, 3) fp32
    mrcnn_tensor image_hw;      // (N, 2) int32: sizes before padding
    mrcnn_tensor rngs;          // (2, N, MRCNN_RNG_WORDS) int32: RPN streams, then ROI streams (detect_ops.h)
    mrcnn_gt_batch gt;          // (N, G, ...) views; gt.image_hw = image_hw
    int pinned_cap;             // P of the pinned proposals (m->pinned_proposals), 0: none
    mrcnn_tensor pinned_proposals; // (N, P, 4) fp32
    mrcnn_tensor pinned_counts;    // (N) int32
    const mrcnn_model_anchors *anchors; // the model's cached anchors of (H, W)
    uint64_t shape_key;         // what mrcnn_model_stage returned
    size_t pool_cap;            // bytes of the compact masks' pool (gt.mask_pool): grows, a power of two
    int32_t *crops;             // (crop_cap_images, crop_cap_gt, MRCNN_MASK_CROP_WORDS) host: the last batch's
    int crop_cap_images, crop_cap_gt;
    double stage_ms;            // host time of the last mrcnn_model_stage into this slot
} mrcnn_staged;

/* ---- the model ---------------------------------------------------------------- */
struct mrcnn_model { // typedef in layers.h
    mrcnn_config cfg;
    mrcnn_backend *be; // not owned
    mrcnn_params params;
    mrcnn_resnet resnet;
    mrcnn_fpn fpn;
    mrcnn_rpn_head rpn;
    mrcnn_box_head box;
    mrcnn_mask_head mask;
    int num_classes; // with background
    /* Tensor-core shapes: the layers marked for it (the stem's 3 input channels, the RPN's
     * objectness and deltas, the box predictors, the mask logits) compute those channels
     * rounded up to a multiple of this, the extra weights zero (and the images' extra
     * channels), so that a GPU's GEMMs and convolutions see multiples of 8; checkpoints,
     * weight import and the parameters keep the users' shapes, and the outputs' readers
     * see the real channels (mrcnn_channels_slice, or the label's channel alone). 1: no
     * padding, the CPU backend's default; 8 on a GPU. Set it before any step.
     * On the CPU backend (fp32 only: its rounded-storage mode refuses it) padding changes
     * only the summation order: bit-identical on OpenBLAS's Sandybridge kernels, not on its
     * Haswell and Zen ones (tests/model/test_pad_logits, test_pad_shapes). */
    int pad_align;
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
    /* private to maskrcnn*.c: the staging slots (one per micro-batch index), the anchors
     * cache and a (1) fp32 zero that asks be->det.count_hint whether it trims rows */
    mrcnn_staged *staged;       // (n_staged)
    int n_staged;
    mrcnn_model_anchors anchors[MRCNN_MODEL_ANCHOR_CACHE];
    uint64_t anchors_clock;
    mrcnn_tensor hint_probe;    // (1) fp32 on the device
};

/* Builds the network the config describes and registers its parameters (zeros). */
void mrcnn_model_init(mrcnn_model *m, const mrcnn_config *cfg, mrcnn_backend *be);
void mrcnn_model_free(mrcnn_model *m);
/* Deterministic random weights (tests, training from scratch): Kaiming-uniform
 * convs, normal(0, 0.01) box/cls predictors, as torchvision initializes them. */
void mrcnn_model_init_random(mrcnn_model *m, uint64_t seed);
void mrcnn_model_zero_grads(mrcnn_model *m);

/* ---- assembly: training step and inference ------------------------------------ */
typedef struct mrcnn_image_gt {
    int n;                 // instances
    const float *boxes;    // (n, 4) host, (x1, y1, x2, y2) input-image pixels
    const int32_t *labels; // (n) in 1..num_classes-1
    const uint8_t *masks;  // (n, img_h, img_w) host, nonzero inside; img_h/w from image_hw
} mrcnn_image_gt;

struct mrcnn_batch { // typedef in heads.h
    mrcnn_tensor images;        // (N, H, W, 3) fp32 on the device: normalized and padded; with
                                // host_images only its shape counts (data may be NULL)
    const float *host_images;   // (N, H, W, 3) fp32 host, or NULL: training (mrcnn_model_stage)
                                // uploads it straight into its staging buffer
    const int *image_hw;        // (N, 2) host: each image's size before padding
    const mrcnn_image_gt *gt;   // (N) training targets (NULL for inference)
    /* Or, when set (gt[i].masks unused), the gt masks where they lie in a larger host
     * buffer (the loader's padded canvas), so that staging's crop is the one host copy:
     * image by image, mask j's img_h rows of img_w bytes start at its mask_rows entry,
     * mask_stride bytes apart. */
    const uint8_t *const *mask_rows; // (sum of gt[i].n)
    int mask_stride;
    const int64_t *image_index; // (N) global image indices keying the RNG (NULL: 0..N-1)
    uint32_t epoch;
};

/* torchvision's five loss terms (dict keys loss_objectness, loss_rpn_box_reg,
 * loss_classifier, loss_box_reg, loss_mask). */
typedef struct mrcnn_losses {
    double rpn_objectness, rpn_box_reg, classifier, box_reg, mask, total;
} mrcnn_losses;

/* The five terms as the trainer, the logs and torchvision's dict name them, in this order. */
#define MRCNN_N_LOSSES 5
extern const char *const mrcnn_loss_names[MRCNN_N_LOSSES];

/* Everything one step computed: kept for the backward and readable by tests. Device
 * tensors live in the ws (the batch's inputs in the model's staging buffer and anchors
 * cache); host arrays are owned here (freed by mrcnn_pass_free).
 * Training is device-resident: the detection stages are backend ops (detect_ops.h) with
 * fixed capacities, valid rows first, so the step reads nothing back. The ROI heads run
 * on the valid rows when the backend can tell the count without waiting (count_hint: the
 * CPU) and on the whole capacity otherwise (padding rows add exact zeros). */
struct mrcnn_pass { // typedef in heads.h
    int n_images, img_h, img_w;
    mrcnn_tensor images;        // (N, H, W, 3) the batch's images in the activation dtype (aliased when equal)
    mrcnn_backbone_out bb;
    mrcnn_rpn_out rpn;
    int64_t level_counts[MRCNN_FPN_LEVELS];
    int64_t n_anchors;          // per image, all levels
    const float *anchors;       // (n_anchors, 4) host, as generated (the model's cache: not owned)
    mrcnn_tensor anchors_dev;   // (n_anchors, 4) fp32
    mrcnn_tensor image_hw_dev;  // (N, 2) int32: sizes before padding
    mrcnn_gt_batch gt;          // the batch's ground truth on the device (training)
    mrcnn_tensor rng_rpn, rng_roi; // (N, MRCNN_RNG_WORDS) int32 per-image sampling streams (training)
    int pinned_cap;             // P of the staged pinned proposals (m->pinned_proposals), 0: none
    mrcnn_tensor pinned_proposals; // (N, P, 4) fp32 in the staging buffer
    mrcnn_tensor pinned_counts;    // (N) int32 in the staging buffer
    /* proposals (device; the host copies are the tests' view, tests/common/test_model.c) */
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
    double rpn_sampled;         // counts_dev[0] after the sum (host; the tests' view)
    /* ROI heads (training: sampled ROIs, capacity N*S; inference: all proposals) */
    int n_rois;                 // R: rows the box head ran on (the valid rows or the capacity)
    mrcnn_tensor rois_dev;      // (R, 5) (image, x1, y1, x2, y2); padding rows image -1
    mrcnn_tensor roi_labels_dev;      // (R) int32 0 background, -1 padding (training)
    mrcnn_tensor roi_box_labels_dev;  // (R) int32 the label on fg rows, -1 elsewhere (training)
    mrcnn_tensor roi_reg_targets_dev; // (R, 4) fp32 (training)
    mrcnn_tensor roi_reg_weights_dev; // (R, 4) fp32 1 on fg rows (training)
    float *rois;                // (R, 5) host copy (the tests' view)
    int32_t *roi_labels;        // (R) host copy (the tests' view)
    int *roi_image_start;       // (N + 1) first row of each image (host; valid rows only)
    mrcnn_tensor box_x;         // (R, 7, 7, F)
    mrcnn_box_head_out box;
    int n_fg;                   // Rf (training: rows the mask head ran on; inference: detections)
    mrcnn_tensor fg_rois_dev;   // (Rf, 5); padding rows image -1
    mrcnn_tensor fg_labels_dev; // (Rf) int32, -1 padding
    mrcnn_tensor fg_gt_dev;     // (Rf) int32 matched gt as image * G + j, -1 padding (training)
    float *fg_rois;             // (Rf, 5) host copy (the tests' view)
    int32_t *fg_labels;         // (Rf) host (same)
    int32_t *fg_gt;             // (Rf) host copy (the tests' view), matched gt index within its image
    mrcnn_tensor mask_x;        // (Rf, 14, 14, F)
    mrcnn_mask_head_out mask;   // inference; training: chunk 0's (all rows when the backend trims)
    /* Training runs the mask head in chunks of rows: chunk k is rows [end[k - 1], end[k])
     * (end[-1] = 0) with activations mask_chunk[k]. When the backend trims, one chunk of
     * the valid rows; otherwise the capacity in chunks that double from N rows, each run
     * only when this rank's fg count (mask_count_dev) reaches into it (be->stream.run_if),
     * so the rows run stay below twice the positives once these pass N. */
    int n_mask_chunks;
    int mask_chunk_end[MRCNN_MASK_CHUNKS_MAX];
    mrcnn_mask_head_out mask_chunk[MRCNN_MASK_CHUNKS_MAX];
    mrcnn_tensor mask_count_dev; // (1) fp32 this rank's fg rows (n_fg_dev before m->count_sum)
    mrcnn_tensor mask_gd;       // (Rf, M, M) fp32 each row's label's logits (rows not run: 0)
    mrcnn_tensor mask_dg;       // (Rf, M, M) fp32 the mask loss's gradient of mask_gd
    /* gradients of the head outputs (training with backward) */
    mrcnn_tensor dlogits_rpn[MRCNN_FPN_LEVELS], ddeltas_rpn[MRCNN_FPN_LEVELS];
    mrcnn_tensor dcls, ddeltas;
    /* the five terms on the device, in mrcnn_loss_names' order; the loss outputs are
     * views of its elements. Read with mrcnn_model_read_losses (one read). */
    mrcnn_tensor loss_dev;      // (5) fp32
    mrcnn_losses losses;        // host copy: filled by mrcnn_model_read_losses / read_step when asked
};

/* The training step in two halves, so that the device half can be captured once and
 * replayed (a CUDA graph, trainer.h):
 *
 * mrcnn_model_stage, the host half: uploads batch b into staging slot `slot` (one per
 * micro-batch index; mrcnn_staged): the images (host_images, or a device copy of
 * b->images), the image sizes, the ground truth padded to a capacity bucket (so G changes
 * only when the bucket does), the per-image RNG streams (keyed by b->image_index and
 * b->epoch) and the pinned proposals when set; the anchors come from the model's cache
 * (generated and uploaded once per (H, W)). Returns the shape key: a nonzero hash of
 * everything that decides the device half's calls and addresses (N, H, W, G, the
 * activation dtype, the staging buffer, the anchors, ...), so that equal keys mean the
 * same backend calls with the same arguments; 0 when the calls depend on the data (a
 * backend whose count_hint trims the ROI heads to the valid rows: the CPU's; with
 * count_hint NULL, or one that answers -1 as CUDA's does, the key is nonzero). Uploads
 * only: no read, no sync.
 *
 * mrcnn_model_run, the device half of the staged slot: forward, targets, the five
 * losses and (when backward) the gradients, ADDED into m->params.grads (zero them
 * first; accumulation steps add up). Reads only device data and the shapes stage
 * recorded: no upload, no read, no host data. Its temporaries go into ws (the caller
 * resets it after using st; st's tensors live there). */
uint64_t mrcnn_model_stage(mrcnn_model *m, int slot, const mrcnn_batch *b);
void mrcnn_model_run(mrcnn_model *m, int slot, mrcnn_ws *ws, bool backward, mrcnn_pass *st);
/* Both halves in one call (slot 0): tests and tools. */
void mrcnn_model_train_step(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, bool backward,
                            mrcnn_pass *st);
/* The first stages of inference: backbone, RPN head (anchors from the model's cache,
 * b->image_hw uploaded into ws), then the proposals. */
void mrcnn_model_forward_features(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_pass *st);
void mrcnn_model_proposals(mrcnn_model *m, mrcnn_ws *ws, bool training, mrcnn_pass *st);
/* The five terms of a training step: one read of st->loss_dev (total = their sum). out
 * may be &st->losses. */
void mrcnn_model_read_losses(const mrcnn_model *m, const mrcnn_pass *st, mrcnn_losses *out);

typedef struct mrcnn_detections {
    int n_images, cap, mask_size;  // N, D, M (28)
    float *boxes;      // (N, D, 4) in the padded input's pixels
    float *scores;     // (N, D)
    int32_t *labels;   // (N, D)
    int *counts;       // (N)
    float *mask_probs; // (N, D, M, M) sigmoid of the label's mask logits
} mrcnn_detections;
/* Inference on batch b: backbone, proposals, the box head on every proposal, the box
 * post-processing (postprocess.h's semantics), the mask head on the detections and their
 * mask probabilities, all as backend ops; then ONE device -> host read (the batch's
 * detections, masks and count in one buffer) fills det. st's device tensors live in ws. */
void mrcnn_model_predict(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_pass *st,
                         mrcnn_detections *det);
void mrcnn_detections_free(mrcnn_detections *det);
void mrcnn_pass_free(mrcnn_pass *st);

#ifdef __cplusplus
}
#endif
#endif
