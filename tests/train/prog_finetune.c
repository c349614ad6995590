/* The trainer's real step (mrcnn_trainer_step: clipping, momentum, weight decay and the
 * folded-BN preconditioner) on one fixed batch, for tests/train/finetune_tv.py, which
 * replays it with torchvision's parameterization and torch.optim.SGD.
 *   prog_finetune CONFIG WEIGHTS.h5 INPUT.h5 OUTPUT.h5 --steps K [--set KEY=VALUE]...
 *                 [--save CKPT.h5] [--no-precond]
 * INPUT.h5: as tests/model/prog_net_run.c reads it (/images (N, H, W, 3) f32,
 * /image_hw (N, 2) i32, /gt/<i>/{boxes,labels,masks}).
 * OUTPUT.h5 (project layout, one dataset per trainable parameter <name>):
 *   /init/<name>               the weights after the load (folded)
 *   /fold_scale/<name>         (K) the scale s folded into a conv weight, when it has one
 *   /step/<k>/grad/<name>      step k's averaged gradient dL/dW' (before clipping)
 *   /step/<k>/values/<name>    the weights after step k
 *   /step/<k>/grad_scale       (1) the gradient multiplier step k applied (the clip factor)
 * --save: the model after the K steps through mrcnn_checkpoint_save_model.
 * --no-precond: the trainer without the preconditioner (the update and the clipping norm
 * take dL/dW' as if it were dL/dW): how mrcnn trained a folded conv before, so that
 * the test shows it can tell the two apart. */
#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/config.h"
#include "mrcnn/dist.h"
#include "mrcnn/model.h"
#include "mrcnn/model_trainable.h"
#include "mrcnn/step_ctl.h"
#include "mrcnn/trainer.h"

#include <hdf5.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *read_all(hid_t f, const char *name, hid_t type, size_t elem, int *ndim, hsize_t *dims) {
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    MRCNN_CHECK(ds >= 0, "input: no dataset %s", name);
    hid_t sp = H5Dget_space(ds);
    *ndim = H5Sget_simple_extent_ndims(sp);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    size_t n = 1;
    for (int d = 0; d < *ndim; d++) n *= dims[d];
    void *p = MRCNN_CALLOC(n ? n : 1, elem, name);
    if (n) MRCNN_CHECK_HDF5(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, p), name);
    H5Sclose(sp);
    H5Dclose(ds);
    return p;
}

static void write_f32(hid_t f, const char *name, int ndim, const int64_t *shape, const float *data) {
    hsize_t dims[8];
    for (int d = 0; d < ndim; d++) dims[d] = (hsize_t)shape[d];
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t sp = H5Screate_simple(ndim, dims, NULL);
    hid_t ds = MRCNN_CHECK_HDF5(H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT), name);
    MRCNN_CHECK_HDF5(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Pclose(lcpl);
}

/* Every trainable entry of arena a under prefix. */
static void write_arena(hid_t f, const char *prefix, const mrcnn_model *m, const mrcnn_arena *a) {
    char name[256];
    for (int i = 0; i < a->n_entries; i++) {
        if (!m->params.trainable[i]) continue;
        const mrcnn_tensor *t = &a->entries[i].tensor;
        int64_t n = mrcnn_tensor_numel(t);
        float *h = MRCNN_MALLOC((size_t)(n ? n : 1) * sizeof(float), "dump");
        m->be->mem.read(m->be, t, h);
        snprintf(name, sizeof name, "%s/%s", prefix, a->entries[i].name);
        write_f32(f, name, t->ndim, t->shape, h);
        free(h);
    }
}

typedef struct {
    float *images;
    int64_t shape[4];
    int *hw;
    mrcnn_image_gt *gt;
} fixed_batch;

static double fixed_next(void *ctx, int64_t step, int micro, mrcnn_batch *b) {
    fixed_batch *fb = ctx;
    b->images = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4, fb->shape);
    b->host_images = fb->images;
    b->image_hw = fb->hw;
    b->gt = fb->gt;
    return 0.0;
}

int main(int argc, char **argv) {
    MRCNN_CHECK(argc >= 5, "usage: %s CONFIG WEIGHTS INPUT OUTPUT --steps K [--set K=V]... [--save CKPT]", argv[0]);
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_load(&cfg, argv[1]);
    int steps = 1;
    const char *save = NULL;
    bool precond = true;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc) mrcnn_config_set(&cfg, argv[++i], "--set");
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--save") && i + 1 < argc) save = argv[++i];
        else if (!strcmp(argv[i], "--no-precond")) precond = false;
        else MRCNN_CHECK(0, "unknown argument '%s'", argv[i]);
    }
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, be);
    mrcnn_checkpoint_load_model(&m, argv[2]);

    hid_t in = H5Fopen(argv[3], H5F_ACC_RDONLY, H5P_DEFAULT);
    MRCNN_CHECK(in >= 0, "cannot open %s", argv[3]);
    int nd;
    hsize_t dims[8];
    fixed_batch fb;
    fb.images = read_all(in, "images", H5T_NATIVE_FLOAT, sizeof(float), &nd, dims);
    MRCNN_CHECK(nd == 4 && dims[3] == 3, "/images must be (N, H, W, 3)");
    for (int d = 0; d < 4; d++) fb.shape[d] = (int64_t)dims[d];
    const int N = (int)dims[0];
    MRCNN_CHECK(N == cfg.solver_ims_per_batch, "the input has %d images, SOLVER.IMS_PER_BATCH is %d", N,
                cfg.solver_ims_per_batch);
    fb.hw = read_all(in, "image_hw", H5T_NATIVE_INT, sizeof(int), &nd, dims);
    fb.gt = MRCNN_CALLOC((size_t)N, sizeof *fb.gt, "gt");
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "gt/%d/boxes", i);
        fb.gt[i].boxes = read_all(in, name, H5T_NATIVE_FLOAT, sizeof(float), &nd, dims);
        fb.gt[i].n = (int)dims[0];
        snprintf(name, sizeof name, "gt/%d/labels", i);
        fb.gt[i].labels = read_all(in, name, H5T_NATIVE_INT32, sizeof(int32_t), &nd, dims);
        snprintf(name, sizeof name, "gt/%d/masks", i);
        fb.gt[i].masks = read_all(in, name, H5T_NATIVE_UINT8, 1, &nd, dims);
    }
    H5Fclose(in);

    hid_t out = H5Fcreate(argv[4], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    MRCNN_CHECK(out >= 0, "cannot create %s", argv[4]);
    write_arena(out, "init", &m, &m.params.values);
    char name[256];
    for (int i = 0; i < m.params.values.n_entries; i++)
        if (m.params.trainable[i] && m.params.fold_scale[i]) {
            snprintf(name, sizeof name, "fold_scale/%s", m.params.values.entries[i].name);
            write_f32(out, name, 1, m.params.values.entries[i].tensor.shape, m.params.fold_scale[i]);
        }

    mrcnn_dist one_rank = {.rank = 0, .world_size = 1, .local_size = 1, .device = -1};
    mrcnn_model_trainable mt;
    mrcnn_model_trainable_init(&mt, &m, fixed_next, &fb);
    if (!precond) mt.tm.precond = NULL;
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &mt.tm, 0);
    printf("preconditioned elements: %lld\n", (long long)tr.sgd.preconditioned);
    for (int k = 1; k <= steps; k++) {
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
        mrcnn_trainer_sync_state(&tr);
        snprintf(name, sizeof name, "step/%d/grad", k);
        write_arena(out, name, &m, &m.params.grads);
        snprintf(name, sizeof name, "step/%d/values", k);
        write_arena(out, name, &m, &m.params.values);
        snprintf(name, sizeof name, "step/%d/grad_scale", k);
        write_f32(out, name, 1, (int64_t[]){1}, &tr.ctl_host[MRCNN_CTL_GRAD_SCALE]);
        printf("step %d: lr %g, gradient multiplier %g, applied %g\n", k, (double)r.lr,
               (double)tr.ctl_host[MRCNN_CTL_GRAD_SCALE], (double)tr.ctl_host[MRCNN_CTL_APPLY]);
    }
    H5Fclose(out);
    if (save) mrcnn_checkpoint_save_model(&m, save);
    mrcnn_trainer_free(&tr);
    mrcnn_model_trainable_free(&mt);
    for (int i = 0; i < N; i++) {
        free((void *)fb.gt[i].boxes);
        free((void *)fb.gt[i].labels);
        free((void *)fb.gt[i].masks);
    }
    free(fb.gt);
    free(fb.hw);
    free(fb.images);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
    return 0;
}
