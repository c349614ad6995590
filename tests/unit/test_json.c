/* The streaming JSON reader: tokens, escapes, numbers, errors with positions, skip,
 * and values that straddle buffer refills. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/json.h"
#include "../../src/core/json_internal.h"
#include "test_util.h"

/* Renders the whole token stream of a reader as one string, e.g. "{ k:a [ 1 ] }". */
static void render(mrcnn_json *j, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (;;) {
        mrcnn_json_token t = mrcnn_json_next(j);
        char piece[512];
        size_t len;
        const char *s;
        switch (t) {
        case MRCNN_JSON_EOF: return;
        case MRCNN_JSON_ERROR: snprintf(piece, sizeof piece, "ERR(%s)", mrcnn_json_error(j)); break;
        case MRCNN_JSON_OBJECT_BEGIN: snprintf(piece, sizeof piece, "{"); break;
        case MRCNN_JSON_OBJECT_END: snprintf(piece, sizeof piece, "}"); break;
        case MRCNN_JSON_ARRAY_BEGIN: snprintf(piece, sizeof piece, "["); break;
        case MRCNN_JSON_ARRAY_END: snprintf(piece, sizeof piece, "]"); break;
        case MRCNN_JSON_KEY: s = mrcnn_json_text(j, &len); snprintf(piece, sizeof piece, "k:%s(%zu)", s, len); break;
        case MRCNN_JSON_STRING: s = mrcnn_json_text(j, &len); snprintf(piece, sizeof piece, "s:%.400s(%zu)", s, len); break;
        case MRCNN_JSON_NUMBER: snprintf(piece, sizeof piece, "n:%s=%.17g", mrcnn_json_text(j, NULL), mrcnn_json_double(j)); break;
        case MRCNN_JSON_TRUE: snprintf(piece, sizeof piece, "true"); break;
        case MRCNN_JSON_FALSE: snprintf(piece, sizeof piece, "false"); break;
        case MRCNN_JSON_NULL: snprintf(piece, sizeof piece, "null"); break;
        }
        size_t pl = strlen(piece);
        assert_true(n + pl + 2 < cap);
        memcpy(out + n, piece, pl);
        n += pl;
        out[n++] = ' ';
        out[n] = 0;
        if (t == MRCNN_JSON_ERROR) return;
    }
}

static void render_mem(const char *doc, char *out, size_t cap) {
    mrcnn_json *j = mrcnn_json_open_mem(doc, strlen(doc));
    render(j, out, cap);
    mrcnn_json_close(j);
}

/* The same document through a file with a tiny read buffer. */
static void render_file(const char *doc, size_t bufsize, char *out, size_t cap) {
    char path[] = "/tmp/mrcnn_test_json_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    fwrite(doc, 1, strlen(doc), f);
    fclose(f);
    mrcnn_json_set_buffer_size(bufsize);
    mrcnn_json *j = mrcnn_json_open_file(path);
    mrcnn_json_set_buffer_size(0);
    assert_non_null(j);
    render(j, out, cap);
    mrcnn_json_close(j);
    unlink(path);
}

static void test_tokens(void **state) {
    char out[4096];
    render_mem(" {\"a\": [1, -2.5e3, true, false, null, {}, []], \"b\" : \"x\"}\n", out, sizeof out);
    assert_string_equal(out, "{ k:a(1) [ n:1=1 n:-2.5e3=-2500 true false null { } [ ] ] k:b(1) s:x(1) } ");
    render_mem("42", out, sizeof out);
    assert_string_equal(out, "n:42=42 ");
    render_mem("\"\"", out, sizeof out);
    assert_string_equal(out, "s:(0) ");
    /* After EOF the reader keeps answering EOF. */
    mrcnn_json *j = mrcnn_json_open_mem("[]", 2);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_ARRAY_BEGIN);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_ARRAY_END);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_EOF);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_EOF);
    mrcnn_json_close(j);
}

static void test_escapes(void **state) {
    const char *doc = "[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\", \"\\ud83d\\ude00\", \"x\\u0000y\", \"caf\xc3\xa9\"]";
    mrcnn_json *j = mrcnn_json_open_mem(doc, strlen(doc));
    size_t len;
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_ARRAY_BEGIN);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_STRING);
    assert_string_equal(mrcnn_json_text(j, &len), "a\"b\\c/d\b\f\n\r\t");
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_STRING);
    assert_string_equal(mrcnn_json_text(j, &len), "\xc3\xa9\xe2\x82\xac");
    assert_int_equal(len, 5);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_STRING);
    assert_string_equal(mrcnn_json_text(j, &len), "\xf0\x9f\x98\x80"); // U+1F600 from a surrogate pair
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_STRING);
    const char *t = mrcnn_json_text(j, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(t, "x\0y", 3);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_STRING);
    assert_string_equal(mrcnn_json_text(j, NULL), "caf\xc3\xa9");
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_ARRAY_END);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_EOF);
    mrcnn_json_close(j);
}

static int64_t int_of(const char *doc, int *ok) {
    mrcnn_json *j = mrcnn_json_open_mem(doc, strlen(doc));
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_NUMBER);
    int64_t v = mrcnn_json_int64(j, ok);
    mrcnn_json_close(j);
    return v;
}

static double double_of(const char *doc) {
    mrcnn_json *j = mrcnn_json_open_mem(doc, strlen(doc));
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_NUMBER);
    double v = mrcnn_json_double(j);
    mrcnn_json_close(j);
    return v;
}

static void test_numbers(void **state) {
    int ok;
    assert_true(int_of("900100581904", &ok) == 900100581904LL && ok);
    assert_true(int_of("9223372036854775807", &ok) == INT64_MAX && ok);
    assert_true(int_of("-9223372036854775808", &ok) == INT64_MIN && ok);
    int_of("9223372036854775808", &ok);
    assert_false(ok);
    int_of("-9223372036854775809", &ok);
    assert_false(ok);
    int_of("123456789012345678901234567890", &ok);
    assert_false(ok);
    assert_true(int_of("0", &ok) == 0 && ok);
    assert_true(int_of("-0", &ok) == 0 && ok);
    assert_true(int_of("1.5e3", &ok) == 1500 && ok);
    assert_true(int_of("900100581904.0", &ok) == 900100581904LL && ok);
    assert_true(int_of("12e-1", &ok) == 0 && !ok);
    assert_true(int_of("120e-1", &ok) == 12 && ok);
    assert_true(int_of("0.000e5", &ok) == 0 && ok);
    int_of("0.5", &ok);
    assert_false(ok);
    int_of("1e19", &ok);
    assert_false(ok);
    assert_true(int_of("1e18", &ok) == 1000000000000000000LL && ok);
    /* Doubles are correctly rounded, as Python's float() is. */
    assert_true(double_of("0.1") == 0.1);
    assert_true(double_of("-2.5E-3") == -2.5e-3);
    assert_true(double_of("1.7976931348623157e308") == 1.7976931348623157e308);
    assert_true(double_of("123.456789012345678") == 123.456789012345678);
    assert_true(double_of("9007199254740993") == 9007199254740992.0);
    /* A non-number token answers not-ok. */
    mrcnn_json *j = mrcnn_json_open_mem("\"5\"", 3);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_STRING);
    mrcnn_json_int64(j, &ok);
    assert_false(ok);
    mrcnn_json_close(j);
}

/* The error text for a document read to its first error. */
static void error_of(const char *doc, char *out, size_t cap) {
    mrcnn_json *j = mrcnn_json_open_mem(doc, strlen(doc));
    mrcnn_json_token t;
    while ((t = mrcnn_json_next(j)) != MRCNN_JSON_ERROR && t != MRCNN_JSON_EOF) {}
    snprintf(out, cap, "%s", t == MRCNN_JSON_ERROR ? mrcnn_json_error(j) : "no error");
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_ERROR); // stays failed
    mrcnn_json_close(j);
}

static void test_errors(void **state) {
    char e[600];
    /* Truncated: reported at the end of the input. */
    error_of("{\n  \"a\": [1, 2", e, sizeof e);
    assert_string_equal(e, "line 2, column 13 (byte 14): unexpected end of input: expected ',' or ']'");
    error_of("[{\"images\": [\n{\"id\": 1, \"file_name\": \"abc", e, sizeof e);
    assert_string_equal(e, "line 2, column 28 (byte 41): unexpected end of input inside a string");
    error_of("", e, sizeof e);
    assert_string_equal(e, "line 1, column 1 (byte 0): unexpected end of input: expected a value");
    error_of("[1, 2,]", e, sizeof e);
    assert_string_equal(e, "line 1, column 7 (byte 6): trailing comma before ']'");
    error_of("{\"a\": 1,\n }", e, sizeof e);
    assert_string_equal(e, "line 2, column 2 (byte 10): trailing comma before '}'");
    error_of("[\"a\\x\"]", e, sizeof e);
    assert_string_equal(e, "line 1, column 5 (byte 4): invalid escape: backslash followed by 'x'");
    error_of("[\"\\u12G4\"]", e, sizeof e);
    assert_non_null(strstr(e, "expected 4 hex digits"));
    error_of("[\"\\udc00\"]", e, sizeof e);
    assert_non_null(strstr(e, "unpaired low surrogate"));
    error_of("[\"\\ud800x\"]", e, sizeof e);
    assert_non_null(strstr(e, "not followed by a low one"));
    error_of("[\"\\ud800\\u0041\"]", e, sizeof e);
    assert_non_null(strstr(e, "followed by \\u0041"));
    error_of("[\"a\tb\"]", e, sizeof e);
    assert_string_equal(e, "line 1, column 4 (byte 3): control character byte 0x09 inside a string (must be escaped)");
    error_of("[\"\xc3\x28\"]", e, sizeof e);
    assert_string_equal(e, "line 1, column 3 (byte 2): invalid UTF-8 sequence inside a string");
    error_of("[\"\xed\xa0\x80\"]", e, sizeof e); // an encoded surrogate
    assert_non_null(strstr(e, "invalid UTF-8"));
    error_of("[01]", e, sizeof e);
    assert_non_null(strstr(e, "leading zeros"));
    error_of("[1.]", e, sizeof e);
    assert_non_null(strstr(e, "after '.'"));
    error_of("[-]", e, sizeof e);
    assert_non_null(strstr(e, "expected a digit"));
    error_of("[1e+]", e, sizeof e);
    assert_non_null(strstr(e, "exponent"));
    error_of("[tru]", e, sizeof e);
    assert_non_null(strstr(e, "expected 'true'"));
    error_of("[NaN]", e, sizeof e);
    assert_string_equal(e, "line 1, column 2 (byte 1): unexpected 'N': expected a value");
    error_of("{\"a\" 1}", e, sizeof e);
    assert_string_equal(e, "line 1, column 6 (byte 5): unexpected '1': expected ':' after an object key");
    error_of("{1: 2}", e, sizeof e);
    assert_non_null(strstr(e, "expected an object key string"));
    error_of("[1 2]", e, sizeof e);
    assert_string_equal(e, "line 1, column 4 (byte 3): unexpected '2': expected ',' or ']'");
    error_of("[1]]", e, sizeof e);
    assert_string_equal(e, "line 1, column 4 (byte 3): unexpected ']' after the top-level value");
    error_of("{} {}", e, sizeof e);
    assert_non_null(strstr(e, "after the top-level value"));
    error_of("[1}", e, sizeof e);
    assert_non_null(strstr(e, "expected ',' or ']'"));
}

static void test_fail_and_positions(void **state) {
    const char *doc = "{\"images\": [\n  {\"id\": 7, \"bbox\": [1, 2, 3]}\n]}";
    mrcnn_json *j = mrcnn_json_open_mem(doc, strlen(doc));
    mrcnn_json_token t;
    while ((t = mrcnn_json_next(j)) != MRCNN_JSON_KEY || strcmp(mrcnn_json_text(j, NULL), "bbox")) assert_true(t > 0);
    assert_int_equal(mrcnn_json_line(j), 2);
    assert_int_equal(mrcnn_json_offset(j), 25);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_ARRAY_BEGIN);
    assert_int_equal(mrcnn_json_offset(j), 33);
    assert_int_equal(mrcnn_json_fail(j, "bbox must have 4 numbers, not %d", 3), MRCNN_JSON_ERROR);
    assert_string_equal(mrcnn_json_error(j), "line 2, column 21 (byte 33): bbox must have 4 numbers, not 3");
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_ERROR);
    assert_int_equal(mrcnn_json_skip(j), 0);
    mrcnn_json_close(j);
}

static void test_skip_value(void **state) {
    const char *doc = "{\"skip\": {\"a\": [1, {\"b\": [[]]}], \"c\": \"]}\"}, \"x\": 5, \"arr\": [[1], [2]], \"y\": true}";
    mrcnn_json *j = mrcnn_json_open_mem(doc, strlen(doc));
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_OBJECT_BEGIN);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_KEY);
    assert_true(mrcnn_json_skip(j)); // after a KEY: skips the member's value
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_KEY);
    assert_string_equal(mrcnn_json_text(j, NULL), "x");
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_NUMBER);
    assert_true(mrcnn_json_skip(j)); // after a scalar: nothing
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_KEY);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_ARRAY_BEGIN);
    assert_true(mrcnn_json_skip(j));
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_KEY);
    assert_string_equal(mrcnn_json_text(j, NULL), "y");
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_TRUE);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_OBJECT_END);
    assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_EOF);
    mrcnn_json_close(j);
    /* A syntax error inside the skipped part. */
    const char *bad = "{\"skip\": [1, {\"a\" 2}], \"x\": 1}";
    j = mrcnn_json_open_mem(bad, strlen(bad));
    mrcnn_json_next(j);
    mrcnn_json_next(j);
    assert_int_equal(mrcnn_json_skip(j), 0);
    assert_non_null(strstr(mrcnn_json_error(j), "expected ':'"));
    mrcnn_json_close(j);
}

/* Every buffer size from 1 byte up: values split across refills read the same as from memory. */
static void test_buffer_refills(void **state) {
    size_t longn = 5000;
    char *doc = malloc(longn + 1024);
    int n = sprintf(doc, "{\"counts\": \"");
    for (size_t i = 0; i < longn; i++) doc[n++] = (char)('0' + i % 64 == '\\' ? 'x' : '0' + i % 64); // RLE-like
    n += sprintf(doc + n, "\",\n \"esc\": \"\\ud83d\\ude00 \\u00e9 caf\xc3\xa9\\n\", \"ids\": [900100581904, -1.25e-7, 3],"
                          " \"t\": [true, false, null], \"big\": 123456789012345678}\n");
    doc[n] = 0;
    size_t cap = 3 * longn + 4096;
    char *want = malloc(cap), *got = malloc(cap);
    render_mem(doc, want, cap);
    if (strstr(want, "ERR")) fail_msg("%s", strstr(want, "ERR"));
    for (size_t bs = 1; bs <= 40; bs++) {
        render_file(doc, bs, got, cap);
        assert_string_equal(got, want);
    }
    render_file(doc, 4096, got, cap); // one string longer than the buffer
    assert_string_equal(got, want);
    /* Error positions do not depend on the buffer either. */
    doc[n - 8] = 0; // truncated inside the last number's key line
    render_mem(doc, want, cap);
    assert_non_null(strstr(want, "ERR(line 2"));
    for (size_t bs = 1; bs <= 9; bs++) {
        render_file(doc, bs, got, cap);
        assert_string_equal(got, want);
    }
    free(doc);
    free(want);
    free(got);
}

static void test_write_string_round_trip(void **state) {
    const char *cases[] = {"plain", "q\"uote\\back/slash", "ctl\x01\x1f\b\f\n\r\t", "utf8 \xc3\xa9\xf0\x9f\x98\x80", ""};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        mrcnn_json_write_string(f, cases[i]);
        fclose(f);
        mrcnn_json *j = mrcnn_json_open_mem(buf, len);
        assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_STRING);
        assert_string_equal(mrcnn_json_text(j, NULL), cases[i]);
        assert_int_equal(mrcnn_json_next(j), MRCNN_JSON_EOF);
        mrcnn_json_close(j);
        free(buf);
    }
}

static void test_open_missing_file(void **state) {
    errno = 0;
    assert_null(mrcnn_json_open_file("/nonexistent/dir/instances.json"));
    assert_int_equal(errno, ENOENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fail_and_positions),
        cmocka_unit_test(test_skip_value),
        cmocka_unit_test(test_buffer_refills),
        cmocka_unit_test(test_write_string_round_trip),
        cmocka_unit_test(test_open_missing_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
