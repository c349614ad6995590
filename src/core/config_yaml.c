/* The YAML reader of config files (libyaml's event API): a stack of mapping keys gives
 * each value its dotted key, so nested mappings and dotted keys are equivalent
 * (`SOLVER: {BASE_LR: 0.1}` and `SOLVER.BASE_LR: 0.1`). Anchors and aliases (`&name`,
 * `*name`, the merge key `<<`) mean what they mean in YAML; `_BASE_: file` reads that file
 * first. Each value goes to the caller's set function (config.c: the schema); an error
 * names file:line. */
#include "mrcnn/check.h"
#include "mrcnn/config.h"
#include "config_yaml.h"

#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

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

/* The caller's set function and where its errors go. */
typedef struct {
    cfg_yaml_set_fn set;
    void *ctx;
    errbuf *e;
} yaml_sink;

static int load_file(const yaml_sink *s, const char *path, int depth);

/* ---- YAML anchors (&name) and aliases (*name) ----
 * An alias stands for the node its anchor names, as in any YAML loader: a scalar, a
 * list of scalars, or a mapping. A mapping is remembered as the assignments made
 * inside it, with keys relative to it, so `B: *a` repeats them under B and the merge
 * key `<<: *a` (or `<<: [*a, *b]`) repeats them in the current mapping without
 * overriding the keys that mapping sets itself (YAML's merge rule; nested mappings
 * merge key by key). */
typedef struct {
    char key[CFG_KEY_MAX]; // relative to the anchored mapping; "" for a scalar or list anchor
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
    char prefix[CFG_KEY_MAX];
    anchor_entry *e;
    int n, cap;
} anchor;

typedef struct {
    const yaml_sink *sink;
    const char *path;
    int depth;
    errbuf *e;
    anchor *a;
    int na, cap_a;
    /* Keys set explicitly inside each open mapping: a merge does not override them. */
    char (*expl[DEPTH_MAX])[CFG_KEY_MAX];
    int n_expl[DEPTH_MAX], cap_expl[DEPTH_MAX];
    int level;
    long assignments; // values set so far, aliases expanded: bounded (MAX_ASSIGNMENTS)
    /* The walk: a stack of mapping keys gives each scalar its dotted key. */
    yaml_parser_t *parser;
    char prefix[DEPTH_MAX][CFG_KEY_MAX]; // each open mapping's dotted key
    int expect_key[DEPTH_MAX];           // each open mapping reads a key next
    int merge_key;                       // the pending key is YAML's merge key `<<`
    char pending[CFG_KEY_MAX];           // key waiting for its value
    int seen_non_base;
    int documents;
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
    snprintf(x->key, CFG_KEY_MAX, "%s", key);
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
        snprintf(c->expl[l][c->n_expl[l]++], CFG_KEY_MAX, "%s", key);
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
    if (!c->sink->set(c->sink->ctx, key, text, items, n, where, c->e->err, c->e->err_len)) return 0;
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
        char key[CFG_KEY_MAX];
        if (strlen(prefix) + strlen(x->key) + 2 > CFG_KEY_MAX) return fail(c->e, "%s: key too long", where);
        snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] && x->key[0] ? "." : "", x->key);
        if (!assign(c, key, x->text, x->items, x->n, where, merging)) return 0;
    }
    return 1;
}

static const char *anchor_kind_name(int kind) {
    return kind == ANCHOR_SCALAR ? "a scalar" : kind == ANCHOR_LIST ? "a list" : "a mapping";
}

static int on_mapping_start(yaml_ctx *c, const yaml_event_t *ev, const char *where) {
    const int level = c->level;
    if (level >= 0 && c->expect_key[level]) return fail(c->e, "%s: a mapping cannot be a key", where);
    if (level >= 0 && c->merge_key)
        return fail(c->e, "%s: the merge key '<<' wants an alias of a mapping (or a list of them)", where);
    if (level + 1 >= DEPTH_MAX) return fail(c->e, "%s: nested deeper than %d", where, DEPTH_MAX);
    c->level = level + 1;
    c->n_expl[c->level] = 0;
    snprintf(c->prefix[c->level], CFG_KEY_MAX, "%s", c->level == 0 ? "" : c->pending);
    c->expect_key[c->level] = 1;
    if (level >= 0) c->expect_key[level] = 1;
    if (ev->data.mapping_start.anchor) {
        anchor *a = anchor_new(c, (const char *)ev->data.mapping_start.anchor, ANCHOR_MAP);
        a->open = 1;
        a->level = c->level;
        snprintf(a->prefix, CFG_KEY_MAX, "%s", c->prefix[c->level]);
    }
    return 1;
}

static void on_mapping_end(yaml_ctx *c) {
    const int level = c->level;
    for (int i = 0; i < c->na; i++)
        if (c->a[i].open && c->a[i].level == level) c->a[i].open = 0;
    c->n_expl[level] = 0;
    c->level--;
}

/* A list: read to its end, then the pending key's value, or the mappings a merge key
 * names. */
static int on_sequence(yaml_ctx *c, const yaml_event_t *ev, const char *where) {
    const int level = c->level;
    errbuf *e = c->e;
    if (level < 0 || c->expect_key[level]) return fail(e, "%s: a list is not allowed here", where);
    char items[MRCNN_CFG_LIST_MAX + 1][64];
    const anchor *merges[MRCNN_CFG_LIST_MAX + 1];
    int n = 0, n_merge = 0, ok = 1;
    const int merge_key = c->merge_key;
    const char *pending = c->pending;
    for (;;) {
        yaml_event_t it;
        if (!yaml_parser_parse(c->parser, &it)) {
            ok = fail(e, "%s:%zu: YAML error: %s", c->path, c->parser->problem_mark.line + 1,
                      c->parser->problem ? c->parser->problem : "malformed");
            break;
        }
        int end = it.type == YAML_SEQUENCE_END_EVENT;
        const char *text = NULL;
        if (it.type == YAML_SCALAR_EVENT) {
            text = (const char *)it.data.scalar.value;
            if (it.data.scalar.anchor)
                anchor_add(anchor_new(c, (const char *)it.data.scalar.anchor, ANCHOR_SCALAR), "", text, NULL, 0);
        } else if (it.type == YAML_ALIAS_EVENT) {
            const char *name = (const char *)it.data.alias.anchor;
            const anchor *a = anchor_find(c, name);
            if (!a)
                ok = fail(e, "%s:%zu: alias *%s: anchor '%s' is unknown (define it with &%s before)", c->path,
                          it.start_mark.line + 1, name, name, name);
            else if (merge_key && a->kind == ANCHOR_MAP && !a->open && n_merge <= MRCNN_CFG_LIST_MAX)
                merges[n_merge++] = a;
            else if (a->kind == ANCHOR_SCALAR)
                text = a->e[0].text;
            else
                ok = fail(e, "%s:%zu: %s: list items must be plain values, *%s is %s", c->path,
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
    if (!ok) return 0;
    if (merge_key) {
        if (n > 0) return fail(e, "%s: the merge key '<<' wants aliases of mappings, got '%s'", where, items[0]);
        /* Earlier mappings in the list win: apply them last. */
        for (int i = n_merge - 1; i >= 0 && ok; i--) ok = apply_anchor(c, merges[i], c->prefix[level], where, 1);
    } else {
        ok = assign(c, pending, NULL, items, n, where, 0);
        if (ok && ev->data.sequence_start.anchor)
            anchor_add(anchor_new(c, (const char *)ev->data.sequence_start.anchor, ANCHOR_LIST), "", NULL, items, n);
    }
    c->expect_key[level] = 1;
    c->merge_key = 0;
    return ok;
}

/* A key (the next pending one) inside a mapping. */
static int on_key(yaml_ctx *c, const char *scalar, const anchor *alias, int plain, const char *where) {
    const int level = c->level;
    int ok = 1;
    if (!scalar) return fail(c->e, "%s: %s (*%s) cannot be a key", where, anchor_kind_name(alias->kind), alias->name);
    c->merge_key = 0;
    if (level == 0 && strcmp(scalar, "_BASE_") == 0) {
        if (c->seen_non_base) ok = fail(c->e, "%s: _BASE_ must come before every other key", where);
        snprintf(c->pending, CFG_KEY_MAX, "_BASE_");
    } else if (strcmp(scalar, "<<") == 0 && plain) {
        c->seen_non_base = 1;
        c->merge_key = 1;
        snprintf(c->pending, CFG_KEY_MAX, "<<");
    } else {
        c->seen_non_base = 1;
        if (strlen(c->prefix[level]) + strlen(scalar) + 2 > CFG_KEY_MAX) return fail(c->e, "%s: key too long", where);
        snprintf(c->pending, CFG_KEY_MAX, "%s%s%s", c->prefix[level], c->prefix[level][0] ? "." : "", scalar);
    }
    c->expect_key[level] = 0;
    return ok;
}

/* The pending key's value: a scalar, or an alias of any kind (or the file _BASE_ names). */
static int on_value(yaml_ctx *c, const char *scalar, const anchor *alias, const char *where) {
    const int level = c->level;
    errbuf *e = c->e;
    const char *pending = c->pending;
    c->expect_key[level] = 1;
    if (c->merge_key) {
        c->merge_key = 0;
        if (!alias || alias->kind != ANCHOR_MAP)
            return fail(e, "%s: the merge key '<<' wants an alias of a mapping (or a list of them), got %s", where,
                        alias ? anchor_kind_name(alias->kind) : "a scalar");
        return apply_anchor(c, alias, c->prefix[level], where, 1);
    }
    if (alias && alias->kind != ANCHOR_SCALAR) {
        if (strcmp(pending, "_BASE_") == 0)
            return fail(e, "%s: _BASE_ wants a file name, got %s", where, anchor_kind_name(alias->kind));
        if (alias->kind == ANCHOR_LIST) return assign(c, pending, NULL, alias->e[0].items, alias->e[0].n, where, 0);
        return apply_anchor(c, alias, pending, where, 0);
    }
    if (strcmp(pending, "_BASE_") == 0) {
        char dir[1024], base[2048];
        snprintf(dir, sizeof dir, "%s", c->path);
        if (scalar[0] == '/')
            snprintf(base, sizeof base, "%s", scalar);
        else
            snprintf(base, sizeof base, "%s/%s", dirname(dir), scalar);
        return load_file(c->sink, base, c->depth + 1);
    }
    return assign(c, pending, scalar, NULL, 0, where, 0);
}

/* Walks the event stream: a stack of mapping keys gives each scalar its dotted key. */
static int load_events(const yaml_sink *s, yaml_parser_t *parser, const char *path, int depth) {
    errbuf *e = s->e;
    yaml_ctx *c = MRCNN_CALLOC(1, sizeof *c, "YAML walk");
    *c = (yaml_ctx){.sink = s, .path = path, .depth = depth, .e = e, .level = -1, .parser = parser};
    int result = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(parser, &ev)) {
            fail(e, "%s:%zu: YAML error: %s", path, parser->problem_mark.line + 1,
                 parser->problem ? parser->problem : "malformed");
            break;
        }
        char where[CFG_KEY_MAX + 64];
        snprintf(where, sizeof where, "%s:%zu", path, ev.start_mark.line + 1);
        int ok = 1, done = 0;
        const int level = c->level;
        /* What an alias or a scalar event stands for. */
        const char *scalar = NULL;
        const anchor *alias = NULL;
        if (ev.type == YAML_ALIAS_EVENT) {
            const char *name = (const char *)ev.data.alias.anchor;
            alias = anchor_find(c, name);
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
            if (ev.data.scalar.anchor) anchor_add(anchor_new(c, (const char *)ev.data.scalar.anchor, ANCHOR_SCALAR), "", scalar, NULL, 0);
        }
        if (!ok) {
            yaml_event_delete(&ev);
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = 1; break;
        case YAML_DOCUMENT_START_EVENT:
            /* A second document ('---') would be merged into the first without a word. */
            if (c->documents++ > 0)
                ok = fail(e, "%s: a second YAML document ('---'): a config file holds one (merge files with _BASE_)",
                          where);
            break;
        case YAML_MAPPING_START_EVENT: ok = on_mapping_start(c, &ev, where); break;
        case YAML_MAPPING_END_EVENT: on_mapping_end(c); break;
        case YAML_SEQUENCE_START_EVENT: ok = on_sequence(c, &ev, where); break;
        case YAML_ALIAS_EVENT:
        case YAML_SCALAR_EVENT:
            if (level < 0) {
                if (scalar && scalar[0]) ok = fail(e, "%s: expected a mapping of keys, got '%s'", where, scalar);
            } else if (c->expect_key[level]) {
                ok = on_key(c, scalar, alias, !(ev.type == YAML_SCALAR_EVENT &&
                                                ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE), where);
            } else {
                ok = on_value(c, scalar, alias, where);
            }
            break;
        default: break;
        }
        yaml_event_delete(&ev);
        if (!ok) break;
        if (done) {
            result = 1;
            break;
        }
    }
    ctx_free(c);
    free(c);
    return result;
}

static int load_file(const yaml_sink *s, const char *path, int depth) {
    errbuf *e = s->e;
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
    int ok = load_events(s, &parser, path, depth);
    yaml_parser_delete(&parser);
    fclose(f);
    return ok;
}

int cfg_yaml_load(const char *path, cfg_yaml_set_fn set, void *ctx, char *err, size_t err_len) {
    errbuf e = {err, err_len};
    const yaml_sink s = {set, ctx, &e};
    return load_file(&s, path, 0);
}
