/* A training step's profile from the trace layer's listing (step_profile.h). The
 * listing is the one place that sees every backend call with its shapes, so the
 * profile reads it rather than wrapping the entries a second time. */
#include "mrcnn/step_profile.h"

#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend_trace.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"

/* The shape of argument `key` ("<key>=<dtype>[d0,d1,...]") in line [s, e); returns its
 * rank, 0 when the argument is absent or NULL ("-"). */
static int arg_shape(const char *s, const char *e, const char *key, int64_t shape[8], size_t *elem_size) {
    char pat[40];
    snprintf(pat, sizeof pat, " %s=", key);
    const size_t n = strlen(pat);
    for (const char *p = s; p + n <= e; p++) {
        if (memcmp(p, pat, n)) continue;
        const char *q = p + n, *br = q;
        while (br < e && *br != '[' && *br != ' ') br++;
        if (br >= e || *br != '[') return 0;
        if (elem_size) {
            *elem_size = 0;
            for (int d = 0; d < MRCNN_DTYPE_COUNT; d++) {
                const char *nm = mrcnn_dtype_name((mrcnn_dtype)d);
                if (strlen(nm) == (size_t)(br - q) && !memcmp(nm, q, (size_t)(br - q)))
                    *elem_size = mrcnn_dtype_size((mrcnn_dtype)d);
            }
        }
        int nd = 0;
        const char *c = br + 1;
        while (c < e && *c != ']' && nd < 8) {
            char *end;
            shape[nd++] = strtoll(c, &end, 10);
            MRCNN_CHECK(end != c, "step profile: cannot read the shape of %s in '%.*s'", key, (int)(e - s), s);
            c = *end == ',' ? end + 1 : end;
        }
        return nd;
    }
    return 0;
}

static double numel_of(const int64_t *shape, int nd) {
    double n = 1;
    for (int i = 0; i < nd; i++) n *= (double)shape[i];
    return n;
}

/* Bytes of every tensor argument of the line ("=<dtype>[...]"), read and written alike:
 * what the call moves at the least. */
static double line_bytes(const char *s, const char *e) {
    double total = 0;
    for (const char *p = s; p < e; p++) {
        if (*p != '=' && *p != '{' && *p != ',') continue;
        const char *q = p + 1, *br = q;
        while (br < e && br - q < 6 && *br != '[' && *br != ' ' && *br != '=') br++;
        if (br >= e || *br != '[' || br == q) continue;
        size_t es = 0;
        for (int d = 0; d < MRCNN_DTYPE_COUNT; d++) {
            const char *nm = mrcnn_dtype_name((mrcnn_dtype)d);
            if (strlen(nm) == (size_t)(br - q) && !memcmp(nm, q, (size_t)(br - q))) es = mrcnn_dtype_size((mrcnn_dtype)d);
        }
        if (!es) continue;
        double n = 1;
        const char *c = br + 1;
        while (c < e && *c != ']') {
            char *end;
            long long v = strtoll(c, &end, 10);
            if (end == c) break;
            n *= (double)v;
            c = *end == ',' ? end + 1 : end;
        }
        total += n * (double)es;
        p = c;
    }
    return total;
}

/* FLOPs of one convolution from its descriptor field d={...}: 2 x N P Q K R S C. */
static double conv_flops(const char *s, const char *e, int *n_out) {
    const char *d = strstr(s, " d={");
    MRCNN_CHECK(d && d < e, "step profile: a convolution without its descriptor: '%.*s'", (int)(e - s), s);
    int n, h, w, c, k, r, sz, sh, sw, ph, pw, dh, dw;
    MRCNN_CHECK(sscanf(d, " d={n=%d h=%d w=%d c=%d k=%d r=%d s=%d stride=%d,%d pad=%d,%d dil=%d,%d}", &n, &h, &w, &c,
                       &k, &r, &sz, &sh, &sw, &ph, &pw, &dh, &dw) == 13 &&
                    sh > 0 && sw > 0,
                "step profile: cannot read the convolution descriptor in '%.*s'", (int)(e - s), s);
    const int P = (h + 2 * ph - dh * (r - 1) - 1) / sh + 1, Q = (w + 2 * pw - dw * (sz - 1) - 1) / sw + 1;
    *n_out = n;
    return 2.0 * n * P * Q * (double)k * r * sz * c;
}

/* Backward products: one per gradient asked for (dx, dw; db is a sum). */
static int grads_asked(const char *s, const char *e) {
    int64_t sh[8];
    return (arg_shape(s, e, "dx", sh, NULL) > 0) + (arg_shape(s, e, "dw", sh, NULL) > 0);
}

/* roi: the line lies between a step's ROIAligns forward and their backward, where every
 * convolution is the mask head's whatever its batch (its rows may equal the images'). */
static void add_line(mrcnn_step_profile *p, const char *s, const char *e, int n_images, int roi) {
    const char *sp = memchr(s, ' ', (size_t)(e - s));
    const size_t nlen = (size_t)((sp ? sp : e) - s);
    if (!nlen) return;
    int i = 0;
    while (i < p->n_ops && (strlen(p->op[i]) != nlen || memcmp(p->op[i], s, nlen))) i++;
    if (i == p->n_ops) {
        MRCNN_CHECK(p->n_ops < MRCNN_PROFILE_MAX_OPS, "step profile: more than %d op kinds", MRCNN_PROFILE_MAX_OPS);
        snprintf(p->op[i], sizeof p->op[i], "%.*s", (int)nlen, s);
        p->n_ops++;
    }
    p->op_calls[i]++;
    p->calls++;
    if (strncmp(s, "mem.", 4)) p->bytes += line_bytes(s, e); // an upload's bytes are in the counters
    const char *op = p->op[i];
    int64_t x[8], w[8];
    if (!strcmp(op, "nn.conv2d_forward") || !strcmp(op, "nn.conv2d_backward")) {
        int n;
        double f = conv_flops(s, e, &n);
        if (!strcmp(op, "nn.conv2d_backward")) f *= grads_asked(s, e);
        p->flops[n == n_images && !roi ? MRCNN_PROFILE_IMAGE : MRCNN_PROFILE_MASK_HEAD] += f;
    } else if (!strcmp(op, "nn.deconv2x2_forward") || !strcmp(op, "nn.deconv2x2_backward")) {
        // x (N,H,W,C) w (K,2,2,C): 2 x N H W C K 4
        if (arg_shape(s, e, "x", x, NULL) == 4 && arg_shape(s, e, "w", w, NULL) == 4) {
            double f = 2.0 * numel_of(x, 4) * (double)w[0] * 4;
            if (!strcmp(op, "nn.deconv2x2_backward")) f *= grads_asked(s, e);
            p->flops[x[0] == n_images && !roi ? MRCNN_PROFILE_IMAGE : MRCNN_PROFILE_MASK_HEAD] += f;
        }
    } else if (!strcmp(op, "nn.linear_forward") || !strcmp(op, "nn.linear_backward")) {
        // x (N,in) w (out,in): 2 x N in out
        if (arg_shape(s, e, "x", x, NULL) == 2 && arg_shape(s, e, "w", w, NULL) == 2) {
            double f = 2.0 * (double)x[0] * (double)x[1] * (double)w[0];
            if (!strcmp(op, "nn.linear_backward")) f *= grads_asked(s, e);
            p->flops[MRCNN_PROFILE_BOX_HEAD] += f;
        }
    }
}

void mrcnn_step_profile_add_listing(mrcnn_step_profile *p, const char *listing, int n_images) {
    static const char fwd[] = "nn.roi_align_forward ", bwd[] = "nn.roi_align_backward ";
    int pooled = 0, unpooled = 0; // ROIAligns forward and backward so far
    for (const char *s = listing; s && *s;) {
        const char *e = strchr(s, '\n');
        if (!e) e = s + strlen(s);
        add_line(p, s, e, n_images, pooled > unpooled);
        pooled += !strncmp(s, fwd, sizeof fwd - 1);
        unpooled += !strncmp(s, bwd, sizeof bwd - 1);
        s = *e ? e + 1 : e;
    }
}

void mrcnn_step_profile_print(FILE *f, const mrcnn_step_profile *p) {
    static const char *const stage[MRCNN_PROFILE_COUNT] = {"image convs (backbone, FPN, RPN)", "mask head (ROI convs)",
                                                           "box head (linear)"};
    fprintf(f, "profile: one step, run directly under the trace layer (%.1f ms with tracing)\n", p->step_ms);
    fprintf(f, "profile: %llu backend calls by op kind (on a GPU an nn/loss/det/step/opt call or mem.zero is one "
               "launch or more; mem.alloc/free, count_hint and graph_epoch are none):\n",
            (unsigned long long)p->calls);
    for (int i = 0; i < p->n_ops; i++)
        fprintf(f, "profile:   %-34s %6llu\n", p->op[i], (unsigned long long)p->op_calls[i]);
    fprintf(f, "profile: uploads %llu (%.3f MB), reads %llu (%.3f MB), syncs %llu\n",
            (unsigned long long)p->stats.uploads, (double)p->stats.upload_bytes / 1e6,
            (unsigned long long)p->stats.reads, (double)p->stats.read_bytes / 1e6, (unsigned long long)p->stats.syncs);
    fprintf(f, "profile: host staging %.2f ms\n", p->stage_ms);
    fprintf(f, "profile: tensor bytes the calls name (a lower bound on bytes moved): %.1f MB\n", p->bytes / 1e6);
    double total = 0;
    for (int s = 0; s < MRCNN_PROFILE_COUNT; s++) total += p->flops[s];
    fprintf(f, "profile: FLOPs %.3f T (convolutions, deconvolutions, linear; forward and backward):\n", total / 1e12);
    for (int s = 0; s < MRCNN_PROFILE_COUNT; s++)
        fprintf(f, "profile:   %-34s %.3f T\n", stage[s], p->flops[s] / 1e12);
}

void mrcnn_step_profile_run(mrcnn_backend *be, const mrcnn_model *m, int n_images, void (*step)(void *ctx), void *ctx,
                            FILE *f, mrcnn_step_profile *out) {
    mrcnn_backend_trace_install(be);
    mrcnn_backend_trace_keep_listing(be, 1);
    mrcnn_step_profile p;
    memset(&p, 0, sizeof p);
    mrcnn_trace_summary s;
    double t0 = mrcnn_time_now();
    mrcnn_backend_trace_begin(be);
    step(ctx);
    mrcnn_backend_trace_end(be, &s);
    p.step_ms = 1e3 * (mrcnn_time_now() - t0);
    mrcnn_backend_trace_keep_listing(be, 0);
    mrcnn_backend_trace_uninstall(be);
    mrcnn_step_profile_add_listing(&p, s.listing, n_images);
    MRCNN_CHECK(p.calls == s.calls, "step profile: %llu listed calls, the trace counted %llu",
                (unsigned long long)p.calls, (unsigned long long)s.calls);
    p.stats = s.stats;
    p.stage_ms = m && m->n_staged > 0 ? m->staged[0].stage_ms : 0;
    mrcnn_trace_summary_free(&s);
    if (f) mrcnn_step_profile_print(f, &p);
    if (out) *out = p;
}
