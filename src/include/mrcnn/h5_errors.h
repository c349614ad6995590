/* HDF5 errors as one line, for the readers and writers of shards and checkpoints.
 * HDF5 prints its whole error stack by default; between mrcnn_h5_quiet_begin and
 * mrcnn_h5_quiet_end it prints nothing (this thread's stack only), so that a failure is
 * reported once, as one line holding its most telling entry (mrcnn_h5_reason). */
#ifndef MRCNN_H5_ERRORS_H
#define MRCNN_H5_ERRORS_H

#include <hdf5.h>
#include <stddef.h>

typedef struct {
    H5E_auto2_t fn;
    void *data;
} mrcnn_h5_quiet;

mrcnn_h5_quiet mrcnn_h5_quiet_begin(void);
void mrcnn_h5_quiet_end(mrcnn_h5_quiet q);

/* Why this thread's last HDF5 call failed, into out: a checksum mismatch says so, else
 * the system error of a failed write ("No space left on device"), else the innermost
 * description. Clears the stack. Returns 1 for a checksum mismatch (the bytes in the
 * file are not the ones written), else 0. */
int mrcnn_h5_reason(char *out, size_t len);

#endif
