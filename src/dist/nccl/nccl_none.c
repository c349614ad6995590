/* Linked only into GPU=0 builds, in place of nccl_comm.c: NCCL is absent, and each call
 * that needs it fails saying so. */
#include "mrcnn/check.h"
#include "mrcnn/dist.h"

mrcnn_nccl *mrcnn_nccl_create(MPI_Comm comm, int rank, int world_size, int device, const char **why) {
    if (why) *why = "built without NCCL (GPU=0)";
    return NULL;
}

void mrcnn_nccl_allreduce_avg(mrcnn_nccl *n, float *dev_buf, size_t count, void *ready_event, int bucket) {
    MRCNN_CHECK(0, "NCCL all-reduce requested, but this build has no NCCL (built with GPU=0)");
}

void mrcnn_nccl_allreduce(mrcnn_nccl *n, float *dev_buf, size_t count, int mean, void *ready_event,
                          const char *what) {
    MRCNN_CHECK(0, "NCCL all-reduce (%s) requested, but this build has no NCCL (built with GPU=0)", what);
}

void *mrcnn_nccl_done_event(mrcnn_nccl *n) {
    MRCNN_CHECK(0, "NCCL event requested, but this build has no NCCL (built with GPU=0)");
    return NULL;
}

void mrcnn_nccl_wait(mrcnn_nccl *n, double timeout_s) {
    MRCNN_CHECK(0, "NCCL wait requested, but this build has no NCCL (built with GPU=0)");
}

void mrcnn_nccl_destroy(mrcnn_nccl *n) {}

