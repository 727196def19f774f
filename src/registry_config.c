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
 * keys are errors (a misspelt "replcia" must not silently mean "none"). */
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
    char *buf = NULL;
    int rc = odbox_read_text_file("config", path, CONFIG_MAX_BYTES, &buf, NULL, err);
    if (rc == ODBOX_OK)
        rc = odbox_registry_parse(buf, out, err);
    free(buf);
    return rc;
}
