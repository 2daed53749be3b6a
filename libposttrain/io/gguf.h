/* GGUF v3 container: a strict reader and a durable writer.  Internal to
 * libposttrain; the model mapping (architectures, metadata, tokenizer,
 * tensor names) is in modelio/gguf_*.c.  See docs/gguf.md.
 *
 * File layout (little-endian): magic "GGUF", u32 version (3; 2 is read too),
 * u64 tensor count, u64 metadata count, the metadata key/value pairs, the
 * tensor infos (name, u32 n_dims, u64 ne[n_dims] with ne[0] the fastest
 * dimension, u32 ggml type, u64 offset into the data section), padding to
 * general.alignment (default 32), then the data section.  Strings are a u64
 * byte length then the bytes (no NUL).
 *
 * Reader: every byte is hostile.  pt__gguf_open() validates the whole header
 * before it returns: every count is bounded by the bytes left in the file
 * before anything is allocated, every length, product and offset is computed
 * with overflow checks (llama.cpp's GGUF CVEs came from unchecked 64-bit
 * products), keys are unique valid UTF-8 without NUL, strings are bounded,
 * arrays are not nested, tensor names are unique, n_dims is 1..4, every ne
 * is >= 1, each tensor's byte span (from its type's block size) lies inside
 * the data section, is aligned, and does not overlap another.  Violations
 * are PT_EFORMAT (PT_ERANGE for sizes beyond the limits below,
 * PT_EUNSUPPORTED for a version other than 2 or 3) with a message naming
 * the key or tensor and the rule.  Known quantised ggml types are accepted
 * in the directory (so `info` can describe a file) but pt__gguf_read_f32 on
 * them is PT_EUNSUPPORTED naming the type; unknown type numbers are
 * PT_EFORMAT.
 *
 * Writer: metadata in insertion order, tensors in insertion order, each
 * tensor's data aligned to 32 bytes (general.alignment is not written, as
 * llama.cpp's converter does not), streamed to a temporary file in the same
 * directory, fsynced and renamed into place (io/fileio.h): on any failure
 * nothing under the final name changes. */
#ifndef PT_IO_GGUF_H
#define PT_IO_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PT_GGUF_MAGIC "GGUF"
#define PT_GGUF_VERSION 3u
#define PT_GGUF_DEFAULT_ALIGNMENT 32u
#define PT_GGUF_MAX_DIMS 4
/* Limits (PT_ERANGE beyond them). */
#define PT_GGUF_MAX_KEY 65535u                    /* bytes in a key */
#define PT_GGUF_MAX_STRING ((uint64_t)1 << 30)    /* bytes in one string value */
#define PT_GGUF_MAX_ARRAY ((uint64_t)1 << 28)     /* elements in one array */
#define PT_GGUF_MAX_TENSORS ((uint64_t)1 << 20)
#define PT_GGUF_MAX_KV ((uint64_t)1 << 20)

/* Metadata value types (the numbers are the format's). */
typedef enum pt_gguf_type {
    PT_GGUF_UINT8 = 0,
    PT_GGUF_INT8 = 1,
    PT_GGUF_UINT16 = 2,
    PT_GGUF_INT16 = 3,
    PT_GGUF_UINT32 = 4,
    PT_GGUF_INT32 = 5,
    PT_GGUF_FLOAT32 = 6,
    PT_GGUF_BOOL = 7,
    PT_GGUF_STRING = 8,
    PT_GGUF_ARRAY = 9,
    PT_GGUF_UINT64 = 10,
    PT_GGUF_INT64 = 11,
    PT_GGUF_FLOAT64 = 12,
    PT_GGUF_TYPE_COUNT = 13
} pt_gguf_type;

/* ggml tensor types (the numbers are ggml's).  Only F32, F16 and BF16 are
 * read as floats and written; the others are known so that a file holding
 * them is described and refused by name. */
typedef enum pt_ggml_type {
    PT_GGML_F32 = 0,
    PT_GGML_F16 = 1,
    PT_GGML_Q4_0 = 2,
    PT_GGML_Q4_1 = 3,
    PT_GGML_Q5_0 = 6,
    PT_GGML_Q5_1 = 7,
    PT_GGML_Q8_0 = 8,
    PT_GGML_Q8_1 = 9,
    PT_GGML_Q2_K = 10,
    PT_GGML_Q3_K = 11,
    PT_GGML_Q4_K = 12,
    PT_GGML_Q5_K = 13,
    PT_GGML_Q6_K = 14,
    PT_GGML_Q8_K = 15,
    PT_GGML_IQ2_XXS = 16,
    PT_GGML_IQ2_XS = 17,
    PT_GGML_IQ3_XXS = 18,
    PT_GGML_IQ1_S = 19,
    PT_GGML_IQ4_NL = 20,
    PT_GGML_IQ3_S = 21,
    PT_GGML_IQ2_S = 22,
    PT_GGML_IQ4_XS = 23,
    PT_GGML_I8 = 24,
    PT_GGML_I16 = 25,
    PT_GGML_I32 = 26,
    PT_GGML_I64 = 27,
    PT_GGML_F64 = 28,
    PT_GGML_IQ1_M = 29,
    PT_GGML_BF16 = 30,
    PT_GGML_TQ1_0 = 34,
    PT_GGML_TQ2_0 = 35,
    PT_GGML_MXFP4 = 39,        /* ggml 2025-08: e8m0 scale + 16 bytes per 32 */
    PT_GGML_TYPE_END = 40      /* numbers at or above this are unknown */
} pt_ggml_type;

/* "F32", "Q4_K", ... or NULL for an unknown number. */
const char *pt__ggml_type_name(int type);
/* Elements per block and bytes per block (1 and 4 for F32); false for an
 * unknown or removed type number. */
bool pt__ggml_type_block(int type, uint64_t *block_elems, uint64_t *block_bytes);
/* F32, F16 or BF16: the types read as float and written from float. */
bool pt__ggml_type_is_float(int type);
/* "uint32", "string", ... or NULL. */
const char *pt__gguf_type_name(int type);
/* Bytes of one value of a fixed-size metadata type (1 for BOOL); 0 for
 * STRING, ARRAY and unknown numbers. */
size_t pt__gguf_type_size(int type);

/* A string inside the file (not NUL-terminated; may contain any byte). */
typedef struct pt_gguf_str {
    const char *ptr;
    uint64_t len;
} pt_gguf_str;

/* One metadata pair.  For a scalar, n == 1 and `data` points to the value
 * in host order and alignment (a pt_gguf_str for STRING, a uint8_t 0/1 for
 * BOOL).  For an ARRAY, elem_type is the element type, n the element
 * count and `data` an aligned host-order array of n elements (pt_gguf_str
 * for strings). */
typedef struct pt_gguf_kv {
    const char *key;          /* NUL-terminated, valid UTF-8 */
    pt_gguf_type type;
    pt_gguf_type elem_type;   /* arrays only */
    uint64_t n;
    const void *data;
} pt_gguf_kv;

typedef struct pt_gguf_tensor {
    const char *name;         /* NUL-terminated, valid UTF-8 */
    uint32_t ndim;            /* 1 .. 4 */
    uint64_t ne[PT_GGUF_MAX_DIMS]; /* ne[0] fastest; unused entries are 1 */
    int type;                 /* pt_ggml_type */
    uint64_t numel;
    uint64_t offset;          /* relative to the data section */
    uint64_t nbytes;
    const void *data;         /* into the file image; aligned to the file's alignment */
} pt_gguf_tensor;

typedef struct pt_gguf pt_gguf;

/* Open and validate a file (mmap, read-only).  PT_ENOTFOUND if absent,
 * PT_EIO if unreadable, PT_EFORMAT / PT_ERANGE / PT_EUNSUPPORTED if
 * invalid. */
int pt__gguf_open(pt_gguf **out, const char *path);
/* The same over a caller's buffer, which must outlive the handle. */
int pt__gguf_open_memory(pt_gguf **out, const void *buf, size_t len);
void pt__gguf_close(pt_gguf *g);

uint32_t pt__gguf_version(const pt_gguf *g);
uint32_t pt__gguf_alignment(const pt_gguf *g);
const char *pt__gguf_path(const pt_gguf *g);   /* NULL for memory */
/* File offset of the data section (the end of the header, padded to the
 * alignment; the file's length when it holds no tensors and no padding). */
uint64_t pt__gguf_data_offset(const pt_gguf *g);

size_t pt__gguf_kv_count(const pt_gguf *g);
const pt_gguf_kv *pt__gguf_kv_at(const pt_gguf *g, size_t i);
const pt_gguf_kv *pt__gguf_find_kv(const pt_gguf *g, const char *key);

/* Typed getters.  PT_ENOTFOUND "<key>: missing" when absent; PT_EFORMAT
 * "<key>: expected uint32, found string" on a wrong type.  The integer
 * getters accept any integer type whose value fits (PT_ERANGE otherwise);
 * the float getter accepts FLOAT32 and FLOAT64. */
int pt__gguf_get_u32(const pt_gguf *g, const char *key, uint32_t *out);
int pt__gguf_get_u64(const pt_gguf *g, const char *key, uint64_t *out);
int pt__gguf_get_i64(const pt_gguf *g, const char *key, int64_t *out);
int pt__gguf_get_f32(const pt_gguf *g, const char *key, float *out);
int pt__gguf_get_bool(const pt_gguf *g, const char *key, bool *out);
int pt__gguf_get_str(const pt_gguf *g, const char *key, pt_gguf_str *out);
/* An array of elem_type (PT_EFORMAT naming both types otherwise). */
int pt__gguf_get_arr(const pt_gguf *g, const char *key, pt_gguf_type elem_type,
                    const void **data, uint64_t *n);

size_t pt__gguf_tensor_count(const pt_gguf *g);
const pt_gguf_tensor *pt__gguf_tensor_at(const pt_gguf *g, size_t i);
const pt_gguf_tensor *pt__gguf_find_tensor(const pt_gguf *g, const char *name);
/* Convert a tensor's data to F32 (numel must equal t->numel, else
 * PT_ESHAPE).  F32, F16 and BF16 only; quantised or integer types are
 * PT_EUNSUPPORTED "tensor <name> has type Q4_K: quantised GGUF tensors
 * cannot be trained; convert the model to F32, F16 or BF16". */
int pt__gguf_read_f32(const pt_gguf_tensor *t, float *dst, size_t numel);

/* ---- writer ---------------------------------------------------------------- */

typedef struct pt_gguf_writer pt_gguf_writer;

int pt__gguf_writer_new(pt_gguf_writer **out);
void pt__gguf_writer_free(pt_gguf_writer *w);

/* Metadata, in the order added; a key added twice is PT_EINVAL. */
int pt__gguf_set_u8(pt_gguf_writer *w, const char *key, uint8_t v);
int pt__gguf_set_u32(pt_gguf_writer *w, const char *key, uint32_t v);
int pt__gguf_set_i32(pt_gguf_writer *w, const char *key, int32_t v);
int pt__gguf_set_u64(pt_gguf_writer *w, const char *key, uint64_t v);
int pt__gguf_set_f32(pt_gguf_writer *w, const char *key, float v);
int pt__gguf_set_bool(pt_gguf_writer *w, const char *key, bool v);
int pt__gguf_set_str(pt_gguf_writer *w, const char *key, const char *v);
int pt__gguf_set_str_n(pt_gguf_writer *w, const char *key, const char *v, size_t len);
/* A numeric or bool array (elem_type not STRING or ARRAY); data copied. */
int pt__gguf_set_arr(pt_gguf_writer *w, const char *key, pt_gguf_type elem_type,
                    const void *data, uint64_t n);
/* A string array; lens may be NULL (strlen of each).  Copied. */
int pt__gguf_set_arr_str(pt_gguf_writer *w, const char *key, const char *const *strs,
                        const size_t *lens, uint64_t n);

/* A tensor from F32 values, converted to `type` (F32, F16 or BF16, round to
 * nearest even) while writing.  ne[0] is the fastest dimension (a Hugging
 * Face [rows, cols] matrix is ne = {cols, rows}).  `src` is borrowed: it
 * must stay valid until pt__gguf_write returns.  A duplicate name is
 * PT_EINVAL. */
int pt__gguf_add_tensor_f32(pt_gguf_writer *w, const char *name, uint32_t ndim,
                           const uint64_t *ne, int type, const float *src);
/* A tensor whose bytes are already in `type` (any known type; nbytes must
 * match the shape, else PT_ESHAPE).  Borrowed likewise. */
int pt__gguf_add_tensor_raw(pt_gguf_writer *w, const char *name, uint32_t ndim,
                           const uint64_t *ne, int type, const void *bytes, uint64_t nbytes);

/* Write the file atomically (see above).  The writer may be written again
 * or freed afterwards. */
int pt__gguf_write(pt_gguf_writer *w, const char *path);

#endif
