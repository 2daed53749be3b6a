/* Chat template objects: the variants and the names that select them, the
 * role and family names, creation by name, and the token strings. */
#include "text/chat/chat_internal.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- variants ---------------------------------------------------------------------- */
static const struct chat_variant_info {
    const char *name;
    int family;
    const char *bos, *eos;      /* the family's usual tokens (NULL: none) */
    const char *system, *date;  /* built-in default system prompt / date */
} k_variants[] = {
    [PT_CHAT_V_CHATML] = {"chatml", PT_CHAT_CHATML, NULL, "<|im_end|>", NULL, NULL},
    [PT_CHAT_V_SMOLLM2] = {"smollm2", PT_CHAT_CHATML, NULL, "<|im_end|>", PT_CHAT_SMOLLM2_SYSTEM, NULL},
    [PT_CHAT_V_QWEN3] = {"qwen3", PT_CHAT_QWEN3, NULL, "<|im_end|>", NULL, NULL},
    [PT_CHAT_V_LLAMA3] = {"llama3", PT_CHAT_LLAMA3, "<|begin_of_text|>", "<|eot_id|>", NULL, NULL},
    [PT_CHAT_V_LLAMA3_GENPROMPT] = {"llama3-genprompt", PT_CHAT_LLAMA3, "<|begin_of_text|>", "<|eot_id|>", NULL,
                                    NULL},
    [PT_CHAT_V_LLAMA31] = {"llama3.1", PT_CHAT_LLAMA3, "<|begin_of_text|>", "<|eot_id|>", NULL,
                           PT_CHAT_LLAMA31_DATE},
    [PT_CHAT_V_LLAMA2] = {"llama2", PT_CHAT_LLAMA2, "<s>", "</s>", NULL, NULL},
    [PT_CHAT_V_MISTRAL] = {"mistral", PT_CHAT_LLAMA2, "<s>", "</s>", NULL, NULL},
    [PT_CHAT_V_PHI3] = {"phi3", PT_CHAT_PHI3, "<s>", "<|endoftext|>", NULL, NULL},
    [PT_CHAT_V_PHI3_VISION] = {"phi3-vision", PT_CHAT_PHI3, "<s>", "<|endoftext|>", NULL, NULL},
    [PT_CHAT_V_PLAIN] = {"plain", PT_CHAT_PLAIN, NULL, NULL, NULL, NULL},
    [PT_CHAT_V_QWEN25] = {"qwen2.5", PT_CHAT_CHATML, NULL, "<|im_end|>", PT_CHAT_QWEN25_SYSTEM, NULL},
    [PT_CHAT_V_LLAMA32] = {"llama3.2", PT_CHAT_LLAMA3, "<|begin_of_text|>", "<|eot_id|>", NULL, NULL},
};

/* The names pt_chat_template_create accepts (case-insensitive). */
static const pt_enum_entry k_names[] = {
    {PT_CHAT_V_CHATML, "chatml"},       {PT_CHAT_V_SMOLLM2, "smollm2"},  {PT_CHAT_V_SMOLLM2, "smollm"},
    {PT_CHAT_V_QWEN3, "qwen3"},         {PT_CHAT_V_QWEN3, "qwen"},       {PT_CHAT_V_LLAMA3, "llama3"},
    {PT_CHAT_V_LLAMA3, "llama-3"},      {PT_CHAT_V_LLAMA31, "llama3.1"}, {PT_CHAT_V_LLAMA31, "llama-3.1"},
    {PT_CHAT_V_LLAMA31, "llama3.3"},    {PT_CHAT_V_LLAMA2, "llama2"},    {PT_CHAT_V_LLAMA2, "llama-2"},
    {PT_CHAT_V_MISTRAL, "mistral"},     {PT_CHAT_V_PHI3, "phi3"},        {PT_CHAT_V_PHI3, "phi-3"},
    {PT_CHAT_V_PHI3_VISION, "phi3-vision"}, {PT_CHAT_V_PLAIN, "plain"},
    {PT_CHAT_V_QWEN25, "qwen2.5"},      {PT_CHAT_V_QWEN25, "qwen-2.5"},  {PT_CHAT_V_LLAMA32, "llama3.2"},
    {PT_CHAT_V_LLAMA32, "llama-3.2"},
};

/* ---- role and family names ------------------------------------------------------------ */
static const pt_enum_entry k_roles[] = {
    {PT_CHAT_ROLE_SYSTEM, "system"},
    {PT_CHAT_ROLE_USER, "user"},
    {PT_CHAT_ROLE_ASSISTANT, "assistant"},
    {PT_CHAT_ROLE_TOOL, "tool"},
    {PT_CHAT_ROLE_TOOL, "ipython"},  /* Llama-3.1's name for the tool role: an alias (parsed,
                                      * never named: the first entry of a value names it) */
};

static const pt_enum_entry k_families[] = {
    {PT_CHAT_CHATML, "chatml"}, {PT_CHAT_QWEN3, "qwen3"}, {PT_CHAT_LLAMA3, "llama3"},
    {PT_CHAT_LLAMA2, "llama2"}, {PT_CHAT_PHI3, "phi3"},   {PT_CHAT_PLAIN, "plain"},
};

PT_ENUM_NAME_FUNCS(pt_chat_role, k_roles, "chat role")
PT_ENUM_NAME_FUNCS(pt_chat_family, k_families, "chat family")

/* ---- template objects ------------------------------------------------------------------ */
void pt_chat_template_free(pt_chat_template *t)
{
    if (!t)
        return;
    free(t->bos);
    free(t->eos);
    free(t->default_system);
    free(t->date_default);
    free(t);
}

static int dup_opt(char **dst, const char *src)
{
    *dst = NULL;
    if (!src)
        return PT_OK;
    *dst = pt__strdup(src);
    return *dst ? PT_OK : PT_ENOMEM;
}

bool pt__chat_variant_has_tools(int variant)
{
    return variant == PT_CHAT_V_QWEN25 || variant == PT_CHAT_V_QWEN3 || variant == PT_CHAT_V_LLAMA31 ||
           variant == PT_CHAT_V_LLAMA32;
}

int pt_chat_template_supports_tools(const pt_chat_template *t)
{
    return t && pt__chat_variant_has_tools(t->variant) ? 1 : 0;
}

/* transformers passes strftime_now, so Llama-3.2's date is today's (local time). */
int pt__chat_set_today(pt_chat_template *t)
{
    char buf[32];
    time_t now = time(NULL);
    struct tm tmv;
    if (!localtime_r(&now, &tmv) || strftime(buf, sizeof buf, "%d %b %Y", &tmv) == 0)
        return PT_OK; /* keep the template's fallback date */
    char *d = pt__strdup(buf);
    if (!d)
        return PT_ENOMEM;
    free(t->date_default);
    t->date_default = d;
    return PT_OK;
}

int pt__chat_template_new(pt_chat_template **out, int variant)
{
    const struct chat_variant_info *v = &k_variants[variant];
    pt_chat_template *t = pt__calloc(1, sizeof *t);
    if (!t)
        return PT_ENOMEM;
    t->variant = variant;
    t->family = v->family;
    if (dup_opt(&t->bos, v->bos) || dup_opt(&t->eos, v->eos) || dup_opt(&t->default_system, v->system) ||
        dup_opt(&t->date_default, v->date) ||
        (variant == PT_CHAT_V_LLAMA32 && pt__chat_set_today(t) != PT_OK)) {
        pt_chat_template_free(t);
        return PT_ENOMEM;
    }
    *out = t;
    return PT_OK;
}

int pt_chat_template_create(pt_chat_template **out, const char *name)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(name);
    for (size_t i = 0; i < PT_ENUM_COUNT(k_names); i++)
        if (strcasecmp(name, k_names[i].name) == 0)
            return pt__chat_template_new(out, k_names[i].value);
    return pt__err(PT_EUNSUPPORTED, "unknown chat template name '%s' (known: " PT_CHAT_NAMES ")", name);
}

int pt_chat_template_from_name(pt_chat_template **out, const char *name)
{
    return pt_chat_template_create(out, name);
}

int pt_chat_template_family(const pt_chat_template *t)
{
    return t ? t->family : 0;
}

const char *pt_chat_template_name(const pt_chat_template *t)
{
    return t ? k_variants[t->variant].name : NULL;
}

int pt__chat_replace_token(char **slot, const char *val)
{
    if (!val)
        return PT_OK;
    char *copy = NULL;
    if (*val) {
        copy = pt__strdup(val);
        if (!copy)
            return PT_ENOMEM;
    }
    free(*slot);
    *slot = copy;
    return PT_OK;
}

int pt_chat_template_set_tokens(pt_chat_template *t, const char *bos_token, const char *eos_token)
{
    PT_CHECK_NULL(t);
    int st = pt__chat_replace_token(&t->bos, bos_token);
    if (st == PT_OK)
        st = pt__chat_replace_token(&t->eos, eos_token);
    return st;
}
