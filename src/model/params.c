/* The parameter registry: every weight a named view in one params arena, with a
 * grads arena of the same layout, so gradients all-reduce as a few large buckets
 * and one fused update touches every weight; and, where the layers compute in a
 * 16-bit dtype, a copy of the arena in it made by one cast per step. */
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

/* The layers' dtype, the activations' (a GPU backend's storage dtype, fp32 on the CPU,
 * whose rounded-storage mode computes in fp32): one rule, mrcnn_ws_act_dtype's. */
static mrcnn_dtype compute_dtype(const mrcnn_params *p) {
    mrcnn_ws ws = {.be = p->be};
    return mrcnn_ws_act_dtype(&ws);
}

/* The entry as the (M, C) -> (M, D) rows channel_copy pads: its last dimension, or for
 * padded rows all of it as one row (the real rows are the prefix). */
static void pad_fill(const mrcnn_params *p, const struct mrcnn_params_pad *e) {
    const mrcnn_tensor *v = &p->values.entries[e->index].tensor;
    const int64_t n = mrcnn_tensor_numel(v), pn = mrcnn_tensor_numel(&e->t);
    const int64_t c = e->rows != v->shape[0] ? n : v->shape[v->ndim - 1];
    const int64_t d = e->rows != v->shape[0] ? pn : e->last;
    mrcnn_tensor x = mrcnn_tensor_view(v->data, v->dtype, v->device, 2, (int64_t[]){c ? n / c : 0, c});
    mrcnn_tensor y = mrcnn_tensor_view(e->t.data, e->t.dtype, e->t.device, 2, (int64_t[]){c ? n / c : 0, d});
    p->be->nn.channel_copy(p->be, &x, &y);
}

static void pads_free(mrcnn_params *p) {
    for (int j = 0; j < p->n_pads; j++)
        if (p->pads[j].t.data) p->be->mem.free(p->be, p->pads[j].t.data);
    free(p->pads);
    p->pads = NULL;
    p->n_pads = p->cap_pads = 0;
}

static void copy_drop(mrcnn_params *p) {
    if (p->copy.base) p->be->mem.free(p->be, p->copy.base);
    mrcnn_arena_free(&p->copy);
}

/* p->copy laid out as values in dtype dt, element for element, and allocated. The
 * offsets scale with the element size (a 256-byte aligned fp32 offset is a 128-byte
 * aligned bf16 one), so one flat cast fills every entry. */
static void copy_make(mrcnn_params *p, mrcnn_dtype dt) {
    const mrcnn_arena *v = &p->values;
    const size_t es = mrcnn_dtype_size(dt);
    mrcnn_arena *c = &p->copy;
    mrcnn_arena_init(c, "params (compute copy)", p->be->device);
    c->entries = MRCNN_CALLOC((size_t)(v->n_entries ? v->n_entries : 1), sizeof *c->entries, "compute copy entries");
    c->cap_entries = v->n_entries;
    c->size = v->size / sizeof(float) * es;
    c->base = p->be->mem.alloc(p->be, c->size ? c->size : 1, c->name);
    for (int i = 0; i < v->n_entries; i++) {
        const mrcnn_arena_entry *e = &v->entries[i];
        mrcnn_arena_entry *d = &c->entries[i];
        memcpy(d->name, e->name, sizeof d->name);
        d->offset = e->offset / sizeof(float) * es;
        d->tensor = mrcnn_tensor_view(c->base + d->offset, dt, c->device, e->tensor.ndim, e->tensor.shape);
    }
    c->n_entries = v->n_entries;
}

/* The copy the backend's precision asks for: made, remade in another dtype, or dropped. */
static void copy_fit(mrcnn_params *p) {
    const mrcnn_dtype dt = compute_dtype(p);
    if (dt == MRCNN_DTYPE_F32 && !p->separate_copy) {
        copy_drop(p);
        return;
    }
    MRCNN_CHECK(dt != MRCNN_DTYPE_F32 || p->be->device == MRCNN_DEVICE_GPU || p->be->storage == MRCNN_DTYPE_F32,
                "params: a separate fp32 copy of the weights needs an exact cast, but the cpu backend's cast rounds "
                "in its rounded-storage mode (storage %s)",
                mrcnn_dtype_name(p->be->storage));
    if (p->copy.base && p->copy.n_entries == p->values.n_entries &&
        (p->copy.n_entries == 0 || p->copy.entries[0].tensor.dtype == dt))
        return;
    copy_drop(p);
    copy_make(p, dt);
}

void mrcnn_params_commit(mrcnn_params *p, const mrcnn_backend *be) {
    mrcnn_arena_init_like(&p->grads, "grads", &p->values, MRCNN_DTYPE_F32);
    commit_on(&p->values, be);
    commit_on(&p->grads, be);
    p->be = be;
    copy_fit(p);
}

void mrcnn_params_refresh(mrcnn_params *p) {
    MRCNN_CHECK(p->be, "params: refreshed before mrcnn_params_commit");
    copy_fit(p);
    for (int j = 0; j < p->n_pads; j++) {
        const mrcnn_tensor *v = &p->values.entries[p->pads[j].index].tensor;
        if (v->ndim > 1 && p->pads[j].t.dtype != compute_dtype(p)) { // the precision changed: remade below
            pads_free(p);
            break;
        }
    }
    for (int j = 0; j < p->n_pads; j++) pad_fill(p, &p->pads[j]);
    if (!p->copy.base) return;
    const int64_t n = (int64_t)(p->values.size / sizeof(float));
    mrcnn_tensor src = mrcnn_tensor_view(p->values.base, MRCNN_DTYPE_F32, p->values.device, 1, &n);
    mrcnn_tensor dst = mrcnn_tensor_view(p->copy.base, p->copy.entries[0].tensor.dtype, p->copy.device, 1, &n);
    p->be->nn.cast(p->be, &src, &dst);
}

mrcnn_tensor mrcnn_params_padded(mrcnn_params *p, int i, int64_t rows, int64_t last) {
    MRCNN_CHECK(p->be, "params: a padded view before mrcnn_params_commit");
    MRCNN_CHECK(i >= 0 && i < p->values.n_entries, "params: no entry %d", i);
    const mrcnn_tensor *v = &p->values.entries[i].tensor;
    const int64_t k = v->shape[0], c = v->shape[v->ndim - 1];
    if (v->ndim == 1) last = rows; // a bias: its one dimension is its rows
    MRCNN_CHECK(rows >= k && last >= c && (rows == k || last == c || v->ndim == 1),
                "params: %s (%lld, ..., %lld) padded to (%lld, ..., %lld): rows or last channels may grow, one of "
                "them",
                p->values.entries[i].name, (long long)k, (long long)c, (long long)rows, (long long)last);
    for (int j = 0; j < p->n_pads; j++)
        if (p->pads[j].index == i && p->pads[j].rows == rows && p->pads[j].last == last) return p->pads[j].t;
    if (p->n_pads == p->cap_pads) {
        p->cap_pads = p->cap_pads ? 2 * p->cap_pads : 16;
        p->pads = MRCNN_REALLOC(p->pads, (size_t)p->cap_pads * sizeof *p->pads, "padded views");
    }
    struct mrcnn_params_pad *e = &p->pads[p->n_pads++];
    int64_t shape[MRCNN_MAX_DIMS];
    memcpy(shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    shape[0] = rows;
    shape[v->ndim - 1] = v->ndim == 1 ? rows : last;
    const mrcnn_dtype dt = v->ndim == 1 ? MRCNN_DTYPE_F32 : compute_dtype(p);
    int64_t numel = 1;
    for (int d = 0; d < v->ndim; d++) numel *= shape[d];
    *e = (struct mrcnn_params_pad){.index = i, .rows = rows, .last = last};
    e->t = mrcnn_tensor_view(p->be->mem.alloc(p->be, (size_t)numel * mrcnn_dtype_size(dt), "padded weights"), dt,
                             p->be->device, v->ndim, shape);
    pad_fill(p, e); // first use; every later refresh remakes it
    return e->t;
}

mrcnn_tensor *mrcnn_params_compute(mrcnn_params *p, int i) {
    return mrcnn_arena_get(p->copy.base ? &p->copy : &p->values, i);
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
        copy_drop(p);
        pads_free(p);
    }
    for (int i = 0; p->fold_buf && i < p->values.n_entries; i++) free(p->fold_buf[i]);
    free(p->fold_buf);
    free(p->fold_scale);
    mrcnn_arena_free(&p->values);
    mrcnn_arena_free(&p->grads);
    mrcnn_arena_free(&p->copy);
    free(p->trainable);
    free(p->bn);
    memset(p, 0, sizeof *p);
}
