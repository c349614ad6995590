/* Every config key: its type, where it lives in mrcnn_config, its default, and what
 * values it admits (a number's range, a list's length and its items' range, a
 * string's choices), checked whenever a value is set (config.c), so no unusable value
 * gets past loading. Defaults follow detectron2's R50-FPN 1x where it has the key.
 * Ranges are what the code can run with; the upper bounds of counts keep products of
 * them (buffer sizes) inside 64-bit arithmetic. */
#include "config_keys.h"

#include <float.h>
#include <limits.h>
#include <stddef.h>

#define F(field) offsetof(mrcnn_config, field)
#define S(field) sizeof(((mrcnn_config *)0)->field)

#define INT(key, field, def, lo, hi) {key, CFG_INT, F(field), 0, def, .min = lo, .max = hi}
#define I64(key, field, def) {key, CFG_INT64, F(field), 0, def, .min = -9.3e18, .max = 9.3e18}
#define BOOL(key, field, def) {key, CFG_BOOL, F(field), 0, def, .min = 0}
#define FLT(key, field, def, lo, hi) {key, CFG_FLOAT, F(field), 0, def, .min = lo, .max = hi}
#define FLT_POS(key, field, def, hi) {key, CFG_FLOAT, F(field), 0, def, .min = 0, .max = hi, .min_open = 1}
#define STR(key, field, def, ch) {key, CFG_STR, F(field), S(field), def, .min = 0, .choices = ch}
#define INTS(key, field, def, n0, n1, lo, hi) \
    {key, CFG_INT_LIST, F(field), 0, def, .min = lo, .max = hi, .len_min = n0, .len_max = n1}
#define INTS_OR_EMPTY(key, field, def, n0, n1, lo, hi) \
    {key, CFG_INT_LIST, F(field), 0, def, .min = lo, .max = hi, .len_min = n0, .len_max = n1, .empty_ok = 1}
#define FLTS(key, field, def, n0, n1, lo, hi) \
    {key, CFG_FLOAT_LIST, F(field), 0, def, .min = lo, .max = hi, .len_min = n0, .len_max = n1}
#define FLTS_POS(key, field, def, n0, n1, hi) \
    {key, CFG_FLOAT_LIST, F(field), 0, def, .min = 0, .max = hi, .len_min = n0, .len_max = n1, .min_open = 1}

const mrcnn_config_key mrcnn_config_keys[] = {
    STR("MODEL.DEVICE", model_device, "cpu", "cpu|cuda"),
    STR("MODEL.WEIGHTS", model_weights, "", NULL),
    STR("MODEL.BACKBONE.NAME", backbone_name, "resnet50", "resnet50|resnet101|tiny"),
    INT("MODEL.BACKBONE.FREEZE_AT", backbone_freeze_at, "2", 0, 5),
    BOOL("MODEL.RESNETS.STRIDE_IN_1X1", resnets_stride_in_1x1, "false"),
    INTS("MODEL.TINY.CHANNELS", tiny_channels, "[16, 32, 64, 128]", 4, 4, 4, 4096),
    INT("MODEL.FPN.OUT_CHANNELS", fpn_out_channels, "256", 1, 4096),
    INTS("MODEL.ANCHOR_GENERATOR.SIZES", anchor_sizes, "[32, 64, 128, 256, 512]", 5, 5, 1, 100000),
    FLTS_POS("MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS", anchor_ratios, "[0.5, 1.0, 2.0]", 1, MRCNN_CFG_LIST_MAX, 1000),
    INT("MODEL.RPN.PRE_NMS_TOPK_TRAIN", rpn_pre_nms_topk_train, "2000", 1, 1000000),
    INT("MODEL.RPN.PRE_NMS_TOPK_TEST", rpn_pre_nms_topk_test, "1000", 1, 1000000),
    INT("MODEL.RPN.POST_NMS_TOPK_TRAIN", rpn_post_nms_topk_train, "2000", 1, 1000000),
    INT("MODEL.RPN.POST_NMS_TOPK_TEST", rpn_post_nms_topk_test, "1000", 1, 1000000),
    FLT("MODEL.RPN.NMS_THRESH", rpn_nms_thresh, "0.7", 0, 1),
    FLTS("MODEL.RPN.IOU_THRESHOLDS", rpn_iou_thresholds, "[0.3, 0.7]", 2, 2, 0, 1),
    INT("MODEL.RPN.BATCH_SIZE_PER_IMAGE", rpn_batch_size_per_image, "256", 1, 1000000),
    FLT("MODEL.RPN.POSITIVE_FRACTION", rpn_positive_fraction, "0.5", 0, 1),
    FLT("MODEL.RPN.SMOOTH_L1_BETA", rpn_smooth_l1_beta, "0.1111111111", 0, 1000),
    FLT("MODEL.RPN.MIN_SIZE", rpn_min_size, "0.001", 0, 100000),
    INT("MODEL.ROI_HEADS.NUM_CLASSES", roi_num_classes, "80", 1, 100000),
    INT("MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", roi_batch_size_per_image, "512", 1, 1000000),
    FLT("MODEL.ROI_HEADS.POSITIVE_FRACTION", roi_positive_fraction, "0.25", 0, 1),
    FLT("MODEL.ROI_HEADS.IOU_THRESHOLD", roi_iou_threshold, "0.5", 0, 1),
    FLT("MODEL.ROI_HEADS.SCORE_THRESH_TEST", roi_score_thresh_test, "0.05", 0, 1),
    FLT("MODEL.ROI_HEADS.NMS_THRESH_TEST", roi_nms_thresh_test, "0.5", 0, 1),
    INT("MODEL.ROI_HEADS.DETECTIONS_PER_IMAGE", roi_detections_per_image, "100", 1, 100000),
    INT("MODEL.ROI_BOX_HEAD.FC_DIM", box_head_fc_dim, "1024", 1, 65536),
    INT("MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION", box_head_pooler_resolution, "7", 1, 64),
    INT("MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO", box_head_sampling_ratio, "2", 0, 64),
    BOOL("MODEL.ROI_BOX_HEAD.POOLER_ALIGNED", box_head_aligned, "false"),
    FLTS_POS("MODEL.ROI_BOX_HEAD.BBOX_REG_WEIGHTS", box_reg_weights, "[10.0, 10.0, 5.0, 5.0]", 4, 4, 1e6),
    FLT("MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA", box_smooth_l1_beta, "0.1111111111", 0, 1000),
    INT("MODEL.ROI_MASK_HEAD.NUM_CONV", mask_head_num_conv, "4", 0, 64),
    INT("MODEL.ROI_MASK_HEAD.CONV_DIM", mask_head_conv_dim, "256", 1, 4096),
    INT("MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION", mask_head_pooler_resolution, "14", 1, 64),
    INT("MODEL.ROI_MASK_HEAD.POOLER_SAMPLING_RATIO", mask_head_sampling_ratio, "2", 0, 64),
    INT("MODEL.ROI_MASK_HEAD.MAX_FG_PER_IMAGE", mask_head_max_fg_per_image, "128", 1, 1000000),
    FLTS("MODEL.PIXEL_MEAN", pixel_mean, "[123.675, 116.28, 103.53]", 3, 3, -100000, 100000),
    FLTS_POS("MODEL.PIXEL_STD", pixel_std, "[58.395, 57.12, 57.375]", 3, 3, 100000),
    INTS("INPUT.MIN_SIZE_TRAIN", input_min_size_train, "[800]", 1, MRCNN_CFG_LIST_MAX, 1, 100000),
    INT("INPUT.MAX_SIZE_TRAIN", input_max_size_train, "1333", 1, 100000),
    INT("INPUT.MIN_SIZE_TEST", input_min_size_test, "800", 1, 100000),
    INT("INPUT.MAX_SIZE_TEST", input_max_size_test, "1333", 1, 100000),
    STR("INPUT.RANDOM_FLIP", input_random_flip, "horizontal", "horizontal|none"),
    INT("INPUT.SIZE_DIVISIBILITY", input_size_divisibility, "32", 0, 1024),
    INTS_OR_EMPTY("INPUT.FIXED_SIZE", input_fixed_size, "[]", 2, 2, 1, 100000),
    STR("DATASETS.TRAIN", datasets_train, "", NULL),
    STR("DATASETS.TEST", datasets_test, "", NULL),
    INT("DATALOADER.NUM_WORKERS", dataloader_num_workers, "2", 0, 256),
    BOOL("DATALOADER.ASPECT_RATIO_GROUPING", dataloader_aspect_grouping, "true"),
    INT("SOLVER.IMS_PER_BATCH", solver_ims_per_batch, "16", 1, 1000000),
    FLT("SOLVER.BASE_LR", solver_base_lr, "0.02", 0, 1000),
    FLT("SOLVER.MOMENTUM", solver_momentum, "0.9", 0, 1),
    FLT("SOLVER.WEIGHT_DECAY", solver_weight_decay, "0.0001", 0, 1),
    FLT("SOLVER.WEIGHT_DECAY_NORM", solver_weight_decay_norm, "0.0", 0, 1),
    FLT("SOLVER.WEIGHT_DECAY_BIAS", solver_weight_decay_bias, "0.0001", 0, 1),
    INT("SOLVER.MAX_ITER", solver_max_iter, "90000", 1, INT_MAX),
    STR("SOLVER.LR_SCHEDULER_NAME", solver_lr_scheduler, "WarmupMultiStepLR", "WarmupMultiStepLR|WarmupCosineLR"),
    INTS("SOLVER.STEPS", solver_lr_milestones, "[60000, 80000]", 0, 16, 0, INT_MAX),
    FLT("SOLVER.GAMMA", solver_gamma, "0.1", 0, 1000),
    FLT("SOLVER.WARMUP_FACTOR", solver_warmup_factor, "0.001", 0, 1),
    INT("SOLVER.WARMUP_ITERS", solver_warmup_iters, "1000", 0, INT_MAX),
    INT("SOLVER.CHECKPOINT_PERIOD", solver_checkpoint_period, "5000", 0, INT_MAX),
    INT("SOLVER.CHECKPOINT_KEEP", solver_checkpoint_keep, "3", 0, INT_MAX),
    INT("SOLVER.REFERENCE_WORLD_SIZE", solver_reference_world_size, "0", 0, 1000000),
    INT("SOLVER.ACCUM_STEPS", solver_accum_steps, "1", 1, 1000000),
    BOOL("SOLVER.CLIP_GRADIENTS.ENABLED", solver_clip_enabled, "false"),
    FLT_POS("SOLVER.CLIP_GRADIENTS.CLIP_VALUE", solver_clip_value, "1.0", FLT_MAX),
    STR("SOLVER.PRECISION", solver_precision, "auto", "auto|fp32|tf32|fp16|bf16"),
    INT("SOLVER.MAX_NONFINITE", solver_max_nonfinite, "10", 0, INT_MAX),
    STR("SOLVER.CUDA_GRAPH", solver_cuda_graph, "auto", "auto|on|off|true|false"),
    FLT_POS("SOLVER.LOSS_SCALE.INIT", solver_loss_scale_init, "65536.0", FLT_MAX),
    INT("SOLVER.LOSS_SCALE.GROWTH_INTERVAL", solver_loss_scale_growth_interval, "2000", 1, INT_MAX),
    INT("TEST.EVAL_PERIOD", test_eval_period, "0", 0, INT_MAX),
    INT("LOG_PERIOD", log_period, "20", 0, INT_MAX),
    STR("OUTPUT_DIR", output_dir, "./output", NULL),
    I64("SEED", seed, "42"),
};

const int mrcnn_config_n_keys = (int)(sizeof mrcnn_config_keys / sizeof mrcnn_config_keys[0]);
