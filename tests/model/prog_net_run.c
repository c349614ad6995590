/* Runs the model on the CPU backend for the parity scripts.
 *   prog_net_run CONFIG WEIGHTS.h5|random INPUT.h5 OUTPUT.h5 [--mode train|detect|fit|load]
 *                [--set KEY=VALUE]... [--grad PARAM_NAME]... [--save CKPT.h5] [--steps K]
 *                [--partial] (load what the weights file has, random init for the rest)
 *                [--relu-masks] (train: also /relu/... and /rois, /fg_rois, below)
 * fit: K steps of SGD (momentum 0.9, LR SOLVER.BASE_LR with a 20-step warmup and x0.1
 * at 3K/4, global-norm clip 5) on the input batch, then --save, then detect.
 * INPUT.h5: /images (N, H, W, 3) f32, /image_hw (N, 2) i32 and for training
 * /gt/<i>/boxes (n, 4) f32, /gt/<i>/labels (n) i32, /gt/<i>/masks (n, h, w) u8.
 * OUTPUT.h5: /p/<l>, /rpn/logits/<l>, /rpn/deltas/<l> (NHWC), /proposals (N, P, 4),
 * /proposal_counts (N), /losses (5), /grads/<name> (project layout), or /det/...
 * --relu-masks: which units each ReLU let through (u8, 1 where the output is > 0), the
 * only discrete decision of the backward: a pre-activation within rounding of zero can
 * fall on either side in two float32 implementations, and one such unit moves the
 * gradient of every parameter before it by ~1e-3 (parity_torch.py pins torch's ReLU
 * backward to these). /relu/stem, /relu/body/<stage>.<block>/{a1,a2,out} (NHWC),
 * /relu/rpn/<level>, /relu/box/{h6,h7} and /relu/mask/{<i>,up} in the rows of /rois
 * (R, 5) and /fg_rois (Rf, 5): (image, x1, y1, x2, y2). */
#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/config.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/model.h"

#include "mrcnn/postprocess.h"
#include "test_model.h"

#include <hdf5.h>
#include <math.h>
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

static void write_u8(hid_t f, const char *name, int ndim, const int64_t *shape, const uint8_t *data) {
    hsize_t dims[8];
    for (int d = 0; d < ndim; d++) dims[d] = (hsize_t)shape[d];
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t sp = H5Screate_simple(ndim, dims, NULL);
    hid_t ds = MRCNN_CHECK_HDF5(H5Dcreate2(f, name, H5T_STD_U8LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT), name);
    MRCNN_CHECK_HDF5(H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Pclose(lcpl);
}

/* Plain SGD with momentum on the host copy of the flat arenas. */
static void fit(mrcnn_model *m, mrcnn_ws *ws, mrcnn_batch *b, const float *img, const int64_t *ishape,
                int steps) {
    const mrcnn_backend *be = m->be;
    int64_t n = (int64_t)(m->params.values.size / sizeof(float));
    float *w = MRCNN_MALLOC((size_t)n * sizeof(float), "fit"), *g = MRCNN_MALLOC((size_t)n * sizeof(float), "fit");
    float *mom = MRCNN_CALLOC((size_t)n, sizeof(float), "fit");
    mrcnn_tensor tw = mrcnn_tensor_view(m->params.values.base, MRCNN_DTYPE_F32, be->device, 1, &n);
    mrcnn_tensor tg = mrcnn_tensor_view(m->params.grads.base, MRCNN_DTYPE_F32, be->device, 1, &n);
    for (int it = 0; it < steps; it++) {
        mrcnn_ws_reset(ws);
        b->images = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 4, ishape);
        be->mem.write(be, &b->images, img);
        mrcnn_model_zero_grads(m);
        mrcnn_pass st;
        mrcnn_model_train_step(m, ws, b, true, &st);
        if (it % 50 == 0 || it == steps - 1) {
            mrcnn_model_read_losses(m, &st, &st.losses);
            printf("fit step %d loss %.5f\n", it, st.losses.total);
        }
        mrcnn_pass_free(&st);
        be->mem.read(be, &tw, w);
        be->mem.read(be, &tg, g);
        double gn = 0;
        for (int64_t i = 0; i < n; i++) gn += (double)g[i] * g[i];
        gn = sqrt(gn);
        float lr = m->cfg.solver_base_lr * (it < 20 ? (it + 1) / 20.0f : it >= 3 * steps / 4 ? 0.1f : 1.0f);
        if (gn > 5.0) lr *= (float)(5.0 / gn);
        for (int64_t i = 0; i < n; i++) {
            mom[i] = 0.9f * mom[i] + g[i];
            w[i] -= lr * mom[i];
        }
        be->mem.write(be, &tw, w);
    }
    mrcnn_ws_reset(ws);
    free(w);
    free(g);
    free(mom);
}

/* 1 where t > 0: the units a ReLU's backward passes. */
static void write_relu_mask(hid_t f, const char *name, const mrcnn_backend *be, const mrcnn_tensor *t) {
    int64_t n = mrcnn_tensor_numel(t);
    float *h = MRCNN_MALLOC((size_t)(n ? n : 1) * sizeof(float), name);
    uint8_t *mask = MRCNN_MALLOC((size_t)(n ? n : 1), name);
    if (n) test_read_f32(be, t, h);
    for (int64_t i = 0; i < n; i++) mask[i] = h[i] > 0.0f;
    write_u8(f, name, t->ndim, t->shape, mask);
    free(mask);
    free(h);
}

static void write_relu_masks(hid_t f, const mrcnn_model *m, const mrcnn_pass *st) {
    const mrcnn_backend *be = m->be;
    char name[96];
    write_relu_mask(f, "relu/stem", be, &st->bb.stem_conv);
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < m->resnet.n_blocks[s]; b++) {
            snprintf(name, sizeof name, "relu/body/%d.%d/a1", s, b);
            write_relu_mask(f, name, be, &st->bb.block_a1[s][b]);
            snprintf(name, sizeof name, "relu/body/%d.%d/a2", s, b);
            write_relu_mask(f, name, be, &st->bb.block_a2[s][b]);
            snprintf(name, sizeof name, "relu/body/%d.%d/out", s, b);
            write_relu_mask(f, name, be, &st->bb.block_out[s][b]);
        }
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        snprintf(name, sizeof name, "relu/rpn/%d", l);
        write_relu_mask(f, name, be, &st->rpn.t[l]);
    }
    write_relu_mask(f, "relu/box/h6", be, &st->box.h6);
    write_relu_mask(f, "relu/box/h7", be, &st->box.h7);
    for (int i = 0; i < m->mask.n_conv; i++) {
        snprintf(name, sizeof name, "relu/mask/%d", i);
        write_relu_mask(f, name, be, &st->mask.conv[i]);
    }
    write_relu_mask(f, "relu/mask/up", be, &st->mask.up);
    write_f32(f, "rois", 2, (int64_t[]){st->n_rois, 5}, st->rois);
    write_f32(f, "fg_rois", 2, (int64_t[]){st->n_fg, 5}, st->fg_rois);
}

static void write_tensor(hid_t f, const char *name, const mrcnn_backend *be, const mrcnn_tensor *t) {
    int64_t n = mrcnn_tensor_numel(t);
    float *h = MRCNN_MALLOC((size_t)(n ? n : 1) * sizeof(float), name);
    if (n) be->mem.read(be, t, h);
    write_f32(f, name, t->ndim, t->shape, h);
    free(h);
}

int main(int argc, char **argv) {
    MRCNN_CHECK(argc >= 5, "usage: %s CONFIG WEIGHTS INPUT OUTPUT [--mode train|detect] [--set K=V] "
                "[--grad NAME] [--save CKPT]", argv[0]);
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_load(&cfg, argv[1]);
    const char *mode = "train", *save = NULL;
    const char *grads[64];
    int n_grads = 0, steps = 0;
    bool partial = false, relu_masks = false;
    for (int i = 5; i < argc; i++) {
        if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) mode = argv[++i];
        else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) mrcnn_config_set(&cfg, argv[++i], "--set");
        else if (strcmp(argv[i], "--grad") == 0 && i + 1 < argc && n_grads < 64) grads[n_grads++] = argv[++i];
        else if (strcmp(argv[i], "--save") == 0 && i + 1 < argc) save = argv[++i];
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--partial") == 0) partial = true;
        else if (strcmp(argv[i], "--relu-masks") == 0) relu_masks = true;
        else MRCNN_CHECK(0, "unknown argument '%s'", argv[i]);
    }
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, be);
    int loaded = mrcnn_params_count(&m.params);
    if (strcmp(argv[2], "random") == 0) mrcnn_model_init_random(&m, (uint64_t)cfg.seed);
    else if (partial) {
        mrcnn_model_init_random(&m, (uint64_t)cfg.seed);
        loaded = mrcnn_checkpoint_load_model_partial(&m, argv[2]);
    } else mrcnn_checkpoint_load_model(&m, argv[2]);

    if (strcmp(mode, "load") == 0) {
        // the weights matched the model by name and shape: report its size and stop
        printf("params %d tensors %lld floats, %d loaded\n", mrcnn_params_count(&m.params),
               (long long)mrcnn_params_numel(&m.params, false), loaded);
        mrcnn_model_free(&m);
        mrcnn_backend_destroy(be);
        return 0;
    }
    hid_t in = H5Fopen(argv[3], H5F_ACC_RDONLY, H5P_DEFAULT);
    MRCNN_CHECK(in >= 0, "cannot open %s", argv[3]);
    int nd;
    hsize_t dims[8];
    float *img = read_all(in, "images", H5T_NATIVE_FLOAT, sizeof(float), &nd, dims);
    MRCNN_CHECK(nd == 4 && dims[3] == 3, "/images must be (N, H, W, 3)");
    int N = (int)dims[0];
    int64_t ishape[4] = {(int64_t)dims[0], (int64_t)dims[1], (int64_t)dims[2], 3};
    int *hw = read_all(in, "image_hw", H5T_NATIVE_INT, sizeof(int), &nd, dims);
    mrcnn_image_gt *gt = MRCNN_CALLOC((size_t)N, sizeof *gt, "gt");
    bool train = strcmp(mode, "train") == 0, do_fit = strcmp(mode, "fit") == 0;
    MRCNN_CHECK(train || do_fit || strcmp(mode, "detect") == 0, "--mode %s: expected train, detect or fit", mode);
    for (int i = 0; (train || do_fit) && i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "gt/%d/boxes", i);
        gt[i].boxes = read_all(in, name, H5T_NATIVE_FLOAT, sizeof(float), &nd, dims);
        gt[i].n = (int)dims[0];
        snprintf(name, sizeof name, "gt/%d/labels", i);
        gt[i].labels = read_all(in, name, H5T_NATIVE_INT32, sizeof(int32_t), &nd, dims);
        snprintf(name, sizeof name, "gt/%d/masks", i);
        gt[i].masks = read_all(in, name, H5T_NATIVE_UINT8, 1, &nd, dims);
    }
    H5Fclose(in);

    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    mrcnn_batch b = {.image_hw = hw, .gt = gt};
    if (do_fit) fit(&m, &ws, &b, img, ishape, steps);
    if (save) mrcnn_checkpoint_save_model(&m, save);
    b.images = mrcnn_ws_tensor(&ws, MRCNN_DTYPE_F32, 4, ishape);
    be->mem.write(be, &b.images, img);
    mrcnn_pass st;
    mrcnn_detections det;
    memset(&det, 0, sizeof det);
    if (train) {
        mrcnn_model_zero_grads(&m);
        mrcnn_model_train_step(&m, &ws, &b, true, &st);
        test_model_read_pass(&m, &st); // losses, counts and the proposals for the output file
    } else {
        test_model_detect(&m, &ws, &b, &st, &det);
    }
    hid_t out = H5Fcreate(argv[4], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    MRCNN_CHECK(out >= 0, "cannot create %s", argv[4]);
    char name[160];
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        snprintf(name, sizeof name, "p/%d", l);
        write_tensor(out, name, be, &st.bb.p[l]);
        snprintf(name, sizeof name, "rpn/logits/%d", l);
        write_tensor(out, name, be, &st.rpn.logits[l]);
        snprintf(name, sizeof name, "rpn/deltas/%d", l);
        write_tensor(out, name, be, &st.rpn.deltas[l]);
    }
    write_f32(out, "proposals", 3, (int64_t[]){N, st.prop_cap, 4}, st.proposals);
    float *cnt = MRCNN_MALLOC((size_t)N * sizeof(float), "counts");
    for (int i = 0; i < N; i++) cnt[i] = (float)st.proposal_counts[i];
    write_f32(out, "proposal_counts", 1, (int64_t[]){N}, cnt);
    free(cnt);
    if (train) {
        float l[5] = {(float)st.losses.rpn_objectness, (float)st.losses.rpn_box_reg,
                      (float)st.losses.classifier, (float)st.losses.box_reg, (float)st.losses.mask};
        write_f32(out, "losses", 1, (int64_t[]){5}, l);
        float counts[3] = {(float)st.rpn_sampled, (float)st.n_rois, (float)st.n_fg};
        write_f32(out, "sample_counts", 1, (int64_t[]){3}, counts);
        for (int g = 0; g < n_grads; g++) {
            int idx = mrcnn_arena_index(&m.params.grads, grads[g]);
            MRCNN_CHECK(idx >= 0, "--grad %s: no such parameter", grads[g]);
            snprintf(name, sizeof name, "grads/%s", grads[g]);
            write_tensor(out, name, be, mrcnn_arena_get(&m.params.grads, idx));
            snprintf(name, sizeof name, "values/%s", grads[g]);
            write_tensor(out, name, be, mrcnn_arena_get(&m.params.values, idx));
        }
        if (relu_masks) write_relu_masks(out, &m, &st);
        printf("losses: objectness %.6g rpn_box %.6g classifier %.6g box_reg %.6g mask %.6g "
               "(rpn sampled %.0f, rois %d, fg %d)\n", l[0], l[1], l[2], l[3], l[4], st.rpn_sampled,
               st.n_rois, st.n_fg);
    } else {
        int D = det.cap, M = det.mask_size;
        write_f32(out, "det/boxes", 3, (int64_t[]){N, D, 4}, det.boxes);
        write_f32(out, "det/scores", 2, (int64_t[]){N, D}, det.scores);
        float *lab = MRCNN_MALLOC((size_t)N * D * sizeof(float), "labels");
        for (int i = 0; i < N * D; i++) lab[i] = (float)det.labels[i];
        write_f32(out, "det/labels", 2, (int64_t[]){N, D}, lab);
        for (int i = 0; i < N; i++) lab[i] = (float)det.counts[i];
        write_f32(out, "det/counts", 1, (int64_t[]){N}, lab);
        free(lab);
        write_f32(out, "det/mask_probs", 4, (int64_t[]){N, D, M, M}, det.mask_probs);
        // masks pasted into the image as torchvision's postprocess does, at 0.5
        int H = (int)ishape[1], W = (int)ishape[2];
        uint8_t *pm = MRCNN_CALLOC((size_t)N * D * H * W, 1, "pasted masks");
        for (int i = 0; i < N; i++)
            for (int j = 0; j < det.counts[i]; j++)
                mrcnn_paste_mask_u8(det.mask_probs + ((size_t)i * D + j) * M * M, M,
                                    det.boxes + ((size_t)i * D + j) * 4, hw[2 * i], hw[2 * i + 1], 0.5f,
                                    pm + ((size_t)i * D + j) * H * W);
        write_u8(out, "det/masks", 4, (int64_t[]){N, D, H, W}, pm);
        free(pm);
        mrcnn_detections_free(&det);
    }
    H5Fclose(out);
    mrcnn_pass_free(&st);
    mrcnn_ws_free(&ws);
    for (int i = 0; i < N; i++) {
        free((void *)gt[i].boxes);
        free((void *)gt[i].labels);
        free((void *)gt[i].masks);
    }
    free(gt);
    free(img);
    free(hw);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
    return 0;
}
