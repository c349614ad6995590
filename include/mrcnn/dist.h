/* Data parallelism: MPI bootstrap, gradient buckets, the comm watchdog, NCCL.
 *
 * One process per GPU (or per CPU slot). Rank 0's weights are broadcast at start;
 * after that every rank applies the same averaged gradients, so weights stay equal
 * without further traffic. Gradients live in one flat arena (arena.h) and are
 * all-reduced in a few large contiguous buckets, in reverse parameter order,
 * launched as backward completes them so that communication overlaps compute:
 * NCCL on a second CUDA stream when the build and the device have it, otherwise
 * MPI_Iallreduce (CPU runs, builds without NCCL; GPU gradients are staged through
 * host memory then).
 *
 * Hangs: every blocking wait on a collective is armed on a watchdog thread; a wait
 * longer than the comm timeout (`--comm-timeout`) prints which collective and rank
 * and takes the job down with MPI_Abort (exit code MRCNN_EXIT_COMM_TIMEOUT), so a
 * dead or stopped rank never leaves the others hanging silently. */
#ifndef MRCNN_DIST_H
#define MRCNN_DIST_H

#include <mpi.h>
#include <stddef.h>

#include "mrcnn/arena.h"
#include "mrcnn/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit code of a job that a comm timeout took down. */
#define MRCNN_EXIT_COMM_TIMEOUT 3

typedef struct mrcnn_nccl mrcnn_nccl; // opaque; src/dist/nccl/nccl_comm.c

typedef struct mrcnn_dist {
    MPI_Comm comm;       // a duplicate of MPI_COMM_WORLD
    int rank, world_size;
    int local_rank, local_size; // within the node (MPI_Comm_split_type SHARED)
    int device;          // GPU index (local_rank % visible GPUs), -1 on the CPU
    int thread_level;    // provided by MPI_Init_thread
    int owns_mpi;        // 1 when mrcnn_dist_init called MPI_Init_thread
    double comm_timeout_s; // 0: no watchdog
    mrcnn_nccl *nccl;    // NULL unless mrcnn_dist_nccl_init succeeded
} mrcnn_dist;

/* MPI_Init_thread asking for thread_level (the loader's, MRCNN_DATA_MPI_THREAD_LEVEL:
 * its I/O thread makes MPI-IO calls while training runs collectives); fails naming
 * both levels when the library provides less. Then rank, world size,
 * local rank and, when visible_gpus > 0, device = local_rank % visible_gpus.
 * comm_timeout_s > 0 starts the watchdog. Safe to call when MPI is already up. */
void mrcnn_dist_init(mrcnn_dist *d, int *argc, char ***argv, int thread_level, int visible_gpus,
                     double comm_timeout_s);
/* Stops the watchdog, frees NCCL, finalizes MPI when init started it. */
void mrcnn_dist_finalize(mrcnn_dist *d);

/* Rank 0's values of every parameter to every rank (host or device arena). */
void mrcnn_dist_broadcast_arena(const mrcnn_dist *d, const mrcnn_backend *be, mrcnn_arena *params);
/* In place over n values, under the watchdog. */
void mrcnn_dist_allreduce_sum_f64(const mrcnn_dist *d, double *vals, int n, const char *what);
void mrcnn_dist_barrier(const mrcnn_dist *d, const char *what);
void mrcnn_dist_bcast_bytes(const mrcnn_dist *d, void *buf, size_t bytes, const char *what);
/* Sum (mean = 0) or mean (1: sum / ranks) over the ranks of a small fp32 tensor on be's
 * device, in place, with no host read (MPI on the CPU backend's memory, NCCL in the
 * compute stream's order on the GPU; a GPU without NCCL stages through the host): the
 * step's loss terms and flags, the loss normalizers' counts. Collective. */
void mrcnn_dist_allreduce_tensor(const mrcnn_dist *d, const mrcnn_backend *be, mrcnn_tensor *t, int mean,
                                 const char *what);

/* NCCL communicator over d's ranks (unique id by MPI_Bcast, ncclCommInitRank on
 * d->device). Returns 0 and sets *why when the build has no NCCL. */
int mrcnn_dist_nccl_init(mrcnn_dist *d, const char **why);

/* ---- comm watchdog ---- */
/* Starts the watchdog thread (once per process). */
void mrcnn_watchdog_start(double timeout_s);
void mrcnn_watchdog_stop(void);
/* Marks the start of a blocking wait on `what` (a string literal); disarm when it
 * returns. Nesting is not supported: arm/disarm pairs around each wait. */
void mrcnn_watchdog_arm(const char *what);
void mrcnn_watchdog_disarm(void);

/* ---- gradient buckets ---- */
typedef struct mrcnn_bucket {
    size_t offset, bytes;  // byte range of the grads arena
    int first_param, last_param; // arena indices, first_param <= last_param
    int n_params, n_ready;
    int launched;
    MPI_Request req;
} mrcnn_bucket;

typedef struct mrcnn_buckets {
    const mrcnn_dist *dist;
    const mrcnn_backend *be; // the grads' backend (its compute stream's events, staging)
    mrcnn_arena *grads;
    mrcnn_bucket *b;       // b[0] holds the last parameters (backward's first)
    int n_buckets;
    int next_launch;       // buckets launch in order, the same on every rank
    int *param_bucket;     // (n_params) bucket of each parameter
    unsigned char *param_ready; // (n_params)
    float *staging;        // host copy of a GPU arena (MPI path only), or NULL
    int use_nccl;
    double wait_s;         // seconds spent in mrcnn_buckets_wait (last step)
    int n_early;           // buckets launched during backward (before wait), last step
    /* NCCL path: each bucket's all-reduce waits on ready_ev (recorded on the compute
     * stream when the bucket is complete), and the compute stream waits for NCCL's
     * stream before the optimizer, all on the device. host_wait = 1 (the default)
     * also has mrcnn_buckets_wait poll the all-reduces to completion on the host, so a
     * dead peer is a comm-timeout error there; a trainer that calls mrcnn_buckets_drain
     * before its log-period read sets 0 and keeps the step free of host waits. */
    void *ready_ev;        // be->stream event, NULL unless use_nccl
    int host_wait;
} mrcnn_buckets;

#define MRCNN_BUCKET_BYTES_DEFAULT ((size_t)25 << 20)

/* Buckets of about bucket_bytes (at least one parameter each) over the grads arena,
 * in reverse parameter order. Uses NCCL when dist->nccl is set and the arena is on
 * the GPU. */
void mrcnn_buckets_init(mrcnn_buckets *bk, const mrcnn_dist *d, const mrcnn_backend *be,
                        mrcnn_arena *grads, size_t bucket_bytes);
void mrcnn_buckets_free(mrcnn_buckets *bk);
/* Before each step's backward: every parameter not ready. */
void mrcnn_buckets_reset(mrcnn_buckets *bk);
/* Parameter param_index's gradient is final for this step; launches every bucket
 * that is now complete (in bucket order). Marking twice in one step is an error. */
void mrcnn_buckets_mark_ready(mrcnn_buckets *bk, int param_index);
/* Launches the buckets not yet launched (parameters without gradients this step
 * count as ready), waits for all, and leaves the average over ranks in the arena. */
void mrcnn_buckets_wait(mrcnn_buckets *bk);
/* Waits on the host until the queued all-reduces finished (NCCL path; nothing on the
 * MPI path, whose wait already finished them), failing with a comm timeout when a
 * peer is gone. With host_wait = 0, call it before reading the step's results. */
void mrcnn_buckets_drain(mrcnn_buckets *bk);

/* ---- NCCL glue (src/dist/nccl/nccl_comm.c; GPU=0 builds get nccl_none.c, whose calls report
 * "built without NCCL") ---- */
mrcnn_nccl *mrcnn_nccl_create(MPI_Comm comm, int rank, int world_size, int device, const char **why);
/* Average of count floats at dev_buf over the ranks, on NCCL's own stream; it starts
 * after ready_event (a cudaEvent_t from the backend's be->stream.event_record, or NULL)
 * and is checked with ncclCommGetAsyncError at once; bucket names it in errors. */
void mrcnn_nccl_allreduce_avg(mrcnn_nccl *n, float *dev_buf, size_t count, void *ready_event, int bucket);
/* An event (cudaEvent_t) marking every all-reduce queued so far, for the backend's
 * be->stream.event_wait: the compute stream then waits on the device, not the host. */
void *mrcnn_nccl_done_event(mrcnn_nccl *n);
/* Sum (mean = 0) or average of count floats at dev_buf over the ranks, in place, on
 * NCCL's stream after ready_event (or NULL); what names it in errors
 * (mrcnn_dist_allreduce_tensor). */
void mrcnn_nccl_allreduce(mrcnn_nccl *n, float *dev_buf, size_t count, int mean, void *ready_event,
                          const char *what);
/* Waits for every queued all-reduce, polling ncclCommGetAsyncError; aborts the job
 * after timeout_s (0: no limit) naming the rank. */
void mrcnn_nccl_wait(mrcnn_nccl *n, double timeout_s);
void mrcnn_nccl_destroy(mrcnn_nccl *n);

#ifdef __cplusplus
}
#endif
#endif
