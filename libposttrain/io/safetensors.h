/* Strict safetensors reader (over mmap or a caller's buffer) and durable writer.
 * Internal to libposttrain; see docs/safetensors.md for the rules enforced.
 *
 * Reader: every byte of the file is treated as hostile.  pt__st_open() validates
 * the whole header (length bound, UTF-8, strict JSON, closed dtype set, integral
 * numbers <= 2^53, shape x dtype size == byte span, contiguous offsets from 0
 * to the exact end of the file, no duplicate names, no unknown keys,
 * __metadata__ a string->string map) before it hands out a single tensor.
 * Violations are PT_EFORMAT (PT_ERANGE for sizes beyond limits) with a message
 * naming the tensor and the rule.  Tensor data pointers point into the mapping
 * (or the caller's buffer) and may be unaligned; use pt__st_read_f32() or memcpy.
 *
 * Writer: tensors sorted by name, header padded with spaces to a multiple of
 * 8, written to a temporary file in the same directory, fsynced, renamed into
 * place and the directory fsynced.  On failure nothing under the final name
 * changes and the temporary file is removed. */
#ifndef PT_IO_SAFETENSORS_H
#define PT_IO_SAFETENSORS_H

#include "core/half.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The closed set of dtype strings the format defines.  Only F32, F16 and BF16
 * load as float; the rest are known (validated, sizes checked) but reading
 * them as float is PT_EUNSUPPORTED. */
typedef enum {
    PT_ST_F32 = 0,
    PT_ST_F16,
    PT_ST_BF16,
    PT_ST_F64,
    PT_ST_I64,
    PT_ST_I32,
    PT_ST_I16,
    PT_ST_I8,
    PT_ST_U8,
    PT_ST_BOOL,
    PT_ST_U16,
    PT_ST_U32,
    PT_ST_U64,
    PT_ST_F8_E5M2,
    PT_ST_F8_E4M3,
    PT_ST_F8_E8M0,
    PT_ST_C64,
    PT_ST_F4,      /* 4 bits per element, packed */
    PT_ST_F6_E2M3, /* 6 bits per element, packed */
    PT_ST_F6_E3M2, /* 6 bits per element, packed */
    PT_ST_DTYPE_COUNT
} pt_st_dtype;

#define PT_ST_MAX_DIMS 8
/* The reference implementation's cap on the header length N. */
#define PT_ST_MAX_HEADER ((uint64_t)100000000)
/* Largest integer a header number may hold (exactly representable in a double). */
#define PT_ST_MAX_INT ((uint64_t)1 << 53)

typedef struct pt_st_tensor {
    const char *name;             /* NUL-terminated, valid UTF-8, no NUL inside */
    int dtype;                    /* pt_st_dtype */
    int ndim;                     /* 0 (scalar) .. PT_ST_MAX_DIMS */
    int64_t shape[PT_ST_MAX_DIMS];
    size_t numel;                 /* product of shape (1 for a scalar) */
    size_t nbytes;                /* == data_offsets[1] - data_offsets[0] */
    uint64_t offset;              /* data_offsets[0], relative to the data area */
    const void *data;             /* into the mapping; possibly unaligned */
    bool mapped;                  /* data is in a file mapping (pt__st_open): once
                                   * pt__st_read_f32 has read it, its pages are
                                   * dropped from the process (read again from
                                   * the page cache if needed), so a load does
                                   * not hold the file and the weights at once */
} pt_st_tensor;

typedef struct pt_st_file pt_st_file;

/* Open and validate a file (mmap, read-only).  PT_ENOTFOUND if absent, PT_EIO
 * if unreadable, PT_EFORMAT/PT_ERANGE/PT_EUNSUPPORTED if invalid. */
int pt__st_open(pt_st_file **out, const char *path);
/* Validate a caller's buffer without copying it; the buffer must outlive the
 * handle.  Messages say "<memory>" where pt__st_open would name the path. */
int pt__st_open_memory(pt_st_file **out, const void *buffer, size_t len);
void pt__st_close(pt_st_file *f);

/* Path given to pt__st_open ("<memory>" for pt__st_open_memory). */
const char *pt__st_path(const pt_st_file *f);
size_t pt__st_count(const pt_st_file *f);
/* Tensors in file (offset) order; NULL if i >= count. */
const pt_st_tensor *pt__st_tensor_at(const pt_st_file *f, size_t i);
/* NULL if absent (no error is set). */
const pt_st_tensor *pt__st_find(const pt_st_file *f, const char *name);
/* Size of the header JSON (N) and of the data area, in bytes. */
uint64_t pt__st_header_size(const pt_st_file *f);
uint64_t pt__st_data_size(const pt_st_file *f);

/* Read a F32, F16 or BF16 tensor as F32 into dst (numel floats).  Other
 * dtypes: PT_EUNSUPPORTED naming the tensor and dtype; numel different from
 * the tensor's: PT_ESHAPE. */
int pt__st_read_f32(const pt_st_tensor *tensor, float *dst, size_t numel);

/* __metadata__: value for key, or NULL (no error set). */
const char *pt__st_metadata(const pt_st_file *f, const char *key);
size_t pt__st_metadata_count(const pt_st_file *f);
/* i-th pair in header order; returns PT_EINVAL if i is out of range. */
int pt__st_metadata_at(const pt_st_file *f, size_t i, const char **key, const char **value);

/* Dtype helpers.  name: "F32", ...; NULL/-1 for unknown. */
const char *pt__st_dtype_name(int dtype);
int pt__st_dtype_from_name(const char *name);
/* Bits per element (4, 6, 8, 16, 32 or 64; C64 is 64), 0 for unknown. */
unsigned pt__st_dtype_bits(int dtype);

/* The scalar F16 and BF16 conversions are core/half.h's. */

/* Writer. */
typedef struct {
    const char *name;
    int dtype;                    /* pt_st_dtype */
    int ndim;                     /* 0 .. PT_ST_MAX_DIMS */
    int64_t shape[PT_ST_MAX_DIMS];
    const void *data;             /* numel x dtype bytes, little-endian; may be NULL if 0 bytes */
} pt_st_write_tensor;

/* Write n tensors (any order in; sorted by name out) and n_metadata_pairs
 * key/value string pairs (metadata_kv has 2 * n_metadata_pairs entries; may be
 * NULL when 0).  Invalid arguments (duplicate or NULL names, "__metadata__" as
 * a tensor name, bad dtype/shape, invalid UTF-8) are PT_EINVAL; a full disk
 * PT_ENOSPC; other I/O failures PT_EIO naming the path. */
int pt__st_write(const char *path, const pt_st_write_tensor *tensors, size_t n,
                const char *const *metadata_kv, size_t n_metadata_pairs);

#endif
