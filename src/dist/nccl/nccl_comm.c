/* NCCL communicator for the gradient buckets (GPU=1 builds only). The unique id
 * travels by MPI_Bcast; all-reduces run on NCCL's own stream, each after the compute
 * stream's event for its bucket, so they overlap the rest of backward, and the compute
 * stream waits for the `done` event before the optimizer: no host wait is needed for
 * ordering. The communicator is non-blocking: every call is followed by a poll of
 * ncclCommGetAsyncError, and waits poll instead of blocking, so a dead peer becomes an
 * error (ncclCommAbort, then MPI_Abort) within the comm timeout, never a silent hang. */
#include "mrcnn/cuda_check.h"
#include "mrcnn/dist.h"
#include "mrcnn/log.h"
#include "mrcnn/nccl_start.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mrcnn_nccl {
    ncclComm_t comm;
    cudaStream_t stream; // NCCL's stream, beside the compute stream
    cudaEvent_t done;    // recorded on NCCL's stream after the all-reduces queued so far
    int rank, device;
    double timeout_s;    // the comm timeout last given to mrcnn_nccl_wait (0: none yet)
};

/* Fails (after ncclCommAbort, so no rank is left in a collective) when NCCL reports an
 * asynchronous error. ncclInProgress means a call on this non-blocking communicator is
 * still being issued: its kernel may not be on NCCL's stream yet, so an event recorded
 * there now (mrcnn_nccl_done_event) would not cover it. Wait for the host-side issue to
 * finish (not for the collective), within the comm timeout last given to
 * mrcnn_nccl_wait (a peer missing at lazy connection setup would hold it forever). */
static void nccl_check_async(mrcnn_nccl *n, const char *what) {
    ncclResult_t st = ncclSuccess;
    const double t0 = mrcnn_time_now();
    for (;;) {
        MRCNN_CHECK_NCCL(ncclCommGetAsyncError(n->comm, &st));
        if (st != ncclInProgress) break;
        if (n->timeout_s > 0 && mrcnn_time_now() - t0 > n->timeout_s) {
            ncclCommAbort(n->comm);
            mrcnn_failf("NCCL", "ncclCommGetAsyncError", __FILE__, __LINE__,
                        "rank %d, device %d: NCCL still issuing %s after %.1f s (--comm-timeout): a peer rank is "
                        "missing", n->rank, n->device, what, n->timeout_s);
        }
        usleep(20);
    }
    if (st == ncclSuccess) return;
    const char *last = ncclGetLastError(n->comm);
    ncclCommAbort(n->comm);
    mrcnn_failf("NCCL", "ncclCommGetAsyncError", __FILE__, __LINE__,
                "rank %d, device %d: NCCL reported '%s'%s%s%s %s: a peer rank failed or the network is down", n->rank,
                n->device, ncclGetErrorString(st), last && *last ? " (" : "", last && *last ? last : "",
                last && *last ? ")" : "", what);
}

_Static_assert(MRCNN_NCCL_SUCCESS == (int)ncclSuccess && MRCNN_NCCL_IN_PROGRESS == (int)ncclInProgress,
               "nccl_start.h's result codes are NCCL's");

/* The start-up machine's hooks (nccl_start.h) on the real communicator. */
static int start_poll(void *ctx, int *state) {
    ncclResult_t st = ncclInProgress;
    ncclResult_t r = ncclCommGetAsyncError(*(ncclComm_t *)ctx, &st);
    *state = (int)st;
    return (int)r;
}
static double start_now(void *ctx) { return mrcnn_time_now(); }
static void start_pause(void *ctx) { usleep(1000); }
static void start_abort(void *ctx) { ncclCommAbort(*(ncclComm_t *)ctx); }

mrcnn_nccl *mrcnn_nccl_create(MPI_Comm comm, int rank, int world_size, int device, const char **why) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        if (why) *why = "no CUDA device visible";
        return NULL;
    }
    MRCNN_CHECK_CUDA(cudaSetDevice(device));
    ncclUniqueId id;
    if (rank == 0) MRCNN_CHECK_NCCL(ncclGetUniqueId(&id));
    MRCNN_CHECK_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm));
    mrcnn_nccl *n = MRCNN_CALLOC(1, sizeof *n, "NCCL communicator");
    n->rank = rank;
    n->device = device;
    /* Nonblocking init, so that a rank that never arrives is a timeout, not a hang: the
     * call returns ncclInProgress (not an error) and the communicator is polled until
     * ready, failed or MRCNN_NCCL_INIT_TIMEOUT seconds passed (nccl_start.c). */
    const char *tv = getenv("MRCNN_NCCL_INIT_TIMEOUT");
    double timeout_s = 0;
    if (!mrcnn_nccl_start_timeout(tv, &timeout_s))
        mrcnn_failf("NCCL", "MRCNN_NCCL_INIT_TIMEOUT", __FILE__, __LINE__,
                    "MRCNN_NCCL_INIT_TIMEOUT='%s' is not a positive number of seconds", tv);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    const ncclResult_t init = ncclCommInitRankConfig(&n->comm, world_size, id, rank, &cfg);
    const mrcnn_nccl_start start = {.poll = start_poll, .now = start_now, .pause = start_pause, .abort = start_abort,
                                    .ctx = &n->comm, .timeout_s = timeout_s};
    const mrcnn_nccl_start_result sr = mrcnn_nccl_start_wait(&start, (int)init);
    if (sr.status != MRCNN_NCCL_START_OK) {
        char msg[768];
        mrcnn_nccl_start_describe(&sr, rank, device, timeout_s, ncclGetErrorString((ncclResult_t)sr.code),
                                  ncclGetLastError(NULL), msg, sizeof msg);
        mrcnn_failf("NCCL", "ncclCommInitRankConfig", __FILE__, __LINE__, "%s", msg);
    }
    MRCNN_CHECK_CUDA(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
    MRCNN_CHECK_CUDA(cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming));
    return n;
}

void mrcnn_nccl_allreduce_avg(mrcnn_nccl *n, float *dev_buf, size_t count, void *ready_event, int bucket) {
    if (ready_event) MRCNN_CHECK_CUDA(cudaStreamWaitEvent(n->stream, (cudaEvent_t)ready_event, 0));
    ncclResult_t r = ncclAllReduce(dev_buf, dev_buf, count, ncclFloat32, ncclAvg, n->comm, n->stream);
    if (r != ncclSuccess && r != ncclInProgress) {
        const char *last = ncclGetLastError(n->comm);
        ncclCommAbort(n->comm);
        mrcnn_failf("NCCL", "ncclAllReduce", __FILE__, __LINE__,
                    "rank %d, device %d: all-reduce of gradient bucket %d (%zu floats) failed: %s%s%s%s", n->rank,
                    n->device, bucket, count, ncclGetErrorString(r), last && *last ? " (" : "", last && *last ? last : "",
                    last && *last ? ")" : "");
    }
    char what[64];
    snprintf(what, sizeof what, "after the all-reduce of gradient bucket %d", bucket);
    nccl_check_async(n, what);
}

/* Small step values (loss terms, flags, normalizer counts; dist.c): a bucket's
 * all-reduce, summed or averaged. */
void mrcnn_nccl_allreduce(mrcnn_nccl *n, float *dev_buf, size_t count, int mean, void *ready_event,
                          const char *what) {
    if (ready_event) MRCNN_CHECK_CUDA(cudaStreamWaitEvent(n->stream, (cudaEvent_t)ready_event, 0));
    ncclResult_t r =
        ncclAllReduce(dev_buf, dev_buf, count, ncclFloat32, mean ? ncclAvg : ncclSum, n->comm, n->stream);
    if (r != ncclSuccess && r != ncclInProgress) {
        const char *last = ncclGetLastError(n->comm);
        ncclCommAbort(n->comm);
        mrcnn_failf("NCCL", "ncclAllReduce", __FILE__, __LINE__, "rank %d, device %d: %s (%zu floats) failed: %s%s%s%s",
                    n->rank, n->device, what, count, ncclGetErrorString(r), last && *last ? " (" : "",
                    last && *last ? last : "", last && *last ? ")" : "");
    }
    char msg[160];
    snprintf(msg, sizeof msg, "after the %s", what);
    nccl_check_async(n, msg);
}

void *mrcnn_nccl_done_event(mrcnn_nccl *n) {
    MRCNN_CHECK_CUDA(cudaEventRecord(n->done, n->stream));
    return (void *)n->done;
}

void mrcnn_nccl_wait(mrcnn_nccl *n, double timeout_s) {
    double t0 = mrcnn_time_now();
    n->timeout_s = timeout_s;
    for (;;) {
        cudaError_t q = cudaStreamQuery(n->stream);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) MRCNN_CHECK_CUDA(q);
        nccl_check_async(n, "while waiting for the gradient all-reduces");
        if (timeout_s > 0 && mrcnn_time_now() - t0 > timeout_s) {
            fprintf(stderr,
                    "mrcnn error [rank %d] comm timeout: NCCL gradient all-reduce has not completed "
                    "after %.1f s (--comm-timeout): another rank died or hangs; aborting the job\n",
                    n->rank, timeout_s);
            fflush(stderr);
            ncclCommAbort(n->comm);
            alarm(10);
            MPI_Abort(MPI_COMM_WORLD, MRCNN_EXIT_COMM_TIMEOUT);
        }
        usleep(50);
    }
}

void mrcnn_nccl_destroy(mrcnn_nccl *n) {
    if (!n) return;
    ncclCommDestroy(n->comm);
    cudaEventDestroy(n->done);
    cudaStreamDestroy(n->stream);
    free(n);
}
