/* The start-up of a non-blocking NCCL communicator (src/dist/nccl/nccl_comm.c) as a small
 * host-only state machine, so that its decisions can be driven without a GPU or NCCL
 * (tests/unit/test_nccl_start.c).
 *
 * With config.blocking = 0, ncclCommInitRankConfig returns at once, ncclSuccess or
 * ncclInProgress (nccl.h, "Creating a communication with options" in NCCL's guide): the
 * communicator is usable only once ncclCommGetAsyncError reports ncclSuccess;
 * ncclInProgress there means still connecting, anything else failed. Neither
 * in-progress result is an error. A peer that never joins would keep it in progress
 * forever, so the wait has a timeout, after which the communicator is aborted
 * (ncclCommAbort works on one still being set up). */
#ifndef MRCNN_NCCL_START_H
#define MRCNN_NCCL_START_H

#include <stddef.h>

/* ncclResult_t's values that the machine tells apart (fixed by NCCL's ABI; nccl_comm.c
 * checks them against nccl.h at compile time). */
#define MRCNN_NCCL_SUCCESS 0
#define MRCNN_NCCL_IN_PROGRESS 7
/* MRCNN_NCCL_INIT_TIMEOUT unset: seconds a rank waits for every peer to join. */
#define MRCNN_NCCL_INIT_TIMEOUT_DEFAULT 300.0

typedef struct mrcnn_nccl_start {
    /* ncclCommGetAsyncError: returns its own result, *state the communicator's */
    int (*poll)(void *ctx, int *state);
    double (*now)(void *ctx);  // seconds on a monotonic clock
    void (*pause)(void *ctx);  // between two polls
    void (*abort)(void *ctx);  // ncclCommAbort: on a timeout or a failure once the comm exists
    void *ctx;
    double timeout_s;          // > 0
} mrcnn_nccl_start;

typedef enum {
    MRCNN_NCCL_START_OK = 0,
    MRCNN_NCCL_START_FAILED,  // the init call, a poll or the communicator reported code
    MRCNN_NCCL_START_TIMEOUT, // still in progress after timeout_s: aborted
} mrcnn_nccl_start_status;

typedef struct mrcnn_nccl_start_result {
    mrcnn_nccl_start_status status;
    int code;          // the failing ncclResult_t (FAILED), else MRCNN_NCCL_SUCCESS / _IN_PROGRESS
    const char *stage; // FAILED: which call reported it ("ncclCommInitRankConfig", ...)
    double waited_s;   // from the first poll to the last
    int polls;
    int aborted;       // abort was called
} mrcnn_nccl_start_result;

/* init_result: what ncclCommInitRankConfig returned. Polls until the communicator is
 * ready, failed or the timeout passed. */
mrcnn_nccl_start_result mrcnn_nccl_start_wait(const mrcnn_nccl_start *s, int init_result);

/* MRCNN_NCCL_INIT_TIMEOUT's value (NULL or empty: the default) in *seconds; 0 when it is
 * not a positive number. */
int mrcnn_nccl_start_timeout(const char *value, double *seconds);

/* The failure message for r: rank, device, what NCCL said (error: ncclGetErrorString of
 * r->code; last: ncclGetLastError, may be NULL or empty) or, after a timeout, the
 * seconds waited and the way to wait longer. */
void mrcnn_nccl_start_describe(const mrcnn_nccl_start_result *r, int rank, int device, double timeout_s,
                               const char *error, const char *last, char *buf, size_t n);

#endif
