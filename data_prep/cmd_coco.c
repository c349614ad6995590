/* `mrcnn-prep coco`: COCO instances JSON + image folder -> NAME-SSSSS-of-NNNNN.h5 shards
 * and NAME-index.h5, with MPI. Every rank streams the JSON itself (the same records on
 * every rank, no broadcast), images go to shards by bytes in JSON order, and shard s
 * is written by rank s % ranks. The result does not depend on the rank count. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coco.h"
#include "mrcnn/check.h"
#include "mrcnn/data.h"
#include "mrcnn/h5_errors.h"
#include "mrcnn/log.h"

typedef struct {
    int active;
    double t0, last;
    const char *label;
} progress;

static void progress_show(progress *p, double frac, const char *detail) {
    if (!p->active) return;
    double now = mrcnn_time_now();
    if (now - p->last < 0.25 && frac < 1) return;
    p->last = now;
    char eta[32] = "?";
    if (frac > 0.001) mrcnn_format_duration((now - p->t0) * (1 - frac) / frac, eta, sizeof eta);
    fprintf(stderr, "\r%s: %5.1f%% %s ETA %s   ", p->label, 100 * frac, detail, eta);
    if (frac >= 1) fprintf(stderr, "\n");
    fflush(stderr);
}

typedef struct {
    progress *p;
    int64_t total;
} parse_ctx;

static void parse_progress(int64_t offset, void *ctx) {
    parse_ctx *c = ctx;
    char d[64];
    snprintf(d, sizeof d, "(%.0f of %.0f MB)", offset / 1e6, c->total / 1e6);
    progress_show(c->p, c->total > 0 ? (double)offset / (double)c->total : 0, d);
}

static void coco_usage(FILE *f) {
    fprintf(f,
            "usage: [mpirun -np K] mrcnn-prep coco --annotations FILE.json --images DIR --out OUTDIR\n"
            "                                     [--shards N] [--name NAME] [--strict]\n"
            "Converts a COCO instances JSON and its image folder into N HDF5 shards\n"
            "OUTDIR/NAME-00000-of-0000N.h5 ... and the index OUTDIR/NAME-index.h5.\n"
            "  --shards N   number of shard files, balanced by bytes (default 1)\n"
            "  --name NAME  shard name (default: the JSON's base name, e.g. instances_train2017)\n"
            "  --strict     any bad input is fatal (default: report it, skip it, count it); the\n"
            "               set already in OUTDIR is left untouched by a failed conversion\n"
            "Bad input: malformed JSON and image sizes outside [1, 65535] (always fatal),\n"
            "missing/unreadable/corrupt/truncated images, annotations with an unknown image or\n"
            "category, boxes without area, non-finite or out-of-range numbers (bbox, area,\n"
            "iscrowd, polygon coordinates), polygons with fewer than 3 points, malformed RLE,\n"
            "file names outside --images (also through symbolic links) or with a NUL byte\n"
            "(rejected). Images without annotations are normal data: kept and flagged, also\n"
            "with --strict. Polygons and uncompressed RLE are stored as compressed RLE with\n"
            "pycocotools' semantics. The format: data_prep/README.md.\n");
}

/* ---- staging and the commit: a conversion never touches the set already in --out ----
 * Every shard and the index are written into OUT/.NAME.staging/ (each under a .tmp name
 * until closed). The set in OUT is what its index names, so renaming the new index over
 * the old one is the single commit point: rank 0 first moves the new shards in under
 * names that no file in OUT has (a new generation, prep_shard_file_name), which the old
 * index does not name, then renames the index, then removes the shard files of NAME that
 * the new index does not name (the old set, and what an earlier killed conversion left).
 * A kill -9 at any instant leaves either the old index with all its shards or the new
 * one with all of its. A failure before the index rename removes the staging folder and
 * the shards already moved, and leaves the previous set as it was. */
static char g_staging[4096]; // set while this process has a staging folder to clean up
static char **g_moved;       // (g_num_moved) shards moved into OUT before the commit point
static int g_num_moved;

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[8192];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

/* The failure path (check.h): remove the partial new set, then the default report and
 * abort (a handler that returns falls through to them). */
static void on_fail(const char *message) {
    (void)message;
    if (g_staging[0]) remove_tree(g_staging);
    g_staging[0] = 0;
    for (int i = 0; i < g_num_moved; i++) unlink(g_moved[i]);
    g_num_moved = 0;
}

/* MRCNN_PREP_KILL_AT=k (for tests only): SIGKILL this process right before the k-th rename
 * or removal of the commit, so that a test can stop it between any two changes to OUT,
 * deterministically (flushes change no name, so they are not counted). */
static void commit_step(void) {
    static int step, kill_at = -1;
    if (kill_at < 0) {
        const char *e = getenv("MRCNN_PREP_KILL_AT");
        kill_at = e ? atoi(e) : 0;
    }
    if (kill_at > 0 && ++step == kill_at) raise(SIGKILL);
}

/* Written data reaches the disk before the rename that makes it part of the set: a
 * power loss must not leave an index naming empty files. */
static void sync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    MRCNN_CHECK(fd >= 0, "cannot open %s to flush it: %s", path, strerror(errno));
    /* Some file systems cannot flush a folder (EINVAL, ENOTSUP): nothing to wait for there. */
    MRCNN_CHECK(fsync(fd) == 0 || errno == EINVAL || errno == ENOTSUP, "cannot flush %s to disk: %s", path,
                strerror(errno));
    close(fd);
}

/* The smallest generation whose shard names no file in out has. */
static int pick_generation(const char *out, const char *name, int num_shards) {
    char fname[512], path[8192];
    struct stat st;
    for (int gen = 0; gen < 1000000; gen++) {
        int taken = 0;
        for (int s = 0; s < num_shards && !taken; s++) {
            prep_shard_file_name(fname, sizeof fname, name, s, num_shards, gen);
            snprintf(path, sizeof path, "%s/%s", out, fname);
            taken = lstat(path, &st) == 0 || errno != ENOENT;
        }
        if (!taken) return gen;
    }
    MRCNN_CHECK(0, "no free shard file names for set %s in %s", name, out);
    return -1;
}

static void commit_staged(const char *out, const char *staging, const char *name, int num_shards, int gen) {
    char from[8192], to[8192], fname[512];
    g_moved = MRCNN_CALLOC((size_t)num_shards, sizeof *g_moved, "moved shards");
    for (int s = 0; s < num_shards; s++) {
        prep_shard_file_name(fname, sizeof fname, name, s, num_shards, 0);
        snprintf(from, sizeof from, "%s/%s", staging, fname);
        sync_path(from);
        prep_shard_file_name(fname, sizeof fname, name, s, num_shards, gen);
        snprintf(to, sizeof to, "%s/%s", out, fname);
        commit_step();
        MRCNN_CHECK(rename(from, to) == 0, "cannot move %s to %s: %s", from, to, strerror(errno));
        g_moved[g_num_moved] = MRCNN_MALLOC(strlen(to) + 1, "moved shard path");
        memcpy(g_moved[g_num_moved++], to, strlen(to) + 1);
    }
    snprintf(from, sizeof from, "%s/%s-index.h5", staging, name);
    sync_path(from);
    sync_path(out);
    snprintf(to, sizeof to, "%s/%s-index.h5", out, name);
    commit_step();
    MRCNN_CHECK(rename(from, to) == 0, "cannot move %s to %s: %s", from, to, strerror(errno));
    /* Committed: from here on the new set is the one in OUT, whatever happens. */
    for (int i = 0; i < g_num_moved; i++) free(g_moved[i]);
    free(g_moved);
    g_moved = NULL;
    g_num_moved = 0;
    g_staging[0] = 0;
    sync_path(out);
    DIR *d = opendir(out);
    if (!d) {
        mrcnn_warn("cannot list %s to remove the previous set's shards: %s", out, strerror(errno));
    } else {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!prep_is_shard_file_name(e->d_name, name)) continue;
            int current = 0;
            for (int s = 0; s < num_shards && !current; s++) {
                prep_shard_file_name(fname, sizeof fname, name, s, num_shards, gen);
                current = !strcmp(fname, e->d_name);
            }
            if (current) continue;
            snprintf(to, sizeof to, "%s/%s", out, e->d_name);
            commit_step();
            if (unlink(to) != 0) mrcnn_warn("cannot remove %s (not part of the new set): %s", to, strerror(errno));
        }
        closedir(d);
    }
    commit_step();
    if (rmdir(staging) != 0) mrcnn_warn("cannot remove the staging folder %s: %s", staging, strerror(errno));
}

/* The whole file into *buf (grown); 0 if it cannot be read. */
static int read_file(const char *path, uint8_t **buf, size_t *cap, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int ok = fseek(f, 0, SEEK_END) == 0;
    long n = ftell(f);
    ok = ok && n >= 0 && fseek(f, 0, SEEK_SET) == 0;
    if (ok && *cap < (size_t)n + 1) {
        *buf = MRCNN_REALLOC(*buf, (size_t)n + 1, "image file");
        *cap = (size_t)n + 1;
    }
    if (ok) {
        *len = fread(*buf, 1, (size_t)n, f);
        ok = *len == (size_t)n && !ferror(f);
    }
    fclose(f);
    return ok;
}

typedef struct {
    const char *ann_path, *image_dir, *out;
    char name[256]; // shard name prefix
    long long num_shards;
    int strict;
} coco_args;

/* The command line into a; returns -1 to go on, else the exit code (help: 0, usage: 2). */
static int parse_args(int argc, char **argv, coco_args *a) {
    const char *name_arg = NULL;
    memset(a, 0, sizeof *a);
    a->num_shards = 1;
    for (int i = 1; i < argc; i++) {
        if (prep_is_help(argv[i])) {
            coco_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--annotations")) {
            a->ann_path = prep_arg_value(argc, argv, &i);
        } else if (!strcmp(argv[i], "--images")) {
            a->image_dir = prep_arg_value(argc, argv, &i);
        } else if (!strcmp(argv[i], "--out")) {
            a->out = prep_arg_value(argc, argv, &i);
        } else if (!strcmp(argv[i], "--name")) {
            name_arg = prep_arg_value(argc, argv, &i);
        } else if (!strcmp(argv[i], "--shards")) {
            a->num_shards = prep_arg_int(argc, argv, &i, 1, 99999);
        } else if (!strcmp(argv[i], "--strict")) {
            a->strict = 1;
        } else {
            fprintf(stderr, "mrcnn-prep coco: unknown option '%s'\n", argv[i]);
            coco_usage(stderr);
            return 2;
        }
    }
    if (!a->ann_path || !a->image_dir || !a->out) {
        fprintf(stderr, "mrcnn-prep coco: --annotations, --images and --out are required\n");
        coco_usage(stderr);
        return 2;
    }
    if (name_arg) {
        snprintf(a->name, sizeof a->name, "%s", name_arg);
    } else {
        const char *b = strrchr(a->ann_path, '/');
        snprintf(a->name, sizeof a->name, "%s", b ? b + 1 : a->ann_path);
        char *dot = strrchr(a->name, '.');
        if (dot && dot != a->name) *dot = 0;
    }
    MRCNN_CHECK(a->name[0] && !strchr(a->name, '/'), "--name '%s' must be a plain file name prefix", a->name);
    return -1;
}

/* Where everything goes: the usable images in JSON order, each image's annotations, and
 * each shard's range of that order. */
typedef struct {
    int64_t *order;       // (n_ok) image rows of the usable images, JSON order
    int64_t n_ok;
    int64_t *ann_start;   // (num_images + 1) image i's annotations are ann_list[ann_start[i] ...]
    int64_t *ann_list;    // annotation rows, grouped by image
    int64_t *shard_first; // (num_shards + 1) shard s writes order[shard_first[s] .. shard_first[s + 1])
} coco_layout;

static void layout_plan(coco_layout *l, const coco_dataset *ds, long long num_shards) {
    l->order = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(ds->num_images + 1), "image order");
    int64_t n_ok = 0, total_bytes = 0;
    for (int64_t i = 0; i < ds->num_images; i++)
        if (ds->images[i].ok) l->order[n_ok++] = i, total_bytes += ds->images[i].file_bytes;
    l->n_ok = n_ok;
    l->ann_start = MRCNN_CALLOC((size_t)ds->num_images + 1, sizeof(int64_t), "annotation starts");
    for (int64_t i = 0; i < ds->num_images; i++) l->ann_start[i + 1] = l->ann_start[i] + ds->images[i].num_ann;
    l->ann_list = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(l->ann_start[ds->num_images] + 1), "annotation lists");
    int64_t *fill = MRCNN_CALLOC((size_t)ds->num_images + 1, sizeof(int64_t), "annotation fill");
    for (int64_t a = 0; a < ds->num_anns; a++)
        if (ds->anns[a].ok) {
            int64_t im = ds->anns[a].image;
            l->ann_list[l->ann_start[im] + fill[im]++] = a;
        }
    free(fill);
    l->shard_first = MRCNN_CALLOC((size_t)num_shards + 1, sizeof(int64_t), "shard ranges");
    /* Shard s takes the images whose byte midpoint falls in [s, s+1) * total / N. */
    int64_t cum = 0, s = 0;
    for (int64_t k = 0; k < n_ok; k++) {
        double mid = (double)cum + 0.5 * (double)ds->images[l->order[k]].file_bytes;
        while (s + 1 < num_shards && mid >= (double)(s + 1) * (double)total_bytes / (double)num_shards)
            l->shard_first[++s] = k;
        cum += ds->images[l->order[k]].file_bytes;
    }
    while (s + 1 <= num_shards) l->shard_first[++s] = n_ok;
}

static void layout_free(coco_layout *l) {
    free(l->order);
    free(l->ann_start);
    free(l->ann_list);
    free(l->shard_first);
}

/* Image im's file into *buf, checked: still inside --images (links followed), readable, a
 * decodable image of the JSON's size. A failure is reported into wrep; returns 0 then. */
static int read_image_checked(const coco_dataset *ds, const coco_image *im, const char *image_dir, coco_report *wrep,
                              uint8_t **buf, size_t *cap, size_t *len) {
    char path[8192], err[512];
    const char *fname = ds->names + im->name_off;
    const int where = coco_image_path(ds->image_root, image_dir, fname, path, sizeof path);
    int h = 0, wd = 0, ok = where > 0 && read_file(path, buf, cap, len);
    if (where < 0) {
        coco_report_issue(wrep, ISSUE_IMAGE_PATH, "image id %lld: file_name '%s' resolves to %s, outside %s",
                          (long long)im->id, fname, path, ds->image_root);
    } else if (!ok) {
        coco_report_issue(wrep, ISSUE_IMAGE_MISSING, "image id %lld: cannot read %s", (long long)im->id, path);
    } else {
        if (!mrcnn_image_check(*buf, *len, &h, &wd, err, sizeof err)) {
            ok = 0;
            coco_report_issue(wrep, ISSUE_IMAGE_CORRUPT, "image id %lld (%s): %s", (long long)im->id, path, err);
        } else if (h != im->height || wd != im->width) {
            ok = 0;
            coco_report_issue(wrep, ISSUE_IMAGE_CORRUPT, "image id %lld (%s): the file is %dx%d but the JSON says %dx%d",
                              (long long)im->id, path, h, wd, im->height, im->width);
        }
    }
    return ok;
}

/* A --strict violation found while writing: every rank has stopped writing when this
 * returns or fails, so the failing rank's clean-up (on_fail) removes a staging folder no
 * other rank still adds files to. The ranks without one wait in a barrier the failing
 * rank's abort ends. */
static void strict_agree(const coco_report *wrep) {
    int bad = wrep->strict_failed;
    MRCNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (!bad) return;
    if (wrep->strict_failed) mrcnn_failf("", "", __FILE__, __LINE__, "%s", wrep->strict_msg);
    MRCNN_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    MRCNN_CHECK(0, "another rank found bad input under --strict"); // not reached: its abort ends this one
}

/* This rank's shards (s = rank, rank + size, ...) into the staging folder; cnt (3 x
 * num_shards): images, annotations and bytes each shard holds. */
static void write_shards(const coco_args *a, const coco_dataset *ds, const coco_layout *l, const char *staging, int rank,
                         int size, int tty, coco_report *wrep, int64_t *cnt) {
    const long long num_shards = a->num_shards;
    int64_t my_total = 0, my_done = 0;
    for (int64_t s = rank; s < num_shards; s += size) my_total += l->shard_first[s + 1] - l->shard_first[s];
    progress wp = {tty, mrcnn_time_now(), 0, "write (rank 0)"};
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    for (int64_t s = rank; s < num_shards; s += size) {
        prep_shard_writer *w = prep_shard_begin(staging, a->name, (int)s, (int)num_shards, &ds->cats);
        for (int64_t k = l->shard_first[s]; k < l->shard_first[s + 1]; k++) {
            const int64_t ii = l->order[k];
            const coco_image *im = &ds->images[ii];
            const int ok = read_image_checked(ds, im, a->image_dir, wrep, &buf, &cap, &len);
            my_done++;
            if (!ok) {
                wrep->count[ISSUE_ANN_OF_SKIPPED_IMAGE] += im->num_ann;
                continue;
            }
            prep_shard_add_image(w, im->id, im->height, im->width, ds->names + im->name_off,
                                 im->num_ann ? 0 : MRCNN_IMAGE_FLAG_NO_ANNOTATIONS, buf, len);
            for (int64_t q = l->ann_start[ii]; q < l->ann_start[ii + 1]; q++) {
                const coco_ann *an = &ds->anns[l->ann_list[q]];
                prep_shard_add_annotation(w, an->id, an->bbox, an->category_id, an->class_index, an->iscrowd, an->area,
                                          ds->rles + an->seg_off);
            }
            char d[64];
            snprintf(d, sizeof d, "(%lld of %lld images)", (long long)my_done, (long long)my_total);
            progress_show(&wp, (double)my_done / (double)(my_total ? my_total : 1), d);
        }
        prep_shard_finish(w, &cnt[s], &cnt[num_shards + s], &cnt[2 * num_shards + s]);
    }
    free(buf);
    if (my_total) progress_show(&wp, 1, "");
}

/* Rank 0's summary: what was written of what the JSON holds, speed, and the bad input by
 * kind (counts: parse and resolve's rep plus the writers' wcounts). */
static void print_summary(const coco_args *a, const coco_dataset *ds, const int64_t *cnt, const coco_report *rep,
                          const int64_t *wcounts, int size, double secs, double t_parse) {
    const long long num_shards = a->num_shards;
    int64_t ni = 0, na = 0, nb = 0;
    for (int64_t s = 0; s < num_shards; s++) ni += cnt[s], na += cnt[num_shards + s], nb += cnt[2 * num_shards + s];
    printf("mrcnn-prep coco: summary (%d rank%s)\n", size, size > 1 ? "s" : "");
    printf("  images       %lld written of %lld in the JSON (%lld skipped)\n", (long long)ni,
           (long long)ds->num_images, (long long)(ds->num_images - ni));
    printf("  annotations  %lld written of %lld in the JSON (%lld skipped)\n", (long long)na,
           (long long)ds->num_anns, (long long)(ds->num_anns - na));
    printf("  categories   %d\n", ds->cats.n);
    printf("  bytes        %.1f MB of images in %lld shard%s\n", nb / 1e6, num_shards, num_shards > 1 ? "s" : "");
    printf("  seconds      %.2f (parse %.2f): %.1f images/s, %.1f MB/s\n", secs, t_parse, ni / secs, nb / 1e6 / secs);
    int64_t bad = 0;
    for (int k = 0; k < ISSUE_COUNT; k++) bad += rep->count[k] + wcounts[k];
    printf("  bad input    %s\n", bad ? "(count, kind):" : "none");
    for (int k = 0; k < ISSUE_COUNT; k++)
        if (rep->count[k] + wcounts[k])
            printf("    %8lld  %s\n", (long long)(rep->count[k] + wcounts[k]), coco_issue_name((coco_issue)k));
    printf("  index        %s/%s-index.h5\n", a->out, a->name);
    fflush(stdout);
}

int prep_cmd_coco(int argc, char **argv) {
    coco_args a;
    const int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    const long long num_shards = a.num_shards;

    int provided = 0, rank = 0, size = 1;
    MRCNN_CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    mrcnn_set_fail_handler(on_fail);
    MRCNN_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MRCNN_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    mrcnn_log_set_rank(rank, size);
    const double t0 = mrcnn_time_now();
    const int tty = rank == 0 && isatty(2);

    /* 1. Parse (every rank, identically) and resolve. */
    coco_report rep = {.strict = a.strict, .print = rank == 0};
    coco_dataset ds;
    memset(&ds, 0, sizeof ds);
    FILE *jf = fopen(a.ann_path, "rb");
    MRCNN_CHECK(jf, "cannot open the annotations file %s", a.ann_path);
    fseek(jf, 0, SEEK_END);
    parse_ctx pc = {&(progress){tty, t0, 0, "parse"}, ftell(jf)};
    fclose(jf);
    coco_parse(&ds, a.ann_path, &rep, parse_progress, &pc);
    progress_show(pc.p, 1, "");
    coco_resolve(&ds, a.image_dir, &rep);
    const double t_parse = mrcnn_time_now() - t0;

    /* 2. Images in JSON order, annotations grouped by image, shards by cumulative bytes. */
    coco_layout lay;
    layout_plan(&lay, &ds, num_shards);

    /* 3. Write this rank's shards, into the staging folder. */
    char staging[4096];
    snprintf(staging, sizeof staging, "%s/.%s.staging", a.out, a.name);
    if (rank == 0) {
        prep_mkdirs(a.out);
        remove_tree(staging); // what a killed run left
        MRCNN_CHECK(mkdir(staging, 0777) == 0, "cannot create %s: %s", staging, strerror(errno));
    }
    MRCNN_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    snprintf(g_staging, sizeof g_staging, "%s", staging); // from here on, a failure removes it
    /* A failed write is reported once, as one line with the system's reason (PREP_H5),
     * not also as HDF5's stack of 30 entries. */
    mrcnn_h5_quiet_begin();
    coco_report wrep = {.strict = a.strict, .print = 1, .defer_strict = 1};
    int64_t *cnt = MRCNN_CALLOC((size_t)num_shards * 3, sizeof(int64_t), "shard counts");
    write_shards(&a, &ds, &lay, staging, rank, size, tty, &wrep, cnt);
    strict_agree(&wrep);

    /* 4. Counts from every rank; rank 0 writes the index and the summary. */
    MRCNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, cnt, (int)(3 * num_shards), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
    int64_t wcounts[ISSUE_COUNT];
    MRCNN_CHECK_MPI(MPI_Reduce(wrep.count, wcounts, ISSUE_COUNT, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
    if (rank != 0) g_staging[0] = 0; // every shard is complete; rank 0 moves the set into place
    if (rank == 0) {
        const int gen = pick_generation(a.out, a.name, (int)num_shards);
        prep_index_write(staging, a.name, (int)num_shards, gen, cnt, cnt + num_shards, cnt + 2 * num_shards, &ds.cats);
        commit_staged(a.out, staging, a.name, (int)num_shards, gen);
        print_summary(&a, &ds, cnt, &rep, wcounts, size, mrcnn_time_now() - t0, t_parse);
    }
    free(cnt);
    layout_free(&lay);
    coco_free(&ds);
    MRCNN_CHECK_MPI(MPI_Finalize());
    return 0;
}
