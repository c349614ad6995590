/* YAML configs: nesting and dotted keys, _BASE_, --set, and errors that name the
 * key and the file:line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/config.h"
#include "test_util.h"

static void test_defaults(void **state) {
    mrcnn_config c;
    mrcnn_config_defaults(&c);
    assert_int_equal(c.rpn_batch_size_per_image, 256);
    assert_int_equal(c.roi_batch_size_per_image, 512);
    assert_true(c.solver_base_lr == 0.02f);
    assert_int_equal(c.anchor_sizes.n, 5);
    assert_int_equal(c.anchor_sizes.v[4], 512);
    assert_int_equal(c.box_reg_weights.n, 4);
    assert_true(c.box_reg_weights.v[2] == 5.0f);
    assert_string_equal(c.solver_precision, "auto");
    assert_int_equal(c.backbone_freeze_at, 2);
}

static void test_nested_dotted_lists_and_base(void **state) {
    test_tmp_write("base.yaml", "MODEL:\n  ROI_HEADS:\n    NUM_CLASSES: 3\n  RPN: {NMS_THRESH: 0.6}\nSOLVER:\n  BASE_LR: 0.5\n");
    const char *p = test_tmp_write("child.yaml",
                               "_BASE_: base.yaml\n"
                               "SOLVER.BASE_LR: 0.25   # dotted keys work too\n"
                               "SOLVER:\n"
                               "  STEPS: [10, 20, 30]\n"
                               "  CLIP_GRADIENTS:\n"
                               "    ENABLED: true\n"
                               "MODEL:\n"
                               "  ANCHOR_GENERATOR:\n"
                               "    ASPECT_RATIOS:\n"
                               "      - 0.5\n"
                               "      - 2\n"
                               "  BACKBONE:\n"
                               "    NAME: tiny\n"
                               "SEED: 12345678901\n");
    mrcnn_config c;
    mrcnn_config_defaults(&c);
    char err[512] = "";
    int ok = mrcnn_config_try_load(&c, p, err, sizeof err);
    if (!ok) fail_msg("%s", err);
    assert_int_equal(c.roi_num_classes, 3);
    assert_true(c.rpn_nms_thresh == 0.6f);
    assert_true(c.solver_base_lr == 0.25f);
    assert_int_equal(c.solver_lr_milestones.n, 3);
    assert_int_equal(c.solver_lr_milestones.v[2], 30);
    assert_true(c.solver_clip_enabled);
    assert_int_equal(c.anchor_ratios.n, 2);
    assert_true(c.anchor_ratios.v[1] == 2.0f);
    assert_string_equal(c.backbone_name, "tiny");
    assert_true(c.seed == 12345678901LL);
    /* untouched keys keep their defaults */
    assert_int_equal(c.rpn_batch_size_per_image, 256);
    /* overrides */
    assert_true(mrcnn_config_try_set(&c, "SOLVER.BASE_LR=0.125", "--set", err, sizeof err));
    assert_true(c.solver_base_lr == 0.125f);
    assert_true(mrcnn_config_try_set(&c, "SOLVER.STEPS=[5, 6]", "--set", err, sizeof err));
    assert_int_equal(c.solver_lr_milestones.n, 2);
    assert_true(mrcnn_config_try_set(&c, "INPUT.MIN_SIZE_TRAIN=640,672,704", "--set", err, sizeof err));
    assert_int_equal(c.input_min_size_train.n, 3);
    assert_int_equal(c.input_min_size_train.v[2], 704);
    assert_true(mrcnn_config_try_set(&c, "INPUT.FIXED_SIZE=[]", "--set", err, sizeof err));
    assert_int_equal(c.input_fixed_size.n, 0);
}

static void expect_load_error(const char *name, const char *text, const char *needle1, const char *needle2) {
    const char *p = test_tmp_write(name, text);
    mrcnn_config c;
    mrcnn_config_defaults(&c);
    char err[512] = "";
    assert_false(mrcnn_config_try_load(&c, p, err, sizeof err));
    if (!strstr(err, needle1)) fail_msg("'%s' lacks '%s'", err, needle1);
    if (needle2 && !strstr(err, needle2)) fail_msg("'%s' lacks '%s'", err, needle2);
}

static void test_errors_name_key_and_line(void **state) {
    expect_load_error("unknown.yaml", "SOLVER:\n  BASE_LR: 0.1\n  BASE_LRR: 0.2\n", "unknown.yaml:3", "unknown key 'SOLVER.BASE_LRR'");
    expect_load_error("type.yaml", "MODEL:\n  RPN:\n\n    BATCH_SIZE_PER_IMAGE: lots\n", "type.yaml:4",
                      "MODEL.RPN.BATCH_SIZE_PER_IMAGE expects an integer, got 'lots'");
    expect_load_error("float.yaml", "SOLVER.BASE_LR: fast\n", "float.yaml:1", "SOLVER.BASE_LR expects a number");
    expect_load_error("bool.yaml", "SOLVER:\n  CLIP_GRADIENTS:\n    ENABLED: maybe\n", "bool.yaml:3", "ENABLED expects true or false");
    expect_load_error("list.yaml", "SOLVER:\n  STEPS: [1, x]\n", "list.yaml:2", "SOLVER.STEPS item 1 expects an integer, got 'x'");
    expect_load_error("scalar_for_list.yaml", "SOLVER:\n  STEPS: 5\n", "scalar_for_list.yaml:2", "SOLVER.STEPS expects a list");
    expect_load_error("list_for_scalar.yaml", "SOLVER:\n  BASE_LR: [1]\n", "list_for_scalar.yaml:2", "SOLVER.BASE_LR expects a number, got a list");
    expect_load_error("syntax.yaml", "SOLVER:\n  BASE_LR: 0.1\n  STEPS: [1, 2\n", "syntax.yaml:", "YAML error");
    expect_load_error("missing_base.yaml", "_BASE_: nowhere.yaml\n", "nowhere.yaml", "cannot open config");
    expect_load_error("late_base.yaml", "SEED: 1\n_BASE_: base.yaml\n", "late_base.yaml:2", "_BASE_ must come before");
    mrcnn_config c;
    mrcnn_config_defaults(&c);
    char err[512];
    assert_false(mrcnn_config_try_set(&c, "MODEL.NOPE=1", "--set", err, sizeof err));
    assert_non_null(strstr(err, "unknown key 'MODEL.NOPE'"));
    assert_false(mrcnn_config_try_set(&c, "SOLVER.BASE_LR", "--set", err, sizeof err));
    assert_non_null(strstr(err, "expected KEY=VALUE"));
    assert_false(mrcnn_config_try_set(&c, "SOLVER.MAX_ITER=1.5", "--set", err, sizeof err));
    assert_false(mrcnn_config_try_set(&c, "SOLVER.MAX_ITER=99999999999", "--set", err, sizeof err));
    /* a float key holds a float: 1e73 would be inf, which the dump cannot write back */
    assert_false(mrcnn_config_try_set(&c, "SOLVER.BASE_LR=1e73", "--set", err, sizeof err));
    assert_non_null(strstr(err, "SOLVER.BASE_LR = 1e73 is beyond a 32-bit float's range"));
    assert_false(mrcnn_config_try_set(&c, "MODEL.PIXEL_MEAN=[1, -1e39, 2]", "--set", err, sizeof err));
    assert_non_null(strstr(err, "MODEL.PIXEL_MEAN item 1 = -1e39 is beyond a 32-bit float's range"));
    assert_true(mrcnn_config_try_set(&c, "SOLVER.LOSS_SCALE.INIT=3.4e38", "--set", err, sizeof err)); // the one range up to FLT_MAX
    /* the failing form of the API exits through the check family with the same message */
    const char *p = test_tmp_write("bad.yaml", "SOLVER:\n  WARMUP_ITERZ: 3\n");
    EXPECT_FAIL(mrcnn_config_load(&c, p), "bad.yaml:2: unknown key 'SOLVER.WARMUP_ITERZ'");
}

/* The dump is itself a valid config that reproduces the same values. */
static void test_dump_round_trip(void **state) {
    mrcnn_config a, b;
    mrcnn_config_defaults(&a);
    char err[512];
    assert_true(mrcnn_config_try_set(&a, "SOLVER.STEPS=[7,8,9]", "t", err, sizeof err));
    assert_true(mrcnn_config_try_set(&a, "OUTPUT_DIR=/tmp/x y", "t", err, sizeof err));
    assert_true(mrcnn_config_try_set(&a, "SOLVER.BASE_LR=0.0123", "t", err, sizeof err));
    /* quotes and backslashes must be escaped in the dump, UTF-8 kept as is */
    assert_true(mrcnn_config_try_set(&a, "MODEL.WEIGHTS=a\\nb: \"c\"\\", "t", err, sizeof err));
    assert_true(mrcnn_config_try_set(&a, "DATASETS.TEST=caf\xc3\xa9/\xe2\x82\xac.h5", "t", err, sizeof err));
    char *dump = mrcnn_config_dump(&a);
    const char *p = test_tmp_write("dump.yaml", dump);
    free(dump);
    mrcnn_config_defaults(&b);
    if (!mrcnn_config_try_load(&b, p, err, sizeof err)) fail_msg("%s", err);
    assert_memory_equal(&a, &b, sizeof a);
}

/* Strings the dump could not write back the same are refused where they enter, with the byte. */
static void test_string_bytes(void **state) {
    mrcnn_config c;
    mrcnn_config_defaults(&c);
    char err[512];
    assert_false(mrcnn_config_try_set(&c, "OUTPUT_DIR=a\nb", "--set", err, sizeof err));
    if (!strstr(err, "OUTPUT_DIR has a control character at byte 1")) fail_msg("%s", err);
    assert_false(mrcnn_config_try_set(&c, "OUTPUT_DIR=ab\xff", "--set", err, sizeof err));
    if (!strstr(err, "OUTPUT_DIR has a byte that is not UTF-8 at byte 2")) fail_msg("%s", err);
    assert_false(mrcnn_config_try_set(&c, "OUTPUT_DIR=\xc3", "--set", err, sizeof err)); // cut sequence
    assert_false(mrcnn_config_try_set(&c, "OUTPUT_DIR=\xed\xa0\x80", "--set", err, sizeof err)); // surrogate
    assert_false(mrcnn_config_try_set(&c, "OUTPUT_DIR=\xc0\xaf", "--set", err, sizeof err)); // overlong
    expect_load_error("tab.yaml", "OUTPUT_DIR: \"a\\tb\"\n", "tab.yaml:1", "OUTPUT_DIR has a control character at byte 1");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_nested_dotted_lists_and_base),
        cmocka_unit_test(test_errors_name_key_and_line),
        cmocka_unit_test(test_dump_round_trip),
        cmocka_unit_test(test_string_bytes),
    };
    return cmocka_run_group_tests_name("config", tests, test_tmp_setup, test_tmp_teardown);
}
