/* SGD with momentum and weight decay over the flat arenas: one fused backend call
 * (sgd_update) per step, fp32 master weights and momentum.
 *
 * A conv weight with a frozen BN folded into it (W' = s W per output channel, s fixed)
 * trains as torchvision trains W: with g' = dL/dW', torchvision's gradient is
 * g_W = s g', and with clip factor c
 *   v_W = mu v_W + c s g' + wd W;  W -= lr v_W.
 * Times s (v' = s v_W):
 *   v' = mu v' + c s^2 g' + wd W';  W' -= lr v'.
 * So the update takes the gradient times q = s^2 per element (the preconditioner, 1 for
 * everything not folded), the clipping norm is over s g' (sum of q g'^2), and momentum
 * and decay need nothing else. */
#include "mrcnn/train.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"

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
    // the backend frees it, in mrcnn_sgd_free
    mrcnn_arena_commit(a, be->mem.alloc(be, a->size ? a->size : 1, a->name), NULL);
    mrcnn_tensor all = mrcnn_arena_flat(a);
    be->mem.zero(be, &all);
}

void mrcnn_sgd_init(mrcnn_sgd *o, const mrcnn_backend *be, const mrcnn_arena *params,
                    const bool *trainable, const float *precond, const mrcnn_config *cfg) {
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
    float *host = MRCNN_CALLOC((size_t)(2 * n + 1), sizeof(float), "SGD coefficients (host)");
    for (int i = 0; i < params->n_entries; i++) {
        float m = (trainable && !trainable[i]) ? 0.0f : mrcnn_sgd_decay_multiplier(params->entries[i].name, cfg);
        float *p = host + params->entries[i].offset / sizeof(float);
        int64_t k = mrcnn_tensor_numel(&params->entries[i].tensor);
        for (int64_t j = 0; j < k; j++) p[j] = m;
    }
    for (int64_t j = 0; j < n; j++) {
        float q = precond ? precond[j] : 1.0f;
        MRCNN_CHECK(isfinite(q) && q > 0.0f, "SGD: preconditioner %g at element %lld (must be finite and > 0)",
                    (double)q, (long long)j);
        host[n + j] = q;
        o->preconditioned += q != 1.0f;
    }
    o->coef_mem = be->mem.alloc(be, (size_t)(2 * n + 1) * sizeof(float), "SGD coefficients");
    /* Without a preconditioner the update reads the decay row alone (n). */
    o->coef = o->preconditioned ? mrcnn_tensor_view(o->coef_mem, MRCNN_DTYPE_F32, be->device, 2, (int64_t[]){2, n})
                                : mrcnn_tensor_view(o->coef_mem, MRCNN_DTYPE_F32, be->device, 1, &n);
    o->precond = mrcnn_tensor_view((float *)o->coef_mem + n, MRCNN_DTYPE_F32, be->device, 1, &n);
    mrcnn_tensor both = mrcnn_tensor_view(o->coef_mem, MRCNN_DTYPE_F32, be->device, 2, (int64_t[]){2, n});
    be->mem.write(be, &both, host);
    free(host);
}

/* The group a parameter decays with (mrcnn_sgd_decay_multiplier's rule). */
static int group_of(const char *name) {
    size_t n = strlen(name);
    if (strstr(name, "norm") || strstr(name, "bn") || strstr(name, ".gn")) return 2;
    return n >= 5 && !strcmp(name + n - 5, ".bias") ? 1 : 0;
}

void mrcnn_sgd_log(const mrcnn_sgd *o, const mrcnn_arena *params, const bool *trainable, const mrcnn_config *cfg) {
    static const char *const names[3] = {"weights", "biases", "norms"};
    const float decay[3] = {cfg->solver_weight_decay, cfg->solver_weight_decay_bias, cfg->solver_weight_decay_norm};
    int64_t numel[3] = {0}, frozen = 0;
    int tensors[3] = {0}, n_frozen = 0;
    for (int i = 0; i < params->n_entries; i++) {
        int64_t k = mrcnn_tensor_numel(&params->entries[i].tensor);
        if (trainable && !trainable[i]) {
            frozen += k;
            n_frozen++;
            continue;
        }
        int gi = group_of(params->entries[i].name);
        numel[gi] += k;
        tensors[gi]++;
    }
    mrcnn_info("optimizer: SGD, momentum %g; %lld trainable parameters in %d tensors (%lld frozen in %d)",
               (double)o->momentum_coef, (long long)(numel[0] + numel[1] + numel[2]),
               tensors[0] + tensors[1] + tensors[2], (long long)frozen, n_frozen);
    for (int gi = 0; gi < 3; gi++)
        mrcnn_info("optimizer: group %-7s %9lld parameters in %3d tensors: lr %g (SOLVER.BASE_LR, scheduled), "
                   "weight_decay %g", names[gi], (long long)numel[gi], tensors[gi], (double)cfg->solver_base_lr,
                   (double)(o->weight_decay == 0.0f ? 0.0f : decay[gi]));
    if (o->preconditioned)
        mrcnn_info("optimizer: %lld weights of convs with a frozen BN folded in train as torchvision's unfolded "
                   "ones (gradient x s^2 per channel, clipping norm over s x gradient)", (long long)o->preconditioned);
}

void mrcnn_sgd_free(mrcnn_sgd *o) {
    if (o->be) {
        if (o->momentum.base) o->be->mem.free(o->be, o->momentum.base);
        if (o->coef_mem) o->be->mem.free(o->be, o->coef_mem);
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
