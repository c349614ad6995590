/* SGD with momentum and weight decay over the flat arenas: one fused backend call
 * (sgd_update) per step, fp32 master weights and momentum. */
#include "mrcnn/train.h"
#include "mrcnn/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mrcnn_tensor mrcnn_arena_flat(const mrcnn_arena *a) {
    int64_t n = (int64_t)(a->size / sizeof(float));
    return mrcnn_tensor_view(a->base, MRCNN_DTYPE_F32, a->device, 1, &n);
}

float mrcnn_sgd_decay_multiplier(const char *name, const mrcnn_config *cfg) {
    if (cfg->solver_weight_decay == 0.0f) return 0.0f;
    size_t n = strlen(name);
    int is_bias = n >= 5 && !strcmp(name + n - 5, ".bias");
    int is_norm = strstr(name, "norm") || strstr(name, "bn") || strstr(name, ".gn");
    if (is_norm) return cfg->solver_weight_decay_norm / cfg->solver_weight_decay;
    if (is_bias) return cfg->solver_weight_decay_bias / cfg->solver_weight_decay;
    return 1.0f;
}

static void commit_on(mrcnn_arena *a, const mrcnn_backend *be) {
    a->device = be->device;
    a->base = be->mem.alloc(be, a->size ? a->size : 1, a->name);
    a->free_fn = NULL; // freed through the backend in mrcnn_sgd_free
    for (int i = 0; i < a->n_entries; i++) {
        a->entries[i].tensor.data = a->base + a->entries[i].offset;
        a->entries[i].tensor.device = be->device;
    }
    mrcnn_tensor all = mrcnn_arena_flat(a);
    be->mem.zero(be, &all);
}

void mrcnn_sgd_init(mrcnn_sgd *o, const mrcnn_backend *be, const mrcnn_arena *params,
                    const bool *trainable, const mrcnn_config *cfg) {
    memset(o, 0, sizeof *o);
    MRCNN_CHECK(params->base != NULL, "SGD: params arena '%s' is not committed", params->name);
    for (int i = 0; i < params->n_entries; i++)
        MRCNN_CHECK(params->entries[i].tensor.dtype == MRCNN_DTYPE_F32,
                    "SGD: parameter '%s' is %s; master weights must be fp32", params->entries[i].name,
                    mrcnn_dtype_name(params->entries[i].tensor.dtype));
    o->be = be;
    o->momentum_coef = cfg->solver_momentum;
    o->weight_decay = cfg->solver_weight_decay;
    mrcnn_arena_init_like(&o->momentum, "momentum", params, MRCNN_DTYPE_F32);
    commit_on(&o->momentum, be);

    int64_t n = (int64_t)(params->size / sizeof(float));
    float *host = MRCNN_CALLOC((size_t)(n ? n : 1), sizeof(float), "weight decay mask (host)");
    for (int i = 0; i < params->n_entries; i++) {
        float m = (trainable && !trainable[i]) ? 0.0f : mrcnn_sgd_decay_multiplier(params->entries[i].name, cfg);
        float *p = host + params->entries[i].offset / sizeof(float);
        int64_t k = mrcnn_tensor_numel(&params->entries[i].tensor);
        for (int64_t j = 0; j < k; j++) p[j] = m;
    }
    o->mask_mem = be->mem.alloc(be, (size_t)(n ? n : 1) * sizeof(float), "weight decay mask");
    o->decay_mask = mrcnn_tensor_view(o->mask_mem, MRCNN_DTYPE_F32, be->device, 1, &n);
    be->mem.write(be, &o->decay_mask, host);
    free(host);
}

void mrcnn_sgd_step(mrcnn_sgd *o, mrcnn_arena *params, const mrcnn_arena *grads, float lr, float grad_scale) {
    MRCNN_CHECK(params->size == grads->size && params->size == o->momentum.size,
                "SGD: params (%zu bytes), grads (%zu) and momentum (%zu) arenas differ in layout", params->size,
                grads->size, o->momentum.size);
    mrcnn_tensor p = mrcnn_arena_flat(params), g = mrcnn_arena_flat(grads), v = mrcnn_arena_flat(&o->momentum);
    o->be->opt.sgd_update(o->be, &p, &g, &v, &o->decay_mask, lr, o->momentum_coef, o->weight_decay, grad_scale);
}

void mrcnn_sgd_free(mrcnn_sgd *o) {
    if (o->be) {
        if (o->momentum.base) o->be->mem.free(o->be, o->momentum.base);
        if (o->mask_mem) o->be->mem.free(o->be, o->mask_mem);
    }
    mrcnn_arena_free(&o->momentum);
    memset(o, 0, sizeof *o);
}

/* Host copy of a device arena; the arena itself on the CPU. */
static const float *host_view(const mrcnn_backend *be, const mrcnn_arena *a, float **owned) {
    *owned = NULL;
    if (a->device == MRCNN_DEVICE_CPU) return (const float *)a->base;
    *owned = MRCNN_MALLOC(a->size, "host copy of the gradients");
    mrcnn_tensor t = mrcnn_arena_flat(a);
    be->mem.read(be, &t, *owned);
    return *owned;
}

double mrcnn_grad_norm(const mrcnn_backend *be, const mrcnn_arena *grads, float grad_scale) {
    float *owned;
    const float *g = host_view(be, grads, &owned);
    size_t n = grads->size / sizeof(float);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    free(owned);
    return sqrt(s) * fabs((double)grad_scale);
}

int mrcnn_first_nonfinite_param(const mrcnn_backend *be, const mrcnn_arena *grads) {
    float *owned;
    const float *g = host_view(be, grads, &owned);
    int found = -1;
    for (int i = 0; i < grads->n_entries && found < 0; i++) {
        const float *p = g + grads->entries[i].offset / sizeof(float);
        int64_t k = mrcnn_tensor_numel(&grads->entries[i].tensor);
        for (int64_t j = 0; j < k; j++)
            if (!isfinite(p[j])) {
                found = i;
                break;
            }
    }
    free(owned);
    return found;
}
