/* Chunk checks before a read (src/include/mrcnn/h5_chunks.h). */
#include "mrcnn/h5_chunks.h"

#include <stdint.h>
#include <stdio.h>

enum { MAX_RANK = 32 }; // HDF5's H5S_MAX_RANK

static int fail(char *why, size_t len, const char *msg, const hsize_t *off, int rank, unsigned long long got,
                unsigned long long want) {
    size_t n = (size_t)snprintf(why, len, "the chunk at (");
    for (int d = 0; d < rank && n < len; d++) n += (size_t)snprintf(why + n, len - n, "%s%llu", d ? ", " : "", (unsigned long long)off[d]);
    if (n < len) snprintf(why + n, len - n, ") %s %llu bytes, expected %llu", msg, got, want);
    return 0;
}

int mrcnn_h5_chunks_whole(hid_t ds, char *why, size_t why_len) {
    hid_t dcpl = H5Dget_create_plist(ds), sp = H5Dget_space(ds), ft = H5Dget_type(ds);
    int ok = 1;
    if (dcpl < 0 || sp < 0 || ft < 0) {
        snprintf(why, why_len, "its layout cannot be read");
        ok = 0;
        goto done;
    }
    if (H5Pget_layout(dcpl) != H5D_CHUNKED) goto done;
    hsize_t dims[MAX_RANK], cd[MAX_RANK];
    const int rank = H5Sget_simple_extent_ndims(sp);
    if (rank < 0 || rank > MAX_RANK || H5Sget_simple_extent_dims(sp, dims, NULL) != rank ||
        H5Pget_chunk(dcpl, MAX_RANK, cd) != rank) {
        snprintf(why, why_len, "its chunk shape does not match its rank");
        ok = 0;
        goto done;
    }
    /* The pipeline: Fletcher-32 alone fixes every chunk's size; another filter only
     * bounds it below (the checksum is still appended last). */
    const int nfilters = H5Pget_nfilters(dcpl);
    int fletcher = 0;
    for (int i = 0; i < nfilters; i++) {
        unsigned flags = 0, conf = 0;
        size_t ncd = 0;
        if (H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, NULL, 0, NULL, &conf) == H5Z_FILTER_FLETCHER32) fletcher = 1;
    }
    const int exact = nfilters == 1 && fletcher;
    uint64_t chunk_bytes = H5Tget_size(ft), total = chunk_bytes, nchunks = 1;
    for (int d = 0; d < rank; d++) {
        if (cd[d] == 0) {
            snprintf(why, why_len, "a chunk dimension is 0");
            ok = 0;
            goto done;
        }
        chunk_bytes *= cd[d];
        total *= dims[d];
        nchunks *= (dims[d] + cd[d] - 1) / cd[d];
    }
    if (nchunks == 0) goto done;
    /* Before walking the index (whose length the extent declares): the file must hold the
     * declared data at all. Unfiltered chunks store their elements exactly. */
    if (exact && H5Dget_storage_size(ds) < total) {
        snprintf(why, why_len, "it declares %llu bytes of data but stores %llu", (unsigned long long)total,
                 (unsigned long long)H5Dget_storage_size(ds));
        ok = 0;
        goto done;
    }
    const uint64_t want = chunk_bytes + (fletcher ? 4 : 0);
    hsize_t off[MAX_RANK] = {0};
    for (uint64_t c = 0; c < nchunks && ok; c++) {
        unsigned mask = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(ds, off, &mask, &addr, &size) < 0) {
            H5Eclear2(H5E_DEFAULT);
            addr = HADDR_UNDEF;
        }
        if (addr == HADDR_UNDEF) ok = fail(why, why_len, "is missing: stores", off, rank, 0, want);
        else if (mask != 0) ok = fail(why, why_len, "skipped a filter and stores", off, rank, size, want);
        else if (exact ? size != want : (fletcher && size < 4)) ok = fail(why, why_len, "stores", off, rank, size, want);
        for (int d = rank - 1; d >= 0; d--) { // next chunk, row-major
            off[d] += cd[d];
            if (off[d] < dims[d]) break;
            off[d] = 0;
        }
    }
done:
    if (ft >= 0) H5Tclose(ft);
    if (sp >= 0) H5Sclose(sp);
    if (dcpl >= 0) H5Pclose(dcpl);
    return ok;
}
