/* LR schedules (detectron2 semantics), the worker-scaling rule, the batch split,
 * the fp16 loss scaler policy and the weight-decay groups. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/config.h"
#include "mrcnn/train.h"
#include "test_support.h"
#include "test_util.h"

static void test_multistep_warmup(void **state) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_set(&cfg, "SOLVER.BASE_LR=0.02", "test");
    mrcnn_config_set(&cfg, "SOLVER.STEPS=[60000, 80000]", "test");
    mrcnn_lr_schedule s;
    mrcnn_lr_schedule_init(&s, &cfg);
    /* warmup factor 1/1000 over 1000 iterations, linear */
    assert_float_equal(mrcnn_lr_at(&s, 0), 0.02 * 0.001, 1e-9);
    assert_float_equal(mrcnn_lr_at(&s, 500), 0.02 * (0.001 * 0.5 + 0.5), 1e-8);
    assert_float_equal(mrcnn_lr_at(&s, 999), 0.02 * (0.001 * 0.001 + 0.999), 1e-8);
    assert_float_equal(mrcnn_lr_at(&s, 1000), 0.02, 1e-9);
    assert_float_equal(mrcnn_lr_at(&s, 59999), 0.02, 1e-9);
    assert_float_equal(mrcnn_lr_at(&s, 60000), 0.002, 1e-9);
    assert_float_equal(mrcnn_lr_at(&s, 80000), 0.0002, 1e-10);
    assert_float_equal(mrcnn_lr_at(&s, 89999), 0.0002, 1e-10);
    mrcnn_config_set(&cfg, "SOLVER.STEPS=[10, 5]", "test");
    EXPECT_FAIL(mrcnn_lr_schedule_init(&s, &cfg), "SOLVER.STEPS must increase");
    EXPECT_FAIL(mrcnn_config_set(&cfg, "SOLVER.LR_SCHEDULER_NAME=Poly", "test"),
                "SOLVER.LR_SCHEDULER_NAME = 'Poly' is not one of the allowed values");
    /* past the config's check (a config struct filled by hand): the schedule's own */
    snprintf(cfg.solver_lr_scheduler, sizeof cfg.solver_lr_scheduler, "Poly");
    EXPECT_FAIL(mrcnn_lr_schedule_init(&s, &cfg), "LR_SCHEDULER_NAME 'Poly' is unknown");
}

static void test_cosine(void **state) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_set(&cfg, "SOLVER.LR_SCHEDULER_NAME=WarmupCosineLR", "test");
    mrcnn_config_set(&cfg, "SOLVER.BASE_LR=0.1", "test");
    mrcnn_config_set(&cfg, "SOLVER.MAX_ITER=1000", "test");
    mrcnn_config_set(&cfg, "SOLVER.WARMUP_ITERS=100", "test");
    mrcnn_lr_schedule s;
    mrcnn_lr_schedule_init(&s, &cfg);
    /* detectron2 WarmupCosineLR: base * warmup * 0.5 * (1 + cos(pi * it / max_iter)) */
    double w50 = 0.001 * 0.5 + 0.5;
    assert_float_equal(mrcnn_lr_at(&s, 50), 0.1 * w50 * 0.5 * (1 + cos(M_PI * 0.05)), 1e-7);
    assert_float_equal(mrcnn_lr_at(&s, 500), 0.05, 1e-7);
    assert_float_equal(mrcnn_lr_at(&s, 1000), 0.0, 1e-9);
}

static void test_scale_workers(void **state) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    /* detectron2's docstring example: 16 images on 8 workers, run on 16 workers */
    mrcnn_config_set(&cfg, "SOLVER.IMS_PER_BATCH=16", "test");
    mrcnn_config_set(&cfg, "SOLVER.BASE_LR=0.1", "test");
    mrcnn_config_set(&cfg, "SOLVER.REFERENCE_WORLD_SIZE=8", "test");
    mrcnn_config_set(&cfg, "SOLVER.MAX_ITER=5000", "test");
    mrcnn_config_set(&cfg, "SOLVER.STEPS=[4000]", "test");
    mrcnn_config_set(&cfg, "SOLVER.WARMUP_ITERS=100", "test");
    double f = mrcnn_config_scale_workers(&cfg, 16);
    assert_float_equal(f, 2.0, 0);
    assert_int_equal(cfg.solver_ims_per_batch, 32);
    assert_float_equal(cfg.solver_base_lr, 0.2, 1e-7);
    assert_int_equal(cfg.solver_max_iter, 2500);
    assert_int_equal(cfg.solver_lr_milestones.v[0], 2000);
    assert_int_equal(cfg.solver_warmup_iters, 50);
    assert_int_equal(cfg.solver_reference_world_size, 16);
    /* Applying it again at the same size changes nothing. */
    assert_float_equal(mrcnn_config_scale_workers(&cfg, 16), 1.0, 0);
    assert_int_equal(cfg.solver_ims_per_batch, 32);
    /* REFERENCE_WORLD_SIZE 0: no rescaling. */
    mrcnn_config_defaults(&cfg);
    assert_float_equal(mrcnn_config_scale_workers(&cfg, 4), 1.0, 0);
    assert_int_equal(cfg.solver_ims_per_batch, 16);
}

static void test_batch_split(void **state) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_set(&cfg, "SOLVER.IMS_PER_BATCH=8", "test");
    assert_int_equal(mrcnn_per_rank_batch(&cfg, 4), 2);
    mrcnn_config_set(&cfg, "SOLVER.ACCUM_STEPS=2", "test");
    assert_int_equal(mrcnn_per_rank_batch(&cfg, 2), 2);
    EXPECT_FAIL(mrcnn_per_rank_batch(&cfg, 3), "IMS_PER_BATCH 8 (the global batch) must be a positive multiple of ranks 3 x SOLVER.ACCUM_STEPS 2");
}

static void test_loss_scaler(void **state) {
    mrcnn_loss_scaler s;
    mrcnn_loss_scaler_init(&s, 1, 65536.0f, 3);
    assert_float_equal(s.scale, 65536.0, 0);
    assert_int_equal(test_loss_scaler_update(&s, 0), 1);
    assert_int_equal(test_loss_scaler_update(&s, 0), 1);
    assert_int_equal(test_loss_scaler_update(&s, 1), 0); // skipped, halved, clean count reset
    assert_float_equal(s.scale, 32768.0, 0);
    assert_int_equal(s.skipped, 1);
    assert_int_equal(test_loss_scaler_update(&s, 0), 1);
    assert_int_equal(test_loss_scaler_update(&s, 0), 1);
    assert_float_equal(s.scale, 32768.0, 0);
    assert_int_equal(test_loss_scaler_update(&s, 0), 1); // third clean step in a row: x2
    assert_float_equal(s.scale, 65536.0, 0);
    assert_int_equal(s.clean_steps, 0);
    /* Disabled (fp32/bf16): scale 1, a non-finite step is still not applied. */
    mrcnn_loss_scaler_init(&s, 0, 65536.0f, 2000);
    assert_float_equal(s.scale, 1.0, 0);
    assert_int_equal(test_loss_scaler_update(&s, 1), 0);
    assert_float_equal(s.scale, 1.0, 0);
    EXPECT_FAIL(mrcnn_loss_scaler_init(&s, 1, 0.0f, 10), "must be positive");
}

static void test_decay_groups(void **state) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_set(&cfg, "SOLVER.WEIGHT_DECAY=0.0001", "test");
    mrcnn_config_set(&cfg, "SOLVER.WEIGHT_DECAY_BIAS=0.0", "test");
    mrcnn_config_set(&cfg, "SOLVER.WEIGHT_DECAY_NORM=0.00005", "test");
    assert_float_equal(mrcnn_sgd_decay_multiplier("backbone.body.layer1.0.conv1.weight", &cfg), 1.0, 0);
    assert_float_equal(mrcnn_sgd_decay_multiplier("roi_heads.box_head.fc6.bias", &cfg), 0.0, 0);
    assert_float_equal(mrcnn_sgd_decay_multiplier("backbone.body.bn1.weight", &cfg), 0.5, 1e-6);
    mrcnn_config_set(&cfg, "SOLVER.WEIGHT_DECAY=0", "test");
    assert_float_equal(mrcnn_sgd_decay_multiplier("fc6.weight", &cfg), 0.0, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multistep_warmup), cmocka_unit_test(test_cosine),
        cmocka_unit_test(test_scale_workers),    cmocka_unit_test(test_batch_split),
        cmocka_unit_test(test_loss_scaler),      cmocka_unit_test(test_decay_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
