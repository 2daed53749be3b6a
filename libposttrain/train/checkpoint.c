#include "train/checkpoint.h"

#include "core/core.h"
#include "io/fileio.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "train/optimizer.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_FORMAT "libposttrain-checkpoint"
#define CKPT_VERSION 1
#define MAX_STATE_JSON (64u << 20)

/* Remove a directory that holds only plain files (our temporary checkpoint). */
static void remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char *p = pt__path_join(dir, e->d_name);
            if (p) {
                unlink(p);
                free(p);
            }
        }
        closedir(d);
    }
    rmdir(dir);
}

/* The first non-finite value among what a checkpoint holds: the trainable
 * tensors and the optimizer moments (PT_ENONFINITE naming it). */
static int first_nonfinite(const float *x, size_t n, size_t *at)
{
    for (size_t j = 0; j < n; j++)
        if (!isfinite(x[j])) {
            *at = j;
            return 1;
        }
    return 0;
}

static int check_finite(const pt_model *model, pt_optimizer *opt, const char *dir)
{
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    size_t count = pt_model_tensor_count(model), off = 0, at = 0;
    for (size_t i = 0; i < count; i++) {
        const pt_tensor_ref *r = pt__model_tensor(model, i);
        if (!r->trainable)
            continue;
        const char *what = NULL;
        if (first_nonfinite(r->data, r->numel, &at))
            what = "tensor";
        else if (off + r->numel <= sv.numel_total && first_nonfinite(sv.m + off, r->numel, &at))
            what = sv.v ? "the first moment of tensor" : "the momentum of tensor";
        else if (sv.v && off + r->numel <= sv.numel_total && first_nonfinite(sv.v + off, r->numel, &at))
            what = "the second moment of tensor";
        if (what)
            return pt__err(PT_ENONFINITE, "pt_checkpoint_save %s: %s '%s' holds a non-finite value at "
                          "element %zu; a non-finite state is not saved (nothing was written)",
                          dir, what, r->name, at);
        off += r->numel;
    }
    return PT_OK;
}

static int write_weights(const char *path, const pt_model *model)
{
    size_t count = pt_model_tensor_count(model), n = 0;
    pt_st_write_tensor *t = pt__calloc(count ? count : 1, sizeof *t);
    if (!t)
        return PT_ENOMEM;
    for (size_t i = 0; i < count; i++) {
        const pt_tensor_ref *r = pt__model_tensor(model, i);
        if (!r->trainable)
            continue;
        t[n].name = r->name;
        t[n].dtype = PT_ST_F32;
        t[n].ndim = r->ndim;
        t[n].shape[0] = r->shape[0];
        t[n].shape[1] = r->shape[1];
        t[n].data = r->data;
        n++;
    }
    const char *meta[] = { "format", "pt" };
    int st = pt__st_write(path, t, n, meta, 1);
    free(t);
    return st;
}

static int write_optimizer(const char *path, pt_optimizer *opt, const pt_model *model)
{
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    size_t count = pt_model_tensor_count(model), n = 0, off = 0;
    pt_st_write_tensor *t = pt__calloc(2 * (count ? count : 1), sizeof *t);
    char **names = pt__calloc(2 * (count ? count : 1), sizeof *names);
    int st = PT_OK;
    if (!t || !names) {
        st = PT_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < count; i++) {
        const pt_tensor_ref *r = pt__model_tensor(model, i);
        if (!r->trainable)
            continue;
        for (int k = 0; k < (sv.v ? 2 : 1); k++) {
            const char *prefix = k == 0 ? (sv.v ? "exp_avg." : "momentum_buffer.") : "exp_avg_sq.";
            size_t len = strlen(prefix) + strlen(r->name) + 1;
            names[n] = pt__malloc(len);
            if (!names[n]) {
                st = PT_ENOMEM;
                goto done;
            }
            snprintf(names[n], len, "%s%s", prefix, r->name);
            t[n].name = names[n];
            t[n].dtype = PT_ST_F32;
            t[n].ndim = r->ndim;
            t[n].shape[0] = r->shape[0];
            t[n].shape[1] = r->shape[1];
            t[n].data = (k == 0 ? sv.m : sv.v) + off;
            n++;
        }
        off += r->numel;
    }
    if (off != sv.numel_total) {
        st = pt__err(PT_ESTATE, "checkpoint: the optimizer covers %zu values but the model's trainable "
                               "tensors hold %zu (was the optimizer made for this model?)",
                    sv.numel_total, off);
        goto done;
    }
    st = pt__st_write(path, t, n, NULL, 0);
done:
    if (names)
        for (size_t i = 0; i < 2 * (count ? count : 1); i++)
            free(names[i]);
    free(names);
    free(t);
    return st;
}

static int write_state(const char *path, pt_optimizer *opt, const char *extra_json)
{
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    const pt_optimizer_options *o = pt__optimizer_options_of(opt);
    cJSON *root = cJSON_CreateObject();
    cJSON *jo = cJSON_AddObjectToObject(root, "optimizer");
    if (!root || !jo) {
        cJSON_Delete(root);
        return pt__err(PT_ENOMEM, "checkpoint: out of memory building %s", PT_CKPT_STATE);
    }
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)sv.step);
    cJSON_AddStringToObject(root, "step", buf); /* strings: exact 64-bit values */
    snprintf(buf, sizeof buf, "%lld", (long long)sv.skipped);
    cJSON_AddStringToObject(root, "skipped_steps", buf);
    cJSON_AddStringToObject(jo, "type", pt_optimizer_type_name(o->type));
    cJSON_AddNumberToObject(jo, "lr", o->lr);
    cJSON_AddNumberToObject(jo, "weight_decay", o->weight_decay);
    cJSON_AddNumberToObject(jo, "numel", (double)sv.numel_total);
    /* The schedule, so that a resumed run uses the learning rates the
     * uninterrupted one would (numbers print exactly: cJSON round-trips). */
    cJSON *js = cJSON_AddObjectToObject(jo, "schedule");
    if (!js) {
        cJSON_Delete(root);
        return pt__err(PT_ENOMEM, "checkpoint: out of memory building %s", PT_CKPT_STATE);
    }
    cJSON_AddStringToObject(js, "type", pt_schedule_type_name(o->schedule));
    snprintf(buf, sizeof buf, "%lld", (long long)o->warmup_steps);
    cJSON_AddStringToObject(js, "warmup_steps", buf);
    snprintf(buf, sizeof buf, "%lld", (long long)o->total_steps);
    cJSON_AddStringToObject(js, "total_steps", buf);
    cJSON_AddNumberToObject(js, "min_lr_ratio", o->min_lr_ratio);
    if (extra_json && *extra_json) {
        cJSON *extra = cJSON_Parse(extra_json);
        if (!extra) {
            cJSON_Delete(root);
            return pt__err(PT_EINVAL, "checkpoint: the host's extra state is not valid JSON");
        }
        cJSON_AddItemToObject(root, "host", extra);
    }
    char *text = pt__json_print(root, true); /* the host's numbers exactly */
    cJSON_Delete(root);
    if (!text)
        return pt__err(PT_ENOMEM, "checkpoint: out of memory printing %s", PT_CKPT_STATE);
    int st = pt__write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

static int write_manifest(const char *dir)
{
    static const char *files[] = { PT_CKPT_WEIGHTS, PT_CKPT_OPTIMIZER, PT_CKPT_STATE };
    cJSON *root = cJSON_CreateObject();
    cJSON *jf = cJSON_AddObjectToObject(root, "files");
    if (!root || !jf) {
        cJSON_Delete(root);
        return pt__err(PT_ENOMEM, "checkpoint: out of memory building the manifest");
    }
    cJSON_AddStringToObject(root, "format", CKPT_FORMAT);
    cJSON_AddNumberToObject(root, "version", CKPT_VERSION);
    cJSON_AddStringToObject(root, "library", PT_VERSION_STRING);
    int st = PT_OK;
    for (size_t i = 0; i < sizeof files / sizeof files[0] && !st; i++) {
        char *p = pt__path_join(dir, files[i]);
        if (!p) {
            st = PT_ENOMEM;
            break;
        }
        uint8_t digest[32];
        char hex[65];
        struct stat sb;
        if (stat(p, &sb) != 0) {
            st = pt__io_errno(errno, "stat", p);
        } else if (!(st = pt__sha256_file(p, digest))) {
            pt__sha256_hex(digest, hex);
            cJSON *e = cJSON_AddObjectToObject(jf, files[i]);
            char sz[32];
            snprintf(sz, sizeof sz, "%lld", (long long)sb.st_size);
            cJSON_AddStringToObject(e, "sha256", hex);
            cJSON_AddStringToObject(e, "bytes", sz);
        }
        free(p);
    }
    if (!st) {
        char *text = cJSON_Print(root);
        char *p = pt__path_join(dir, PT_CKPT_MANIFEST);
        if (!text || !p)
            st = pt__err(PT_ENOMEM, "checkpoint: out of memory writing the manifest");
        else
            st = pt__write_file_atomic(p, text, strlen(text));
        free(text);
        free(p);
    }
    cJSON_Delete(root);
    return st;
}

static int checkpoint_save(const pt_model *model, pt_optimizer *opt, const char *host_json, const char *dir);

int pt_checkpoint_save(const pt_model *model, pt_optimizer *opt, const char *host_json, const char *dir)
{
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(opt);
    PT_CHECK_NULL(dir);
    PT_CHECK_ARG(*dir, dir, "is empty");
    int st = pt__optimizer_take(opt, __func__);
    if (st)
        return st;
    st = checkpoint_save(model, opt, host_json, dir);
    pt__optimizer_give(opt);
    return st;
}

static int checkpoint_save(const pt_model *model, pt_optimizer *opt, const char *host_json, const char *dir)
{
    int cst = pt__optimizer_check_model(opt, model, "pt_checkpoint_save");
    if (cst)
        return cst;
    struct stat sb;
    if (stat(dir, &sb) == 0)
        return pt__err(PT_ESTATE, "pt_checkpoint_save: %s already exists (checkpoints are never overwritten)", dir);
    int fin = check_finite(model, opt, dir);
    if (fin)
        return fin;
    size_t n = strlen(dir) + 32;
    char *tmp = pt__malloc(n);
    if (!tmp)
        return PT_ENOMEM;
    snprintf(tmp, n, "%s.tmp-%ld", dir, (long)getpid());
    remove_flat_dir(tmp); /* leftovers of an earlier crash of this pid */
    if (mkdir(tmp, 0755) != 0) {
        int st = pt__io_errno(errno, "mkdir", tmp);
        free(tmp);
        return st;
    }
    char *pw = pt__path_join(tmp, PT_CKPT_WEIGHTS), *po = pt__path_join(tmp, PT_CKPT_OPTIMIZER),
         *ps = pt__path_join(tmp, PT_CKPT_STATE);
    int st = (!pw || !po || !ps) ? PT_ENOMEM : PT_OK;
    if (!st)
        st = write_weights(pw, model);
    if (!st)
        st = write_optimizer(po, opt, model);
    if (!st)
        st = write_state(ps, opt, host_json);
    if (!st)
        st = write_manifest(tmp);
    if (!st)
        st = pt__fsync_dir(tmp);
    if (!st && rename(tmp, dir) != 0)
        st = pt__io_errno(errno, "rename", dir);
    if (!st)
        st = pt__fsync_parent_dir(dir);
    if (st) {
        pt__err_prefix(st, "pt_checkpoint_save %s", dir);
        remove_flat_dir(tmp);
    }
    free(pw);
    free(po);
    free(ps);
    free(tmp);
    return st;
}

static const char *manifest_string(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int pt__checkpoint_verify(const char *dir)
{
    PT_CHECK_NULL(dir);
    char *mp = pt__path_join(dir, PT_CKPT_MANIFEST);
    if (!mp)
        return PT_ENOMEM;
    char *text;
    size_t len;
    int st = pt__read_file(&text, &len, mp, 1 << 20);
    free(mp);
    if (st == PT_ENOTFOUND)
        return pt__err(PT_EFORMAT, "checkpoint %s has no %s: it is incomplete or not a checkpoint", dir,
                      PT_CKPT_MANIFEST);
    if (st)
        return st;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const char *fmt = root ? manifest_string(root, "format") : NULL;
    const cJSON *files = root ? cJSON_GetObjectItemCaseSensitive(root, "files") : NULL;
    if (!fmt || strcmp(fmt, CKPT_FORMAT) || !cJSON_IsObject(files)) {
        cJSON_Delete(root);
        return pt__err(PT_EFORMAT, "checkpoint %s: %s is not a libposttrain manifest", dir, PT_CKPT_MANIFEST);
    }
    static const char *required[] = { PT_CKPT_WEIGHTS, PT_CKPT_OPTIMIZER, PT_CKPT_STATE };
    for (size_t i = 0; i < 3 && !st; i++)
        if (!cJSON_GetObjectItemCaseSensitive(files, required[i]))
            st = pt__err(PT_EFORMAT, "checkpoint %s: the manifest does not list %s", dir, required[i]);
    const cJSON *e;
    cJSON_ArrayForEach(e, files)
    {
        if (st)
            break;
        const char *want = manifest_string(e, "sha256"), *bytes = manifest_string(e, "bytes");
        if (!want || !bytes || strchr(e->string, '/') || e->string[0] == '.') {
            st = pt__err(PT_EFORMAT, "checkpoint %s: bad manifest entry '%s'", dir, e->string);
            break;
        }
        char *p = pt__path_join(dir, e->string);
        if (!p) {
            st = PT_ENOMEM;
            break;
        }
        struct stat sb;
        uint8_t digest[32];
        char hex[65];
        if (stat(p, &sb) != 0) {
            st = pt__err(PT_ECHECKSUM, "checkpoint %s: %s is missing", dir, e->string);
        } else if (strtoll(bytes, NULL, 10) != (long long)sb.st_size) {
            st = pt__err(PT_ECHECKSUM, "checkpoint %s: %s is %lld bytes, the manifest says %s", dir, e->string,
                        (long long)sb.st_size, bytes);
        } else if (!(st = pt__sha256_file(p, digest))) {
            pt__sha256_hex(digest, hex);
            if (strcmp(hex, want))
                st = pt__err(PT_ECHECKSUM, "checkpoint %s: %s has SHA-256 %s, the manifest says %s", dir,
                            e->string, hex, want);
        }
        free(p);
    }
    cJSON_Delete(root);
    return st;
}

static int load_weights_file(const char *path, pt_model *model);

/* The trainable tensors from path; the BF16 copies follow (even after a
 * failure part way, which may have written some). */
static int load_weights(const char *path, pt_model *model)
{
    int st = load_weights_file(path, model);
    pt_model_weights_changed(model);
    return st;
}

static int load_weights_file(const char *path, pt_model *model)
{
    pt_st_file *f;
    int st = pt__st_open(&f, path);
    if (st)
        return st;
    size_t count = pt_model_tensor_count(model), used = 0;
    for (size_t i = 0; i < count && !st; i++) {
        const pt_tensor_ref *r = pt__model_tensor(model, i);
        if (!r->trainable)
            continue;
        const pt_st_tensor *t = pt__st_find(f, r->name);
        if (!t)
            st = pt__err(PT_ENOTFOUND, "%s: no tensor '%s'", path, r->name);
        else if (!(st = pt__st_read_f32(t, r->data, r->numel)) && (st = pt__err_nonfinite(r->data, r->numel)))
            pt__err_prefix(st, "%s: tensor '%s'", path, r->name);
        used++;
    }
    if (!st && used != pt__st_count(f))
        st = pt__err(PT_ESHAPE, "%s holds %zu tensors but the model has %zu trainable ones", path,
                    pt__st_count(f), used);
    pt__st_close(f);
    return st;
}

static int load_optimizer(const char *path, pt_optimizer *opt, const pt_model *model)
{
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    pt_st_file *f;
    int st = pt__st_open(&f, path);
    if (st)
        return st;
    size_t count = pt_model_tensor_count(model), off = 0;
    char name[512];
    for (size_t i = 0; i < count && !st; i++) {
        const pt_tensor_ref *r = pt__model_tensor(model, i);
        if (!r->trainable)
            continue;
        if (off + r->numel > sv.numel_total) {
            st = pt__err(PT_ESTATE, "checkpoint: optimizer does not match the model");
            break;
        }
        for (int k = 0; k < (sv.v ? 2 : 1) && !st; k++) {
            snprintf(name, sizeof name, "%s%s", k == 0 ? (sv.v ? "exp_avg." : "momentum_buffer.") : "exp_avg_sq.",
                     r->name);
            const pt_st_tensor *t = pt__st_find(f, name);
            if (!t)
                st = pt__err(PT_ENOTFOUND, "%s: no tensor '%s' (saved by another optimizer type?)", path, name);
            else if (!(st = pt__st_read_f32(t, (k == 0 ? sv.m : sv.v) + off, r->numel)) &&
                     (st = pt__err_nonfinite((k == 0 ? sv.m : sv.v) + off, r->numel)))
                pt__err_prefix(st, "%s: tensor '%s'", path, name);
        }
        off += r->numel;
    }
    pt__st_close(f);
    return st;
}

static int parse_i64(const cJSON *root, const char *key, int64_t *out)
{
    const char *s = manifest_string(root, key);
    char *end;
    if (!s)
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* The saved learning rate and schedule replace the optimizer's, so the
 * resumed run follows the uninterrupted one; a state written before the
 * schedule was saved keeps the optimizer's (with a warning). */
static int load_schedule(const char *ps, const cJSON *jo, pt_optimizer *opt)
{
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(jo, "schedule");
    const cJSON *jlr = cJSON_GetObjectItemCaseSensitive(jo, "lr");
    if (!js) {
        pt__log(PT_LOG_WARN, "%s: no saved schedule (an older checkpoint): resuming with the optimizer's", ps);
        return PT_OK;
    }
    const char *type = manifest_string(js, "type");
    const cJSON *jmin = cJSON_GetObjectItemCaseSensitive(js, "min_lr_ratio");
    int64_t warmup = 0, total = 0;
    int schedule = 0;
    if (!type || !cJSON_IsNumber(jlr) || !cJSON_IsNumber(jmin) || parse_i64(js, "warmup_steps", &warmup) ||
        parse_i64(js, "total_steps", &total))
        return pt__err(PT_EFORMAT, "%s: malformed optimizer.schedule (needs type, warmup_steps, total_steps, "
                      "min_lr_ratio and optimizer.lr)", ps);
    if (pt_schedule_type_from_name(&schedule, type))
        return pt__err(PT_EFORMAT, "%s: optimizer.schedule.type '%s' is not a schedule", ps, type);
    const pt_optimizer_options *o = pt__optimizer_options_of(opt);
    if (o->lr != jlr->valuedouble || o->schedule != schedule || o->warmup_steps != warmup ||
        o->total_steps != total || o->min_lr_ratio != jmin->valuedouble)
        pt__log(PT_LOG_INFO, "%s: resuming with the saved schedule: %s, lr %g, warmup %lld, total %lld, "
               "min_lr_ratio %g", ps, type, jlr->valuedouble, (long long)warmup, (long long)total,
               jmin->valuedouble);
    int st = pt__optimizer_set_schedule(opt, jlr->valuedouble, schedule, warmup, total, jmin->valuedouble);
    if (st)
        pt__err_prefix(st, "%s: the saved schedule", ps);
    return st;
}

static int checkpoint_load(char **host_json, pt_model *model, pt_optimizer *opt, const char *dir);

int pt_checkpoint_load(char **host_json, pt_model *model, pt_optimizer *opt, const char *dir)
{
    if (host_json)
        *host_json = NULL;
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(opt);
    PT_CHECK_NULL(dir);
    int st = pt__optimizer_take(opt, __func__);
    if (st)
        return st;
    st = checkpoint_load(host_json, model, opt, dir);
    pt__optimizer_give(opt);
    return st;
}

static int checkpoint_load(char **host_json, pt_model *model, pt_optimizer *opt, const char *dir)
{
    int st = pt__optimizer_check_model(opt, model, "pt_checkpoint_load");
    if (st)
        return st;
    struct stat sb;
    if (stat(dir, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return pt__err(PT_ENOTFOUND, "pt_checkpoint_load: checkpoint directory %s does not exist",
                      dir);
    st = pt__checkpoint_verify(dir);
    if (st)
        return st;
    char *pw = pt__path_join(dir, PT_CKPT_WEIGHTS), *po = pt__path_join(dir, PT_CKPT_OPTIMIZER),
         *ps = pt__path_join(dir, PT_CKPT_STATE), *text = NULL;
    cJSON *root = NULL;
    int64_t step = 0, skipped = 0;
    if (!pw || !po || !ps) {
        st = PT_ENOMEM;
        goto done;
    }
    size_t len;
    if ((st = pt__read_file(&text, &len, ps, MAX_STATE_JSON)))
        goto done;
    root = cJSON_ParseWithLength(text, len);
    const cJSON *jo = root ? cJSON_GetObjectItemCaseSensitive(root, "optimizer") : NULL;
    const char *type = jo ? manifest_string(jo, "type") : NULL;
    if (!root || !type || parse_i64(root, "step", &step) || parse_i64(root, "skipped_steps", &skipped)) {
        st = pt__err(PT_EFORMAT, "%s: malformed trainer state", ps);
        goto done;
    }
    const char *have = pt_optimizer_type_name(pt__optimizer_options_of(opt)->type);
    if (strcmp(type, have)) {
        st = pt__err(PT_ESTATE, "%s: saved by a %s optimizer, resuming with %s", ps, type, have);
        goto done;
    }
    /* Everything is validated and read into place below; a failure part way
     * leaves the model partly loaded, which the caller must treat as lost. */
    if ((st = load_schedule(ps, jo, opt)))
        goto done;
    if ((st = load_weights(pw, model)) || (st = load_optimizer(po, opt, model)) ||
        (st = pt__optimizer_restore_counters(opt, step, skipped)))
        goto done;
    if (host_json) {
        const cJSON *host = cJSON_GetObjectItemCaseSensitive(root, "host");
        if (host) {
            *host_json = pt__json_print(host, false);
            if (!*host_json)
                st = pt__err(PT_ENOMEM, "checkpoint: out of memory");
        }
    }
done:
    if (st)
        pt__err_prefix(st, "pt_checkpoint_load %s", dir);
    cJSON_Delete(root);
    free(text);
    free(pw);
    free(po);
    free(ps);
    return st;
}

/* The directory exists and its files match the manifest. */
static int check_dir(const char *dir, const char *fn)
{
    struct stat sb;
    if (stat(dir, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return pt__err(PT_ENOTFOUND, "%s: checkpoint directory %s does not exist", fn, dir);
    return pt__checkpoint_verify(dir);
}

int pt_checkpoint_read_host(char **host_json, const char *dir)
{
    PT_CHECK_NULL(host_json);
    *host_json = NULL;
    PT_CHECK_NULL(dir);
    int st = check_dir(dir, __func__);
    if (st)
        return st;
    char *ps = pt__path_join(dir, PT_CKPT_STATE), *text = NULL;
    size_t len = 0;
    if (!ps)
        return PT_ENOMEM;
    st = pt__read_file(&text, &len, ps, MAX_STATE_JSON);
    cJSON *root = st ? NULL : cJSON_ParseWithLength(text, len);
    if (!st && !cJSON_IsObject(root))
        st = pt__err(PT_EFORMAT, "%s: malformed trainer state", ps);
    const cJSON *host = st ? NULL : cJSON_GetObjectItemCaseSensitive(root, "host");
    if (host && !(*host_json = pt__json_print(host, false)))
        st = pt__err(PT_ENOMEM, "checkpoint: out of memory");
    if (st)
        pt__err_prefix(st, "pt_checkpoint_read_host %s", dir);
    cJSON_Delete(root);
    free(text);
    free(ps);
    return st;
}

int pt_checkpoint_load_weights(pt_model *model, const char *dir)
{
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(dir);
    int st = check_dir(dir, __func__);
    if (st)
        return st;
    char *pw = pt__path_join(dir, PT_CKPT_WEIGHTS);
    st = pw ? load_weights(pw, model) : PT_ENOMEM;
    if (st)
        pt__err_prefix(st, "pt_checkpoint_load_weights %s", dir);
    free(pw);
    return st;
}

int pt_checkpoint_host_model(char **model, pt_lora_options *lora, bool *has_lora, const char *host_json)
{
    PT_CHECK_NULL(model);
    *model = NULL;
    PT_CHECK_NULL(has_lora);
    *has_lora = false;
    PT_CHECK_NULL(lora);
    PT_CHECK_NULL(host_json);
    cJSON *root = cJSON_Parse(host_json);
    if (!root)
        return pt__err(PT_EFORMAT, "pt_checkpoint_host_model: the host JSON is not JSON");
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *jl = cJSON_GetObjectItemCaseSensitive(root, "lora");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(jl, "rank");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(jl, "alpha");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(jl, "targets");
    int st = PT_OK;
    if (jl && (!cJSON_IsNumber(r) || !cJSON_IsNumber(a) || !cJSON_IsNumber(t)))
        st = pt__err(PT_EFORMAT, "pt_checkpoint_host_model: the recorded \"lora\" lacks rank, alpha or targets");
    else if (cJSON_IsString(jm) && !(*model = pt__strdup(jm->valuestring)))
        st = PT_ENOMEM;
    if (!st && jl) {
        pt_lora_options_init(lora);
        lora->rank = r->valueint;
        lora->alpha = a->valuedouble;
        lora->targets = (unsigned)t->valuedouble;
        *has_lora = true;
    }
    cJSON_Delete(root);
    return st;
}
