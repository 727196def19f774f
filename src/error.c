/* odbox — error codes, messages, and the small string helpers every
 * module uses. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "internal.h"
#include "config.h"
#include "odbox/odbox.h"

static const struct {
    int code;
    const char *name;
    const char *text;
} error_table[] = {
    {ODBOX_OK, "ODBOX_OK", "success"},
    {ODBOX_EINVAL, "ODBOX_EINVAL", "invalid argument"},
    {ODBOX_ENOMEM, "ODBOX_ENOMEM", "out of memory"},
    {ODBOX_ECONNECT, "ODBOX_ECONNECT", "could not connect to the database"},
    {ODBOX_ECONNLOST, "ODBOX_ECONNLOST", "connection to the database lost"},
    {ODBOX_ESTALE, "ODBOX_ESTALE", "stale version: the row was changed concurrently or is gone"},
    {ODBOX_EUNIQUE, "ODBOX_EUNIQUE", "unique constraint violated"},
    {ODBOX_EDEADLOCK, "ODBOX_EDEADLOCK", "deadlock or serialization failure"},
    {ODBOX_ENOTFOUND, "ODBOX_ENOTFOUND", "not found"},
    {ODBOX_ECROSSSHARD, "ODBOX_ECROSSSHARD", "the work spans several shards"},
    {ODBOX_ETIMEDOUT, "ODBOX_ETIMEDOUT", "timed out"},
    {ODBOX_EMIGRATION, "ODBOX_EMIGRATION", "migration history does not match the files"},
    {ODBOX_EUNSUPPORTED, "ODBOX_EUNSUPPORTED", "not supported by this database or driver"},
    {ODBOX_EDB, "ODBOX_EDB", "database error"},
    {ODBOX_EIO, "ODBOX_EIO", "input/output error"},
    {ODBOX_EBUSY, "ODBOX_EBUSY", "busy: held by someone else"},
    {ODBOX_EPARTIAL, "ODBOX_EPARTIAL", "partially committed: some shards committed, others failed"},
    {ODBOX_ESTATE, "ODBOX_ESTATE", "called in the wrong state"},
    {ODBOX_EINDOUBT, "ODBOX_EINDOUBT", "in doubt: the connection was lost after the commit was sent"},
    {ODBOX_EOWNER, "ODBOX_EOWNER", "the eventlog belongs to another application database or schema"},
    {ODBOX_EDISCARD, "ODBOX_EDISCARD", "discarded: the event can never be handled"},
};

const char *odbox_errname(int code)
{
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == code)
            return error_table[i].name;
    return "ODBOX_EUNKNOWN";
}

const char *odbox_strerror(int code)
{
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == code)
            return error_table[i].text;
    return "unknown error";
}

void odbox_error_clear(odbox_error *err)
{
    if (err)
        memset(err, 0, sizeof *err);
}

/* The body of odbox_fail and of the public odbox_error_set. */
static int error_vset(odbox_error *err, int code, const char *fmt, va_list ap)
{
    if (err) {
        memset(err, 0, sizeof *err);
        err->code = code;
        if (fmt)
            vsnprintf(err->message, sizeof err->message, fmt, ap);
    }
    return code;
}

int odbox_fail(odbox_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = error_vset(err, code, fmt, ap);
    va_end(ap);
    return rc;
}

int odbox_error_set(odbox_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = error_vset(err, code, fmt, ap);
    va_end(ap);
    return rc;
}

int odbox_error_prefix(odbox_error *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t cap = sizeof err->message, pl = strlen(prefix), ol = strnlen(err->message, cap - 1);
    size_t keep = ol < cap - 1 - pl - 2 ? ol : cap - 1 - pl - 2;
    memmove(err->message + pl + 2, err->message, keep);
    err->message[pl + 2 + keep] = '\0';
    memcpy(err->message, prefix, pl);
    memcpy(err->message + pl, ": ", 2);
    if (err->code == 0)
        err->code = code;
    return err->code;
}

int odbox_error_discard(odbox_error *err)
{
    if (err)
        err->code = ODBOX_EDISCARD;
    return odbox_error_prefix(err, ODBOX_EDISCARD, "discarded");
}

int odbox_commit_failed(int rc, odbox_error *err)
{
    if (rc != ODBOX_ECONNLOST)
        return rc;
    if (err) {
        odbox_error_prefix(err, rc, "IN DOUBT: the connection was lost after the commit was sent, so the server "
                                    "may or may not have committed");
        err->code = ODBOX_EINDOUBT;
    }
    return ODBOX_EINDOUBT;
}

static void buf_reserve(odbox_buf *b, size_t extra)
{
    if (b->oom)
        return;
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->data = p;
    b->cap = cap;
}

void odbox_buf_appendn(odbox_buf *b, const char *s, size_t n)
{
    buf_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void odbox_buf_append(odbox_buf *b, const char *s)
{
    odbox_buf_appendn(b, s, strlen(s));
}

void odbox_buf_cat(odbox_buf *b, ...)
{
    va_list ap;
    va_start(ap, b);
    for (const char *s; (s = va_arg(ap, const char *));)
        odbox_buf_append(b, s);
    va_end(ap);
}

void odbox_buf_list(odbox_buf *b, const char *item, size_t n)
{
    for (size_t i = 0; i < n; i++)
        odbox_buf_cat(b, i ? ", " : "", item, (char *)NULL);
}

void odbox_buf_appendf(odbox_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    buf_reserve(b, (size_t)n);
    if (b->oom)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *odbox_buf_take(odbox_buf *b)
{
    char *s = b->oom ? NULL : b->data;
    if (!s && !b->oom)
        s = odbox_strdup("");
    if (b->oom)
        free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
    return s;
}

void odbox_buf_reset(odbox_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

char *odbox_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

char *odbox_strndup(const char *s, size_t n)
{
    return s ? strndup(s, n) : NULL;
}

int odbox_strcaseeq(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    for (; *a && *b; a++, b++) {
        char x = *a, y = *b;
        if (x >= 'A' && x <= 'Z')
            x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (char)(y - 'A' + 'a');
        if (x != y)
            return 0;
    }
    return *a == *b;
}

size_t odbox_utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
               : s[0] >= 0xe0 && s[0] <= 0xef ? 3
               : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                              : 0;
    for (size_t i = 1; i < n; i++) /* stops at a NUL: no read past the end */
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    /* overlong forms, surrogates and code points past U+10FFFF */
    if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
        (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

long odbox_utf8_bad_at(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0, len; u[i]; i += len)
        if ((len = u[i] < 0x80 ? 1 : odbox_utf8_len(u + i)) == 0)
            return (long)i;
    return -1;
}

int odbox_json_storable(const char *json, const char *what, const char *name, const char *subject, int plural,
                        odbox_error *err)
{
    const char *sep = name ? " " : "";
    if (!name)
        name = "";
    if (odbox_json_has_nul(json))
        return odbox_fail(err, ODBOX_EINVAL, "%s%s%s: %s %s the character U+0000, which PostgreSQL cannot store",
                          what, sep, name, subject, plural ? "hold" : "holds");
    long bad = odbox_utf8_bad_at(json);
    if (bad >= 0)
        return odbox_fail(err, ODBOX_EINVAL,
                          "%s%s%s: %s %s not valid UTF-8 (byte %ld of %s JSON text), which PostgreSQL and "
                          "MySQL/MariaDB cannot store",
                          what, sep, name, subject, plural ? "are" : "is", bad, plural ? "their" : "its");
    int depth = odbox_json_depth(json);
    if (depth > ODBOX_JSON_DEPTH_MAX)
        return odbox_fail(err, ODBOX_EINVAL,
                          "%s%s%s: %s %s nested %d levels deep; at most %d can be stored on every database "
                          "(MariaDB refuses more) and read back for the handlers",
                          what, sep, name, subject, plural ? "are" : "is", depth, ODBOX_JSON_DEPTH_MAX);
    return ODBOX_OK;
}

const unsigned char odbox_hex_digit[256] = {
#define X16 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16
    X16, X16, X16,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 16, 16, 16, 16, 16,             /* '0'..'9' */
    16, 10, 11, 12, 13, 14, 15, 16, 16, 16, 16, 16, 16, 16, 16, 16,   /* 'A'..'F' */
    X16,
    16, 10, 11, 12, 13, 14, 15, 16, 16, 16, 16, 16, 16, 16, 16, 16,   /* 'a'..'f' */
    X16, X16, X16, X16, X16, X16, X16, X16, X16,
#undef X16
};

/* Public (odbox/registry.h); here, with the other string helpers, since
 * every layer from the DSN grammar up checks names. */
int odbox_name_is_valid(const char *name)
{
    if (!name || !*name || strlen(name) >= ODBOX_NAME_MAX)
        return 0;
    if (!((*name >= 'a' && *name <= 'z') || *name == '_'))
        return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return 0;
    return 1;
}

int odbox_hex_value(int c)
{
    return c >= 0 && c <= 255 && odbox_hex_digit[c] < 16 ? odbox_hex_digit[c] : -1;
}

void odbox_free_secret(char *s)
{
    if (!s)
        return;
    volatile char *p = s;
    while (*p)
        *p++ = 0;
    free(s);
}

static _Atomic int64_t clock_skew_us;

void odbox_clock_skew_set(int64_t skew_us) { atomic_store(&clock_skew_us, skew_us); }

int64_t odbox_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 + atomic_load_explicit(&clock_skew_us, memory_order_relaxed);
}

const char *odbox_version(void) { return PACKAGE_VERSION; }

/* The file's size when stat knows it (a regular file), as the first
 * guess of what to allocate; files whose size stat does not tell (pipes,
 * /proc) start small. Either grows while there is more. */
static size_t first_capacity(FILE *f, size_t max)
{
    struct stat st;
    /* + 1: a read of one byte more sees the end, and the NUL has room */
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
        return (uintmax_t)st.st_size < max ? (size_t)st.st_size + 1 : max + 1;
    return max < 4096 ? max + 1 : 4096;
}

int odbox_read_text_file(const char *what, const char *path, size_t max, char **out, size_t *len,
                         odbox_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return odbox_fail(err, ODBOX_EIO, "%s: cannot open '%.300s': %s", what, path, strerror(errno));
    /* A buffer of the file's size, not of max: a migration run keeps
     * every file's text at once. */
    size_t cap = first_capacity(f, max), n = 0;
    char *buf = malloc(cap);
    int rc = buf ? ODBOX_OK : odbox_fail(err, ODBOX_ENOMEM, "%s: out of memory", what);
    while (rc == ODBOX_OK) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || cap == max + 1)
            break; /* the end, an error, or more than max */
        size_t grown = cap > (max + 1) / 2 ? max + 1 : cap * 2;
        char *g = realloc(buf, grown);
        if (!g)
            rc = odbox_fail(err, ODBOX_ENOMEM, "%s: out of memory", what);
        else
            buf = g, cap = grown;
    }
    int bad = ferror(f);
    fclose(f);
    if (rc == ODBOX_OK && bad)
        rc = odbox_fail(err, ODBOX_EIO, "%s: cannot read '%.300s'", what, path);
    else if (rc == ODBOX_OK && n > max)
        rc = odbox_fail(err, ODBOX_EINVAL, "%s: '%.300s' is larger than %zu bytes", what, path, max);
    else if (rc == ODBOX_OK && memchr(buf, '\0', n))
        rc = odbox_fail(err, ODBOX_EINVAL, "%s: '%.300s' contains a NUL byte", what, path);
    if (rc != ODBOX_OK) {
        free(buf);
        return rc;
    }
    if (cap > n + 1) { /* a file that shrank, or a pipe: give back the rest */
        char *g = realloc(buf, n + 1);
        if (g)
            buf = g;
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return ODBOX_OK;
}

int odbox_json_has_nul(const char *json)
{
    for (const char *p = json; p && *p; p++)
        if (*p == '\\') { /* in json-c's text a backslash is always an escape's start */
            if (p[1] == 'u' && !strncmp(p + 2, "0000", 4))
                return 1;
            if (p[1])
                p++;
        }
    return 0;
}

int odbox_json_depth(const char *json)
{
    int depth = 0, deepest = 0, in_string = 0;
    for (const char *p = json; p && *p; p++) {
        if (in_string) {
            if (*p == '\\' && p[1])
                p++; /* an escaped quote does not end the string */
            else if (*p == '"')
                in_string = 0;
        } else if (*p == '"') {
            in_string = 1;
        } else if (*p == '[' || *p == '{') {
            if (++depth > deepest)
                deepest = depth;
        } else if (*p == ']' || *p == '}') {
            depth--;
        }
    }
    return deepest;
}
