/* PEFT LoRA adapter directories: adapter_config.json and
 * adapter_model.safetensors (tensor names "base_model.model." + the model's
 * adapter names, as PEFT's save_pretrained writes them for the default
 * adapter). */
#include "core/core.h"
#include "io/fileio.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "modelio/modelio_internal.h"
#include "posttrain/lora.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define PEFT_PREFIX "base_model.model."
#define PEFT_CONFIG "adapter_config.json"
#define PEFT_WEIGHTS "adapter_model.safetensors"

/* PEFT's short target name of LoRA target k (PT_LORA_* bit order): the last
 * part of the module's name ("q_proj" for "self_attn.q_proj"). */
static const char *target_name(int k)
{
    const char *module = pt__lora_module_name(k);
    const char *dot = strrchr(module, '.');
    return dot ? dot + 1 : module;
}

static char *config_json(const struct pt_lora *l, const char *base)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tm = cJSON_CreateArray();
    if (!o || !tm) {
        cJSON_Delete(o);
        cJSON_Delete(tm);
        return NULL;
    }
    for (int k = 0; k < PT_LORA_NMOD; k++)
        if ((l->opts.targets >> k) & 1u)
            cJSON_AddItemToArray(tm, cJSON_CreateString(target_name(k)));
    cJSON_AddItemToObject(o, "alpha_pattern", cJSON_CreateObject());
    cJSON_AddNullToObject(o, "auto_mapping");
    if (base)
        cJSON_AddStringToObject(o, "base_model_name_or_path", base);
    else
        cJSON_AddNullToObject(o, "base_model_name_or_path");
    cJSON_AddStringToObject(o, "bias", "none");
    cJSON_AddBoolToObject(o, "fan_in_fan_out", false);
    cJSON_AddBoolToObject(o, "inference_mode", true);
    cJSON_AddBoolToObject(o, "init_lora_weights", true);
    cJSON_AddNullToObject(o, "layers_pattern");
    cJSON_AddNullToObject(o, "layers_to_transform");
    cJSON_AddNumberToObject(o, "lora_alpha", l->opts.alpha);
    cJSON_AddNumberToObject(o, "lora_dropout", 0.0);
    cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddNumberToObject(o, "r", l->opts.rank);
    cJSON_AddItemToObject(o, "rank_pattern", cJSON_CreateObject());
    cJSON_AddNullToObject(o, "revision");
    cJSON_AddItemToObject(o, "target_modules", tm);
    cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM");
    cJSON_AddBoolToObject(o, "use_dora", false);
    cJSON_AddBoolToObject(o, "use_rslora", false);
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

int pt_lora_save_peft(const pt_model *m, const char *dir, const char *base_model_name_or_path)
{
    PT_CHECK_NULL(m);
    PT_CHECK_NULL(dir);
    const struct pt_lora *l = m->lora;
    if (!l)
        return pt__err(PT_ESTATE, "pt_lora_save_peft: the model has no LoRA adapters");
    int st = pt__modelio_check_finite(m, l->nbase, pt_model_tensor_count(m), "pt_lora_save_peft", dir,
                                     "a non-finite adapter is not saved");
    if (st == PT_OK)
        st = pt__mkdir_p(dir);
    if (st != PT_OK)
        return st;
    size_t nt = 2 * l->nadapters;
    pt_st_write_tensor *wt = pt__calloc(nt ? nt : 1, sizeof *wt);
    char *names = pt__calloc(nt ? nt : 1, 128);
    char *json = config_json(l, base_model_name_or_path);
    char *path = NULL;
    if (!wt || !names || !json) {
        st = json ? PT_ENOMEM : pt__err(PT_ENOMEM, "pt_lora_save_peft: adapter_config.json");
        goto done;
    }
    for (size_t i = 0; i < nt; i++) {
        const pt_tensor_ref *r = pt__model_tensor(m, l->nbase + i);
        char *name = names + i * 128;
        snprintf(name, 128, PEFT_PREFIX "%s", r->name);
        wt[i].name = name;
        wt[i].dtype = PT_ST_F32;
        wt[i].ndim = 2;
        wt[i].shape[0] = r->shape[0];
        wt[i].shape[1] = r->shape[1];
        wt[i].data = r->data;
    }
    static const char *const meta[] = { "format", "pt" };
    if (!(path = pt__path_join(dir, PEFT_WEIGHTS))) {
        st = PT_ENOMEM;
        goto done;
    }
    if ((st = pt__st_write(path, wt, nt, meta, 1)) != PT_OK)
        goto done;
    pt_free(path);
    if (!(path = pt__path_join(dir, PEFT_CONFIG))) {
        st = PT_ENOMEM;
        goto done;
    }
    st = pt__write_file_atomic(path, json, strlen(json));
done:
    pt_free(wt);
    pt_free(names);
    pt_free(path);
    if (json)
        cJSON_free(json);
    return st;
}

/* ---- loading ------------------------------------------------------------------ */

/* A field that must be absent, null, false, an empty list/object, or equal to `ok`. */
static int check_unsupported(const cJSON *root, const char *key, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v))
        return PT_OK;
    if ((cJSON_IsArray(v) || cJSON_IsObject(v)) && cJSON_GetArraySize(v) == 0)
        return PT_OK;
    return pt__err(PT_EUNSUPPORTED, "%s: \"%s\" is set; libposttrain's LoRA does not implement it",
                  path, key);
}

/* peft_type, r, lora_alpha, lora_dropout. */
static int parse_numbers(pt_lora_options *o, const cJSON *root, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "LORA") != 0)
        return pt__err(v ? PT_EUNSUPPORTED : PT_EFORMAT, "%s: \"peft_type\" is %s, expected \"LORA\"",
                      path, cJSON_IsString(v) ? v->valuestring : "missing or not a string");
    v = cJSON_GetObjectItemCaseSensitive(root, "r");
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > 65536)
        return pt__err(PT_EFORMAT, "%s: \"r\" must be an integer in 1 .. 65536", path);
    o->rank = (int)v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(root, "lora_alpha");
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble))
        return pt__err(PT_EFORMAT, "%s: \"lora_alpha\" must be a positive number", path);
    o->alpha = v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(root, "lora_dropout");
    if (v && !cJSON_IsNull(v) && (!cJSON_IsNumber(v) || v->valuedouble < 0 ||
                                  v->valuedouble >= 1))
        return pt__err(PT_EFORMAT, "%s: \"lora_dropout\" must be a number in [0, 1)", path);
    if (v && cJSON_IsNumber(v) && v->valuedouble != 0)
        pt__log(PT_LOG_WARN, "%s: lora_dropout %g is ignored (no dropout in libposttrain)", path,
               v->valuedouble);
    return PT_OK;
}

/* "q_proj, k_proj, ..." into buf. */
static const char *target_list(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int j = 0; j < PT_LORA_NMOD && k < n; j++) {
        int w = snprintf(buf + k, n - k, "%s%s", j ? ", " : "", target_name(j));
        k += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

static int parse_targets(pt_lora_options *o, const cJSON *root, const char *path)
{
    char names[128];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "target_modules");
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return pt__err(cJSON_IsString(v) ? PT_EUNSUPPORTED : PT_EFORMAT,
                      "%s: \"target_modules\" must be a non-empty list of module names (%s)", path,
                      target_list(names, sizeof names));
    o->targets = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v)
    {
        int k = -1;
        for (int j = 0; cJSON_IsString(it) && j < PT_LORA_NMOD; j++)
            if (strcmp(it->valuestring, target_name(j)) == 0)
                k = j;
        if (k < 0) {
            bool str = cJSON_IsString(it);
            return pt__err(PT_EUNSUPPORTED, "%s: target module %s%s%s is not one of %s", path,
                          str ? "'" : "", str ? it->valuestring : "(not a string)", str ? "'" : "",
                          target_list(names, sizeof names));
        }
        o->targets |= 1u << k;
    }
    return PT_OK;
}

/* Settings this library does not implement must be off. */
static int check_settings(const cJSON *root, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "bias");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0))
        return pt__err(PT_EUNSUPPORTED, "%s: \"bias\" must be \"none\"", path);
    v = cJSON_GetObjectItemCaseSensitive(root, "task_type");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "CAUSAL_LM") == 0))
        return pt__err(PT_EUNSUPPORTED, "%s: \"task_type\" must be \"CAUSAL_LM\"", path);
    static const char *const unsupported[] = {
        "use_rslora", "use_dora", "fan_in_fan_out", "modules_to_save", "layers_to_transform",
        "rank_pattern", "alpha_pattern", "lora_bias",
    };
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++) {
        int st = check_unsupported(root, unsupported[i], path);
        if (st != PT_OK)
            return st;
    }
    return PT_OK;
}

static int parse_config(pt_lora_options *o, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    int st = pt__read_file(&text, &len, path, (size_t)1 << 20);
    if (st != PT_OK)
        return pt__err_prefix(st, "PEFT adapter");
    cJSON *root = cJSON_ParseWithLength(text, len);
    pt_free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pt__err(PT_EFORMAT, "%s: not a JSON object", path);
    }
    pt_lora_options_init(o);
    if ((st = parse_numbers(o, root, path)) == PT_OK && (st = parse_targets(o, root, path)) == PT_OK)
        st = check_settings(root, path);
    cJSON_Delete(root);
    return st;
}

static int load_tensors(pt_model *m, const pt_st_file *f, const char *path)
{
    const struct pt_lora *l = m->lora;
    const size_t nt = 2 * l->nadapters;
    char name[160];
    for (size_t i = 0; i < nt; i++) {
        const pt_tensor_ref *r = pt__model_tensor(m, l->nbase + i);
        snprintf(name, sizeof name, PEFT_PREFIX "%s", r->name);
        const pt_st_tensor *t = pt__st_find(f, name);
        if (!t)
            return pt__err(PT_ENOTFOUND, "%s: tensor '%s' is missing (the adapter_config.json "
                          "targets need it)", path, name);
        if (t->ndim != 2 || t->shape[0] != r->shape[0] || t->shape[1] != r->shape[1]) {
            char got[96] = "[";
            for (int d = 0; d < t->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                         (long long)t->shape[d]);
            snprintf(got + strlen(got), sizeof got - strlen(got), "]");
            return pt__err(PT_ESHAPE, "%s: tensor '%s' has shape %s, expected [%lld, %lld] "
                          "(r = %d)", path, name, got, (long long)r->shape[0],
                          (long long)r->shape[1], l->opts.rank);
        }
        int st = pt__st_read_f32(t, r->data, r->numel);
        if (st == PT_OK)
            st = pt__err_nonfinite(r->data, r->numel);
        if (st != PT_OK)
            return pt__err_prefix(st, "%s: tensor '%s'", path, name);
    }
    if (pt__st_count(f) != nt) {
        for (size_t i = 0; i < pt__st_count(f); i++) {
            const char *n = pt__st_tensor_at(f, i)->name;
            const pt_tensor_ref *r =
                strncmp(n, PEFT_PREFIX, strlen(PEFT_PREFIX)) == 0
                    ? pt__model_find_tensor(m, n + strlen(PEFT_PREFIX)) : NULL;
            if (!r || !r->adapter)
                return pt__err(PT_EFORMAT, "%s: unexpected tensor '%s' (not an adapter of the "
                              "modules adapter_config.json targets)", path, n);
        }
        return pt__err(PT_EFORMAT, "%s: holds %zu tensors, expected %zu", path, pt__st_count(f),
                      nt);
    }
    return PT_OK;
}

int pt_lora_load_peft(pt_model *m, const char *dir)
{
    PT_CHECK_NULL(m);
    PT_CHECK_NULL(dir);
    if (m->lora)
        return pt__err(PT_ESTATE, "pt_lora_load_peft: the model already has LoRA adapters");
    char *cpath = pt__path_join(dir, PEFT_CONFIG);
    char *wpath = pt__path_join(dir, PEFT_WEIGHTS);
    pt_st_file *f = NULL;
    pt_lora_options o;
    int st = PT_ENOMEM;
    if (!cpath || !wpath)
        goto done;
    if ((st = parse_config(&o, cpath)) != PT_OK)
        goto done;
    if ((st = pt__st_open(&f, wpath)) != PT_OK) {
        if (st == PT_ENOTFOUND && pt__dir_has_file(dir, "adapter_model.bin"))
            st = pt__err(PT_EUNSUPPORTED, "%s: only adapter_model.safetensors is supported, not "
                        "the pickled adapter_model.bin", dir);
        else
            st = pt__err_prefix(st, "PEFT adapter");
        goto done;
    }
    if ((st = pt_model_add_lora(m, &o)) != PT_OK)
        goto done;
    if ((st = load_tensors(m, f, wpath)) == PT_OK && !(m->lora->source_dir = pt__strdup(dir)))
        st = PT_ENOMEM;
    if (st != PT_OK)
        pt_model_remove_lora(m);
    if (st == PT_ENONFINITE)
        pt__err_prefix(st, "pt_lora_load_peft");
done:
    pt__st_close(f);
    pt_free(cpath);
    pt_free(wpath);
    return st;
}
