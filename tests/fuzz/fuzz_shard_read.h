/* What the loader, `mrcnn eval --shards` and `mrcnn-prep inspect` do with a shard set,
 * for the shard targets: open the index, open its shard against it (or a shard alone),
 * read every image's bytes and every annotation's RLE, and decode each RLE at its image's
 * size. Included by fuzz_shard_raw.c and fuzz_shard_struct.c. */
#ifndef MRCNN_FUZZ_SHARD_READ_H
#define MRCNN_FUZZ_SHARD_READ_H

#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mrcnn/data.h"
#include "mrcnn/rle.h"

/* Everything a validated shard promises, read back (inside a FUZZ_RUN). */
static void fuzz_read_shard(const mrcnn_shard *sh) {
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    char err[1024];
    for (int64_t i = 0; i < sh->num_images; i++) {
        if (mrcnn_shard_try_read_image(sh, i, &buf, &cap, &len, err, sizeof err) && len != (size_t)sh->length[i])
            fuzz_die("shard: image %lld read %zu bytes, its length is %lld", (long long)i, len, (long long)sh->length[i]);
        const int64_t a0 = sh->ann_start[i], n = sh->ann_count[i];
        char *rles = NULL;
        size_t rcap = 0, rlen = 0;
        if (mrcnn_shard_try_read_rles(sh, a0, n, &rles, &rcap, &rlen, err, sizeof err)) {
            const char *s = rles;
            for (int64_t a = 0; a < n; a++) {
                if (s >= rles + rlen) fuzz_die("shard: the RLE strings of image %lld end early", (long long)i);
                mrcnn_rle r;
                if (mrcnn_rle_from_string(&r, s, sh->height[i], sh->width[i])) {
                    double box[4];
                    mrcnn_rle_to_bbox(&r, box);
                    (void)mrcnn_rle_area(&r);
                    mrcnn_rle_free(&r);
                }
                s += strlen(s) + 1;
            }
        }
        free(rles);
    }
    free(buf);
}

#endif
