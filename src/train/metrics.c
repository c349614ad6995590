/* Rank 0's view of training: one log line per LOG_PERIOD steps, the same numbers
 * appended to metrics.json (opened, appended and closed each time, so a crash
 * loses nothing that was logged) and to the TensorBoard event file. */
#include "mrcnn/metrics.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double mrcnn_rss_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long pages = 0, rss = 0;
    int ok = fscanf(f, "%ld %ld", &pages, &rss) == 2;
    fclose(f);
    return ok ? (double)rss * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0) : 0;
}

/* JSON has no NaN/Inf: a window of only skipped steps logs null. */
static void json_num(FILE *f, const char *key, double v, const char *fmt) {
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
}

/* Appends one record (a whole line) to metrics.json. A failed write (a full disk, the
 * file size limit, an I/O error) stops the run with one error, after cutting the file
 * back to its last whole line: a metrics.json that silently stops growing, or ends in
 * half a record, loses the rest of the run's curves and breaks a --resume's appends. */
static void json_append(const char *path, FILE *mem, char **bufp, const size_t *lenp) {
    errno = 0;
    int err = fclose(mem) == 0 ? 0 : errno ? errno : ENOMEM;
    char *buf = *bufp;
    size_t len = *lenp;
    int fd = err ? -1 : open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    off_t start = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
    if (fd < 0 && !err) err = errno;
    for (size_t done = 0; fd >= 0 && !err && done < len;) {
        ssize_t w = write(fd, buf + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) err = w < 0 ? errno : ENOSPC;
        else done += (size_t)w;
    }
    if (fd >= 0 && err && start >= 0 && ftruncate(fd, start) != 0)
        mrcnn_warn("cannot cut %s back to its last whole record: %s", path, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && !err) err = errno;
    free(buf);
    if (err)
        mrcnn_failf("output", "", __FILE__, __LINE__,
                    "writing %s failed: %s%s; the file keeps its whole records (make room, then continue with --resume)",
                    path, strerror(err),
                    err == ENOSPC ? " (the disk is full)" : err == EFBIG ? " (the file size limit, ulimit -f)" : "");
}

void mrcnn_metrics_open(mrcnn_metrics *m, const char *output_dir, int enabled) {
    memset(m, 0, sizeof *m);
    m->enabled = enabled;
    if (!enabled) return;
    if (!mrcnn_mkdir_p(output_dir)) mrcnn_warn("cannot create OUTPUT_DIR %s: %s", output_dir, strerror(errno));
    snprintf(m->json_path, sizeof m->json_path, "%s/metrics.json", output_dir);
    mrcnn_tb_open(&m->tb, output_dir);
}

void mrcnn_metrics_log(mrcnn_metrics *m, const mrcnn_step_metrics *s) {
    if (!m->enabled) return;
    char line[2048], eta[32];
    int n = snprintf(line, sizeof line, "step %lld/%lld  loss %.4f", (long long)s->step, (long long)s->max_step,
                     s->total_loss);
    for (int i = 0; i < s->n_losses && n < (int)sizeof line; i++)
        n += snprintf(line + n, sizeof line - n, "  %s %.4f", s->loss_names[i], s->losses[i]);
    if (n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - n,
                      "  lr %.6g  %.2f img/s  data %.1f ms  step %.1f ms  mem %.0f MiB  eta %s", s->lr,
                      s->img_per_s, s->data_ms, s->step_ms, s->mem_mb,
                      mrcnn_format_duration(s->eta_s, eta, sizeof eta));
    if (s->gpu_mem_mb > 0 && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - n, "  gpu mem %.0f MiB", s->gpu_mem_mb);
    if (n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - n, "  syncs/step %.1f (reads %.1f)", s->syncs_per_step, s->reads_per_step);
    if (s->loss_scale != 1.0 && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - n, "  scale %g", s->loss_scale);
    if (s->skipped && n < (int)sizeof line)
        snprintf(line + n, sizeof line - n, "  skipped %lld", (long long)s->skipped);
    mrcnn_info("%s", line);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    MRCNN_CHECK(f, "metrics: open_memstream failed: %s", strerror(errno));
    {
        fprintf(f, "{\"step\": %lld", (long long)s->step);
        if (mrcnn_run_id()[0]) fprintf(f, ", \"run_id\": \"%s\"", mrcnn_run_id());
        json_num(f, "total_loss", s->total_loss, "%.17g");
        for (int i = 0; i < s->n_losses; i++) json_num(f, s->loss_names[i], s->losses[i], "%.17g");
        json_num(f, "lr", s->lr, "%.9g");
        json_num(f, "img_per_s", s->img_per_s, "%.6g");
        json_num(f, "data_ms", s->data_ms, "%.4g");
        json_num(f, "step_ms", s->step_ms, "%.4g");
        json_num(f, "mem_mb", s->mem_mb, "%.1f");
        if (s->gpu_mem_mb > 0) json_num(f, "gpu_mem_mb", s->gpu_mem_mb, "%.1f");
        json_num(f, "eta_s", s->eta_s, "%.1f");
        json_num(f, "loss_scale", s->loss_scale, "%.9g");
        json_num(f, "syncs_per_step", s->syncs_per_step, "%.4g");
        json_num(f, "reads_per_step", s->reads_per_step, "%.4g");
        fprintf(f, ", \"skipped\": %lld, \"time\": %.3f}\n", (long long)s->skipped, wall);
    }
    json_append(m->json_path, f, &buf, &blen);
    char tag[160];
    mrcnn_tb_scalar(&m->tb, "total_loss", s->step, (float)s->total_loss, wall);
    for (int i = 0; i < s->n_losses; i++) {
        snprintf(tag, sizeof tag, "losses/%s", s->loss_names[i]);
        mrcnn_tb_scalar(&m->tb, tag, s->step, (float)s->losses[i], wall);
    }
    mrcnn_tb_scalar(&m->tb, "lr", s->step, (float)s->lr, wall);
    mrcnn_tb_scalar(&m->tb, "perf/img_per_s", s->step, (float)s->img_per_s, wall);
    mrcnn_tb_scalar(&m->tb, "perf/data_ms", s->step, (float)s->data_ms, wall);
    mrcnn_tb_scalar(&m->tb, "perf/step_ms", s->step, (float)s->step_ms, wall);
    mrcnn_tb_scalar(&m->tb, "perf/mem_mb", s->step, (float)s->mem_mb, wall);
    if (s->gpu_mem_mb > 0) mrcnn_tb_scalar(&m->tb, "perf/gpu_mem_mb", s->step, (float)s->gpu_mem_mb, wall);
    mrcnn_tb_scalar(&m->tb, "loss_scale", s->step, (float)s->loss_scale, wall);
    mrcnn_tb_scalar(&m->tb, "perf/syncs_per_step", s->step, (float)s->syncs_per_step, wall);
    mrcnn_tb_scalar(&m->tb, "perf/reads_per_step", s->step, (float)s->reads_per_step, wall);
    mrcnn_tb_flush(&m->tb);
}

void mrcnn_metrics_log_eval(mrcnn_metrics *m, const mrcnn_eval_metrics *e) {
    if (!m->enabled) return;
    mrcnn_info("eval at step %lld (%lld images, %.1f s): bbox AP %.4f AP50 %.4f  segm AP %.4f AP50 %.4f",
               (long long)e->step, (long long)e->images, e->seconds, e->bbox_ap, e->bbox_ap50, e->segm_ap,
               e->segm_ap50);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    const char *tags[4] = {"eval/bbox_AP", "eval/bbox_AP50", "eval/segm_AP", "eval/segm_AP50"};
    const double v[4] = {e->bbox_ap, e->bbox_ap50, e->segm_ap, e->segm_ap50};
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    MRCNN_CHECK(f, "metrics: open_memstream failed: %s", strerror(errno));
    {
        fprintf(f, "{\"step\": %lld", (long long)e->step);
        if (mrcnn_run_id()[0]) fprintf(f, ", \"run_id\": \"%s\"", mrcnn_run_id());
        for (int i = 0; i < 4; i++) json_num(f, tags[i], v[i], "%.17g");
        fprintf(f, ", \"eval/images\": %lld", (long long)e->images);
        json_num(f, "eval/seconds", e->seconds, "%.3f");
        fprintf(f, ", \"time\": %.3f}\n", wall);
    }
    json_append(m->json_path, f, &buf, &blen);
    for (int i = 0; i < 4; i++) mrcnn_tb_scalar(&m->tb, tags[i], e->step, (float)v[i], wall);
    mrcnn_tb_flush(&m->tb);
}

void mrcnn_metrics_close(mrcnn_metrics *m) {
    mrcnn_tb_close(&m->tb);
    m->enabled = 0;
}
