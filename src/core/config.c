/* YAML (libyaml event API) and KEY=VALUE parsing into mrcnn_config. Nested mappings
 * and dotted keys are equivalent: `SOLVER: {BASE_LR: 0.1}` and `SOLVER.BASE_LR: 0.1`. */
#include "mrcnn/config.h"
#include "mrcnn/check.h"
#include "config_keys.h"

#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define KEY_MAX 256
#define DEPTH_MAX 16

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

static int parse_bool(const char *s, bool *out) {
    static const char *yes[] = {"true", "True", "TRUE", "yes", "on", "1"};
    static const char *no[] = {"false", "False", "FALSE", "no", "off", "0"};
    for (int i = 0; i < 6; i++) {
        if (strcmp(s, yes[i]) == 0) return *out = true, 1;
        if (strcmp(s, no[i]) == 0) return *out = false, 1;
    }
    return 0;
}

/* Sets one scalar-typed key from its text. */
static int set_scalar(mrcnn_config *cfg, const mrcnn_config_key *k, const char *v, const char *where, errbuf *e) {
    char *field = (char *)cfg + k->offset;
    long long ll;
    double d;
    bool b;
    switch (k->type) {
    case CFG_INT:
        if (!parse_ll(v, &ll) || ll < -2147483647LL || ll > 2147483647LL)
            return fail(e, "%s: %s expects %s, got '%s'", where, k->key, type_name(k->type), v);
        *(int *)field = (int)ll;
        return 1;
    case CFG_INT64:
        if (!parse_ll(v, &ll)) return fail(e, "%s: %s expects %s, got '%s'", where, k->key, type_name(k->type), v);
        *(long long *)field = ll;
        return 1;
    case CFG_FLOAT:
        if (!parse_double(v, &d)) return fail(e, "%s: %s expects %s, got '%s'", where, k->key, type_name(k->type), v);
        *(float *)field = (float)d;
        return 1;
    case CFG_BOOL:
        if (!parse_bool(v, &b)) return fail(e, "%s: %s expects %s, got '%s'", where, k->key, type_name(k->type), v);
        *(bool *)field = b;
        return 1;
    case CFG_STR:
        if (strlen(v) >= k->size)
            return fail(e, "%s: %s is longer than %zu characters", where, k->key, k->size - 1);
        snprintf(field, k->size, "%s", v);
        return 1;
    default: return fail(e, "%s: %s expects %s, got the scalar '%s'", where, k->key, type_name(k->type), v);
    }
}

static int set_list(mrcnn_config *cfg, const mrcnn_config_key *k, char items[][64], int n, const char *where,
                    errbuf *e) {
    char *field = (char *)cfg + k->offset;
    if (k->type != CFG_INT_LIST && k->type != CFG_FLOAT_LIST)
        return fail(e, "%s: %s expects %s, got a list", where, k->key, type_name(k->type));
    if (n > MRCNN_CFG_LIST_MAX) return fail(e, "%s: %s has %d items, at most %d", where, k->key, n, MRCNN_CFG_LIST_MAX);
    for (int i = 0; i < n; i++) {
        long long ll;
        double d;
        if (k->type == CFG_INT_LIST) {
            if (!parse_ll(items[i], &ll) || ll < -2147483647LL || ll > 2147483647LL)
                return fail(e, "%s: %s item %d expects an integer, got '%s'", where, k->key, i, items[i]);
            ((mrcnn_int_list *)field)->v[i] = (int)ll;
        } else {
            if (!parse_double(items[i], &d))
                return fail(e, "%s: %s item %d expects a number, got '%s'", where, k->key, i, items[i]);
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

static int load_file(mrcnn_config *cfg, const char *path, int depth, errbuf *e);

/* Walks the event stream: a stack of mapping keys gives each scalar its dotted key. */
static int load_events(mrcnn_config *cfg, yaml_parser_t *parser, const char *path, int depth, errbuf *e) {
    char prefix[DEPTH_MAX][KEY_MAX];
    int level = -1;          // mapping nesting; -1 before the root mapping
    int expect_key[DEPTH_MAX];
    char pending[KEY_MAX] = ""; // key waiting for its value
    int seen_non_base = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(parser, &ev))
            return fail(e, "%s:%zu: YAML error: %s", path, parser->problem_mark.line + 1,
                        parser->problem ? parser->problem : "malformed");
        char where[KEY_MAX + 64];
        snprintf(where, sizeof where, "%s:%zu", path, ev.start_mark.line + 1);
        int ok = 1, done = 0;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = 1; break;
        case YAML_MAPPING_START_EVENT:
            if (level >= 0 && expect_key[level]) {
                ok = fail(e, "%s: a mapping cannot be a key", where);
                break;
            }
            if (level + 1 >= DEPTH_MAX) {
                ok = fail(e, "%s: nested deeper than %d", where, DEPTH_MAX);
                break;
            }
            level++;
            snprintf(prefix[level], KEY_MAX, "%s", level == 0 ? "" : pending);
            expect_key[level] = 1;
            if (level > 0) expect_key[level - 1] = 1;
            break;
        case YAML_MAPPING_END_EVENT: level--; break;
        case YAML_SEQUENCE_START_EVENT: {
            if (level < 0 || expect_key[level]) {
                ok = fail(e, "%s: a list is not allowed here", where);
                break;
            }
            char items[MRCNN_CFG_LIST_MAX + 1][64];
            int n = 0;
            for (;;) {
                yaml_event_t it;
                if (!yaml_parser_parse(parser, &it)) {
                    ok = fail(e, "%s:%zu: YAML error: %s", path, parser->problem_mark.line + 1,
                              parser->problem ? parser->problem : "malformed");
                    break;
                }
                int end = it.type == YAML_SEQUENCE_END_EVENT;
                if (!end && it.type != YAML_SCALAR_EVENT) {
                    ok = fail(e, "%s: %s: list items must be plain values", where, pending);
                } else if (!end) {
                    if (n > MRCNN_CFG_LIST_MAX || it.data.scalar.length >= 64)
                        ok = fail(e, "%s: %s: list too long or item too long", where, pending);
                    else
                        snprintf(items[n++], 64, "%s", (const char *)it.data.scalar.value);
                }
                yaml_event_delete(&it);
                if (end || !ok) break;
            }
            if (!ok) break;
            const mrcnn_config_key *k = find_key(pending);
            if (!k)
                ok = fail(e, "%s: unknown key '%s'", where, pending);
            else
                ok = set_list(cfg, k, items, n, where, e);
            expect_key[level] = 1;
            break;
        }
        case YAML_SCALAR_EVENT: {
            const char *v = (const char *)ev.data.scalar.value;
            if (level < 0) {
                if (v[0]) ok = fail(e, "%s: expected a mapping of keys, got '%s'", where, v);
                break;
            }
            if (expect_key[level]) {
                if (level == 0 && strcmp(v, "_BASE_") == 0) {
                    if (seen_non_base) ok = fail(e, "%s: _BASE_ must come before every other key", where);
                    snprintf(pending, KEY_MAX, "_BASE_");
                } else {
                    seen_non_base = 1;
                    if (strlen(prefix[level]) + strlen(v) + 2 > KEY_MAX) {
                        ok = fail(e, "%s: key too long", where);
                        break;
                    }
                    snprintf(pending, KEY_MAX, "%s%s%s", prefix[level], prefix[level][0] ? "." : "", v);
                }
                expect_key[level] = 0;
            } else {
                if (strcmp(pending, "_BASE_") == 0) {
                    char dir[1024], base[2048];
                    snprintf(dir, sizeof dir, "%s", path);
                    if (v[0] == '/')
                        snprintf(base, sizeof base, "%s", v);
                    else
                        snprintf(base, sizeof base, "%s/%s", dirname(dir), v);
                    ok = load_file(cfg, base, depth + 1, e);
                } else {
                    const mrcnn_config_key *k = find_key(pending);
                    /* YAML has real lists; a scalar for a list key is a mistake, not "[5]". */
                    if (k && (k->type == CFG_INT_LIST || k->type == CFG_FLOAT_LIST))
                        ok = fail(e, "%s: %s expects %s, got the scalar '%s'", where, pending, type_name(k->type), v);
                    else
                        ok = set_text(cfg, pending, v, where, e);
                }
                expect_key[level] = 1;
            }
            break;
        }
        default: break;
        }
        yaml_event_delete(&ev);
        if (!ok) return 0;
        if (done) return 1;
    }
}

static int load_file(mrcnn_config *cfg, const char *path, int depth, errbuf *e) {
    if (depth > 8) return fail(e, "%s: _BASE_ chain deeper than 8 (a cycle?)", path);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(e, "%s: cannot open config: %s", path, strerror(errno));
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return fail(e, "%s: cannot initialize the YAML parser", path);
    }
    yaml_parser_set_input_file(&parser, f);
    int ok = load_events(cfg, &parser, path, depth, e);
    yaml_parser_delete(&parser);
    fclose(f);
    return ok;
}

int mrcnn_config_try_load(mrcnn_config *cfg, const char *path, char *err, size_t err_len) {
    errbuf e = {err, err_len};
    return load_file(cfg, path, 0, &e);
}

int mrcnn_config_try_set(mrcnn_config *cfg, const char *assignment, const char *origin, char *err,
                         size_t err_len) {
    errbuf e = {err, err_len};
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment) return fail(&e, "%s: expected KEY=VALUE, got '%s'", origin, assignment);
    char key[KEY_MAX];
    size_t n = (size_t)(eq - assignment);
    if (n >= KEY_MAX) return fail(&e, "%s: key too long", origin);
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
        char val[1024];
        size_t vl = 0;
        switch (k->type) {
        case CFG_INT: snprintf(val, sizeof val, "%d", *(const int *)field); break;
        case CFG_INT64: snprintf(val, sizeof val, "%lld", *(const long long *)field); break;
        case CFG_FLOAT: snprintf(val, sizeof val, "%.9g", *(const float *)field); break;
        case CFG_BOOL: snprintf(val, sizeof val, "%s", *(const bool *)field ? "true" : "false"); break;
        case CFG_STR: snprintf(val, sizeof val, "\"%s\"", field); break;
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
