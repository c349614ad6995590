/* The training loop around mrcnn_trainer_step (trainer_step.c): before the first
 * step, resume; after each, the hooks that are not part of a step, in order: the log
 * window and the non-finite limit, checkpoints with the loss plot, evaluation,
 * preemption signals; after the last, their end-of-run halves. Every decision that
 * must be the same on all ranks (stop, checkpoint on a signal) is made from values the
 * step agreed over the ranks. */
#include "mrcnn/trainer.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/metrics.h"
#include "mrcnn/plot.h"
#include "mrcnn/run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void save(mrcnn_trainer *t) {
    mrcnn_trainer_sync_state(t); // the non-finite count and the loss scaler live on the device
    if (t->model->get_cursor) t->model->get_cursor(t->model->ctx, &t->st.epoch, &t->st.loader_step);
    if (t->dist->rank == 0) {
        char path[1024];
        double t0 = mrcnn_time_now();
        mrcnn_checkpoint_save(t->cfg->output_dir, t->be, t->model->params, t->model->fold_scale, &t->sgd.momentum,
                              &t->st, t->cfg, t->cfg->solver_checkpoint_keep, path);
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
static void resume(mrcnn_trainer *t) {
    char path[1024] = "";
    int found = 0;
    mrcnn_train_state st;
    memset(&st, 0, sizeof st);
    if (t->dist->rank == 0) {
        char **paths;
        int n = mrcnn_checkpoint_list(t->cfg->output_dir, &paths);
        char failures[1400] = "";
        size_t fl = 0;
        int others = 0;
        for (int i = 0; i < n && !found; i++) {
            char why[1024], id[MRCNN_RUN_ID_LEN];
            /* Only this run's lineage: another run's checkpoint is never resumed. */
            if (mrcnn_checkpoint_run_id(paths[i], id, sizeof id) && !mrcnn_run_owns(id)) {
                mrcnn_warn("resume: %s belongs to run %s, not to this OUTPUT_DIR's run %s: skipped", paths[i], id,
                           mrcnn_run_id());
                others++;
                continue;
            }
            if (mrcnn_checkpoint_try_load(paths[i], t->be, t->model->params, &t->sgd.momentum, &st, why, sizeof why)) {
                snprintf(path, sizeof path, "%s", paths[i]);
                found = 1;
                break;
            }
            mrcnn_warn("resume: checkpoint %s cannot be loaded: %s; %s", paths[i], why,
                       i + 1 < n ? "trying an older one" : "no older checkpoint");
            if (fl < sizeof failures)
                fl += (size_t)snprintf(failures + fl, sizeof failures - fl, "%s%s: %s", i ? "; " : "", paths[i], why);
        }
        char why[1024];
        /* The weights are W' = s W in folded space: trained on with other s, they would be
         * another model and the preconditioner another optimizer. */
        if (found && !mrcnn_checkpoint_fold_scales_match(path, t->model->params, t->model->fold_scale, why, sizeof why))
            mrcnn_failf("checkpoint", "", __FILE__, __LINE__,
                        "--resume: checkpoint %s does not match this run's frozen batch-norm folding: %s (resume with "
                        "the MODEL.WEIGHTS the run started from)", path, why);
        if (n > others && !found)
            mrcnn_failf("checkpoint", "", __FILE__, __LINE__,
                        "--resume: none of the %d checkpoints in %s can be loaded: %s%s (move them away to start "
                        "from scratch)", n - others, t->cfg->output_dir, failures, fl >= sizeof failures ? "..." : "");
        mrcnn_checkpoint_list_free(paths, n);
    }
    mrcnn_dist_bcast_bytes(t->dist, &found, sizeof found, "resume: checkpoint choice");
    if (!found) {
        mrcnn_info("--resume: no checkpoint in %s; starting from scratch", t->cfg->output_dir);
        mrcnn_dist_broadcast_arena(t->dist, t->be, t->model->params);
        return;
    }
    mrcnn_dist_bcast_bytes(t->dist, path, sizeof path, "resume: checkpoint path");
    mrcnn_dist_bcast_bytes(t->dist, &st, sizeof st, "resume: checkpoint state");
    mrcnn_dist_broadcast_arena(t->dist, t->be, t->model->params);
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
    if (t->model->set_cursor) t->model->set_cursor(t->model->ctx, st.epoch, t->st.loader_step);
    mrcnn_info("resumed from %s at step %lld (loss scale %g)", path, (long long)st.step, t->st.scaler.scale);
}

/* What the hooks share over one run. */
typedef struct train_run {
    mrcnn_trainer t;
    const mrcnn_trainer_opts *opts;
    mrcnn_metrics metrics;
    int64_t max_steps;
    int64_t run_steps, run_applied; // steps this process ran, and of those the ones applied
    int64_t last_saved, last_eval;  // steps of the last checkpoint and evaluation (-1: none)
    int log_period, eval_period;
    double t0, run_t0;          // start of the log window and of the run; evaluations move both
    mrcnn_backend_stats stats0; // the backend's round-trip counters at the window's start
} train_run;

/* What runs around the steps: after_step after every step (nonzero, an exit code, ends
 * the run at once, before the later hooks of that step), after_train once after the
 * last step (it may set the run's exit code). Either may be NULL. Every decision that
 * must be the same on all ranks is made from values the step agreed over the ranks. */
typedef struct train_hook {
    int (*after_step)(train_run *run, const mrcnn_step_result *r);
    void (*after_train)(train_run *run, int *rc);
} train_hook;

/* ---- logging: the LOG_PERIOD window, the non-finite limit ---- */

/* The LOG_PERIOD line, metrics.json and events: the window's means (w, just taken
 * with mrcnn_trainer_take_losses), with the throughput and the ETA from the wall time
 * since the last line; the next window starts now. */
static void log_window(train_run *run, const mrcnn_loss_window *wp, int64_t steps_in, float lr) {
    mrcnn_trainer *t = &run->t;
    const mrcnn_config *cfg = t->cfg;
    const mrcnn_loss_window w = *wp;
    /* The host's waits for the device per step, the log-period read included (rank 0's
     * backend; an evaluation inside the window counts too). */
    const mrcnn_backend_stats bs = mrcnn_backend_stats_get(t->be);
    double now = mrcnn_time_now(), dt = now - run->t0;
    mrcnn_step_metrics s = {0};
    s.step = t->st.step;
    s.max_step = run->max_steps;
    s.n_losses = w.n_losses;
    s.loss_names = t->model->loss_names;
    for (int i = 0; i < w.n_losses; i++) s.losses[i] = w.mean[i];
    s.total_loss = w.mean_total;
    s.lr = lr;
    s.img_per_s = dt > 0 ? (double)steps_in * cfg->solver_ims_per_batch / dt : 0;
    s.data_ms = steps_in ? 1e3 * w.data_s / steps_in : 0;
    s.step_ms = steps_in ? 1e3 * dt / steps_in : 0;
    s.mem_mb = mrcnn_rss_mb();
    if (t->be->device == MRCNN_DEVICE_GPU) s.gpu_mem_mb = t->be->info.memory_used_mb(t->be);
    s.eta_s = (now - run->run_t0) / run->run_steps * (double)(run->max_steps - t->st.step);
    s.loss_scale = t->st.scaler.scale;
    s.skipped = t->st.scaler.skipped + t->st.nonfinite;
    if (steps_in > 0) {
        s.reads_per_step = (double)(bs.reads - run->stats0.reads) / (double)steps_in;
        s.syncs_per_step = (double)(bs.syncs - run->stats0.syncs) / (double)steps_in;
    }
    run->stats0 = bs;
    if (!run->opts->quiet || t->dist->rank != 0) mrcnn_metrics_log(&run->metrics, &s);
    else {
        mrcnn_log_set_level(MRCNN_LOG_WARN);
        mrcnn_metrics_log(&run->metrics, &s);
        mrcnn_log_set_level(MRCNN_LOG_INFO);
    }
    run->t0 = now;
}

/* Whether steps were skipped is known on the host at the log-period read only (no
 * read inside a step), so SOLVER.MAX_NONFINITE is checked there (with LOG_PERIOD > 1
 * the run stops at the first log step at or past the limit). */
static int log_after_step(train_run *run, const mrcnn_step_result *r) {
    mrcnn_trainer *t = &run->t;
    if (run->run_steps == 1)
        mrcnn_info("gradient buckets: %d of %d all-reduces started during backward", t->bk.n_early, t->bk.n_buckets);
    if (t->st.step % run->log_period != 0 && t->st.step != run->max_steps) return 0;
    mrcnn_loss_window w;
    mrcnn_trainer_take_losses(t, &w);
    run->run_applied += w.finite_steps;
    if (w.counted > 0 && t->st.nonfinite >= t->cfg->solver_max_nonfinite) {
        if (t->dist->rank == 0)
            fprintf(stderr,
                    "mrcnn error: stopping at step %lld: %s; %lld non-finite steps reached SOLVER.MAX_NONFINITE %d "
                    "(lower SOLVER.BASE_LR, enable SOLVER.CLIP_GRADIENTS, or check the data)\n",
                    (long long)w.last_skipped, w.what, (long long)t->st.nonfinite, t->cfg->solver_max_nonfinite);
        return MRCNN_EXIT_NONFINITE;
    }
    int64_t steps_in = t->st.step % run->log_period == 0 ? run->log_period : t->st.step % run->log_period;
    if (steps_in > run->run_steps) steps_in = run->run_steps;
    if (steps_in > w.steps) steps_in = w.steps;
    log_window(run, &w, steps_in, r->lr);
    return 0;
}

/* A run that skipped every one of its steps trained nothing: not a success, even when
 * it ended before SOLVER.MAX_NONFINITE (a short run, or fp16 halving its scale). */
static void log_after_train(train_run *run, int *rc) {
    if (*rc != 0 || run->run_steps == 0 || run->run_applied > 0) return;
    if (run->t.dist->rank == 0)
        fprintf(stderr,
                "mrcnn error: all %lld steps of this run (to step %lld) were skipped for Inf/NaN losses or "
                "gradients: nothing was trained (check the weights and the data, lower SOLVER.BASE_LR)\n",
                (long long)run->run_steps, (long long)run->t.st.step);
    *rc = MRCNN_EXIT_NONFINITE;
}

/* ---- checkpoints (SOLVER.CHECKPOINT_PERIOD, a preemption signal, the end) and the
 * loss plot drawn with each ---- */

static int checkpoint_after_step(train_run *run, const mrcnn_step_result *r) {
    int period = run->t.cfg->solver_checkpoint_period;
    if (!((period > 0 && run->t.st.step % period == 0) || r->stop_signal)) return 0;
    save(&run->t);
    run->last_saved = run->t.st.step;
    if (run->t.dist->rank == 0) mrcnn_plot_run(run->t.cfg, 0);
    return 0;
}

static void checkpoint_after_train(train_run *run, int *rc) {
    if (*rc == 0 && run->last_saved != run->t.st.step) save(&run->t);
}

/* ---- evaluation (TEST.EVAL_PERIOD and the end): between steps, never inside one ---- */

static void evaluate(train_run *run) {
    double t0 = mrcnn_time_now();
    mrcnn_eval_metrics e = {.step = run->t.st.step};
    run->t.model->evaluate(run->t.model->ctx, &e);
    e.seconds = mrcnn_time_now() - t0;
    mrcnn_metrics_log_eval(&run->metrics, &e);
    run->last_eval = run->t.st.step;
    /* its time is no training time: the throughput and ETA skip it */
    run->t0 += e.seconds;
    run->run_t0 += e.seconds;
}

static int eval_after_step(train_run *run, const mrcnn_step_result *r) {
    int64_t step = run->t.st.step;
    if (run->eval_period > 0 && step % run->eval_period == 0 && step < run->max_steps && !r->stop_signal)
        evaluate(run);
    return 0;
}

static void eval_after_train(train_run *run, int *rc) {
    if (*rc == 0 && run->eval_period > 0 && run->last_eval != run->t.st.step) evaluate(run);
}

/* ---- the final loss plot (after the final evaluation, which it shows) ---- */

static void plot_after_train(train_run *run, int *rc) {
    if (*rc == 0 && run->t.dist->rank == 0) mrcnn_plot_run(run->t.cfg, 1);
}

/* ---- preemption: the checkpoint hook wrote the checkpoint; stop for the requeue ---- */

static int preempt_after_step(train_run *run, const mrcnn_step_result *r) {
    if (!r->stop_signal) return 0;
    mrcnn_info("preemption signal: checkpoint at step %lld written; exiting with %d (requeue)",
               (long long)run->t.st.step, MRCNN_EXIT_REQUEUE);
    return MRCNN_EXIT_REQUEUE;
}

/* In this order: a hook sees what the ones before it did at the same step. */
static const train_hook k_hooks[] = {
    {log_after_step, log_after_train},
    {checkpoint_after_step, checkpoint_after_train},
    {eval_after_step, eval_after_train},
    {NULL, plot_after_train},
    {preempt_after_step, NULL},
};
#define N_HOOKS (sizeof k_hooks / sizeof k_hooks[0])

/* Everything before the first step: the trainer, signals, OUTPUT_DIR, the weights
 * (resumed or broadcast), the metrics writers. Returns 1 when there is something to
 * train; 0 for a finished run resumed (nothing trained, nothing written). */
static int run_begin(train_run *run, const mrcnn_config *cfg, const mrcnn_trainer_opts *opts, mrcnn_dist *dist,
                     mrcnn_backend *be, mrcnn_trainable *m) {
    memset(run, 0, sizeof *run);
    run->opts = opts;
    mrcnn_trainer *t = &run->t;
    mrcnn_trainer_init(t, cfg, dist, be, m, opts->bucket_bytes);
    mrcnn_signals_install();
    /* Before anything is trained or written: a directory that cannot be used, or that
     * another training uses, stops the run now (rank 0 fails, MPI_Abort ends the rest). */
    if (dist->rank == 0) {
        mrcnn_output_dir_claim(cfg->output_dir);
        mrcnn_run_begin(cfg->output_dir, opts->resume);
    }
    if (t->st.scaler.enabled && !m->scales_loss)
        mrcnn_warn("SOLVER.PRECISION fp16: this model applies no loss scale to its gradients; training runs "
                   "unscaled (Inf/NaN steps are still skipped)");
    if (opts->resume) resume(t);
    else mrcnn_dist_broadcast_arena(dist, be, m->params);
    run->max_steps = opts->max_steps > 0 && opts->max_steps < cfg->solver_max_iter ? opts->max_steps
                                                                                   : cfg->solver_max_iter;
    /* A finished run resumed has nothing to train, and must keep its files as they are (the
     * end-of-run save would rewrite its last checkpoint, at the schedule's end: lr 0). */
    if (opts->resume && t->st.step >= run->max_steps) {
        mrcnn_info("--resume: the run in %s is finished (step %lld of %lld): nothing trained, nothing written "
                   "(raise SOLVER.MAX_ITER to train further)", cfg->output_dir, (long long)t->st.step,
                   (long long)run->max_steps);
        mrcnn_trainer_free(t);
        return 0;
    }
    mrcnn_metrics_open(&run->metrics, cfg->output_dir, dist->rank == 0);
    mrcnn_info("world size %d, per-rank batch %d x %d accumulation, global batch %d, base LR %g (scaled for "
               "the global batch), precision %s, %d gradient buckets, steps %lld -> %lld",
               dist->world_size, mrcnn_per_rank_batch(cfg, dist->world_size), cfg->solver_accum_steps,
               cfg->solver_ims_per_batch, cfg->solver_base_lr, cfg->solver_precision, t->bk.n_buckets,
               (long long)t->st.step, (long long)run->max_steps);
    run->t0 = run->run_t0 = mrcnn_time_now();
    run->stats0 = mrcnn_backend_stats_get(be);
    run->last_saved = run->last_eval = -1;
    run->log_period = cfg->log_period > 0 ? cfg->log_period : 20;
    run->eval_period = m->evaluate ? cfg->test_eval_period : 0;
    return 1;
}

int mrcnn_trainer_run(const mrcnn_config *cfg, const mrcnn_trainer_opts *opts, mrcnn_dist *dist, mrcnn_backend *be,
                      mrcnn_trainable *m) {
    train_run *run = MRCNN_MALLOC(sizeof *run, "training run");
    int rc = 0;
    if (run_begin(run, cfg, opts, dist, be, m)) {
        while (rc == 0 && run->t.st.step < run->max_steps) {
            mrcnn_step_result r;
            mrcnn_trainer_step(&run->t, &r);
            run->run_steps++;
            for (size_t h = 0; rc == 0 && h < N_HOOKS; h++)
                if (k_hooks[h].after_step) rc = k_hooks[h].after_step(run, &r);
        }
        for (size_t h = 0; h < N_HOOKS; h++)
            if (k_hooks[h].after_train) k_hooks[h].after_train(run, &rc);
        mrcnn_metrics_close(&run->metrics);
        mrcnn_trainer_free(&run->t);
    }
    free(run);
    return rc;
}
