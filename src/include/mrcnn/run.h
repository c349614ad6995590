/* The identity of a training run in OUTPUT_DIR (src/train/output_dir.c).
 * A fresh run draws a run id and records it in OUTPUT_DIR/run_id; every checkpoint
 * (attribute "run_id") and every metrics.json record ("run_id") carries it; --resume
 * continues the id recorded there. Retention ("keep the newest K") and --resume only
 * look at checkpoints of the run's own lineage, so an earlier run's higher-numbered
 * files are never counted, deleted or loaded. A fresh run into an OUTPUT_DIR that holds
 * an earlier run (checkpoints, metrics.json or a run_id) is refused at start. */
#ifndef MRCNN_RUN_H
#define MRCNN_RUN_H

#include <stddef.h>

#define MRCNN_RUN_ID_LEN 64

/* Rank 0, after mrcnn_output_dir_claim: decides this process's run id. Without
 * resume, fails (exit 1) when dir holds an earlier run, naming it and the ways on. */
void mrcnn_run_begin(const char *dir, int resume);
/* This process's run id; "" before mrcnn_run_begin (library callers, tests). */
const char *mrcnn_run_id(void);
/* Whether a checkpoint whose run_id attribute is id ("" when it has none) belongs to
 * this run's lineage. */
int mrcnn_run_owns(const char *id);
/* Whether retention may delete it: written by this very run id (never an id-less one
 * unless no run began). */
int mrcnn_run_owns_strictly(const char *id);
/* The run_id attribute of a checkpoint into id ("" when absent); 0 when the file
 * cannot be opened as HDF5. */
int mrcnn_checkpoint_run_id(const char *path, char *id, size_t len);

#endif
