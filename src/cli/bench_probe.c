/* The all-reduce probe of `mrcnn bench scaling`, one process per rank under the same
 * launcher as the training runs. It builds the model's gradient arena from the config
 * (the trainer's exact layout and bucket cut) and times, through the trainer's own
 * bucket code (dist.h):
 *   alone:  every bucket launched at once and waited for, nothing else running: the
 *           all-reduce cost per step;
 *   behind backward: parameters marked ready one by one in backward order, spread over a
 *           synthetic backward of D ms (spinning, like compute; --backward-x K: K times the
 *           all-reduce time just measured), then the wait: the
 *           exposed part (plus any time backward ran past D ms because communication
 *           progressed inside it). hidden = 1 - exposed / alone.
 * The best of the repetitions (see below). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_scaling.h"
#include "mrcnn/check.h"
#include "mrcnn/dist.h"
#include "mrcnn/log.h"
#include "mrcnn/model.h"

static void fill_ones(mrcnn_arena *g) {
    float *p = (float *)g->base;
    for (size_t i = 0; i < g->size / sizeof(float); i++) p[i] = 1.0f;
}

/* A backward pass of d_ms from t0 that does nothing but mark the gradients ready, last
 * parameter first, each when its share of the bytes is due. */
static void synthetic_backward(mrcnn_buckets *bk, const mrcnn_arena *g, double t0, double d_ms, double total) {
    double done = 0;
    for (int i = g->n_entries - 1; i >= 0; i--) {
        done += (double)mrcnn_tensor_nbytes(&g->entries[i].tensor);
        double until = t0 + 1e-3 * d_ms * done / total;
        while (mrcnn_time_now() < until) {
        }
        mrcnn_buckets_mark_ready(bk, i);
    }
}

/* The probe's result file (v: all-reduce, exposed and backward ms); 1 when it cannot be written. */
static int write_result(const char *result, int world_size, const mrcnn_buckets *bk, const mrcnn_arena *g,
                        double total, const double *v) {
    int rc = 1;
    FILE *f = fopen(result, "w");
    if (f) {
        fprintf(f, "ranks %d\nbuckets %d\nbytes %.0f\nallreduce_ms %.6f\nexposed_ms %.6f\nbackward_ms %.6f\n",
                world_size, bk->n_buckets, total, v[0], v[1], v[2]);
        /* The layout, for writing a --model timeline: bucket, bytes, its parameters
         * from the first to become ready (backward order) to the last. */
        for (int b = 0; b < bk->n_buckets; b++)
            fprintf(f, "bucket %d %zu %s %s\n", b, bk->b[b].bytes, g->entries[bk->b[b].last_param].name,
                    g->entries[bk->b[b].first_param].name);
        rc = fclose(f) == 0 ? 0 : 1;
    }
    if (rc) fprintf(stderr, "mrcnn bench scaling --probe: cannot write %s\n", result);
    return rc;
}

int bench_scaling_probe(int argc, char **argv) {
    const char *config_path = NULL, *result = NULL;
    double bucket_mb = 0, backward_ms = 0, backward_x = 0;
    int reps = 7;
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    char err[1024];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--probe")) continue;
        if (!v) {
            fprintf(stderr, "mrcnn bench scaling --probe: '%s' wants a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--config")) {
            config_path = v;
            if (!mrcnn_config_try_load(&cfg, config_path, err, sizeof err)) {
                fprintf(stderr, "mrcnn bench scaling --probe: %s\n", err);
                return 1;
            }
        } else if (!strcmp(a, "--set")) {
            if (!mrcnn_config_try_set(&cfg, v, "--set", err, sizeof err)) {
                fprintf(stderr, "mrcnn bench scaling --probe: %s\n", err);
                return 1;
            }
        } else if (!strcmp(a, "--bucket-mb")) bucket_mb = atof(v);
        else if (!strcmp(a, "--backward-ms")) backward_ms = atof(v);
        else if (!strcmp(a, "--backward-x")) backward_x = atof(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--result")) result = v;
        else {
            fprintf(stderr, "mrcnn bench scaling --probe: unexpected argument '%s'\n", a);
            return 2;
        }
        i++;
    }
    if (!result || reps < 1 || reps > 1000 || bucket_mb < 0 || backward_ms < 0 || backward_x < 0) {
        fprintf(stderr, "mrcnn bench scaling --probe: needs --result FILE, --reps 1..1000, --bucket-mb >= 0, "
                        "--backward-ms >= 0 (or --backward-x K: K times the measured all-reduce)\n");
        return 2;
    }
    mrcnn_dist d;
    mrcnn_dist_init(&d, &argc, &argv, MPI_THREAD_FUNNELED, 0, 120.0);
    mrcnn_log_set_rank(d.rank, d.world_size);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, be);
    mrcnn_arena *g = &m.params.grads;
    size_t bucket_bytes = bucket_mb > 0 ? (size_t)(bucket_mb * (1 << 20)) : MRCNN_BUCKET_BYTES_DEFAULT;
    mrcnn_buckets bk;
    mrcnn_buckets_init(&bk, &d, be, g, bucket_bytes);
    double total = 0;
    for (int i = 0; i < g->n_entries; i++) total += (double)mrcnn_tensor_nbytes(&g->entries[i].tensor);

    /* Each repetition measures the pair back to back (load on a shared machine drifts
     * over seconds) and the best pair is kept: interference only adds time. The rank
     * that arrives last at a collective waits only for the communication, the others
     * also for it, so each time is the minimum over ranks. */
    double v[3] = {0, 0, 0}, best = -1e300; // all-reduce ms, exposed ms, backward ms
    for (int r = 0; r < reps; r++) {
        fill_ones(g);
        mrcnn_dist_barrier(&d, "probe barrier");
        double t0 = mrcnn_time_now();
        mrcnn_buckets_reset(&bk);
        mrcnn_buckets_wait(&bk);
        double alone = 1e3 * (mrcnn_time_now() - t0);
        MRCNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &alone, 1, MPI_DOUBLE, MPI_MIN, d.comm));
        double d_ms = backward_x > 0 ? backward_x * alone : backward_ms; // the same on every rank

        fill_ones(g);
        mrcnn_dist_barrier(&d, "probe barrier");
        mrcnn_buckets_reset(&bk);
        t0 = mrcnn_time_now();
        synthetic_backward(&bk, g, t0, d_ms, total);
        double tw = mrcnn_time_now();
        mrcnn_buckets_wait(&bk);
        /* On the CPU, MPI progresses inside the MPI_Test calls that marking makes: work
         * done there stretches backward, which is not hiding it. Exposed = the wait plus
         * the stretch. */
        double bwd = 1e3 * (tw - t0);
        double ex[2] = {1e3 * (mrcnn_time_now() - tw) + (bwd > d_ms ? bwd - d_ms : 0.0), -bwd};
        MRCNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, ex, 2, MPI_DOUBLE, MPI_MIN, d.comm));
        double hidden = alone > 0 ? 1.0 - ex[0] / alone : 1.0;
        if (hidden > best) {
            best = hidden;
            v[0] = alone;
            v[1] = ex[0];
            v[2] = -ex[1];
        }
    }
    if (d.world_size == 1) v[0] = v[1] = 0; // nothing to reduce: only timer noise
    int rc = d.rank == 0 ? write_result(result, d.world_size, &bk, g, total, v) : 0;
    mrcnn_buckets_free(&bk);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
    mrcnn_dist_finalize(&d);
    return rc;
}
