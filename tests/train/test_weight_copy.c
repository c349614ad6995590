/* The weights the layers compute with (params.h: mrcnn_params_refresh, mrcnn_params_compute).
 * On a GPU backend they are a copy of the fp32 values in the activation dtype, made by ONE
 * cast of the whole arena per step instead of a cast per layer call; on the CPU backend
 * (fp32) the layers read the values themselves. A params option (separate_copy) makes the
 * copy on the CPU too, as an exact fp32 -> fp32 cast, so the copy's path runs here:
 *
 *   - three trainer steps (the tiny model, mrcnn_trainer_step) with and without the copy:
 *     every step's five losses, the gradients and the weights after them bit-identical,
 *     and then inference (mrcnn_model_predict) on the trained weights too;
 *   - the backend call trace of each step's region (what a CUDA graph captures): with the
 *     copy, exactly one nn.cast, over the whole arena, and every weight that a conv, linear
 *     or deconv op reads (forward and backward) lies in the copy; without it, no cast and
 *     every weight lies in the values;
 *   - the CPU's rounded-storage mode, whose cast rounds, refuses the copy.
 *
 * A copy made once and not refreshed after the update diverges from the second step on
 * (checked by skipping the refresh in mrcnn_model_run: the losses of step 1 differ). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_scene.h"
#include "test_util.h"

#include "mrcnn/backend.h"
#include "mrcnn/backend_trace.h"
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "mrcnn/model_trainable.h"
#include "mrcnn/precision.h"
#include "mrcnn/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_STEPS 3

typedef struct {
    mrcnn_backend *be;
    test_batch batch;
    int64_t index[TEST_BATCH_N];
    mrcnn_trace_summary regions[N_STEPS];
    int n_regions;
} runner;

/* What one run leaves to compare. */
typedef struct {
    float losses[N_STEPS][MRCNN_N_LOSSES];
    unsigned char *values, *grads; // the arenas' bytes after the last step
    size_t bytes;
    mrcnn_detections det;
    int casts[N_STEPS];       // nn.cast calls in the region
    int whole_casts[N_STEPS]; // of which values (fp32, the whole arena) -> the copy
    int weight_reads[N_STEPS], in_copy[N_STEPS], in_values[N_STEPS];
    int in_pads[N_STEPS];     // weight reads from a padded view (mrcnn_params_padded)
    int pad_copies[N_STEPS];  // nn.channel_copy calls from the values into a padded view
    int n_pads;               // padded views after the run
} outcome;

static double source_next(void *ctx, int64_t step, int micro, mrcnn_batch *b) {
    runner *r = ctx;
    test_batch_make(&r->batch, 100 + (uint64_t)step);
    for (int i = 0; i < TEST_BATCH_N; i++) r->index[i] = 2 * step + i;
    b->images = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, r->be->device, 4,
                                  (int64_t[]){TEST_BATCH_N, TEST_BATCH_H, TEST_BATCH_W, 3});
    b->host_images = r->batch.images;
    b->image_hw = r->batch.hw;
    b->gt = r->batch.gt;
    b->image_index = r->index;
    b->epoch = 0;
    return 0;
}

static void on_region(void *ctx, int begin) {
    runner *r = ctx;
    if (begin) mrcnn_backend_trace_begin(r->be);
    else {
        MRCNN_CHECK(r->n_regions < N_STEPS, "test_weight_copy: more regions than steps");
        mrcnn_backend_trace_end(r->be, &r->regions[r->n_regions++]);
    }
}

static int inside(const void *p, const mrcnn_arena *a) {
    return a->base && (const unsigned char *)p >= a->base && (const unsigned char *)p < a->base + a->size;
}

static int in_pad(const void *p, const mrcnn_params *ps) {
    for (int j = 0; j < ps->n_pads; j++) {
        const mrcnn_tensor *t = &ps->pads[j].t;
        const unsigned char *b = t->data;
        if ((const unsigned char *)p >= b && (const unsigned char *)p < b + mrcnn_tensor_nbytes(t)) return 1;
    }
    return 0;
}

/* The pointer after `key` (" x=", " y=") in a listing line, NULL when there is none. */
static void *arg_ptr(const char *line, const char *key) {
    const char *k = strstr(line, key), *at = k ? strchr(k, '@') : NULL;
    void *ptr = NULL;
    return at && sscanf(at + 1, "%p", &ptr) == 1 ? ptr : NULL;
}

/* The ops that read a layer's weight as "w=": conv, linear and deconv, forward and backward. */
static int reads_weight(const char *l) {
    static const char *const ops[] = {"nn.conv2d_forward ", "nn.conv2d_backward ", "nn.linear_forward ",
                                      "nn.linear_backward ", "nn.deconv2x2_forward ", "nn.deconv2x2_backward "};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (!strncmp(l, ops[i], strlen(ops[i]))) return 1;
    return 0;
}

/* The region's listing: its casts, and where each weight an op reads lies. */
static void scan_region(const mrcnn_trace_summary *s, const mrcnn_params *p, outcome *o, int step) {
    char whole[64];
    snprintf(whole, sizeof whole, " x=%s[%lld]", mrcnn_dtype_name(MRCNN_DTYPE_F32),
             (long long)(p->values.size / sizeof(float)));
    for (const char *l = s->listing; l && *l;) {
        const char *end = strchr(l, '\n');
        const size_t n = end ? (size_t)(end - l) : strlen(l);
        char line[4096];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), l);
        if (!strncmp(line, "nn.channel_copy ", 16)) {
            const void *x = arg_ptr(line, " x="), *y = arg_ptr(line, " y=");
            o->pad_copies[step] += x && y && inside(x, &p->values) && in_pad(y, p);
        } else if (!strncmp(line, "nn.cast ", 8)) {
            o->casts[step]++;
            const char *at = strstr(line, whole);
            void *x = NULL, *y = NULL;
            const char *xa = at ? strchr(at, '@') : NULL, *ya = xa ? strstr(xa, " y=") : NULL;
            if (ya) ya = strchr(ya, '@');
            if (xa && ya && sscanf(xa + 1, "%p", &x) == 1 && sscanf(ya + 1, "%p", &y) == 1 &&
                x == (void *)p->values.base && y == (void *)p->copy.base)
                o->whole_casts[step]++;
        } else if (reads_weight(line)) {
            const char *w = strstr(line, " w=");
            while (w && w[3] >= '0' && w[3] <= '9') w = strstr(w + 3, " w="); // the conv desc's width
            const char *at = w ? strchr(w, '@') : NULL;
            void *ptr = NULL;
            if (!at || sscanf(at + 1, "%p", &ptr) != 1) fail_msg("no weight pointer in: %s", line);
            o->weight_reads[step]++;
            o->in_copy[step] += inside(ptr, &p->copy);
            o->in_values[step] += inside(ptr, &p->values);
            o->in_pads[step] += in_pad(ptr, p);
        }
        l += n + (end ? 1 : 0);
    }
}

static unsigned char *arena_bytes(const mrcnn_backend *be, const mrcnn_arena *a) {
    unsigned char *h = malloc(a->size);
    mrcnn_tensor all = mrcnn_tensor_view(a->base, MRCNN_DTYPE_U8, be->device, 1, (int64_t[]){(int64_t)a->size});
    be->mem.read(be, &all, h);
    return h;
}

/* separate: the params' separate fp32 copy; align: the model's pad_align (1, the CPU's
 * default, or 8, a GPU's: padded views of the stem, RPN, box-predictor and mask-logit
 * weights). */
static void train(int separate, int align, outcome *o) {
    static runner r; // the batch is large
    memset(&r, 0, sizeof r);
    memset(o, 0, sizeof *o);
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    mrcnn_config_set(&cfg, "LOG_PERIOD=1000", "test");
    mrcnn_config_set(&cfg, "SOLVER.PRECISION=fp32", "test");
    r.be = mrcnn_backend_cpu_create();
    mrcnn_precision_apply(r.be, "fp32");
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, r.be);
    mrcnn_model_init_random(&m, 3);
    m.params.separate_copy = separate;
    m.pad_align = align;
    mrcnn_params_refresh(&m.params); // allocates the copy before the traced regions
    assert_int_equal(m.params.copy.base != NULL, separate);
    mrcnn_model_trainable mt;
    mrcnn_model_trainable_init(&mt, &m, source_next, &r);
    mrcnn_backend_trace_install(r.be);
    mrcnn_backend_trace_keep_listing(r.be, 1);
    mrcnn_dist one = {.rank = 0, .world_size = 1, .local_size = 1, .device = -1};
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one, r.be, &mt.tm, 0);
    tr.on_region = on_region;
    tr.on_region_ctx = &r;
    for (int i = 0; i < N_STEPS; i++) {
        mrcnn_step_result res;
        mrcnn_trainer_step(&tr, &res);
        mrcnn_loss_window w;
        mrcnn_trainer_take_losses(&tr, &w);
        assert_int_equal(w.steps, 1);
        for (int k = 0; k < MRCNN_N_LOSSES; k++) o->losses[i][k] = (float)w.last[k];
        scan_region(&r.regions[i], &m.params, o, i);
        printf("%s, pad_align %d, step %d: total loss %.9g; region: %d casts (%d of the whole arena), %d weight "
               "reads (%d from the copy, %d from the values, %d from padded views), %d padded views remade\n",
               separate ? "copy" : "values", align, i, w.last_total, o->casts[i], o->whole_casts[i],
               o->weight_reads[i], o->in_copy[i], o->in_values[i], o->in_pads[i], o->pad_copies[i]);
    }
    o->n_pads = m.params.n_pads;
    o->bytes = m.params.values.size;
    o->values = arena_bytes(r.be, &m.params.values);
    o->grads = arena_bytes(r.be, &m.params.grads);

    /* Inference on the weights the last update left: its forward refreshes the copy. */
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, r.be);
    test_batch_make(&r.batch, 7);
    mrcnn_batch b = {.image_hw = r.batch.hw};
    b.images = mrcnn_ws_tensor(&ws, MRCNN_DTYPE_F32, 4, (int64_t[]){TEST_BATCH_N, TEST_BATCH_H, TEST_BATCH_W, 3});
    r.be->mem.write(r.be, &b.images, r.batch.images);
    mrcnn_pass st;
    mrcnn_model_predict(&m, &ws, &b, &st, &o->det);
    mrcnn_pass_free(&st);
    mrcnn_ws_free(&ws);

    for (int i = 0; i < N_STEPS; i++) mrcnn_trace_summary_free(&r.regions[i]);
    mrcnn_trainer_free(&tr);
    mrcnn_model_trainable_free(&mt);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(r.be);
}

static void outcome_free(outcome *o) {
    free(o->values);
    free(o->grads);
    mrcnn_detections_free(&o->det);
}

static void test_copy_matches_values(void **state) {
    (void)state;
    static outcome a, c; // a: the layers read the values; c: a separate copy
    train(0, 1, &a);
    train(1, 1, &c);
    for (int i = 0; i < N_STEPS; i++) {
        /* The copy, once per step and whole; every weight read from it. */
        assert_int_equal(c.casts[i], 1);
        assert_int_equal(c.whole_casts[i], 1);
        assert_true(c.weight_reads[i] > 0);
        assert_int_equal(c.in_copy[i], c.weight_reads[i]);
        /* Without one: no cast at all, the weights read where they are. */
        assert_int_equal(a.casts[i], 0);
        assert_int_equal(a.in_values[i], a.weight_reads[i]);
        assert_int_equal(a.weight_reads[i], c.weight_reads[i]);
        for (int k = 0; k < MRCNN_N_LOSSES; k++)
            if (memcmp(&a.losses[i][k], &c.losses[i][k], sizeof(float)))
                fail_msg("step %d loss %s: %.9g reading the values, %.9g reading the copy", i, mrcnn_loss_names[k],
                         (double)a.losses[i][k], (double)c.losses[i][k]);
    }
    assert_true(a.bytes == c.bytes);
    if (memcmp(a.grads, c.grads, a.bytes)) fail_msg("the last step's gradients differ with the copy");
    if (memcmp(a.values, c.values, a.bytes)) fail_msg("the weights after %d steps differ with the copy", N_STEPS);
    /* Inference after the updates: the same detections (what the forward's refresh gives). */
    assert_int_equal(a.det.n_images, c.det.n_images);
    int total = 0;
    for (int i = 0; i < a.det.n_images; i++) {
        assert_int_equal(a.det.counts[i], c.det.counts[i]);
        const size_t o = (size_t)i * a.det.cap, n = (size_t)a.det.counts[i];
        const size_t mm = (size_t)a.det.mask_size * a.det.mask_size;
        total += a.det.counts[i];
        if (memcmp(a.det.boxes + 4 * o, c.det.boxes + 4 * o, 4 * n * sizeof(float)) ||
            memcmp(a.det.scores + o, c.det.scores + o, n * sizeof(float)) ||
            memcmp(a.det.labels + o, c.det.labels + o, n * sizeof(int32_t)) ||
            memcmp(a.det.mask_probs + o * mm, c.det.mask_probs + o * mm, n * mm * sizeof(float)))
            fail_msg("image %d's detections differ with the copy", i);
    }
    printf("inference: %d detections, identical\n", total);
    outcome_free(&a);
    outcome_free(&c);
}

/* pad_align 8 (a GPU's tensor-core shapes, forced on the CPU): the padded layers read
 * padded views of their weights, each remade once per step (one nn.channel_copy from
 * the values), not a copy per call: every weight an op reads lies in the values, the
 * copy or a view, none in the step's workspace. With and without the separate copy the
 * run is bit-identical. */
static void test_padded_views_once_per_step(void **state) {
    (void)state;
    static outcome a, c;
    train(0, 8, &a);
    train(1, 8, &c);
    const outcome *os[2] = {&a, &c};
    for (int v = 0; v < 2; v++) {
        const outcome *o = os[v];
        /* the tiny model (3 classes + background): the stem weight; the RPN's objectness and
         * delta convs (3 -> 8, 12 -> 16), weight and bias each; the class logits (4 -> 8) and
         * the mask logits (4 -> 8), weight and bias each; the box deltas (16) need none */
        assert_int_equal(o->n_pads, 9);
        /* Step 0 makes the views (allocations inside the region, which the listing names by
         * allocation, not by address); every later step remakes each once and reads them. */
        for (int i = 1; i < N_STEPS; i++) {
            assert_true(o->in_pads[i] > 0);
            assert_int_equal(o->in_copy[i] + o->in_values[i] + o->in_pads[i], o->weight_reads[i]);
            assert_int_equal(o->pad_copies[i], o->n_pads);
        }
    }
    for (int i = 0; i < N_STEPS; i++)
        for (int k = 0; k < MRCNN_N_LOSSES; k++)
            if (memcmp(&a.losses[i][k], &c.losses[i][k], sizeof(float)))
                fail_msg("pad_align 8, step %d loss %s: %.9g reading the values, %.9g reading the copy", i,
                         mrcnn_loss_names[k], (double)a.losses[i][k], (double)c.losses[i][k]);
    if (memcmp(a.grads, c.grads, a.bytes)) fail_msg("pad_align 8: the last step's gradients differ with the copy");
    outcome_free(&a);
    outcome_free(&c);
}

/* The CPU's rounded-storage mode rounds what its cast writes: an fp32 copy there would
 * not be the values, so it is refused; without separate_copy nothing is made. */
static void test_rounded_storage_refuses(void **state) {
    (void)state;
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_precision_apply(be, "bf16");
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, be);
    mrcnn_params_refresh(&m.params);
    assert_null(m.params.copy.base); // the CPU computes in fp32: the layers read the values
    assert_ptr_equal(mrcnn_params_compute(&m.params, 0), mrcnn_arena_get(&m.params.values, 0));
    m.params.separate_copy = true;
    EXPECT_FAIL(mrcnn_params_refresh(&m.params), "rounded-storage");
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_matches_values),
        cmocka_unit_test(test_padded_views_once_per_step),
        cmocka_unit_test(test_rounded_storage_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
