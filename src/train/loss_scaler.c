/* The fp16 dynamic loss scaler (the policy of torch.cuda.amp.GradScaler). */
#include "mrcnn/train.h"
#include "mrcnn/check.h"

#include <string.h>

void mrcnn_loss_scaler_init(mrcnn_loss_scaler *s, int enabled, float init_scale, int growth_interval) {
    memset(s, 0, sizeof *s);
    s->enabled = enabled;
    s->scale = enabled ? init_scale : 1.0f;
    s->growth_interval = growth_interval;
    MRCNN_CHECK(!enabled || (init_scale > 0 && growth_interval > 0),
                "loss scaler: initial scale %g and growth interval %d must be positive", init_scale,
                growth_interval);
}

int mrcnn_loss_scaler_update(mrcnn_loss_scaler *s, int nonfinite) {
    if (!s->enabled) return !nonfinite;
    if (nonfinite) {
        s->scale *= 0.5f;
        /* Below the smallest normal fp32 the scaler can no longer recover. */
        if (s->scale < 1.1754944e-38f) s->scale = 1.1754944e-38f;
        s->clean_steps = 0;
        s->skipped++;
        return 0;
    }
    if (++s->clean_steps >= s->growth_interval) {
        if (s->scale * 2.0f < 3.0e38f) s->scale *= 2.0f;
        s->clean_steps = 0;
    }
    return 1;
}
