/* Streaming JSON pull reader (contract in src/include/mrcnn/json.h). Memory is the read
 * buffer, the container stack and one text buffer as large as the largest string or
 * number seen, so a 450 MB annotation file streams through a 64 KiB window. */
#include "mrcnn/json.h"
#include "json_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/test_hooks.h"

#define JSON_DEFAULT_BUFFER (64 * 1024)
#define JSON_MAX_DEPTH (1 << 20)

typedef enum {
    ST_START,
    ST_OBJ_FIRST,   // after '{': a key or '}'
    ST_ARR_FIRST,   // after '[': a value or ']'
    ST_AFTER_KEY,   // ':' then a value
    ST_AFTER_VALUE, // ',' or a closing bracket, or the end of input at depth 0
    ST_DONE,
    ST_FAILED
} json_state;

struct mrcnn_json {
    FILE *file;        // NULL for memory input
    const char *buf;   // current window: file buffer or the caller's memory
    char *own_buf;     // (bufsize) file buffer
    size_t bufsize;
    size_t pos, end;   // window [0, end), next byte at pos
    int64_t base;      // byte offset of buf[0] in the input
    int64_t line;      // 1-based line of the next byte
    int64_t line_start; // byte offset where that line starts
    int read_error;

    json_state state;
    mrcnn_json_token tok;
    int64_t tok_line, tok_col, tok_off;

    char *stack; // (depth_cap) 'O' or 'A' per open container
    int64_t depth, depth_cap;

    char *text; // (text_cap) current KEY/STRING/NUMBER text, NUL-terminated
    size_t text_len, text_cap;
    int num_is_int; // the NUMBER has no fraction and no exponent

    char err[512];
};

static size_t g_buffer_size = 0;

/* A fault injection: a read window of a few bytes puts every refill inside a token. */
MRCNN_TEST_HOOK void mrcnn_json_set_buffer_size(size_t bytes) { g_buffer_size = bytes; }

static mrcnn_json *json_new(void) {
    mrcnn_json *j = MRCNN_CALLOC(1, sizeof *j, "json reader");
    j->line = 1;
    j->state = ST_START;
    j->tok = MRCNN_JSON_EOF;
    j->depth_cap = 64;
    j->stack = MRCNN_MALLOC((size_t)j->depth_cap, "json container stack");
    j->text_cap = 256;
    j->text = MRCNN_MALLOC(j->text_cap, "json text buffer");
    j->text[0] = 0;
    return j;
}

mrcnn_json *mrcnn_json_open_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    mrcnn_json *j = json_new();
    j->file = f;
    j->bufsize = g_buffer_size ? g_buffer_size : JSON_DEFAULT_BUFFER;
    j->own_buf = MRCNN_MALLOC(j->bufsize, "json read buffer");
    j->buf = j->own_buf;
    return j;
}

mrcnn_json *mrcnn_json_open_mem(const char *data, size_t len) {
    mrcnn_json *j = json_new();
    j->buf = data;
    j->end = len;
    return j;
}

void mrcnn_json_close(mrcnn_json *j) {
    if (!j) return;
    if (j->file) fclose(j->file);
    free(j->own_buf);
    free(j->stack);
    free(j->text);
    free(j);
}

/* ---- input window ------------------------------------------------------------------ */

static int refill(mrcnn_json *j) {
    if (!j->file || j->read_error) return 0;
    j->base += (int64_t)j->end;
    j->pos = j->end = 0;
    size_t n = fread(j->own_buf, 1, j->bufsize, j->file);
    if (n == 0 && ferror(j->file)) j->read_error = errno ? errno : EIO;
    j->end = n;
    return n > 0;
}

static inline int peek(mrcnn_json *j) {
    if (j->pos < j->end || refill(j)) return (unsigned char)j->buf[j->pos];
    return -1;
}

static inline int64_t cur_offset(const mrcnn_json *j) { return j->base + (int64_t)j->pos; }

/* Consumes the byte peek() returned. */
static inline void advance(mrcnn_json *j) {
    if (j->buf[j->pos] == '\n') {
        j->line++;
        j->line_start = cur_offset(j) + 1;
    }
    j->pos++;
}

static void skip_ws(mrcnn_json *j) {
    for (;;) {
        int c = peek(j);
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
        advance(j);
    }
}

/* ---- errors ------------------------------------------------------------------------- */

static mrcnn_json_token fail_at(mrcnn_json *j, int64_t line, int64_t col, int64_t off,
                                const char *fmt, va_list ap) {
    int n = snprintf(j->err, sizeof j->err, "line %lld, column %lld (byte %lld): ", (long long)line,
                     (long long)col, (long long)off);
    if (n < 0 || (size_t)n >= sizeof j->err) n = 0;
    vsnprintf(j->err + n, sizeof j->err - (size_t)n, fmt, ap);
    j->state = ST_FAILED;
    j->tok = MRCNN_JSON_ERROR;
    return MRCNN_JSON_ERROR;
}

static mrcnn_json_token error_at(mrcnn_json *j, int64_t line, int64_t col, int64_t off,
                                 const char *fmt, ...) MRCNN_PRINTF(5, 6);
static mrcnn_json_token error_at(mrcnn_json *j, int64_t line, int64_t col, int64_t off,
                                 const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mrcnn_json_token t = fail_at(j, line, col, off, fmt, ap);
    va_end(ap);
    return t;
}

/* A syntax error at the next unread byte. */
static mrcnn_json_token syntax_error(mrcnn_json *j, const char *fmt, ...) MRCNN_PRINTF(2, 3);
static mrcnn_json_token syntax_error(mrcnn_json *j, const char *fmt, ...) {
    int64_t off = cur_offset(j);
    if (j->read_error) {
        snprintf(j->err, sizeof j->err, "read error at byte %lld: %s", (long long)off,
                 strerror(j->read_error));
        j->state = ST_FAILED;
        j->tok = MRCNN_JSON_ERROR;
        return MRCNN_JSON_ERROR;
    }
    va_list ap;
    va_start(ap, fmt);
    mrcnn_json_token t = fail_at(j, j->line, off - j->line_start + 1, off, fmt, ap);
    va_end(ap);
    return t;
}

mrcnn_json_token mrcnn_json_fail(mrcnn_json *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mrcnn_json_token t = fail_at(j, j->tok_line, j->tok_col, j->tok_off, fmt, ap);
    va_end(ap);
    return t;
}

const char *mrcnn_json_error(const mrcnn_json *j) { return j->err[0] ? j->err : "no error"; }
int64_t mrcnn_json_line(const mrcnn_json *j) { return j->tok_line; }
int64_t mrcnn_json_offset(const mrcnn_json *j) { return j->tok_off; }

/* Describes byte c for a message: 'x', or 0xNN for the unprintable. */
static const char *describe(int c, char *buf, size_t len) {
    if (c < 0) snprintf(buf, len, "end of input");
    else if (c >= 0x20 && c < 0x7f) snprintf(buf, len, "'%c'", c);
    else snprintf(buf, len, "byte 0x%02x", c);
    return buf;
}

/* ---- text buffer -------------------------------------------------------------------- */

static void text_reserve(mrcnn_json *j, size_t extra) {
    if (j->text_len + extra + 1 <= j->text_cap) return;
    size_t cap = j->text_cap;
    while (j->text_len + extra + 1 > cap) cap *= 2;
    j->text = MRCNN_REALLOC(j->text, cap, "json text buffer");
    j->text_cap = cap;
}

static inline void text_put(mrcnn_json *j, char c) {
    if (j->text_len + 2 > j->text_cap) text_reserve(j, 1);
    j->text[j->text_len++] = c;
}

static void text_put_utf8(mrcnn_json *j, uint32_t cp) {
    if (cp < 0x80) {
        text_put(j, (char)cp);
    } else if (cp < 0x800) {
        text_put(j, (char)(0xC0 | (cp >> 6)));
        text_put(j, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        text_put(j, (char)(0xE0 | (cp >> 12)));
        text_put(j, (char)(0x80 | ((cp >> 6) & 0x3F)));
        text_put(j, (char)(0x80 | (cp & 0x3F)));
    } else {
        text_put(j, (char)(0xF0 | (cp >> 18)));
        text_put(j, (char)(0x80 | ((cp >> 12) & 0x3F)));
        text_put(j, (char)(0x80 | ((cp >> 6) & 0x3F)));
        text_put(j, (char)(0x80 | (cp & 0x3F)));
    }
}

/* ---- tokens ------------------------------------------------------------------------- */

static void mark_token(mrcnn_json *j) {
    j->tok_line = j->line;
    j->tok_off = cur_offset(j);
    j->tok_col = j->tok_off - j->line_start + 1;
}

static int read_hex4(mrcnn_json *j, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int c = peek(j);
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        advance(j);
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 1;
}

static mrcnn_json_token read_escape(mrcnn_json *j) {
    char what[32];
    int c = peek(j);
    switch (c) {
    case '"': text_put(j, '"'); break;
    case '\\': text_put(j, '\\'); break;
    case '/': text_put(j, '/'); break;
    case 'b': text_put(j, '\b'); break;
    case 'f': text_put(j, '\f'); break;
    case 'n': text_put(j, '\n'); break;
    case 'r': text_put(j, '\r'); break;
    case 't': text_put(j, '\t'); break;
    case 'u': {
        advance(j);
        uint32_t cp;
        if (!read_hex4(j, &cp)) return syntax_error(j, "invalid \\u escape: expected 4 hex digits");
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return syntax_error(j, "invalid \\u escape: unpaired low surrogate \\u%04X", (unsigned)cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (peek(j) != '\\') return syntax_error(j, "invalid \\u escape: high surrogate \\u%04X not followed by a low one", (unsigned)cp);
            advance(j);
            if (peek(j) != 'u') return syntax_error(j, "invalid \\u escape: high surrogate \\u%04X not followed by a low one", (unsigned)cp);
            advance(j);
            if (!read_hex4(j, &lo)) return syntax_error(j, "invalid \\u escape: expected 4 hex digits");
            if (lo < 0xDC00 || lo > 0xDFFF)
                return syntax_error(j, "invalid \\u escape: high surrogate \\u%04X followed by \\u%04X", (unsigned)cp, (unsigned)lo);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        text_put_utf8(j, cp);
        return MRCNN_JSON_STRING;
    }
    default: return syntax_error(j, "invalid escape: backslash followed by %s", describe(c, what, sizeof what));
    }
    advance(j);
    return MRCNN_JSON_STRING;
}

/* Copies one UTF-8 multi-byte sequence starting with lead byte c, validating it
 * (no overlongs, no surrogates, nothing above U+10FFFF). */
static int read_utf8(mrcnn_json *j, int c) {
    int n;
    uint32_t min, cp;
    if (c >= 0xC2 && c <= 0xDF) n = 1, min = 0x80, cp = (uint32_t)c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 2, min = 0x800, cp = (uint32_t)c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 3, min = 0x10000, cp = (uint32_t)c & 0x07;
    else return 0;
    text_put(j, (char)c);
    advance(j);
    for (int i = 0; i < n; i++) {
        int d = peek(j);
        if (d < 0x80 || d > 0xBF) return 0;
        cp = (cp << 6) | ((uint32_t)d & 0x3F);
        text_put(j, (char)d);
        advance(j);
    }
    return cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

static mrcnn_json_token read_string(mrcnn_json *j, mrcnn_json_token kind) {
    advance(j); // the opening quote
    j->text_len = 0;
    char what[32];
    for (;;) {
        /* Fast path: a run of plain ASCII inside the window. */
        size_t s = j->pos;
        while (j->pos < j->end) {
            unsigned char b = (unsigned char)j->buf[j->pos];
            if (b == '"' || b == '\\' || b < 0x20 || b >= 0x80) break;
            j->pos++;
        }
        if (j->pos > s) {
            text_reserve(j, j->pos - s);
            memcpy(j->text + j->text_len, j->buf + s, j->pos - s);
            j->text_len += j->pos - s;
        }
        int c = peek(j);
        if (c < 0) return syntax_error(j, "unexpected end of input inside a string");
        if (c == '"') {
            advance(j);
            break;
        }
        if (c == '\\') {
            advance(j);
            if (read_escape(j) == MRCNN_JSON_ERROR) return MRCNN_JSON_ERROR;
        } else if (c < 0x20) {
            return syntax_error(j, "control character %s inside a string (must be escaped)", describe(c, what, sizeof what));
        } else if (c >= 0x80) {
            int64_t line = j->line, off = cur_offset(j), col = off - j->line_start + 1;
            if (!read_utf8(j, c)) return error_at(j, line, col, off, "invalid UTF-8 sequence inside a string");
        }
    }
    j->text[j->text_len] = 0;
    j->state = kind == MRCNN_JSON_KEY ? ST_AFTER_KEY : ST_AFTER_VALUE;
    return j->tok = kind;
}

static inline int is_digit(int c) { return c >= '0' && c <= '9'; }

static mrcnn_json_token read_number(mrcnn_json *j) {
    j->text_len = 0;
    j->num_is_int = 1;
    if (peek(j) == '-') {
        text_put(j, '-');
        advance(j);
    }
    int c = peek(j);
    if (!is_digit(c)) return syntax_error(j, "invalid number: expected a digit");
    if (c == '0') {
        text_put(j, '0');
        advance(j);
        if (is_digit(peek(j))) return syntax_error(j, "invalid number: leading zeros are not allowed");
    } else {
        while (is_digit(c = peek(j))) {
            text_put(j, (char)c);
            advance(j);
        }
    }
    if (peek(j) == '.') {
        j->num_is_int = 0;
        text_put(j, '.');
        advance(j);
        if (!is_digit(peek(j))) return syntax_error(j, "invalid number: expected a digit after '.'");
        while (is_digit(c = peek(j))) {
            text_put(j, (char)c);
            advance(j);
        }
    }
    c = peek(j);
    if (c == 'e' || c == 'E') {
        j->num_is_int = 0;
        text_put(j, (char)c);
        advance(j);
        c = peek(j);
        if (c == '+' || c == '-') {
            text_put(j, (char)c);
            advance(j);
        }
        if (!is_digit(peek(j))) return syntax_error(j, "invalid number: expected a digit in the exponent");
        while (is_digit(c = peek(j))) {
            text_put(j, (char)c);
            advance(j);
        }
    }
    j->text[j->text_len] = 0;
    j->state = ST_AFTER_VALUE;
    return j->tok = MRCNN_JSON_NUMBER;
}

static mrcnn_json_token read_literal(mrcnn_json *j, const char *word, mrcnn_json_token kind) {
    for (const char *p = word; *p; p++) {
        if (peek(j) != (unsigned char)*p) return syntax_error(j, "invalid literal: expected '%s'", word);
        advance(j);
    }
    j->state = ST_AFTER_VALUE;
    return j->tok = kind;
}

static mrcnn_json_token push(mrcnn_json *j, char kind) {
    if (j->depth == j->depth_cap) {
        if (j->depth_cap >= JSON_MAX_DEPTH) return syntax_error(j, "nesting deeper than %d", JSON_MAX_DEPTH);
        j->depth_cap *= 2;
        j->stack = MRCNN_REALLOC(j->stack, (size_t)j->depth_cap, "json container stack");
    }
    j->stack[j->depth++] = kind;
    advance(j);
    j->state = kind == 'O' ? ST_OBJ_FIRST : ST_ARR_FIRST;
    return j->tok = kind == 'O' ? MRCNN_JSON_OBJECT_BEGIN : MRCNN_JSON_ARRAY_BEGIN;
}

static mrcnn_json_token pop(mrcnn_json *j) {
    char kind = j->stack[--j->depth];
    advance(j);
    j->state = ST_AFTER_VALUE;
    return j->tok = kind == 'O' ? MRCNN_JSON_OBJECT_END : MRCNN_JSON_ARRAY_END;
}

static mrcnn_json_token read_value(mrcnn_json *j) {
    char what[32];
    mark_token(j);
    int c = peek(j);
    switch (c) {
    case '{': return push(j, 'O');
    case '[': return push(j, 'A');
    case '"': return read_string(j, MRCNN_JSON_STRING);
    case 't': return read_literal(j, "true", MRCNN_JSON_TRUE);
    case 'f': return read_literal(j, "false", MRCNN_JSON_FALSE);
    case 'n': return read_literal(j, "null", MRCNN_JSON_NULL);
    default:
        if (c == '-' || is_digit(c)) return read_number(j);
        if (c < 0) return syntax_error(j, "unexpected end of input: expected a value");
        return syntax_error(j, "unexpected %s: expected a value", describe(c, what, sizeof what));
    }
}

static mrcnn_json_token read_key(mrcnn_json *j) {
    char what[32];
    mark_token(j);
    int c = peek(j);
    if (c == '"') return read_string(j, MRCNN_JSON_KEY);
    if (c < 0) return syntax_error(j, "unexpected end of input: expected an object key string");
    return syntax_error(j, "unexpected %s: expected an object key string", describe(c, what, sizeof what));
}

mrcnn_json_token mrcnn_json_next(mrcnn_json *j) {
    char what[32];
    switch (j->state) {
    case ST_FAILED: return MRCNN_JSON_ERROR;
    case ST_DONE: return j->tok = MRCNN_JSON_EOF;
    case ST_START: skip_ws(j); return read_value(j);
    case ST_ARR_FIRST:
        skip_ws(j);
        if (peek(j) == ']') {
            mark_token(j);
            return pop(j);
        }
        return read_value(j);
    case ST_OBJ_FIRST:
        skip_ws(j);
        if (peek(j) == '}') {
            mark_token(j);
            return pop(j);
        }
        return read_key(j);
    case ST_AFTER_KEY: {
        skip_ws(j);
        int c = peek(j);
        if (c != ':') return syntax_error(j, "unexpected %s: expected ':' after an object key", describe(c, what, sizeof what));
        advance(j);
        skip_ws(j);
        return read_value(j);
    }
    case ST_AFTER_VALUE: {
        skip_ws(j);
        int c = peek(j);
        if (j->depth == 0) {
            if (c < 0) {
                if (j->read_error) return syntax_error(j, "read error");
                mark_token(j);
                j->state = ST_DONE;
                return j->tok = MRCNN_JSON_EOF;
            }
            return syntax_error(j, "unexpected %s after the top-level value", describe(c, what, sizeof what));
        }
        char top = j->stack[j->depth - 1];
        if (c == ',') {
            advance(j);
            skip_ws(j);
            c = peek(j);
            if (top == 'O') {
                if (c == '}') return syntax_error(j, "trailing comma before '}'");
                return read_key(j);
            }
            if (c == ']') return syntax_error(j, "trailing comma before ']'");
            return read_value(j);
        }
        if ((top == 'O' && c == '}') || (top == 'A' && c == ']')) {
            mark_token(j);
            return pop(j);
        }
        return syntax_error(j, "unexpected %s: expected ',' or '%c'", describe(c, what, sizeof what),
                            top == 'O' ? '}' : ']');
    }
    }
    return MRCNN_JSON_ERROR;
}

const char *mrcnn_json_text(mrcnn_json *j, size_t *len) {
    int has = j->tok == MRCNN_JSON_KEY || j->tok == MRCNN_JSON_STRING || j->tok == MRCNN_JSON_NUMBER;
    if (len) *len = has ? j->text_len : 0;
    return has ? j->text : "";
}

double mrcnn_json_double(mrcnn_json *j) {
    if (j->tok != MRCNN_JSON_NUMBER) return 0.0;
    return strtod(j->text, NULL); // glibc's strtod rounds correctly, as Python's float() does
}

/* Exact: the decimal digits times a power of ten, in integers, so "1.5e3" and
 * "900100581904.0" are integers but "0.5" and "1e19" are not. */
int64_t mrcnn_json_int64(mrcnn_json *j, int *ok) {
    if (ok) *ok = 0;
    if (j->tok != MRCNN_JSON_NUMBER) return 0;
    const char *p = j->text;
    int neg = 0;
    if (*p == '-') neg = 1, p++;
    char digits[64];
    int nd = 0, nfrac = 0, in_frac = 0, lost = 0;
    for (; *p && *p != 'e' && *p != 'E'; p++) {
        if (*p == '.') {
            in_frac = 1;
            continue;
        }
        if (nd == 0 && *p == '0') { // leading zeros carry no value
            if (in_frac) nfrac++;
            continue;
        }
        if (nd < (int)sizeof digits) {
            digits[nd++] = *p;
            if (in_frac) nfrac++;
        } else if (*p != '0' || !in_frac) {
            lost = 1; // beyond 64 significant digits: not an int64 anyway
        }
    }
    if (lost) return 0;
    long long exp10 = 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        int eneg = 0;
        if (*p == '+' || *p == '-') eneg = *p == '-', p++;
        for (; *p; p++) {
            if (exp10 < 100000) exp10 = exp10 * 10 + (*p - '0');
        }
        if (eneg) exp10 = -exp10;
    }
    if (nd == 0) { // zero, whatever the exponent
        if (ok) *ok = 1;
        return 0;
    }
    long long e = exp10 - nfrac;
    while (e < 0 && nd > 0 && digits[nd - 1] == '0') nd--, e++;
    if (e < 0) return 0;
    if (nd + e > 19) return 0;
    uint64_t v = 0;
    for (int i = 0; i < nd; i++) v = v * 10 + (uint64_t)(digits[i] - '0');
    for (long long i = 0; i < e; i++) {
        if (v > UINT64_MAX / 10) return 0;
        v *= 10;
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return 0;
    if (ok) *ok = 1;
    return neg ? (int64_t)(0 - v) : (int64_t)v;
}

/* After a KEY, skips the member's value: the usual way to pass over an unknown key. */
int mrcnn_json_skip(mrcnn_json *j) {
    if (j->state == ST_FAILED) return 0;
    mrcnn_json_token t = j->tok;
    if (t == MRCNN_JSON_KEY) {
        t = mrcnn_json_next(j);
        if (t == MRCNN_JSON_ERROR) return 0;
    }
    if (t != MRCNN_JSON_OBJECT_BEGIN && t != MRCNN_JSON_ARRAY_BEGIN) return 1;
    int64_t depth = 1;
    while (depth > 0) {
        t = mrcnn_json_next(j);
        if (t == MRCNN_JSON_ERROR || t == MRCNN_JSON_EOF) return 0;
        if (t == MRCNN_JSON_OBJECT_BEGIN || t == MRCNN_JSON_ARRAY_BEGIN) depth++;
        else if (t == MRCNN_JSON_OBJECT_END || t == MRCNN_JSON_ARRAY_END) depth--;
    }
    return 1;
}

void mrcnn_json_write_string(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\b': fputs("\\b", out); break;
        case '\f': fputs("\\f", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20) fprintf(out, "\\u%04x", c);
            else fputc(c, out);
        }
    }
    fputc('"', out);
}
