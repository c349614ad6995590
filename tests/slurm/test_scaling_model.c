/* The scaling model's arithmetic against hand-computed cases, the timeline parser's
 * errors, and that a slowed backward hides most of the communication. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "mrcnn/scaling_model.h"
#include "test_util.h"

static void parse_ok(const char *json, mrcnn_timeline *t) {
    char err[512] = "";
    int ok = mrcnn_timeline_parse(json, strlen(json), "test", t, err, sizeof err);
    if (!ok) fail_msg("timeline parse failed: %s", err);
}

/* forward 5, backward 10, other 1 ms; two 100 MB buckets ready at 5 and 10 ms;
 * 4 GPUs on 100 GB/s, 10 us per step:
 *   c = 2*3/4 * 1e8 / 1e11 s + 6 * 10 us = 1.5 + 0.06 = 1.56 ms per bucket
 *   end0 = 5 + 1.56 = 6.56; end1 = max(10, 6.56) + 1.56 = 11.56; exposed = 1.56
 *   comm = 3.12, hidden = 0.5, step = 5 + 10 + 1 + 1.56 = 17.56, eff = 16 / 17.56
 *   img/s = 1000 * 4 GPUs * 2 img / 17.56 */
static const char *k_two = "{\"source\": \"hand\", \"forward_ms\": 5, \"backward_ms\": 10, \"other_ms\": 1,"
                           " \"images_per_gpu\": 2, \"buckets\": [{\"ready_ms\": 5, \"bytes\": 1e8},"
                           " {\"bytes\": 100000000, \"ready_ms\": 10.0, \"note\": [1, {\"x\": 2}]}]}";

static void test_hand_case(void **state) {
    (void)state;
    mrcnn_timeline t;
    parse_ok(k_two, &t);
    assert_int_equal(t.n_buckets, 2);
    assert_string_equal(t.source, "hand");
    mrcnn_link l = {"test", 100.0, 10.0};
    assert_true(fabs(mrcnn_ring_allreduce_ms(1e8, 4, &l) - 1.56) < 1e-12);
    assert_true(mrcnn_ring_allreduce_ms(1e8, 1, &l) == 0.0);
    mrcnn_scaling_prediction p;
    mrcnn_scaling_predict(&t, 4, 8, &l, &l, 1.0, &p);
    assert_true(fabs(p.comm_ms - 3.12) < 1e-12);
    assert_true(fabs(p.exposed_ms - 1.56) < 1e-12);
    assert_true(fabs(p.hidden_share - 0.5) < 1e-12);
    assert_true(fabs(p.step_ms - 17.56) < 1e-12);
    assert_true(fabs(p.efficiency - 16.0 / 17.56) < 1e-12);
    assert_true(fabs(p.img_per_s - 8000.0 / 17.56) < 1e-9);
    /* One GPU: no communication, efficiency 1. */
    mrcnn_scaling_predict(&t, 1, 8, &l, &l, 1.0, &p);
    assert_true(p.comm_ms == 0.0 && p.exposed_ms == 0.0 && p.efficiency == 1.0 && p.hidden_share == 1.0);
    mrcnn_timeline_free(&t);
}

/* Past one node the ring runs on the inter-node link: 16 GPUs, 8 per node, 10 GB/s and
 * 0 latency: c = 2*15/16 * 1e8 / 1e10 s = 18.75 ms; end0 = 23.75, end1 = 42.5, exposed 32.5. */
static void test_inter_node_link(void **state) {
    (void)state;
    mrcnn_timeline t;
    parse_ok(k_two, &t);
    mrcnn_link fast = {"fast", 1000.0, 0.0}, slow = {"slow", 10.0, 0.0};
    mrcnn_scaling_prediction p;
    mrcnn_scaling_predict(&t, 16, 8, &fast, &slow, 1.0, &p);
    assert_string_equal(p.link, "slow");
    assert_true(fabs(p.comm_ms - 37.5) < 1e-9);
    assert_true(fabs(p.exposed_ms - 32.5) < 1e-9);
    mrcnn_scaling_predict(&t, 8, 8, &fast, &slow, 1.0, &p);
    assert_string_equal(p.link, "fast");
    mrcnn_timeline_free(&t);
}

/* Four 400 MB buckets and a small last one (the stem's, as in a ResNet), 8 GPUs on
 * 100 GB/s: 7 ms per big bucket, 0.875 ms for the last. At the measured speed the
 * buckets queue up behind each other (hidden 8/28.875 = 27.7%); with backward 4x slower
 * every bucket but the last finishes under backward: exposed 0.875 ms, hidden 97%. */
static void test_slow_backward_hides_communication(void **state) {
    (void)state;
    mrcnn_timeline t;
    parse_ok("{\"forward_ms\": 5, \"backward_ms\": 10, \"other_ms\": 0, \"buckets\": ["
             "{\"ready_ms\": 2, \"bytes\": 4e8}, {\"ready_ms\": 4, \"bytes\": 4e8}, {\"ready_ms\": 6, \"bytes\": 4e8},"
             "{\"ready_ms\": 8, \"bytes\": 4e8}, {\"ready_ms\": 10, \"bytes\": 5e7}]}",
             &t);
    mrcnn_link l = {"l", 100.0, 0.0};
    mrcnn_scaling_prediction p;
    mrcnn_scaling_predict(&t, 8, 8, &l, &l, 1.0, &p);
    assert_true(fabs(p.exposed_ms - 20.875) < 1e-9);
    assert_true(p.hidden_share < 0.3);
    mrcnn_scaling_predict(&t, 8, 8, &l, &l, 4.0, &p);
    assert_true(fabs(p.exposed_ms - 0.875) < 1e-9);
    assert_true(p.hidden_share >= 0.8);
    assert_true(fabs(p.efficiency - 45.0 / 45.875) < 1e-12);
    mrcnn_timeline_free(&t);
}

static void test_link_parse(void **state) {
    (void)state;
    mrcnn_link l;
    char err[256];
    assert_true(mrcnn_link_parse("nvlink", &l, err, sizeof err) && l.bw_gbs == 450.0);
    assert_true(mrcnn_link_parse("ndr", &l, err, sizeof err) && l.bw_gbs == 45.0);
    assert_true(mrcnn_link_parse("25,4.5", &l, err, sizeof err) && l.bw_gbs == 25.0 && l.latency_us == 4.5);
    assert_false(mrcnn_link_parse("token-ring", &l, err, sizeof err));
    assert_non_null(strstr(err, "token-ring"));
    assert_false(mrcnn_link_parse("0,3", &l, err, sizeof err));
}

static void expect_parse_error(const char *json, const char *needle) {
    mrcnn_timeline t;
    char err[512] = "";
    assert_false(mrcnn_timeline_parse(json, strlen(json), "bad.json", &t, err, sizeof err));
    if (!strstr(err, needle)) fail_msg("error '%s' does not mention '%s'", err, needle);
    assert_null(t.ready_ms);
}

static void test_timeline_errors(void **state) {
    (void)state;
    expect_parse_error("[1]", "JSON object");
    expect_parse_error("{\"forward_ms\": 1, \"backward_ms\": 2, \"other_ms\": 0}", "buckets");
    expect_parse_error("{\"forward_ms\": 1, \"other_ms\": 0, \"buckets\": [{\"ready_ms\": 1, \"bytes\": 4}]}",
                       "backward_ms");
    expect_parse_error("{\"forward_ms\": 1, \"backward_ms\": 2, \"other_ms\": 0, \"buckets\": "
                       "[{\"ready_ms\": 1.5, \"bytes\": 4}, {\"ready_ms\": 1, \"bytes\": 4}]}",
                       "before bucket 0");
    expect_parse_error("{\"forward_ms\": 1, \"backward_ms\": 2, \"other_ms\": 0, \"buckets\": "
                       "[{\"ready_ms\": 3, \"bytes\": 4}]}",
                       "after backward ended");
    expect_parse_error("{\"forward_ms\": \"fast\"}", "must be a number");
    expect_parse_error("{\"forward_ms\": 1, \"backward_ms\": 2, \"other_ms\": 0, \"buckets\": [{\"bytes\": 4}]}",
                       "ready_ms");
    expect_parse_error("{\"forward_ms\": 1,", "bad.json");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_case),
        cmocka_unit_test(test_inter_node_link),
        cmocka_unit_test(test_slow_backward_hides_communication),
        cmocka_unit_test(test_link_parse),
        cmocka_unit_test(test_timeline_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
