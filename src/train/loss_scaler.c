/* The fp16 dynamic loss scaler (the policy of torch.cuda.amp.GradScaler): its state. The
 * policy runs in the backend's step.decide (step_ctl.h). */
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
