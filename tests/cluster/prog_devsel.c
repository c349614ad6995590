/* Device selection and the NCCL bootstrap path across hosts, with the
 * product's own code (src/dist/dist.c):
 *   - mrcnn_dist_init's local rank (MPI_Comm_split_type SHARED, i.e. per host) and,
 *     for each VISIBLE count given, the device it picks (local rank % visible GPUs);
 *     every rank prints them beside what the launcher says its local rank is
 *     (OMPI_COMM_WORLD_LOCAL_RANK from mpirun, SLURM_LOCALID from srun), so the test
 *     can check the rule against both;
 *   - the NCCL bootstrap up to where a GPU is needed: a unique-id-sized buffer
 *     (NCCL_UNIQUE_ID_BYTES, 128) from rank 0 reaches every rank by the same MPI
 *     broadcast mrcnn uses (mrcnn_dist_bcast_bytes, under the watchdog), and
 *     mrcnn_dist_nccl_init is called with each rank's device: without a GPU it must
 *     decline with a reason (a GPU=0 build: "built without NCCL"; no device: "no CUDA
 *     device visible"), never crash or hang; with GPUs it builds the communicator.
 * usage: prog_devsel VISIBLE [VISIBLE...]   (one line per rank and count on stdout) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/dist.h"

#define UNIQUE_ID_BYTES 128

static const char *env_or(const char *name, const char *dflt) {
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: prog_devsel VISIBLE [VISIBLE...]\n");
        return 2;
    }
    char host[256] = "?";
    gethostname(host, sizeof host);
    mrcnn_dist d;
    int owns_mpi = 0;
    for (int a = 1; a < argc; a++) {
        int visible = atoi(argv[a]);
        mrcnn_dist_init(&d, &argc, &argv, MPI_THREAD_FUNNELED, visible, 30.0);
        owns_mpi |= d.owns_mpi; // only the first call starts MPI
        const char *why = "not tried (no device assigned)";
        int nccl = 0;
        if (visible > 0) nccl = mrcnn_dist_nccl_init(&d, &why);
        printf("devsel rank=%d size=%d host=%s local_rank=%d local_size=%d ompi_local_rank=%s slurm_localid=%s "
               "visible=%d device=%d nccl=%s%s\n",
               d.rank, d.world_size, host, d.local_rank, d.local_size, env_or("OMPI_COMM_WORLD_LOCAL_RANK", "-"),
               env_or("SLURM_LOCALID", "-"), visible, d.device, nccl ? "yes" : "no:", nccl ? "" : why);
        fflush(stdout);
        /* Keep the communicator for mrcnn_dist_finalize on the last round only. */
        if (a + 1 < argc) MPI_Comm_free(&d.comm);
    }
    /* The unique id's journey: rank 0's bytes, broadcast, checked everywhere. */
    unsigned char id[UNIQUE_ID_BYTES];
    for (int i = 0; i < UNIQUE_ID_BYTES; i++) id[i] = d.rank == 0 ? (unsigned char)(i * 37 + 11 + getpid()) : 0;
    mrcnn_dist_bcast_bytes(&d, id, sizeof id, "broadcast of the NCCL unique id");
    unsigned long sum = 0;
    for (int i = 0; i < UNIQUE_ID_BYTES; i++) sum = sum * 131 + id[i];
    printf("uniqueid rank=%d host=%s checksum=%lx\n", d.rank, host, sum);
    fflush(stdout);
    d.owns_mpi = owns_mpi;
    mrcnn_dist_finalize(&d);
    return 0;
}
