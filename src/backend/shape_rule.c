/* Shape rules (shape_rule.h): a one-time parser of the backend_ops.def `shapes` text
 * and the per-call match of the compiled rule against the tensor headers. */
#include "shape_rule.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"

/* ---- the parser ---- */

typedef struct {
    mrcnn_shape_rule *r;
    const char *p; // the next character
} parser;

#define PARSE_FAIL(ps, ...)                                                                                            \
    mrcnn_failf("check", "shape rule", __FILE__, __LINE__, "shape rule of %s \"%s\", column %d: %s", (ps)->r->op,      \
                (ps)->r->text, (int)((ps)->p - (ps)->r->text) + 1, parse_what(__VA_ARGS__))

static char parse_msg[256];

static const char *parse_what(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *parse_what(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(parse_msg, sizeof parse_msg, fmt, ap);
    va_end(ap);
    return parse_msg;
}

static void skip_space(parser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t') ps->p++;
}

/* An identifier into buf (n bytes); 0 when there is none here. */
static int read_word(parser *ps, char *buf, size_t n) {
    skip_space(ps);
    const char *s = ps->p;
    if (!isalpha((unsigned char)*s) && *s != '_') return 0;
    while (isalnum((unsigned char)*ps->p) || *ps->p == '_') ps->p++;
    size_t len = (size_t)(ps->p - s);
    if (len >= n) {
        ps->p = s;
        PARSE_FAIL(ps, "'%.*s' is longer than %zu characters", (int)len, s, n - 1);
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    return 1;
}

/* Skips the separators between clauses, which are for the reader only. */
static void skip_marks(parser *ps) {
    for (;;) {
        skip_space(ps);
        if (*ps->p == ',') ps->p++;
        else if (!strncmp(ps->p, "->", 2) || !strncmp(ps->p, "+=", 2)) ps->p += 2;
        else return;
    }
}

static int find_arg(parser *ps, const char *name) {
    for (int i = 0; i < ps->r->n_args; i++)
        if (!strcmp(ps->r->names[i], name)) return i;
    return -1;
}

static int find_sym(parser *ps, const char *name) {
    mrcnn_shape_rule *r = ps->r;
    for (int i = 0; i < r->n_syms; i++)
        if (!strcmp(r->sym_names[i], name)) return i;
    if (r->n_syms == MRCNN_SHAPE_RULE_MAX_SYMS) PARSE_FAIL(ps, "more than %d symbols", MRCNN_SHAPE_RULE_MAX_SYMS);
    snprintf(r->sym_names[r->n_syms], sizeof r->sym_names[0], "%s", name);
    return r->n_syms++;
}

/* One extent of a ( ... ) list into c. */
static void parse_dim(parser *ps, mrcnn_shape_clause *c, int first) {
    skip_space(ps);
    if (!strncmp(ps->p, "...", 3)) {
        if (!first) PARSE_FAIL(ps, "'...' must be the first extent");
        ps->p += 3;
        c->lead = 1;
        return;
    }
    if (c->n_dims == MRCNN_MAX_DIMS) PARSE_FAIL(ps, "more than %d extents", MRCNN_MAX_DIMS);
    char word[16];
    if (*ps->p == '*') {
        ps->p++;
        if (c->lead) PARSE_FAIL(ps, "'...' and '*' in one shape");
        if (!read_word(ps, word, sizeof word)) PARSE_FAIL(ps, "'*' needs a symbol");
        c->star = (int8_t)find_sym(ps, word);
        skip_space(ps);
        if (*ps->p != ')') PARSE_FAIL(ps, "'*%s' must be the last extent", word);
        return;
    }
    mrcnn_shape_dim *d = &c->dims[c->n_dims++];
    d->sym = -1;
    d->lit = 1;
    if (isdigit((unsigned char)*ps->p)) {
        char *end;
        long long v = strtoll(ps->p, &end, 10);
        if (v < 0 || v > (1LL << 40)) PARSE_FAIL(ps, "extent %lld is out of range", v);
        ps->p = end;
        d->lit = v;
        if (!isalpha((unsigned char)*ps->p) && *ps->p != '_') return; // a literal
        if (v == 0) PARSE_FAIL(ps, "a symbol's coefficient must be positive");
    }
    if (!read_word(ps, word, sizeof word)) PARSE_FAIL(ps, "expected an extent (an integer, a symbol, 2H, ... or *n)");
    d->sym = (int8_t)find_sym(ps, word);
    skip_space(ps);
    if (!strncmp(ps->p, ">0", 2)) ps->p += 2, d->pos = 1;
}

/* spec [dtype] for the clause c. */
static void parse_spec(parser *ps, mrcnn_shape_clause *c) {
    char word[16] = "";
    skip_space(ps);
    c->star = -1;
    c->dtype = -1;
    if (*ps->p == '(') {
        ps->p++;
        c->kind = SR_DIMS;
        skip_space(ps);
        for (int first = 1; *ps->p != ')'; first = 0) {
            if (!first) {
                if (*ps->p != ',') PARSE_FAIL(ps, "expected ',' or ')'");
                ps->p++;
            }
            parse_dim(ps, c, first);
            skip_space(ps);
        }
        ps->p++;
    } else if (read_word(ps, word, sizeof word) && !strcmp(word, "any")) {
        c->kind = SR_ANY;
    } else if (!strcmp(word, "like")) {
        c->kind = SR_LIKE;
        if (!read_word(ps, word, sizeof word)) PARSE_FAIL(ps, "'like' needs an argument's name");
        int ref = find_arg(ps, word), seen = 0;
        for (int i = 0; i < ps->r->n_clauses; i++)
            if (ps->r->c[i].arg == ref && ref >= 0 && !ps->r->c[i].optional) seen = 1;
        if (!seen) PARSE_FAIL(ps, "'like %s': %s is not an earlier, non-optional argument of the rule", word, word);
        c->like = (int8_t)ref;
    } else {
        PARSE_FAIL(ps, "expected a shape: '(...)', 'any' or 'like <name>'");
    }
    const char *keep = ps->p;
    if (read_word(ps, word, sizeof word)) {
        if (!strcmp(word, "fp32")) c->dtype = MRCNN_DTYPE_F32;
        else if (!strcmp(word, "int32")) c->dtype = MRCNN_DTYPE_I32;
        else if (strcmp(word, "float")) ps->p = keep; // the next clause's name
    }
}

/* names spec: one clause per name, sharing the spec. */
static void parse_clause(parser *ps) {
    mrcnn_shape_rule *r = ps->r;
    int first = r->n_clauses;
    const char *start = ps->p;
    for (;;) {
        char name[16];
        if (!read_word(ps, name, sizeof name)) PARSE_FAIL(ps, "expected an argument's name");
        int a = find_arg(ps, name);
        if (a < 0) PARSE_FAIL(ps, "'%s' is not a tensor argument of %s", name, r->op);
        for (int i = 0; i < r->n_clauses; i++)
            if (r->c[i].arg == a) PARSE_FAIL(ps, "'%s' appears twice", name);
        mrcnn_shape_clause *c = &r->c[r->n_clauses++];
        memset(c, 0, sizeof *c);
        c->arg = (int8_t)a;
        if (*ps->p == '?') ps->p++, c->optional = 1;
        skip_space(ps);
        if (!strncmp(ps->p, "+=", 2)) ps->p += 2, skip_space(ps);
        if (*ps->p != ',') break;
        ps->p++;
    }
    mrcnn_shape_clause spec;
    memset(&spec, 0, sizeof spec);
    parse_spec(ps, &spec);
    for (int i = first; i < r->n_clauses && spec.kind == SR_LIKE; i++)
        if (r->c[i].arg == spec.like) PARSE_FAIL(ps, "'%s' is 'like' itself", r->names[spec.like]);
    for (int i = first; i < r->n_clauses; i++) {
        mrcnn_shape_clause *c = &r->c[i];
        int8_t arg = c->arg, opt = c->optional;
        *c = spec;
        c->arg = arg, c->optional = opt;
        c->at = (int16_t)(start - r->text), c->len = (int16_t)(ps->p - start);
    }
}

void mrcnn_shape_rule_compile(mrcnn_shape_rule *r, const char *op, const char *text, const char *const *names,
                              int n_names) {
    memset(r, 0, sizeof *r);
    r->op = op, r->text = text;
    parser ps = {r, text};
    if (n_names > MRCNN_SHAPE_RULE_MAX_ARGS)
        PARSE_FAIL(&ps, "more than %d tensor arguments", MRCNN_SHAPE_RULE_MAX_ARGS);
    for (int i = 0; i < n_names; i++) r->names[i] = names[i];
    r->n_args = n_names;
    for (skip_marks(&ps); *ps.p; skip_marks(&ps)) parse_clause(&ps);
    for (int i = 0; i < n_names; i++)
        if (find_arg(&ps, names[i]) != i) PARSE_FAIL(&ps, "tensor argument '%s' is named twice", names[i]);
    for (int a = 0; a < n_names; a++) {
        int seen = 0;
        for (int i = 0; i < r->n_clauses; i++) seen |= r->c[i].arg == a;
        if (!seen) PARSE_FAIL(&ps, "tensor argument '%s' is not in the rule (every one is checked)", names[a]);
    }
}

/* ---- the check ---- */

/* The extents of c as known before the clause was matched: literals, symbols bound by
 * an earlier argument, -1 for the rest; ... for a variable run. */
static const char *expected_str(const mrcnn_shape_clause *c, const int64_t *val, uint32_t bound, char *buf,
                                size_t n) {
    size_t k = (size_t)snprintf(buf, n, "(%s", c->lead ? "..." : "");
    for (int i = 0; i < c->n_dims && k < n; i++) {
        const mrcnn_shape_dim *d = &c->dims[i];
        long long v = d->sym < 0 ? d->lit : (bound >> d->sym & 1) ? d->lit * val[d->sym] : -1;
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i || c->lead ? ", " : "", v);
    }
    if (k < n) snprintf(buf + k, n - k, "%s)", c->star >= 0 ? ", ..." : "");
    return buf;
}

static int64_t prod_from(const mrcnn_tensor *t, int from) {
    int64_t p = 1;
    for (int i = from; i < t->ndim; i++) p *= t->shape[i];
    return p;
}

/* Where c disagrees with t, in words into why (bound and from as before the clause). */
static void explain(const mrcnn_shape_rule *r, const mrcnn_shape_clause *c, const mrcnn_tensor *t,
                    const mrcnn_tensor *const *ts, const int64_t *val0, uint32_t bound, const int8_t *from0,
                    char *why, size_t n) {
    int64_t val[MRCNN_SHAPE_RULE_MAX_SYMS];
    int8_t from[MRCNN_SHAPE_RULE_MAX_SYMS];
    memcpy(val, val0, sizeof val), memcpy(from, from0, sizeof from);
    int nd = c->n_dims, off = c->lead ? t->ndim - nd : 0;
    if (c->lead || c->star >= 0 ? t->ndim < nd + (c->star >= 0) : t->ndim != nd) {
        snprintf(why, n, "%d dims, the rule's %s%d", t->ndim, c->lead || c->star >= 0 ? "at least " : "",
                 nd + (c->star >= 0));
        return;
    }
    for (int i = 0; i <= nd; i++) {
        const mrcnn_shape_dim *d = i < nd ? &c->dims[i] : NULL;
        int s = d ? d->sym : c->star;
        int64_t v = d ? t->shape[off + i] : prod_from(t, nd), coef = d ? d->lit : 1;
        if (!d && s < 0) break;
        const char *what = d ? "dim" : "the dims from";
        if (d && d->pos && v <= 0) {
            snprintf(why, n, "%s must be > 0, dim %d is %lld", r->sym_names[s], off + i, (long long)v);
            return;
        }
        if (s < 0) {
            if (v == d->lit) continue;
            snprintf(why, n, "dim %d is %lld, the rule's %lld", off + i, (long long)v, (long long)d->lit);
            return;
        } else if (bound >> s & 1) {
            if (v == coef * val[s]) continue;
            const char *by = from[s] >= 0 ? r->names[r->c[from[s]].arg] : "this argument";
            if (coef == 1)
                snprintf(why, n, "%s is %lld from %s, but %s %d %s %lld", r->sym_names[s], (long long)val[s], by, what,
                         off + i, d ? "is" : "multiply to", (long long)v);
            else
                snprintf(why, n, "%lld%s is %lld (%s = %lld from %s), but dim %d is %lld", (long long)coef,
                         r->sym_names[s], (long long)(coef * val[s]), r->sym_names[s], (long long)val[s], by, off + i,
                         (long long)v);
            return;
        } else if (v % coef) {
            snprintf(why, n, "dim %d is %lld, not a multiple of %lld (%lld%s)", off + i, (long long)v, (long long)coef,
                     (long long)coef, r->sym_names[s]);
            return;
        } else {
            val[s] = v / coef, bound |= 1u << s, from[s] = -1;
        }
    }
    snprintf(why, n, "the rule holds"); // unreachable when the match failed
}

MRCNN_NORETURN static void fail_dims(const mrcnn_shape_rule *r, const mrcnn_shape_clause *c, const mrcnn_tensor *t,
                      const mrcnn_tensor *const *ts, const int64_t *val, uint32_t bound, const int8_t *from) {
    char got[128], exp[128], why[256];
    mrcnn_tensor_shape_str(t, got, sizeof got);
    const char *name = r->names[c->arg];
    int s = c->star;
    if (c->kind == SR_DIMS && c->n_dims == 0 && !c->lead && s >= 0 && t->ndim >= 1 && (bound >> s & 1) &&
        from[s] >= 0) {
        /* (*n) against an earlier (*n): the element counts differ */
        const mrcnn_tensor *o = ts[r->c[from[s]].arg];
        MRCNN_CHECK(0, "%s %s: shape %s has %lld elements but %s %s has %lld", r->op, name, got,
                    (long long)mrcnn_tensor_numel(t), r->names[r->c[from[s]].arg],
                    mrcnn_tensor_shape_str(o, exp, sizeof exp), (long long)val[s]);
    }
    explain(r, c, t, ts, val, bound, from, why, sizeof why);
    MRCNN_CHECK(0, "%s %s: shape %s but expected %s: %s (rule %.*s)", r->op, name, got,
                expected_str(c, val, bound, exp, sizeof exp), why, c->len, r->text + c->at);
}

MRCNN_NORETURN static void fail_like(const mrcnn_shape_rule *r, const mrcnn_shape_clause *c, const mrcnn_tensor *t,
                      const mrcnn_tensor *ref) {
    char got[128], exp[128];
    MRCNN_CHECK(0, "%s %s: shape %s but expected %s (like %s)", r->op, r->names[c->arg],
                mrcnn_tensor_shape_str(t, got, sizeof got), mrcnn_tensor_shape_str(ref, exp, sizeof exp),
                r->names[c->like]);
}

/* The header checks every argument gets, each failure in the words of the old checks. */
MRCNN_NORETURN static void fail_tensor(const mrcnn_shape_rule *r, const mrcnn_shape_clause *c, const mrcnn_backend *be,
                        const mrcnn_tensor *t) {
    const char *op = r->op, *name = r->names[c->arg];
    MRCNN_CHECK(t != NULL, "%s %s: NULL tensor", op, name);
    MRCNN_CHECK(t->device == be->device, "%s %s: tensor is on the %s, the %s backend needs %s memory", op, name,
                t->device == MRCNN_DEVICE_GPU ? "GPU" : "CPU", be->name,
                be->device == MRCNN_DEVICE_GPU ? "device" : "host");
    MRCNN_CHECK(mrcnn_tensor_is_contiguous(t), "%s %s: tensor must be contiguous", op, name);
    MRCNN_CHECK(t->data != NULL || mrcnn_tensor_numel(t) == 0, "%s %s: NULL data", op, name);
    if (c->dtype < 0)
        MRCNN_CHECK(0, "%s %s: dtype %s but expected a float dtype (fp32, fp16, bf16)", op, name,
                    mrcnn_dtype_name(t->dtype));
    MRCNN_CHECK(0, "%s %s: dtype %s but expected %s", op, name, mrcnn_dtype_name(t->dtype),
                mrcnn_dtype_name((mrcnn_dtype)c->dtype));
}

/* mrcnn_tensor_is_contiguous, inlined: this runs on every argument of every call. */
static inline int contiguous(const mrcnn_tensor *t) {
    int64_t stride = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != stride) return 0;
        stride *= t->shape[i];
    }
    return 1;
}

static inline int dtype_ok(const mrcnn_shape_clause *c, mrcnn_dtype d) {
    if (c->dtype >= 0) return d == (mrcnn_dtype)c->dtype;
    return d == MRCNN_DTYPE_F32 || d == MRCNN_DTYPE_F16 || d == MRCNN_DTYPE_BF16;
}

/* 1 when extent v matches dim (sym s, coefficient coef), binding s at its first use. */
static inline int match_extent(int s, int64_t coef, int64_t v, int64_t *val, uint32_t *bound) {
    if (s < 0) return v == coef;
    if (*bound >> s & 1) return v == coef * val[s];
    if (coef != 1) { // a multiple (2H): the division only then, it is slow
        if (v % coef) return 0;
        v /= coef;
    }
    val[s] = v, *bound |= 1u << s;
    return 1;
}

static inline int match_dims(const mrcnn_shape_clause *c, const mrcnn_tensor *t, int64_t *val, uint32_t *bound) {
    int nd = c->n_dims, off = 0;
    if (c->lead) {
        if (t->ndim < nd) return 0;
        off = t->ndim - nd;
    } else if (c->star >= 0 ? t->ndim < nd + 1 : t->ndim != nd) {
        return 0;
    }
    for (int i = 0; i < nd; i++) {
        const mrcnn_shape_dim *d = &c->dims[i];
        const int64_t v = t->shape[off + i];
        if (!match_extent(d->sym, d->lit, v, val, bound) || (d->pos && v <= 0)) return 0;
    }
    return c->star < 0 || match_extent(c->star, 1, prod_from(t, nd), val, bound);
}

/* Clause i's shape disagrees: the clauses before it are matched again, noting which
 * argument bound each symbol (the fast path does not), for the message. */
MRCNN_NORETURN static void fail_at(const mrcnn_shape_rule *r, int i, const mrcnn_tensor *const *ts) {
    int64_t val[MRCNN_SHAPE_RULE_MAX_SYMS] = {0};
    int8_t from[MRCNN_SHAPE_RULE_MAX_SYMS];
    uint32_t bound = 0;
    for (int j = 0; j < i; j++) {
        const mrcnn_shape_clause *c = &r->c[j];
        uint32_t before = bound;
        if (c->kind == SR_DIMS && ts[c->arg]) match_dims(c, ts[c->arg], val, &bound);
        for (int s = 0; s < r->n_syms; s++)
            if ((bound & ~before) >> s & 1) from[s] = (int8_t)j;
    }
    fail_dims(r, &r->c[i], ts[r->c[i].arg], ts, val, bound, from);
}

void mrcnn_shape_rule_check(const mrcnn_shape_rule *r, const mrcnn_backend *be, const mrcnn_tensor *const *ts) {
    int64_t val[MRCNN_SHAPE_RULE_MAX_SYMS];
    uint32_t bound = 0;
    for (int i = 0; i < r->n_clauses; i++) {
        const mrcnn_shape_clause *c = &r->c[i];
        const mrcnn_tensor *t = ts[c->arg];
        if (!t && c->optional) continue;
        if (!t || t->device != be->device || !contiguous(t) || (t->data == NULL && mrcnn_tensor_numel(t) != 0) ||
            !dtype_ok(c, t->dtype))
            fail_tensor(r, c, be, t);
        if (c->kind == SR_LIKE) {
            const mrcnn_tensor *ref = ts[c->like];
            int ok = t->ndim == ref->ndim;
            for (int k = 0; ok && k < t->ndim; k++) ok = t->shape[k] == ref->shape[k];
            if (!ok) fail_like(r, c, t, ref);
        } else if (c->kind == SR_DIMS && !match_dims(c, t, val, &bound)) {
            fail_at(r, i, ts);
        }
    }
}
