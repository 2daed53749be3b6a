/* libFuzzer harness for the strict safetensors reader: open the input from
 * memory and, if it validates, check it is self-consistent and read every
 * tensor (F32/F16/BF16 as float into a buffer sized from the validated shape;
 * other dtypes must be refused with PT_EUNSUPPORTED). */
#include "core/core.h"
#include "io/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy of exactly `size` bytes so ASan flags any overread. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    pt_st_file *f = NULL;
    int st = pt__st_open_memory(&f, size ? buf : NULL, size);
    if (st != PT_OK) {
        if (f != NULL || st >= 0 || pt_last_error()[0] == '\0')
            abort(); /* a failure must be clean and explained */
        free(buf);
        return 0;
    }
    uint64_t expect = 0;
    for (size_t i = 0; i < pt__st_count(f); i++) {
        const pt_st_tensor *t = pt__st_tensor_at(f, i);
        if (t->offset != expect || pt__st_find(f, t->name) != t)
            abort();
        expect += t->nbytes;
        const uint8_t *d = t->data;
        if (d < buf + 8 + pt__st_header_size(f) || d + t->nbytes > buf + size)
            abort();
        size_t numel = 1;
        for (int k = 0; k < t->ndim; k++)
            numel *= (size_t)t->shape[k];
        if (numel != t->numel)
            abort();
        if (t->dtype == PT_ST_F32 || t->dtype == PT_ST_F16 || t->dtype == PT_ST_BF16) {
            float *out = malloc(numel ? numel * sizeof(float) : 1);
            if (!out)
                abort();
            if (pt__st_read_f32(t, out, numel) != PT_OK)
                abort();
            free(out);
        } else if (pt__st_read_f32(t, NULL, numel) != PT_EUNSUPPORTED) {
            abort();
        }
    }
    if (expect != pt__st_data_size(f))
        abort();
    for (size_t i = 0; i < pt__st_metadata_count(f); i++) {
        const char *k, *v;
        if (pt__st_metadata_at(f, i, &k, &v) != PT_OK || pt__st_metadata(f, k) == NULL)
            abort();
    }
    pt__st_close(f);
    free(buf);
    return 0;
}
