/* Every byte of a training checkpoint flipped, one at a time: loading the
 * damaged file either fails (a checksum, a missing or malformed object) or gives back
 * exactly the weights, momentum and state that were saved. Never different numbers
 * silently: the Fletcher-32 filter covers the datasets, the 1.8+ format's checksums
 * the superblock, object headers (attributes) and group indexes. A truncated file
 * fails too. Also: a failed try_load leaves the arenas untouched, and the old
 * (pre-checksum) layout still loads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/trainer.h"
#include "test_util.h"

typedef struct {
    mrcnn_arena params, mom;
} arenas;

static void arenas_make(arenas *a) {
    mrcnn_arena_init(&a->params, "params", MRCNN_DEVICE_CPU);
    mrcnn_arena_add(&a->params, "backbone.conv1.weight", MRCNN_DTYPE_F32, 4, (int64_t[]){4, 3, 3, 3});
    mrcnn_arena_add(&a->params, "fc.weight", MRCNN_DTYPE_F32, 2, (int64_t[]){8, 16});
    mrcnn_arena_add(&a->params, "fc.bias", MRCNN_DTYPE_F32, 1, (int64_t[]){8});
    mrcnn_arena_commit(&a->params, NULL, NULL);
    mrcnn_arena_init_like(&a->mom, "momentum", &a->params, MRCNN_DTYPE_F32);
    mrcnn_arena_commit(&a->mom, NULL, NULL);
}

static void arenas_free(arenas *a) {
    mrcnn_arena_free(&a->params);
    mrcnn_arena_free(&a->mom);
}

static void fill(mrcnn_arena *a, float v) {
    float *p = (float *)a->base;
    for (size_t i = 0; i < a->size / sizeof(float); i++) p[i] = v;
}

static unsigned char *read_all(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n);
    assert_int_equal(fread(b, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return b;
}

static void write_all(const char *path, const unsigned char *b, long n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
}

static void test_every_byte_flipped(void **state) {
    mrcnn_backend be = {.name = "host", .device = MRCNN_DEVICE_CPU};
    arenas src, dst;
    arenas_make(&src);
    arenas_make(&dst);
    /* Values in the entries; the alignment padding between them stays 0 (it is not saved). */
    fill(&src.params, 0);
    fill(&src.mom, 0);
    for (int i = 0; i < src.params.n_entries; i++) {
        int64_t k = mrcnn_tensor_numel(&src.params.entries[i].tensor);
        test_fill_uniform((float *)src.params.entries[i].tensor.data, k, -1, 1, 5 + (uint64_t)i);
        test_fill_uniform((float *)src.mom.entries[i].tensor.data, k, -1, 1, 50 + (uint64_t)i);
    }
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_train_state st;
    memset(&st, 0, sizeof st);
    st.step = 1234;
    st.epoch = 3;
    st.loader_step = 17;
    st.loader_batch = 8;
    st.nonfinite = 2;
    st.scaler.enabled = 1;
    st.scaler.scale = 2048;
    st.scaler.growth_interval = 2000;
    st.scaler.clean_steps = 11;
    st.scaler.skipped = 4;
    st.lr = 0.01;
    st.base_lr = 0.02;
    st.world_size = 4;
    st.global_batch = 16;
    st.seed = 99;
    char dir[300], path[1024];
    snprintf(dir, sizeof dir, "%s/run", test_tmp_dir());
    mrcnn_checkpoint_save(dir, &be, &src.params, NULL, &src.mom, &st, &cfg, 3, path);
    long n;
    unsigned char *orig = read_all(path, &n);
    char flip[600];
    snprintf(flip, sizeof flip, "%s/flip.h5", test_tmp_dir());
    char why[1024];
    mrcnn_train_state got;
    /* The intact file loads, equal. */
    write_all(flip, orig, n);
    if (!mrcnn_checkpoint_try_load(flip, &be, &dst.params, &dst.mom, &got, why, sizeof why)) fail_msg("%s", why);
    assert_memory_equal(dst.params.base, src.params.base, src.params.size);
    assert_memory_equal(dst.mom.base, src.mom.base, src.mom.size);
    assert_true(got.step == 1234 && got.seed == 99 && got.scaler.scale == 2048.0f && got.loader_batch == 8);
    unsigned char *b = malloc((size_t)n);
    long detected = 0, harmless = 0;
    for (long i = 0; i < n; i++) {
        memcpy(b, orig, (size_t)n);
        b[i] ^= (unsigned char)(1u << (i % 8));
        write_all(flip, b, n);
        fill(&dst.params, 777);
        fill(&dst.mom, 777);
        memset(&got, 0, sizeof got);
        if (!mrcnn_checkpoint_try_load(flip, &be, &dst.params, &dst.mom, &got, why, sizeof why)) {
            detected++;
            /* Nothing was written into the arenas. */
            const float *p = (const float *)dst.params.base, *q = (const float *)dst.mom.base;
            for (size_t k = 0; k < dst.params.size / sizeof(float); k++)
                if (p[k] != 777 || q[k] != 777) fail_msg("byte %ld: a failed load wrote into the arenas", i);
            continue;
        }
        harmless++;
        if (memcmp(dst.params.base, src.params.base, src.params.size) ||
            memcmp(dst.mom.base, src.mom.base, src.mom.size) || got.step != st.step || got.epoch != st.epoch ||
            got.loader_step != st.loader_step || got.loader_batch != st.loader_batch ||
            got.nonfinite != st.nonfinite || got.scaler.enabled != st.scaler.enabled ||
            got.scaler.scale != st.scaler.scale || got.scaler.growth_interval != st.scaler.growth_interval ||
            got.scaler.clean_steps != st.scaler.clean_steps || got.scaler.skipped != st.scaler.skipped ||
            got.lr != st.lr || got.base_lr != st.base_lr || got.world_size != st.world_size ||
            got.global_batch != st.global_batch || got.seed != st.seed)
            fail_msg("byte %ld of %ld flipped: the checkpoint loaded with different contents", i, n);
    }
    printf("%ld bytes flipped one at a time: %ld detected, %ld in bytes no reader uses (loaded equal)\n", n, detected,
           harmless);
    assert_true(detected > n / 2);
    /* Truncated anywhere: fails. */
    for (long len = 0; len < n; len += 97) {
        write_all(flip, orig, len);
        assert_false(mrcnn_checkpoint_try_load(flip, &be, &dst.params, &dst.mom, &got, why, sizeof why));
    }
    free(b);
    free(orig);
    arenas_free(&src);
    arenas_free(&dst);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_byte_flipped),
    };
    return cmocka_run_group_tests_name("checkpoint_flip", tests, test_tmp_setup, test_tmp_teardown);
}
