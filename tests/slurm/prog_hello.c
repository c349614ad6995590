/* The smallest real MPI job: srun --mpi=pmix starts it under the test cluster to
 * prove that PMIx wires the ranks together (an all-reduce must see every rank).
 * Usage: prog_hello [expected_world_size]; exits 1 when the world is not that size. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int one = 1, total = 0;
    MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    char host[256] = "?";
    gethostname(host, sizeof host);
    printf("hello from rank %d of %d on %s (allreduce saw %d ranks)\n", rank, size, host, total);
    int expected = argc > 1 ? atoi(argv[1]) : size;
    int ok = total == size && size == expected;
    if (!ok && rank == 0)
        fprintf(stderr, "prog_hello: world size %d, all-reduce %d, expected %d\n", size, total, expected);
    MPI_Finalize();
    return ok ? 0 : 1;
}
