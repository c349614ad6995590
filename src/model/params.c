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
    }
    p->trainable[i] = trainable;
    snprintf(p->bn[i], sizeof p->bn[i], "%s", bn ? bn : "");
    return i;
}

static void commit_on(mrcnn_arena *a, const mrcnn_backend *be) {
    a->device = be->device;
    a->base = be->mem.alloc(be, a->size ? a->size : 1, a->name);
    a->free_fn = NULL; // freed through the backend in mrcnn_params_free
    for (int i = 0; i < a->n_entries; i++) {
        a->entries[i].tensor.data = a->base + a->entries[i].offset;
        a->entries[i].tensor.device = be->device;
    }
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
    mrcnn_arena_free(&p->values);
    mrcnn_arena_free(&p->grads);
    free(p->trainable);
    free(p->bn);
    memset(p, 0, sizeof *p);
}
