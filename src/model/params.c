/* The parameter registry: every weight a named view in one params arena, with a
 * grads arena of the same layout, so gradients all-reduce as a few large buckets
 * and one fused update touches every weight. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mrcnn_params_init(mrcnn_params *p) {
    memset(p, 0, sizeof *p);
    mrcnn_arena_init(&p->values, "params", MRCNN_DEVICE_CPU);
}

int mrcnn_params_add(mrcnn_params *p, const char *name, int ndim, const int64_t *shape,
                     bool trainable, const char *bn) {
    int i = mrcnn_arena_add(&p->values, name, MRCNN_DTYPE_F32, ndim, shape);
    if (i >= p->n_cap) {
        p->n_cap = p->n_cap ? 2 * p->n_cap : 128;
        p->trainable = MRCNN_REALLOC(p->trainable, (size_t)p->n_cap * sizeof *p->trainable,
                                     "param flags");
        p->bn = MRCNN_REALLOC(p->bn, (size_t)p->n_cap * sizeof *p->bn, "param bn names");
        p->fold_scale = MRCNN_REALLOC(p->fold_scale, (size_t)p->n_cap * sizeof *p->fold_scale, "fold scales");
        p->fold_buf = MRCNN_REALLOC(p->fold_buf, (size_t)p->n_cap * sizeof *p->fold_buf, "fold scale buffers");
    }
    p->fold_scale[i] = NULL;
    p->fold_buf[i] = bn && bn[0] && ndim >= 1 ? MRCNN_MALLOC((size_t)shape[0] * sizeof(float), "fold scale") : NULL;
    p->trainable[i] = trainable;
    snprintf(p->bn[i], sizeof p->bn[i], "%s", bn ? bn : "");
    return i;
}

static void commit_on(mrcnn_arena *a, const mrcnn_backend *be) {
    a->device = be->device;
    // the backend frees it, in mrcnn_params_free
    mrcnn_arena_commit(a, be->mem.alloc(be, a->size ? a->size : 1, a->name), NULL);
    mrcnn_tensor all = mrcnn_tensor_view(a->base, MRCNN_DTYPE_U8, be->device, 1,
                                         (int64_t[]){(int64_t)a->size});
    be->mem.zero(be, &all);
}

void mrcnn_params_commit(mrcnn_params *p, const mrcnn_backend *be) {
    mrcnn_arena_init_like(&p->grads, "grads", &p->values, MRCNN_DTYPE_F32);
    commit_on(&p->values, be);
    commit_on(&p->grads, be);
    p->be = be;
}

void mrcnn_params_set_fold_scale(mrcnn_params *p, int i, const float *scale, int64_t k) {
    MRCNN_CHECK(i >= 0 && i < p->values.n_entries, "params: no entry %d", i);
    const mrcnn_tensor *t = &p->values.entries[i].tensor;
    p->fold_scale[i] = NULL;
    if (!scale) return;
    MRCNN_CHECK(t->ndim >= 1 && t->shape[0] == k, "params: %s has %lld output channels, not %lld scales",
                p->values.entries[i].name, (long long)(t->ndim ? t->shape[0] : 0), (long long)k);
    MRCNN_CHECK(p->fold_buf[i], "params: %s has no frozen BN to fold a scale from", p->values.entries[i].name);
    memcpy(p->fold_buf[i], scale, (size_t)k * sizeof(float));
    p->fold_scale[i] = p->fold_buf[i];
}

void mrcnn_params_precond(const mrcnn_params *p, float *out) {
    const mrcnn_arena *a = &p->values;
    for (size_t j = 0; j < a->size / sizeof(float); j++) out[j] = 1.0f;
    for (int i = 0; i < a->n_entries; i++) {
        const float *s = p->fold_scale[i];
        if (!s || !p->trainable[i]) continue; // a frozen weight never moves
        const mrcnn_tensor *t = &a->entries[i].tensor;
        int64_t k = t->shape[0], per = mrcnn_tensor_numel(t) / k; // (K, R, S, C): channel-major
        float *o = out + a->entries[i].offset / sizeof(float);
        for (int64_t c = 0; c < k; c++)
            for (int64_t j = 0; j < per; j++) o[c * per + j] = s[c] * s[c];
    }
}

int mrcnn_params_count(const mrcnn_params *p) { return p->values.n_entries; }

int64_t mrcnn_params_numel(const mrcnn_params *p, bool trainable_only) {
    int64_t n = 0;
    for (int i = 0; i < p->values.n_entries; i++)
        if (!trainable_only || p->trainable[i]) n += mrcnn_tensor_numel(&p->values.entries[i].tensor);
    return n;
}

void mrcnn_params_free(mrcnn_params *p) {
    if (p->be) {
        if (p->values.base) p->be->mem.free(p->be, p->values.base);
        if (p->grads.base) p->be->mem.free(p->be, p->grads.base);
    }
    for (int i = 0; p->fold_buf && i < p->values.n_entries; i++) free(p->fold_buf[i]);
    free(p->fold_buf);
    free(p->fold_scale);
    mrcnn_arena_free(&p->values);
    mrcnn_arena_free(&p->grads);
    free(p->trainable);
    free(p->bn);
    memset(p, 0, sizeof *p);
}
