/* Configuration with detectron2-style keys (MODEL.*, SOLVER.*, INPUT.*, DATASETS.*),
 * loaded from YAML (libyaml) with `_BASE_` inheritance and `--set KEY=VALUE`
 * overrides. Every key is declared once in src/core/config_keys.c with its type
 * and default; an unknown key or a wrong type is an error naming the key and the
 * file:line it came from. */
#ifndef MRCNN_CONFIG_H
#define MRCNN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MRCNN_CFG_LIST_MAX 16
#define MRCNN_CFG_STR_MAX 256

typedef struct { int n; int v[MRCNN_CFG_LIST_MAX]; } mrcnn_int_list;
typedef struct { int n; float v[MRCNN_CFG_LIST_MAX]; } mrcnn_float_list;

typedef struct mrcnn_config {
    /* MODEL */
    char model_device[16];              // MODEL.DEVICE: cpu | cuda
    char model_weights[MRCNN_CFG_STR_MAX]; // MODEL.WEIGHTS: HDF5 checkpoint to start from
    char backbone_name[32];             // MODEL.BACKBONE.NAME: resnet50 | resnet101 | tiny
    int backbone_freeze_at;             // MODEL.BACKBONE.FREEZE_AT: 0 none, 1 stem, 2 stem+res2
    bool resnets_stride_in_1x1;         // MODEL.RESNETS.STRIDE_IN_1X1: MSRA (true) or torchvision (false)
    mrcnn_int_list tiny_channels;       // MODEL.TINY.CHANNELS: per-stage widths of the tiny backbone
    int fpn_out_channels;               // MODEL.FPN.OUT_CHANNELS
    mrcnn_int_list anchor_sizes;        // MODEL.ANCHOR_GENERATOR.SIZES: one per level P2..P6
    mrcnn_float_list anchor_ratios;     // MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS
    int rpn_pre_nms_topk_train;         // MODEL.RPN.PRE_NMS_TOPK_TRAIN (per level)
    int rpn_pre_nms_topk_test;          // MODEL.RPN.PRE_NMS_TOPK_TEST
    int rpn_post_nms_topk_train;        // MODEL.RPN.POST_NMS_TOPK_TRAIN (per image)
    int rpn_post_nms_topk_test;         // MODEL.RPN.POST_NMS_TOPK_TEST
    float rpn_nms_thresh;               // MODEL.RPN.NMS_THRESH
    mrcnn_float_list rpn_iou_thresholds; // MODEL.RPN.IOU_THRESHOLDS: [bg below, fg at or above]
    int rpn_batch_size_per_image;       // MODEL.RPN.BATCH_SIZE_PER_IMAGE
    float rpn_positive_fraction;        // MODEL.RPN.POSITIVE_FRACTION
    float rpn_smooth_l1_beta;           // MODEL.RPN.SMOOTH_L1_BETA (0 = L1)
    float rpn_min_size;                 // MODEL.RPN.MIN_SIZE: proposals smaller are dropped
    int roi_num_classes;                // MODEL.ROI_HEADS.NUM_CLASSES (without background)
    int roi_batch_size_per_image;       // MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE
    float roi_positive_fraction;        // MODEL.ROI_HEADS.POSITIVE_FRACTION
    float roi_iou_threshold;            // MODEL.ROI_HEADS.IOU_THRESHOLD
    float roi_score_thresh_test;        // MODEL.ROI_HEADS.SCORE_THRESH_TEST
    float roi_nms_thresh_test;          // MODEL.ROI_HEADS.NMS_THRESH_TEST
    int roi_detections_per_image;       // MODEL.ROI_HEADS.DETECTIONS_PER_IMAGE
    int box_head_fc_dim;                // MODEL.ROI_BOX_HEAD.FC_DIM
    int box_head_pooler_resolution;     // MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION
    int box_head_sampling_ratio;        // MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO
    bool box_head_aligned;              // MODEL.ROI_BOX_HEAD.POOLER_ALIGNED
    mrcnn_float_list box_reg_weights;   // MODEL.ROI_BOX_HEAD.BBOX_REG_WEIGHTS
    float box_smooth_l1_beta;           // MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA
    int mask_head_num_conv;             // MODEL.ROI_MASK_HEAD.NUM_CONV
    int mask_head_conv_dim;             // MODEL.ROI_MASK_HEAD.CONV_DIM
    int mask_head_pooler_resolution;    // MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION
    int mask_head_sampling_ratio;       // MODEL.ROI_MASK_HEAD.POOLER_SAMPLING_RATIO
    int mask_head_max_fg_per_image;     // MODEL.ROI_MASK_HEAD.MAX_FG_PER_IMAGE: fixed capacity
    mrcnn_float_list pixel_mean;        // MODEL.PIXEL_MEAN (RGB, 0-255)
    mrcnn_float_list pixel_std;         // MODEL.PIXEL_STD
    /* INPUT */
    mrcnn_int_list input_min_size_train; // INPUT.MIN_SIZE_TRAIN: short side, one chosen per image
    int input_max_size_train;           // INPUT.MAX_SIZE_TRAIN
    int input_min_size_test;            // INPUT.MIN_SIZE_TEST
    int input_max_size_test;            // INPUT.MAX_SIZE_TEST
    char input_random_flip[16];         // INPUT.RANDOM_FLIP: horizontal | none
    int input_size_divisibility;        // INPUT.SIZE_DIVISIBILITY
    mrcnn_int_list input_fixed_size;    // INPUT.FIXED_SIZE: [H, W] canvas for static shapes, or []
    /* DATASETS / DATALOADER */
    char datasets_train[MRCNN_CFG_STR_MAX]; // DATASETS.TRAIN: shard index file
    char datasets_test[MRCNN_CFG_STR_MAX];  // DATASETS.TEST
    int dataloader_num_workers;         // DATALOADER.NUM_WORKERS: decode threads per rank
    bool dataloader_aspect_grouping;    // DATALOADER.ASPECT_RATIO_GROUPING
    /* SOLVER */
    int solver_ims_per_batch;           // SOLVER.IMS_PER_BATCH (global)
    float solver_base_lr;               // SOLVER.BASE_LR
    float solver_momentum;              // SOLVER.MOMENTUM
    float solver_weight_decay;          // SOLVER.WEIGHT_DECAY
    float solver_weight_decay_norm;     // SOLVER.WEIGHT_DECAY_NORM
    float solver_weight_decay_bias;     // SOLVER.WEIGHT_DECAY_BIAS
    int solver_max_iter;                // SOLVER.MAX_ITER
    char solver_lr_scheduler[32];       // SOLVER.LR_SCHEDULER_NAME: WarmupMultiStepLR | WarmupCosineLR
    mrcnn_int_list solver_lr_milestones;        // SOLVER.STEPS
    float solver_gamma;                 // SOLVER.GAMMA
    float solver_warmup_factor;         // SOLVER.WARMUP_FACTOR
    int solver_warmup_iters;            // SOLVER.WARMUP_ITERS
    int solver_checkpoint_period;       // SOLVER.CHECKPOINT_PERIOD
    int solver_checkpoint_keep;         // SOLVER.CHECKPOINT_KEEP: newest K kept
    int solver_reference_world_size;    // SOLVER.REFERENCE_WORLD_SIZE (0: no LR rescaling)
    int solver_accum_steps;             // SOLVER.ACCUM_STEPS: gradient accumulation
    bool solver_clip_enabled;           // SOLVER.CLIP_GRADIENTS.ENABLED
    float solver_clip_value;            // SOLVER.CLIP_GRADIENTS.CLIP_VALUE (global L2 norm)
    char solver_precision[8];           // SOLVER.PRECISION: auto (bf16 on GPUs of cc >= 8.0, else fp32) | fp32 | tf32 | fp16 | bf16
    int solver_max_nonfinite;           // SOLVER.MAX_NONFINITE: stop after this many (fp32/bf16)
    char solver_cuda_graph[8];          // SOLVER.CUDA_GRAPH: auto (on for the cuda backend) | on | off; mrcnn_config_cuda_graph
    float solver_loss_scale_init;       // SOLVER.LOSS_SCALE.INIT: fp16 dynamic loss scale at start
    int solver_loss_scale_growth_interval; // SOLVER.LOSS_SCALE.GROWTH_INTERVAL: clean steps before x2
    /* TEST / top level */
    int test_eval_period;               // TEST.EVAL_PERIOD (0: never)
    int log_period;                     // LOG_PERIOD: steps between log lines
    char output_dir[MRCNN_CFG_STR_MAX]; // OUTPUT_DIR
    long long seed;                     // SEED
} mrcnn_config;

/* Defaults (those of detectron2's R50-FPN 1x where it has the key). */
void mrcnn_config_defaults(mrcnn_config *cfg);
/* Loads a YAML file over cfg. Fails (non-zero exit) naming file:line and key on an
 * unknown key, a wrong type or malformed YAML. */
void mrcnn_config_load(mrcnn_config *cfg, const char *path);
/* "SOLVER.BASE_LR=0.01"; lists as "[1, 2]" or "1,2". origin names where it came from. */
void mrcnn_config_set(mrcnn_config *cfg, const char *assignment, const char *origin);
/* Like mrcnn_config_load/set, but returns 0 and writes the message to err instead of
 * failing (for tests and for tools that want to keep going). */
int mrcnn_config_try_load(mrcnn_config *cfg, const char *path, char *err, size_t err_len);
int mrcnn_config_try_set(mrcnn_config *cfg, const char *assignment, const char *origin,
                         char *err, size_t err_len);
/* The whole config as YAML (for checkpoints and logs); returns a malloc'ed string. */
char *mrcnn_config_dump(const mrcnn_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
