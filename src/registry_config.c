/* odbox — registry JSON config files.
 *
 *   {
 *     "default_shard": "0.0",
 *     "pool": { "size": 10, "acquire_timeout_ms": 30000 },
 *     "shards": [
 *       { "group": 0, "member": 0, "primary": "postgresql://...",
 *         "replica": "postgresql://...", "eventlog": "eventlog",
 *         "pool": { "size": 4 } }
 *     ]
 *   }
 *
 * Every problem is reported with the path of the offending key; unknown
 * keys are errors (a misspelt "replcia" must not silently mean "none"),
 * and so is a key given twice in one object (json-c would keep the last). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "odbox/registry.h"
#include "internal.h"

#define CONFIG_MAX_BYTES (1024 * 1024)
#define CONFIG_MAX_SHARDS (256 * 64)

static int check_keys(json_object *o, const char *path, const char *const *allowed, odbox_error *err)
{
    json_object_object_foreach(o, key, val) {
        (void)val;
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            ok |= !strcmp(key, *a);
        if (!ok)
            return odbox_fail(err, ODBOX_EINVAL, "config: %s: unknown key '%.64s'", path, key);
    }
    return ODBOX_OK;
}

static int get_int(json_object *o, const char *key, const char *path, int min, int max, int *out,
                   int required, odbox_error *err)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v)) {
        if (required)
            return odbox_fail(err, ODBOX_EINVAL, "config: %s.%s is required", path, key);
        return ODBOX_OK;
    }
    if (!json_object_is_type(v, json_type_int))
        return odbox_fail(err, ODBOX_EINVAL, "config: %s.%s must be an integer", path, key);
    int64_t x = json_object_get_int64(v);
    if (x < min || x > max)
        return odbox_fail(err, ODBOX_EINVAL, "config: %s.%s: %lld is out of range %d..%d", path, key,
                          (long long)x, min, max);
    *out = (int)x;
    return ODBOX_OK;
}

static int get_string(json_object *o, const char *key, const char *path, const char **out,
                      int required, odbox_error *err)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
        if (required)
            return odbox_fail(err, ODBOX_EINVAL, "config: %s.%s is required", path, key);
        return ODBOX_OK;
    }
    if (!json_object_is_type(v, json_type_string))
        return odbox_fail(err, ODBOX_EINVAL, "config: %s.%s must be a string", path, key);
    const char *s = json_object_get_string(v);
    if (!*s)
        return odbox_fail(err, ODBOX_EINVAL, "config: %s.%s must not be empty", path, key);
    if (strlen(s) != (size_t)json_object_get_string_len(v))
        return odbox_fail(err, ODBOX_EINVAL, "config: %s.%s contains a NUL character", path, key);
    *out = s;
    return ODBOX_OK;
}

static int get_pool(json_object *o, const char *path, odbox_pool_config *pool, odbox_error *err)
{
    static const char *const keys[] = {"size", "acquire_timeout_ms", NULL};
    json_object *p;
    char sub[64];
    int rc;
    if (!json_object_object_get_ex(o, "pool", &p))
        return ODBOX_OK;
    snprintf(sub, sizeof sub, "%s.pool", path);
    if (!json_object_is_type(p, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "config: %s must be an object", sub);
    if ((rc = check_keys(p, sub, keys, err)) != ODBOX_OK ||
        (rc = get_int(p, "size", sub, 1, 10000, &pool->size, 0, err)) != ODBOX_OK ||
        (rc = get_int(p, "acquire_timeout_ms", sub, 1, 3600000, &pool->acquire_timeout_ms, 0, err)) != ODBOX_OK)
        return rc;
    return ODBOX_OK;
}

/* Parses text (len bytes) as one JSON value, nothing but whitespace after
 * it; a syntax error says its line. */
static int parse_json(const char *text, size_t len, json_object **root_out, odbox_error *err)
{
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return odbox_fail(err, ODBOX_ENOMEM, "config: out of memory");
    json_object *root = json_tokener_parse_ex(tok, text, (int)len + 1);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t offset = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    size_t rest = offset;
    while (rest < len && strchr(" \t\r\n", text[rest]))
        rest++;
    if (root && jerr == json_tokener_success && rest < len) {
        json_object_put(root);
        root = NULL;
        offset = rest;
    }
    if (!root || jerr != json_tokener_success) {
        int line = 1;
        for (size_t i = 0; i < offset && i < len; i++)
            line += text[i] == '\n';
        json_object_put(root);
        return odbox_fail(err, ODBOX_EINVAL, "config: invalid JSON near line %d: %s", line,
                          jerr == json_tokener_success ? "trailing data" : json_tokener_error_desc(jerr));
    }
    *root_out = root;
    return ODBOX_OK;
}

/* ---- keys given twice ----------------------------------------------------
 * json-c keeps the last value of a key given twice in one object, and
 * offers no flag to refuse it; so the text json-c accepted is walked
 * again: strings ("..." and json-c's '...', with escapes), comments, and
 * the brackets that nest objects and arrays. The first string of each
 * member of an object is its key, decoded by json-c itself (so "a\u0062"
 * is "ab", as the parsed object has it) and looked up in a json-c object
 * of the keys seen so far in that object. */

#define KEYS_MAX_DEPTH 64 /* json-c refuses deeper nesting (32) first */

typedef struct key_level {
    json_object *seen; /* objects: the keys so far; NULL for an array */
    int want_key;      /* objects: the next string is a key */
    size_t index;      /* arrays: of the current element */
    char key[72];      /* objects: the current member's key */
} key_level;

/* "(top)", "shards[1]", "shards[1].pool": where level depth - 1 is. */
static void key_path(const key_level *lv, int depth, char *out, size_t cap)
{
    odbox_buf b = {0};
    for (int i = 1; i < depth; i++) {
        if (lv[i - 1].seen)
            odbox_buf_cat(&b, i > 1 ? "." : "", lv[i - 1].key, (char *)NULL);
        else
            odbox_buf_appendf(&b, "[%zu]", lv[i - 1].index);
    }
    char *p = odbox_buf_take(&b);
    snprintf(out, cap, "%s", p && *p ? p : "(top)");
    free(p);
}

/* The end of the string that starts at p (its closing quote), or NULL. */
static const char *string_end(const char *p, const char *end)
{
    char q = *p;
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == q)
            return p;
    }
    return NULL;
}

/* Records the key text[from..to] (quotes included) in lv; ODBOX_EINVAL
 * when lv has it already. */
static int see_key(key_level *lv, int depth, const char *text, const char *from, const char *to, odbox_error *err)
{
    key_level *l = &lv[depth - 1];
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return odbox_fail(err, ODBOX_ENOMEM, "config: out of memory");
    json_object *k = json_tokener_parse_ex(tok, from, (int)(to - from + 1));
    json_tokener_free(tok);
    if (!k)
        k = json_object_new_string_len(from + 1, (int)(to - from - 1)); /* as written: cannot be, json-c read it */
    if (!k || !json_object_is_type(k, json_type_string)) {
        json_object_put(k);
        return odbox_fail(err, ODBOX_ENOMEM, "config: out of memory");
    }
    const char *key = json_object_get_string(k);
    int rc = ODBOX_OK;
    if (json_object_object_get_ex(l->seen, key, NULL)) {
        char path[256];
        int line = 1;
        for (const char *c = text; c < from; c++)
            line += *c == '\n';
        key_path(lv, depth, path, sizeof path);
        rc = odbox_fail(err, ODBOX_EINVAL, "config: %s: duplicate key '%.64s' (line %d): give each key once",
                        path, key, line);
    } else if (json_object_object_add(l->seen, key, NULL) != 0) {
        rc = odbox_fail(err, ODBOX_ENOMEM, "config: out of memory");
    }
    snprintf(l->key, sizeof l->key, "%s", key);
    json_object_put(k);
    return rc;
}

/* ODBOX_EINVAL naming the first key given twice in one object of text
 * (len bytes, which json-c parsed). */
static int check_duplicate_keys(const char *text, size_t len, odbox_error *err)
{
    key_level lv[KEYS_MAX_DEPTH];
    int depth = 0, rc = ODBOX_OK;
    const char *p = text, *end = text + len;
    for (; p < end && rc == ODBOX_OK; p++) {
        if (p[0] == '/' && p + 1 < end && (p[1] == '*' || p[1] == '/')) {
            const char *close = p[1] == '*' ? strstr(p + 2, "*/") : strchr(p + 2, '\n');
            p = close ? close + (p[1] == '*') : end;
        } else if (*p == '{' || *p == '[') {
            if (depth == KEYS_MAX_DEPTH) {
                rc = odbox_fail(err, ODBOX_EINVAL, "config: nested more than %d deep", KEYS_MAX_DEPTH);
                break;
            }
            lv[depth] = (key_level){.want_key = 1};
            if (*p == '{' && !(lv[depth].seen = json_object_new_object()))
                rc = odbox_fail(err, ODBOX_ENOMEM, "config: out of memory");
            depth++;
        } else if ((*p == '}' || *p == ']') && depth > 0) {
            json_object_put(lv[--depth].seen);
        } else if (*p == ',' && depth > 0) {
            lv[depth - 1].want_key = 1;
            lv[depth - 1].index++;
        } else if (*p == '"' || *p == '\'') {
            const char *close = string_end(p, end);
            if (!close)
                break; /* json-c took it: cannot be */
            if (depth > 0 && lv[depth - 1].seen && lv[depth - 1].want_key) {
                lv[depth - 1].want_key = 0;
                rc = see_key(lv, depth, text, p, close, err);
            }
            p = close;
        }
    }
    while (depth > 0)
        json_object_put(lv[--depth].seen);
    return rc;
}

/* shards[i], the object o, into *sc: its pool starts from defaults. */
static int parse_shard(json_object *o, size_t i, const odbox_pool_config *defaults, odbox_shard_config *sc,
                       odbox_error *err)
{
    static const char *const shard_keys[] = {"group", "member", "primary", "replica", "eventlog", "pool", NULL};
    char path[32];
    int rc;
    snprintf(path, sizeof path, "shards[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "config: %s must be an object", path);
    sc->pool = *defaults;
    if ((rc = check_keys(o, path, shard_keys, err)) != ODBOX_OK ||
        (rc = get_int(o, "group", path, 0, ODBOX_SHARD_GROUP_MAX, &sc->id.group, 1, err)) != ODBOX_OK ||
        (rc = get_int(o, "member", path, 0, ODBOX_SHARD_MEMBER_MAX, &sc->id.member, 1, err)) != ODBOX_OK ||
        (rc = get_string(o, "primary", path, &sc->primary_dsn, 1, err)) != ODBOX_OK ||
        (rc = get_string(o, "replica", path, &sc->replica_dsn, 0, err)) != ODBOX_OK ||
        (rc = get_string(o, "eventlog", path, &sc->eventlog, 0, err)) != ODBOX_OK ||
        (rc = get_pool(o, path, &sc->pool, err)) != ODBOX_OK)
        return rc;
    if (sc->eventlog && !odbox_name_is_valid(sc->eventlog))
        return odbox_fail(err, ODBOX_EINVAL,
                          "config: %s.eventlog: '%.80s' is not a valid name ([a-z_][a-z0-9_]*, at most %d characters)",
                          path, sc->eventlog, ODBOX_NAME_MAX - 1);
    return ODBOX_OK;
}

/* The "shards" array of root into cfg; the array of shard configs it
 * allocates is *sc_out (the caller frees it, also on failure). */
static int parse_shards(json_object *root, const odbox_pool_config *defaults, odbox_registry_config *cfg,
                        odbox_shard_config **sc_out, odbox_error *err)
{
    json_object *shards;
    if (!json_object_object_get_ex(root, "shards", &shards))
        return odbox_fail(err, ODBOX_EINVAL, "config: \"shards\" is required");
    if (!json_object_is_type(shards, json_type_array) || json_object_array_length(shards) == 0)
        return odbox_fail(err, ODBOX_EINVAL, "config: \"shards\" must be a non-empty array");
    cfg->nshards = json_object_array_length(shards);
    if (cfg->nshards > CONFIG_MAX_SHARDS)
        return odbox_fail(err, ODBOX_EINVAL, "config: more than %d shards", CONFIG_MAX_SHARDS);
    odbox_shard_config *sc = calloc(cfg->nshards, sizeof *sc);
    if (!sc)
        return odbox_fail(err, ODBOX_ENOMEM, "config: out of memory");
    *sc_out = sc;
    for (size_t i = 0; i < cfg->nshards; i++) {
        int rc = parse_shard(json_object_array_get_idx(shards, i), i, defaults, &sc[i], err);
        if (rc != ODBOX_OK)
            return rc;
    }
    cfg->shards = sc;
    return ODBOX_OK;
}

/* root's optional "default_shard" ("G.M") into cfg. */
static int parse_default_shard(json_object *root, odbox_registry_config *cfg, odbox_error *err)
{
    json_object *def;
    if (!json_object_object_get_ex(root, "default_shard", &def))
        return ODBOX_OK;
    if (!json_object_is_type(def, json_type_string))
        return odbox_fail(err, ODBOX_EINVAL, "config: default_shard must be a string such as \"0.0\"");
    int rc = odbox_shard_id_parse(json_object_get_string(def), &cfg->default_shard, err);
    if (rc != ODBOX_OK) {
        odbox_error_prefix(err, rc, "config: default_shard");
        return rc;
    }
    cfg->has_default = 1;
    return ODBOX_OK;
}

int odbox_registry_parse(const char *text, odbox_registry **out, odbox_error *err)
{
    /* "relays": read by `odbox relay` (tools/relay_cmd.c), one file for both */
    static const char *const top_keys[] = {"default_shard", "pool", "shards", "relays", NULL};
    json_object *root = NULL;
    odbox_shard_config *sc = NULL;
    odbox_registry_config cfg = {0};
    odbox_pool_config defaults = {0};
    int rc;

    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "config: out is NULL");
    *out = NULL;
    if (!text)
        return odbox_fail(err, ODBOX_EINVAL, "config: no text");
    size_t len = strlen(text);
    if (len > CONFIG_MAX_BYTES)
        return odbox_fail(err, ODBOX_EINVAL, "config: larger than %d bytes", CONFIG_MAX_BYTES);
    if ((rc = parse_json(text, len, &root, err)) != ODBOX_OK)
        return rc;
    if ((rc = check_duplicate_keys(text, len, err)) != ODBOX_OK)
        goto out;
    if (!json_object_is_type(root, json_type_object)) {
        rc = odbox_fail(err, ODBOX_EINVAL, "config: the top level must be an object");
        goto out;
    }
    if ((rc = check_keys(root, "(top)", top_keys, err)) != ODBOX_OK ||
        (rc = get_pool(root, "(top)", &defaults, err)) != ODBOX_OK ||
        (rc = parse_shards(root, &defaults, &cfg, &sc, err)) != ODBOX_OK ||
        (rc = parse_default_shard(root, &cfg, err)) != ODBOX_OK)
        goto out;
    if ((rc = odbox_registry_open(&cfg, out, err)) != ODBOX_OK)
        odbox_error_prefix(err, rc, "config");
out:
    free(sc);
    json_object_put(root);
    return rc;
}

int odbox_registry_load(const char *path, odbox_registry **out, odbox_error *err)
{
    if (out)
        *out = NULL;
    if (!path || !*path)
        return odbox_fail(err, ODBOX_EINVAL, "config: no file name");
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "config: out is NULL");
    char *buf = NULL;
    int rc = odbox_read_text_file("config", path, CONFIG_MAX_BYTES, &buf, NULL, err);
    if (rc == ODBOX_OK)
        rc = odbox_registry_parse(buf, out, err);
    free(buf);
    return rc;
}
