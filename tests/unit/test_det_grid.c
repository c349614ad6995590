/* The index arithmetic of the detection kernels that replaced a serial pass per image
 * (src/backend/cuda/det_grid.h, included by path) on the CPU, each against the pass it
 * replaced, emulated line for line from its legacy kernel (still there under
 * MRCNN_DET_KERNELS=legacy), and against a plain reference:
 * - the NMS's greedy pass: k_nms_reduce_words (det_nms_word per 64-box word, kept rows by
 *   det_nms_rank) against k_nms_reduce (thread 0 box by box) and a box-by-box greedy over
 *   a suppression matrix, over word edges, partial words, the max_keep stop inside a
 *   word, empty and full suppression, with the mask words the kernel never writes
 *   poisoned;
 * - the balanced sampler's draws: det_fy_source against the partial Fisher-Yates' serial
 *   swaps, position by position (draws forced to collide), and with the real Philox draws
 *   through the ascending rank sort (k_sample_draws against sample_choose);
 * - the ROI sampler's rows: k_roi_rows_grid's slots (det_roi_offsets, det_roi_rank,
 *   det_pad_row) against k_roi_prefix + k_roi_rows + k_roi_pad: every output row written
 *   once, by the same entry.
 * No GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/backend/cuda/det_grid.h"

static uint64_t g_state = 0x243f6a8885a308d3ULL;
static uint32_t next_u32(void) { // xorshift64*: fixed cases, not seeded per run
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    return (uint32_t)((g_state * 0x2545f4914f6cdd1dULL) >> 32);
}
static uint64_t next_u64(void) { return ((uint64_t)next_u32() << 32) | next_u32(); }

/* ---- NMS ---------------------------------------------------------------------------- */

typedef struct {
    int cap, nv, blocks;
    unsigned char *sup; // (nv, nv): sorted box r suppresses sorted box c > r
    uint64_t *mask;     // (cap, blocks) as k_nms_mask writes it; words it skips poisoned
    int *ord;           // (cap): sorted rank -> row
} nms_case;

static nms_case nms_make(int cap, int nv, int per_mille) {
    nms_case k = {cap, nv, (cap + 63) / 64, NULL, NULL, NULL};
    k.sup = calloc((size_t)(nv ? nv : 1) * (nv ? nv : 1), 1);
    k.mask = malloc((size_t)cap * k.blocks * 8);
    k.ord = malloc((size_t)cap * sizeof *k.ord);
    for (int i = 0; i < cap; i++) k.ord[i] = i;
    for (int i = cap - 1; i > 0; i--) { // a permutation: kept rows name the boxes
        const int j = (int)(next_u32() % (uint32_t)(i + 1)), t = k.ord[i];
        k.ord[i] = k.ord[j], k.ord[j] = t;
    }
    for (int64_t i = 0; i < (int64_t)cap * k.blocks; i++) k.mask[i] = next_u64(); // poison
    for (int r = 0; r < nv; r++)
        for (int cb = r / 64; cb < k.blocks && cb * 64 < nv; cb++) { // what k_nms_mask writes
            uint64_t bits = 0;
            for (int c = 0; c < 64 && cb * 64 + c < nv; c++) {
                const int j = cb * 64 + c;
                if (j <= r) continue;
                const int s = (int)(next_u32() % 1000) < per_mille;
                k.sup[(size_t)r * nv + j] = (unsigned char)s;
                if (s) bits |= (uint64_t)1 << c;
            }
            k.mask[(int64_t)r * k.blocks + cb] = bits;
        }
    return k;
}

static void nms_free(nms_case *k) { free(k->sup), free(k->mask), free(k->ord); }

/* The greedy pass box by box (nms.c's loop over the sorted boxes). */
static int nms_reference(const nms_case *k, int max_keep, int32_t *keep) {
    unsigned char *removed = calloc((size_t)(k->nv ? k->nv : 1), 1);
    int kept = 0;
    for (int i = 0; i < k->nv; i++) {
        if (removed[i]) continue;
        keep[kept++] = k->ord[i];
        if (max_keep > 0 && kept >= max_keep) break;
        for (int j = i + 1; j < k->nv; j++)
            if (k->sup[(size_t)i * k->nv + j]) removed[j] = 1;
    }
    for (int i = kept; i < k->cap; i++) keep[i] = -1;
    free(removed);
    return kept;
}

/* k_nms_reduce (legacy), its threads run one after another. */
static int nms_legacy(const nms_case *k, int max_keep, int32_t *kp) {
    const int nv = k->nv, blocks = k->blocks, nvb = (nv + 63) / 64;
    uint64_t removed[256] = {0}, diag[64];
    int kept_c[64], nk = 0, kept = 0, stop = 0;
    for (int cb = 0; cb < nvb && !stop; cb++) {
        for (int t = 0; t < 64; t++) diag[t] = cb * 64 + t < nv ? k->mask[(int64_t)(cb * 64 + t) * blocks + cb] : 0;
        uint64_t word = removed[cb];
        const int lim = nv - cb * 64 < 64 ? nv - cb * 64 : 64;
        int n = 0, kk = kept;
        for (int c = 0; c < lim; c++) {
            if ((word >> c) & 1) continue;
            kp[kk++] = k->ord[cb * 64 + c];
            kept_c[n++] = c;
            word |= diag[c];
            if (max_keep > 0 && kk >= max_keep) {
                stop = 1;
                break;
            }
        }
        kept = kk, nk = n;
        if (stop) break;
        for (int w = cb + 1; w < nvb; w++) {
            uint64_t acc = 0;
            for (int q = 0; q < nk; q++) acc |= k->mask[(int64_t)(cb * 64 + kept_c[q]) * blocks + w];
            removed[w] |= acc;
        }
    }
    for (int i = kept; i < k->cap; i++) kp[i] = -1;
    return kept;
}

/* k_nms_reduce_words (default), its threads run one after another; warp 0's lanes write
 * their kept rows last lane first, so that nothing depends on their order. */
static int nms_words(const nms_case *k, int max_keep, int32_t *kp) {
    const int nv = k->nv, blocks = k->blocks, nvb = (nv + 63) / 64;
    uint64_t removed[256] = {0}, diag[64];
    for (int t = 0; t < 64; t++) diag[t] = t < nv ? k->mask[(int64_t)t * blocks] : 0;
    int kept = 0;
    for (int cb = 0; cb < nvb; cb++) {
        const int lim = nv - cb * 64 < 64 ? nv - cb * 64 : 64;
        const int64_t budget = max_keep > 0 ? (int64_t)max_keep - kept : 64;
        const uint64_t bits = det_nms_word(removed[cb], diag, lim, budget);
        for (int lane = 31; lane >= 0; lane--)
            for (int c = lane; c < 64; c += 32)
                if ((bits >> c) & 1) kp[kept + det_nms_rank(bits, c)] = k->ord[cb * 64 + c];
        kept += det_popc64(bits);
        if (max_keep > 0 && kept >= max_keep) break;
        for (int t = 0; t < 64 && cb + 1 < nvb; t++) {
            const int r = (cb + 1) * 64 + t;
            diag[t] = r < nv ? k->mask[(int64_t)r * blocks + cb + 1] : 0;
        }
        for (int w = cb + 1; w < nvb; w++) {
            uint64_t acc = 0;
            for (uint64_t m = bits; m; m &= m - 1) acc |= k->mask[(int64_t)(cb * 64 + det_ctz64(m)) * blocks + w];
            removed[w] |= acc;
        }
    }
    for (int i = kept; i < k->cap; i++) kp[i] = -1;
    return kept;
}

static void test_nms_words(void **state) {
    (void)state;
    const int caps[] = {1, 63, 64, 65, 130, 700, 2000};
    const int dens[] = {0, 5, 40, 300, 1000};
    const int keeps[] = {0, 1, 7, 64, 65, 100};
    int cases = 0, cut_inside = 0;
    for (size_t a = 0; a < sizeof caps / sizeof *caps; a++)
        for (int v = 0; v < 3; v++) {
            const int cap = caps[a], nv = v == 0 ? cap : (v == 1 ? cap - cap / 3 : 0);
            for (size_t d = 0; d < sizeof dens / sizeof *dens; d++) {
                nms_case k = nms_make(cap, nv, dens[d]);
                int32_t *ref = malloc((size_t)cap * 4), *old = malloc((size_t)cap * 4), *now = malloc((size_t)cap * 4);
                for (size_t q = 0; q < sizeof keeps / sizeof *keeps; q++) {
                    const int mk = keeps[q];
                    memset(old, 0x5a, (size_t)cap * 4), memset(now, 0xa5, (size_t)cap * 4);
                    const int nr = nms_reference(&k, mk, ref), no = nms_legacy(&k, mk, old), nn = nms_words(&k, mk, now);
                    if (no != nr || nn != nr)
                        fail_msg("cap %d, %d valid, density %d/1000, max_keep %d: kept %d (legacy %d), reference %d", cap,
                                 nv, dens[d], mk, nn, no, nr);
                    for (int i = 0; i < cap; i++)
                        if (old[i] != ref[i] || now[i] != ref[i])
                            fail_msg("cap %d, %d valid, density %d/1000, max_keep %d, row %d: %d (legacy %d), reference %d",
                                     cap, nv, dens[d], mk, i, now[i], old[i], ref[i]);
                    cut_inside += mk > 0 && nr == mk && mk % 64 != 0;
                    cases++;
                }
                free(ref), free(old), free(now);
                nms_free(&k);
            }
        }
    assert_true(cases == 7 * 3 * 5 * 6 && cut_inside > 20);
}

static void test_nms_word_edges(void **state) {
    (void)state;
    uint64_t diag[64] = {0};
    assert_true(det_word_valid(0) == 0 && det_word_valid(1) == 1 && det_word_valid(64) == ~(uint64_t)0);
    assert_true(det_nms_word(0, diag, 64, 64) == ~(uint64_t)0);          // nothing suppressed: all kept
    assert_true(det_nms_word(0, diag, 64, 3) == 7);                      // the first budget ones
    assert_true(det_nms_word((uint64_t)1 << 63, diag, 64, 64) == ~(uint64_t)0 >> 1); // box 63 removed
    assert_true(det_nms_word(~(uint64_t)0 >> 1, diag, 64, 64) == (uint64_t)1 << 63); // only box 63 left
    for (int c = 0; c < 63; c++) diag[c] = (uint64_t)1 << (c + 1); // each suppresses the next
    assert_true(det_nms_word(0, diag, 64, 64) == 0x5555555555555555ULL);
    assert_true(det_nms_word(0, diag, 5, 64) == 0x15); // a partial word: boxes past lim absent
    assert_int_equal(det_nms_rank(0x5555555555555555ULL, 62), 31);
    assert_int_equal(det_nms_rank(0x5555555555555555ULL, 0), 0);
    assert_int_equal(det_ctz64((uint64_t)1 << 63), 63);
    assert_int_equal(det_popc64(~(uint64_t)0), 64);
}

/* ---- the sampler's draws ------------------------------------------------------------- */

/* Position by position, with draws from [i, m) (small m: many collide). */
static void test_fy_source(void **state) {
    (void)state;
    int checked = 0;
    for (int rep = 0; rep < 300; rep++) {
        const int m = 1 + (int)(next_u32() % 40), k = 1 + (int)(next_u32() % (uint32_t)m);
        int32_t draw[40], pos[40];
        for (int i = 0; i < k; i++) draw[i] = i + (int32_t)(next_u32() % (uint32_t)(m - i));
        if (rep % 5 == 0)
            for (int i = 0; i < k; i++) draw[i] = rep % 2 ? m - 1 : i; // all onto the last, or none moves
        for (int i = 0; i < m; i++) pos[i] = i;
        for (int i = 0; i < k; i++) { // the serial swaps
            const int32_t t = pos[i];
            pos[i] = pos[draw[i]], pos[draw[i]] = t;
        }
        for (int i = 0; i < k; i++, checked++)
            if (det_fy_source(draw, i) != pos[i])
                fail_msg("m %d, k %d, position %d: source %lld, the swaps give %d", m, k, i,
                         (long long)det_fy_source(draw, i), pos[i]);
    }
    assert_true(checked > 1000);
}

static void rank_sort(const int32_t *v, int64_t k, int64_t *out) {
    for (int64_t a = 0; a < k; a++) {
        int64_t rank = 0;
        for (int64_t b = 0; b < k; b++) rank += v[b] < v[a];
        out[rank] = v[a];
    }
}

/* sample_choose (legacy: the swaps on cand, then the rank sort) against
 * sample_choose_parallel (draws, sources, rank sort; cand untouched), Philox draws. */
static void choose_case(int64_t m, int64_t k, uint64_t base, int image) {
    const mrcnn_rng rng = mrcnn_rng_make(1234, 3, image, MRCNN_RNG_RPN_SAMPLE);
    int32_t *cand = malloc((size_t)m * 4), *mine = malloc((size_t)m * 4), *draw = malloc((size_t)k * 4),
            *val = malloc((size_t)k * 4);
    int64_t *old = malloc((size_t)k * 8), *now = malloc((size_t)k * 8);
    for (int64_t i = 0; i < m; i++) cand[i] = (int32_t)(3 * i + (int64_t)(next_u32() % 3)); // ascending indices
    memcpy(mine, cand, (size_t)m * 4);
    for (int64_t i = 0; i < k; i++) {
        const int64_t j = i + (int64_t)mrcnn_rng_below(&rng, base + (uint64_t)i, (uint32_t)(m - i));
        const int32_t t = mine[i];
        mine[i] = mine[j], mine[j] = t;
    }
    rank_sort(mine, k, old);
    for (int64_t i = 0; i < k; i++) draw[i] = (int32_t)(i + (int64_t)mrcnn_rng_below(&rng, base + (uint64_t)i, (uint32_t)(m - i)));
    for (int64_t i = 0; i < k; i++) val[i] = cand[det_fy_source(draw, i)];
    rank_sort(val, k, now);
    for (int64_t i = 0; i < k; i++)
        if (old[i] != now[i])
            fail_msg("%lld of %lld, base %llu: entry %lld is %lld, the serial draws give %lld", (long long)k,
                     (long long)m, (unsigned long long)base, (long long)i, (long long)now[i], (long long)old[i]);
    free(cand), free(mine), free(draw), free(val), free(old), free(now);
}

static void test_sample_draws(void **state) {
    (void)state;
    choose_case(2, 1, 0, 0);
    choose_case(300, 128, 0, 1);
    choose_case(300, 299, (uint64_t)1 << 40, 1);
    choose_case(242991, 256, (uint64_t)1 << 40, 2); // the RPN's negatives
    choose_case(1200, 384, (uint64_t)1 << 40, 3);   // the ROI sampler's
    choose_case(9000, 4096, 0, 4);                  // FY_MAX
    int64_t kp, kn;
    det_sample_take(500, 90000, 256, 128, &kp, &kn);
    assert_true(kp == 128 && kn == 128);
    det_sample_take(3, 90000, 256, 128, &kp, &kn);
    assert_true(kp == 3 && kn == 253);
    det_sample_take(3, 40, 256, 128, &kp, &kn);
    assert_true(kp == 3 && kn == 40);
}

/* ---- the ROI sampler's rows ------------------------------------------------------------ */

/* Row r's writer, encoded: 1 + (img * C + cand) * 2 + positive, or -1 for padding; 0
 * unwritten. A second write to a row fails. */
static void put(int64_t *rows, int64_t r, int64_t n, int64_t v, const char *what) {
    if (r < 0 || r >= n) fail_msg("%s row %lld outside [0, %lld)", what, (long long)r, (long long)n);
    if (rows[r] != 0) fail_msg("%s row %lld written twice", what, (long long)r);
    rows[r] = v;
}

typedef struct {
    int N, S, F, pos_cap, C;
    int64_t *pos, *neg, *cnt; // (N, pos_cap), (N, S), (N, 2)
} roi_case;

static void roi_legacy(const roi_case *k, int64_t *rows, int64_t *fg, float *n_rois, float *n_fg) {
    int32_t off[65], foff[65], r = 0, f = 0;
    for (int i = 0; i < k->N; i++) { // k_roi_prefix
        off[i] = r, foff[i] = f;
        r += (int32_t)(k->cnt[2 * i] + k->cnt[2 * i + 1]);
        f += (int32_t)k->cnt[2 * i];
    }
    off[k->N] = r, foff[k->N] = f, *n_rois = (float)r, *n_fg = (float)f;
    for (int img = 0; img < k->N; img++) { // k_roi_rows
        const int64_t kp = k->cnt[2 * img], kn = k->cnt[2 * img + 1];
        const int64_t *ps = k->pos + (int64_t)img * k->pos_cap, *ns = k->neg + (int64_t)img * k->S;
        for (int64_t t = 0; t < kp + kn; t++) {
            const int positive = t < kp;
            const int64_t a = positive ? t : t - kp, cidx = positive ? ps[a] : ns[a];
            int64_t below = 0; // the legacy count_below, a linear scan here
            for (int64_t q = 0; q < (positive ? kn : kp); q++) below += (positive ? ns[q] : ps[q]) < cidx;
            put(rows, off[img] + a + below, (int64_t)k->N * k->S, 1 + ((int64_t)img * k->C + cidx) * 2 + positive, "row");
            if (positive) put(fg, foff[img] + a, (int64_t)k->N * k->F, 1 + ((int64_t)img * k->C + cidx) * 2 + 1, "fg");
        }
    }
    for (int64_t t = 0; t < (int64_t)k->N * (k->S > k->F ? k->S : k->F); t++) { // k_roi_pad
        if (t >= off[k->N] && t < (int64_t)k->N * k->S) put(rows, t, (int64_t)k->N * k->S, -1, "row pad");
        if (t >= foff[k->N] && t < (int64_t)k->N * k->F) put(fg, t, (int64_t)k->N * k->F, -1, "fg pad");
    }
}

/* k_roi_rows_grid, slot by slot. */
static void roi_grid(const roi_case *k, int64_t *rows, int64_t *fg, float *n_rois, float *n_fg) {
    const int span = k->S > k->F ? k->S : k->F;
    for (int img = k->N - 1; img >= 0; img--) { // any order
        int32_t off, foff, nr, nf;
        det_roi_offsets(k->cnt, img, &off, &foff);
        det_roi_offsets(k->cnt, k->N, &nr, &nf);
        const int64_t kp = k->cnt[2 * img], kn = k->cnt[2 * img + 1];
        const int64_t *ps = k->pos + (int64_t)img * k->pos_cap, *ns = k->neg + (int64_t)img * k->S;
        for (int64_t t = 0; t < span; t++) {
            if (t < kp + kn) {
                const int positive = t < kp;
                const int64_t a = positive ? t : t - kp, cidx = positive ? ps[a] : ns[a];
                const int64_t v = 1 + ((int64_t)img * k->C + cidx) * 2 + positive;
                put(rows, off + det_roi_rank(ps, kp, ns, kn, t), (int64_t)k->N * k->S, v, "row");
                if (positive) put(fg, foff + a, (int64_t)k->N * k->F, v, "fg");
            }
            const int64_t pr = det_pad_row(img, t, k->S, nr), pf = det_pad_row(img, t, k->F, nf);
            if (pr >= 0) put(rows, pr, (int64_t)k->N * k->S, -1, "row pad");
            if (pf >= 0) put(fg, pf, (int64_t)k->N * k->F, -1, "fg pad");
            if (img == 0 && t == 0) *n_rois = (float)nr, *n_fg = (float)nf;
        }
    }
}

/* Ascending distinct picks of [0, C) split into positives and negatives, as the sampler
 * gives them (kp <= pos_cap, kp + kn <= S). */
static void roi_fill(roi_case *k, int variant) {
    unsigned char *used = malloc((size_t)k->C);
    for (int img = 0; img < k->N; img++) {
        int64_t kp = next_u32() % (uint32_t)(k->pos_cap + 1), kn = next_u32() % (uint32_t)(k->S - kp + 1);
        if (variant == 1 && img % 3 == 0) kp = kn = 0; // an image with nothing sampled
        if (variant == 2) kp = k->pos_cap, kn = k->S - kp; // every image full
        memset(used, 0, (size_t)k->C);
        int64_t np = 0, nn = 0;
        while (np < kp || nn < kn) {
            const int64_t c = next_u32() % (uint32_t)k->C;
            if (used[c]) continue;
            used[c] = 1;
            if (np < kp && (nn == kn || next_u32() % 2)) k->pos[(int64_t)img * k->pos_cap + np++] = c;
            else k->neg[(int64_t)img * k->S + nn++] = c;
        }
        int64_t *lists[2] = {k->pos + (int64_t)img * k->pos_cap, k->neg + (int64_t)img * k->S};
        const int64_t lens[2] = {kp, kn};
        for (int s = 0; s < 2; s++) // ascending
            for (int64_t i = 1; i < lens[s]; i++)
                for (int64_t j = i; j > 0 && lists[s][j - 1] > lists[s][j]; j--) {
                    const int64_t t = lists[s][j];
                    lists[s][j] = lists[s][j - 1], lists[s][j - 1] = t;
                }
        k->cnt[2 * img] = kp, k->cnt[2 * img + 1] = kn;
    }
    free(used);
}

static void roi_case_run(int N, int S, int F, int pos_cap, int C, int variant) {
    roi_case k = {N, S, F, pos_cap, C, malloc((size_t)N * pos_cap * 8), malloc((size_t)N * S * 8),
                  malloc((size_t)N * 16)};
    roi_fill(&k, variant);
    int64_t *r0 = calloc((size_t)N * S, 8), *r1 = calloc((size_t)N * S, 8);
    int64_t *f0 = calloc((size_t)N * F, 8), *f1 = calloc((size_t)N * F, 8);
    float a0, b0, a1 = -1.0f, b1 = -1.0f;
    roi_legacy(&k, r0, f0, &a0, &b0);
    roi_grid(&k, r1, f1, &a1, &b1);
    assert_true(a0 == a1 && b0 == b1);
    for (int64_t i = 0; i < (int64_t)N * S; i++)
        if (r0[i] != r1[i] || r1[i] == 0)
            fail_msg("N %d S %d F %d: row %lld written by %lld, legacy %lld", N, S, F, (long long)i, (long long)r1[i],
                     (long long)r0[i]);
    for (int64_t i = 0; i < (int64_t)N * F; i++)
        if (f0[i] != f1[i] || f1[i] == 0)
            fail_msg("N %d S %d F %d: fg row %lld written by %lld, legacy %lld", N, S, F, (long long)i,
                     (long long)f1[i], (long long)f0[i]);
    free(k.pos), free(k.neg), free(k.cnt), free(r0), free(r1), free(f0), free(f1);
}

static void test_roi_rows(void **state) {
    (void)state;
    for (int variant = 0; variant < 3; variant++) {
        roi_case_run(8, 512, 128, 128, 2100, variant); // the training shape
        roi_case_run(3, 64, 256, 16, 300, variant);    // F above S
        roi_case_run(1, 5, 5, 5, 5, variant);          // every candidate sampled
        roi_case_run(13, 40, 40, 10, 90, variant);
    }
    const int64_t a[] = {2, 5, 9};
    assert_int_equal(det_count_below(a, 3, 0), 0);
    assert_int_equal(det_count_below(a, 3, 5), 1);
    assert_int_equal(det_count_below(a, 3, 100), 3);
    assert_int_equal(det_pad_row(2, 3, 10, 24), -1); // row 23 is used
    assert_int_equal(det_pad_row(2, 4, 10, 24), 24);
    assert_int_equal(det_pad_row(0, 10, 10, 0), -1); // not a slot of this width
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nms_word_edges), cmocka_unit_test(test_nms_words), cmocka_unit_test(test_fy_source),
        cmocka_unit_test(test_sample_draws),   cmocka_unit_test(test_roi_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
