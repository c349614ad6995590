/* Damages HDF5 shard files for the hardening tests (tests/data/test_hardening.sh):
 *   prog_h5poke set FILE DATASET INDEX VALUE  element INDEX (flat, row-major) of DATASET := VALUE,
 *                                             through HDF5 (so any checksum is recomputed: the
 *                                             file stays consistent, only the value is wrong)
 *   prog_h5poke attr FILE ATTR VALUE          the int64 attribute ATTR of the root group := VALUE
 *   prog_h5poke flip FILE DATASET [BYTE]      XORs 0x5A into the raw bytes of DATASET's data in
 *                                             the file (at BYTE within its first chunk, default 1),
 *                                             behind HDF5's back, as a disk error would
 *   prog_h5poke filters FILE DATASET          prints "chunked fletcher32" when DATASET is chunked
 *                                             and has the Fletcher32 filter, else "plain"
 * VALUE is parsed with strtod, or strtoll when it is an integer (exact for int64); "inf",
 * "-inf", "nan" and 1e400 work. Exit 0 on success, 1 with a message otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int die(const char *msg, const char *a) {
    fprintf(stderr, "prog_h5poke: %s%s%s\n", msg, a ? ": " : "", a ? a : "");
    return 1;
}

static int parse_value(const char *s, long long *iv, double *dv) {
    char *end = NULL;
    errno = 0;
    long long i = strtoll(s, &end, 10);
    if (end != s && *end == 0 && errno == 0) {
        *iv = i;
        *dv = (double)i;
        return 1; // integer
    }
    *dv = strtod(s, &end);
    if (end == s || *end) return -1;
    *iv = 0;
    return 0;
}

static int cmd_set(const char *file, const char *name, long long index, const char *value) {
    long long iv;
    double dv;
    int is_int = parse_value(value, &iv, &dv);
    if (is_int < 0) return die("not a number", value);
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return die("cannot open", file);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) return die("no such dataset", name);
    hid_t sp = H5Dget_space(ds);
    hsize_t d[2] = {1, 1};
    int rank = H5Sget_simple_extent_dims(sp, d, NULL);
    hsize_t cols = rank == 2 ? d[1] : 1;
    hsize_t pt[2] = {(hsize_t)index / cols, (hsize_t)index % cols};
    if (H5Sselect_elements(sp, H5S_SELECT_SET, 1, pt) < 0) return die("bad index", name);
    hsize_t one = 1;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    hid_t ftype = H5Dget_type(ds);
    herr_t r;
    if (H5Tget_class(ftype) == H5T_FLOAT || !is_int) {
        r = H5Dwrite(ds, H5T_NATIVE_DOUBLE, ms, sp, H5P_DEFAULT, &dv);
    } else {
        r = H5Dwrite(ds, H5T_NATIVE_LLONG, ms, sp, H5P_DEFAULT, &iv);
    }
    if (r < 0) return die("write failed", name);
    H5Tclose(ftype);
    H5Sclose(ms);
    H5Sclose(sp);
    H5Dclose(ds);
    if (H5Fclose(f) < 0) return die("close failed", file);
    return 0;
}

static int cmd_attr(const char *file, const char *name, const char *value) {
    long long iv;
    double dv;
    if (parse_value(value, &iv, &dv) != 1) return die("not an integer", value);
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return die("cannot open", file);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0) return die("no such attribute", name);
    int64_t v = iv;
    if (H5Awrite(a, H5T_NATIVE_INT64, &v) < 0) return die("write failed", name);
    H5Aclose(a);
    if (H5Fclose(f) < 0) return die("close failed", file);
    return 0;
}

static int cmd_flip(const char *file, const char *name, long long byte) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return die("cannot open", file);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) return die("no such dataset", name);
    hid_t dcpl = H5Dget_create_plist(ds);
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hid_t sp = H5Dget_space(ds);
        hsize_t off[2];
        unsigned mask = 0;
        if (H5Dget_chunk_info(ds, sp, 0, off, &mask, &addr, &size) < 0) return die("no chunk info", name);
        H5Sclose(sp);
    } else {
        addr = H5Dget_offset(ds);
        size = H5Dget_storage_size(ds);
    }
    H5Pclose(dcpl);
    H5Dclose(ds);
    H5Fclose(f);
    if (addr == HADDR_UNDEF || (hsize_t)byte >= size) return die("the dataset has no stored bytes there", name);
    int fd = open(file, O_RDWR);
    if (fd < 0) return die("cannot open for writing", file);
    unsigned char c;
    if (pread(fd, &c, 1, (off_t)(addr + (haddr_t)byte)) != 1) return die("read failed", file);
    c ^= 0x5A;
    if (pwrite(fd, &c, 1, (off_t)(addr + (haddr_t)byte)) != 1) return die("write failed", file);
    close(fd);
    printf("flipped byte %llu of %s (%s)\n", (unsigned long long)(addr + (haddr_t)byte), file, name);
    return 0;
}

static int cmd_filters(const char *file, const char *name) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return die("cannot open", file);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) return die("no such dataset", name);
    hid_t dcpl = H5Dget_create_plist(ds);
    int chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
    unsigned flags = 0;
    size_t nelem = 0;
    int fl = H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelem, NULL, 0, NULL, NULL) >= 0;
    printf("%s\n", chunked && fl ? "chunked fletcher32" : "plain");
    H5Pclose(dcpl);
    H5Dclose(ds);
    H5Fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (argc == 6 && !strcmp(argv[1], "set")) return cmd_set(argv[2], argv[3], atoll(argv[4]), argv[5]);
    if (argc == 5 && !strcmp(argv[1], "attr")) return cmd_attr(argv[2], argv[3], argv[4]);
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "flip")) return cmd_flip(argv[2], argv[3], argc == 5 ? atoll(argv[4]) : 1);
    if (argc == 4 && !strcmp(argv[1], "filters")) return cmd_filters(argv[2], argv[3]);
    fprintf(stderr, "usage: prog_h5poke set FILE DATASET INDEX VALUE | attr FILE ATTR VALUE | flip FILE DATASET [BYTE] | "
                    "filters FILE DATASET\n");
    return 2;
}
