/* NCCL communicator for the gradient buckets (GPU=1 builds only). The unique id
 * travels by MPI_Bcast; all-reduces run on NCCL's own stream, ordered after the
 * compute stream's work by an event, so they overlap the rest of backward. Waits
 * poll ncclCommGetAsyncError instead of blocking, so a dead peer becomes an error
 * (ncclCommAbort, then MPI_Abort) within the comm timeout, never a silent hang. */
#include "mrcnn/cuda_check.h"
#include "mrcnn/dist.h"
#include "mrcnn/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mrcnn_nccl {
    ncclComm_t comm;
    cudaStream_t stream; // NCCL's stream, beside the compute stream
    cudaEvent_t ready;   // recorded on the compute stream before each launch
    int rank, device;
};

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
    /* Nonblocking init, so that a rank that never arrives is a timeout, not a hang. */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    MRCNN_CHECK_NCCL(ncclCommInitRankConfig(&n->comm, world_size, id, rank, &cfg));
    ncclResult_t st = ncclInProgress;
    while (st == ncclInProgress) {
        MRCNN_CHECK_NCCL(ncclCommGetAsyncError(n->comm, &st));
        if (st == ncclInProgress) usleep(1000);
    }
    MRCNN_CHECK_NCCL(st);
    MRCNN_CHECK_CUDA(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
    MRCNN_CHECK_CUDA(cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming));
    return n;
}

void mrcnn_nccl_allreduce_avg(mrcnn_nccl *n, float *dev_buf, size_t count, void *compute_stream) {
    MRCNN_CHECK_CUDA(cudaEventRecord(n->ready, (cudaStream_t)compute_stream));
    MRCNN_CHECK_CUDA(cudaStreamWaitEvent(n->stream, n->ready, 0));
    ncclResult_t r = ncclAllReduce(dev_buf, dev_buf, count, ncclFloat32, ncclAvg, n->comm, n->stream);
    if (r != ncclSuccess && r != ncclInProgress) MRCNN_CHECK_NCCL(r);
}

void mrcnn_nccl_wait(mrcnn_nccl *n, double timeout_s) {
    double t0 = mrcnn_time_now();
    for (;;) {
        cudaError_t q = cudaStreamQuery(n->stream);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) MRCNN_CHECK_CUDA(q);
        ncclResult_t st = ncclSuccess;
        MRCNN_CHECK_NCCL(ncclCommGetAsyncError(n->comm, &st));
        if (st != ncclSuccess && st != ncclInProgress) {
            ncclCommAbort(n->comm);
            mrcnn_failf("NCCL", "ncclCommGetAsyncError", __FILE__, __LINE__,
                        "NCCL reported '%s' during the gradient all-reduce on device %d: a peer rank "
                        "failed or the network is down",
                        ncclGetErrorString(st), n->device);
        }
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
    cudaEventDestroy(n->ready);
    cudaStreamDestroy(n->stream);
    free(n);
}

int mrcnn_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

double mrcnn_cuda_memory_used_mb(int device) {
    int prev = 0;
    size_t free_b = 0, total_b = 0;
    if (cudaGetDevice(&prev) != cudaSuccess) return 0;
    if (prev != device && cudaSetDevice(device) != cudaSuccess) return 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (prev != device) cudaSetDevice(prev);
    return e == cudaSuccess ? (double)(total_b - free_b) / (1024.0 * 1024.0) : 0;
}

const char *mrcnn_cuda_device_uuid(int device, char *buf, size_t len) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        snprintf(buf, len, "unknown (cudaGetDeviceProperties failed for device %d)", device);
        return buf;
    }
    const unsigned char *u = (const unsigned char *)p.uuid.bytes;
    snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x (%s)", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15],
             p.name);
    return buf;
}
