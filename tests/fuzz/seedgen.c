/* Seed files for the checkpoint targets (tests/fuzz/make_seeds.sh): OUT/model.h5
 * (mrcnn_checkpoint_save_model), OUT/train.h5 (mrcnn_checkpoint_save: momentum, state,
 * config) and OUT/unfolded.h5 (the backbone convs stored unfolded beside their BN
 * tensors, as data_prep/weights.py writes torchvision weights), of the stand-in model. */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_model.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/model.h" // mrcnn_backend_cpu_create
#include "mrcnn/trainer.h"

static void write_f32(hid_t g, const char *name, int ndim, const hsize_t *dims, const float *v) {
    hid_t sp = H5Screate_simple(ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, ndim, dims);
    H5Pset_fletcher32(dcpl);
    hid_t ds = H5Dcreate2(g, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0 || H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) {
        fprintf(stderr, "seedgen: writing %s failed\n", name);
        exit(1);
    }
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seedgen OUT_DIR\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    const char *out = argv[1];
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    fuzz_model_build(&m, be);
    mrcnn_arena *a = &m.params.values;
    for (int i = 0; i < a->n_entries; i++) {
        float *d = a->entries[i].tensor.data;
        int64_t n = mrcnn_tensor_numel(&a->entries[i].tensor);
        for (int64_t k = 0; k < n; k++) d[k] = (float)((i * 37 + k * 11) % 17 - 8) / 16.0f;
    }
    char path[2048];
    snprintf(path, sizeof path, "%s/model.h5", out);
    mrcnn_checkpoint_save_model(&m, path);

    mrcnn_arena mom;
    mrcnn_arena_init_like(&mom, "momentum", a, MRCNN_DTYPE_F32);
    mrcnn_arena_commit(&mom, NULL, NULL);
    mrcnn_train_state st;
    memset(&st, 0, sizeof st);
    st.step = 42, st.epoch = 1, st.loader_step = 3, st.loader_batch = 2, st.world_size = 1, st.global_batch = 2;
    st.scaler.enabled = 1, st.scaler.scale = 65536, st.scaler.growth_interval = 2000, st.lr = 0.01, st.base_lr = 0.01;
    st.seed = 7;
    char dir[2048], written[1100];
    snprintf(dir, sizeof dir, "%s/.seedgen-%d", out, (int)getpid());
    mrcnn_checkpoint_save(dir, be, a, m.params.fold_scale, &mom, &st, &m.cfg, 1, written);
    snprintf(path, sizeof path, "%s/train.h5", out);
    if (rename(written, path) != 0) {
        perror("seedgen: rename");
        return 1;
    }
    rmdir(dir);

    /* Unfolded: conv weights without bias plus bn.{weight,bias,running_mean,running_var}. */
    snprintf(path, sizeof path, "%s/unfolded.h5", out);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t at = H5Acreate2(f, "schema_version", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int v = MRCNN_CHECKPOINT_SCHEMA_VERSION;
    H5Awrite(at, H5T_NATIVE_INT, &v);
    H5Aclose(at);
    H5Sclose(sp);
    hid_t g = H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (int i = 0; i < a->n_entries; i++) {
        const mrcnn_tensor *t = &a->entries[i].tensor;
        hsize_t dims[8];
        for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
        write_f32(g, a->entries[i].name, t->ndim, dims, t->data);
        const char *bn = m.params.bn[i];
        if (bn[0]) {
            const char *suffix[4] = {"weight", "bias", "running_mean", "running_var"};
            float vals[64];
            hsize_t k = (hsize_t)t->shape[0];
            for (int j = 0; j < 4; j++) {
                for (hsize_t c = 0; c < k; c++) vals[c] = j == 3 ? 1.0f + (float)c / 8 : (float)(j + 1) * 0.25f - (float)c / 16;
                char key[256];
                snprintf(key, sizeof key, "%s.%s", bn, suffix[j]);
                write_f32(g, key, 1, &k, vals);
            }
            i++; // the conv's bias stays out: weights.py convs have none
        }
    }
    H5Gclose(g);
    H5Fclose(f);
    printf("seedgen: wrote %s/{model,train,unfolded}.h5\n", out);
    MPI_Finalize();
    return 0;
}
