/* Checkpoint readers, structure-aware (fuzz_ckpt_common.h, fuzz_h5spec.h): the first
 * input byte picks one of the seed checkpoints of tests/fuzz/corpus/ckpt_raw (model,
 * training, unfolded BN), the rest is a list of edits to it (values incl. NaN/Inf,
 * shapes, ranks up to HDF5's 32, types, layouts and checksums, missing datasets or
 * attributes, a group where a dataset should be, the config string); the edited file is
 * written as valid HDF5 and loaded every way. The empty input loads the model seed. */
#include <stdlib.h>

#include "fuzz_ckpt_common.h"
#include "fuzz_h5spec.h"

#ifndef MRCNN_FUZZ_SRCDIR
#define MRCNN_FUZZ_SRCDIR "tests/fuzz"
#endif

static const char *const k_seeds[] = {"model.h5", "train.h5", "unfolded.h5"};
#define NSEEDS 3
static h5s_file g_base[NSEEDS], g_work;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_ckpt_init();
    const char *dir = getenv("MRCNN_FUZZ_SEEDS");
    for (int i = 0; i < NSEEDS; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/corpus/ckpt_raw/%s", dir ? dir : MRCNN_FUZZ_SRCDIR, k_seeds[i]);
        h5s_read(&g_base[i], p);
        g_base[i].v18 = 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bytes b = {data, size};
    int which = size ? fuzz_u8(&b) % NSEEDS : 0;
    h5s_copy(&g_work, &g_base[which]);
    h5s_file *files[1] = {&g_work};
    h5s_mutate(files, 1, &b, 64);
    int ok = h5s_write(&g_work, g_ckpt_path);
    h5s_free(&g_work);
    if (ok) fuzz_ckpt_load_all();
    return 0;
}
