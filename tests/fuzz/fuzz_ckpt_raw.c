/* Checkpoint readers on raw file bytes (fuzz_ckpt_common.h): the input is written as
 * OUTPUT_DIR/model_0000042.h5 and loaded every way the programs load one. Seeds
 * (tests/fuzz/make_seeds.sh): a model checkpoint (mrcnn_checkpoint_save_model), a
 * training checkpoint (mrcnn_checkpoint_save, with momentum, state and config) and a
 * weights.py-style file with unfolded BN tensors, all of the stand-in model
 * (fuzz_model.h). Most mutations land in libhdf5's parser or fail a checksum; see
 * fuzz_ckpt_struct for the readers' own logic. */
#include "fuzz_ckpt_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_ckpt_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_file(g_ckpt_path, data, size);
    fuzz_ckpt_load_all();
    return 0;
}
