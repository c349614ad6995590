/* The index arithmetic of the CUDA detection kernels' batch sort
 * (src/backend/cuda/det_sort_keys.h, included by path) on the CPU: keys built and read
 * back exactly as k_proposals_keys / k_proposals_decode (topk.cu) and k_nms_keys
 * (detect_ops.cu) do, sorted by an LSD radix sort that looks at bits [0, end_bit) only
 * and is stable, as cub::DeviceRadixSort is, must give each segment's top k in the
 * host's order: value descending, lower index first on ties (proposals.c top_k,
 * nms.c by_score), with ties across many entries, -0 beside +0, infinities, an empty
 * FPN level and levels smaller than k. The balanced sampler's compaction likewise, by an
 * exclusive scan of packed counts, and detect_boxes' compaction to its candidate cap.
 * No GPU needed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/backend/cuda/det_sort_keys.h"

/* Stable LSD radix sort of (keys, vals)[0..n) by key bits [0, end_bit), 8 bits a pass:
 * what the device sort promises, higher bits ignored as CUB ignores them. */
static void radix_sort(uint64_t *keys, int32_t *vals, int64_t n, int end_bit) {
    uint64_t *k2 = malloc((size_t)n * sizeof *k2);
    int32_t *v2 = malloc((size_t)n * sizeof *v2);
    for (int shift = 0; shift < end_bit; shift += 8) {
        const int bits = end_bit - shift < 8 ? end_bit - shift : 8;
        const uint64_t mask = ((uint64_t)1 << bits) - 1;
        int64_t count[257] = {0};
        for (int64_t i = 0; i < n; i++) count[((keys[i] >> shift) & mask) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (int64_t i = 0; i < n; i++) {
            const int64_t at = count[(keys[i] >> shift) & mask]++;
            k2[at] = keys[i];
            v2[at] = vals[i];
        }
        memcpy(keys, k2, (size_t)n * sizeof *k2);
        memcpy(vals, v2, (size_t)n * sizeof *v2);
    }
    free(k2);
    free(v2);
}

/* The host's order over one segment's values: descending, lower index first. */
static const float *g_ref_v;
static int by_value_desc(const void *pa, const void *pb) {
    const int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (g_ref_v[a] != g_ref_v[b]) return g_ref_v[a] > g_ref_v[b] ? -1 : 1;
    return (a > b) - (a < b);
}

static void host_order(const float *v, int64_t n, int32_t *idx) {
    for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)i;
    g_ref_v = v;
    qsort(idx, (size_t)n, sizeof *idx, by_value_desc);
}

static uint64_t g_state = 0x9e3779b97f4a7c15ULL;
static uint32_t next_u32(void) { // xorshift64*: the cases are fixed, not seeded per run
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    return (uint32_t)((g_state * 0x2545f4914f6cdd1dULL) >> 32);
}

/* Values with heavy ties (quarter steps, mostly negative) and a few specials, so that
 * the top k holds infinities, ties, -0 before +0 by index, and a cut inside a tie. */
static void fill_values(float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = -0.25f * (float)(4 + next_u32() % 8);
    const float specials[] = {INFINITY, 0.5f, -0.0f, 0.5f, 0.0f, -INFINITY, 0.5f};
    for (int s = 0; s < (int)(sizeof specials / sizeof *specials) && 2 * s + 1 < n; s++) v[2 * s + 1] = specials[s];
}

static void test_end_bit(void **state) {
    (void)state;
    assert_int_equal(det_sort_end_bit(1), 32);
    assert_int_equal(det_sort_end_bit(2), 33);
    assert_int_equal(det_sort_end_bit(40), 38); // 8 images x 5 levels
    assert_int_equal(det_sort_end_bit(64), 38);
    assert_int_equal(det_sort_end_bit(65), 39);
}

static void test_order_key(void **state) {
    (void)state;
    const float v[] = {-INFINITY, -3.0f, -1e-30f, -0.0f, 1e-30f, 2.0f, INFINITY};
    for (int i = 0; i + 1 < (int)(sizeof v / sizeof *v); i++)
        if (!(det_order_key(v[i]) < det_order_key(v[i + 1])) && !(v[i] == v[i + 1]))
            fail_msg("order key of %g not below that of %g", (double)v[i], (double)v[i + 1]);
    assert_int_equal(det_order_key(-0.0f), det_order_key(0.0f));
    assert_true(det_sort_key(0, -INFINITY) < det_sort_key(1, INFINITY)); // segments first
    assert_true(det_sort_key(1, 2.0f) < det_sort_key(1, 1.0f));          // then larger values first
}

/* The proposals' first stage: n_images x levels of anchors, each level's top
 * min(count, pre_k) in the candidate rows, read back through the slots as
 * k_proposals_decode reads them. */
static void proposals_case(int n_images, int n_levels, const int64_t *counts, int pre_k) {
    int64_t anchor0[8], na = 0;
    int slot0[8], k[8], cap = 0;
    for (int l = 0; l < n_levels; l++) {
        anchor0[l] = na;
        slot0[l] = cap;
        k[l] = (int)(counts[l] < pre_k ? counts[l] : pre_k);
        na += counts[l];
        cap += k[l];
    }
    const int64_t total = (int64_t)n_images * na;
    float *logits = malloc((size_t)total * sizeof *logits); // level-major: level l of image img at [..]
    int64_t *level_base = malloc((size_t)n_levels * sizeof *level_base);
    int64_t off = 0;
    for (int l = 0; l < n_levels; l++) {
        level_base[l] = off; // the level's (N, count_l) tensor
        off += (int64_t)n_images * counts[l];
    }
    fill_values(logits, total);
    uint64_t *keys = malloc((size_t)total * sizeof *keys);
    int32_t *vals = malloc((size_t)total * sizeof *vals);
    for (int64_t p = 0; p < total; p++) { // k_proposals_keys
        const int img = (int)(p / na);
        const int64_t r = p - (int64_t)img * na;
        const int l = det_part_of(r, anchor0, n_levels);
        const int64_t i = r - anchor0[l];
        assert_true(i >= 0 && i < counts[l]);
        keys[p] = det_sort_key((uint32_t)(img * n_levels + l), logits[level_base[l] + (int64_t)img * counts[l] + i]);
        vals[p] = (int32_t)i;
    }
    radix_sort(keys, vals, total, det_sort_end_bit((int64_t)n_images * n_levels));
    int32_t *want = malloc((size_t)(na ? na : 1) * sizeof *want);
    int checked = 0;
    for (int img = 0; img < n_images; img++)
        for (int slot = 0; slot < cap; slot++) { // k_proposals_decode
            const int l = det_part_of_i32(slot, slot0, n_levels);
            const int t = slot - slot0[l];
            assert_true(t < k[l]);
            const int32_t got = vals[det_sorted_pos(img, na, anchor0[l], t)];
            host_order(logits + level_base[l] + (int64_t)img * counts[l], counts[l], want);
            if (got != want[t])
                fail_msg("image %d level %d rank %d: anchor %d, the host's order has %d", img, l, t, got, want[t]);
            checked++;
        }
    assert_int_equal(checked, n_images * cap);
    free(logits), free(level_base), free(keys), free(vals), free(want);
}

static void test_proposals_order(void **state) {
    (void)state;
    const int64_t counts[] = {50, 13, 0, 7, 31};
    proposals_case(3, 5, counts, 10);
    proposals_case(1, 5, counts, 10);
    const int64_t one[] = {40};
    proposals_case(9, 1, one, 40); // k = count: the whole level in order
}

/* The NMS sort: image img's rows at [img * cap, (img + 1) * cap) of the sorted values,
 * invalid rows (-inf) last in index order. */
static void test_nms_order(void **state) {
    (void)state;
    const int n_images = 5, cap = 37;
    const int64_t total = (int64_t)n_images * cap;
    float *scores = malloc((size_t)total * sizeof *scores);
    fill_values(scores, total);
    for (int64_t p = 0; p < total; p += 3) scores[p] = -INFINITY;
    uint64_t keys[5 * 37];
    int32_t vals[5 * 37], want[37];
    for (int64_t p = 0; p < total; p++) { // k_nms_keys
        const int img = (int)(p / cap);
        keys[p] = det_sort_key((uint32_t)img, scores[p]);
        vals[p] = (int32_t)(p - (int64_t)img * cap);
    }
    radix_sort(keys, vals, total, det_sort_end_bit(n_images));
    for (int img = 0; img < n_images; img++) {
        host_order(scores + (int64_t)img * cap, cap, want);
        for (int t = 0; t < cap; t++)
            if (vals[det_sorted_pos(img, cap, 0, t)] != want[t])
                fail_msg("image %d rank %d: row %d, the host's order has %d", img, t, vals[det_sorted_pos(img, cap, 0, t)],
                         want[t]);
    }
    free(scores);
}

/* The sampler's compaction: packed counts, one exclusive scan over the batch (a trailing
 * 0 entry gives the total), each entry to its rank, as k_sample_counts / k_sample_scatter
 * / k_sample_draws (detect_ops.cu) do: each image's positives and negatives in index
 * order, and their numbers. */
static void test_sample_compaction(void **state) {
    (void)state;
    const int n_images = 4;
    const int64_t n = 301, total = n_images * n;
    int32_t *labels = malloc((size_t)total * sizeof *labels), *work = malloc((size_t)total * 2 * sizeof *work);
    uint64_t *scan = malloc((size_t)(total + 1) * sizeof *scan);
    for (int64_t p = 0; p < total; p++) { // -1 ignored, 0 negative, > 0 positive (a class)
        const uint32_t u = next_u32() % 10;
        labels[p] = u < 3 ? -1 : (u < 8 ? 0 : (int32_t)(1 + u % 3));
    }
    for (int64_t i = 0; i < n; i++) labels[2 * n + i] = 0; // an image without positives
    for (int64_t p = 0; p <= total; p++) scan[p] = p < total ? det_sample_count(labels[p]) : 0;
    uint64_t acc = 0;
    for (int64_t p = 0; p <= total; p++) { // exclusive, in place
        const uint64_t c = scan[p];
        scan[p] = acc;
        acc += c;
    }
    for (int64_t p = 0; p < total; p++) {
        if (labels[p] < 0) continue;
        const int64_t img = p / n;
        const uint64_t r = scan[p] - scan[img * n];
        int32_t *pos = work + img * 2 * n, *neg = pos + n;
        if (labels[p] > 0) pos[det_count_pos(r)] = (int32_t)(p - img * n);
        else neg[det_count_neg(r)] = (int32_t)(p - img * n);
    }
    for (int img = 0; img < n_images; img++) {
        const uint64_t c = scan[(int64_t)(img + 1) * n] - scan[(int64_t)img * n];
        int64_t np = 0, nn = 0;
        const int32_t *lab = labels + (int64_t)img * n, *pos = work + (int64_t)img * 2 * n, *neg = pos + n;
        for (int64_t i = 0; i < n; i++) {
            if (lab[i] > 0 && pos[np++] != (int32_t)i) fail_msg("image %d: positive %lld out of order", img, (long long)np - 1);
            if (lab[i] == 0 && neg[nn++] != (int32_t)i) fail_msg("image %d: negative %lld out of order", img, (long long)nn - 1);
        }
        assert_int_equal(det_count_pos(c), np);
        assert_int_equal(det_count_neg(c), nn);
    }
    assert_int_equal(det_count_pos(scan[3 * n] - scan[2 * n]), 0);
    free(labels), free(work), free(scan);
}

/* The NMS's view of slots: their candidates in stable score order (descending, lower
 * slot first), as cu_nms_batched's sort sees them. */
static void nms_view(const float *cs, const int32_t *slot_cand, int n, int32_t *out) {
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    int32_t *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    for (int j = 0; j < n; j++) v[j] = cs[slot_cand[j]];
    host_order(v, n, idx);
    for (int j = 0; j < n; j++) out[j] = slot_cand[idx[j]];
    free(v), free(idx);
}

/* detect_boxes' compaction, over the cap with ties at the cut and dropped candidates:
 * the batch sort's take (k_det_keys, k_det_take in infer_ops.cu) against the legacy
 * k_det_compact's rule (above the cap-th score, then the first ties, in candidate order):
 * the same number per image and, through the NMS's stable sort, the same candidates in
 * the same order. */
static void test_detect_compaction(void **state) {
    (void)state;
    const int n_images = 3, cap = 50;
    const int64_t C = 700;
    float *cs = malloc((size_t)C * sizeof *cs);
    int32_t *ci = malloc((size_t)C * sizeof *ci), *vals = malloc((size_t)C * sizeof *vals);
    uint64_t *keys = malloc((size_t)C * sizeof *keys);
    int32_t count[3] = {0, 0, 0}, slot_new[3 * 50], slot_old[50], a[50], b[50];
    for (int64_t t = 0; t < C; t++) {
        const uint32_t u = next_u32();
        ci[t] = (int32_t)(u % 4) - 1; // -1: dropped
        if (t >= 150 && ci[t] == 2) ci[t] = 1; // image 2 under the cap
        cs[t] = ci[t] < 0 ? -INFINITY : 0.05f + 0.125f * (float)(u / 4 % 8); // 8 values: ties at every cut
    }
    for (int64_t t = 0; t < C; t++) { // k_det_keys
        const int img = ci[t] >= 0 && ci[t] < n_images ? ci[t] : -1;
        keys[t] = det_sort_key((uint32_t)(img >= 0 ? img : n_images), cs[t]);
        vals[t] = (int32_t)t;
        if (img >= 0) count[img]++;
    }
    radix_sort(keys, vals, C, det_sort_end_bit(n_images + 1));
    for (int img = 0; img < n_images; img++) {
        const int n = count[img] < cap ? count[img] : cap;
        for (int j = 0; j < n; j++) slot_new[img * cap + j] = vals[det_segment_start(count, img) + j]; // k_det_take
        /* the legacy rule */
        int m = 0;
        float *mine = malloc((size_t)C * sizeof *mine);
        for (int64_t t = 0; t < C; t++)
            if (ci[t] == img) mine[m++] = cs[t];
        int32_t *ord = malloc((size_t)(m ? m : 1) * sizeof *ord);
        host_order(mine, m, ord);
        const float T = m > cap ? mine[ord[cap - 1]] : -INFINITY;
        int above = 0;
        for (int q = 0; q < m; q++) above += mine[q] > T;
        int n_old = 0, ties = 0;
        for (int64_t t = 0; t < C && n_old < cap; t++)
            if (ci[t] == img && (m <= cap || cs[t] > T || (cs[t] == T && ties++ < cap - above))) slot_old[n_old++] = (int32_t)t;
        free(mine), free(ord);
        if (n != n_old) fail_msg("image %d: %d candidates kept, the legacy rule keeps %d", img, n, n_old);
        nms_view(cs, slot_new + img * cap, n, a);
        nms_view(cs, slot_old, n, b);
        for (int j = 0; j < n; j++)
            if (a[j] != b[j]) fail_msg("image %d, NMS rank %d: candidate %d, the legacy compaction's %d", img, j, a[j], b[j]);
    }
    assert_true(count[0] > cap && count[1] > cap && count[2] < cap); // both branches ran
    free(cs), free(ci), free(vals), free(keys);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_end_bit),
        cmocka_unit_test(test_order_key),
        cmocka_unit_test(test_proposals_order),
        cmocka_unit_test(test_nms_order),
        cmocka_unit_test(test_sample_compaction),
        cmocka_unit_test(test_detect_compaction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
