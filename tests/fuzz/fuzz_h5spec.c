/* The structure-aware HDF5 model (fuzz_h5spec.h). Plain HDF5 calls only: this file is
 * linked without the trackers and never calls the project's check family. */
#include "fuzz_h5spec.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading ------------------------------------------------------------------------ */

static int type_of(hid_t t, size_t *strsize) {
    H5T_class_t c = H5Tget_class(t);
    size_t s = H5Tget_size(t);
    if (c == H5T_INTEGER) {
        int sign = H5Tget_sign(t) == H5T_SGN_2;
        if (s == 1) return sign ? H5S_I8 : H5S_U8;
        if (s == 2) return H5S_I16;
        if (s == 4) return H5S_I32;
        return sign ? H5S_I64 : H5S_U64;
    }
    if (c == H5T_FLOAT) return s == 4 ? H5S_F32 : H5S_F64;
    if (c == H5T_STRING && !H5Tis_variable_str(t)) {
        *strsize = s;
        return H5S_STR;
    }
    return -1;
}

static int kind_of(int type) {
    return type == H5S_STR ? H5S_KIND_STR : (type == H5S_F32 || type == H5S_F64) ? H5S_KIND_FLOAT : H5S_KIND_INT;
}

typedef struct {
    h5s_file *f;
    const char *obj;
} attr_ctx;

static herr_t read_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data) {
    attr_ctx *c = data;
    h5s_file *f = c->f;
    if (f->nat == H5S_MAX_ATTR) fuzz_die("h5spec: too many attributes");
    h5s_attr *a = &f->at[f->nat];
    memset(a, 0, sizeof *a);
    snprintf(a->obj, sizeof a->obj, "%s", c->obj);
    snprintf(a->name, sizeof a->name, "%s", name);
    hid_t at = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(at);
    size_t ss = 0;
    a->type = type_of(t, &ss);
    if (a->type < 0) fuzz_die("h5spec: attribute %s of unsupported type", name);
    if (a->type == H5S_STR) {
        if (ss >= sizeof a->sv) fuzz_die("h5spec: attribute %s too long", name);
        H5Aread(at, t, a->sv);
    } else if (kind_of(a->type) == H5S_KIND_FLOAT) {
        H5Aread(at, H5T_NATIVE_DOUBLE, &a->dv);
        a->iv = (int64_t)a->dv;
    } else {
        H5Aread(at, H5T_NATIVE_INT64, &a->iv);
        a->dv = (double)a->iv;
    }
    H5Tclose(t);
    H5Aclose(at);
    a->present = 1;
    f->nat++;
    return 0;
}

static void read_attrs(h5s_file *f, hid_t obj, const char *path) {
    attr_ctx c = {f, path};
    H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, NULL, read_attr, &c);
}

static herr_t visit(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    h5s_file *f = data;
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0) {
        H5Eclear2(H5E_DEFAULT);
        hid_t gr = H5Gopen2(g, name, H5P_DEFAULT);
        if (gr >= 0) {
            read_attrs(f, gr, name);
            H5Gclose(gr);
        }
        return 0;
    }
    if (f->nds == H5S_MAX_DS) fuzz_die("h5spec: too many datasets");
    h5s_ds *d = &f->ds[f->nds];
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "%s", name);
    hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds), dcpl = H5Dget_create_plist(ds);
    d->type = type_of(t, &d->strsize);
    if (d->type < 0) fuzz_die("h5spec: dataset %s of unsupported type", name);
    d->kind = kind_of(d->type);
    d->rank = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(sp, dims, NULL);
    size_t n = 1;
    for (int i = 0; i < d->rank; i++) d->dims[i] = dims[i], n *= dims[i];
    if (n > H5S_MAX_ELEMS) fuzz_die("h5spec: dataset %s too large for a seed", name);
    d->chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
    unsigned flags = 0;
    size_t nel = 0;
    d->fletcher = d->chunked && H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nel, NULL, 0, NULL, NULL) >= 0;
    H5Eclear2(H5E_DEFAULT);
    if (d->kind == H5S_KIND_STR) {
        d->n = n * d->strsize;
        uint8_t *bytes = calloc(d->n + 1, 1);
        if (n) H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes);
        d->iv = calloc(d->n + 1, sizeof *d->iv);
        for (size_t i = 0; i < d->n; i++) d->iv[i] = bytes[i];
        free(bytes);
    } else if (d->kind == H5S_KIND_FLOAT) {
        d->n = n;
        d->dv = calloc(n + 1, sizeof *d->dv);
        if (n) H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->dv);
    } else {
        d->n = n;
        d->iv = calloc(n + 1, sizeof *d->iv);
        if (n) H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->iv);
    }
    d->present = 1;
    f->nds++;
    read_attrs(f, ds, name);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(t);
    H5Dclose(ds);
    return 0;
}

void h5s_read(h5s_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (fid < 0) fuzz_die("h5spec: cannot open %s", path);
    read_attrs(f, fid, "/");
    H5Lvisit(fid, H5_INDEX_NAME, H5_ITER_INC, visit, f);
    H5Fclose(fid);
}

void h5s_copy(h5s_file *dst, const h5s_file *src) {
    memcpy(dst, src, sizeof *dst);
    for (int i = 0; i < src->nds; i++) {
        const h5s_ds *s = &src->ds[i];
        h5s_ds *d = &dst->ds[i];
        if (s->iv) {
            d->iv = malloc((s->n + 1) * sizeof *d->iv);
            memcpy(d->iv, s->iv, (s->n + 1) * sizeof *d->iv);
        }
        if (s->dv) {
            d->dv = malloc((s->n + 1) * sizeof *d->dv);
            memcpy(d->dv, s->dv, (s->n + 1) * sizeof *d->dv);
        }
    }
}

void h5s_free(h5s_file *f) {
    for (int i = 0; i < f->nds; i++) free(f->ds[i].iv), free(f->ds[i].dv);
    f->nds = f->nat = 0;
}

/* ---- writing -------------------------------------------------------------------------- */

static hid_t file_type(int type, size_t strsize) {
    switch (type) {
    case H5S_I8: return H5Tcopy(H5T_STD_I8LE);
    case H5S_U8: return H5Tcopy(H5T_STD_U8LE);
    case H5S_I16: return H5Tcopy(H5T_STD_I16LE);
    case H5S_I32: return H5Tcopy(H5T_STD_I32LE);
    case H5S_I64: return H5Tcopy(H5T_STD_I64LE);
    case H5S_U64: return H5Tcopy(H5T_STD_U64LE);
    case H5S_F32: return H5Tcopy(H5T_IEEE_F32LE);
    case H5S_F64: return H5Tcopy(H5T_IEEE_F64LE);
    default: {
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, strsize ? strsize : 1);
        return t;
    }
    }
}

static uint64_t prod(const h5s_ds *d, int from) {
    uint64_t p = 1;
    for (int i = from; i < d->rank; i++) p *= d->dims[i];
    return p;
}

static void write_ds(hid_t fid, const h5s_ds *d, hid_t lcpl) {
    if (d->as_group) {
        hid_t g = H5Gcreate2(fid, d->path, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        if (g >= 0) H5Gclose(g);
        return;
    }
    hsize_t dims[H5S_MAX_RANK], maxd[H5S_MAX_RANK], chunk[H5S_MAX_RANK];
    const int chunked = d->chunked && d->rank > 0;
    const uint64_t held_rows = d->rank > 0 ? d->dims[0] : 1;
    for (int i = 0; i < d->rank; i++) {
        dims[i] = d->dims[i];
        maxd[i] = chunked ? H5S_UNLIMITED : d->dims[i];
        chunk[i] = d->dims[i] < 1 ? 1 : d->dims[i] > 4096 ? 4096 : d->dims[i];
    }
    if (d->rank > 0 && d->big_rows > held_rows) dims[0] = d->big_rows, maxd[0] = chunked ? H5S_UNLIMITED : d->big_rows;
    hid_t sp = d->rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(d->rank, dims, maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunked) {
        /* At most 2^20 elements a chunk. */
        uint64_t c = 1;
        for (int i = d->rank - 1; i >= 0; i--) {
            if (c * chunk[i] > (1u << 20)) chunk[i] = (hsize_t)((1u << 20) / c) ? (hsize_t)((1u << 20) / c) : 1;
            c *= chunk[i];
        }
        H5Pset_chunk(dcpl, d->rank, chunk);
        if (d->fletcher) H5Pset_fletcher32(dcpl);
    }
    const size_t strsize = d->kind == H5S_KIND_STR ? d->strsize : 24;
    hid_t ft = file_type(d->type, strsize);
    hid_t ds = H5Dcreate2(fid, d->path, ft, sp, lcpl, dcpl, H5P_DEFAULT);
    const uint64_t elems = held_rows * prod(d, 1); // what the held values cover
    if (ds >= 0 && elems > 0 && sp >= 0) {
        hid_t fs = H5S_ALL, ms = H5S_ALL;
        if (d->rank > 0 && dims[0] != held_rows) {
            fs = H5Scopy(sp);
            hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
            for (int i = 0; i < d->rank; i++) count[i] = d->dims[i];
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
            ms = H5Screate_simple(d->rank, count, NULL);
        }
        if (d->type == H5S_STR) {
            char *buf = calloc(elems * strsize + 1, 1);
            for (uint64_t i = 0; i < elems; i++) {
                if (d->kind == H5S_KIND_STR)
                    for (size_t k = 0; k < strsize; k++) buf[i * strsize + k] = (char)d->iv[i * strsize + k];
                else if (d->kind == H5S_KIND_FLOAT)
                    snprintf(buf + i * strsize, strsize, "%.17g", d->dv[i]);
                else
                    snprintf(buf + i * strsize, strsize, "%lld", (long long)d->iv[i]);
            }
            H5Dwrite(ds, ft, ms, fs, H5P_DEFAULT, buf);
            free(buf);
        } else if (d->kind == H5S_KIND_FLOAT) {
            H5Dwrite(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, d->dv);
        } else {
            H5Dwrite(ds, H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, d->iv); // STR kind: one byte an element
        }
        if (fs != H5S_ALL) H5Sclose(fs);
        if (ms != H5S_ALL) H5Sclose(ms);
    }
    if (ds >= 0) H5Dclose(ds);
    H5Tclose(ft);
    H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
}

static void write_attr(hid_t fid, const h5s_attr *a) {
    hid_t obj = H5Oopen(fid, a->obj, H5P_DEFAULT);
    if (obj < 0) return;
    size_t len = strlen(a->sv);
    hid_t t = file_type(a->type, len + 1), sp = H5Screate(H5S_SCALAR);
    hid_t at = H5Acreate2(obj, a->name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (at >= 0) {
        if (a->type == H5S_STR) H5Awrite(at, t, a->sv);
        else if (kind_of(a->type) == H5S_KIND_FLOAT) H5Awrite(at, H5T_NATIVE_DOUBLE, &a->dv);
        else H5Awrite(at, H5T_NATIVE_INT64, &a->iv);
        H5Aclose(at);
    }
    H5Sclose(sp);
    H5Tclose(t);
    H5Oclose(obj);
}

int h5s_write(const h5s_file *f, const char *path) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (f->v18) H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18);
    hid_t fid = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (fid < 0) return 0;
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    for (int i = 0; i < f->nds; i++)
        if (f->ds[i].present) write_ds(fid, &f->ds[i], lcpl);
    for (int i = 0; i < f->nat; i++)
        if (f->at[i].present) write_attr(fid, &f->at[i]);
    H5Pclose(lcpl);
    H5Fclose(fid);
    H5Eclear2(H5E_DEFAULT);
    return 1;
}

/* ---- edits ----------------------------------------------------------------------------- */

static const int64_t k_int[] = {0, 1, -1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 100, 127, 128, 255, 256, 1023, 1024,
                                4095, 4096, 65535, 65536, 65599, 65600, 2147483647LL, -2147483647LL - 1, 2147483648LL,
                                4294967295LL, 4294967296LL, 1LL << 40, (1LL << 40) + 1, INT64_MAX, INT64_MIN, -2, -64,
                                -65600};
static const double k_dbl[] = {0, -0.0, 1, -1, 0.5, NAN, INFINITY, -INFINITY, 1e-45, 1e30, -1e30, 3.4028235e38, 1e39,
                               65535, 65599, 65600, 131134, 131135, -65599, -65600, 2147483648.0, 9.3e18};
#define NK_INT (sizeof k_int / sizeof k_int[0])
#define NK_DBL (sizeof k_dbl / sizeof k_dbl[0])

static size_t held_elems(const h5s_ds *d) { return d->n; }

/* Ranks up to HDF5's 32; MRCNN_FUZZ_MAX_RANK=N caps them (to look past a known rank bug). */
static int max_rank(void) {
    static int r = -1;
    if (r < 0) {
        const char *e = getenv("MRCNN_FUZZ_MAX_RANK");
        r = e ? atoi(e) : H5S_MAX_RANK;
        if (r < 0 || r > H5S_MAX_RANK) r = H5S_MAX_RANK;
    }
    return r;
}

/* Resizes the held values to rows (rank >= 1), repeating the last row (or zeros). */
static void set_rows(h5s_ds *d, uint64_t rows) {
    if (d->rank == 0) return;
    uint64_t row = prod(d, 1) * (d->kind == H5S_KIND_STR ? d->strsize : 1);
    if (row == 0 || rows * row > H5S_MAX_ELEMS) return;
    size_t n = (size_t)(rows * row);
    if (d->kind == H5S_KIND_FLOAT) {
        double *v = calloc(n + 1, sizeof *v);
        for (size_t i = 0; i < n; i++) v[i] = i < d->n ? d->dv[i] : d->n >= row ? d->dv[d->n - row + i % row] : 0;
        free(d->dv);
        d->dv = v;
    } else {
        int64_t *v = calloc(n + 1, sizeof *v);
        for (size_t i = 0; i < n; i++) v[i] = i < d->n ? d->iv[i] : d->n >= row ? d->iv[d->n - row + i % row] : 0;
        free(d->iv);
        d->iv = v;
    }
    d->n = n;
    d->dims[0] = rows;
}

static void set_rank(h5s_ds *d, int rank) {
    uint64_t total = d->kind == H5S_KIND_STR ? (d->strsize ? d->n / d->strsize : 0) : d->n;
    if (rank == 0) {
        /* One element. */
        if (total == 0) return;
        d->n = d->kind == H5S_KIND_STR ? d->strsize : 1;
        d->rank = 0;
        return;
    }
    d->rank = rank;
    d->dims[0] = total;
    for (int i = 1; i < rank; i++) d->dims[i] = 1;
}

static void set_cols(h5s_ds *d, uint64_t cols) {
    if (d->rank < 2 || d->kind == H5S_KIND_STR) return;
    uint64_t rows = d->dims[0], old = prod(d, 1);
    uint64_t rest = prod(d, 2);
    uint64_t ncols = cols * rest;
    if (rows * ncols > H5S_MAX_ELEMS) return;
    size_t n = (size_t)(rows * ncols);
    if (d->kind == H5S_KIND_FLOAT) {
        double *v = calloc(n + 1, sizeof *v);
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t c = 0; c < ncols && c < old; c++) v[r * ncols + c] = d->dv[r * old + c];
        free(d->dv);
        d->dv = v;
    } else {
        int64_t *v = calloc(n + 1, sizeof *v);
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t c = 0; c < ncols && c < old; c++) v[r * ncols + c] = d->iv[r * old + c];
        free(d->iv);
        d->iv = v;
    }
    d->n = n;
    d->dims[1] = cols;
}

static void set_value(h5s_ds *d, size_t i, int64_t iv, double dv) {
    if (!d->n) return;
    i %= d->n;
    if (d->kind == H5S_KIND_FLOAT) d->dv[i] = dv;
    else if (d->kind == H5S_KIND_STR) d->iv[i] = iv & 0xff;
    else d->iv[i] = iv;
}

void h5s_mutate(h5s_file **files, int nfiles, fuzz_bytes *b, int max_ops) {
    h5s_ds *ds[H5S_MAX_DS * 4];
    h5s_attr *at[H5S_MAX_ATTR * 4];
    int nds = 0, nat = 0;
    for (int k = 0; k < nfiles && k < 4; k++) {
        for (int i = 0; i < files[k]->nds; i++) ds[nds++] = &files[k]->ds[i];
        for (int i = 0; i < files[k]->nat; i++) at[nat++] = &files[k]->at[i];
    }
    for (int op_i = 0; op_i < max_ops && fuzz_more(b); op_i++) {
        uint8_t op = fuzz_u8(b) % 22;
        if (op < 16 && !nds) continue;
        if (op >= 16 && !nat) continue;
        h5s_ds *d = op < 16 ? ds[fuzz_u8(b) % nds] : NULL;
        h5s_attr *a = op >= 16 ? at[fuzz_u8(b) % nat] : NULL;
        switch (op) {
        case 0: { // set a value
            size_t i = fuzz_u16(b);
            uint64_t v = fuzz_u64(b);
            double dv;
            if (v & 1) memcpy(&dv, &v, sizeof dv);
            else dv = (double)(int32_t)(v >> 1) / 16;
            set_value(d, i, (int64_t)v, dv);
            break;
        }
        case 1:
        case 2: { // nudge a value
            size_t i = fuzz_u16(b);
            int8_t delta = (int8_t)fuzz_u8(b);
            if (!d->n) break;
            i %= d->n;
            if (d->kind == H5S_KIND_FLOAT) d->dv[i] += delta;
            else set_value(d, i, (int64_t)((uint64_t)d->iv[i] + (uint64_t)(int64_t)delta), 0);
            break;
        }
        case 3: { // an interesting value
            size_t i = fuzz_u16(b);
            uint8_t k = fuzz_u8(b);
            set_value(d, i, k_int[k % NK_INT], k_dbl[k % NK_DBL]);
            break;
        }
        case 4: // rows: a few more or fewer
            if (d->rank > 0) {
                int64_t r = (int64_t)d->dims[0] + (int8_t)fuzz_u8(b) % 5;
                set_rows(d, r < 0 ? 0 : (uint64_t)r);
            }
            break;
        case 5: // rows: any count
            if (d->rank > 0) set_rows(d, fuzz_u16(b) % 2048);
            break;
        case 6: d->type = fuzz_u8(b) % H5S_NTYPES; break;
        case 7: set_rank(d, fuzz_u8(b) % (max_rank() + 1)); break;
        case 8: d->present = 0; break;
        case 9: { // layout: contiguous, chunked, chunked + Fletcher32
            uint8_t l = fuzz_u8(b) % 3;
            d->chunked = l > 0;
            d->fletcher = l == 2;
            break;
        }
        case 10: d->as_group = 1; break;
        case 11: d->big_rows = (uint64_t)1 << (12 + fuzz_u8(b) % 29); break;
        case 12: set_cols(d, fuzz_u8(b) % 9); break;
        case 13:
        case 14: { // a run of bytes from the input
            size_t i = fuzz_u16(b);
            size_t len = fuzz_u8(b) % 32;
            for (size_t k = 0; k < len && fuzz_more(b); k++) {
                uint8_t v = fuzz_u8(b);
                if (d->n) set_value(d, (i + k) % d->n, v, v);
            }
            break;
        }
        case 15: // string size
            if (d->kind == H5S_KIND_STR && d->rank == 0) {
                size_t s = 1 + fuzz_u8(b) % 64;
                int64_t *v = calloc(s + 1, sizeof *v);
                memcpy(v, d->iv, sizeof *v * (s < d->n ? s : d->n));
                free(d->iv);
                d->iv = v;
                d->n = d->strsize = s;
            }
            break;
        case 16: { // attribute value
            uint64_t v = fuzz_u64(b);
            a->iv = (int64_t)v;
            if (v & 1) memcpy(&a->dv, &v, sizeof a->dv);
            else a->dv = (double)(int32_t)(v >> 1) / 16;
            break;
        }
        case 17: {
            int8_t delta = (int8_t)fuzz_u8(b);
            a->iv = (int64_t)((uint64_t)a->iv + (uint64_t)(int64_t)delta); // wraps, as the dataset nudge does
            a->dv += delta;
            break;
        }
        case 18: {
            uint8_t k = fuzz_u8(b);
            a->iv = k_int[k % NK_INT];
            a->dv = k_dbl[k % NK_DBL];
            break;
        }
        case 19: a->type = fuzz_u8(b) % H5S_NTYPES; break;
        case 20: a->present = 0; break;
        case 21: { // attribute string bytes
            size_t i = fuzz_u8(b) % (sizeof a->sv - 1);
            size_t len = fuzz_u8(b) % 16;
            for (size_t k = 0; k < len && i + k < sizeof a->sv - 1 && fuzz_more(b); k++) a->sv[i + k] = (char)fuzz_u8(b);
            break;
        }
        }
        (void)held_elems;
    }
}
