/* MPI bootstrap: thread level, ranks, local rank -> device, broadcasts and small
 * all-reduces, each wait under the comm watchdog. */
#include "mrcnn/dist.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"

#include <stdlib.h>
#include <string.h>

static const char *thread_level_name(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "unknown";
    }
}

void mrcnn_dist_init(mrcnn_dist *d, int *argc, char ***argv, int thread_level, int visible_gpus,
                     double comm_timeout_s) {
    memset(d, 0, sizeof *d);
    int up = 0;
    MRCNN_CHECK_MPI(MPI_Initialized(&up));
    if (!up) {
        MRCNN_CHECK_MPI(MPI_Init_thread(argc, argv, thread_level, &d->thread_level));
        d->owns_mpi = 1;
    } else {
        MRCNN_CHECK_MPI(MPI_Query_thread(&d->thread_level));
    }
    MRCNN_CHECK(d->thread_level >= thread_level,
                "the MPI library provides only %s; mrcnn needs %s (the loader's I/O thread and the "
                "comm watchdog call MPI beside the main thread); use an MPI built with thread support",
                thread_level_name(d->thread_level), thread_level_name(thread_level));
    MRCNN_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &d->comm));
    /* Errors come back as codes, so the check macros can name the call and rank. */
    MRCNN_CHECK_MPI(MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN));
    MRCNN_CHECK_MPI(MPI_Comm_rank(d->comm, &d->rank));
    MRCNN_CHECK_MPI(MPI_Comm_size(d->comm, &d->world_size));
    MPI_Comm node;
    MRCNN_CHECK_MPI(MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node));
    MRCNN_CHECK_MPI(MPI_Comm_rank(node, &d->local_rank));
    MRCNN_CHECK_MPI(MPI_Comm_size(node, &d->local_size));
    MRCNN_CHECK_MPI(MPI_Comm_free(&node));
    /* Slurm's --gpus-per-task leaves one device visible per task: then every local
     * rank maps to device 0; with all devices visible, ranks spread over them. */
    d->device = visible_gpus > 0 ? d->local_rank % visible_gpus : -1;
    mrcnn_log_set_rank(d->rank, d->world_size);
    d->comm_timeout_s = comm_timeout_s;
    if (comm_timeout_s > 0) mrcnn_watchdog_start(comm_timeout_s);
}

void mrcnn_dist_finalize(mrcnn_dist *d) {
    mrcnn_watchdog_stop();
    if (d->nccl) mrcnn_nccl_destroy(d->nccl);
    d->nccl = NULL;
    if (d->comm != MPI_COMM_NULL && d->comm) MPI_Comm_free(&d->comm);
    int down = 0;
    MPI_Finalized(&down);
    if (d->owns_mpi && !down) MPI_Finalize();
    d->owns_mpi = 0;
}

int mrcnn_dist_nccl_init(mrcnn_dist *d, const char **why) {
    if (d->device < 0) {
        if (why) *why = "no GPU assigned to this rank";
        return 0;
    }
    d->nccl = mrcnn_nccl_create(d->comm, d->rank, d->world_size, d->device, why);
    return d->nccl != NULL;
}

/* MPI's count arguments are ints: large buffers go in chunks. */
#define MRCNN_MPI_CHUNK ((size_t)1 << 30)

void mrcnn_dist_bcast_bytes(const mrcnn_dist *d, void *buf, size_t bytes, const char *what) {
    mrcnn_watchdog_arm(what);
    for (size_t off = 0; off < bytes; off += MRCNN_MPI_CHUNK) {
        size_t n = bytes - off < MRCNN_MPI_CHUNK ? bytes - off : MRCNN_MPI_CHUNK;
        MRCNN_CHECK_MPI(MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, 0, d->comm));
    }
    mrcnn_watchdog_disarm();
}

void mrcnn_dist_broadcast_arena(const mrcnn_dist *d, const mrcnn_backend *be, mrcnn_arena *params) {
    if (d->world_size == 1 || params->size == 0) return;
    if (params->device == MRCNN_DEVICE_CPU) {
        mrcnn_dist_bcast_bytes(d, params->base, params->size, "broadcast of rank 0's weights");
        return;
    }
    /* Device arena: stage through the host (once per run, so the copy is cheap). */
    MRCNN_CHECK(be != NULL, "broadcast of a GPU arena '%s' needs its backend", params->name);
    int64_t n = (int64_t)(params->size / sizeof(float));
    float *host = MRCNN_MALLOC(params->size, "host staging for the weight broadcast");
    mrcnn_tensor flat = mrcnn_tensor_view(params->base, MRCNN_DTYPE_F32, params->device, 1, &n);
    be->mem.read(be, &flat, host);
    mrcnn_dist_bcast_bytes(d, host, params->size, "broadcast of rank 0's weights");
    be->mem.write(be, &flat, host);
    be->mem.sync(be);
    free(host);
}

void mrcnn_dist_allreduce_sum_f64(const mrcnn_dist *d, double *vals, int n, const char *what) {
    if (d->world_size == 1) return;
    mrcnn_watchdog_arm(what);
    MRCNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, vals, n, MPI_DOUBLE, MPI_SUM, d->comm));
    mrcnn_watchdog_disarm();
}

void mrcnn_dist_barrier(const mrcnn_dist *d, const char *what) {
    if (d->world_size == 1) return;
    mrcnn_watchdog_arm(what);
    MRCNN_CHECK_MPI(MPI_Barrier(d->comm));
    mrcnn_watchdog_disarm();
}

/* The device all-reduce (sum, or mean = sum / ranks) of small step values (loss terms,
 * Inf/NaN flags, normalizer counts) without a host read: on the CPU backend the tensor is host memory and MPI
 * sums it in place; on a GPU NCCL sums it on its stream, ordered after the compute
 * stream's work so far (an event) and before its later work (the compute stream waits
 * for NCCL's done event), so the host never waits. A GPU without NCCL stages through
 * the host (a read: the fallback of builds without NCCL). */
void mrcnn_dist_allreduce_tensor(const mrcnn_dist *d, const mrcnn_backend *be, mrcnn_tensor *t, int mean,
                                 const char *what) {
    if (d->world_size == 1) return;
    MRCNN_CHECK(t->dtype == MRCNN_DTYPE_F32, "%s: the device all-reduce takes fp32 tensors", what);
    const int64_t n = mrcnn_tensor_numel(t);
    if (n == 0) return;
    if (t->device == MRCNN_DEVICE_CPU) {
        mrcnn_watchdog_arm(what);
        MRCNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, t->data, (int)n, MPI_FLOAT, MPI_SUM, d->comm));
        mrcnn_watchdog_disarm();
        if (mean)
            for (int64_t i = 0; i < n; i++) ((float *)t->data)[i] /= (float)d->world_size;
        return;
    }
    if (d->nccl) {
        /* One backend per process: its event is made once and kept. */
        static void *ready_ev = NULL;
        if (!ready_ev) ready_ev = be->stream.event_create(be);
        be->stream.event_record(be, ready_ev);
        mrcnn_nccl_allreduce(d->nccl, (float *)t->data, (size_t)n, mean, ready_ev, what);
        be->stream.event_wait(be, mrcnn_nccl_done_event(d->nccl));
        return;
    }
    float *host = MRCNN_MALLOC((size_t)n * sizeof(float), "device all-reduce staging");
    be->mem.read(be, t, host);
    mrcnn_watchdog_arm(what);
    MRCNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, host, (int)n, MPI_FLOAT, MPI_SUM, d->comm));
    mrcnn_watchdog_disarm();
    if (mean)
        for (int64_t i = 0; i < n; i++) host[i] /= (float)d->world_size;
    be->mem.write(be, t, host);
    free(host);
}
