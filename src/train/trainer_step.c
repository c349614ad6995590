/* One training step (trainer.h): the only place where micro-batches, gradient
 * buckets, the loss all-reduce, the Inf/NaN check, the loss scaler, clipping and the
 * SGD update meet, so that `mrcnn train`, `mrcnn bench train` and the GPU model test
 * cannot drift apart. Every decision that must be the same on all ranks (skip the
 * update, stop) is made from all-reduced values.
 *
 * The step is device-resident. The loss terms, the Inf/NaN flag, the
 * gradient norm, the skip decision, the clip coefficient and the fp16 loss scaler live
 * in one small device vector (step_ctl.h) that the backend's step ops update; the host
 * reads it once per log period (mrcnn_trainer_take_losses), so no step waits for the
 * device. The step is split into a host stage, a device region and a host tail; the
 * region makes the same backend calls with the same arguments every step of a shape
 * key, so it can be captured once and replayed as a CUDA graph (the cache below). */
#include "mrcnn/trainer.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/step_ctl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mrcnn_tensor ctl_view(const mrcnn_trainer *t, int offset, int64_t n) {
    return mrcnn_tensor_view((float *)t->ctl.data + offset, MRCNN_DTYPE_F32, t->ctl.device, 1, &n);
}

static void graphs_init(mrcnn_trainer *t);
static void graphs_drop(mrcnn_trainer *t);

void mrcnn_trainer_init(mrcnn_trainer *t, const mrcnn_config *cfg, mrcnn_dist *dist, mrcnn_backend *be,
                        mrcnn_trainable *m, size_t bucket_bytes) {
    MRCNN_CHECK(m->n_losses >= 1 && m->n_losses <= MRCNN_MAX_LOSS_TERMS, "trainer: %d loss terms (1..%d)",
                m->n_losses, MRCNN_MAX_LOSS_TERMS);
    MRCNN_CHECK(m->stage && m->run, "trainer: the trainable lacks stage or run (trainer.h)");
    MRCNN_CHECK(be->step.axpy && be->step.nonfinite_or && be->step.sum_squares && be->step.decide &&
                    be->step.sgd_update,
                "trainer: backend '%s' lacks the step ops (backend.h, be->step)", be->name);
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
    float *q = NULL;
    if (m->precond) {
        q = MRCNN_MALLOC(m->params->size ? m->params->size : 1, "SGD preconditioner (host)");
        m->precond(m->ctx, q);
    }
    mrcnn_sgd_init(&t->sgd, be, m->params, m->trainable, q, cfg);
    free(q);
    if (dist->rank == 0) mrcnn_sgd_log(&t->sgd, m->params, m->trainable, cfg);
    mrcnn_buckets_init(&t->bk, dist, be, m->grads, bucket_bytes ? bucket_bytes : MRCNN_BUCKET_BYTES_DEFAULT);
    t->gflat = mrcnn_arena_flat(m->grads);
    int64_t n = MRCNN_CTL_SIZE(m->n_losses);
    t->ctl_mem = be->mem.alloc(be, (size_t)n * sizeof(float), "step control vector");
    t->ctl = mrcnn_tensor_view(t->ctl_mem, MRCNN_DTYPE_F32, be->device, 1, &n);
    t->ctl_host = MRCNN_CALLOC((size_t)n, sizeof(float), "step control vector (host copy)");
    graphs_init(t);
}

void mrcnn_trainer_free(mrcnn_trainer *t) {
    graphs_drop(t);
    if (t->ctl_mem) t->be->mem.free(t->be, t->ctl_mem);
    free(t->ctl_host);
    mrcnn_buckets_free(&t->bk);
    mrcnn_sgd_free(&t->sgd);
    memset(t, 0, sizeof *t);
}

/* ---- the graph cache (trainer.h) ---- */

int mrcnn_graph_allowed(int config_on, int accum_steps, int world_size, int nccl, const char **why) {
    const char *w = NULL;
    if (!config_on) w = "SOLVER.CUDA_GRAPH is off for this backend";
    else if (accum_steps != 1) w = "SOLVER.ACCUM_STEPS > 1 (the later micro-batches upload inside the step)";
    else if (world_size > 1 && !nccl) w = "several ranks without NCCL (the all-reduces go through the host)";
    if (why) *why = w;
    return w == NULL;
}

mrcnn_graph_plan mrcnn_graph_cache_plan(mrcnn_graph_cache *c, int allowed, uint64_t key, uint64_t epoch) {
    mrcnn_graph_plan p;
    memset(&p, 0, sizeof p);
    p.action = MRCNN_GRAPH_DIRECT;
    p.slot = -1;
    if (!allowed || key == 0) return p;
    if (epoch != c->epoch) { // a reallocated buffer: every graph may point at freed memory
        for (int i = 0; i < MRCNN_GRAPH_CACHE_SIZE; i++)
            if (c->e[i].graph) {
                p.destroy[p.n_destroy++] = c->e[i].graph;
                c->e[i].graph = NULL; // the key stays warmed up: buffers only grow
            }
        c->epoch = epoch;
        p.flushed = 1;
    }
    c->clock++;
    int slot = -1;
    for (int i = 0; i < MRCNN_GRAPH_CACHE_SIZE && slot < 0; i++)
        if (c->e[i].key == key) slot = i;
    if (slot >= 0) {
        c->e[slot].used = c->clock;
        p.action = c->e[slot].graph ? MRCNN_GRAPH_REPLAY : MRCNN_GRAPH_CAPTURE;
        p.slot = slot;
        return p;
    }
    /* A new key: a free entry, else the least recently used one. */
    for (int i = 0; i < MRCNN_GRAPH_CACHE_SIZE && slot < 0; i++)
        if (c->e[i].key == 0) slot = i;
    if (slot < 0) {
        slot = 0;
        for (int i = 1; i < MRCNN_GRAPH_CACHE_SIZE; i++)
            if (c->e[i].used < c->e[slot].used) slot = i;
        if (c->e[slot].graph) p.destroy[p.n_destroy++] = c->e[slot].graph;
    }
    c->e[slot] = (mrcnn_graph_entry){.key = key, .graph = NULL, .used = c->clock};
    p.action = MRCNN_GRAPH_WARMUP;
    p.slot = slot;
    return p;
}

static void graphs_init(mrcnn_trainer *t) {
    const int on = mrcnn_config_cuda_graph(t->cfg, t->be->name);
    const char *why = NULL;
    t->graphs = mrcnn_graph_allowed(on, t->cfg->solver_accum_steps, t->dist->world_size, t->bk.use_nccl, &why);
    const mrcnn_backend *be = t->be;
    if (t->graphs &&
        !(be->stream.graph_begin && be->stream.graph_end && be->stream.graph_launch && be->stream.graph_destroy)) {
        t->graphs = 0;
        why = "the backend has no graphs";
    }
    /* NCCL inside a captured region: mrcnn_buckets_wait must not poll on the host; the
     * log-period read drains the all-reduces instead (mrcnn_trainer_sync_state). */
    if (t->graphs && t->bk.use_nccl) t->bk.host_wait = 0;
    t->gc.epoch = be->stream.graph_epoch ? be->stream.graph_epoch(be) : 0; // model building grew buffers: no flush
    if (t->dist->rank != 0) return;
    if (t->graphs)
        mrcnn_info("CUDA graphs: on (SOLVER.CUDA_GRAPH=%s, backend %s): a shape's first step runs directly, its "
                   "second is captured, later ones replay it", t->cfg->solver_cuda_graph, t->be->name);
    else
        mrcnn_info("CUDA graphs: off (SOLVER.CUDA_GRAPH=%s, backend %s): %s", t->cfg->solver_cuda_graph, t->be->name,
                   why);
}

/* Every graph destroyed and the cache emptied. */
static void graphs_drop(mrcnn_trainer *t) {
    for (int i = 0; i < MRCNN_GRAPH_CACHE_SIZE; i++)
        if (t->gc.e[i].graph) t->be->stream.graph_destroy(t->be, t->gc.e[i].graph);
    memset(&t->gc, 0, sizeof t->gc);
}

/* Graphs off for the rest of the run (the step's results do not change). */
static void graphs_off(mrcnn_trainer *t, const char *why) {
    graphs_drop(t);
    t->graphs = 0;
    if (t->dist->rank == 0) mrcnn_info("CUDA graphs: off from step %lld: %s; steps run directly", (long long)t->st.step, why);
}

/* A graph call failed (where: at the capture's start, inside the region, at its end,
 * at the launch; why: the first failure the guard recorded): one warning on the rank
 * it happened on, and graphs off for the rest of the run. The caller reruns the step
 * directly: a capture records and a launch that fails starts nothing, so no part of
 * the region has touched the weights, the momentum or the control vector. Destroying
 * the cached graphs is guarded too: a failure there leaks a graph, not the run. */
static void graphs_failed(mrcnn_trainer *t, const char *where, const char *why) {
    mrcnn_warn("CUDA graph %s failed at step %lld: %s; graphs off for the rest of the run, the step reruns directly "
               "(the same results as SOLVER.CUDA_GRAPH=off)",
               where, (long long)t->st.step, why && *why ? why : "no reason given");
    mrcnn_graph_guard_begin();
    graphs_drop(t);
    mrcnn_graph_guard_end(NULL, 0);
    t->graphs = 0;
}

/* st (a resume may have set it) to the device, once, before the first step, with the
 * step's lr and index: an upload. */
static void upload_state(mrcnn_trainer *t, float lr) {
    const int nl = t->model->n_losses;
    float *c = t->ctl_host;
    memset(c, 0, sizeof(float) * MRCNN_CTL_SIZE(nl));
    c[MRCNN_CTL_SCALE] = t->st.scaler.scale;
    c[MRCNN_CTL_CLEAN] = (float)t->st.scaler.clean_steps;
    c[MRCNN_CTL_SKIPPED] = (float)t->st.scaler.skipped;
    c[MRCNN_CTL_NONFINITE] = (float)t->st.nonfinite;
    c[MRCNN_CTL_LR] = lr;
    c[MRCNN_CTL_STEP_INDEX] = (float)t->st.step;
    t->be->mem.write(t->be, &t->ctl, c);
    t->ctl_uploaded = 1;
}

static void read_ctl(mrcnn_trainer *t) {
    if (!t->ctl_uploaded) return; // no step yet: st is the truth
    t->be->mem.read(t->be, &t->ctl, t->ctl_host);
    const float *c = t->ctl_host;
    t->st.scaler.scale = c[MRCNN_CTL_SCALE];
    t->st.scaler.clean_steps = (int)c[MRCNN_CTL_CLEAN];
    t->st.scaler.skipped = (int64_t)c[MRCNN_CTL_SKIPPED];
    t->st.nonfinite = (int64_t)c[MRCNN_CTL_NONFINITE];
}

void mrcnn_trainer_sync_state(mrcnn_trainer *t) {
    /* NCCL may still be summing into the vector (host_wait = 0): finish first. */
    mrcnn_buckets_drain(&t->bk);
    read_ctl(t);
}

/* The host half before the region: what changes every step goes to the control vector
 * (one write: the lr and the step index, the whole vector on the first step), and the
 * model stages its first micro-batch. Returns the data wait; *key: the shape key (0:
 * not replayable). */
static double step_stage(mrcnn_trainer *t, float lr, uint64_t *key) {
    mrcnn_backend *be = t->be;
    mrcnn_trainable *m = t->model;
    *key = 0;
    MRCNN_CHECK(t->st.step < (1 << 24), "trainer: step %lld: the step index is fp32 on the device, exact below 2^24",
                (long long)t->st.step);
    if (!t->ctl_uploaded) upload_state(t, lr);
    else {
        const float v[2] = {lr, (float)t->st.step};
        mrcnn_tensor lv = ctl_view(t, MRCNN_CTL_LR, 2); // LR and STEP_INDEX are adjacent
        be->mem.write(be, &lv, v);
    }
    return m->stage(m->ctx, t->st.step, 0, key);
}

/* The device region: the same backend calls with the same arguments every step of a
 * shape key (no host value that changes per step), so a capture replays it. Returns the
 * data wait of the micro-batches it staged itself (ACCUM_STEPS > 1). */
static double step_region(mrcnn_trainer *t) {
    const mrcnn_config *cfg = t->cfg;
    mrcnn_trainable *m = t->model;
    mrcnn_backend *be = t->be;
    const int W = t->dist->world_size, accum = cfg->solver_accum_steps, nl = m->n_losses;
    be->mem.zero(be, &t->gflat);
    mrcnn_buckets_reset(&t->bk);
    /* Frozen parameters never get a gradient: their buckets need not wait for them. */
    if (m->trainable)
        for (int i = 0; i < m->params->n_entries; i++)
            if (!m->trainable[i]) mrcnn_buckets_mark_ready(&t->bk, i);
    /* fp16 loss scaling: the scale stays on the device (the step decided it), and the
     * model multiplies its gradients by it there. */
    const float fwd_mult = m->scales_loss ? 1.0f / (float)accum : 1.0f;
    mrcnn_tensor scale_v = ctl_view(t, MRCNN_CTL_SCALE, 1);
    const mrcnn_tensor *fwd_scale = t->st.scaler.enabled && m->scales_loss ? &scale_v : NULL;
    /* This step's terms and its flag start at 0; run adds into them. */
    mrcnn_tensor step_v = ctl_view(t, MRCNN_CTL_STEP, nl + 1), terms = ctl_view(t, MRCNN_CTL_STEP, nl),
                 flag = ctl_view(t, MRCNN_CTL_FLAG(nl), 1);
    be->mem.zero(be, &step_v);
    double data_s = 0;
    for (int k = 0; k < accum; k++) {
        mrcnn_buckets *bk = k == accum - 1 ? &t->bk : NULL;
        if (k > 0) { // never captured (graphs need ACCUM_STEPS 1)
            uint64_t key_k;
            data_s += m->stage(m->ctx, t->st.step, k, &key_k);
        }
        m->run(m->ctx, k, fwd_mult, fwd_scale, &terms, 1.0f / (float)accum, bk);
    }
    mrcnn_buckets_wait(&t->bk);
    /* Averaged gradients are the same on every rank; the losses are not: the flag of
     * each rank is summed with the terms, so every rank decides alike. */
    be->step.nonfinite_or(be, &t->gflat, &flag);
    be->step.nonfinite_or(be, &terms, &flag);
    mrcnn_dist_allreduce_tensor(t->dist, be, &step_v, 0, "loss and Inf/NaN flag all-reduce");
    if (cfg->solver_clip_enabled) {
        mrcnn_tensor sumsq = ctl_view(t, MRCNN_CTL_SUMSQ, 1);
        be->step.sum_squares(be, &t->gflat, t->sgd.preconditioned ? &t->sgd.precond : NULL, &sumsq);
    }
    mrcnn_step_desc d = {.n_losses = nl,
                         .scaler_enabled = t->st.scaler.enabled,
                         .scales_loss = m->scales_loss,
                         .growth_interval = t->st.scaler.growth_interval,
                         .clip_enabled = cfg->solver_clip_enabled,
                         .clip_value = cfg->solver_clip_value,
                         .inv_world = 1.0f / (float)W,
                         .inv_accum = 1.0f / (float)accum};
    be->step.decide(be, &d, &t->ctl);
    mrcnn_tensor p = mrcnn_arena_flat(m->params), g = t->gflat, v = mrcnn_arena_flat(&t->sgd.momentum);
    MRCNN_CHECK(m->params->size == m->grads->size && m->params->size == t->sgd.momentum.size,
                "SGD: params (%zu bytes), grads (%zu) and momentum (%zu) arenas differ in layout", m->params->size,
                m->grads->size, t->sgd.momentum.size);
    be->step.sgd_update(be, &p, &g, &v, &t->sgd.coef, t->sgd.momentum_coef, t->sgd.weight_decay, &t->ctl);
    return data_s;
}

/* The host half after the region: host values only (no device read). */
static void step_tail(mrcnn_trainer *t, double data_s, float lr, mrcnn_step_result *r) {
    const int W = t->dist->world_size;
    mrcnn_signals_test_hold(t->st.step + 1);
    double red[2] = {mrcnn_signals_pending() ? 1 : 0, data_s};
    mrcnn_dist_allreduce_sum_f64(t->dist, red, 2, "preemption flag and data wait all-reduce");
    r->stop_signal = red[0] > 0;
    r->data_s = red[1] / W;
    t->st.step++;
    t->st.lr = lr;
    r->lr = lr;
    r->loss_scale = t->model->scales_loss ? t->st.scaler.scale : 1.0f;
    t->win_data += r->data_s;
    t->win_steps++;
}

/* Launches g under a graph guard: 1 when it was queued, else 0 after graphs_failed. */
static int graph_launch_guarded(mrcnn_trainer *t, void *g) {
    char why[1024];
    mrcnn_graph_guard_begin();
    t->be->stream.graph_launch(t->be, g);
    if (!mrcnn_graph_guard_end(why, sizeof why)) return 1;
    graphs_failed(t, "launch", why);
    return 0;
}

/* The region captured (CAPTURE) or replayed (REPLAY) as a graph. Returns 1 when the
 * graph ran it, 0 when the caller must run it directly: the backend cannot capture
 * (CPU; graphs off, an info line) or a graph call failed (graphs off, one warning).
 * Every graph call runs inside a graph guard, so a library call that fails there
 * (refused by the capture, or failing) is reported here instead of ending the run. */
static int step_graph(mrcnn_trainer *t, const mrcnn_graph_plan *p) {
    mrcnn_backend *be = t->be;
    if (p->action == MRCNN_GRAPH_REPLAY) {
        if (!graph_launch_guarded(t, t->gc.e[p->slot].graph)) return 0;
        t->graph_stats.replay++;
        return 1;
    }
    char why[1024];
    mrcnn_graph_guard_begin();
    if (!be->stream.graph_begin(be)) {
        if (mrcnn_graph_guard_end(why, sizeof why)) graphs_failed(t, "capture start", why);
        else graphs_off(t, "the backend does not capture graphs"); // CPU: nothing to capture
        return 0;
    }
    /* A check that is not a library call (an argument, host memory) still stops the run:
     * say that a capture was going on and the way out. */
    char what[200];
    snprintf(what, sizeof what, "capturing training step %lld into a CUDA graph; SOLVER.CUDA_GRAPH=off runs "
             "every step directly", (long long)t->st.step);
    mrcnn_fail_context(what);
    step_region(t); // recorded, not run
    void *g = be->stream.graph_end(be);
    mrcnn_fail_context(NULL);
    /* A call that failed inside the region may have left a capture that still ends and
     * instantiates: its graph would lack that call's work, so it is dropped too. */
    if (mrcnn_graph_guard_end(why, sizeof why) || !g) {
        if (g) {
            mrcnn_graph_guard_begin();
            be->stream.graph_destroy(be, g);
            mrcnn_graph_guard_end(NULL, 0);
        }
        graphs_failed(t, "capture", why);
        return 0;
    }
    t->gc.e[p->slot].graph = g;
    if (!graph_launch_guarded(t, g)) return 0; // graphs_failed destroyed g with the cache
    t->graph_stats.capture++;
    return 1;
}

void mrcnn_trainer_step(mrcnn_trainer *t, mrcnn_step_result *r) {
    mrcnn_backend *be = t->be;
    memset(r, 0, sizeof *r);
    r->step = t->st.step;
    const float lr = mrcnn_lr_at(&t->sched, t->st.step);
    uint64_t key;
    double data_s = step_stage(t, lr, &key);
    const uint64_t epoch = be->stream.graph_epoch ? be->stream.graph_epoch(be) : 0;
    mrcnn_graph_plan p = mrcnn_graph_cache_plan(&t->gc, t->graphs, key, epoch);
    for (int i = 0; i < p.n_destroy; i++) be->stream.graph_destroy(be, p.destroy[i]);
    t->graph_stats.flush += p.flushed;
    if (t->on_region) t->on_region(t->on_region_ctx, 1);
    switch (p.action) {
    case MRCNN_GRAPH_DIRECT: t->graph_stats.direct++; data_s += step_region(t); break;
    case MRCNN_GRAPH_WARMUP: t->graph_stats.warmup++; data_s += step_region(t); break;
    case MRCNN_GRAPH_CAPTURE:
    case MRCNN_GRAPH_REPLAY:
        if (step_graph(t, &p)) break;
        t->graph_stats.direct++;
        data_s += step_region(t);
        break;
    }
    if (t->on_region) t->on_region(t->on_region_ctx, 0);
    step_tail(t, data_s, lr, r);
}

void mrcnn_trainer_step_direct(mrcnn_trainer *t, mrcnn_step_result *r) {
    const int graphs = t->graphs;
    t->graphs = 0; // the plan is DIRECT and leaves the cache as it is
    mrcnn_trainer_step(t, r);
    t->graphs = graphs;
}

/* What held Inf/NaN at the window's newest skipped step: a loss term (the window
 * keeps that step's terms), else the gradient, named by a host copy of the gradients
 * (rare, and worth it) when that step is the newest one, whose gradients they still
 * are; else only that the gradients did. */
static void name_culprit(mrcnn_trainer *t, mrcnn_loss_window *w, const float *bad_terms, int64_t newest_step) {
    const mrcnn_trainable *m = t->model;
    for (int i = 0; i < m->n_losses; i++)
        if (!isfinite(bad_terms[i])) {
            snprintf(w->what, sizeof w->what, "loss term '%s' is %g", m->loss_names[i], (double)bad_terms[i]);
            return;
        }
    if (w->last_skipped != newest_step) {
        snprintf(w->what, sizeof w->what, "the gradients held Inf/NaN (losses finite)");
        return;
    }
    int p = mrcnn_first_nonfinite_param(t->be, m->grads);
    snprintf(w->what, sizeof w->what, "the gradient of '%s' holds Inf/NaN (losses finite)",
             p >= 0 ? m->grads->entries[p].name : "?");
}

void mrcnn_trainer_take_losses(mrcnn_trainer *t, mrcnn_loss_window *w) {
    const int nl = t->model->n_losses;
    memset(w, 0, sizeof *w);
    mrcnn_trainer_sync_state(t);
    const float *c = t->ctl_host;
    w->steps = t->win_steps;
    w->n_losses = nl;
    w->last_skipped = -1;
    w->data_s = t->win_data;
    if (!t->ctl_uploaded || t->win_steps == 0) {
        for (int i = 0; i < nl; i++) w->mean[i] = w->last[i] = NAN;
        w->mean_total = w->last_total = NAN;
        t->win_data = 0;
        return;
    }
    w->finite_steps = (int64_t)c[MRCNN_CTL_WIN_FINITE(nl)];
    w->counted = (int64_t)c[MRCNN_CTL_WIN_COUNTED(nl)];
    w->adapted = (int64_t)c[MRCNN_CTL_WIN_ADAPT(nl)];
    if (c[MRCNN_CTL_WIN_BAD_STEP(nl)] > 0) w->last_skipped = (int64_t)c[MRCNN_CTL_WIN_BAD_STEP(nl)] - 1;
    for (int i = 0; i < nl; i++) {
        w->mean[i] = w->finite_steps ? (double)c[MRCNN_CTL_WIN_SUM(nl) + i] / (double)w->finite_steps : NAN;
        w->mean_total += w->mean[i];
        w->last[i] = c[MRCNN_CTL_WIN_LAST(nl) + i];
        w->last_total += w->last[i];
    }
    const int64_t skipped = w->counted + w->adapted;
    if (skipped > 0) {
        const int64_t newest = t->st.step - 1;
        name_culprit(t, w, c + MRCNN_CTL_WIN_BAD(nl), newest);
        char steps[96] = "";
        if (skipped > 1)
            snprintf(steps, sizeof steps, "%lld of the %lld steps to %lld skipped; newest ", (long long)skipped,
                     (long long)w->steps, (long long)newest);
        const float bad_scale = c[MRCNN_CTL_WIN_BAD_SCALE(nl)];
        /* fp16: the scale adapting (info); counted ones are warnings toward the limit. */
        if (w->adapted > 0 && w->counted == 0)
            mrcnn_info("%sstep %lld: %s; step skipped, loss scale -> %g", steps, (long long)w->last_skipped, w->what,
                       bad_scale);
        else
            mrcnn_warn("%sstep %lld: %s; step skipped (%lld of SOLVER.MAX_NONFINITE %d%s)", steps,
                       (long long)w->last_skipped, w->what, (long long)t->st.nonfinite, t->cfg->solver_max_nonfinite,
                       t->st.scaler.enabled ? "; the fp16 loss scale is down to 1" : "");
    }
    /* A new window: its slots to zero, on the device. */
    mrcnn_tensor win = ctl_view(t, MRCNN_CTL_WIN(nl), MRCNN_CTL_WIN_SIZE(nl));
    t->be->mem.zero(t->be, &win);
    t->win_data = 0;
    t->win_steps = 0;
}
