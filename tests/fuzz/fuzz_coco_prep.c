/* The converter's COCO parse (data_prep/coco_parse.c: coco_parse) and cross-reference
 * pass (data_prep/coco_resolve.c: coco_resolve), as `mrcnn-prep coco` runs them before
 * writing shards. The image folder holds a few files (and a symbolic link leading out of
 * it) so that names resolve, go missing or escape. The JSON reader's window is small
 * (4 KiB) so that tokens straddle refills. Every annotation the resolve pass accepts
 * must then decode (mrcnn_rle_from_string) at its image's size and have a box in range:
 * that is what the shard writer and the loader rely on. The rasterizer's preconditions
 * (rle.c) failing is a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coco.h"
#include "fuzz_common.h"
#include "json_internal.h"
#include "mrcnn/rle.h"

static char g_images[600];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    static const char *const sites[] = {"rle.c:", NULL};
    fuzz_set_fatal_sites(sites);
    fuzz_path(g_images, sizeof g_images, "images");
    mkdir(g_images, 0700);
    const char *names[] = {"a.jpg", "b.jpg", "000000000001.jpg", "sub/c.png"};
    char p[1024];
    snprintf(p, sizeof p, "%s/sub", g_images);
    mkdir(p, 0700);
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", g_images, names[i]);
        fuzz_write_file(p, "\xff\xd8\xff", 3);
    }
    snprintf(p, sizeof p, "%s/out.jpg", g_images);
    if (symlink("/etc/hostname", p) != 0) { /* optional */ }
    mrcnn_json_set_buffer_size(4096);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[600];
    if (!path[0]) fuzz_path(path, sizeof path, "instances.json");
    fuzz_write_file(path, data, size);
    static coco_dataset ds;
    static coco_report rep;
    memset(&ds, 0, sizeof ds);
    memset(&rep, 0, sizeof rep);
    rep.strict = size > 0 && (data[size - 1] & 1); // --strict on half the inputs
    rep.print = 0;
    /* One run: a failure in either releases what both allocated (ds is then dead). */
    if (!FUZZ_RUN(coco_parse(&ds, path, &rep, NULL, NULL); coco_resolve(&ds, g_images, &rep))) return 0;
    {
        for (int64_t i = 0; i < ds.num_anns; i++) {
            const coco_ann *a = &ds.anns[i];
            if (!a->ok) continue;
            if (a->image < 0 || a->image >= ds.num_images) fuzz_die("coco_prep: accepted annotation %lld has no image", (long long)i);
            const coco_image *im = &ds.images[a->image];
            if (!im->ok) fuzz_die("coco_prep: accepted annotation %lld belongs to a skipped image", (long long)i);
            if (a->class_index < 0 || a->class_index >= ds.cats.n)
                fuzz_die("coco_prep: accepted annotation %lld has class %d of %d", (long long)i, a->class_index, ds.cats.n);
            const double bd[4] = {a->bbox[0], a->bbox[1], a->bbox[2], a->bbox[3]};
            if (!(a->bbox[2] > 0 && a->bbox[3] > 0) || !mrcnn_bbox_in_range(bd, im->height, im->width))
                fuzz_die("coco_prep: accepted annotation %lld has box [%g %g %g %g] on a %dx%d image", (long long)i, bd[0],
                         bd[1], bd[2], bd[3], im->height, im->width);
            if (a->seg_kind != SEG_RLE || a->seg_off < 0 || a->seg_off >= ds.rles_len)
                fuzz_die("coco_prep: accepted annotation %lld has no RLE (kind %d)", (long long)i, a->seg_kind);
            mrcnn_rle r;
            if (!mrcnn_rle_from_string(&r, ds.rles + a->seg_off, im->height, im->width))
                fuzz_die("coco_prep: accepted annotation %lld has an RLE that does not decode at %dx%d", (long long)i,
                         im->height, im->width);
            mrcnn_rle_free(&r);
        }
    }
    coco_free(&ds);
    return 0;
}
