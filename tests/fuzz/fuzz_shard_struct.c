/* Shard reader, structure-aware (src/data/shard.c): the seed index and shard
 * (tests/fuzz/corpus/shard_raw/seed-*.h5, made by mrcnn-prep) are read into a spec once;
 * each input is a list of edits to that spec (fuzz_h5spec.h: values, sizes, types,
 * ranks, layouts, checksums, huge declared extents, attributes, strings), after which
 * both files are written as valid HDF5 (Fletcher32 sums recomputed) and read as the
 * loader reads them: the index (mrcnn_shard_set_open), its shard against it
 * (mrcnn_shard_set_open_shard, through the MPI-IO driver on odd first bytes, as training
 * opens it), every image's bytes and RLE strings, each RLE decoded at its image's size;
 * and the shard alone (mrcnn_shard_open). The empty input is the unedited, valid set. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_h5spec.h"
#include "fuzz_shard_read.h"

#ifndef MRCNN_FUZZ_SRCDIR
#define MRCNN_FUZZ_SRCDIR "tests/fuzz"
#endif

static h5s_file g_base[2], g_work[2]; // index, shard
static char g_index[600], g_shard[600];
static int64_t g_mpio;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    const char *dir = getenv("MRCNN_FUZZ_SEEDS");
    char p[1024];
    snprintf(p, sizeof p, "%s/corpus/shard_raw/seed-index.h5", dir ? dir : MRCNN_FUZZ_SRCDIR);
    h5s_read(&g_base[0], p);
    snprintf(p, sizeof p, "%s/corpus/shard_raw/seed-00000-of-00001.h5", dir ? dir : MRCNN_FUZZ_SRCDIR);
    h5s_read(&g_base[1], p);
    g_base[0].v18 = g_base[1].v18 = 1;
    fuzz_path(g_index, sizeof g_index, "seed-index.h5");
    fuzz_path(g_shard, sizeof g_shard, "seed-00000-of-00001.h5");
    if (!FUZZ_RUN(g_mpio = mrcnn_shard_fapl_mpio(MPI_COMM_SELF))) fuzz_die("shard_struct: no MPI-IO access list");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bytes b = {data, size};
    const int mpio = size > 0 && (data[0] & 1);
    if (size) fuzz_u8(&b);
    h5s_copy(&g_work[0], &g_base[0]);
    h5s_copy(&g_work[1], &g_base[1]);
    h5s_file *files[2] = {&g_work[0], &g_work[1]};
    h5s_mutate(files, 2, &b, 64);
    int ok = h5s_write(&g_work[0], g_index) && h5s_write(&g_work[1], g_shard);
    h5s_free(&g_work[0]);
    h5s_free(&g_work[1]);
    if (!ok) return 0;
    static mrcnn_shard_set set;
    static mrcnn_shard sh;
    FUZZ_RUN(mrcnn_shard_set_open(&set, g_index); mrcnn_shard_set_open_shard(&set, 0, &sh, mpio ? g_mpio : 0);
             fuzz_read_shard(&sh); mrcnn_shard_close(&sh); mrcnn_shard_set_free(&set));
    FUZZ_RUN(mrcnn_shard_open(&sh, g_shard, 0); fuzz_read_shard(&sh); mrcnn_shard_close(&sh));
    return 0;
}
