/* The weight files of a model directory: model.safetensors, or
 * model.safetensors.index.json and the shards its weight_map names. */
#include "core/core.h"
#include "io/fileio.h"
#include "modelio/modelio_internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INDEX_BYTES ((size_t)64 << 20)
#define MAX_SHARDS 4096

void pt__weight_files_close(pt_weight_files *w)
{
    for (size_t i = 0; i < w->nfiles; i++) {
        pt__st_close(w->files[i]);
        pt_free(w->file_names[i]);
    }
    pt_free(w->files);
    pt_free(w->file_names);
    pt_free(w->e);
    memset(w, 0, sizeof *w);
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const pt_weight_entry *)a)->name, ((const pt_weight_entry *)b)->name);
}

/* Needs seal() first (entries sorted by name). */
const pt_weight_entry *pt__weight_files_find(const pt_weight_files *w, const char *name)
{
    pt_weight_entry key = { name, NULL, 0 };
    return w->n ? bsearch(&key, w->e, w->n, sizeof *w->e, entry_cmp) : NULL;
}

/* Sort the entries by name and reject a name held by two shards. */
static int seal(pt_weight_files *w, const char *dir)
{
    if (w->n > 1)
        qsort(w->e, w->n, sizeof *w->e, entry_cmp);
    for (size_t i = 1; i < w->n; i++)
        if (strcmp(w->e[i - 1].name, w->e[i].name) == 0)
            return pt__err(PT_EFORMAT, "%s: tensor '%s' is in both %s and %s", dir, w->e[i].name,
                          w->file_names[w->e[i - 1].shard], w->file_names[w->e[i].shard]);
    return PT_OK;
}

static int add_file(pt_weight_files *w, const char *dir, const char *fname)
{
    char *path = pt__path_join(dir, fname);
    if (!path)
        return PT_ENOMEM;
    pt_st_file *f;
    int st = pt__st_open(&f, path);
    pt_free(path);
    if (st)
        return st;
    size_t cnt = pt__st_count(f), total;
    pt_st_file **nf = pt__realloc_array(w->files, w->nfiles + 1, sizeof *nf);
    if (nf)
        w->files = nf;
    char **nn = nf ? pt__realloc_array(w->file_names, w->nfiles + 1, sizeof *nn) : NULL;
    if (nn)
        w->file_names = nn;
    pt_weight_entry *ne = NULL;
    if (nn && pt__add_size(w->n, cnt, &total))
        ne = pt__realloc_array(w->e, total ? total : 1, sizeof *ne);
    char *fn = ne ? pt__strdup(fname) : NULL;
    if (!fn) {
        if (ne)
            w->e = ne;
        pt__st_close(f);
        return PT_ENOMEM;
    }
    w->e = ne;
    int idx = (int)w->nfiles;
    w->files[w->nfiles] = f;
    w->file_names[w->nfiles] = fn;
    w->nfiles++;
    for (size_t i = 0; i < cnt; i++) {
        const pt_st_tensor *t = pt__st_tensor_at(f, i);
        w->e[w->n++] = (pt_weight_entry){ t->name, t, idx };
    }
    return PT_OK;
}

/* ---- the index ---------------------------------------------------------------- */

static bool safe_shard_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255 || s[0] == '.' || strchr(s, '/') || strchr(s, '\\'))
        return false;
    return n > 12 && strcmp(s + n - 12, ".safetensors") == 0;
}

static int item_key_cmp(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static int item_val_cmp(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->valuestring, (*(const cJSON *const *)b)->valuestring);
}

/* The weight_map of an index, checked, as two sorted arrays of its items:
 * by tensor name (no name twice) and by file name.  Sorted copies keep
 * every check O(n log n) however large a hostile index is. */
typedef struct index_map {
    const cJSON **by_key, **by_val;
    size_t n;
} index_map;

static int read_map(index_map *map, const cJSON *root, const char *path)
{
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm))
        return pt__err(PT_EFORMAT, "%s: 'weight_map' is missing or not an object", path);
    if (!wm->child)
        return pt__err(PT_EFORMAT, "%s: 'weight_map' is empty", path);
    size_t n = 0;
    for (const cJSON *c = wm->child; c; c = c->next, n++) {
        if (!cJSON_IsString(c) || !c->valuestring || !c->string)
            return pt__err(PT_EFORMAT, "%s: weight_map['%.200s'] must be a file name string", path,
                          c->string ? c->string : "");
        if (!safe_shard_name(c->valuestring))
            return pt__err(PT_EFORMAT,
                          "%s: weight_map['%.200s'] = '%.200s' is not a plain *.safetensors file "
                          "name in the directory",
                          path, c->string, c->valuestring);
    }
    map->by_key = pt__malloc_array(n, sizeof *map->by_key);
    map->by_val = pt__malloc_array(n, sizeof *map->by_val);
    if (!map->by_key || !map->by_val)
        return PT_ENOMEM;
    map->n = n;
    size_t k = 0;
    for (const cJSON *c = wm->child; c; c = c->next, k++)
        map->by_key[k] = map->by_val[k] = c;
    qsort(map->by_key, n, sizeof *map->by_key, item_key_cmp);
    qsort(map->by_val, n, sizeof *map->by_val, item_val_cmp);
    for (size_t i = 1; i < n; i++)
        if (strcmp(map->by_key[i - 1]->string, map->by_key[i]->string) == 0)
            return pt__err(PT_EFORMAT, "%s: weight_map lists '%.200s' twice", path,
                          map->by_key[i]->string);
    return PT_OK;
}

/* Open each distinct shard of the map once. */
static int open_shards(pt_weight_files *w, const index_map *map, const char *dir,
                       const char *path)
{
    for (size_t i = 0; i < map->n; i++) {
        const char *file = map->by_val[i]->valuestring;
        if (i && strcmp(map->by_val[i - 1]->valuestring, file) == 0)
            continue;
        if (w->nfiles >= MAX_SHARDS)
            return pt__err(PT_ERANGE, "%s: more than %d shards", path, MAX_SHARDS);
        int st = add_file(w, dir, file);
        if (st != PT_OK) {
            if (st == PT_ENOTFOUND)
                pt__err_prefix(st, "%s: shard named in weight_map", path);
            return st;
        }
    }
    return seal(w, dir);
}

/* The map and the shards must agree exactly. */
static int check_map(const pt_weight_files *w, const index_map *map, const char *path)
{
    for (size_t i = 0; i < map->n; i++) {
        const cJSON *c = map->by_key[i];
        const pt_weight_entry *e = pt__weight_files_find(w, c->string);
        if (!e || strcmp(w->file_names[e->shard], c->valuestring) != 0)
            return pt__err(PT_EFORMAT, "%s: weight_map puts tensor '%.200s' in %s, which has no "
                                      "such tensor",
                          path, c->string, c->valuestring);
    }
    if (map->n == w->n)
        return PT_OK;
    for (size_t i = 0; i < w->n; i++) {
        cJSON key;
        memset(&key, 0, sizeof key);
        key.string = (char *)(uintptr_t)w->e[i].name;
        const cJSON *kp = &key;
        if (!bsearch(&kp, map->by_key, map->n, sizeof *map->by_key, item_key_cmp))
            return pt__err(PT_EFORMAT, "%s: tensor '%s' in shard %s is not in weight_map", path,
                          w->e[i].name, w->file_names[w->e[i].shard]);
    }
    return PT_OK;
}

static int load_index(pt_weight_files *w, const char *dir)
{
    char *path = pt__path_join(dir, "model.safetensors.index.json");
    if (!path)
        return PT_ENOMEM;
    char *text = NULL;
    size_t len = 0;
    int st = pt__read_file(&text, &len, path, MAX_INDEX_BYTES);
    if (st) {
        pt_free(path);
        return st;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    pt_free(text);
    index_map map = { NULL, NULL, 0 };
    if (!root)
        st = pt__err(PT_EFORMAT, "%s: not valid JSON", path);
    else if ((st = read_map(&map, root, path)) == PT_OK &&
             (st = open_shards(w, &map, dir, path)) == PT_OK)
        st = check_map(w, &map, path);
    pt_free(map.by_key);
    pt_free(map.by_val);
    cJSON_Delete(root);
    pt_free(path);
    return st;
}

int pt__weight_files_open(pt_weight_files *w, const char *dir)
{
    memset(w, 0, sizeof *w);
    int st;
    if (pt__dir_has_file(dir, "model.safetensors")) {
        st = add_file(w, dir, "model.safetensors");
        if (st == PT_OK)
            st = seal(w, dir);
    } else if (pt__dir_has_file(dir, "model.safetensors.index.json")) {
        w->sharded = true;
        st = load_index(w, dir);
    } else {
        return pt__err(PT_ENOTFOUND,
                      "%s: no model.safetensors or model.safetensors.index.json (pytorch_model.bin "
                      "is not supported)",
                      dir);
    }
    if (st)
        pt__weight_files_close(w);
    return st;
}
