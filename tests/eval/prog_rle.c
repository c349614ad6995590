/* Drives the RLE functions from a line protocol so that rle_check.py can compare
 * every answer with pycocotools. One command a line on stdin, one answer a line:
 *   encode H W BITS          (BITS: H*W chars '0'/'1', row-major) -> STRING AREA X Y W H
 *   poly H W K X0 Y0 ...     -> STRING
 *   frbbox H W X Y BW BH     -> STRING
 *   merge H W INTERSECT N S1..SN -> STRING
 *   iou M N CROWD1..CROWDN H W S_D1..S_DM H W S_G1..S_GN (one H W per mask) -> M*N values
 *   biou M N CROWD1..CROWDN  4M numbers 4N numbers -> M*N values
 *   decode H W STRING         -> BITS AREA X Y W H STRING   ("bad" if rejected)
 * Doubles are printed with %.17g, which round-trips. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/rle.h"

static char *word(char **p) {
    while (**p == ' ') (*p)++;
    char *s = *p;
    while (**p && **p != ' ' && **p != '\n') (*p)++;
    if (**p) *(*p)++ = 0;
    return s;
}

static long long num(char **p) { return atoll(word(p)); }
static double dbl(char **p) { return strtod(word(p), NULL); }

static void print_string(const mrcnn_rle *r) {
    char *s = mrcnn_rle_to_string(r);
    printf("%s", s);
    free(s);
}

static void read_rle(char **p, mrcnn_rle *r) {
    long long h = num(p), w = num(p);
    char *s = word(p);
    if (!mrcnn_rle_from_string(r, s, h, w)) {
        fprintf(stderr, "prog_rle: rejected string '%s' for %lldx%lld\n", s, h, w);
        exit(1);
    }
}

static void print_bbox(const mrcnn_rle *r) {
    double bb[4];
    mrcnn_rle_to_bbox(r, bb);
    printf(" %.17g %.17g %.17g %.17g", bb[0], bb[1], bb[2], bb[3]);
}

int main(void) {
    size_t cap = 1 << 20;
    char *line = malloc(cap);
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        char *p = line;
        char *cmd = word(&p);
        mrcnn_rle r;
        if (!strcmp(cmd, "encode")) {
            long long h = num(&p), w = num(&p);
            char *bits = word(&p);
            uint8_t *mask = malloc((size_t)(h * w) + 1);
            for (long long i = 0; i < h * w; i++) mask[i] = (uint8_t)(bits[i] - '0');
            mrcnn_rle_from_mask(&r, mask, h, w);
            print_string(&r);
            printf(" %llu", (unsigned long long)mrcnn_rle_area(&r));
            print_bbox(&r);
            printf("\n");
            mrcnn_rle_free(&r);
            free(mask);
        } else if (!strcmp(cmd, "poly")) {
            long long h = num(&p), w = num(&p);
            int k = (int)num(&p);
            double *xy = malloc(sizeof(double) * (size_t)(2 * k + 1));
            for (int i = 0; i < 2 * k; i++) xy[i] = dbl(&p);
            mrcnn_rle_from_polygon(&r, xy, k, h, w);
            print_string(&r);
            printf("\n");
            mrcnn_rle_free(&r);
            free(xy);
        } else if (!strcmp(cmd, "frbbox")) {
            long long h = num(&p), w = num(&p);
            double bb[4];
            for (int i = 0; i < 4; i++) bb[i] = dbl(&p);
            mrcnn_rle_from_bbox(&r, bb, h, w);
            print_string(&r);
            printf("\n");
            mrcnn_rle_free(&r);
        } else if (!strcmp(cmd, "merge")) {
            long long h = num(&p), w = num(&p);
            int intersect = (int)num(&p), k = (int)num(&p);
            mrcnn_rle *rs = malloc(sizeof(mrcnn_rle) * (size_t)(k + 1));
            for (int i = 0; i < k; i++) {
                char *s = word(&p);
                if (!mrcnn_rle_from_string(&rs[i], s, h, w)) return 1;
            }
            mrcnn_rle_merge(rs, k, &r, intersect);
            print_string(&r);
            printf("\n");
            mrcnn_rle_free(&r);
            for (int i = 0; i < k; i++) mrcnn_rle_free(&rs[i]);
            free(rs);
        } else if (!strcmp(cmd, "iou") || !strcmp(cmd, "biou")) {
            int m = (int)num(&p), k = (int)num(&p);
            uint8_t *crowd = malloc((size_t)k + 1);
            for (int i = 0; i < k; i++) crowd[i] = (uint8_t)num(&p);
            double *iou = malloc(sizeof(double) * (size_t)(m * k + 1));
            if (!strcmp(cmd, "iou")) {
                mrcnn_rle *dt = malloc(sizeof(mrcnn_rle) * (size_t)(m + 1));
                mrcnn_rle *gt = malloc(sizeof(mrcnn_rle) * (size_t)(k + 1));
                for (int i = 0; i < m; i++) read_rle(&p, &dt[i]);
                for (int i = 0; i < k; i++) read_rle(&p, &gt[i]);
                mrcnn_rle_iou(dt, m, gt, k, crowd, iou);
                for (int i = 0; i < m; i++) mrcnn_rle_free(&dt[i]);
                for (int i = 0; i < k; i++) mrcnn_rle_free(&gt[i]);
                free(dt);
                free(gt);
            } else {
                double *dt = malloc(sizeof(double) * (size_t)(4 * m + 1));
                double *gt = malloc(sizeof(double) * (size_t)(4 * k + 1));
                for (int i = 0; i < 4 * m; i++) dt[i] = dbl(&p);
                for (int i = 0; i < 4 * k; i++) gt[i] = dbl(&p);
                mrcnn_bbox_iou(dt, m, gt, k, crowd, iou);
                free(dt);
                free(gt);
            }
            for (int i = 0; i < m * k; i++) printf("%s%.17g", i ? " " : "", iou[i]);
            printf("\n");
            free(iou);
            free(crowd);
        } else if (!strcmp(cmd, "decode")) {
            long long h = num(&p), w = num(&p);
            char *s = word(&p);
            if (!mrcnn_rle_from_string(&r, s, h, w)) {
                printf("bad\n");
            } else {
                uint8_t *mask = malloc((size_t)(h * w) + 1);
                mrcnn_rle_to_mask(&r, mask);
                for (long long i = 0; i < h * w; i++) putchar('0' + mask[i]);
                if (h * w == 0) putchar('-');
                printf(" %llu", (unsigned long long)mrcnn_rle_area(&r));
                print_bbox(&r);
                printf(" ");
                print_string(&r);
                printf("\n");
                mrcnn_rle_free(&r);
                free(mask);
            }
        } else {
            fprintf(stderr, "prog_rle: unknown command '%s'\n", cmd);
            return 2;
        }
    }
    free(line);
    return 0;
}
