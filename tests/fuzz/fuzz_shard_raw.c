/* Shard reader on raw file bytes (src/data/shard.c): the input is written to a .h5 file
 * and opened as a shard (mrcnn_shard_open, then every image, RLE string and mask read
 * back) and as an index (mrcnn_shard_set_open). Seeds: a real shard and index made by
 * `mrcnn-prep shapes` + `mrcnn-prep coco` (tests/fuzz/make_seeds.sh). Most mutations land
 * in HDF5's own metadata parsing (libhdf5, not instrumented: its faults show as SEGV or
 * as reads ASan sees through its interceptors) or fail the Fletcher32 checksums: this
 * target mainly checks that libhdf5's rejections come back as clean failures.
 * fuzz_shard_struct reaches the reader's own validation far more often. */
#include <stdio.h>

#include "fuzz_shard_read.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[600];
    if (!path[0]) fuzz_path(path, sizeof path, "raw-00000-of-00001.h5");
    fuzz_write_file(path, data, size);
    static mrcnn_shard sh;
    FUZZ_RUN(mrcnn_shard_open(&sh, path, 0); fuzz_read_shard(&sh); mrcnn_shard_close(&sh));
    static mrcnn_shard_set set;
    FUZZ_RUN(mrcnn_shard_set_open(&set, path); mrcnn_shard_set_free(&set));
    return 0;
}
