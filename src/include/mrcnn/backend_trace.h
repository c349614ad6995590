/* A recording layer over a backend's entries (src/backend/backend_trace.c), for proving
 * on the CPU that a region of backend calls is replayable as a CUDA graph:
 * a graph replays the calls captured once, so for the same shape key every step must
 * make the SAME calls with the SAME arguments, upload nothing and read nothing back.
 *
 * mrcnn_backend_trace_install wraps every entry of the backend's sub-tables (mem, nn,
 * loss, opt, det, step, stream, info, plus set_precision and destroy); a wrapper calls
 * the entry it replaced and, inside a window (trace_begin .. trace_end), records the
 * call as one line of text: the entry's name, every tensor (dtype, shape, strides,
 * device, data pointer), every scalar (ints; floats to 9 digits, which is exact, NaN
 * by its bits) and every descriptor by its named fields. The window's hash is the
 * 64-bit FNV-1a of those lines, so equal hashes mean equal listings and a differing
 * hash has a line that differs.
 *
 * Pointers: one inside a buffer that mem.alloc returned in this window is written as
 * "a<ordinal>+<offset>" (its allocation's number in the window), so the host's malloc
 * handing out other addresses does not matter (a CUDA graph owns the memory allocated
 * inside its capture); any other pointer (parameters, staging buffers, the control
 * vector) is its raw address, which a replay bakes in. mem.write hashes its
 * destination and size, never the host source (its contents are the upload's data),
 * mem.read its source (the host destination is not the device's business).
 *
 * Nested calls: an entry that calls other entries through the table while it runs
 * (the CPU's step.sgd_update calls opt.sgd_update with the lr it reads from the control
 * vector in host memory, where a GPU kernel reads it on the device) is recorded as the
 * one call the caller made; the nested calls are not hashed or listed, but their
 * uploads, reads, syncs and allocations count.
 *
 * Listing: MRCNN_TRACE_DUMP=1 (read at install) prints every recorded line to stderr
 * as "trace[<window>] #<call> <line>"; MRCNN_TRACE_DUMP=<prefix> writes window k's
 * lines to <prefix>.<k>.txt, so two steps that differ are one `diff` apart. A window can
 * also keep its listing in memory (mrcnn_backend_trace_keep_listing), for a profile or
 * for a test to compare two. */
#ifndef MRCNN_BACKEND_TRACE_H
#define MRCNN_BACKEND_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mrcnn/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrcnn_trace_summary {
    uint64_t hash;    // FNV-1a 64 of the window's lines, in order
    uint64_t calls;   // entries called in the window (nested calls not counted)
    uint64_t uploads; // mem.write calls
    uint64_t reads;   // mem.read and opt.nonfinite calls (each returns device data to the host)
    uint64_t syncs;   // mem.sync calls (a backend's own waits are in stats.syncs)
    uint64_t allocs;  // mem.alloc calls
    uint64_t frees;   // mem.free calls
    uint64_t live;    // buffers allocated in the window and not freed by its end
    mrcnn_backend_stats stats; // the backend's own counters over the window (backend.h)
    char *listing;    // one line per call when kept (mrcnn_backend_trace_keep_listing), else NULL;
                      // freed by mrcnn_trace_summary_free
} mrcnn_trace_summary;

/* Wraps every non-NULL entry (a NULL entry stays NULL) and registers the backend (a
 * handful at a time). Install after the backend is complete (after its factory, which
 * validates last); installing twice does nothing. The backend's destroy removes it. */
void mrcnn_backend_trace_install(mrcnn_backend *be);
/* Restores the entries as they were before install. */
void mrcnn_backend_trace_uninstall(mrcnn_backend *be);
/* Starts a window: clears the hash, counters and allocation table. Fails when one is
 * already open or the backend is not traced. */
void mrcnn_backend_trace_begin(mrcnn_backend *be);
/* Ends the window and fills *s. */
void mrcnn_backend_trace_end(mrcnn_backend *be, mrcnn_trace_summary *s);
/* Keep each window's lines in memory, into mrcnn_trace_summary.listing (off by default). */
void mrcnn_backend_trace_keep_listing(mrcnn_backend *be, int on);
/* Print each window's lines as they are recorded: to f (NULL: stop). The same as
 * MRCNN_TRACE_DUMP=1 with f = stderr. */
void mrcnn_backend_trace_dump(mrcnn_backend *be, FILE *f);
void mrcnn_trace_summary_free(mrcnn_trace_summary *s);

#ifdef __cplusplus
}
#endif
#endif
