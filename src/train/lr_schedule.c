/* detectron2's LR schedules, and its rule for scaling a config to the world size. */
#include "mrcnn/train.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"

#include <math.h>
#include <string.h>

void mrcnn_lr_schedule_init(mrcnn_lr_schedule *s, const mrcnn_config *cfg) {
    memset(s, 0, sizeof *s);
    if (!strcmp(cfg->solver_lr_scheduler, "WarmupMultiStepLR"))
        s->kind = MRCNN_LR_MULTISTEP;
    else if (!strcmp(cfg->solver_lr_scheduler, "WarmupCosineLR"))
        s->kind = MRCNN_LR_COSINE;
    else
        MRCNN_CHECK(0, "SOLVER.LR_SCHEDULER_NAME '%s' is unknown (WarmupMultiStepLR or WarmupCosineLR)",
                    cfg->solver_lr_scheduler);
    s->base_lr = cfg->solver_base_lr;
    s->warmup_factor = cfg->solver_warmup_factor;
    s->warmup_iters = cfg->solver_warmup_iters;
    s->max_iter = cfg->solver_max_iter;
    s->gamma = cfg->solver_gamma;
    MRCNN_CHECK(cfg->solver_lr_milestones.n <= 16, "SOLVER.STEPS has %d entries (at most 16)",
                cfg->solver_lr_milestones.n);
    s->n_milestones = cfg->solver_lr_milestones.n;
    for (int i = 0; i < s->n_milestones; i++) {
        s->milestones[i] = cfg->solver_lr_milestones.v[i];
        MRCNN_CHECK(i == 0 || s->milestones[i] > s->milestones[i - 1], "SOLVER.STEPS must increase: %d after %d",
                    s->milestones[i], s->milestones[i - 1]);
    }
    MRCNN_CHECK(s->kind != MRCNN_LR_COSINE || s->max_iter > 0, "WarmupCosineLR needs SOLVER.MAX_ITER > 0");
}

float mrcnn_lr_at(const mrcnn_lr_schedule *s, int64_t iter) {
    double warm = 1.0;
    if (iter < s->warmup_iters) {
        double a = (double)iter / (double)s->warmup_iters;
        warm = s->warmup_factor * (1.0 - a) + a;
    }
    double decay = 1.0;
    if (s->kind == MRCNN_LR_MULTISTEP) {
        for (int i = 0; i < s->n_milestones; i++)
            if (iter >= s->milestones[i]) decay *= s->gamma;
    } else {
        double t = iter > s->max_iter ? 1.0 : (double)iter / (double)s->max_iter;
        decay = 0.5 * (1.0 + cos(M_PI * t));
    }
    return (float)(s->base_lr * warm * decay);
}

static int scaled_round(double v, double f) { return (int)lround(v / f); }

double mrcnn_config_scale_workers(mrcnn_config *cfg, int world_size) {
    int ref = cfg->solver_reference_world_size;
    if (ref <= 0 || ref == world_size) return 1.0;
    MRCNN_CHECK(cfg->solver_ims_per_batch % ref == 0,
                "SOLVER.IMS_PER_BATCH %d is not divisible by SOLVER.REFERENCE_WORLD_SIZE %d",
                cfg->solver_ims_per_batch, ref);
    double f = (double)world_size / ref;
    int bs = (int)lround(cfg->solver_ims_per_batch * f);
    cfg->solver_ims_per_batch = bs;
    cfg->solver_base_lr = (float)(cfg->solver_base_lr * f);
    cfg->solver_max_iter = scaled_round(cfg->solver_max_iter, f);
    cfg->solver_warmup_iters = scaled_round(cfg->solver_warmup_iters, f);
    for (int i = 0; i < cfg->solver_lr_milestones.n; i++)
        cfg->solver_lr_milestones.v[i] = scaled_round(cfg->solver_lr_milestones.v[i], f);
    cfg->solver_checkpoint_period = scaled_round(cfg->solver_checkpoint_period, f);
    cfg->test_eval_period = scaled_round(cfg->test_eval_period, f);
    cfg->solver_reference_world_size = world_size;
    return f;
}

int mrcnn_per_rank_batch(const mrcnn_config *cfg, int world_size) {
    int accum = cfg->solver_accum_steps;
    MRCNN_CHECK(accum >= 1, "SOLVER.ACCUM_STEPS must be >= 1, got %d", accum);
    long denom = (long)world_size * accum;
    MRCNN_CHECK(cfg->solver_ims_per_batch > 0 && cfg->solver_ims_per_batch % denom == 0,
                "SOLVER.IMS_PER_BATCH %d (the global batch) must be a positive multiple of ranks %d x "
                "SOLVER.ACCUM_STEPS %d",
                cfg->solver_ims_per_batch, world_size, accum);
    return (int)(cfg->solver_ims_per_batch / denom);
}
