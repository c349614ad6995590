/* File-system helpers that more than one module needs (src/core/fs.c): training's
 * OUTPUT_DIR and `mrcnn eval`'s results folder both create their folders with it. */
#ifndef MRCNN_FS_H
#define MRCNN_FS_H

#ifdef __cplusplus
extern "C" {
#endif

/* mkdir -p; returns 0 and leaves errno set when a level cannot be created. */
int mrcnn_mkdir_p(const char *path);

#ifdef __cplusplus
}
#endif
#endif
