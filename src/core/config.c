/* YAML (libyaml event API) and KEY=VALUE parsing into mrcnn_config. Nested mappings
 * and dotted keys are equivalent: `SOLVER: {BASE_LR: 0.1}` and `SOLVER.BASE_LR: 0.1`.
 * Anchors and aliases (`&name`, `*name`, the merge key `<<`) mean what they mean in
 * YAML; an alias that cannot be honoured fails naming file:line. */
#include "mrcnn/config.h"
#include "mrcnn/check.h"
#include "config_keys.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static int load_file(mrcnn_config *cfg, const char *path, int depth, errbuf *e);

/* ---- YAML anchors (&name) and aliases (*name) ----
 * An alias stands for the node its anchor names, as in any YAML loader: a scalar, a
 * list of scalars, or a mapping. A mapping is remembered as the assignments made
 * inside it, with keys relative to it, so `B: *a` repeats them under B and the merge
 * key `<<: *a` (or `<<: [*a, *b]`) repeats them in the current mapping without
 * overriding the keys that mapping sets itself (YAML's merge rule; nested mappings
 * merge key by key). */
typedef struct {
    char key[KEY_MAX]; // relative to the anchored mapping; "" for a scalar or list anchor
    int is_list;
    int n;
    char (*items)[64]; // is_list
    char *text;        // !is_list
} anchor_entry;

enum { ANCHOR_SCALAR, ANCHOR_LIST, ANCHOR_MAP };

typedef struct {
    char *name;
    int kind;
    int open;  // a mapping whose end has not been read yet
    int level; // the mapping's nesting level (ANCHOR_MAP)
    char prefix[KEY_MAX];
    anchor_entry *e;
    int n, cap;
} anchor;

typedef struct {
    mrcnn_config *cfg;
    const char *path;
    int depth;
    errbuf *e;
    anchor *a;
    int na, cap_a;
    /* Keys set explicitly inside each open mapping: a merge does not override them. */
    char (*expl[DEPTH_MAX])[KEY_MAX];
    int n_expl[DEPTH_MAX], cap_expl[DEPTH_MAX];
    int level;
    long assignments; // values set so far, aliases expanded: bounded (MAX_ASSIGNMENTS)
} yaml_ctx;

/* Far above any real config (a few hundred values), far below what costs time or
 * memory: with one entry per key in an anchor (anchor_add), reaching it takes a file of
 * hundreds of kilobytes of aliases. */
#define MAX_ASSIGNMENTS 1000000L

static void ctx_free(yaml_ctx *c) {
    for (int i = 0; i < c->na; i++) {
        for (int j = 0; j < c->a[i].n; j++) {
            free(c->a[i].e[j].items);
            free(c->a[i].e[j].text);
        }
        free(c->a[i].e);
        free(c->a[i].name);
    }
    free(c->a);
    for (int l = 0; l < DEPTH_MAX; l++) free(c->expl[l]);
}

static anchor *anchor_new(yaml_ctx *c, const char *name, int kind) {
    if (c->na == c->cap_a) {
        c->cap_a = c->cap_a ? 2 * c->cap_a : 8;
        c->a = MRCNN_REALLOC(c->a, sizeof *c->a * (size_t)c->cap_a, "YAML anchors");
    }
    anchor *a = &c->a[c->na++];
    memset(a, 0, sizeof *a);
    size_t len = strlen(name);
    a->name = MRCNN_MALLOC(len + 1, "YAML anchor name");
    memcpy(a->name, name, len + 1);
    a->kind = kind;
    return a;
}

/* The latest definition wins (YAML allows redefining an anchor). */
static anchor *anchor_find(yaml_ctx *c, const char *name) {
    for (int i = c->na - 1; i >= 0; i--)
        if (strcmp(c->a[i].name, name) == 0) return &c->a[i];
    return NULL;
}

/* One entry per key: a later assignment of a key replaces the earlier one (which it
 * overrides anyway). So an anchor holds at most one entry per config key, and aliases
 * of aliases (nested merge keys) cannot multiply: each level was appending every
 * merged entry again, 10x per level for ten aliases. */
static void anchor_add(anchor *a, const char *key, const char *text, char items[][64], int n) {
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->e[i].key, key) == 0) {
            anchor_entry *x = &a->e[i];
            free(x->items);
            free(x->text);
            memmove(x, x + 1, sizeof *x * (size_t)(a->n - i - 1));
            a->n--;
            break;
        }
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 8;
        a->e = MRCNN_REALLOC(a->e, sizeof *a->e * (size_t)a->cap, "YAML anchor entries");
    }
    anchor_entry *x = &a->e[a->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->key, KEY_MAX, "%s", key);
    if (text) {
        size_t len = strlen(text);
        x->text = MRCNN_MALLOC(len + 1, "YAML anchor value");
        memcpy(x->text, text, len + 1);
    } else {
        x->is_list = 1;
        x->n = n;
        x->items = MRCNN_MALLOC(sizeof *x->items * (size_t)(n > 0 ? n : 1), "YAML anchor list");
        if (n > 0) memcpy(x->items, items, sizeof *x->items * (size_t)n);
    }
}

static int explicit_has(const yaml_ctx *c, const char *key) {
    if (c->level < 0) return 0;
    for (int i = 0; i < c->n_expl[c->level]; i++)
        if (strcmp(c->expl[c->level][i], key) == 0) return 1;
    return 0;
}

static void explicit_add(yaml_ctx *c, const char *key) {
    for (int l = 0; l <= c->level; l++) {
        int seen = 0;
        for (int i = 0; i < c->n_expl[l] && !seen; i++) seen = strcmp(c->expl[l][i], key) == 0;
        if (seen) continue;
        if (c->n_expl[l] == c->cap_expl[l]) {
            c->cap_expl[l] = c->cap_expl[l] ? 2 * c->cap_expl[l] : 16;
            c->expl[l] = MRCNN_REALLOC(c->expl[l], sizeof *c->expl[l] * (size_t)c->cap_expl[l], "YAML keys");
        }
        snprintf(c->expl[l][c->n_expl[l]++], KEY_MAX, "%s", key);
    }
}

/* Every assignment of a YAML value goes through here: it is recorded in the open
 * anchored mappings that contain it, and a merged one yields to an explicit key. */
static int assign(yaml_ctx *c, const char *key, const char *text, char items[][64], int n, const char *where,
                  int merging) {
    if (merging && explicit_has(c, key)) return 1;
    if (++c->assignments > MAX_ASSIGNMENTS)
        return fail(c->e, "%s: more than %ld values after expanding aliases and merge keys: the file repeats its "
                          "anchors too often to be a config (an alias bomb?)", where, MAX_ASSIGNMENTS);
    const mrcnn_config_key *k = find_key(key);
    if (!k) return fail(c->e, "%s: unknown key '%s'", where, key);
    int ok;
    if (text) {
        /* YAML has real lists; a scalar for a list key is a mistake, not "[5]". */
        if (k->type == CFG_INT_LIST || k->type == CFG_FLOAT_LIST)
            ok = fail(c->e, "%s: %s expects %s, got the scalar '%s'", where, key, type_name(k->type), text);
        else
            ok = set_scalar(c->cfg, k, text, where, c->e);
    } else {
        ok = set_list(c->cfg, k, items, n, where, c->e);
    }
    if (!ok) return 0;
    for (int i = 0; i < c->na; i++) {
        anchor *a = &c->a[i];
        if (a->kind != ANCHOR_MAP || !a->open) continue;
        size_t pl = strlen(a->prefix);
        if (pl == 0)
            anchor_add(a, key, text, items, n);
        else if (strncmp(key, a->prefix, pl) == 0 && key[pl] == '.')
            anchor_add(a, key + pl + 1, text, items, n);
    }
    if (!merging) explicit_add(c, key);
    return 1;
}

/* The assignments of an anchor under `prefix` (a full key for a scalar or list). */
static int apply_anchor(yaml_ctx *c, const anchor *a, const char *prefix, const char *where, int merging) {
    for (int i = 0; i < a->n; i++) {
        const anchor_entry *x = &a->e[i];
        char key[KEY_MAX];
        if (strlen(prefix) + strlen(x->key) + 2 > KEY_MAX) return fail(c->e, "%s: key too long", where);
        snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] && x->key[0] ? "." : "", x->key);
        if (!assign(c, key, x->text, x->items, x->n, where, merging)) return 0;
    }
    return 1;
}

static const char *anchor_kind_name(int kind) {
    return kind == ANCHOR_SCALAR ? "a scalar" : kind == ANCHOR_LIST ? "a list" : "a mapping";
}

/* Walks the event stream: a stack of mapping keys gives each scalar its dotted key. */
static int load_events(mrcnn_config *cfg, yaml_parser_t *parser, const char *path, int depth, errbuf *e) {
    yaml_ctx c = {.cfg = cfg, .path = path, .depth = depth, .e = e, .level = -1};
    char prefix[DEPTH_MAX][KEY_MAX];
    int expect_key[DEPTH_MAX];
    int merge_key = 0;          // the pending key is YAML's merge key `<<`
    char pending[KEY_MAX] = ""; // key waiting for its value
    int seen_non_base = 0;
    int documents = 0;
    int result = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(parser, &ev)) {
            fail(e, "%s:%zu: YAML error: %s", path, parser->problem_mark.line + 1,
                 parser->problem ? parser->problem : "malformed");
            break;
        }
        char where[KEY_MAX + 64];
        snprintf(where, sizeof where, "%s:%zu", path, ev.start_mark.line + 1);
        int ok = 1, done = 0;
        const int level = c.level;
        /* What an alias or a scalar event stands for. */
        const char *scalar = NULL;
        const anchor *alias = NULL;
        if (ev.type == YAML_ALIAS_EVENT) {
            const char *name = (const char *)ev.data.alias.anchor;
            alias = anchor_find(&c, name);
            if (!alias)
                ok = fail(e, "%s: alias *%s: anchor '%s' is unknown (define it with &%s before the alias)", where, name,
                          name, name);
            else if (alias->open)
                ok = fail(e, "%s: alias *%s refers to the mapping that contains it", where, name);
            else if (level < 0)
                ok = fail(e, "%s: expected a mapping of keys, got the alias *%s", where, name);
            else if (alias->kind == ANCHOR_SCALAR)
                scalar = alias->e[0].text;
        } else if (ev.type == YAML_SCALAR_EVENT) {
            scalar = (const char *)ev.data.scalar.value;
            if (ev.data.scalar.anchor) anchor_add(anchor_new(&c, (const char *)ev.data.scalar.anchor, ANCHOR_SCALAR), "", scalar, NULL, 0);
        }
        if (!ok) {
            yaml_event_delete(&ev);
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = 1; break;
        case YAML_DOCUMENT_START_EVENT:
            /* A second document ('---') would be merged into the first without a word. */
            if (documents++ > 0)
                ok = fail(e, "%s: a second YAML document ('---'): a config file holds one (merge files with _BASE_)",
                          where);
            break;
        case YAML_MAPPING_START_EVENT:
            if (level >= 0 && expect_key[level]) {
                ok = fail(e, "%s: a mapping cannot be a key", where);
                break;
            }
            if (level >= 0 && merge_key) {
                ok = fail(e, "%s: the merge key '<<' wants an alias of a mapping (or a list of them)", where);
                break;
            }
            if (level + 1 >= DEPTH_MAX) {
                ok = fail(e, "%s: nested deeper than %d", where, DEPTH_MAX);
                break;
            }
            c.level = level + 1;
            c.n_expl[c.level] = 0;
            snprintf(prefix[c.level], KEY_MAX, "%s", c.level == 0 ? "" : pending);
            expect_key[c.level] = 1;
            if (level >= 0) expect_key[level] = 1;
            if (ev.data.mapping_start.anchor) {
                anchor *a = anchor_new(&c, (const char *)ev.data.mapping_start.anchor, ANCHOR_MAP);
                a->open = 1;
                a->level = c.level;
                snprintf(a->prefix, KEY_MAX, "%s", prefix[c.level]);
            }
            break;
        case YAML_MAPPING_END_EVENT:
            for (int i = 0; i < c.na; i++)
                if (c.a[i].open && c.a[i].level == level) c.a[i].open = 0;
            c.n_expl[level] = 0;
            c.level--;
            break;
        case YAML_SEQUENCE_START_EVENT: {
            if (level < 0 || expect_key[level]) {
                ok = fail(e, "%s: a list is not allowed here", where);
                break;
            }
            char items[MRCNN_CFG_LIST_MAX + 1][64];
            const anchor *merges[MRCNN_CFG_LIST_MAX + 1];
            int n = 0, n_merge = 0;
            for (;;) {
                yaml_event_t it;
                if (!yaml_parser_parse(parser, &it)) {
                    ok = fail(e, "%s:%zu: YAML error: %s", path, parser->problem_mark.line + 1,
                              parser->problem ? parser->problem : "malformed");
                    break;
                }
                int end = it.type == YAML_SEQUENCE_END_EVENT;
                const char *text = NULL;
                if (it.type == YAML_SCALAR_EVENT) {
                    text = (const char *)it.data.scalar.value;
                    if (it.data.scalar.anchor)
                        anchor_add(anchor_new(&c, (const char *)it.data.scalar.anchor, ANCHOR_SCALAR), "", text, NULL, 0);
                } else if (it.type == YAML_ALIAS_EVENT) {
                    const char *name = (const char *)it.data.alias.anchor;
                    const anchor *a = anchor_find(&c, name);
                    if (!a)
                        ok = fail(e, "%s:%zu: alias *%s: anchor '%s' is unknown (define it with &%s before)", path,
                                  it.start_mark.line + 1, name, name, name);
                    else if (merge_key && a->kind == ANCHOR_MAP && !a->open && n_merge <= MRCNN_CFG_LIST_MAX)
                        merges[n_merge++] = a;
                    else if (a->kind == ANCHOR_SCALAR)
                        text = a->e[0].text;
                    else
                        ok = fail(e, "%s:%zu: %s: list items must be plain values, *%s is %s", path,
                                  it.start_mark.line + 1, merge_key ? "<<" : pending, name, anchor_kind_name(a->kind));
                } else if (!end) {
                    ok = fail(e, "%s: %s: list items must be plain values", where, merge_key ? "<<" : pending);
                }
                if (ok && text) {
                    if (n > MRCNN_CFG_LIST_MAX || strlen(text) >= 64)
                        ok = fail(e, "%s: %s: list too long or item too long", where, pending);
                    else
                        snprintf(items[n++], 64, "%s", text);
                }
                yaml_event_delete(&it);
                if (end || !ok) break;
            }
            if (!ok) break;
            if (merge_key) {
                if (n > 0) {
                    ok = fail(e, "%s: the merge key '<<' wants aliases of mappings, got '%s'", where, items[0]);
                    break;
                }
                /* Earlier mappings in the list win: apply them last. */
                for (int i = n_merge - 1; i >= 0 && ok; i--) ok = apply_anchor(&c, merges[i], prefix[level], where, 1);
            } else {
                ok = assign(&c, pending, NULL, items, n, where, 0);
                if (ok && ev.data.sequence_start.anchor)
                    anchor_add(anchor_new(&c, (const char *)ev.data.sequence_start.anchor, ANCHOR_LIST), "", NULL,
                               items, n);
            }
            expect_key[level] = 1;
            merge_key = 0;
            break;
        }
        case YAML_ALIAS_EVENT:
        case YAML_SCALAR_EVENT: {
            if (level < 0) {
                if (scalar && scalar[0]) ok = fail(e, "%s: expected a mapping of keys, got '%s'", where, scalar);
                break;
            }
            if (expect_key[level]) {
                if (!scalar) {
                    ok = fail(e, "%s: %s (*%s) cannot be a key", where, anchor_kind_name(alias->kind), alias->name);
                    break;
                }
                merge_key = 0;
                if (level == 0 && strcmp(scalar, "_BASE_") == 0) {
                    if (seen_non_base) ok = fail(e, "%s: _BASE_ must come before every other key", where);
                    snprintf(pending, KEY_MAX, "_BASE_");
                } else if (strcmp(scalar, "<<") == 0 && !(ev.type == YAML_SCALAR_EVENT &&
                                                          ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE)) {
                    seen_non_base = 1;
                    merge_key = 1;
                    snprintf(pending, KEY_MAX, "<<");
                } else {
                    seen_non_base = 1;
                    if (strlen(prefix[level]) + strlen(scalar) + 2 > KEY_MAX) {
                        ok = fail(e, "%s: key too long", where);
                        break;
                    }
                    snprintf(pending, KEY_MAX, "%s%s%s", prefix[level], prefix[level][0] ? "." : "", scalar);
                }
                expect_key[level] = 0;
                break;
            }
            expect_key[level] = 1;
            if (merge_key) {
                merge_key = 0;
                if (!alias || alias->kind != ANCHOR_MAP) {
                    ok = fail(e, "%s: the merge key '<<' wants an alias of a mapping (or a list of them), got %s", where,
                              alias ? anchor_kind_name(alias->kind) : "a scalar");
                    break;
                }
                ok = apply_anchor(&c, alias, prefix[level], where, 1);
                break;
            }
            if (alias && alias->kind != ANCHOR_SCALAR) {
                if (strcmp(pending, "_BASE_") == 0)
                    ok = fail(e, "%s: _BASE_ wants a file name, got %s", where, anchor_kind_name(alias->kind));
                else if (alias->kind == ANCHOR_LIST)
                    ok = assign(&c, pending, NULL, alias->e[0].items, alias->e[0].n, where, 0);
                else
                    ok = apply_anchor(&c, alias, pending, where, 0);
                break;
            }
            if (strcmp(pending, "_BASE_") == 0) {
                char dir[1024], base[2048];
                snprintf(dir, sizeof dir, "%s", path);
                if (scalar[0] == '/')
                    snprintf(base, sizeof base, "%s", scalar);
                else
                    snprintf(base, sizeof base, "%s/%s", dirname(dir), scalar);
                ok = load_file(cfg, base, depth + 1, e);
            } else {
                ok = assign(&c, pending, scalar, NULL, 0, where, 0);
            }
            break;
        }
        default: break;
        }
        yaml_event_delete(&ev);
        if (!ok) break;
        if (done) {
            result = 1;
            break;
        }
    }
    ctx_free(&c);
    return result;
}

static int load_file(mrcnn_config *cfg, const char *path, int depth, errbuf *e) {
    if (depth > 8) return fail(e, "%s: _BASE_ chain deeper than 8 (a cycle?)", path);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(e, "%s: cannot open config: %s", path, strerror(errno));
    struct stat sb; // a directory opens, then fails its first read as a bare "input error"
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return fail(e, "%s: is a directory, not a config file (give the YAML file in it)", path);
    }
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

int mrcnn_config_cuda_graph(const mrcnn_config *cfg, const char *backend_name) {
    const char *v = cfg->solver_cuda_graph;
    if (!strcmp(v, "on") || !strcmp(v, "true")) return 1;
    if (!strcmp(v, "off") || !strcmp(v, "false")) return 0;
    MRCNN_CHECK(!strcmp(v, "auto"), "SOLVER.CUDA_GRAPH '%s' is unknown (auto, on or off)", v);
    return backend_name != NULL && !strcmp(backend_name, "cuda");
}
