/* Gradient buckets over the flat grads arena. Backward produces gradients from the
 * last parameter to the first, so buckets are cut in that order: bucket 0 holds
 * the last parameters and is complete first. Every rank launches buckets strictly
 * in bucket order (nonblocking collectives must be started in the same order
 * everywhere), so a parameter that finishes early in one rank's backward never
 * reorders the reductions.
 *
 * NCCL path: ordering lives on the device. A complete bucket records the backend's
 * event on its compute stream and NCCL's stream waits on it, so the all-reduce reads
 * final gradients while backward continues; wait() makes the compute stream wait for
 * NCCL's stream, so the optimizer after it reads the averages. The host waits only
 * for hang detection (host_wait) or in drain(). */
#include "mrcnn/dist.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"

#include <stdlib.h>
#include <string.h>

static size_t entry_end(const mrcnn_arena *a, int i) {
    return a->entries[i].offset + mrcnn_tensor_nbytes(&a->entries[i].tensor);
}

void mrcnn_buckets_init(mrcnn_buckets *bk, const mrcnn_dist *d, const mrcnn_backend *be,
                        mrcnn_arena *grads, size_t bucket_bytes) {
    memset(bk, 0, sizeof *bk);
    MRCNN_CHECK(grads->base != NULL, "gradient buckets: arena '%s' is not committed", grads->name);
    MRCNN_CHECK(bucket_bytes > 0, "gradient buckets: bucket size must be positive");
    for (int i = 0; i < grads->n_entries; i++)
        MRCNN_CHECK(grads->entries[i].tensor.dtype == MRCNN_DTYPE_F32,
                    "gradient buckets: '%s' is %s; the grads arena must be fp32", grads->entries[i].name,
                    mrcnn_dtype_name(grads->entries[i].tensor.dtype));
    bk->dist = d;
    bk->be = be;
    bk->grads = grads;
    int np = grads->n_entries;
    bk->param_bucket = MRCNN_CALLOC((size_t)(np ? np : 1), sizeof(int), "bucket index per parameter");
    bk->param_ready = MRCNN_CALLOC((size_t)(np ? np : 1), 1, "ready flag per parameter");
    bk->b = MRCNN_CALLOC((size_t)(np ? np : 1), sizeof(mrcnn_bucket), "gradient buckets");
    int hi = np - 1;
    while (hi >= 0) {
        int lo = hi;
        /* Grow downwards while the bucket stays under the target (always >= 1 param). */
        while (lo > 0 && entry_end(grads, hi) - grads->entries[lo - 1].offset <= bucket_bytes) lo--;
        mrcnn_bucket *b = &bk->b[bk->n_buckets];
        b->first_param = lo;
        b->last_param = hi;
        b->n_params = hi - lo + 1;
        b->offset = grads->entries[lo].offset;
        b->bytes = entry_end(grads, hi) - b->offset;
        b->req = MPI_REQUEST_NULL;
        for (int i = lo; i <= hi; i++) bk->param_bucket[i] = bk->n_buckets;
        bk->n_buckets++;
        hi = lo - 1;
    }
    bk->use_nccl = d->nccl != NULL && grads->device == MRCNN_DEVICE_GPU;
    bk->host_wait = 1;
    if (bk->use_nccl) {
        MRCNN_CHECK(be != NULL && be->stream.event_create != NULL,
                    "gradient buckets: NCCL needs the grads' backend and its stream events");
        bk->ready_ev = be->stream.event_create(be);
    }
    if (grads->device == MRCNN_DEVICE_GPU && !bk->use_nccl && d->world_size > 1) {
        MRCNN_CHECK(be != NULL, "gradient buckets: a GPU arena needs its backend");
        bk->staging = MRCNN_MALLOC(grads->size, "host staging buffer for MPI gradient all-reduce");
    }
}

void mrcnn_buckets_free(mrcnn_buckets *bk) {
    if (bk->ready_ev) {
        mrcnn_buckets_drain(bk); // NCCL may still read the grads, and the event
        bk->be->stream.event_destroy(bk->be, bk->ready_ev);
    }
    free(bk->param_bucket);
    free(bk->param_ready);
    free(bk->b);
    free(bk->staging);
    memset(bk, 0, sizeof *bk);
}

void mrcnn_buckets_reset(mrcnn_buckets *bk) {
    memset(bk->param_ready, 0, (size_t)bk->grads->n_entries);
    for (int i = 0; i < bk->n_buckets; i++) {
        bk->b[i].n_ready = 0;
        bk->b[i].launched = 0;
        bk->b[i].req = MPI_REQUEST_NULL;
    }
    bk->next_launch = 0;
    bk->n_early = 0;
}

static mrcnn_tensor bucket_view(mrcnn_buckets *bk, const mrcnn_bucket *b) {
    int64_t n = (int64_t)(b->bytes / sizeof(float));
    return mrcnn_tensor_view(bk->grads->base + b->offset, MRCNN_DTYPE_F32, bk->grads->device, 1, &n);
}

static void launch(mrcnn_buckets *bk, mrcnn_bucket *b) {
    b->launched = 1;
    if (bk->dist->world_size == 1) return;
    size_t count = b->bytes / sizeof(float);
    if (bk->use_nccl) {
        /* NCCL's stream starts this bucket after backward's work queued so far. */
        bk->be->stream.event_record(bk->be, bk->ready_ev);
        mrcnn_nccl_allreduce_avg(bk->dist->nccl, (float *)(bk->grads->base + b->offset), count, bk->ready_ev,
                                 (int)(b - bk->b));
        return;
    }
    MRCNN_CHECK(count <= (size_t)0x7fffffff, "gradient bucket of %zu floats exceeds MPI's int count", count);
    float *buf = (float *)(bk->grads->base + b->offset);
    if (bk->staging) {
        /* GPU gradients without NCCL: the read waits for backward up to here. */
        mrcnn_tensor v = bucket_view(bk, b);
        buf = bk->staging + b->offset / sizeof(float);
        bk->be->mem.read(bk->be, &v, buf);
    }
    MRCNN_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, bk->dist->comm, &b->req));
}

static void launch_ready(mrcnn_buckets *bk) {
    while (bk->next_launch < bk->n_buckets) {
        mrcnn_bucket *b = &bk->b[bk->next_launch];
        if (b->n_ready < b->n_params) break;
        launch(bk, b);
        bk->next_launch++;
    }
}

void mrcnn_buckets_mark_ready(mrcnn_buckets *bk, int param_index) {
    MRCNN_CHECK(param_index >= 0 && param_index < bk->grads->n_entries,
                "gradient buckets: parameter index %d outside [0, %d)", param_index, bk->grads->n_entries);
    MRCNN_CHECK(!bk->param_ready[param_index], "gradient buckets: '%s' marked ready twice in one step",
                bk->grads->entries[param_index].name);
    bk->param_ready[param_index] = 1;
    bk->b[bk->param_bucket[param_index]].n_ready++;
    int before = bk->next_launch;
    launch_ready(bk);
    /* Nonblocking collectives only progress inside MPI calls: poke them. */
    if (bk->next_launch == before && !bk->use_nccl && bk->dist->world_size > 1 && before > 0) {
        int flag;
        for (int i = 0; i < before; i++)
            if (bk->b[i].req != MPI_REQUEST_NULL)
                MRCNN_CHECK_MPI(MPI_Test(&bk->b[i].req, &flag, MPI_STATUS_IGNORE));
    }
}

void mrcnn_buckets_wait(mrcnn_buckets *bk) {
    double t0 = mrcnn_time_now();
    bk->n_early = bk->next_launch;
    for (int i = bk->next_launch; i < bk->n_buckets; i++) launch(bk, &bk->b[i]);
    bk->next_launch = bk->n_buckets;
    const mrcnn_dist *d = bk->dist;
    if (d->world_size > 1) {
        if (bk->use_nccl) {
            bk->be->stream.event_wait(bk->be, mrcnn_nccl_done_event(d->nccl));
            if (bk->host_wait) mrcnn_buckets_drain(bk);
        } else {
            const float inv = 1.0f / (float)d->world_size;
            mrcnn_watchdog_arm("gradient all-reduce (MPI_Iallreduce buckets)");
            for (int i = 0; i < bk->n_buckets; i++) {
                mrcnn_bucket *b = &bk->b[i];
                MRCNN_CHECK_MPI(MPI_Wait(&b->req, MPI_STATUS_IGNORE));
                size_t count = b->bytes / sizeof(float);
                float *buf = bk->staging ? bk->staging + b->offset / sizeof(float)
                                         : (float *)(bk->grads->base + b->offset);
                for (size_t k = 0; k < count; k++) buf[k] *= inv;
                if (bk->staging) {
                    mrcnn_tensor v = bucket_view(bk, b);
                    bk->be->mem.write(bk->be, &v, buf);
                }
            }
            mrcnn_watchdog_disarm();
        }
    }
    bk->wait_s = mrcnn_time_now() - t0;
}

void mrcnn_buckets_drain(mrcnn_buckets *bk) {
    if (!bk->use_nccl || bk->dist->world_size == 1) return;
    mrcnn_nccl_wait(bk->dist->nccl, bk->dist->comm_timeout_s);
    mrcnn_backend_count(bk->be, 0, 0, 1, 0, 0); // a wait of the host for the device
}
