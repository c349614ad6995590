/* What the trainer (--resume), `mrcnn eval/predict --weights` and MODEL.WEIGHTS do with a
 * checkpoint file, for the checkpoint targets: the model loaders
 * (src/model/checkpoint_io.c: mrcnn_checkpoint_load_model, _partial) and the training
 * checkpoint loaders (src/train/checkpoint.c: mrcnn_checkpoint_try_load with and without
 * momentum and state, _list over its folder). */
#ifndef MRCNN_FUZZ_CKPT_COMMON_H
#define MRCNN_FUZZ_CKPT_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "fuzz_model.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/model.h" // mrcnn_backend_cpu_create
#include "mrcnn/trainer.h"

static mrcnn_backend *g_be;
static mrcnn_model g_model;
static mrcnn_arena g_mom;
static char g_ckpt_dir[600], g_ckpt_path[700];

static void fuzz_ckpt_init(void) {
    fuzz_init();
    if (!FUZZ_RUN(g_be = mrcnn_backend_cpu_create(); fuzz_model_build(&g_model, g_be);
                  mrcnn_arena_init_like(&g_mom, "momentum", &g_model.params.values, MRCNN_DTYPE_F32);
                  mrcnn_arena_commit(&g_mom, NULL, NULL)))
        fuzz_die("ckpt: cannot build the stand-in model: %s", fuzz_msg);
    fuzz_path(g_ckpt_dir, sizeof g_ckpt_dir, "run");
    mkdir(g_ckpt_dir, 0700);
    snprintf(g_ckpt_path, sizeof g_ckpt_path, "%s/model_0000042.h5", g_ckpt_dir);
}

static void fuzz_ckpt_load_all(void) {
    const char *p = g_ckpt_path;
    FUZZ_RUN(mrcnn_checkpoint_load_model(&g_model, p));
    FUZZ_RUN(mrcnn_checkpoint_load_model_partial(&g_model, p));
    static mrcnn_train_state st;
    static char why[1024];
    FUZZ_RUN(mrcnn_checkpoint_try_load(p, g_be, &g_model.params.values, &g_mom, &st, why, sizeof why));
    FUZZ_RUN(mrcnn_checkpoint_try_load(p, g_be, &g_model.params.values, NULL, NULL, why, sizeof why));
    static char **paths;
    static int n;
    if (FUZZ_RUN(n = mrcnn_checkpoint_list(g_ckpt_dir, &paths))) mrcnn_checkpoint_list_free(paths, n);
}

#endif
