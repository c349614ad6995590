/* The non-blocking NCCL start-up's decisions (nccl_start.h); no NCCL or CUDA here. */
#include "mrcnn/nccl_start.h"

#include <stdio.h>
#include <stdlib.h>

mrcnn_nccl_start_result mrcnn_nccl_start_wait(const mrcnn_nccl_start *s, int init_result) {
    mrcnn_nccl_start_result r = {.status = MRCNN_NCCL_START_OK, .code = init_result};
    if (init_result != MRCNN_NCCL_SUCCESS && init_result != MRCNN_NCCL_IN_PROGRESS) {
        /* No communicator was made: nothing to abort. */
        r.status = MRCNN_NCCL_START_FAILED;
        r.stage = "ncclCommInitRankConfig";
        return r;
    }
    const double t0 = s->now(s->ctx);
    for (;;) {
        int state = MRCNN_NCCL_IN_PROGRESS;
        const int pr = s->poll(s->ctx, &state);
        r.polls++;
        r.waited_s = s->now(s->ctx) - t0;
        if (pr != MRCNN_NCCL_SUCCESS) {
            r.status = MRCNN_NCCL_START_FAILED;
            r.code = pr;
            r.stage = "ncclCommGetAsyncError";
            break;
        }
        if (state == MRCNN_NCCL_SUCCESS) {
            r.code = state;
            return r;
        }
        if (state != MRCNN_NCCL_IN_PROGRESS) {
            r.status = MRCNN_NCCL_START_FAILED;
            r.code = state;
            r.stage = "the communicator's start-up";
            break;
        }
        if (r.waited_s > s->timeout_s) {
            r.status = MRCNN_NCCL_START_TIMEOUT;
            r.code = state;
            break;
        }
        s->pause(s->ctx);
    }
    /* A communicator that exists but will never be ready: release it, and with it any
     * peer that did connect, before the run stops. */
    s->abort(s->ctx);
    r.aborted = 1;
    return r;
}

int mrcnn_nccl_start_timeout(const char *value, double *seconds) {
    *seconds = MRCNN_NCCL_INIT_TIMEOUT_DEFAULT;
    if (!value || !*value) return 1;
    char *end = NULL;
    const double v = strtod(value, &end);
    if (end == value || *end || !(v > 0) || v > 1e9) return 0;
    *seconds = v;
    return 1;
}

void mrcnn_nccl_start_describe(const mrcnn_nccl_start_result *r, int rank, int device, double timeout_s,
                               const char *error, const char *last, char *buf, size_t n) {
    const int has_last = last && *last;
    if (r->status == MRCNN_NCCL_START_TIMEOUT)
        snprintf(buf, n,
                 "rank %d, device %d: the NCCL communicator was still starting after %.1f s (timeout %.0f s, "
                 "MRCNN_NCCL_INIT_TIMEOUT): a peer rank never joined or the network between the ranks is blocked; "
                 "the communicator was aborted",
                 rank, device, r->waited_s, timeout_s);
    else if (r->status == MRCNN_NCCL_START_FAILED)
        snprintf(buf, n, "rank %d, device %d: NCCL communicator start-up failed in %s after %.1f s: %s%s%s%s", rank,
                 device, r->stage ? r->stage : "?", r->waited_s, error ? error : "?", has_last ? " (" : "",
                 has_last ? last : "", has_last ? ")" : "");
    else
        snprintf(buf, n, "rank %d, device %d: NCCL communicator ready after %.1f s", rank, device, r->waited_s);
}
