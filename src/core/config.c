/* The config schema: every key's type, range and default (config_keys.c), checked
 * whenever a value is set (from a YAML file, read by config_yaml.c, or a KEY=VALUE
 * assignment), and the dump of a config as YAML that loads back the same. */
#include "mrcnn/config.h"
#include "mrcnn/check.h"
#include "config_keys.h"
#include "config_yaml.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *err;
    size_t err_len;
} errbuf;

static int fail(errbuf *e, const char *fmt, ...) MRCNN_PRINTF(2, 3);
static int fail(errbuf *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, e->err_len, fmt, ap);
    va_end(ap);
    return 0;
}

static const mrcnn_config_key *find_key(const char *key) {
    for (int i = 0; i < mrcnn_config_n_keys; i++)
        if (strcmp(mrcnn_config_keys[i].key, key) == 0) return &mrcnn_config_keys[i];
    return NULL;
}

static const char *type_name(mrcnn_config_type t) {
    switch (t) {
    case CFG_INT: return "an integer";
    case CFG_INT64: return "an integer";
    case CFG_FLOAT: return "a number";
    case CFG_BOOL: return "true or false";
    case CFG_STR: return "a string";
    case CFG_INT_LIST: return "a list of integers";
    case CFG_FLOAT_LIST: return "a list of numbers";
    }
    return "?";
}

static int parse_ll(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    while (*end && isspace((unsigned char)*end)) end++;
    if (errno || end == s || *end) return 0;
    *out = v;
    return 1;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (*end && isspace((unsigned char)*end)) end++;
    if (errno || end == s || *end || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

/* Float keys are stored as float: 1e73 would become inf, which the dump (stored in every
 * checkpoint) cannot write back as a number. */
static int fits_float(double v) { return fabs(v) <= FLT_MAX; }

static int parse_bool(const char *s, bool *out) {
    static const char *yes[] = {"true", "True", "TRUE", "yes", "on", "1"};
    static const char *no[] = {"false", "False", "FALSE", "no", "off", "0"};
    for (int i = 0; i < 6; i++) {
        if (strcmp(s, yes[i]) == 0) return *out = true, 1;
        if (strcmp(s, no[i]) == 0) return *out = false, 1;
    }
    return 0;
}

/* ---- the admitted values of a key (config_keys.c) ---- */

/* Integers in full (2147483647, not 2.14748365e+09); other bounds as the float they are. */
static void bound_text(double v, char *out, size_t len) {
    if (v == floor(v) && fabs(v) < 1e15) snprintf(out, len, "%.0f", v);
    else snprintf(out, len, "%.9g", v);
}

static void range_text(const mrcnn_config_key *k, char *out, size_t len) {
    char lo[40], hi[40];
    bound_text(k->min, lo, sizeof lo);
    bound_text(k->max, hi, sizeof hi);
    snprintf(out, len, "%s%s, %s]", k->min_open ? "(" : "[", lo, hi);
}

static int in_range(const mrcnn_config_key *k, double v) {
    if (k->min == 0 && k->max == 0) return 1; // no range declared (booleans, strings)
    return (k->min_open ? v > k->min : v >= k->min) && v <= k->max;
}

static int range_fail(errbuf *e, const char *where, const mrcnn_config_key *k, const char *item, const char *v) {
    char r[96];
    range_text(k, r, sizeof r);
    return fail(e, "%s: %s%s = %s is outside its allowed range %s", where, k->key, item, v, r);
}

static int choice_ok(const mrcnn_config_key *k, const char *v) {
    if (!k->choices) return 1;
    size_t n = strlen(v);
    for (const char *c = k->choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, v, n) == 0) return 1;
        c += len + (bar != NULL);
    }
    return 0;
}

/* Sets one scalar-typed key from its text. */

/* Offset of the first control character or malformed UTF-8 sequence in s, or -1. */
static long str_bad_byte(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    for (long i = 0; p[i];) {
        unsigned c = p[i];
        if (c < 0x20 || c == 0x7f) return i;
        int n = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (n < 0 || (n == 1 && c < 0xc2) || (n == 3 && c > 0xf4)) return i;
        for (int j = 1; j <= n; j++)
            if ((p[i + j] & 0xc0) != 0x80) return i;
        /* overlong 3- and 4-byte forms, UTF-16 surrogates and code points past U+10FFFF */
        if ((n == 2 && c == 0xe0 && p[i + 1] < 0xa0) || (n == 2 && c == 0xed && p[i + 1] >= 0xa0) ||
            (n == 3 && c == 0xf0 && p[i + 1] < 0x90) || (n == 3 && c == 0xf4 && p[i + 1] >= 0x90))
            return i;
        i += n + 1;
    }
    return -1;
}

static int set_scalar(mrcnn_config *cfg, const mrcnn_config_key *k, const char *v, const char *where, errbuf *e) {
    char *field = (char *)cfg + k->offset;
    long long ll;
    double d;
    bool b;
    switch (k->type) {
    case CFG_INT:
        if (!parse_ll(v, &ll) || ll < -2147483647LL || ll > 2147483647LL)
            return fail(e, "%s: %s expects %s, got '%s'", where, k->key, type_name(k->type), v);
        if (!in_range(k, (double)ll)) return range_fail(e, where, k, "", v);
        *(int *)field = (int)ll;
        return 1;
    case CFG_INT64:
        if (!parse_ll(v, &ll)) return fail(e, "%s: %s expects %s, got '%s'", where, k->key, type_name(k->type), v);
        *(long long *)field = ll;
        return 1;
    case CFG_FLOAT:
        if (!parse_double(v, &d)) return fail(e, "%s: %s expects %s, got '%s'", where, k->key, type_name(k->type), v);
        if (!fits_float(d)) return fail(e, "%s: %s = %s is beyond a 32-bit float's range", where, k->key, v);
        if (!in_range(k, d)) return range_fail(e, where, k, "", v);
        *(float *)field = (float)d;
        return 1;
    case CFG_BOOL:
        if (!parse_bool(v, &b)) return fail(e, "%s: %s expects %s, got '%s'", where, k->key, type_name(k->type), v);
        *(bool *)field = b;
        return 1;
    case CFG_STR: {
        if (strlen(v) >= k->size)
            return fail(e, "%s: %s is longer than %zu characters", where, k->key, k->size - 1);
        /* The dump (stored in every checkpoint) is YAML, which has no way to write a control
         * byte or a byte that is not UTF-8 so that it loads back the same. */
        long bad = str_bad_byte(v);
        if (bad >= 0)
            return fail(e, "%s: %s has %s at byte %ld", where, k->key,
                        (unsigned char)v[bad] < 0x80 ? "a control character" : "a byte that is not UTF-8", bad);
        if (!choice_ok(k, v)) {
            char list[256];
            snprintf(list, sizeof list, "%s", k->choices);
            for (char *c = list; *c; c++)
                if (*c == '|') *c = ',';
            return fail(e, "%s: %s = '%s' is not one of the allowed values: %s", where, k->key, v, list);
        }
        snprintf(field, k->size, "%s", v);
        return 1;
    }
    default: return fail(e, "%s: %s expects %s, got the scalar '%s'", where, k->key, type_name(k->type), v);
    }
}

static int set_list(mrcnn_config *cfg, const mrcnn_config_key *k, char items[][64], int n, const char *where,
                    errbuf *e) {
    char *field = (char *)cfg + k->offset;
    if (k->type != CFG_INT_LIST && k->type != CFG_FLOAT_LIST)
        return fail(e, "%s: %s expects %s, got a list", where, k->key, type_name(k->type));
    if (n > MRCNN_CFG_LIST_MAX) return fail(e, "%s: %s has %d items, at most %d", where, k->key, n, MRCNN_CFG_LIST_MAX);
    if ((n < k->len_min || n > k->len_max) && !(n == 0 && k->empty_ok)) {
        char got[512];
        size_t gl = 0;
        got[0] = 0;
        for (int i = 0; i < n && gl < sizeof got; i++)
            gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%s", i ? ", " : "", items[i]);
        char want[96];
        if (k->len_min == k->len_max) snprintf(want, sizeof want, "exactly %d", k->len_min);
        else snprintf(want, sizeof want, "%d to %d", k->len_min, k->len_max);
        return fail(e, "%s: %s = [%s] has %d item%s; it takes %s%s", where, k->key, got, n, n == 1 ? "" : "s", want,
                    k->empty_ok ? " (or none: [])" : "");
    }
    for (int i = 0; i < n; i++) {
        char item[32];
        snprintf(item, sizeof item, " item %d", i);
        long long ll;
        double d;
        if (k->type == CFG_INT_LIST) {
            if (!parse_ll(items[i], &ll) || ll < -2147483647LL || ll > 2147483647LL)
                return fail(e, "%s: %s item %d expects an integer, got '%s'", where, k->key, i, items[i]);
            if (!in_range(k, (double)ll)) return range_fail(e, where, k, item, items[i]);
            ((mrcnn_int_list *)field)->v[i] = (int)ll;
        } else {
            if (!parse_double(items[i], &d))
                return fail(e, "%s: %s item %d expects a number, got '%s'", where, k->key, i, items[i]);
            if (!fits_float(d))
                return fail(e, "%s: %s item %d = %s is beyond a 32-bit float's range", where, k->key, i, items[i]);
            if (!in_range(k, d)) return range_fail(e, where, k, item, items[i]);
            ((mrcnn_float_list *)field)->v[i] = (float)d;
        }
    }
    if (k->type == CFG_INT_LIST)
        ((mrcnn_int_list *)field)->n = n;
    else
        ((mrcnn_float_list *)field)->n = n;
    return 1;
}

/* "[1, 2]", "1,2", "[]" -> items; returns the count or -1. */
static int split_list(const char *text, char items[][64], int max) {
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    int bracket = *p == '[';
    if (bracket) p++;
    int n = 0;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (*p == ']' || *p == 0) break;
        const char *q = p;
        while (*q && *q != ',' && *q != ']') q++;
        const char *end = q;
        while (end > p && isspace((unsigned char)end[-1])) end--;
        if (n >= max || end - p >= 64 || end == p) return -1;
        memcpy(items[n], p, (size_t)(end - p));
        items[n][end - p] = 0;
        n++;
        p = *q == ',' ? q + 1 : q;
    }
    if (bracket && *p != ']') return -1;
    return n;
}

static int set_text(mrcnn_config *cfg, const char *key, const char *value, const char *where, errbuf *e) {
    const mrcnn_config_key *k = find_key(key);
    if (!k) return fail(e, "%s: unknown key '%s'", where, key);
    if (k->type == CFG_INT_LIST || k->type == CFG_FLOAT_LIST) {
        char items[MRCNN_CFG_LIST_MAX + 1][64];
        int n = split_list(value, items, MRCNN_CFG_LIST_MAX + 1);
        if (n < 0) return fail(e, "%s: %s expects %s, got '%s'", where, key, type_name(k->type), value);
        return set_list(cfg, k, items, n, where, e);
    }
    return set_scalar(cfg, k, value, where, e);
}

void mrcnn_config_defaults(mrcnn_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    char err[512];
    errbuf e = {err, sizeof err};
    for (int i = 0; i < mrcnn_config_n_keys; i++)
        if (!set_text(cfg, mrcnn_config_keys[i].key, mrcnn_config_keys[i].def, "defaults", &e))
            MRCNN_CHECK(0, "bad built-in default: %s", err);
}

/* One value of a YAML file (config_yaml.c). */
static int set_yaml(void *ctx, const char *key, const char *text, char items[][64], int n, const char *where,
                    char *err, size_t err_len) {
    errbuf eb = {err, err_len}, *e = &eb;
    const mrcnn_config_key *k = find_key(key);
    if (!k) return fail(e, "%s: unknown key '%s'", where, key);
    if (text) {
        /* YAML has real lists; a scalar for a list key is a mistake, not "[5]". */
        if (k->type == CFG_INT_LIST || k->type == CFG_FLOAT_LIST)
            return fail(e, "%s: %s expects %s, got the scalar '%s'", where, key, type_name(k->type), text);
        return set_scalar(ctx, k, text, where, e);
    }
    return set_list(ctx, k, items, n, where, e);
}

int mrcnn_config_try_load(mrcnn_config *cfg, const char *path, char *err, size_t err_len) {
    return cfg_yaml_load(path, set_yaml, cfg, err, err_len);
}

int mrcnn_config_try_set(mrcnn_config *cfg, const char *assignment, const char *origin, char *err,
                         size_t err_len) {
    errbuf e = {err, err_len};
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment) return fail(&e, "%s: expected KEY=VALUE, got '%s'", origin, assignment);
    char key[CFG_KEY_MAX];
    size_t n = (size_t)(eq - assignment);
    if (n >= CFG_KEY_MAX) return fail(&e, "%s: key too long", origin);
    memcpy(key, assignment, n);
    key[n] = 0;
    return set_text(cfg, key, eq + 1, origin, &e);
}

void mrcnn_config_load(mrcnn_config *cfg, const char *path) {
    char err[1024];
    if (!mrcnn_config_try_load(cfg, path, err, sizeof err)) mrcnn_failf("config", "", __FILE__, __LINE__, "%s", err);
}

void mrcnn_config_set(mrcnn_config *cfg, const char *assignment, const char *origin) {
    char err[1024];
    if (!mrcnn_config_try_set(cfg, assignment, origin, err, sizeof err))
        mrcnn_failf("config", "", __FILE__, __LINE__, "%s", err);
}

char *mrcnn_config_dump(const mrcnn_config *cfg) {
    size_t cap = 16384, len = 0;
    char *out = MRCNN_MALLOC(cap, "config dump");
    for (int i = 0; i < mrcnn_config_n_keys; i++) {
        const mrcnn_config_key *k = &mrcnn_config_keys[i];
        const char *field = (const char *)cfg + k->offset;
        char val[1024]; // a string doubles at most when escaped
        _Static_assert(2 * MRCNN_CFG_STR_MAX + 3 <= sizeof val, "config dump: escaped string fits val");
        size_t vl = 0;
        switch (k->type) {
        case CFG_INT: snprintf(val, sizeof val, "%d", *(const int *)field); break;
        case CFG_INT64: snprintf(val, sizeof val, "%lld", *(const long long *)field); break;
        case CFG_FLOAT: snprintf(val, sizeof val, "%.9g", *(const float *)field); break;
        case CFG_BOOL: snprintf(val, sizeof val, "%s", *(const bool *)field ? "true" : "false"); break;
        case CFG_STR: { // set() admits no control bytes, so only " and \ need escaping
            val[vl++] = '"';
            for (const char *c = field; *c; c++) {
                if (*c == '"' || *c == '\\') val[vl++] = '\\';
                val[vl++] = *c;
            }
            val[vl++] = '"';
            val[vl] = 0;
            break;
        }
        case CFG_INT_LIST: {
            const mrcnn_int_list *l = (const mrcnn_int_list *)field;
            vl += (size_t)snprintf(val, sizeof val, "[");
            for (int j = 0; j < l->n; j++) vl += (size_t)snprintf(val + vl, sizeof val - vl, "%s%d", j ? ", " : "", l->v[j]);
            snprintf(val + vl, sizeof val - vl, "]");
            break;
        }
        case CFG_FLOAT_LIST: {
            const mrcnn_float_list *l = (const mrcnn_float_list *)field;
            vl += (size_t)snprintf(val, sizeof val, "[");
            for (int j = 0; j < l->n; j++) vl += (size_t)snprintf(val + vl, sizeof val - vl, "%s%.9g", j ? ", " : "", l->v[j]);
            snprintf(val + vl, sizeof val - vl, "]");
            break;
        }
        }
        size_t need = strlen(k->key) + strlen(val) + 4;
        if (len + need >= cap) {
            cap = 2 * cap + need;
            out = MRCNN_REALLOC(out, cap, "config dump");
        }
        len += (size_t)snprintf(out + len, cap - len, "%s: %s\n", k->key, val);
    }
    return out;
}
