// test/fixture.h — reads the named-tensor archive that dev/reference.py writes (ref_out.bin).
//
// Format, all little-endian:
//   char magic[4] = "ZTFX", int32 version = 1, int32 count, then `count` entries of
//   char name[64] (NUL-padded), int32 dtype (0 float32, 1 int32), int32 ndim (1..4),
//   int32 dims[4] (unused = 1), then prod(dims) elements of 4 bytes.
// fixture_load reads the whole archive into memory, checking every count and size against the
// bytes actually left in the file, so a truncated or corrupt file is an error that names the file,
// never a crash or a huge allocation.
// Limits: little-endian hosts only (checked at run time); every tensor is held in memory (the
// fixtures are a few hundred KB).
// defines: FixtureTensor, Fixture, FIXTURE_F32, FIXTURE_I32, fixture_load, fixture_get, fixture_free
#ifndef ZT_FIXTURE_H
#define ZT_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FIXTURE_F32 = 0, FIXTURE_I32 = 1 };  // FixtureTensor.dtype

// One tensor: data is float* (FIXTURE_F32) or int32_t* (FIXTURE_I32) holding n = prod(dims)
// elements, row-major in dims[0..ndim).
typedef struct { char name[64]; int dtype; int ndim; int dims[4]; int64_t n; void* data; } FixtureTensor;
typedef struct { int count; FixtureTensor* t; } Fixture;  // t[count], in file order

#ifdef __GNUC__
__attribute__((format(printf, 4, 5)))
#endif
static inline void fixture_error_(char* err, size_t errlen, const char* path, const char* fmt, ...) {
    if (!err || errlen == 0) return;
    int k = snprintf(err, errlen, "%s: ", path);
    if (k < 0 || (size_t)k >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

// Frees every tensor and the table; f is left empty (safe to call twice).
static inline void fixture_free(Fixture* f) {
    if (!f) return;
    for (int i = 0; i < f->count; i++) free(f->t[i].data);
    free(f->t);
    f->count = 0;
    f->t = NULL;
}

// Loads the archive at path into f. Returns 0 on success; on failure returns -1, leaves f empty
// and writes a message that starts with the path into err (may be NULL).
static inline int fixture_load(Fixture* f, const char* path, char* err, size_t errlen) {
    const int32_t version_expected = 1;
    const int64_t entry_header_bytes = 64 + 6 * 4;  // name, dtype, ndim, dims[4]
    f->count = 0;
    f->t = NULL;
    const uint32_t one = 1;
    if (*(const unsigned char*)&one != 1) {
        fixture_error_(err, errlen, path, "big-endian host; the archive is little-endian");
        return -1;
    }
    FILE* fp = fopen(path, "rb");
    if (!fp) {
        fixture_error_(err, errlen, path, "cannot open (HINT: run dev/reference.py --out test/fixtures)");
        return -1;
    }
    int64_t left = 0;  // bytes not yet read
    if (fseek(fp, 0, SEEK_END) != 0 || (left = (int64_t)ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        fixture_error_(err, errlen, path, "cannot determine the file size");
        fclose(fp);
        return -1;
    }

    char magic[4];
    int32_t head[2];  // version, count
    if (left < 12 || fread(magic, 1, 4, fp) != 4 || fread(head, 4, 2, fp) != 2) {
        fixture_error_(err, errlen, path, "too short for the archive header (%lld bytes)", (long long)left);
        goto fail;
    }
    left -= 12;
    if (memcmp(magic, "ZTFX", 4) != 0) {
        fixture_error_(err, errlen, path, "bad magic (not a ZTFX archive)");
        goto fail;
    }
    if (head[0] != version_expected) {
        fixture_error_(err, errlen, path, "version %d, expected %d", (int)head[0], (int)version_expected);
        goto fail;
    }
    if (head[1] < 0 || head[1] > left / entry_header_bytes) {
        fixture_error_(err, errlen, path, "count %d does not fit in the file", (int)head[1]);
        goto fail;
    }
    f->t = (FixtureTensor*)calloc(head[1] > 0 ? (size_t)head[1] : 1, sizeof(FixtureTensor));
    if (!f->t) {
        fixture_error_(err, errlen, path, "out of memory");
        goto fail;
    }

    for (int i = 0; i < head[1]; i++) {
        FixtureTensor* t = &f->t[i];
        int32_t meta[6];  // dtype, ndim, dims[4]
        if (left < entry_header_bytes || fread(t->name, 1, 64, fp) != 64 || fread(meta, 4, 6, fp) != 6) {
            fixture_error_(err, errlen, path, "truncated in the header of entry %d", i);
            goto fail;
        }
        left -= entry_header_bytes;
        if (memchr(t->name, 0, 64) == NULL) {
            fixture_error_(err, errlen, path, "entry %d: name is not NUL-terminated", i);
            goto fail;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(f->t[j].name, t->name) == 0) {
                fixture_error_(err, errlen, path, "entry %d: duplicate name '%s'", i, t->name);
                goto fail;
            }
        }
        t->dtype = meta[0];
        t->ndim = meta[1];
        if (t->dtype != FIXTURE_F32 && t->dtype != FIXTURE_I32) {
            fixture_error_(err, errlen, path, "'%s': unknown dtype %d", t->name, t->dtype);
            goto fail;
        }
        if (t->ndim < 1 || t->ndim > 4) {
            fixture_error_(err, errlen, path, "'%s': ndim %d not in 1..4", t->name, t->ndim);
            goto fail;
        }
        t->n = 1;
        for (int d = 0; d < 4; d++) {
            t->dims[d] = meta[2 + d];
            if (d < t->ndim ? t->dims[d] < 1 : t->dims[d] != 1) {
                fixture_error_(err, errlen, path, "'%s': bad dims [%d %d %d %d] for ndim %d", t->name,
                               meta[2], meta[3], meta[4], meta[5], t->ndim);
                goto fail;
            }
            if (t->dims[d] > (left / 4) / t->n) {  // i.e. n * dims[d] > left/4, without overflow
                fixture_error_(err, errlen, path, "'%s': dims [%d %d %d %d] need more than the %lld bytes left"
                               " (truncated?)", t->name, meta[2], meta[3], meta[4], meta[5], (long long)left);
                goto fail;
            }
            t->n *= t->dims[d];
        }
        t->data = malloc((size_t)t->n * 4);
        f->count = i + 1;  // from here on fixture_free owns t->data
        if (!t->data || fread(t->data, 4, (size_t)t->n, fp) != (size_t)t->n) {
            fixture_error_(err, errlen, path, "'%s': cannot read %lld elements", t->name, (long long)t->n);
            goto fail;
        }
        left -= t->n * 4;
    }
    if (left != 0) {
        fixture_error_(err, errlen, path, "%lld trailing bytes after the last entry", (long long)left);
        goto fail;
    }
    f->count = head[1];
    fclose(fp);
    return 0;

fail:
    fclose(fp);
    fixture_free(f);
    return -1;
}

// The tensor called name, or NULL if the archive has none.
static inline const FixtureTensor* fixture_get(const Fixture* f, const char* name) {
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

#endif // ZT_FIXTURE_H
