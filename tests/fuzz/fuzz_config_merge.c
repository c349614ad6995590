/* The config loader's anchors, aliases and merge keys, with bounds on time and memory
 * (include/mrcnn/config.h: mrcnn_config_try_load; the YAML side is src/core/config_yaml.c).
 * A 628-byte file of nested merge keys once took 4 GB in 20 s, each level costing 10x:
 * here every load must stay within
 *   - heap: a peak of live bytes allocated during the load of at most
 *     MERGE_HEAP_BASE + MERGE_HEAP_PER_BYTE x the file's size (ASan's malloc hooks count
 *     every allocation of the loading thread, libyaml's included), and
 *   - time: CPU time of the loading thread of at most MERGE_CPU_BASE_MS +
 *     MERGE_CPU_PER_KB_MS per KiB (thread CPU time: other processes on the machine do not
 *     count), scaled by MRCNN_FUZZ_TIME_SCALE (default 1) for slow machines;
 * a load past either bound is a finding (==FUZZ== finding), as libFuzzer's own -timeout
 * and -rss_limit_mb are for much larger ones.
 *
 * Input: the first byte chooses the form. Even: the rest is the YAML file itself (text
 * mutations; the corpus holds hand-written anchor, alias and merge-key files, the alias
 * bomb of tests/unit/test_config_alias_bomb.sh among them). Odd: the rest is a program
 * that writes a YAML file of valid keys and values (from the defaults' dump), so that
 * mutations change the structure, not the spelling: anchored mappings of a section, merges
 * of earlier anchors (`<<: [*a1, *a1, *a3]`, repeated, nested, in flow and block style),
 * aliases of mappings, scalars and lists, redefined anchors, and raw bytes between them.
 * What loaded is also dumped, loaded again and dumped again: the two dumps must agree
 * (as in fuzz_config.c). */
#include <sanitizer/allocator_interface.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz_common.h"
#include "mrcnn/config.h"

#define MERGE_HEAP_BASE ((size_t)16 << 20)
#define MERGE_HEAP_PER_BYTE ((size_t)4096)
#define MERGE_CPU_BASE_MS 500.0
#define MERGE_CPU_PER_KB_MS 250.0

/* ---- the heap of the loading thread ---- */
static __thread int t_counting;
static __thread size_t t_live, t_peak;

static void on_malloc(const volatile void *p, size_t n) {
    (void)p;
    if (!t_counting) return;
    t_live += n;
    if (t_live > t_peak) t_peak = t_live;
}

static void on_free(const volatile void *p) {
    if (!t_counting || !p) return;
    size_t n = __sanitizer_get_allocated_size((const void *)p);
    t_live = n < t_live ? t_live - n : 0;
}

static double thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- the valid keys and values, from the defaults' dump ---- */
#define MAX_KEYS 256
static struct {
    char key[96], value[160];
} g_kv[MAX_KEYS];
static int g_nkv;
static double g_time_scale = 1;
static int g_roundtrip = 1;

static void read_defaults(void) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    char *dump = mrcnn_config_dump(&cfg);
    for (char *line = strtok(dump, "\n"); line && g_nkv < MAX_KEYS; line = strtok(NULL, "\n")) {
        char *colon = strstr(line, ": ");
        if (!colon || (size_t)(colon - line) >= sizeof g_kv[0].key || strlen(colon + 2) >= sizeof g_kv[0].value) continue;
        memcpy(g_kv[g_nkv].key, line, (size_t)(colon - line));
        g_kv[g_nkv].key[colon - line] = 0;
        strcpy(g_kv[g_nkv].value, colon + 2);
        g_nkv++;
    }
    free(dump);
}

/* ---- the YAML writer ---- */
typedef struct {
    char *s;
    size_t n, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    if (!t->s) {
        t->cap = 256;
        t->s = malloc(t->cap);
        if (!t->s) abort();
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        t->cap = t->cap * 2 + (size_t)(k > 0 ? k : 0) + 256;
        t->s = realloc(t->s, t->cap);
        if (!t->s) abort();
    }
}

/* The first `depth` dot-separated parts of key (at least one, fewer than all). */
static int prefix_len(const char *key, int depth) {
    int parts = 1;
    for (const char *p = key; *p; p++) parts += *p == '.';
    if (depth < 1) depth = 1;
    if (depth > parts - 1) depth = parts - 1;
    int len = 0, seen = 0;
    while (key[len] && !(key[len] == '.' && ++seen == depth)) len++;
    return len;
}

#define MAX_ANCHORS 16
typedef struct {
    char section[96]; // the mapping's key ("" for a scalar or list anchor)
    int defined;
} anchor_info;

/* One anchored mapping: SECTION: &aK {rest: value, ...} of keys under SECTION. */
static void gen_mapping(text *t, fuzz_bytes *b, anchor_info *an, int flow) {
    int k = fuzz_u8(b) % g_nkv;
    for (int tries = 0; tries < g_nkv && !strchr(g_kv[k].key, '.'); tries++) k = (k + 1) % g_nkv; // a key in a section
    const int plen = prefix_len(g_kv[k].key, 1 + fuzz_u8(b) % 3);
    char section[96];
    snprintf(section, sizeof section, "%.*s", plen, g_kv[k].key);
    const int id = fuzz_u8(b) % MAX_ANCHORS;
    const int nkeys = fuzz_u8(b) % 6;
    const int nmerge = fuzz_u8(b) % 12;
    put(t, "%s: &a%d", section, id);
    put(t, flow ? " {" : "\n");
    int first = 1;
    if (nmerge) {
        put(t, flow ? "<<: [" : "  <<: [");
        for (int m = 0; m < nmerge; m++) {
            int j = fuzz_u8(b) % MAX_ANCHORS;
            /* Mostly anchors of the same section, so that the merged keys are known. */
            if (!an[j].defined || (strcmp(an[j].section, section) && (fuzz_u8(b) & 7))) {
                for (int q = 0; q < MAX_ANCHORS; q++)
                    if (an[q].defined && !strcmp(an[q].section, section)) j = q;
            }
            if (!an[j].defined) continue;
            put(t, "%s*a%d", m ? ", " : "", j);
        }
        put(t, flow ? "]" : "]\n");
        first = 0;
    }
    for (int i = 0; i < nkeys; i++) {
        /* a key under the section (the first one at or after a drawn index) */
        int q = fuzz_u8(b) % g_nkv, tries = 0;
        while (tries++ < g_nkv && (strncmp(g_kv[q].key, section, (size_t)plen) || g_kv[q].key[plen] != '.'))
            q = (q + 1) % g_nkv;
        if (tries > g_nkv) break;
        const char *v = g_kv[(fuzz_u8(b) & 15) ? q : fuzz_u8(b) % g_nkv].value; // sometimes another key's value
        if (flow) put(t, "%s%s: %s", first ? "" : ", ", g_kv[q].key + plen + 1, v);
        else put(t, "  %s: %s\n", g_kv[q].key + plen + 1, v);
        first = 0;
    }
    if (flow) put(t, "}\n");
    else if (first) put(t, "  {}\n");
    snprintf(an[id].section, sizeof an[id].section, "%s", section);
    an[id].defined = 1;
}

static void generate(text *t, fuzz_bytes *b) {
    anchor_info an[MAX_ANCHORS];
    memset(an, 0, sizeof an);
    int ops = 0;
    while (fuzz_more(b) && ops++ < 64) {
        const int op = fuzz_u8(b) % 8;
        switch (op) {
        case 0:
        case 1:
        case 2: gen_mapping(t, b, an, op != 2); break;
        case 3: { // a mapping aliased under its section (or another one)
            const int j = fuzz_u8(b) % MAX_ANCHORS;
            if (!an[j].defined || !an[j].section[0]) break;
            put(t, "%s: *a%d\n", an[j].section, j);
            break;
        }
        case 4: { // a scalar or list anchor on a key, and aliases of it on keys
            const int k = fuzz_u8(b) % g_nkv, id = fuzz_u8(b) % MAX_ANCHORS;
            put(t, "%s: &a%d %s\n", g_kv[k].key, id, g_kv[k].value);
            an[id].section[0] = 0;
            an[id].defined = 1;
            const int n = fuzz_u8(b) % 4;
            for (int i = 0; i < n; i++) put(t, "%s: *a%d\n", g_kv[(fuzz_u8(b) & 7) ? k : fuzz_u8(b) % g_nkv].key, id);
            break;
        }
        case 5: { // one section holding another's alias: nested keys under it
            const int j = fuzz_u8(b) % MAX_ANCHORS;
            if (!an[j].defined || !an[j].section[0]) break;
            const char *dot = strrchr(an[j].section, '.');
            if (!dot) break;
            put(t, "%.*s:\n  %s: *a%d\n", (int)(dot - an[j].section), an[j].section, dot + 1, j);
            break;
        }
        case 6: { // raw bytes (up to the next NUL or 32 bytes)
            int n = fuzz_u8(b) % 32;
            while (n-- > 0 && fuzz_more(b)) {
                const uint8_t c = fuzz_u8(b);
                if (!c) break;
                put(t, "%c", c);
            }
            put(t, "\n");
            break;
        }
        default: { // a plain key
            const int k = fuzz_u8(b) % g_nkv;
            put(t, "%s: %s\n", g_kv[k].key, g_kv[k].value);
            break;
        }
        }
    }
}

/* `_BASE_: base.yaml` resolves to this (valid) file beside the input. */
static const char k_base[] = "SOLVER:\n  BASE_LR: 0.01\n  STEPS: [150]\nMODEL:\n  ROI_HEADS:\n    NUM_CLASSES: 3\n";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    char p[600];
    fuzz_path(p, sizeof p, "base.yaml");
    fuzz_write_file(p, k_base, sizeof k_base - 1);
    read_defaults();
    if (!g_nkv) fuzz_die("config_merge: no keys in the defaults' dump");
    const char *e = getenv("MRCNN_FUZZ_TIME_SCALE");
    if (e && atof(e) > 0) g_time_scale = atof(e);
    e = getenv("MRCNN_FUZZ_NO_ROUNDTRIP");
    g_roundtrip = !(e && e[0] == '1');
    if (!__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free))
        fuzz_die("config_merge: cannot install the allocation hooks");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[600], dump_path[600];
    if (!path[0]) {
        fuzz_path(path, sizeof path, "merge.yaml");
        fuzz_path(dump_path, sizeof dump_path, "merge_dump.yaml");
    }
    if (size == 0) return 0;
    text t = {0};
    put(&t, "%s", ""); // allocates: the file may be empty
    if (data[0] & 1) {
        fuzz_bytes b = {data + 1, size - 1};
        generate(&t, &b);
    } else {
        t.s = realloc(t.s, size);
        if (!t.s) abort();
        t.cap = size;
        memcpy(t.s, data + 1, size - 1);
        t.n = size - 1;
    }
    fuzz_write_file(path, t.s, t.n);
    const size_t file_bytes = t.n;

    static mrcnn_config cfg;
    static char err[1024];
    static int loaded;
    mrcnn_config_defaults(&cfg);
    loaded = 0;
    t_live = t_peak = 0;
    t_counting = 1;
    const double t0 = thread_cpu_ms();
    FUZZ_RUN(loaded = mrcnn_config_try_load(&cfg, path, err, sizeof err));
    const double ms = thread_cpu_ms() - t0;
    t_counting = 0;
    const size_t heap_bound = MERGE_HEAP_BASE + MERGE_HEAP_PER_BYTE * file_bytes;
    const double ms_bound = (MERGE_CPU_BASE_MS + MERGE_CPU_PER_KB_MS * (double)file_bytes / 1024.0) * g_time_scale;
    if (t_peak > heap_bound)
        fuzz_die("config_merge: a %zu-byte file took a heap peak of %zu bytes to load (bound %zu): %s\n--- file ---\n%.*s",
                 file_bytes, t_peak, heap_bound, loaded ? "loaded" : err, (int)(t.n < 2000 ? t.n : 2000), t.s);
    if (ms > ms_bound)
        fuzz_die("config_merge: a %zu-byte file took %.0f ms of CPU to load (bound %.0f ms): %s\n--- file ---\n%.*s",
                 file_bytes, ms, ms_bound, loaded ? "loaded" : err, (int)(t.n < 2000 ? t.n : 2000), t.s);
    if (loaded && g_roundtrip) {
        char *d1 = mrcnn_config_dump(&cfg);
        fuzz_write_file(dump_path, d1, strlen(d1));
        static mrcnn_config back;
        mrcnn_config_defaults(&back);
        static int ok;
        ok = 0;
        FUZZ_RUN(ok = mrcnn_config_try_load(&back, dump_path, err, sizeof err));
        if (!ok) fuzz_die("config_merge: the dump of a loaded config does not load: %s\n--- dump ---\n%s", err, d1);
        char *d2 = mrcnn_config_dump(&back);
        if (strcmp(d1, d2)) fuzz_die("config_merge: dump -> load -> dump changes the config");
        free(d2);
        free(d1);
    }
    free(t.s);
    return 0;
}
