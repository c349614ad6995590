#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"

mrcnn_tensor test_tensor_alloc(mrcnn_dtype dtype, int ndim, const int64_t *shape) {
    mrcnn_tensor t = mrcnn_tensor_view(NULL, dtype, MRCNN_DEVICE_CPU, ndim, shape);
    t.data = MRCNN_CALLOC(1, mrcnn_tensor_nbytes(&t), "host tensor");
    return t;
}

void test_tensor_free(mrcnn_tensor *t) {
    free(t->data);
    t->data = NULL;
}

int test_loss_scaler_update(mrcnn_loss_scaler *s, int nonfinite) {
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

int64_t test_trace_diff(const mrcnn_trace_summary *a, const mrcnn_trace_summary *b, char *msg, size_t len) {
    if (msg && len) msg[0] = 0;
    if (!a || !b || !a->listing || !b->listing) return -1;
    const char *pa = a->listing, *pb = b->listing;
    for (int64_t i = 0;; i++) {
        const char *ea = strchr(pa, '\n'), *eb = strchr(pb, '\n');
        if (!ea && !eb) return -1;
        if (!ea || !eb) {
            if (msg)
                snprintf(msg, len, "call #%lld: %s has no more calls, the other: %.*s", (long long)i, !ea ? "a" : "b",
                         (int)(!ea ? eb - pb : ea - pa), !ea ? pb : pa);
            return i;
        }
        if (ea - pa != eb - pb || memcmp(pa, pb, (size_t)(ea - pa)) != 0) {
            if (msg)
                snprintf(msg, len, "call #%lld: %.*s | %.*s", (long long)i, (int)(ea - pa), pa, (int)(eb - pb), pb);
            return i;
        }
        pa = ea + 1;
        pb = eb + 1;
    }
}
