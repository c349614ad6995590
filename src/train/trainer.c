/* The training loop: accumulate micro-batches, all-reduce gradients in buckets,
 * check for Inf/NaN (loss scaler), clip, SGD; log, checkpoint, honour preemption
 * signals. Every decision that must be the same on all ranks (skip a step, stop,
 * checkpoint on a signal) is made from all-reduced values. */
#include "mrcnn/trainer.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const mrcnn_config *cfg;
    mrcnn_dist *dist;
    mrcnn_backend *be;
    mrcnn_trainable *m;
    mrcnn_sgd sgd;
    mrcnn_train_state st;
} trainer;

static void save(trainer *t) {
    if (t->m->get_cursor) t->m->get_cursor(t->m->ctx, &t->st.epoch, &t->st.loader_step);
    if (t->dist->rank == 0) {
        char path[1024];
        double t0 = mrcnn_time_now();
        mrcnn_checkpoint_save(t->cfg->output_dir, t->be, t->m->params, &t->sgd.momentum, &t->st, t->cfg,
                              t->cfg->solver_checkpoint_keep, path);
        mrcnn_info("checkpoint %s (step %lld, %.2f s)", path, (long long)t->st.step, mrcnn_time_now() - t0);
    }
    /* Nobody runs ahead of a checkpoint that a preemption might need. */
    mrcnn_dist_barrier(t->dist, "barrier after checkpoint");
}

/* --resume: rank 0 loads the newest checkpoint that loads in full, falling back to
 * older ones on any failure (unreadable, incomplete, a dataset missing or of another
 * shape, a checksum mismatch, non-finite weights), each named with its reason; when
 * there are checkpoints and none loads, the run stops (exit 1) with the list. The
 * weights, momentum and state then go to the other ranks by broadcast. */
static void resume(trainer *t) {
    char path[1024] = "";
    int found = 0;
    mrcnn_train_state st;
    memset(&st, 0, sizeof st);
    if (t->dist->rank == 0) {
        char **paths;
        int n = mrcnn_checkpoint_list(t->cfg->output_dir, &paths);
        char failures[1400] = "";
        size_t fl = 0;
        for (int i = 0; i < n && !found; i++) {
            char why[1024];
            if (mrcnn_checkpoint_try_load(paths[i], t->be, t->m->params, &t->sgd.momentum, &st, why, sizeof why)) {
                snprintf(path, sizeof path, "%s", paths[i]);
                found = 1;
                break;
            }
            mrcnn_warn("resume: checkpoint %s cannot be loaded: %s; %s", paths[i], why,
                       i + 1 < n ? "trying an older one" : "no older checkpoint");
            if (fl < sizeof failures)
                fl += (size_t)snprintf(failures + fl, sizeof failures - fl, "%s%s: %s", i ? "; " : "", paths[i], why);
        }
        if (n > 0 && !found)
            mrcnn_failf("checkpoint", "", __FILE__, __LINE__,
                        "--resume: none of the %d checkpoints in %s can be loaded: %s%s (move them away to start "
                        "from scratch)", n, t->cfg->output_dir, failures, fl >= sizeof failures ? "..." : "");
        mrcnn_checkpoint_list_free(paths, n);
    }
    mrcnn_dist_bcast_bytes(t->dist, &found, sizeof found, "resume: checkpoint choice");
    if (!found) {
        mrcnn_info("--resume: no checkpoint in %s; starting from scratch", t->cfg->output_dir);
        mrcnn_dist_broadcast_arena(t->dist, t->be, t->m->params);
        return;
    }
    mrcnn_dist_bcast_bytes(t->dist, path, sizeof path, "resume: checkpoint path");
    mrcnn_dist_bcast_bytes(t->dist, &st, sizeof st, "resume: checkpoint state");
    mrcnn_dist_broadcast_arena(t->dist, t->be, t->m->params);
    mrcnn_dist_broadcast_arena(t->dist, t->be, &t->sgd.momentum);
    int gb = t->cfg->solver_ims_per_batch;
    if (st.global_batch != gb)
        mrcnn_warn("resume: checkpoint %s was trained with global batch %d on %d ranks; continuing at step %lld "
                   "with global batch %d on %d ranks and BASE_LR %g (the data order shifts)",
                   path, st.global_batch, st.world_size, (long long)st.step, gb, t->dist->world_size,
                   t->cfg->solver_base_lr);
    else if (st.world_size != t->dist->world_size)
        mrcnn_info("resume: %d ranks -> %d ranks, same global batch %d (per-rank batch %d x ACCUM_STEPS %d)",
                   st.world_size, t->dist->world_size, gb, mrcnn_per_rank_batch(t->cfg, t->dist->world_size),
                   t->cfg->solver_accum_steps);
    if (st.seed != t->cfg->seed)
        mrcnn_warn("resume: checkpoint SEED %lld differs from the config's %lld; using the config's",
                   (long long)st.seed, (long long)t->cfg->seed);
    t->st.step = st.step;
    t->st.epoch = st.epoch;
    t->st.loader_step = st.loader_step;
    if (st.loader_batch != t->st.loader_batch && st.loader_batch > 0) {
        /* Another split of the global batch: same images consumed, other step unit. */
        int64_t images = st.loader_step * st.loader_batch;
        t->st.loader_step = images / t->st.loader_batch;
        if (images % t->st.loader_batch)
            mrcnn_warn("resume: %lld images consumed is not a multiple of the new loader batch %d; "
                       "the data order shifts by %lld images",
                       (long long)images, t->st.loader_batch, (long long)(images % t->st.loader_batch));
        mrcnn_info("resume: loader batch %d -> %d images per loader step: cursor step %lld -> %lld",
                   st.loader_batch, t->st.loader_batch, (long long)st.loader_step, (long long)t->st.loader_step);
    }
    t->st.nonfinite = st.nonfinite;
    if (t->st.scaler.enabled && st.scaler.enabled) {
        t->st.scaler.scale = st.scaler.scale;
        t->st.scaler.clean_steps = st.scaler.clean_steps;
        t->st.scaler.skipped = st.scaler.skipped;
    }
    if (t->m->set_cursor) t->m->set_cursor(t->m->ctx, st.epoch, t->st.loader_step);
    mrcnn_info("resumed from %s at step %lld (loss scale %g)", path, (long long)st.step, t->st.scaler.scale);
}

/* TEST.EVAL_PERIOD: between steps, never inside one. Returns the seconds it took. */
static double evaluate(const mrcnn_trainable *m, mrcnn_metrics *metrics, int64_t step) {
    double t0 = mrcnn_time_now();
    mrcnn_eval_metrics e = {.step = step};
    m->evaluate(m->ctx, &e);
    e.seconds = mrcnn_time_now() - t0;
    mrcnn_metrics_log_eval(metrics, &e);
    return e.seconds;
}

static int any_nonfinite(const double *v, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(v[i])) return 1;
    return 0;
}

int mrcnn_trainer_run(const mrcnn_config *cfg, const mrcnn_trainer_opts *opts, mrcnn_dist *dist, mrcnn_backend *be,
                      mrcnn_trainable *m) {
    MRCNN_CHECK(m->n_losses >= 1 && m->n_losses <= MRCNN_MAX_LOSS_TERMS, "trainer: %d loss terms (1..%d)",
                m->n_losses, MRCNN_MAX_LOSS_TERMS);
    trainer t = {.cfg = cfg, .dist = dist, .be = be, .m = m};
    const int W = dist->world_size, accum = cfg->solver_accum_steps;
    const int per_rank = mrcnn_per_rank_batch(cfg, W);
    int prec = mrcnn_dtype_parse(cfg->solver_precision);
    MRCNN_CHECK(prec == MRCNN_DTYPE_F32 || prec == MRCNN_DTYPE_F16 || prec == MRCNN_DTYPE_BF16 ||
                    !strcmp(cfg->solver_precision, "tf32"),
                "SOLVER.PRECISION '%s' is unknown (fp32, tf32, fp16, bf16)", cfg->solver_precision);
    mrcnn_loss_scaler_init(&t.st.scaler, prec == MRCNN_DTYPE_F16, cfg->solver_loss_scale_init,
                           cfg->solver_loss_scale_growth_interval);
    t.st.world_size = W;
    t.st.global_batch = cfg->solver_ims_per_batch;
    t.st.loader_batch = per_rank * W;
    t.st.seed = cfg->seed;
    t.st.base_lr = cfg->solver_base_lr;
    mrcnn_lr_schedule sched;
    mrcnn_lr_schedule_init(&sched, cfg);
    mrcnn_sgd_init(&t.sgd, be, m->params, m->trainable, cfg);
    mrcnn_signals_install();
    /* Before anything is trained or written: a directory that cannot be used, or that
     * another training uses, stops the run now (rank 0 fails, MPI_Abort ends the rest). */
    if (dist->rank == 0) mrcnn_output_dir_claim(cfg->output_dir);

    if (t.st.scaler.enabled && !m->scales_loss)
        mrcnn_warn("SOLVER.PRECISION fp16: this model applies no loss scale to its gradients; training runs "
                   "unscaled (Inf/NaN steps are still skipped)");
    if (opts->resume) resume(&t);
    else mrcnn_dist_broadcast_arena(dist, be, m->params);

    mrcnn_buckets bk;
    mrcnn_buckets_init(&bk, dist, be, m->grads, opts->bucket_bytes ? opts->bucket_bytes : MRCNN_BUCKET_BYTES_DEFAULT);
    mrcnn_metrics metrics;
    mrcnn_metrics_open(&metrics, cfg->output_dir, dist->rank == 0);
    int64_t max_steps = opts->max_steps > 0 ? opts->max_steps : cfg->solver_max_iter;
    if (max_steps > cfg->solver_max_iter) max_steps = cfg->solver_max_iter;
    mrcnn_info("world size %d, per-rank batch %d x %d accumulation, global batch %d, base LR %g (scaled for "
               "the global batch), precision %s, %d gradient buckets, steps %lld -> %lld",
               W, per_rank, accum, cfg->solver_ims_per_batch, cfg->solver_base_lr, cfg->solver_precision,
               bk.n_buckets, (long long)t.st.step, (long long)max_steps);

    mrcnn_tensor gflat = mrcnn_arena_flat(m->grads);
    const int nl = m->n_losses;
    double *losses = MRCNN_CALLOC((size_t)nl + 4, sizeof(double), "loss terms");
    double *micro = MRCNN_CALLOC((size_t)nl, sizeof(double), "micro-batch loss terms");
    double win_loss[MRCNN_MAX_LOSS_TERMS] = {0}, win_data = 0, win_t0 = mrcnn_time_now(), run_t0 = win_t0;
    int64_t win_steps = 0, run_steps = 0, run_applied = 0, last_saved = -1;
    int rc = 0;
    const int log_period = cfg->log_period > 0 ? cfg->log_period : 20;
    const int eval_period = m->evaluate ? cfg->test_eval_period : 0;
    int64_t last_eval = -1;

    while (t.st.step < max_steps) {
        const float lr = mrcnn_lr_at(&sched, t.st.step);
        be->zero(be, &gflat);
        mrcnn_buckets_reset(&bk);
        /* Frozen parameters never get a gradient: their buckets need not wait for them. */
        if (m->trainable)
            for (int i = 0; i < m->params->n_entries; i++)
                if (!m->trainable[i]) mrcnn_buckets_mark_ready(&bk, i);
        memset(losses, 0, sizeof(double) * ((size_t)nl + 4));
        double data_s = 0;
        const float scale = m->scales_loss ? t.st.scaler.scale : 1.0f;
        const float fwd_mult = m->scales_loss ? scale / (float)accum : 1.0f;
        for (int k = 0; k < accum; k++) {
            memset(micro, 0, sizeof(double) * nl);
            data_s += m->forward_backward(m->ctx, t.st.step, k, fwd_mult, micro,
                                          k == accum - 1 ? &bk : NULL);
            for (int i = 0; i < nl; i++) losses[i] += micro[i] / accum;
        }
        mrcnn_buckets_wait(&bk);
        if (run_steps == 0)
            mrcnn_info("gradient buckets: %d of %d all-reduces started during backward", bk.n_early, bk.n_buckets);
        /* Averaged gradients are the same on every rank; the losses are not. */
        losses[nl] = be->nonfinite(be, &gflat) || any_nonfinite(losses, nl);
        losses[nl + 1] = mrcnn_signals_pending() ? 1 : 0;
        losses[nl + 2] = data_s;
        mrcnn_dist_allreduce_sum_f64(dist, losses, nl + 3, "loss and flag all-reduce");
        for (int i = 0; i < nl; i++) losses[i] /= W;
        const int nonfinite = losses[nl] > 0, stop_signal = losses[nl + 1] > 0;
        float grad_scale = m->scales_loss ? 1.0f / scale : 1.0f / (float)accum;
        if (!nonfinite && cfg->solver_clip_enabled) {
            double norm = mrcnn_grad_norm(be, m->grads, grad_scale);
            if (norm > cfg->solver_clip_value) grad_scale *= (float)(cfg->solver_clip_value / (norm + 1e-6));
        }
        int apply = mrcnn_loss_scaler_update(&t.st.scaler, nonfinite);
        if (apply) mrcnn_sgd_step(&t.sgd, m->params, m->grads, lr, grad_scale);
        run_applied += apply;
        t.st.step++;
        t.st.lr = lr;
        run_steps++;
        if (nonfinite) {
            int term = -1;
            for (int i = 0; i < nl && term < 0; i++)
                if (!isfinite(losses[i])) term = i;
            char what[256];
            if (term >= 0)
                snprintf(what, sizeof what, "loss term '%s' is %g", m->loss_names[term], losses[term]);
            else {
                int p = mrcnn_first_nonfinite_param(be, m->grads);
                snprintf(what, sizeof what, "the gradient of '%s' holds Inf/NaN (losses finite)",
                         p >= 0 ? m->grads->entries[p].name : "?");
            }
            /* fp16: an overflow of the scaled gradients is how the loss scale adapts, not
             * an error; once the scale is down to 1 a non-finite step counts like one in
             * fp32 (the model itself produces Inf/NaN), so no run skips forever. */
            if (t.st.scaler.enabled && scale > 1.0f) {
                mrcnn_info("step %lld: %s; step skipped, loss scale -> %g", (long long)t.st.step - 1, what,
                           t.st.scaler.scale);
            } else {
                t.st.nonfinite++;
                mrcnn_warn("step %lld: %s; step skipped (%lld of SOLVER.MAX_NONFINITE %d%s)", (long long)t.st.step - 1,
                           what, (long long)t.st.nonfinite, cfg->solver_max_nonfinite,
                           t.st.scaler.enabled ? "; the fp16 loss scale is down to 1" : "");
                if (t.st.nonfinite >= cfg->solver_max_nonfinite) {
                    if (dist->rank == 0)
                        fprintf(stderr,
                                "mrcnn error: stopping at step %lld: %s; %lld non-finite steps reached "
                                "SOLVER.MAX_NONFINITE %d (lower SOLVER.BASE_LR, enable "
                                "SOLVER.CLIP_GRADIENTS, or check the data)\n",
                                (long long)t.st.step - 1, what, (long long)t.st.nonfinite, cfg->solver_max_nonfinite);
                    rc = MRCNN_EXIT_NONFINITE;
                    break;
                }
            }
        } else {
            for (int i = 0; i < nl; i++) win_loss[i] += losses[i];
            win_steps++;
        }
        win_data += losses[nl + 2] / W;
        if (t.st.step % log_period == 0 || t.st.step == max_steps) {
            double now = mrcnn_time_now(), dt = now - win_t0;
            int64_t steps_in = t.st.step % log_period == 0 ? log_period : t.st.step % log_period;
            if (steps_in > run_steps) steps_in = run_steps;
            mrcnn_step_metrics s = {0};
            s.step = t.st.step;
            s.max_step = max_steps;
            s.n_losses = nl;
            s.loss_names = m->loss_names;
            for (int i = 0; i < nl; i++) {
                s.losses[i] = win_steps ? win_loss[i] / win_steps : NAN;
                s.total_loss += s.losses[i];
            }
            s.lr = lr;
            s.img_per_s = dt > 0 ? (double)steps_in * cfg->solver_ims_per_batch / dt : 0;
            s.data_ms = steps_in ? 1e3 * win_data / steps_in : 0;
            s.step_ms = steps_in ? 1e3 * dt / steps_in : 0;
            s.mem_mb = mrcnn_rss_mb();
            if (be->device == MRCNN_DEVICE_GPU && dist->device >= 0) s.gpu_mem_mb = mrcnn_cuda_memory_used_mb(dist->device);
            s.eta_s = (now - run_t0) / run_steps * (double)(max_steps - t.st.step);
            s.loss_scale = t.st.scaler.scale;
            s.skipped = t.st.scaler.skipped + t.st.nonfinite;
            if (!opts->quiet || dist->rank != 0) mrcnn_metrics_log(&metrics, &s);
            else {
                mrcnn_log_set_level(MRCNN_LOG_WARN);
                mrcnn_metrics_log(&metrics, &s);
                mrcnn_log_set_level(MRCNN_LOG_INFO);
            }
            memset(win_loss, 0, sizeof win_loss);
            win_steps = 0;
            win_data = 0;
            win_t0 = now;
        }
        int period = cfg->solver_checkpoint_period;
        if ((period > 0 && t.st.step % period == 0) || stop_signal) {
            save(&t);
            last_saved = t.st.step;
        }
        if (eval_period > 0 && t.st.step % eval_period == 0 && t.st.step < max_steps && !stop_signal) {
            /* its time is no training time: the throughput and ETA skip it */
            double spent = evaluate(m, &metrics, t.st.step);
            last_eval = t.st.step;
            win_t0 += spent;
            run_t0 += spent;
        }
        if (stop_signal) {
            mrcnn_info("preemption signal: checkpoint at step %lld written; exiting with %d (requeue)",
                       (long long)t.st.step, MRCNN_EXIT_REQUEUE);
            rc = MRCNN_EXIT_REQUEUE;
            break;
        }
    }
    /* A run that skipped every one of its steps trained nothing: not a success, even
     * when it ended before SOLVER.MAX_NONFINITE (a short run, or fp16 halving its scale). */
    if (rc == 0 && run_steps > 0 && run_applied == 0) {
        if (dist->rank == 0)
            fprintf(stderr,
                    "mrcnn error: all %lld steps of this run (to step %lld) were skipped for Inf/NaN losses or "
                    "gradients: nothing was trained (check the weights and the data, lower SOLVER.BASE_LR)\n",
                    (long long)run_steps, (long long)t.st.step);
        rc = MRCNN_EXIT_NONFINITE;
    }
    if (rc == 0 && last_saved != t.st.step) save(&t);
    if (rc == 0 && eval_period > 0 && last_eval != t.st.step) evaluate(m, &metrics, t.st.step);
    if (rc == 0 && dist->rank == 0) {
        char png[1100];
        snprintf(png, sizeof png, "%s/loss.png", cfg->output_dir);
        if (mrcnn_plot_metrics_json(metrics.json_path, png) > 0) mrcnn_info("loss curve: %s", png);
    }
    mrcnn_metrics_close(&metrics);
    free(losses);
    free(micro);
    mrcnn_buckets_free(&bk);
    mrcnn_sgd_free(&t.sgd);
    return rc;
}
