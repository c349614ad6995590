/* Driver for the torchvision parity script (test_detect_parity.sh): runs one detection
 * function on raw little-endian arrays from a directory and writes its outputs there.
 * Usage: prog_detect <command> <dir> [key=value ...]. Array files are <name>.bin. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/anchors.h"
#include "mrcnn/boxes.h"
#include "mrcnn/check.h"
#include "mrcnn/postprocess.h"
#include "mrcnn/proposals.h"
#include "mrcnn/roi_align.h"
#include "mrcnn/roi_targets.h"

static const char *g_dir;
/* Every buffer of the program, freed at the end (clean under LeakSanitizer). */
static void *g_allocs[256];
static int g_n_allocs;
static void *track(void *p) {
    MRCNN_CHECK(g_n_allocs < 256, "prog_detect: too many buffers");
    g_allocs[g_n_allocs++] = p;
    return p;
}
static int g_argc;
static char **g_argv;

static const char *arg(const char *key) {
    size_t n = strlen(key);
    for (int i = 3; i < g_argc; i++)
        if (!strncmp(g_argv[i], key, n) && g_argv[i][n] == '=') return g_argv[i] + n + 1;
    MRCNN_CHECK(0, "prog_detect: missing argument %s=", key);
    return NULL;
}
static int iarg(const char *key) { return atoi(arg(key)); }
static float farg(const char *key) { return (float)atof(arg(key)); }
/* Comma-separated ints. */
static int iarg_list(const char *key, int *out, int cap) {
    const char *s = arg(key);
    int n = 0;
    while (*s && n < cap) {
        out[n++] = (int)strtol(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

static void *load(const char *name, size_t *bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.bin", g_dir, name);
    FILE *f = fopen(path, "rb");
    MRCNN_CHECK(f, "prog_detect: cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = track(MRCNN_MALLOC((size_t)n + 16, path));
    MRCNN_CHECK(fread(p, 1, (size_t)n, f) == (size_t)n, "prog_detect: short read of %s", path);
    fclose(f);
    if (bytes) *bytes = (size_t)n;
    return p;
}

static void save(const char *name, const void *p, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.bin", g_dir, name);
    FILE *f = fopen(path, "wb");
    MRCNN_CHECK(f, "prog_detect: cannot write %s", path);
    MRCNN_CHECK(fwrite(p, 1, bytes, f) == bytes, "prog_detect: short write of %s", path);
    fclose(f);
}

static void cmd_anchors(void) {
    int gh[8], gw[8], sizes[8];
    int L = iarg_list("grid_h", gh, 8);
    iarg_list("grid_w", gw, 8);
    iarg_list("sizes", sizes, 8);
    float ratios[3] = {0.5f, 1.0f, 2.0f};
    int64_t counts[8];
    int64_t n = mrcnn_anchors_generate(L, sizes, ratios, 3, gh, gw, iarg("image_h"), iarg("image_w"), NULL, NULL);
    float *a = track(MRCNN_MALLOC((size_t)n * 16, "anchors"));
    mrcnn_anchors_generate(L, sizes, ratios, 3, gh, gw, iarg("image_h"), iarg("image_w"), a, counts);
    save("anchors", a, (size_t)n * 16);
}

static mrcnn_box_coder coder_arg(void) {
    return mrcnn_box_coder_make(farg("wx"), farg("wy"), farg("ww"), farg("wh"));
}

static void cmd_encode(void) {
    size_t nb;
    float *t = load("targets", &nb), *b = load("boxes", NULL);
    int64_t n = (int64_t)(nb / 16);
    float *d = track(MRCNN_MALLOC(nb, "deltas"));
    mrcnn_box_coder c = coder_arg();
    mrcnn_box_encode(&c, n, t, b, d);
    save("deltas", d, nb);
}

static void cmd_decode(void) {
    size_t nb, nd;
    float *b = load("boxes", &nb), *d = load("deltas", &nd);
    int64_t n = (int64_t)(nb / 16);
    int k = (int)(nd / nb);
    float *o = track(MRCNN_MALLOC(nd, "decoded"));
    mrcnn_box_coder c = coder_arg();
    mrcnn_box_decode(&c, n, k, d, b, o);
    save("decoded", o, nd);
}

static void cmd_iou(void) {
    size_t na, nb;
    float *a = load("a", &na), *b = load("b", &nb);
    int64_t n = (int64_t)(na / 16), m = (int64_t)(nb / 16);
    float *iou = track(MRCNN_MALLOC((size_t)(n * m + 1) * 4, "iou"));
    mrcnn_box_iou(a, n, b, m, iou);
    save("iou", iou, (size_t)(n * m) * 4);
}

static void cmd_matcher(void) {
    size_t ni;
    float *iou = load("iou", &ni);
    int g = iarg("g");
    int64_t n = (int64_t)(ni / 4) / g;
    int32_t *m = track(MRCNN_MALLOC((size_t)n * 4, "matches"));
    mrcnn_matcher_match(iou, g, n, farg("high"), farg("low"), iarg("allow"), m);
    save("matches", m, (size_t)n * 4);
}

static void cmd_nms(void) {
    size_t nb;
    float *b = load("boxes", &nb), *s = load("scores", NULL);
    int64_t n = (int64_t)(nb / 16);
    int32_t *idx = iarg("batched") ? load("idxs", NULL) : NULL;
    int64_t *keep = track(MRCNN_MALLOC((size_t)(n + 1) * 8, "keep"));
    int64_t k = idx ? mrcnn_batched_nms(b, s, idx, n, farg("thresh"), keep) : mrcnn_batched_nms(b, s, NULL, n, farg("thresh"), keep);
    save("keep", keep, (size_t)k * 8);
}

static void cmd_rpn_targets(void) {
    size_t na, ng;
    float *a = load("anchors", &na), *g = load("gt", &ng);
    int64_t n = (int64_t)(na / 16);
    float *lab = track(MRCNN_MALLOC((size_t)n * 4, "labels")), *reg = track(MRCNN_MALLOC((size_t)n * 16, "reg"));
    mrcnn_rpn_assign_targets(a, n, g, (int)(ng / 16), farg("fg"), farg("bg"), lab, reg);
    save("labels", lab, (size_t)n * 4);
    save("reg", reg, (size_t)n * 16);
}

static void cmd_proposals(void) {
    mrcnn_proposal_params p = {iarg("pre"), iarg("post"), farg("nms"), farg("min_size"), farg("score_thresh")};
    int counts_i[8];
    int L = iarg_list("counts", counts_i, 8);
    int N = iarg("n");
    int64_t counts[8];
    const float *obj[8], *del[8];
    for (int l = 0; l < L; l++) {
        char name[32];
        counts[l] = counts_i[l];
        snprintf(name, sizeof name, "obj%d", l);
        obj[l] = load(name, NULL);
        snprintf(name, sizeof name, "del%d", l);
        del[l] = load(name, NULL);
    }
    float *anchors = load("anchors", NULL);
    int *hw = load("image_hw", NULL);
    float *boxes = track(MRCNN_MALLOC((size_t)N * p.post_nms_top_n * 16, "boxes"));
    float *scores = track(MRCNN_MALLOC((size_t)N * p.post_nms_top_n * 4, "scores"));
    int64_t cnt[64];
    mrcnn_rpn_proposals(&p, N, L, counts, obj, del, anchors, hw, boxes, scores, cnt);
    save("boxes", boxes, (size_t)N * p.post_nms_top_n * 16);
    save("scores", scores, (size_t)N * p.post_nms_top_n * 4);
    save("counts", cnt, (size_t)N * 8);
}

static void cmd_roi_sample(void) {
    size_t np_, ng;
    float *prop = load("proposals", &np_), *gt = load("gt", &ng);
    int32_t *gl = load("gt_labels", NULL);
    int n_prop = (int)(np_ / 16), n_gt = (int)(ng / 16);
    mrcnn_roi_sample_params p = {iarg("batch"), farg("frac"), farg("iou"), iarg("max_fg"),
                                 mrcnn_box_coder_make(10, 10, 5, 5)};
    int S = p.batch_size_per_image;
    float *rois = track(MRCNN_MALLOC((size_t)S * 16, "rois")), *reg = track(MRCNN_MALLOC((size_t)S * 16, "reg"));
    int32_t *lab = track(MRCNN_MALLOC((size_t)S * 4, "labels")), *mg = track(MRCNN_MALLOC((size_t)S * 4, "matched"));
    int32_t *fg = track(MRCNN_MALLOC((size_t)p.max_fg * 4, "fg"));
    int nfg = 0;
    mrcnn_rng rng = mrcnn_rng_make(1, 0, 0, MRCNN_RNG_ROI_SAMPLE);
    int count = mrcnn_roi_sample(&p, prop, n_prop, gt, gl, n_gt, &rng, rois, lab, mg, reg, fg, &nfg);
    save("rois", rois, (size_t)count * 16);
    save("labels", lab, (size_t)count * 4);
    save("matched", mg, (size_t)count * 4);
    save("reg", reg, (size_t)count * 16);
    save("fg", fg, (size_t)nfg * 4);
}

static void cmd_roi_align(void) {
    int hs[8], ws[8];
    int L = iarg_list("level_h", hs, 8);
    iarg_list("level_w", ws, 8);
    int N = iarg("n"), C = iarg("c");
    mrcnn_roi_align_desc d = mrcnn_roi_align_desc_make(N, C, L, iarg("first_level"), hs, ws, iarg("out"),
                                                       iarg("sampling"), iarg("aligned"));
    size_t nr;
    float *rois = load("rois", &nr);
    int64_t R = (int64_t)(nr / 20);
    const float *f[8];
    float *g[8];
    for (int l = 0; l < L; l++) {
        char name[32];
        snprintf(name, sizeof name, "feat%d", l);
        f[l] = load(name, NULL);
        g[l] = track(MRCNN_CALLOC((size_t)N * hs[l] * ws[l] * C, 4, "dfeat"));
    }
    size_t ny = (size_t)R * d.out_h * d.out_w * C;
    float *y = track(MRCNN_MALLOC(ny * 4 + 4, "y"));
    mrcnn_roi_align_forward(&d, f, R, rois, y);
    save("y", y, ny * 4);
    float *dy = load("dy", NULL);
    mrcnn_roi_align_backward(&d, R, rois, dy, g);
    for (int l = 0; l < L; l++) {
        char name[32];
        snprintf(name, sizeof name, "dfeat%d", l);
        save(name, g[l], (size_t)N * hs[l] * ws[l] * C * 4);
    }
}

static void cmd_mask_targets(void) {
    int G = iarg("g"), H = iarg("h"), W = iarg("w"), M = iarg("m");
    uint8_t *masks = load("masks", NULL);
    size_t nb;
    float *boxes = load("boxes", &nb);
    int32_t *idx = load("gt_index", NULL);
    int n = (int)(nb / 16);
    float *t = track(MRCNN_MALLOC((size_t)n * M * M * 4 + 4, "targets"));
    mrcnn_mask_targets(masks, G, H, W, boxes, idx, n, M, t);
    save("targets", t, (size_t)n * M * M * 4);
}

static void cmd_postprocess(void) {
    mrcnn_detect_params p = {iarg("k"), farg("score_thresh"), farg("nms"), iarg("d"), farg("min_size"),
                             mrcnn_box_coder_make(10, 10, 5, 5)};
    int R = iarg("r"), H = iarg("h"), W = iarg("w"), M = iarg("m");
    float *logits = load("logits", NULL), *deltas = load("deltas", NULL), *prop = load("proposals", NULL);
    float *mlog = load("mask_logits", NULL);
    float *boxes = track(MRCNN_MALLOC((size_t)p.max_detections * 16, "boxes"));
    float *scores = track(MRCNN_MALLOC((size_t)p.max_detections * 4, "scores"));
    int32_t *labels = track(MRCNN_MALLOC((size_t)p.max_detections * 4, "labels"));
    int n = mrcnn_detect_postprocess(&p, R, logits, deltas, prop, H, W, boxes, scores, labels);
    save("det_boxes", boxes, (size_t)n * 16);
    save("det_scores", scores, (size_t)n * 4);
    save("det_labels", labels, (size_t)n * 4);
    /* Masks of the detections: the mask logits are given per roi (R, M, M, K); the
     * script orders them so that row i belongs to detection i. */
    float *probs = track(MRCNN_MALLOC((size_t)(n + 1) * M * M * 4, "probs"));
    mrcnn_mask_probs(n, M, p.num_classes, mlog, labels, probs);
    int oh = iarg("orig_h"), ow = iarg("orig_w");
    mrcnn_boxes_rescale(n, boxes, H, W, oh, ow);
    save("det_boxes_orig", boxes, (size_t)n * 16);
    float *pasted = track(MRCNN_MALLOC((size_t)(n + 1) * oh * ow * 4, "pasted"));
    uint8_t *bin = track(MRCNN_MALLOC((size_t)(n + 1) * oh * ow, "pasted u8"));
    for (int i = 0; i < n; i++) {
        mrcnn_paste_mask(probs + (int64_t)i * M * M, M, boxes + 4 * i, oh, ow, pasted + (int64_t)i * oh * ow);
        mrcnn_paste_mask_u8(probs + (int64_t)i * M * M, M, boxes + 4 * i, oh, ow, 0.5f, bin + (int64_t)i * oh * ow);
    }
    save("masks", pasted, (size_t)n * oh * ow * 4);
    save("masks_u8", bin, (size_t)n * oh * ow);
}

int main(int argc, char **argv) {
    MRCNN_CHECK(argc >= 3, "usage: prog_detect <command> <dir> [key=value ...]");
    g_dir = argv[2];
    g_argc = argc;
    g_argv = argv;
    const char *c = argv[1];
    if (!strcmp(c, "anchors")) cmd_anchors();
    else if (!strcmp(c, "encode")) cmd_encode();
    else if (!strcmp(c, "decode")) cmd_decode();
    else if (!strcmp(c, "iou")) cmd_iou();
    else if (!strcmp(c, "matcher")) cmd_matcher();
    else if (!strcmp(c, "nms")) cmd_nms();
    else if (!strcmp(c, "rpn_targets")) cmd_rpn_targets();
    else if (!strcmp(c, "proposals")) cmd_proposals();
    else if (!strcmp(c, "roi_sample")) cmd_roi_sample();
    else if (!strcmp(c, "roi_align")) cmd_roi_align();
    else if (!strcmp(c, "mask_targets")) cmd_mask_targets();
    else if (!strcmp(c, "postprocess")) cmd_postprocess();
    else MRCNN_CHECK(0, "prog_detect: unknown command '%s'", c);
    for (int i = 0; i < g_n_allocs; i++) free(g_allocs[i]);
    return 0;
}
