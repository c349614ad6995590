#include "mrcnn/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int g_rank = 0, g_world = 1;
static mrcnn_log_level g_level = MRCNN_LOG_INFO;

void mrcnn_log_set_rank(int rank, int world_size) {
    g_rank = rank;
    g_world = world_size;
}
int mrcnn_log_rank(void) { return g_rank; }
void mrcnn_log_set_level(mrcnn_log_level level) { g_level = level; }

double mrcnn_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mrcnn_log(mrcnn_log_level level, const char *fmt, ...) {
    if (level < g_level) return;
    /* Info is a job-wide statement: one rank says it. Warnings are per rank. */
    if (level <= MRCNN_LOG_INFO && g_rank != 0) return;
    static const char *tag[] = {"debug", "info", "WARN", "ERROR"};
    FILE *out = level >= MRCNN_LOG_WARN ? stderr : stdout;
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%m/%d %H:%M:%S", &tm);
    if (g_world > 1)
        fprintf(out, "[%s %s r%d] ", stamp, tag[level], g_rank);
    else
        fprintf(out, "[%s %s] ", stamp, tag[level]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    /* A log that cannot be written (a full disk under a redirected stdout) is said once
     * on stderr, which usually goes elsewhere; the run goes on (its checkpoints and
     * metrics.json check their own writes and stop it when they fail). */
    static int reported;
    errno = 0;
    if ((fflush(out) != 0 || ferror(out)) && out == stdout && !reported) {
        reported = 1;
        fprintf(stderr, "mrcnn warning: writing the log to standard output failed: %s%s; further log lines are lost\n",
                errno ? strerror(errno) : "I/O error", errno == ENOSPC ? " (the disk is full)" : "");
        fflush(stderr);
    }
    if (ferror(out)) clearerr(out);
}

const char *mrcnn_format_duration(double seconds, char *buf, size_t len) {
    if (!(seconds >= 0)) seconds = 0;
    long s = (long)(seconds + 0.5);
    if (s >= 86400)
        snprintf(buf, len, "%ldd%02ldh", s / 86400, (s % 86400) / 3600);
    else if (s >= 3600)
        snprintf(buf, len, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
    else if (s >= 60)
        snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, len, "%lds", s);
    return buf;
}
