/* JSON reader (src/core/json.c). Every input is read twice, from memory and from a file
 * through a read buffer of 1..16 bytes (so every token straddles refills), and the two
 * token streams must agree: kind, text, line, offset, error. Numbers: mrcnn_json_int64
 * must agree with strtod where it says the number is an integer. Strings written back
 * with mrcnn_json_write_string must read back as the same text. mrcnn_json_skip is
 * called at varying points. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "json_internal.h"
#include "mrcnn/json.h"

#define MAX_TOKENS 100000

typedef struct {
    int tok;
    int64_t line, off;
    size_t len;
    uint64_t text_hash;
    int64_t iv;
    int iok;
} rec;

static rec *g_recs[2];
static int g_n[2];
static char g_err[2][512];

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

static void check_write_roundtrip(const char *text, size_t len) {
    if (memchr(text, 0, len)) return; // the writer takes a C string: \u0000 cannot be written
    char *buf = NULL;
    size_t blen = 0;
    FILE *m = open_memstream(&buf, &blen);
    mrcnn_json_write_string(m, text);
    fclose(m);
    mrcnn_json *j = mrcnn_json_open_mem(buf, blen);
    mrcnn_json_token t = mrcnn_json_next(j);
    size_t l2 = 0;
    const char *t2 = mrcnn_json_text(j, &l2);
    if (t != MRCNN_JSON_STRING || l2 != len || memcmp(t2, text, len))
        fuzz_die("json: mrcnn_json_write_string of a %zu-byte string does not read back (token %d, %zu bytes): %s", len,
                 (int)t, l2, t != MRCNN_JSON_STRING ? mrcnn_json_error(j) : "different text");
    if (mrcnn_json_next(j) != MRCNN_JSON_EOF) fuzz_die("json: a written string is followed by more tokens");
    mrcnn_json_close(j);
    free(buf);
}

/* Reads every token; `plan` decides where to skip (the same decisions in both passes). */
static void read_all(mrcnn_json *j, int pass, const uint8_t *plan, size_t plan_len) {
    int n = 0;
    for (int k = 0; n < MAX_TOKENS; k++) {
        mrcnn_json_token t = mrcnn_json_next(j);
        rec *r = &g_recs[pass][n++];
        memset(r, 0, sizeof *r);
        r->tok = t;
        r->line = mrcnn_json_line(j);
        r->off = mrcnn_json_offset(j);
        if (t == MRCNN_JSON_ERROR) {
            snprintf(g_err[pass], sizeof g_err[pass], "%s", mrcnn_json_error(j));
            break;
        }
        if (t == MRCNN_JSON_EOF) break;
        size_t len = 0;
        const char *text = mrcnn_json_text(j, &len);
        if (text[len] != 0) fuzz_die("json: token text is not NUL-terminated");
        r->len = len;
        r->text_hash = fnv(text, len);
        if (t == MRCNN_JSON_NUMBER) {
            int ok = 0;
            r->iv = mrcnn_json_int64(j, &ok);
            r->iok = ok;
            double d = mrcnn_json_double(j);
            if (ok && (double)r->iv != d)
                fuzz_die("json: number '%s' reads as int64 %lld but as double %.17g", text, (long long)r->iv, d);
        }
        if (pass == 0 && (t == MRCNN_JSON_STRING || t == MRCNN_JSON_KEY)) check_write_roundtrip(text, len);
        /* Skip the value after a key, or the container just opened, now and then. */
        uint8_t c = plan_len ? plan[(size_t)k % plan_len] : 0;
        if ((t == MRCNN_JSON_KEY || t == MRCNN_JSON_OBJECT_BEGIN || t == MRCNN_JSON_ARRAY_BEGIN) && (c & 7) == 3) {
            int ok = mrcnn_json_skip(j);
            rec *s = &g_recs[pass][n++];
            memset(s, 0, sizeof *s);
            s->tok = 100 + ok;
            if (!ok) {
                snprintf(g_err[pass], sizeof g_err[pass], "%s", mrcnn_json_error(j));
                break;
            }
        }
    }
    g_n[pass] = n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    g_recs[0] = calloc(MAX_TOKENS + 2, sizeof(rec));
    g_recs[1] = calloc(MAX_TOKENS + 2, sizeof(rec));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[600];
    if (!path[0]) fuzz_path(path, sizeof path, "in.json");
    g_err[0][0] = g_err[1][0] = 0;
    /* From memory: the exact bytes (ASan sees any read past the end). */
    char *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    mrcnn_json *j = mrcnn_json_open_mem(copy, size);
    read_all(j, 0, data, size);
    mrcnn_json_close(j);
    free(copy);
    /* From a file through a tiny window. */
    fuzz_write_file(path, data, size);
    mrcnn_json_set_buffer_size(1 + size % 16);
    j = mrcnn_json_open_file(path);
    if (!j) fuzz_die("json: cannot open %s", path);
    read_all(j, 1, data, size);
    mrcnn_json_close(j);
    mrcnn_json_set_buffer_size(0);
    if (g_n[0] != g_n[1]) fuzz_die("json: %d tokens from memory, %d from a file", g_n[0], g_n[1]);
    for (int i = 0; i < g_n[0]; i++)
        if (memcmp(&g_recs[0][i], &g_recs[1][i], sizeof(rec)))
            fuzz_die("json: token %d differs between memory and file input (kind %d/%d, line %lld/%lld, offset %lld/%lld)", i,
                     g_recs[0][i].tok, g_recs[1][i].tok, (long long)g_recs[0][i].line, (long long)g_recs[1][i].line,
                     (long long)g_recs[0][i].off, (long long)g_recs[1][i].off);
    if (strcmp(g_err[0], g_err[1])) fuzz_die("json: errors differ: '%s' vs '%s'", g_err[0], g_err[1]);
    return 0;
}
