/* TensorBoard event files without TensorFlow. A file is a sequence of TFRecords:
 *   uint64 length, uint32 masked_crc32c(length), data, uint32 masked_crc32c(data)
 * (little endian); each data is a serialized tensorflow.Event:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 * The protobuf encoding is written by hand: varint keys (field << 3 | wire type),
 * 64-bit (1) and 32-bit (5) fixed little-endian values, length-delimited (2). */
#include "mrcnn/metrics.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint32_t g_crc_table[256];

static void crc_init(void) {
    if (g_crc_table[1]) return;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1; // reflected Castagnoli
        g_crc_table[i] = c;
    }
}

uint32_t mrcnn_crc32c(const void *data, size_t n) {
    crc_init();
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = g_crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t mrcnn_crc32c_masked(const void *data, size_t n) {
    uint32_t c = mrcnn_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- a minimal protobuf writer into a fixed buffer ---- */
typedef struct {
    unsigned char b[1024];
    size_t n;
} pb_buf;

static void pb_byte(pb_buf *p, unsigned char c) {
    if (p->n < sizeof p->b) p->b[p->n] = c;
    p->n++;
}
static void pb_varint(pb_buf *p, uint64_t v) {
    while (v >= 0x80) {
        pb_byte(p, (unsigned char)(v | 0x80));
        v >>= 7;
    }
    pb_byte(p, (unsigned char)v);
}
static void pb_key(pb_buf *p, int field, int wire) { pb_varint(p, ((uint64_t)field << 3) | (uint64_t)wire); }
static void pb_fixed(pb_buf *p, const void *v, int bytes) { // host is little endian (x86, arm64)
    for (int i = 0; i < bytes; i++) pb_byte(p, ((const unsigned char *)v)[i]);
}
static void pb_bytes(pb_buf *p, int field, const void *data, size_t n) {
    pb_key(p, field, 2);
    pb_varint(p, n);
    for (size_t i = 0; i < n; i++) pb_byte(p, ((const unsigned char *)data)[i]);
}

/* A failed write (a full disk, the file size limit, an I/O error) stops the run with
 * one error: an event file that silently stops growing loses the curves of the rest of
 * the run. The file is first cut back to its last whole record, so that it stays
 * readable and a --resume appends whole records to it. */
MRCNN_NORETURN static void tb_fail(mrcnn_tb_writer *w, int err) {
    if (w->f) fclose(w->f); // its error is the one being reported
    w->f = NULL;
    int fd = open(w->path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        struct stat sb;
        off_t good = 0;
        if (fstat(fd, &sb) == 0)
            for (;;) {
                uint64_t len;
                if (pread(fd, &len, 8, good) != 8 || len > (uint64_t)sb.st_size ||
                    good + 16 + (off_t)len > sb.st_size)
                    break;
                good += 16 + (off_t)len;
            }
        if (ftruncate(fd, good) != 0) mrcnn_warn("tensorboard: cannot cut %s back: %s", w->path, strerror(errno));
        close(fd);
    }
    mrcnn_failf("output", "", __FILE__, __LINE__,
                "writing the TensorBoard event file %s failed: %s%s; the file is cut back to its last whole record "
                "(make room, then continue with --resume)", w->path, strerror(err),
                err == ENOSPC ? " (the disk is full)" : err == EFBIG ? " (the file size limit, ulimit -f)" : "");
}

static void write_record(mrcnn_tb_writer *w, const pb_buf *ev) {
    if (!w->f) return;
    if (ev->n > sizeof ev->b) {
        mrcnn_warn("tensorboard: event of %zu bytes dropped (tag too long)", ev->n);
        return;
    }
    uint64_t len = ev->n;
    uint32_t len_crc = mrcnn_crc32c_masked(&len, 8);
    uint32_t data_crc = mrcnn_crc32c_masked(ev->b, ev->n);
    errno = 0;
    if (fwrite(&len, 8, 1, w->f) != 1 || fwrite(&len_crc, 4, 1, w->f) != 1 || fwrite(ev->b, 1, ev->n, w->f) != ev->n ||
        fwrite(&data_crc, 4, 1, w->f) != 1)
        tb_fail(w, errno ? errno : EIO);
}

static void event_head(pb_buf *ev, double wall_time, int64_t step) {
    ev->n = 0;
    pb_key(ev, 1, 1);
    pb_fixed(ev, &wall_time, 8);
    if (step != 0) {
        pb_key(ev, 2, 0);
        pb_varint(ev, (uint64_t)step);
    }
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int mrcnn_tb_open(mrcnn_tb_writer *w, const char *logdir) {
    memset(w, 0, sizeof *w);
    mrcnn_mkdir_p(logdir);
    char host[128] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", logdir, (long long)time(NULL), host,
             (int)getpid());
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        mrcnn_warn("tensorboard: cannot create %s; no event file this run", w->path);
        return 0;
    }
    pb_buf ev;
    event_head(&ev, wall_now(), 0);
    pb_bytes(&ev, 3, "brain.Event:2", 13);
    write_record(w, &ev);
    mrcnn_tb_flush(w);
    return 1;
}

void mrcnn_tb_scalar(mrcnn_tb_writer *w, const char *tag, int64_t step, float value, double wall_time) {
    if (!w->f) return;
    pb_buf val = {.n = 0}, sum = {.n = 0}, ev;
    pb_bytes(&val, 1, tag, strlen(tag));
    pb_key(&val, 2, 5);
    pb_fixed(&val, &value, 4);
    pb_bytes(&sum, 1, val.b, val.n);
    event_head(&ev, wall_time > 0 ? wall_time : wall_now(), step);
    pb_bytes(&ev, 5, sum.b, sum.n);
    write_record(w, &ev);
}

void mrcnn_tb_flush(mrcnn_tb_writer *w) {
    errno = 0;
    if (w->f && fflush(w->f) != 0) tb_fail(w, errno ? errno : EIO);
}

void mrcnn_tb_close(mrcnn_tb_writer *w) {
    if (!w->f) return;
    mrcnn_tb_flush(w);
    errno = 0;
    int ok = fclose(w->f) == 0;
    w->f = NULL;
    if (!ok) tb_fail(w, errno ? errno : EIO);
}
