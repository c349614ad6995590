/* Rank-aware logging and monotonic timers. Info lines come from rank 0 only;
 * warnings and errors from every rank, prefixed with it. */
#ifndef MRCNN_LOG_H
#define MRCNN_LOG_H

#include "mrcnn/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MRCNN_LOG_DEBUG = 0, MRCNN_LOG_INFO, MRCNN_LOG_WARN, MRCNN_LOG_ERROR } mrcnn_log_level;

/* Set once MPI is up; before that every process counts as rank 0 of 1. */
void mrcnn_log_set_rank(int rank, int world_size);
int mrcnn_log_rank(void);
void mrcnn_log_set_level(mrcnn_log_level level);
void mrcnn_log(mrcnn_log_level level, const char *fmt, ...) MRCNN_PRINTF(2, 3);
#define mrcnn_info(...) mrcnn_log(MRCNN_LOG_INFO, __VA_ARGS__)
#define mrcnn_warn(...) mrcnn_log(MRCNN_LOG_WARN, __VA_ARGS__)
#define mrcnn_debug(...) mrcnn_log(MRCNN_LOG_DEBUG, __VA_ARGS__)

/* Seconds on a monotonic clock. */
double mrcnn_time_now(void);

/* "1h02m", "3m05s", "12s": for ETAs. */
const char *mrcnn_format_duration(double seconds, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
