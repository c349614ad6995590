/* CPU forward+backward time per image of the whole Mask R-CNN training step at
 * 256x256 (2 images per batch), tiny and R50-FPN configs, beside torchvision in the
 * same run with the same thread count and the same weights and batch (written by
 * bench/bench_model.py). Without torch it times the C side alone on random weights.
 * Env: OMP_NUM_THREADS (threads for both), PY_TORCH (default /usr/bin/python3),
 * BENCH_ITERS (timed steps, default 2). */
#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/config.h"
#include "mrcnn/log.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/model.h"

#include <hdf5.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SIZE 256
#define NIMG 2

static void *read_ds(hid_t f, const char *name, hid_t type, size_t elem, hsize_t *dims) {
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    MRCNN_CHECK(ds >= 0, "bench input: no dataset %s", name);
    hid_t sp = H5Dget_space(ds);
    int nd = H5Sget_simple_extent_ndims(sp);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= dims[d];
    void *p = MRCNN_CALLOC(n, elem, name);
    MRCNN_CHECK_HDF5(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, p), name);
    H5Sclose(sp);
    H5Dclose(ds);
    return p;
}

/* A batch: from DIR/input.h5 when torch wrote one, else 4 boxes per image drawn here. */
typedef struct {
    float *img;
    int hw[NIMG * 2];
    mrcnn_image_gt gt[NIMG];
    void *own[NIMG * 3];
} bench_batch;

static void batch_load(bench_batch *b, const char *dir) {
    memset(b, 0, sizeof *b);
    char path[1024];
    snprintf(path, sizeof path, "%s/input.h5", dir);
    for (int i = 0; i < NIMG; i++) b->hw[2 * i] = b->hw[2 * i + 1] = SIZE;
    if (dir[0] && access(path, R_OK) == 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hsize_t dims[8];
        b->img = read_ds(f, "images", H5T_NATIVE_FLOAT, sizeof(float), dims);
        for (int i = 0; i < NIMG; i++) {
            char name[64];
            snprintf(name, sizeof name, "gt/%d/boxes", i);
            b->own[3 * i] = read_ds(f, name, H5T_NATIVE_FLOAT, sizeof(float), dims);
            b->gt[i].n = (int)dims[0];
            snprintf(name, sizeof name, "gt/%d/labels", i);
            b->own[3 * i + 1] = read_ds(f, name, H5T_NATIVE_INT32, sizeof(int32_t), dims);
            snprintf(name, sizeof name, "gt/%d/masks", i);
            b->own[3 * i + 2] = read_ds(f, name, H5T_NATIVE_UINT8, 1, dims);
        }
        H5Fclose(f);
    } else {
        b->img = MRCNN_CALLOC((size_t)NIMG * SIZE * SIZE * 3, sizeof(float), "bench images");
        for (size_t j = 0; j < (size_t)NIMG * SIZE * SIZE * 3; j++) b->img[j] = (float)((j * 7919) % 211) / 105.0f - 1;
        for (int i = 0; i < NIMG; i++) {
            float *bx = MRCNN_CALLOC(16, sizeof(float), "boxes");
            int32_t *lb = MRCNN_CALLOC(4, sizeof(int32_t), "labels");
            uint8_t *mk = MRCNN_CALLOC((size_t)4 * SIZE * SIZE, 1, "masks");
            for (int g = 0; g < 4; g++) {
                float x = 20 + 50 * g, y = 30 + 40 * g, w = 40 + 10 * g, h = 50;
                float v[4] = {x, y, x + w, y + h};
                memcpy(bx + 4 * g, v, sizeof v);
                lb[g] = 1 + g % 3;
                for (int yy = (int)y; yy < (int)(y + h); yy++)
                    for (int xx = (int)x; xx < (int)(x + w); xx++) mk[(size_t)g * SIZE * SIZE + yy * SIZE + xx] = 1;
            }
            b->own[3 * i] = bx;
            b->own[3 * i + 1] = lb;
            b->own[3 * i + 2] = mk;
            b->gt[i].n = 4;
        }
    }
    for (int i = 0; i < NIMG; i++) {
        b->gt[i].boxes = b->own[3 * i];
        b->gt[i].labels = b->own[3 * i + 1];
        b->gt[i].masks = b->own[3 * i + 2];
    }
}

static void batch_free(bench_batch *b) {
    free(b->img);
    for (int i = 0; i < NIMG * 3; i++) free(b->own[i]);
}

static double bench_c(const char *config, const char *sets, const char *weights, const bench_batch *bb,
                      int iters) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_load(&cfg, config);
    if (sets) mrcnn_config_set(&cfg, sets, "bench");
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, be);
    if (weights && access(weights, R_OK) == 0) mrcnn_checkpoint_load_model(&m, weights);
    else mrcnn_model_init_random(&m, 1);
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    mrcnn_batch b = {.image_hw = bb->hw, .gt = bb->gt};
    double best = 1e30;
    for (int it = 0; it <= iters; it++) {
        double t0 = mrcnn_time_now();
        b.images = mrcnn_ws_tensor(&ws, MRCNN_DTYPE_F32, 4, (int64_t[]){NIMG, SIZE, SIZE, 3});
        be->mem.write(be, &b.images, bb->img);
        mrcnn_model_zero_grads(&m);
        mrcnn_pass st;
        mrcnn_model_train_step(&m, &ws, &b, true, &st);
        be->mem.sync(be);
        double dt = mrcnn_time_now() - t0;
        if (it == 0) {
            mrcnn_model_read_losses(&m, &st, &st.losses);
            printf("  (C %s: loss %.4f, rois %d, fg %d, peak activations %.0f MB)\n", config, st.losses.total,
                   st.n_rois, st.n_fg, ws.peak_bytes / 1e6);
        }
        if (it > 0 && dt < best) best = dt;
        mrcnn_pass_free(&st);
        mrcnn_ws_reset(&ws);
    }
    mrcnn_ws_free(&ws);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
    return best / NIMG;
}

int main(void) {
    int threads = omp_get_max_threads();
    int iters = getenv("BENCH_ITERS") ? atoi(getenv("BENCH_ITERS")) : 2;
    const char *py = getenv("PY_TORCH") ? getenv("PY_TORCH") : "/usr/bin/python3";
    char dir[] = "/tmp/mrcnn_bench_model_XXXXXX";
    MRCNN_CHECK(mkdtemp(dir) != NULL, "bench_model: cannot create a temporary directory");
    printf("bench_model: training forward+backward per image, %d images of %dx%d per batch, %d threads "
           "(OMP_NUM_THREADS), OpenBLAS %s\n", NIMG, SIZE, SIZE, threads, getenv("OPENBLAS_NUM_THREADS") ?
           getenv("OPENBLAS_NUM_THREADS") : "(default threads)");
    fflush(stdout);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s bench/bench_model.py --dir %s --threads %d --size %d --images %d --iters %d", py,
             dir, threads, SIZE, NIMG, iters);
    int have_torch = system(cmd) == 0;
    if (!have_torch) printf("torchvision side unavailable (%s failed): C only, random weights\n", py);
    bench_batch bb;
    batch_load(&bb, have_torch ? dir : "");
    const char *names[2] = {"tiny", "r50"};
    const char *configs[2] = {"configs/tiny.yaml", "configs/r50_fpn_1x.yaml"};
    printf("%-6s %14s %14s %8s\n", "model", "C ms/image", "torch ms/image", "C/torch");
    double res[2][2];
    for (int k = 0; k < 2; k++) {
        char w[1100], tf[1100];
        snprintf(w, sizeof w, "%s/%s.h5", dir, names[k]);
        res[k][0] = bench_c(configs[k], NULL, have_torch ? w : NULL, &bb, iters);
        res[k][1] = -1;
        snprintf(tf, sizeof tf, "%s/torch_%s.txt", dir, names[k]);
        FILE *f = fopen(tf, "r");
        if (f) {
            if (fscanf(f, "%lf", &res[k][1]) != 1) res[k][1] = -1;
            fclose(f);
            unlink(tf);
        }
        unlink(w);
    }
    for (int k = 0; k < 2; k++) {
        if (res[k][1] > 0)
            printf("%-6s %14.1f %14.1f %8.2f\n", names[k], res[k][0] * 1e3, res[k][1] * 1e3, res[k][0] / res[k][1]);
        else
            printf("%-6s %14.1f %14s %8s\n", names[k], res[k][0] * 1e3, "-", "-");
    }
    snprintf(cmd, sizeof cmd, "%s/input.h5", dir);
    unlink(cmd);
    rmdir(dir);
    batch_free(&bb);
    return 0;
}
