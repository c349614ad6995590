/* One training step (trainer.h): the only place where micro-batches, gradient
 * buckets, the loss all-reduce, the Inf/NaN check, the loss scaler, clipping and the
 * SGD update meet, so that `mrcnn train`, `mrcnn bench train` and the GPU model test
 * cannot drift apart. Every decision that must be the same on all ranks (skip the
 * update, stop) is made from all-reduced values. */
#include "mrcnn/trainer.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mrcnn_trainer_init(mrcnn_trainer *t, const mrcnn_config *cfg, mrcnn_dist *dist, mrcnn_backend *be,
                        mrcnn_trainable *m, size_t bucket_bytes) {
    MRCNN_CHECK(m->n_losses >= 1 && m->n_losses <= MRCNN_MAX_LOSS_TERMS, "trainer: %d loss terms (1..%d)",
                m->n_losses, MRCNN_MAX_LOSS_TERMS);
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    t->dist = dist;
    t->be = be;
    t->model = m;
    const int W = dist->world_size;
    int prec = mrcnn_dtype_parse(cfg->solver_precision);
    MRCNN_CHECK(prec == MRCNN_DTYPE_F32 || prec == MRCNN_DTYPE_F16 || prec == MRCNN_DTYPE_BF16 ||
                    !strcmp(cfg->solver_precision, "tf32"),
                "SOLVER.PRECISION '%s' is unknown (fp32, tf32, fp16, bf16)", cfg->solver_precision);
    mrcnn_loss_scaler_init(&t->st.scaler, prec == MRCNN_DTYPE_F16, cfg->solver_loss_scale_init,
                           cfg->solver_loss_scale_growth_interval);
    t->st.world_size = W;
    t->st.global_batch = cfg->solver_ims_per_batch;
    t->st.loader_batch = mrcnn_per_rank_batch(cfg, W) * W;
    t->st.seed = cfg->seed;
    t->st.base_lr = cfg->solver_base_lr;
    mrcnn_lr_schedule_init(&t->sched, cfg);
    mrcnn_sgd_init(&t->sgd, be, m->params, m->trainable, cfg);
    mrcnn_buckets_init(&t->bk, dist, be, m->grads, bucket_bytes ? bucket_bytes : MRCNN_BUCKET_BYTES_DEFAULT);
    t->gflat = mrcnn_arena_flat(m->grads);
    t->red = MRCNN_CALLOC((size_t)m->n_losses + 3, sizeof(double), "loss terms and flags");
    t->micro = MRCNN_CALLOC((size_t)m->n_losses, sizeof(double), "micro-batch loss terms");
}

void mrcnn_trainer_free(mrcnn_trainer *t) {
    free(t->red);
    free(t->micro);
    mrcnn_buckets_free(&t->bk);
    mrcnn_sgd_free(&t->sgd);
    memset(t, 0, sizeof *t);
}

static int any_nonfinite(const double *v, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(v[i])) return 1;
    return 0;
}

/* A skipped step: names the culprit (a host copy of the gradients only when the
 * losses are finite: rare, and worth the time), and counts it unless it was the fp16
 * scale adapting. */
static void skipped_step(mrcnn_trainer *t, mrcnn_step_result *r, float scale) {
    const mrcnn_trainable *m = t->model;
    const double *losses = t->red;
    int term = -1;
    for (int i = 0; i < m->n_losses && term < 0; i++)
        if (!isfinite(losses[i])) term = i;
    if (term >= 0)
        snprintf(r->what, sizeof r->what, "loss term '%s' is %g", m->loss_names[term], losses[term]);
    else {
        int p = mrcnn_first_nonfinite_param(t->be, m->grads);
        snprintf(r->what, sizeof r->what, "the gradient of '%s' holds Inf/NaN (losses finite)",
                 p >= 0 ? m->grads->entries[p].name : "?");
    }
    /* fp16: an overflow of the scaled gradients is how the loss scale adapts, not
     * an error; once the scale is down to 1 a non-finite step counts like one in
     * fp32 (the model itself produces Inf/NaN), so no run skips forever. */
    if (t->st.scaler.enabled && scale > 1.0f) {
        mrcnn_info("step %lld: %s; step skipped, loss scale -> %g", (long long)r->step, r->what, t->st.scaler.scale);
        return;
    }
    t->st.nonfinite++;
    r->counted = 1;
    mrcnn_warn("step %lld: %s; step skipped (%lld of SOLVER.MAX_NONFINITE %d%s)", (long long)r->step, r->what,
               (long long)t->st.nonfinite, t->cfg->solver_max_nonfinite,
               t->st.scaler.enabled ? "; the fp16 loss scale is down to 1" : "");
}

void mrcnn_trainer_step(mrcnn_trainer *t, mrcnn_step_result *r) {
    const mrcnn_config *cfg = t->cfg;
    mrcnn_trainable *m = t->model;
    mrcnn_backend *be = t->be;
    const int W = t->dist->world_size, accum = cfg->solver_accum_steps, nl = m->n_losses;
    memset(r, 0, sizeof *r);
    r->step = t->st.step;
    const float lr = mrcnn_lr_at(&t->sched, t->st.step);
    be->zero(be, &t->gflat);
    mrcnn_buckets_reset(&t->bk);
    /* Frozen parameters never get a gradient: their buckets need not wait for them. */
    if (m->trainable)
        for (int i = 0; i < m->params->n_entries; i++)
            if (!m->trainable[i]) mrcnn_buckets_mark_ready(&t->bk, i);
    double *red = t->red;
    memset(red, 0, sizeof(double) * ((size_t)nl + 3));
    double data_s = 0;
    const float scale = m->scales_loss ? t->st.scaler.scale : 1.0f;
    const float fwd_mult = m->scales_loss ? scale / (float)accum : 1.0f;
    for (int k = 0; k < accum; k++) {
        memset(t->micro, 0, sizeof(double) * nl);
        data_s += m->forward_backward(m->ctx, t->st.step, k, fwd_mult, t->micro, k == accum - 1 ? &t->bk : NULL);
        for (int i = 0; i < nl; i++) red[i] += t->micro[i] / accum;
    }
    mrcnn_buckets_wait(&t->bk);
    /* Averaged gradients are the same on every rank; the losses are not. */
    red[nl] = be->nonfinite(be, &t->gflat) || any_nonfinite(red, nl);
    red[nl + 1] = mrcnn_signals_pending() ? 1 : 0;
    red[nl + 2] = data_s;
    mrcnn_dist_allreduce_sum_f64(t->dist, red, nl + 3, "loss and flag all-reduce");
    for (int i = 0; i < nl; i++) red[i] /= W;
    r->nonfinite = red[nl] > 0;
    r->stop_signal = red[nl + 1] > 0;
    r->data_s = red[nl + 2] / W;
    float grad_scale = m->scales_loss ? 1.0f / scale : 1.0f / (float)accum;
    if (!r->nonfinite && cfg->solver_clip_enabled) {
        double norm = mrcnn_grad_norm(be, m->grads, grad_scale);
        if (norm > cfg->solver_clip_value) grad_scale *= (float)(cfg->solver_clip_value / (norm + 1e-6));
    }
    r->applied = mrcnn_loss_scaler_update(&t->st.scaler, r->nonfinite);
    if (r->applied) mrcnn_sgd_step(&t->sgd, m->params, m->grads, lr, grad_scale);
    t->st.step++;
    t->st.lr = lr;
    r->lr = lr;
    r->loss_scale = scale;
    if (r->nonfinite) skipped_step(t, r, scale);
    else {
        for (int i = 0; i < nl; i++) t->win_sum[i] += red[i];
        t->win_finite++;
    }
    for (int i = 0; i < nl; i++) t->win_last[i] = red[i];
    t->win_data += r->data_s;
    t->win_steps++;
}

void mrcnn_trainer_take_losses(mrcnn_trainer *t, mrcnn_loss_window *w) {
    const int nl = t->model->n_losses;
    memset(w, 0, sizeof *w);
    w->steps = t->win_steps;
    w->finite_steps = t->win_finite;
    w->n_losses = nl;
    w->last_total = t->win_steps ? 0 : NAN;
    for (int i = 0; i < nl; i++) {
        w->mean[i] = t->win_finite ? t->win_sum[i] / t->win_finite : NAN;
        w->mean_total += w->mean[i];
        w->last[i] = t->win_steps ? t->win_last[i] : NAN;
        w->last_total += w->last[i];
    }
    w->data_s = t->win_data;
    memset(t->win_sum, 0, sizeof t->win_sum);
    t->win_data = 0;
    t->win_steps = t->win_finite = 0;
}
