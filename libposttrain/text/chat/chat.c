/* Chat templates: the families of chat_template that small Llama-family
 * models ship, implemented directly (no Jinja), plus recognition of a
 * template source by its markers.  Each family renders exactly what its
 * Jinja source renders under Hugging Face's apply_chat_template; the goldens
 * in tests/reference/chat/ pin that down. */
#include "text/chat/chat_internal.h"

#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum chat_variant {
    V_CHATML,
    V_SMOLLM2,
    V_QWEN3,
    V_LLAMA3,
    V_LLAMA3_GENPROMPT,
    V_LLAMA31,
    V_LLAMA2,
    V_MISTRAL,
    V_PHI3,
    V_PHI3_VISION,
    V_PLAIN
};

struct pt_chat_template {
    int family;
    int variant;
    char *bos;            /* NULL: none */
    char *eos;            /* NULL: none */
    char *default_system; /* NULL: none */
    char *date_default;   /* Llama-3.1 "Today Date" */
};

static const char SMOLLM2_SYSTEM[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
static const char LLAMA31_DATE[] = "26 Jul 2024";

static const struct {
    const char *name;
    int variant;
} k_names[] = {
    {"chatml", V_CHATML},       {"smollm2", V_SMOLLM2},     {"smollm", V_SMOLLM2},
    {"qwen3", V_QWEN3},         {"qwen", V_QWEN3},          {"llama3", V_LLAMA3},
    {"llama-3", V_LLAMA3},      {"llama3.1", V_LLAMA31},    {"llama-3.1", V_LLAMA31},
    {"llama3.3", V_LLAMA31},    {"llama2", V_LLAMA2},       {"llama-2", V_LLAMA2},
    {"mistral", V_MISTRAL},     {"phi3", V_PHI3},           {"phi-3", V_PHI3},
    {"phi3-vision", V_PHI3_VISION}, {"plain", V_PLAIN},
};

#define PT_CHAT_NAMES                                                                        \
    "chatml, smollm2, qwen3 (or qwen), llama3, llama3.1, llama2, mistral, phi3, phi3-vision, " \
    "plain"

static const char *variant_name(int v)
{
    switch (v) {
    case V_CHATML: return "chatml";
    case V_SMOLLM2: return "smollm2";
    case V_QWEN3: return "qwen3";
    case V_LLAMA3: return "llama3";
    case V_LLAMA3_GENPROMPT: return "llama3-genprompt";
    case V_LLAMA31: return "llama3.1";
    case V_LLAMA2: return "llama2";
    case V_MISTRAL: return "mistral";
    case V_PHI3: return "phi3";
    case V_PHI3_VISION: return "phi3-vision";
    case V_PLAIN: return "plain";
    default: return "?";
    }
}

static int variant_family(int v)
{
    switch (v) {
    case V_CHATML:
    case V_SMOLLM2: return PT_CHAT_CHATML;
    case V_QWEN3: return PT_CHAT_QWEN3;
    case V_LLAMA3:
    case V_LLAMA3_GENPROMPT:
    case V_LLAMA31: return PT_CHAT_LLAMA3;
    case V_LLAMA2:
    case V_MISTRAL: return PT_CHAT_LLAMA2;
    case V_PHI3:
    case V_PHI3_VISION: return PT_CHAT_PHI3;
    default: return PT_CHAT_PLAIN;
    }
}

/* ---- small public helpers ------------------------------------------------ */

const char *pt_chat_role_name(int role)
{
    switch (role) {
    case PT_CHAT_ROLE_SYSTEM: return "system";
    case PT_CHAT_ROLE_USER: return "user";
    case PT_CHAT_ROLE_ASSISTANT: return "assistant";
    case PT_CHAT_ROLE_TOOL: return "tool";
    default: return NULL;
    }
}

int pt_chat_role_from_name(int *role, const char *name)
{
    if (!role || !name)
        return pt_err(PT_EINVAL, "pt_chat_role_from_name: NULL argument");
    static const char *const names[] = {"system", "user", "assistant", "tool"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, names[i]) == 0) {
            *role = i;
            return PT_OK;
        }
    }
    if (strcmp(name, "ipython") == 0) {
        *role = PT_CHAT_ROLE_TOOL;
        return PT_OK;
    }
    return pt_err(PT_EINVAL, "unknown chat role '%s' (expected system, user, assistant or tool)", name);
}

const char *pt_chat_family_name(int family)
{
    switch (family) {
    case PT_CHAT_CHATML: return "chatml";
    case PT_CHAT_QWEN3: return "qwen3";
    case PT_CHAT_LLAMA3: return "llama3";
    case PT_CHAT_LLAMA2: return "llama2";
    case PT_CHAT_PHI3: return "phi3";
    case PT_CHAT_PLAIN: return "plain";
    default: return NULL;
    }
}

int pt_chat_options_init(pt_chat_options *opts)
{
    if (!opts)
        return pt_err(PT_EINVAL, "pt_chat_options_init: NULL options");
    memset(opts, 0, sizeof *opts);
    opts->size = sizeof *opts;
    opts->bos = PT_CHAT_BOS_TEMPLATE;
    opts->enable_thinking = 1;
    return PT_OK;
}

/* ---- template objects ------------------------------------------------------ */

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
    *dst = pt_strdup(src);
    return *dst ? PT_OK : PT_ENOMEM;
}

static int template_new(pt_chat_template **out, int variant)
{
    pt_chat_template *t = pt_calloc(1, sizeof *t);
    if (!t)
        return PT_ENOMEM;
    t->variant = variant;
    t->family = variant_family(variant);
    const char *bos = NULL, *eos = NULL, *sys = NULL, *date = NULL;
    switch (variant) {
    case V_CHATML:
    case V_QWEN3: eos = "<|im_end|>"; break;
    case V_SMOLLM2:
        eos = "<|im_end|>";
        sys = SMOLLM2_SYSTEM;
        break;
    case V_LLAMA3:
    case V_LLAMA3_GENPROMPT:
        bos = "<|begin_of_text|>";
        eos = "<|eot_id|>";
        break;
    case V_LLAMA31:
        bos = "<|begin_of_text|>";
        eos = "<|eot_id|>";
        date = LLAMA31_DATE;
        break;
    case V_LLAMA2:
    case V_MISTRAL:
        bos = "<s>";
        eos = "</s>";
        break;
    case V_PHI3:
    case V_PHI3_VISION:
        bos = "<s>";
        eos = "<|endoftext|>";
        break;
    default: break;
    }
    if (dup_opt(&t->bos, bos) || dup_opt(&t->eos, eos) || dup_opt(&t->default_system, sys) ||
        dup_opt(&t->date_default, date)) {
        pt_chat_template_free(t);
        return PT_ENOMEM;
    }
    *out = t;
    return PT_OK;
}

int pt_chat_template_from_name(pt_chat_template **out, const char *name)
{
    if (!out || !name)
        return pt_err(PT_EINVAL, "pt_chat_template_from_name: NULL argument");
    *out = NULL;
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++)
        if (strcasecmp(name, k_names[i].name) == 0)
            return template_new(out, k_names[i].variant);
    return pt_err(PT_EUNSUPPORTED, "unknown chat template name '%s' (known: " PT_CHAT_NAMES ")", name);
}

int pt_chat_template_family(const pt_chat_template *t)
{
    return t ? t->family : 0;
}

const char *pt_chat_template_name(const pt_chat_template *t)
{
    return t ? variant_name(t->variant) : NULL;
}

static int replace_token(char **slot, const char *val)
{
    if (!val)
        return PT_OK;
    char *copy = NULL;
    if (*val) {
        copy = pt_strdup(val);
        if (!copy)
            return PT_ENOMEM;
    }
    free(*slot);
    *slot = copy;
    return PT_OK;
}

int pt_chat_template_set_tokens(pt_chat_template *t, const char *bos_token, const char *eos_token)
{
    if (!t)
        return pt_err(PT_EINVAL, "pt_chat_template_set_tokens: NULL template");
    int st = replace_token(&t->bos, bos_token);
    if (st == PT_OK)
        st = replace_token(&t->eos, eos_token);
    return st;
}

/* ---- recognition ------------------------------------------------------------- */

static bool has(const char *s, const char *needle)
{
    return strstr(s, needle) != NULL;
}

/* A ChatML template's built-in default system prompt: the literal
 * '<|im_start|>system\n ... <|im_end|>' inside a Jinja string, if the text
 * between is plain (no quotes, concatenation or expressions). */
static int chatml_default_system(char **out, const char *src)
{
    *out = NULL;
    static const char *const heads[] = {"<|im_start|>system\\n", "<|im_start|>system\n"};
    for (int h = 0; h < 2; h++) {
        const char *p = strstr(src, heads[h]);
        if (!p)
            continue;
        p += strlen(heads[h]);
        const char *end = strstr(p, "<|im_end|>");
        if (!end || end == p)
            continue;
        bool plain = true;
        for (const char *q = p; q < end; q++)
            if (*q == '\'' || *q == '"' || *q == '+' || *q == '{' || *q == '}')
                plain = false;
        if (!plain)
            continue;
        char *s = pt_malloc((size_t)(end - p) + 1);
        if (!s)
            return PT_ENOMEM;
        size_t n = 0;
        for (const char *q = p; q < end; q++) {
            if (q[0] == '\\' && q + 1 < end) {
                char c = q[1];
                if (c == 'n' || c == 't' || c == '\\' || c == '\'' || c == '"') {
                    s[n++] = c == 'n' ? '\n' : c == 't' ? '\t' : c;
                    q++;
                    continue;
                }
            }
            s[n++] = *q;
        }
        s[n] = '\0';
        *out = s;
        return PT_OK;
    }
    return PT_OK;
}

/* The default date of a Llama-3.1 style template: set date_string = "...". */
static int llama31_date(char **out, const char *src)
{
    *out = NULL;
    const char *p = strstr(src, "set date_string = \"");
    if (!p)
        return PT_OK;
    p += strlen("set date_string = \"");
    const char *e = strchr(p, '"');
    if (!e || e - p > 64)
        return PT_OK;
    char *s = pt_malloc((size_t)(e - p) + 1);
    if (!s)
        return PT_ENOMEM;
    memcpy(s, p, (size_t)(e - p));
    s[e - p] = '\0';
    *out = s;
    return PT_OK;
}

static int unrecognised(const char *why)
{
    return pt_err(PT_EUNSUPPORTED,
                  "unrecognised chat_template (%s); choose a template by name with "
                  "pt_chat_template_from_name() (posttrain --chat-template NAME): " PT_CHAT_NAMES,
                  why);
}

static int detect_variant(int *variant, const char *src)
{
    if (has(src, "<|im_start|>")) {
        if (has(src, "</think>") || has(src, "<think>") || has(src, "reasoning_content")) {
            if (has(src, "last_query_index") && has(src, "<tool_response>")) {
                *variant = V_QWEN3;
                return PT_OK;
            }
            return unrecognised("a ChatML template with reasoning markup other than Qwen3's");
        }
        if (has(src, "tool"))
            return unrecognised("a ChatML template with tool-call logic other than Qwen3's "
                                "(e.g. Qwen2.5)");
        *variant = V_CHATML;
        return PT_OK;
    }
    if (has(src, "<|start_header_id|>")) {
        if (has(src, "Cutting Knowledge Date")) {
            *variant = V_LLAMA31;
            return PT_OK;
        }
        if (!has(src, "| trim") && !has(src, "|trim"))
            return unrecognised("a Llama-3 style template that does not trim message content");
        *variant = has(src, "add_generation_prompt") ? V_LLAMA3 : V_LLAMA3_GENPROMPT;
        return PT_OK;
    }
    if (has(src, "[INST]")) {
        if (has(src, "<<SYS>>")) {
            if (has(src, "content.strip()") && has(src, "bos_token + '[INST] '")) {
                *variant = V_LLAMA2;
                return PT_OK;
            }
            return unrecognised("a [INST] <<SYS>> template other than Llama-2-chat's");
        }
        if (has(src, "[AVAILABLE_TOOLS]") || has(src, "[SYSTEM_PROMPT]"))
            return unrecognised("a Mistral template with system prompt or tool markup (v3/Tekken)");
        if (has(src, "'[INST] ' + message['content'] + ' [/INST]'") &&
            has(src, "message['content'] + eos_token")) {
            *variant = V_MISTRAL;
            return PT_OK;
        }
        return unrecognised("an [INST] template other than Llama-2-chat's or Mistral-7B-Instruct v0.1/v0.2's");
    }
    if (has(src, "<|user|>") || has(src, "<|assistant|>") || has(src, "'<|' + message['role'] + '|>'")) {
        if (!has(src, "<|end|>"))
            return unrecognised("a <|user|> template without Phi-3's <|end|> (e.g. Zephyr/TinyLlama)");
        if (has(src, "'<|' + message['role'] + '|>'")) {
            *variant = V_PHI3_VISION;
            return PT_OK;
        }
        *variant = V_PHI3;
        return PT_OK;
    }
    return unrecognised("none of the markers <|im_start|>, <|start_header_id|>, [INST], <|user|> found");
}

int pt_chat_template_from_source(pt_chat_template **out, const char *source, const char *bos_token,
                                 const char *eos_token)
{
    if (!out || !source)
        return pt_err(PT_EINVAL, "pt_chat_template_from_source: NULL argument");
    *out = NULL;
    int variant = 0;
    int st = detect_variant(&variant, source);
    if (st != PT_OK)
        return st;
    pt_chat_template *t = NULL;
    st = template_new(&t, variant);
    if (st != PT_OK)
        return st;
    if (variant == V_CHATML) {
        char *sys = NULL;
        st = chatml_default_system(&sys, source);
        if (st == PT_OK && sys) {
            free(t->default_system);
            t->default_system = sys;
            if (strcmp(sys, SMOLLM2_SYSTEM) == 0)
                t->variant = V_SMOLLM2;
        }
    } else if (variant == V_LLAMA31) {
        char *date = NULL;
        st = llama31_date(&date, source);
        if (st == PT_OK && date) {
            free(t->date_default);
            t->date_default = date;
        }
        if (st == PT_OK && has(source, "strftime_now")) {
            /* Llama-3.2: transformers passes strftime_now, so the date is today's. */
            char buf[32];
            time_t now = time(NULL);
            struct tm tmv;
            if (localtime_r(&now, &tmv) && strftime(buf, sizeof buf, "%d %b %Y", &tmv) > 0) {
                char *d = pt_strdup(buf);
                if (!d) {
                    st = PT_ENOMEM;
                } else {
                    free(t->date_default);
                    t->date_default = d;
                }
            }
        }
    }
    if (st == PT_OK && (bos_token || eos_token)) {
        /* The file's tokens replace the family defaults; a NULL one keeps them. */
        if (bos_token)
            st = replace_token(&t->bos, bos_token);
        if (st == PT_OK && eos_token)
            st = replace_token(&t->eos, eos_token);
    }
    if (st != PT_OK) {
        pt_chat_template_free(t);
        return st;
    }
    *out = t;
    return PT_OK;
}

/* ---- text building --------------------------------------------------------- */

void pt_chat_rendering_clear(pt_chat_rendering *r)
{
    if (!r)
        return;
    free(r->text);
    free(r->cuts);
    free(r->spans);
    memset(r, 0, sizeof *r);
}

static int out_reserve(pt_chat_rendering *r, size_t extra)
{
    size_t need;
    if (!pt_add_size(r->len, extra, &need) || !pt_add_size(need, 1, &need))
        return pt_err(PT_ENOMEM, "chat rendering too long");
    if (need <= r->cap)
        return PT_OK;
    size_t cap = r->cap ? r->cap : 256;
    while (cap < need) {
        if (!pt_mul_size(cap, 2, &cap))
            return pt_err(PT_ENOMEM, "chat rendering too long");
    }
    char *p = pt_realloc_array(r->text, cap, 1);
    if (!p)
        return PT_ENOMEM;
    r->text = p;
    r->cap = cap;
    return PT_OK;
}

static int emit(pt_chat_rendering *r, const char *s, size_t n)
{
    int st = out_reserve(r, n);
    if (st != PT_OK)
        return st;
    if (n)
        memcpy(r->text + r->len, s, n);
    r->len += n;
    r->text[r->len] = '\0';
    return PT_OK;
}

static int emits(pt_chat_rendering *r, const char *s)
{
    return emit(r, s, strlen(s));
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return PT_OK;
    void *p = pt_grow_array(*arr, cap, 16, elem);
    if (!p)
        return PT_ENOMEM;
    *arr = p;
    return PT_OK;
}

/* Record a cut at the current end, before the marker that is written next. */
static int cut_before(pt_chat_rendering *r, const char *marker)
{
    if (!marker || !*marker || r->len == 0)
        return PT_OK;
    int st = grow((void **)&r->cuts, &r->cap_cuts, r->n_cuts, sizeof *r->cuts);
    if (st != PT_OK)
        return st;
    r->cuts[r->n_cuts++] = (pt_chat_cut){r->len, r->len, strlen(marker)};
    return PT_OK;
}

/* Record a cut at the current end, after the marker just written. */
static int cut_after(pt_chat_rendering *r, const char *marker)
{
    if (!marker || !*marker)
        return PT_OK;
    size_t n = strlen(marker);
    if (r->len < n || memcmp(r->text + r->len - n, marker, n) != 0)
        return PT_OK;
    int st = grow((void **)&r->cuts, &r->cap_cuts, r->n_cuts, sizeof *r->cuts);
    if (st != PT_OK)
        return st;
    r->cuts[r->n_cuts++] = (pt_chat_cut){r->len, r->len - n, n};
    return PT_OK;
}

static int span_open(pt_chat_rendering *r)
{
    int st = grow((void **)&r->spans, &r->cap_spans, r->n_spans, sizeof *r->spans);
    if (st != PT_OK)
        return st;
    r->spans[r->n_spans++] = (pt_chat_span){r->len, r->len};
    return PT_OK;
}

static void span_close(pt_chat_rendering *r)
{
    r->spans[r->n_spans - 1].end = r->len;
}

/* ---- Python string semantics --------------------------------------------- */

/* Length of the UTF-8 whitespace character (Python str.isspace) at s[0..n), or 0. */
static size_t space_len(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80)
        return ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) ? 1 : 0;
    if (c == 0xc2 && n >= 2)
        return (s[1] == 0x85 || s[1] == 0xa0) ? 2 : 0;
    if (n >= 3) {
        unsigned cp;
        if (c == 0xe1 && s[1] == 0x9a && s[2] == 0x80)
            return 3; /* U+1680 */
        if (c == 0xe2 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80) {
            cp = 0x2000u | ((unsigned)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
            if ((cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
                cp == 0x205f)
                return 3;
        }
        if (c == 0xe3 && s[1] == 0x80 && s[2] == 0x80)
            return 3; /* U+3000 */
    }
    return 0;
}

/* Length of the whitespace character ending at s[e) (not before s[b]), or 0. */
static size_t space_len_back(const unsigned char *s, size_t b, size_t e)
{
    for (size_t k = 1; k <= 3 && k <= e - b; k++)
        if (space_len(s + e - k, k) == k)
            return k;
    return 0;
}

void pt_chat_py_strip(const char *s, size_t *b, size_t *e, bool left, bool right)
{
    const unsigned char *u = (const unsigned char *)s;
    if (left) {
        size_t l;
        while (*b < *e && (l = space_len(u + *b, *e - *b)) > 0)
            *b += l;
    }
    if (right) {
        size_t l;
        while (*e > *b && (l = space_len_back(u, *b, *e)) > 0)
            *e -= l;
    }
}

static int emit_stripped(pt_chat_rendering *r, const char *s, size_t n)
{
    size_t b = 0, e = n;
    pt_chat_py_strip(s, &b, &e, true, true);
    return emit(r, s + b, e - b);
}

/* json.dumps(s, ensure_ascii=False) of a string. */
static int emit_json_string(pt_chat_rendering *r, const char *s)
{
    int st = emits(r, "\"");
    for (const char *p = s; st == PT_OK && *p; p++) {
        unsigned char c = (unsigned char)*p;
        char esc[8];
        switch (c) {
        case '"': st = emits(r, "\\\""); break;
        case '\\': st = emits(r, "\\\\"); break;
        case '\n': st = emits(r, "\\n"); break;
        case '\r': st = emits(r, "\\r"); break;
        case '\t': st = emits(r, "\\t"); break;
        case '\b': st = emits(r, "\\b"); break;
        case '\f': st = emits(r, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                st = emits(r, esc);
            } else {
                st = emit(r, p, 1);
            }
        }
    }
    if (st == PT_OK)
        st = emits(r, "\"");
    return st;
}

/* ---- families ------------------------------------------------------------------ */

typedef struct render_ctx {
    pt_chat_rendering *r;
    const pt_chat_template *t;
    const pt_chat_message *m;
    size_t n;
    const pt_chat_options *o;
    const char *bos; /* NULL when left out */
    const char *eos;
    const char *default_system; /* NULL when none */
} render_ctx;

#define TRY(expr)                    \
    do {                             \
        int st_ = (expr);            \
        if (st_ != PT_OK)            \
            return st_;              \
    } while (0)

static const char *role_str(int role)
{
    const char *s = pt_chat_role_name(role);
    return s ? s : "?";
}

static int render_chatml(render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    if (c->default_system && c->m[0].role != PT_CHAT_ROLE_SYSTEM) {
        TRY(emits(r, "<|im_start|>system\n"));
        TRY(emits(r, c->default_system));
        TRY(emits(r, "<|im_end|>\n"));
    }
    for (size_t i = 0; i < c->n; i++) {
        bool asst = c->m[i].role == PT_CHAT_ROLE_ASSISTANT;
        TRY(cut_before(r, "<|im_start|>"));
        TRY(emits(r, "<|im_start|>"));
        TRY(emits(r, role_str(c->m[i].role)));
        TRY(emits(r, "\n"));
        if (asst)
            TRY(span_open(r));
        TRY(emits(r, c->m[i].content));
        TRY(emits(r, "<|im_end|>"));
        if (asst)
            span_close(r);
        TRY(emits(r, "\n"));
    }
    if (c->o->add_generation_prompt) {
        TRY(cut_before(r, "<|im_start|>"));
        TRY(emits(r, "<|im_start|>assistant\n"));
    }
    return PT_OK;
}

static bool starts_with(const char *s, size_t n, const char *p)
{
    size_t k = strlen(p);
    return n >= k && memcmp(s, p, k) == 0;
}

static bool ends_with(const char *s, size_t n, const char *p)
{
    size_t k = strlen(p);
    return n >= k && memcmp(s + n - k, p, k) == 0;
}

/* Last occurrence of needle in s[0..n), or NULL. */
static const char *find_last(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    if (k > n)
        return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (memcmp(s + i, needle, k) == 0)
            return s + i;
    return NULL;
}

static int render_qwen3(render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    const pt_chat_message *m = c->m;
    size_t n = c->n;
    if (m[0].role == PT_CHAT_ROLE_SYSTEM) {
        TRY(emits(r, "<|im_start|>system\n"));
        TRY(emits(r, m[0].content));
        TRY(emits(r, "<|im_end|>\n"));
    } else if (c->default_system) {
        TRY(emits(r, "<|im_start|>system\n"));
        TRY(emits(r, c->default_system));
        TRY(emits(r, "<|im_end|>\n"));
    }
    /* The last user message that is not a wrapped tool response. */
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        if (m[k].role != PT_CHAT_ROLE_USER)
            continue;
        size_t len = strlen(m[k].content);
        if (starts_with(m[k].content, len, "<tool_response>") &&
            ends_with(m[k].content, len, "</tool_response>"))
            continue;
        last_query = k;
        break;
    }
    for (size_t i = 0; i < n; i++) {
        int role = m[i].role;
        const char *content = m[i].content;
        size_t len = strlen(content);
        if (role == PT_CHAT_ROLE_USER || (role == PT_CHAT_ROLE_SYSTEM && i != 0)) {
            TRY(cut_before(r, "<|im_start|>"));
            TRY(emits(r, "<|im_start|>"));
            TRY(emits(r, role_str(role)));
            TRY(emits(r, "\n"));
            TRY(emit(r, content, len));
            TRY(emits(r, "<|im_end|>\n"));
        } else if (role == PT_CHAT_ROLE_ASSISTANT) {
            /* Split "<think>reasoning</think>answer" as the template does. */
            const char *body = content;
            size_t body_len = len;
            const char *reason = "";
            size_t reason_len = 0;
            const char *close = strstr(content, "</think>");
            if (close) {
                const char *last_close = find_last(content, len, "</think>");
                body = last_close + strlen("</think>");
                body_len = (size_t)(content + len - body);
                size_t bb = 0, be = body_len;
                while (bb < be && body[bb] == '\n')
                    bb++;
                body += bb;
                body_len -= bb;
                /* before the first </think>, rstrip('\n'), after the last <think>, lstrip('\n') */
                size_t pre_len = (size_t)(close - content);
                while (pre_len > 0 && content[pre_len - 1] == '\n')
                    pre_len--;
                const char *open = find_last(content, pre_len, "<think>");
                reason = open ? open + strlen("<think>") : content;
                reason_len = (size_t)(content + pre_len - reason);
                while (reason_len > 0 && reason[0] == '\n') {
                    reason++;
                    reason_len--;
                }
            }
            TRY(cut_before(r, "<|im_start|>"));
            TRY(emits(r, "<|im_start|>assistant\n"));
            TRY(span_open(r));
            if (i > last_query && (i == n - 1 || reason_len > 0)) {
                size_t rb = 0, re = reason_len;
                while (rb < re && reason[rb] == '\n')
                    rb++;
                while (re > rb && reason[re - 1] == '\n')
                    re--;
                size_t bb = 0;
                while (bb < body_len && body[bb] == '\n')
                    bb++;
                TRY(emits(r, "<think>\n"));
                TRY(emit(r, reason + rb, re - rb));
                TRY(emits(r, "\n</think>\n\n"));
                TRY(emit(r, body + bb, body_len - bb));
            } else {
                TRY(emit(r, body, body_len));
            }
            TRY(emits(r, "<|im_end|>"));
            span_close(r);
            TRY(emits(r, "\n"));
        } else if (role == PT_CHAT_ROLE_TOOL) {
            if (i == 0 || m[i - 1].role != PT_CHAT_ROLE_TOOL) {
                TRY(cut_before(r, "<|im_start|>"));
                TRY(emits(r, "<|im_start|>user"));
            }
            TRY(emits(r, "\n<tool_response>\n"));
            TRY(emit(r, content, len));
            TRY(emits(r, "\n</tool_response>"));
            if (i == n - 1 || m[i + 1].role != PT_CHAT_ROLE_TOOL)
                TRY(emits(r, "<|im_end|>\n"));
        }
    }
    if (c->o->add_generation_prompt) {
        TRY(cut_before(r, "<|im_start|>"));
        TRY(emits(r, "<|im_start|>assistant\n"));
        if (!c->o->enable_thinking)
            TRY(emits(r, "<think>\n\n</think>\n\n"));
    }
    return PT_OK;
}

static int llama3_turn(render_ctx *c, const char *role, const char *content, bool asst)
{
    pt_chat_rendering *r = c->r;
    TRY(cut_before(r, "<|start_header_id|>"));
    TRY(emits(r, "<|start_header_id|>"));
    TRY(emits(r, role));
    TRY(emits(r, "<|end_header_id|>\n\n"));
    if (asst)
        TRY(span_open(r));
    TRY(emit_stripped(r, content, strlen(content)));
    TRY(emits(r, "<|eot_id|>"));
    if (asst)
        span_close(r);
    return PT_OK;
}

static int render_llama3(render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    size_t first = 0;
    if (c->bos)
        TRY(emits(r, c->bos));
    if (c->t->variant == V_LLAMA31) {
        const char *sys = "";
        if (c->m[0].role == PT_CHAT_ROLE_SYSTEM) {
            sys = c->m[0].content;
            first = 1;
        } else if (c->default_system) {
            sys = c->default_system;
        }
        const char *date = c->o->date_string ? c->o->date_string
                                             : (c->t->date_default ? c->t->date_default : LLAMA31_DATE);
        TRY(cut_before(r, "<|start_header_id|>"));
        TRY(emits(r, "<|start_header_id|>system<|end_header_id|>\n\n"));
        TRY(emits(r, "Cutting Knowledge Date: December 2023\nToday Date: "));
        TRY(emits(r, date));
        TRY(emits(r, "\n\n"));
        TRY(emit_stripped(r, sys, strlen(sys)));
        TRY(emits(r, "<|eot_id|>"));
    } else if (c->default_system && c->m[0].role != PT_CHAT_ROLE_SYSTEM) {
        TRY(llama3_turn(c, "system", c->default_system, false));
    }
    for (size_t i = first; i < c->n; i++) {
        int role = c->m[i].role;
        if (c->t->variant == V_LLAMA31 && role == PT_CHAT_ROLE_TOOL) {
            TRY(cut_before(r, "<|start_header_id|>"));
            TRY(emits(r, "<|start_header_id|>ipython<|end_header_id|>\n\n"));
            TRY(emit_json_string(r, c->m[i].content));
            TRY(emits(r, "<|eot_id|>"));
            continue;
        }
        TRY(llama3_turn(c, role_str(role), c->m[i].content, role == PT_CHAT_ROLE_ASSISTANT));
    }
    if (c->o->add_generation_prompt || c->t->variant == V_LLAMA3_GENPROMPT) {
        TRY(cut_before(r, "<|start_header_id|>"));
        TRY(emits(r, "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    }
    return PT_OK;
}

static int alternation_error(size_t i, int role)
{
    return pt_err(PT_EINVAL,
                  "Conversation roles must alternate user/assistant/user/assistant/... "
                  "(message %zu is %s)",
                  i, role_str(role));
}

static int render_llama2(render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    const pt_chat_message *m = c->m;
    size_t first = 0;
    const char *sys = NULL;
    if (m[0].role == PT_CHAT_ROLE_SYSTEM) {
        sys = m[0].content;
        first = 1;
    } else if (c->default_system) {
        sys = c->default_system;
    }
    for (size_t i = first; i < c->n; i++) {
        size_t j = i - first;
        int role = m[i].role;
        if ((role == PT_CHAT_ROLE_USER) != (j % 2 == 0))
            return alternation_error(i, role);
        if (role == PT_CHAT_ROLE_USER) {
            if (c->bos) {
                TRY(cut_before(r, c->bos));
                TRY(emits(r, c->bos));
            }
            TRY(emits(r, "[INST] "));
            if (j == 0 && sys) {
                /* strip() applies to "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content. */
                size_t start = r->len;
                TRY(emits(r, "<<SYS>>\n"));
                TRY(emits(r, sys));
                TRY(emits(r, "\n<</SYS>>\n\n"));
                TRY(emits(r, m[i].content));
                size_t b = start, e = r->len;
                pt_chat_py_strip(r->text, &b, &e, false, true);
                r->len = e;
                r->text[e] = '\0';
            } else {
                TRY(emit_stripped(r, m[i].content, strlen(m[i].content)));
            }
            TRY(emits(r, " [/INST]"));
        } else if (role == PT_CHAT_ROLE_ASSISTANT) {
            TRY(span_open(r));
            TRY(emits(r, " "));
            TRY(emit_stripped(r, m[i].content, strlen(m[i].content)));
            TRY(emits(r, " "));
            if (c->eos)
                TRY(emits(r, c->eos));
            span_close(r);
        } else {
            return pt_err(PT_EUNSUPPORTED,
                          "the llama2 chat template has no %s turn (message %zu); its Jinja source "
                          "silently drops such messages",
                          role_str(role), i);
        }
    }
    return PT_OK;
}

static int render_mistral(render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    if (c->bos)
        TRY(emits(r, c->bos));
    for (size_t i = 0; i < c->n; i++) {
        int role = c->m[i].role;
        if ((role == PT_CHAT_ROLE_USER) != (i % 2 == 0))
            return alternation_error(i, role);
        if (role == PT_CHAT_ROLE_USER) {
            TRY(emits(r, "[INST] "));
            TRY(emits(r, c->m[i].content));
            TRY(emits(r, " [/INST]"));
        } else if (role == PT_CHAT_ROLE_ASSISTANT) {
            TRY(span_open(r));
            TRY(emits(r, c->m[i].content));
            if (c->eos)
                TRY(emits(r, c->eos));
            span_close(r);
            TRY(cut_after(r, c->eos));
        } else {
            return pt_err(PT_EUNSUPPORTED,
                          "Only user and assistant roles are supported! (the mistral template; "
                          "message %zu is %s)",
                          i, role_str(role));
        }
    }
    return PT_OK;
}

static int render_phi3(render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    bool vision = c->t->variant == V_PHI3_VISION;
    if (c->default_system && c->m[0].role != PT_CHAT_ROLE_SYSTEM) {
        TRY(emits(r, "<|system|>\n"));
        TRY(emits(r, c->default_system));
        TRY(emits(r, "<|end|>\n"));
    }
    for (size_t i = 0; i < c->n; i++) {
        int role = c->m[i].role;
        if (!vision && role == PT_CHAT_ROLE_TOOL)
            return pt_err(PT_EUNSUPPORTED,
                          "the phi3 chat template has no tool turn (message %zu); its Jinja source "
                          "silently drops such messages (phi3-vision writes <|tool|>)",
                          i);
        char marker[32];
        snprintf(marker, sizeof marker, "<|%s|>", role_str(role));
        bool asst = role == PT_CHAT_ROLE_ASSISTANT;
        TRY(cut_before(r, marker));
        TRY(emits(r, marker));
        TRY(emits(r, "\n"));
        if (asst)
            TRY(span_open(r));
        TRY(emits(r, c->m[i].content));
        TRY(emits(r, "<|end|>"));
        if (asst)
            span_close(r);
        TRY(emits(r, "\n"));
    }
    if (vision) {
        if (c->o->add_generation_prompt && c->m[c->n - 1].role != PT_CHAT_ROLE_ASSISTANT) {
            TRY(cut_before(r, "<|assistant|>"));
            TRY(emits(r, "<|assistant|>\n"));
        }
    } else if (c->o->add_generation_prompt) {
        TRY(cut_before(r, "<|assistant|>"));
        TRY(emits(r, "<|assistant|>\n"));
    } else if (c->eos) {
        TRY(cut_before(r, c->eos));
        TRY(emits(r, c->eos));
    }
    return PT_OK;
}

static int render_plain(render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    for (size_t i = 0; i < c->n; i++) {
        bool asst = c->m[i].role == PT_CHAT_ROLE_ASSISTANT;
        if (asst)
            TRY(span_open(r));
        TRY(emits(r, c->m[i].content));
        if (asst) {
            if (c->eos)
                TRY(emits(r, c->eos));
            span_close(r);
            TRY(cut_after(r, c->eos));
        }
    }
    return PT_OK;
}

int pt_chat_render_internal(pt_chat_rendering *r, const pt_chat_template *t,
                            const pt_chat_message *messages, size_t n_messages,
                            const pt_chat_options *opts)
{
    if (!r || !t)
        return pt_err(PT_EINVAL, "chat render: NULL template");
    pt_chat_options defaults;
    (void)pt_chat_options_init(&defaults); /* cannot fail: not NULL */
    if (opts) {
        if (opts->size < sizeof(size_t) || opts->size > sizeof defaults)
            return pt_err(PT_EINVAL, "pt_chat_options.size is %zu (expected at most %zu; use "
                                     "pt_chat_options_init)",
                          opts->size, sizeof defaults);
        memcpy(&defaults, opts, opts->size);
        defaults.size = sizeof defaults;
    }
    if (defaults.bos != PT_CHAT_BOS_TEMPLATE && defaults.bos != PT_CHAT_BOS_NONE)
        return pt_err(PT_EINVAL, "pt_chat_options.bos is %d (expected PT_CHAT_BOS_TEMPLATE or "
                                 "PT_CHAT_BOS_NONE)",
                      defaults.bos);
    if (n_messages == 0 || !messages)
        return pt_err(PT_EINVAL, "chat render: empty conversation");
    for (size_t i = 0; i < n_messages; i++) {
        if (!messages[i].content)
            return pt_err(PT_EINVAL, "chat message %zu has NULL content", i);
        if (!pt_chat_role_name(messages[i].role))
            return pt_err(PT_EINVAL, "chat message %zu has unknown role %d", i, messages[i].role);
    }
    render_ctx c = {
        .r = r,
        .t = t,
        .m = messages,
        .n = n_messages,
        .o = &defaults,
        .bos = defaults.bos == PT_CHAT_BOS_NONE ? NULL : t->bos,
        .eos = t->eos,
        .default_system = defaults.default_system ? defaults.default_system : t->default_system,
    };
    if (c.default_system && !*c.default_system)
        c.default_system = NULL;
    if (c.bos && !*c.bos)
        c.bos = NULL;
    int st = out_reserve(r, 0);
    if (st != PT_OK)
        return st;
    r->len = 0;
    r->text[0] = '\0';
    r->n_cuts = r->n_spans = 0;
    switch (t->variant) {
    case V_CHATML:
    case V_SMOLLM2: st = render_chatml(&c); break;
    case V_QWEN3: st = render_qwen3(&c); break;
    case V_LLAMA3:
    case V_LLAMA3_GENPROMPT:
    case V_LLAMA31: st = render_llama3(&c); break;
    case V_LLAMA2: st = render_llama2(&c); break;
    case V_MISTRAL: st = render_mistral(&c); break;
    case V_PHI3:
    case V_PHI3_VISION: st = render_phi3(&c); break;
    case V_PLAIN: st = render_plain(&c); break;
    default: st = pt_err(PT_EINTERNAL, "chat template variant %d", t->variant);
    }
    return st;
}

int pt_chat_render(char **text, size_t *len, const pt_chat_template *t,
                   const pt_chat_message *messages, size_t n_messages, const pt_chat_options *opts)
{
    if (!text)
        return pt_err(PT_EINVAL, "pt_chat_render: NULL text");
    *text = NULL;
    if (len)
        *len = 0;
    pt_chat_rendering r;
    memset(&r, 0, sizeof r);
    int st = pt_chat_render_internal(&r, t, messages, n_messages, opts);
    if (st != PT_OK) {
        pt_chat_rendering_clear(&r);
        return st;
    }
    *text = r.text;
    if (len)
        *len = r.len;
    r.text = NULL;
    pt_chat_rendering_clear(&r);
    return PT_OK;
}

int pt_chat_family_from_name(int *out, const char *name)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(name);
    for (int f = 0; f < 64; f++) {
        const char *n = pt_chat_family_name(f);
        if (n && !strcmp(n, name)) {
            *out = f;
            return PT_OK;
        }
    }
    return pt_err(PT_EINVAL, "%s: unknown chat family '%s'", __func__, name);
}
