/* The backend call trace (backend_trace.h): every entry of a backend wrapped by one
 * that records the call as a line of text, then calls the entry it replaced. The
 * window's hash is over the lines themselves, so what is hashed is exactly what a
 * dump shows: a differing hash always has a differing line to point at.
 *
 * The wrappers get `const mrcnn_backend *be`, so the state (the replaced entries, the
 * window, the allocation table) lives in a small registry keyed by the backend. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend_trace.h"
#include "mrcnn/check.h"
#include "mrcnn/step_ctl.h"
#include "mrcnn/test_hooks.h"

/* ---- state and registry ---- */

typedef struct {
    uintptr_t base;
    size_t bytes;
    int live; // not freed yet in this window
} trace_alloc;

typedef struct trace_state {
    mrcnn_backend *be;
    mrcnn_backend inner; // the entries as they were before install: the wrappers call these
    pthread_mutex_t mu;  // recording: other threads may call the backend while a window is open
    int open;            // inside a window
    int keep;            // keep the window's lines (summary.listing)
    FILE *dump;          // print lines here (MRCNN_TRACE_DUMP=1 or mrcnn_backend_trace_dump)
    char dump_prefix[512]; // MRCNN_TRACE_DUMP=<prefix>: window k to <prefix>.<k>.txt
    FILE *dump_file;     // the open window's file then
    int64_t window;      // windows begun
    mrcnn_trace_summary cur;
    mrcnn_backend_stats stats0;
    trace_alloc *allocs; // this window's mem.alloc results, in order (ordinal = index)
    int64_t n_allocs, cap_allocs;
    char *list;          // kept lines
    size_t list_len, list_cap;
} trace_state;

#define TRACE_MAX_BACKENDS 16
static trace_state *g_reg[TRACE_MAX_BACKENDS];
static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;

static trace_state *find(const mrcnn_backend *be) {
    for (int i = 0; i < TRACE_MAX_BACKENDS; i++) {
        trace_state *s = __atomic_load_n(&g_reg[i], __ATOMIC_ACQUIRE);
        if (s && s->be == be) return s;
    }
    return NULL;
}

static trace_state *lookup(const mrcnn_backend *be) {
    trace_state *s = find(be);
    MRCNN_CHECK(s != NULL, "backend_trace: backend %p (%s) is not traced (mrcnn_backend_trace_install)", (void *)be,
                be && be->name ? be->name : "?");
    return s;
}

/* ---- one call as a line ---- */

#define LINE_MAX_CHARS 16384
typedef struct {
    char buf[LINE_MAX_CHARS];
    size_t len;
    trace_state *s;
} line;

static void put(line *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(line *L, const char *fmt, ...) {
    if (L->len >= sizeof L->buf - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(L->buf + L->len, sizeof L->buf - L->len, fmt, ap);
    va_end(ap);
    if (n > 0) L->len += (size_t)n < sizeof L->buf - L->len ? (size_t)n : sizeof L->buf - 1 - L->len;
}

static void ln_begin(line *L, trace_state *s, const char *name) {
    L->s = s;
    L->len = 0;
    put(L, "%s", name);
}

static void ln_int(line *L, const char *key, long long v) { put(L, " %s=%lld", key, v); }

/* 9 significant digits print a float exactly; NaN by its bits (the payload too). */
static void ln_f32(line *L, const char *key, float v) {
    if (isnan(v)) {
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        put(L, " %s=nan(0x%08" PRIx32 ")", key, bits);
    } else
        put(L, " %s=%.9g", key, (double)v);
}

/* A pointer inside a buffer allocated in this window: "a<ordinal>+<offset>" (newest
 * live buffer first: the host may reuse a freed one's address); else its address. */
static void ln_ptr_raw(line *L, const void *p) {
    if (!p) {
        put(L, "0");
        return;
    }
    const uintptr_t a = (uintptr_t)p;
    trace_state *s = L->s;
    int64_t ord = -1;
    size_t off = 0;
    pthread_mutex_lock(&s->mu); // another thread's alloc may grow the table
    for (int64_t i = s->n_allocs - 1; i >= 0 && ord < 0; i--) {
        const trace_alloc *al = &s->allocs[i];
        if (al->live && a >= al->base && (a < al->base + al->bytes || a == al->base)) ord = i, off = a - al->base;
    }
    pthread_mutex_unlock(&s->mu);
    if (ord >= 0) put(L, "a%" PRId64 "+%zu", ord, off);
    else put(L, "%p", p);
}

static void ln_ptr(line *L, const char *key, const void *p) {
    put(L, " %s=", key);
    ln_ptr_raw(L, p);
}

static void ln_tensor_raw(line *L, const mrcnn_tensor *t) {
    if (!t) {
        put(L, "-");
        return;
    }
    const int nd = t->ndim < 0 ? 0 : t->ndim > MRCNN_MAX_DIMS ? MRCNN_MAX_DIMS : t->ndim;
    const char *dt = t->dtype >= 0 && t->dtype < MRCNN_DTYPE_COUNT ? mrcnn_dtype_name(t->dtype) : "?";
    put(L, "%s%s[", dt, t->ndim != nd ? "(bad ndim)" : "");
    for (int i = 0; i < nd; i++) put(L, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    put(L, "]");
    if (!mrcnn_tensor_is_contiguous(t)) { // contiguous strides follow from the shape
        put(L, "s[");
        for (int i = 0; i < nd; i++) put(L, "%s%lld", i ? "," : "", (long long)t->stride[i]);
        put(L, "]");
    }
    put(L, "%s@", t->device == MRCNN_DEVICE_GPU ? "gpu" : t->device == MRCNN_DEVICE_CPU ? "cpu" : "?dev");
    ln_ptr_raw(L, t->data);
}

static void ln_tensor(line *L, const char *key, const mrcnn_tensor *t) {
    put(L, " %s=", key);
    ln_tensor_raw(L, t);
}

/* An array of n tensors (feature levels). */
static void ln_tensors(line *L, const char *key, const mrcnn_tensor *t, int n) {
    put(L, " %s=", key);
    if (!t) {
        put(L, "-");
        return;
    }
    put(L, "{");
    for (int i = 0; i < n; i++) {
        if (i) put(L, ",");
        ln_tensor_raw(L, &t[i]);
    }
    put(L, "}");
}

static int clamp_levels(int n, int max) { return n < 0 ? 0 : n > max ? max : n; }

/* ---- descriptors, field by field (never their bytes: padding is indeterminate) ---- */

static void ln_conv(line *L, const mrcnn_conv2d_desc *d) {
    if (!d) {
        put(L, " d=-");
        return;
    }
    put(L, " d={n=%d h=%d w=%d c=%d k=%d r=%d s=%d stride=%d,%d pad=%d,%d dil=%d,%d}", d->n, d->h, d->w, d->c, d->k,
        d->r, d->s, d->stride_h, d->stride_w, d->pad_h, d->pad_w, d->dil_h, d->dil_w);
}

static void ln_pool(line *L, const mrcnn_pool2d_desc *d) {
    if (!d) {
        put(L, " d=-");
        return;
    }
    put(L, " d={n=%d h=%d w=%d c=%d kernel=%d stride=%d pad=%d}", d->n, d->h, d->w, d->c, d->kernel, d->stride, d->pad);
}

static void ln_roi_desc(line *L, const mrcnn_roi_align_desc *d) {
    if (!d) {
        put(L, " d=-");
        return;
    }
    put(L, " d={n=%d c=%d levels=%d first=%d hw=", d->n_images, d->channels, d->n_levels, d->first_level);
    const int nl = clamp_levels(d->n_levels, MRCNN_ROI_MAX_LEVELS);
    for (int l = 0; l < nl; l++) put(L, "%s%dx%d", l ? "," : "", d->level_h[l], d->level_w[l]);
    put(L, " scale=");
    for (int l = 0; l < nl; l++) put(L, "%s%.9g", l ? "," : "", (double)d->spatial_scale[l]);
    put(L, " canonical=%d,%.9g out=%dx%d sampling=%d aligned=%d}", d->canonical_level, (double)d->canonical_scale,
        d->out_h, d->out_w, d->sampling_ratio, d->aligned);
}

static void ln_norm(line *L, const mrcnn_loss_norm *n) {
    if (!n) {
        put(L, " norm=-");
        return;
    }
    put(L, " norm={count=");
    ln_tensor_raw(L, n->count);
    ln_f32(L, "scale", n->scale);
    ln_f32(L, "grad_mult", n->grad_mult);
    put(L, " grad_scale=");
    ln_tensor_raw(L, n->grad_scale);
    put(L, "}");
}

/* Every field of mrcnn_step_desc is a 4-byte int or float, so it has no padding: any
 * field after the last one named here (a per-step value added at its end, as the step
 * index once was) is hashed as 32-bit words without an edit here. */
_Static_assert(sizeof(mrcnn_step_desc) % 4 == 0 && _Alignof(mrcnn_step_desc) == 4,
               "mrcnn_step_desc holds more than 4-byte ints and floats: name its fields in backend_trace.c");
static void ln_step_desc(line *L, const struct mrcnn_step_desc *d) {
    if (!d) {
        put(L, " d=-");
        return;
    }
    put(L, " d={n_losses=%d scaler=%d scales_loss=%d growth=%d clip=%d", d->n_losses, d->scaler_enabled,
        d->scales_loss, d->growth_interval, d->clip_enabled);
    ln_f32(L, "clip_value", d->clip_value);
    ln_f32(L, "inv_world", d->inv_world);
    ln_f32(L, "inv_accum", d->inv_accum);
    const size_t tail = offsetof(mrcnn_step_desc, inv_accum) + sizeof(float);
    if (tail < sizeof *d) {
        put(L, " more=");
        for (size_t o = tail; o < sizeof *d; o += 4) {
            uint32_t w;
            memcpy(&w, (const char *)d + o, 4);
            put(L, "%s%08" PRIx32, o > tail ? "," : "", w);
        }
    }
    put(L, "}");
}

static void ln_level_counts(line *L, const int64_t *c, int n_levels) {
    put(L, " level_counts=");
    const int nl = clamp_levels(n_levels, MRCNN_DET_MAX_LEVELS);
    for (int l = 0; l < nl; l++) put(L, "%s%lld", l ? "," : "", (long long)c[l]);
}

static void ln_rpn_desc(line *L, const mrcnn_rpn_targets_desc *d) {
    if (!d) {
        put(L, " d=-");
        return;
    }
    put(L, " d={n=%d levels=%d", d->n_images, d->n_levels);
    ln_level_counts(L, d->level_counts, d->n_levels);
    ln_f32(L, "fg_iou", d->fg_iou);
    ln_f32(L, "bg_iou", d->bg_iou);
    ln_int(L, "batch", d->batch_size_per_image);
    ln_f32(L, "pos_frac", d->positive_fraction);
    put(L, "}");
}

static void ln_prop_desc(line *L, const mrcnn_proposals_desc *d) {
    if (!d) {
        put(L, " d=-");
        return;
    }
    put(L, " d={n=%d levels=%d", d->n_images, d->n_levels);
    ln_level_counts(L, d->level_counts, d->n_levels);
    ln_int(L, "pre_nms", d->pre_nms_top_n);
    ln_int(L, "post_nms", d->post_nms_top_n);
    ln_f32(L, "nms", d->nms_thresh);
    ln_f32(L, "min_size", d->min_size);
    ln_f32(L, "score", d->score_thresh);
    put(L, "}");
}

static void ln_sample_desc(line *L, const mrcnn_roi_sample_desc *d) {
    if (!d) {
        put(L, " d=-");
        return;
    }
    put(L, " d={n=%d prop_cap=%d batch=%d max_fg=%d", d->n_images, d->prop_cap, d->batch_size_per_image, d->max_fg);
    ln_f32(L, "pos_frac", d->positive_fraction);
    ln_f32(L, "iou", d->iou_thresh);
    ln_f32(L, "coder.wx", d->coder.wx);
    ln_f32(L, "coder.wy", d->coder.wy);
    ln_f32(L, "coder.ww", d->coder.ww);
    ln_f32(L, "coder.wh", d->coder.wh);
    ln_f32(L, "coder.clip", d->coder.clip);
    put(L, "}");
}

static void ln_detect_desc(line *L, const mrcnn_detect_desc *d) {
    if (!d) {
        put(L, " d=-");
        return;
    }
    put(L, " d={n=%d classes=%d max_det=%d", d->n_images, d->num_classes, d->max_detections);
    ln_f32(L, "score", d->score_thresh);
    ln_f32(L, "nms", d->nms_thresh);
    ln_f32(L, "min_size", d->min_size);
    ln_f32(L, "coder.wx", d->coder.wx);
    ln_f32(L, "coder.wy", d->coder.wy);
    ln_f32(L, "coder.ww", d->coder.ww);
    ln_f32(L, "coder.wh", d->coder.wh);
    ln_f32(L, "coder.clip", d->coder.clip);
    put(L, "}");
}

static void ln_gt(line *L, const mrcnn_gt_batch *g) {
    if (!g) {
        put(L, " gt=-");
        return;
    }
    put(L, " gt={n=%d max_gt=%d mask=%dx%d", g->n_images, g->max_gt, g->mask_h, g->mask_w);
    ln_tensor(L, "boxes", &g->boxes);
    ln_tensor(L, "labels", &g->labels);
    ln_tensor(L, "counts", &g->counts);
    ln_tensor(L, "masks", &g->masks);
    ln_tensor(L, "image_hw", &g->image_hw);
    put(L, "}");
}

/* ---- recording ---- */

static uint64_t fnv1a(uint64_t h, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void record(line *L) {
    trace_state *s = L->s;
    if (L->len >= sizeof L->buf - 1) fprintf(stderr, "backend_trace: a line was cut at %zu chars\n", L->len);
    pthread_mutex_lock(&s->mu);
    const uint64_t idx = s->cur.calls++;
    s->cur.hash = fnv1a(s->cur.hash, L->buf, L->len);
    s->cur.hash = fnv1a(s->cur.hash, "\n", 1);
    if (s->dump) fprintf(s->dump, "trace[%" PRId64 "] #%" PRIu64 " %s\n", s->window, idx, L->buf);
    if (s->dump_file) fprintf(s->dump_file, "#%" PRIu64 " %s\n", idx, L->buf);
    if (s->keep) {
        if (s->list_len + L->len + 2 > s->list_cap) {
            s->list_cap = (s->list_len + L->len + 2) * 2;
            s->list = MRCNN_REALLOC(s->list, s->list_cap, "trace listing");
        }
        memcpy(s->list + s->list_len, L->buf, L->len);
        s->list_len += L->len;
        s->list[s->list_len++] = '\n';
        s->list[s->list_len] = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

/* Calls an entry makes through the backend's table while it runs are its own
 * business, not the caller's: the CPU's step.sgd_update calls opt.sgd_update with the
 * values it reads from the control vector (host memory there), where a GPU kernel
 * reads them on the device. Such nested calls are neither hashed nor listed; their
 * uploads, reads, syncs and allocations still count. The depth is per thread, and
 * trace_begin resets it (a failure caught by a test's longjmp skips the decrement). */
static _Thread_local int t_depth;
static void depth_leave(int *unused) { t_depth--; }

/* The opening lines of every wrapper: S the state, L the line when a window is open
 * and the call is not nested; the depth goes down again when the wrapper returns. */
#define TRACE_OPEN(name)                                                                                               \
    trace_state *S = lookup(be);                                                                                       \
    line L_, *L = S->open && t_depth == 0 ? &L_ : NULL;                                                                \
    __attribute__((cleanup(depth_leave), unused)) int depth_guard_ = ++t_depth;                                        \
    if (L) ln_begin(L, S, name)

/* ---- mem ---- */

static void *t_mem_alloc(const mrcnn_backend *be, size_t bytes, const char *what) {
    trace_state *S = lookup(be);
    const int nested = t_depth > 0;
    t_depth++;
    void *p = S->inner.mem.alloc(be, bytes, what);
    t_depth--;
    if (!S->open) return p;
    line L_, *L = &L_;
    ln_begin(L, S, "mem.alloc");
    put(L, " bytes=%zu what=%s -> a%" PRId64, bytes, what ? what : "-", S->n_allocs);
    pthread_mutex_lock(&S->mu);
    if (S->n_allocs == S->cap_allocs) {
        S->cap_allocs = S->cap_allocs ? 2 * S->cap_allocs : 256;
        S->allocs = MRCNN_REALLOC(S->allocs, (size_t)S->cap_allocs * sizeof *S->allocs, "trace allocations");
    }
    S->allocs[S->n_allocs++] = (trace_alloc){(uintptr_t)p, bytes, 1};
    S->cur.allocs++;
    pthread_mutex_unlock(&S->mu);
    if (!nested) record(L);
    return p;
}

static void t_mem_free(const mrcnn_backend *be, void *p) {
    TRACE_OPEN("mem.free");
    if (S->open) {
        if (L) {
            ln_ptr(L, "p", p);
            record(L);
        }
        pthread_mutex_lock(&S->mu);
        S->cur.frees++;
        for (int64_t i = S->n_allocs - 1; i >= 0; i--)
            if (S->allocs[i].live && S->allocs[i].base == (uintptr_t)p) {
                S->allocs[i].live = 0;
                break;
            }
        pthread_mutex_unlock(&S->mu);
    }
    S->inner.mem.free(be, p);
}

/* The host source is not hashed: its address and contents are the upload's data. */
static void t_mem_write(const mrcnn_backend *be, mrcnn_tensor *dst, const void *host_src) {
    TRACE_OPEN("mem.write");
    if (S->open) __atomic_fetch_add(&S->cur.uploads, 1, __ATOMIC_RELAXED);
    if (L) {
        ln_tensor(L, "dst", dst);
        put(L, " bytes=%zu", dst ? mrcnn_tensor_nbytes(dst) : (size_t)0);
        record(L);
    }
    S->inner.mem.write(be, dst, host_src);
}

static void t_mem_read(const mrcnn_backend *be, const mrcnn_tensor *src, void *host_dst) {
    TRACE_OPEN("mem.read");
    if (S->open) __atomic_fetch_add(&S->cur.reads, 1, __ATOMIC_RELAXED);
    if (L) {
        ln_tensor(L, "src", src);
        record(L);
    }
    S->inner.mem.read(be, src, host_dst);
}

static void t_mem_sync(const mrcnn_backend *be) {
    TRACE_OPEN("mem.sync");
    if (S->open) __atomic_fetch_add(&S->cur.syncs, 1, __ATOMIC_RELAXED);
    if (L) record(L);
    S->inner.mem.sync(be);
}

/* ---- opt ---- */

/* A read: the flag comes back to the host. */
static int t_opt_nonfinite(const mrcnn_backend *be, const mrcnn_tensor *t) {
    TRACE_OPEN("opt.nonfinite");
    if (S->open) __atomic_fetch_add(&S->cur.reads, 1, __ATOMIC_RELAXED);
    if (L) {
        ln_tensor(L, "t", t);
        record(L);
    }
    return S->inner.opt.nonfinite(be, t);
}

/* ---- stream ---- */

/* The body's ops are the caller's own calls (a step's work that runs or not), each
 * traced at the caller's depth; on the CPU the line is followed by the body's lines
 * when the count was above, by none when not. */
static void t_stream_run_if(const mrcnn_backend *be, const mrcnn_tensor *count, int64_t above, void (*body)(void *ctx),
                            void *ctx) {
    trace_state *S = lookup(be);
    if (S->open && t_depth == 0) {
        line L_, *L = &L_;
        ln_begin(L, S, "stream.run_if");
        ln_tensor(L, "count", count);
        ln_int(L, "above", above);
        record(L);
    }
    S->inner.stream.run_if(be, count, above, body, ctx);
}

/* ---- nn, loss, opt, det, stream, step, info: generated from the op list ---- */

/* One trace field per argument, in the order of the list's trace_fields. */
#define TR_T(x) ln_tensor(L, #x, x);
#define TR_LV(x, max) ln_tensors(L, #x, x, d ? clamp_levels(d->n_levels, max) : 0);
#define TR_I(x) ln_int(L, #x, x);
#define TR_F(x) ln_f32(L, #x, x);
#define TR_P(x) ln_ptr(L, #x, x);
#define TR_SZ(x) put(L, " " #x "=%zu", x);
#define TR_D(kind, d) TR_D_##kind(d)
#define TR_D_conv(d) ln_conv(L, d);
#define TR_D_pool(d) ln_pool(L, d);
#define TR_D_roi(d) ln_roi_desc(L, d);
#define TR_D_norm(n) ln_norm(L, n);
#define TR_D_step(d) ln_step_desc(L, d);
#define TR_D_rpn(d) ln_rpn_desc(L, d);
#define TR_D_prop(d) ln_prop_desc(L, d);
#define TR_D_sample(d) ln_sample_desc(L, d);
#define TR_D_gt(g) ln_gt(L, g);
#define TR_D_detect(d) ln_detect_desc(L, d);

/* The line "<table>.<name> <fields>", then the entry it replaced (the HAND entries'
 * wrappers are above). Calls the host can see without a wait (count_hint's value on
 * the CPU) show in the lines of the calls they steer. */
#define TRACE_GEN_HAND(ret, table, name, params, args, fields, call)
#define TRACE_GEN_GEN(ret, table, name, params, args, fields, call)                                                    \
    static ret t_##table##_##name params {                                                                             \
        TRACE_OPEN(#table "." #name);                                                                                  \
        if (L) {                                                                                                       \
            fields record(L);                                                                                          \
        }                                                                                                              \
        call S->inner.table.name args;                                                                                 \
    }
#define BE_OP(table, name, params, args, trace, fields, ...)                                                           \
    TRACE_GEN_##trace(void, table, name, params, args, fields, )
#define BE_OPR(table, name, ret, params, args, trace, fields, ...)                                                     \
    TRACE_GEN_##trace(ret, table, name, params, args, fields, return)
#include "mrcnn/backend_ops.def"
#undef BE_OP
#undef BE_OPR

/* ---- precision ---- */

static void t_set_precision(mrcnn_backend *be, mrcnn_dtype storage) {
    TRACE_OPEN("set_precision");
    if (L) {
        ln_int(L, "storage", storage);
        record(L);
    }
    S->inner.set_precision(be, storage);
}

/* ---- install ---- */

static void unregister(trace_state *s) {
    pthread_mutex_lock(&g_reg_mu);
    for (int i = 0; i < TRACE_MAX_BACKENDS; i++)
        if (g_reg[i] == s) __atomic_store_n(&g_reg[i], NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_reg_mu);
    if (s->dump_file) fclose(s->dump_file);
    pthread_mutex_destroy(&s->mu);
    free(s->allocs);
    free(s->list);
    free(s);
}

static void t_destroy(mrcnn_backend *be) {
    trace_state *s = lookup(be);
    void (*destroy)(mrcnn_backend *) = s->inner.destroy;
    be->destroy = destroy;
    unregister(s);
    if (destroy) destroy(be);
}

#define WRAP(table, entry, fn)                                                                                         \
    do {                                                                                                               \
        if (be->table.entry) be->table.entry = fn;                                                                     \
    } while (0)

void mrcnn_backend_trace_install(mrcnn_backend *be) {
    MRCNN_CHECK(be != NULL, "mrcnn_backend_trace_install: NULL backend");
    if (find(be)) return;
    trace_state *s = MRCNN_CALLOC(1, sizeof *s, "backend trace");
    s->be = be;
    s->inner = *be;
    pthread_mutex_init(&s->mu, NULL);
    const char *env = getenv("MRCNN_TRACE_DUMP");
    if (env && *env && strcmp(env, "0") != 0) {
        if (!strcmp(env, "1") || !strcmp(env, "stderr")) s->dump = stderr;
        else snprintf(s->dump_prefix, sizeof s->dump_prefix, "%s", env);
    }

    /* The sub-tables' members are the list's lines (backend.h), so this wraps them all. */
#define BE_OP(table, name, ...) WRAP(table, name, t_##table##_##name);
#define BE_OPR(table, name, ...) WRAP(table, name, t_##table##_##name);
#include "mrcnn/backend_ops.def"
#undef BE_OP
#undef BE_OPR

    if (be->set_precision) be->set_precision = t_set_precision;
    be->destroy = t_destroy; // unregisters, then the backend's own destroy (which may be NULL)

    pthread_mutex_lock(&g_reg_mu);
    int slot = -1;
    for (int i = 0; i < TRACE_MAX_BACKENDS && slot < 0; i++)
        if (!g_reg[i]) slot = i;
    if (slot >= 0) __atomic_store_n(&g_reg[slot], s, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_reg_mu);
    MRCNN_CHECK(slot >= 0, "mrcnn_backend_trace_install: more than %d traced backends at once", TRACE_MAX_BACKENDS);
}

void mrcnn_backend_trace_uninstall(mrcnn_backend *be) {
    trace_state *s = lookup(be);
    MRCNN_CHECK(!s->open, "mrcnn_backend_trace_uninstall: a window is open (mrcnn_backend_trace_end first)");
    const mrcnn_backend *in = &s->inner;
    be->set_precision = in->set_precision;
    be->destroy = in->destroy;
    be->mem = in->mem;
    be->nn = in->nn;
    be->loss = in->loss;
    be->opt = in->opt;
    be->det = in->det;
    be->stream = in->stream;
    be->step = in->step;
    be->info = in->info;
    unregister(s);
}

void mrcnn_backend_trace_keep_listing(mrcnn_backend *be, int on) { lookup(be)->keep = on != 0; }

/* A debugging tool: MRCNN_TRACE_DUMP=1 from code, to any stream. */
MRCNN_TEST_HOOK void mrcnn_backend_trace_dump(mrcnn_backend *be, FILE *f) { lookup(be)->dump = f; }

void mrcnn_backend_trace_begin(mrcnn_backend *be) {
    trace_state *s = lookup(be);
    MRCNN_CHECK(!s->open, "mrcnn_backend_trace_begin: window %lld is still open", (long long)s->window);
    pthread_mutex_lock(&s->mu);
    s->window++;
    memset(&s->cur, 0, sizeof s->cur);
    s->cur.hash = 0xcbf29ce484222325ull; // FNV-1a offset basis
    s->n_allocs = 0;
    s->list_len = 0;
    if (s->list) s->list[0] = 0;
    if (s->dump_prefix[0]) {
        char path[600];
        snprintf(path, sizeof path, "%s.%lld.txt", s->dump_prefix, (long long)s->window);
        s->dump_file = fopen(path, "w");
        if (!s->dump_file) fprintf(stderr, "backend_trace: cannot write %s (MRCNN_TRACE_DUMP)\n", path);
    }
    s->stats0 = mrcnn_backend_stats_get(be);
    t_depth = 0;
    s->open = 1;
    pthread_mutex_unlock(&s->mu);
}

void mrcnn_backend_trace_end(mrcnn_backend *be, mrcnn_trace_summary *out) {
    trace_state *s = lookup(be);
    MRCNN_CHECK(s->open, "mrcnn_backend_trace_end: no window open (mrcnn_backend_trace_begin)");
    pthread_mutex_lock(&s->mu);
    s->open = 0;
    mrcnn_backend_stats now = mrcnn_backend_stats_get(be);
    s->cur.stats.reads = now.reads - s->stats0.reads;
    s->cur.stats.read_bytes = now.read_bytes - s->stats0.read_bytes;
    s->cur.stats.syncs = now.syncs - s->stats0.syncs;
    s->cur.stats.uploads = now.uploads - s->stats0.uploads;
    s->cur.stats.upload_bytes = now.upload_bytes - s->stats0.upload_bytes;
    for (int64_t i = 0; i < s->n_allocs; i++) s->cur.live += s->allocs[i].live != 0;
    if (s->dump_file) {
        fclose(s->dump_file);
        s->dump_file = NULL;
    }
    if (s->dump) fflush(s->dump);
    *out = s->cur;
    out->listing = NULL;
    if (s->keep) {
        out->listing = MRCNN_MALLOC(s->list_len + 1, "trace listing");
        memcpy(out->listing, s->list ? s->list : "", s->list_len);
        out->listing[s->list_len] = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

void mrcnn_trace_summary_free(mrcnn_trace_summary *s) {
    if (!s) return;
    free(s->listing);
    s->listing = NULL;
}
