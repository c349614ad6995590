/* Loader throughput: bench_loader [INDEX] [--workers N] [--batch B] [--steps S]
 * [--warmup W] [--no-masks] [--min 800] [--max 1333]. Training transforms (multi-scale
 * off, flip on), steady state after the warm-up; prints images/s and the per-image
 * milliseconds of each stage (read = HDF5 on the I/O thread; decode, resize =
 * resize + flip + normalize + pad, masks = RLE decode + resize, on the workers) and
 * how long next() waited per step; --step-ms X sleeps X ms after each batch, as a
 * training step would, to show the prefetch overlap. Run under mpirun for several ranks. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/resource.h>
#include <time.h>

#include "mrcnn/data.h"
#include "mrcnn/log.h"

static double process_cpu(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int main(int argc, char **argv) {
    int provided = 0, rank = 0, size = 1;
    MPI_Init_thread(&argc, &argv, MRCNN_DATA_MPI_THREAD_LEVEL, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mrcnn_log_set_rank(rank, size);
    /* Without an INDEX (as bench/run_bench.sh runs it): 64 COCO-like images made by the
     * mrcnn-prep next to this build, in a temporary folder. */
    char index[4200] = "", tmp[64] = "";
    int first_opt = 2;
    if (argc >= 2 && argv[1][0] != '-') {
        snprintf(index, sizeof index, "%s", argv[1]);
    } else {
        first_opt = 1;
        if (rank == 0) {
            snprintf(tmp, sizeof tmp, "/tmp/mrcnn_bench_loader_XXXXXX");
            if (!mkdtemp(tmp)) MPI_Abort(MPI_COMM_WORLD, 1);
            char dir[4096], cmd[12288];
            snprintf(dir, sizeof dir, "%s", argv[0]);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
            snprintf(cmd, sizeof cmd,
                     "%s/../mrcnn-prep shapes --out %s --train 64 --val 0 --size 480x640 --quality 90 --noise 32 > /dev/null && "
                     "%s/../mrcnn-prep coco --annotations %s/annotations/instances_train.json --images %s/train --out %s --name b > /dev/null",
                     dir, tmp, dir, tmp, tmp, tmp);
            printf("bench_loader: no INDEX given; making 64 images of 640x480 in %s\n", tmp);
            if (system(cmd) != 0) {
                fprintf(stderr, "bench_loader: could not make the data: %s\n", cmd);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            snprintf(index, sizeof index, "%s/b-index.h5", tmp);
        }
        MPI_Bcast(index, sizeof index, MPI_CHAR, 0, MPI_COMM_WORLD);
    }
    mrcnn_loader_opts o;
    memset(&o, 0, sizeof o);
    o.index_path = index;
    o.comm = MPI_COMM_WORLD;
    o.batch_size = 2;
    o.train = 1;
    o.seed = 1;
    o.num_min_sizes = 1;
    o.min_sizes[0] = 800;
    o.max_size = 1333;
    o.size_divisibility = 32;
    o.flip = 1;
    const float mean[3] = {123.675f, 116.28f, 103.53f}, std_[3] = {58.395f, 57.12f, 57.375f};
    memcpy(o.pixel_mean, mean, sizeof mean);
    memcpy(o.pixel_std, std_, sizeof std_);
    o.num_workers = 1;
    o.masks = 1;
    o.prefetch = 2;
    int steps = 100, warmup = 5;
    double step_ms = 0; /* a simulated training step (sleeping, as while a GPU computes) */
    for (int i = first_opt; i < argc; i++) {
        if (!strcmp(argv[i], "--workers") && i + 1 < argc) o.num_workers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) o.batch_size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min") && i + 1 < argc) o.min_sizes[0] = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) o.max_size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-masks")) o.masks = 0;
        else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc) step_ms = atof(argv[++i]);
        else {
            fprintf(stderr, "bench_loader: unknown option %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    mrcnn_loader *l = mrcnn_loader_create(&o);
    const mrcnn_data_batch *b = NULL;
    for (int s = 0; s < warmup; s++) b = mrcnn_loader_next(l);
    mrcnn_loader_stats s0, s1;
    mrcnn_loader_stats_get(l, &s0);
    const double t0 = mrcnn_time_now(), c0 = process_cpu();
    int64_t inst = 0;
    for (int s = 0; s < steps; s++) {
        b = mrcnn_loader_next(l);
        inst += b->num_instances;
        if (step_ms > 0) {
            struct timespec ts = {(time_t)(step_ms / 1000), (long)(fmod(step_ms, 1000.0) * 1e6)};
            nanosleep(&ts, NULL);
        }
    }
    const double dt = mrcnn_time_now() - t0, cpu = process_cpu() - c0;
    mrcnn_loader_stats_get(l, &s1);
    const double imgs = (double)steps * o.batch_size;
    const double done = (double)(s1.images - s0.images);
    double local[3] = {imgs / dt, dt, cpu}, total[3] = {0, 0, 0};
    MPI_Reduce(local, total, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("loader: %d rank(s) x %d worker(s), batch %d, %s, last canvas %dx%d, %.1f instances/image\n", size,
               o.num_workers, o.batch_size, o.masks ? "masks on" : "masks off", b->height, b->width, inst / imgs);
        printf("  throughput  %.1f images/s on rank 0 (wall), %.1f images/s all ranks\n", imgs / dt, total[0]);
        printf("  per core    %.1f images per CPU second (process CPU time, all threads: %.2f s for %.0f images)\n",
               imgs * size / total[2], total[2], imgs * size);
        printf("  per image   read %.2f ms (I/O thread, wall), CPU: decode %.2f ms, resize+flip+normalize+pad %.2f ms, masks %.2f ms\n",
               1e3 * (s1.read_s - s0.read_s) / done, 1e3 * (s1.decode_s - s0.decode_s) / done,
               1e3 * (s1.resize_s - s0.resize_s) / done, 1e3 * (s1.masks_s - s0.masks_s) / done);
        printf("  per step    next() waited %.2f ms on average (%d steps%s)\n", 1e3 * (s1.wait_s - s0.wait_s) / steps, steps,
               step_ms > 0 ? ", each followed by a simulated step" : "");
        if (step_ms > 0) printf("  simulated   %.1f ms steps: the caller spent %.1f%% of the wall time waiting for data\n", step_ms,
                                100.0 * (s1.wait_s - s0.wait_s) / dt);
    }
    mrcnn_loader_destroy(l);
    if (rank == 0 && tmp[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        if (system(cmd) != 0) fprintf(stderr, "bench_loader: could not remove %s\n", tmp);
    }
    MPI_Finalize();
    return 0;
}
