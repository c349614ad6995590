/* Checks a dataset's chunks before it is read. libhdf5 1.10 trusts the size a chunk
 * index records: a chunk recorded under 4 bytes sends its Fletcher-32 filter reading
 * off the end of the buffer (SIGSEGV inside libhdf5, found by tests/fuzz on damaged
 * shards and checkpoints), and a declared extent far beyond what the file stores reads
 * back as fill values, chunk by chunk. Our writers store every chunk, whole and
 * uncompressed, with Fletcher-32 as the only filter; readers check that here first. */
#ifndef MRCNN_H5_CHUNKS_H
#define MRCNN_H5_CHUNKS_H

#include <hdf5.h>
#include <stddef.h>

/* 1 when ds is not chunked (libhdf5 bounds a contiguous read itself) or when every chunk
 * of its extent is stored with the size the writer gives it (all its elements in the
 * file's type, + 4 bytes of Fletcher-32 when that is the pipeline; a pipeline with any
 * other filter must still store at least the 4 checksum bytes a chunk); else 0 with the
 * reason in why ("the chunk at (12, 0) stores 2 bytes, expected 4100"). Reads only the
 * layout and the chunk index, never the data. */
int mrcnn_h5_chunks_whole(hid_t ds, char *why, size_t why_len);

#endif
