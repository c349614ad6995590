/* The scaling model of scaling_model.h: ring all-reduce cost per bucket, buckets
 * serialized on one stream behind the backward that produces them. */
#include "mrcnn/scaling_model.h"
#include "mrcnn/check.h"
#include "mrcnn/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mrcnn_link k_presets[] = {
    {"nvlink", 450.0, 3.0}, // NVLink 4 (H100/H200 SXM), NCCL all-reduce bus bandwidth
    {"ndr", 45.0, 6.0},     // InfiniBand NDR 400 Gb/s, one NIC per GPU
    {"hdr", 22.0, 6.0},     // InfiniBand HDR 200 Gb/s, one NIC per GPU
    {"eth100", 11.0, 10.0}, // 100 GbE RoCE
};

static int fail(char *err, size_t errlen, const char *fmt, ...) MRCNN_PRINTF(3, 4);
static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 0;
}

int mrcnn_link_parse(const char *spec, mrcnn_link *out, char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (!strcmp(spec, k_presets[i].name)) {
            *out = k_presets[i];
            return 1;
        }
    double bw, lat;
    char tail;
    if (sscanf(spec, "%lf,%lf%c", &bw, &lat, &tail) == 2 && bw > 0 && lat >= 0) {
        snprintf(out->name, sizeof out->name, "%gGBps-%gus", bw, lat);
        out->bw_gbs = bw;
        out->latency_us = lat;
        return 1;
    }
    return fail(err, errlen,
                "link '%s' is neither a preset (nvlink, ndr, hdr, eth100) nor BW,LAT (GB/s, microseconds, "
                "BW > 0)",
                spec);
}

double mrcnn_ring_allreduce_ms(double bytes, int n, const mrcnn_link *link) {
    if (n <= 1) return 0.0;
    double steps = 2.0 * (n - 1);
    return 1e3 * (steps / n * bytes / (link->bw_gbs * 1e9)) + 1e-3 * steps * link->latency_us;
}

void mrcnn_scaling_predict(const mrcnn_timeline *t, int gpus, int gpus_per_node, const mrcnn_link *intra,
                           const mrcnn_link *inter, double backward_scale, mrcnn_scaling_prediction *out) {
    MRCNN_CHECK(gpus >= 1 && gpus_per_node >= 1, "scaling model: %d GPUs, %d per node (both must be >= 1)", gpus,
                gpus_per_node);
    MRCNN_CHECK(backward_scale > 0, "scaling model: backward scale %g must be > 0", backward_scale);
    const mrcnn_link *link = gpus <= gpus_per_node ? intra : inter;
    double bwd = t->backward_ms * backward_scale, end = 0, comm = 0;
    for (int i = 0; i < t->n_buckets; i++) {
        double c = mrcnn_ring_allreduce_ms(t->bytes[i], gpus, link);
        double start = fmax(t->ready_ms[i] * backward_scale, end);
        end = start + c;
        comm += c;
    }
    double exposed = fmax(0.0, end - bwd);
    double step1 = t->forward_ms + bwd + t->other_ms;
    memset(out, 0, sizeof *out);
    out->gpus = gpus;
    out->link = gpus > 1 ? link->name : "none";
    out->comm_ms = comm;
    out->exposed_ms = exposed;
    out->hidden_share = comm > 0 ? (comm - exposed) / comm : 1.0;
    out->step_ms = step1 + exposed;
    out->efficiency = step1 / out->step_ms;
    out->img_per_s = 1e3 * (double)gpus * t->images_per_gpu / out->step_ms;
}

/* ---- the timeline file ---- */

static int expect_number(mrcnn_json *j, const char *key, double *v, char *err, size_t errlen, const char *name) {
    if (mrcnn_json_next(j) != MRCNN_JSON_NUMBER)
        return fail(err, errlen, "%s: line %lld: \"%s\" must be a number", name, (long long)mrcnn_json_line(j), key);
    *v = mrcnn_json_double(j);
    return 1;
}

static int parse_buckets(mrcnn_json *j, mrcnn_timeline *t, char *err, size_t errlen, const char *name) {
    if (mrcnn_json_next(j) != MRCNN_JSON_ARRAY_BEGIN)
        return fail(err, errlen, "%s: line %lld: \"buckets\" must be an array", name, (long long)mrcnn_json_line(j));
    int cap = 0;
    for (;;) {
        mrcnn_json_token tok = mrcnn_json_next(j);
        if (tok == MRCNN_JSON_ARRAY_END) break;
        if (tok != MRCNN_JSON_OBJECT_BEGIN)
            return fail(err, errlen, "%s: line %lld: each bucket must be {\"ready_ms\": .., \"bytes\": ..}", name,
                        (long long)mrcnn_json_line(j));
        if (t->n_buckets == cap) {
            cap = cap ? 2 * cap : 16;
            t->ready_ms = MRCNN_REALLOC(t->ready_ms, sizeof(double) * cap, "timeline ready times");
            t->bytes = MRCNN_REALLOC(t->bytes, sizeof(double) * cap, "timeline bucket sizes");
        }
        double ready = NAN, bytes = NAN;
        while ((tok = mrcnn_json_next(j)) == MRCNN_JSON_KEY) {
            const char *k = mrcnn_json_text(j, NULL);
            if (!strcmp(k, "ready_ms")) {
                if (!expect_number(j, "ready_ms", &ready, err, errlen, name)) return 0;
            } else if (!strcmp(k, "bytes")) {
                if (!expect_number(j, "bytes", &bytes, err, errlen, name)) return 0;
            } else {
                mrcnn_json_next(j);
                if (!mrcnn_json_skip(j)) return fail(err, errlen, "%s: %s", name, mrcnn_json_error(j));
            }
        }
        if (tok != MRCNN_JSON_OBJECT_END)
            return fail(err, errlen, "%s: %s", name,
                        tok == MRCNN_JSON_ERROR ? mrcnn_json_error(j) : "malformed bucket object");
        int b = t->n_buckets;
        if (!(ready >= 0) || !(bytes >= 0))
            return fail(err, errlen, "%s: bucket %d needs \"ready_ms\" >= 0 and \"bytes\" >= 0", name, b);
        if (b > 0 && ready < t->ready_ms[b - 1])
            return fail(err, errlen, "%s: bucket %d is ready at %g ms, before bucket %d (%g ms): list buckets in "
                        "the order backward completes them", name, b, ready, b - 1, t->ready_ms[b - 1]);
        t->ready_ms[b] = ready;
        t->bytes[b] = bytes;
        t->n_buckets++;
    }
    return 1;
}

int mrcnn_timeline_parse(const char *json, size_t len, const char *name, mrcnn_timeline *t, char *err,
                         size_t errlen) {
    memset(t, 0, sizeof *t);
    t->forward_ms = t->backward_ms = NAN;
    t->images_per_gpu = 1;
    mrcnn_json *j = mrcnn_json_open_mem(json, len);
    int ok = 1;
    if (mrcnn_json_next(j) != MRCNN_JSON_OBJECT_BEGIN) {
        ok = fail(err, errlen, "%s: the timeline must be a JSON object", name);
        goto done;
    }
    mrcnn_json_token tok = MRCNN_JSON_ERROR;
    while (ok && (tok = mrcnn_json_next(j)) == MRCNN_JSON_KEY) {
        char key[64];
        snprintf(key, sizeof key, "%s", mrcnn_json_text(j, NULL));
        double v = 0;
        if (!strcmp(key, "forward_ms")) ok = expect_number(j, key, &t->forward_ms, err, errlen, name);
        else if (!strcmp(key, "backward_ms")) ok = expect_number(j, key, &t->backward_ms, err, errlen, name);
        else if (!strcmp(key, "other_ms")) ok = expect_number(j, key, &t->other_ms, err, errlen, name);
        else if (!strcmp(key, "images_per_gpu")) {
            ok = expect_number(j, key, &v, err, errlen, name);
            if (ok && !(v >= 1 && v == floor(v)))
                ok = fail(err, errlen, "%s: \"images_per_gpu\" must be a positive integer, got %g", name, v);
            t->images_per_gpu = (int)v;
        } else if (!strcmp(key, "buckets")) ok = parse_buckets(j, t, err, errlen, name);
        else if (!strcmp(key, "source")) {
            if (mrcnn_json_next(j) == MRCNN_JSON_STRING) snprintf(t->source, sizeof t->source, "%s", mrcnn_json_text(j, NULL));
            else ok = fail(err, errlen, "%s: \"source\" must be a string", name);
        } else {
            mrcnn_json_next(j);
            if (!mrcnn_json_skip(j)) ok = fail(err, errlen, "%s: %s", name, mrcnn_json_error(j));
        }
    }
    if (ok && tok != MRCNN_JSON_OBJECT_END)
        ok = fail(err, errlen, "%s: %s", name, tok == MRCNN_JSON_ERROR ? mrcnn_json_error(j) : "malformed timeline");
    if (ok && !(t->forward_ms >= 0 && t->backward_ms > 0 && t->other_ms >= 0))
        ok = fail(err, errlen, "%s: needs \"forward_ms\" >= 0, \"backward_ms\" > 0 and \"other_ms\" >= 0", name);
    if (ok && t->n_buckets == 0) ok = fail(err, errlen, "%s: \"buckets\" is missing or empty", name);
    if (ok && t->ready_ms[t->n_buckets - 1] > t->backward_ms)
        ok = fail(err, errlen, "%s: the last bucket is ready at %g ms, after backward ended (%g ms)", name,
                  t->ready_ms[t->n_buckets - 1], t->backward_ms);
done:
    mrcnn_json_close(j);
    if (!ok) mrcnn_timeline_free(t);
    return ok;
}

int mrcnn_timeline_load(const char *path, mrcnn_timeline *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, errlen, "cannot open the timeline %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (64L << 20)) {
        fclose(f);
        return fail(err, errlen, "%s: not a small timeline file (%ld bytes)", path, n);
    }
    char *buf = MRCNN_MALLOC((size_t)n + 1, "timeline file");
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    int ok = got == (size_t)n ? mrcnn_timeline_parse(buf, got, path, t, err, errlen)
                              : fail(err, errlen, "%s: short read", path);
    free(buf);
    return ok;
}

void mrcnn_timeline_free(mrcnn_timeline *t) {
    free(t->ready_ms);
    free(t->bytes);
    t->ready_ms = t->bytes = NULL;
    t->n_buckets = 0;
}
