/* odbox — SQL script splitting and placeholder substitution. */
#include <stdlib.h>
#include <string.h>
#include "sqlsplit.h"
#include "internal.h"

static int push(odbox_sql_script *s, const char *from, const char *to, int meaningful)
{
    while (from < to && strchr(" \t\r\n", *from))
        from++;
    while (to > from && strchr(" \t\r\n", to[-1]))
        to--;
    if (!meaningful || from == to)
        return ODBOX_OK;
    char **grown = realloc(s->stmts, (s->n + 1) * sizeof *grown);
    if (!grown)
        return ODBOX_ENOMEM;
    s->stmts = grown;
    if (!(s->stmts[s->n] = odbox_strndup(from, (size_t)(to - from))))
        return ODBOX_ENOMEM;
    s->n++;
    return ODBOX_OK;
}

static int ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           (unsigned char)c >= 0x80;
}

static int line_of(const char *text, const char *p)
{
    int line = 1;
    for (; text < p; text++)
        line += *text == '\n';
    return line;
}

int odbox_sql_split(const char *text, int rules, odbox_sql_script *out, odbox_error *err)
{
    int mysql_rules = rules & ODBOX_SQL_MYSQL, open_exec = mysql_rules && (rules & ODBOX_SQL_OPEN_EXEC);
    memset(out, 0, sizeof *out);
    if (!text)
        return odbox_fail(err, ODBOX_EINVAL, "SQL script is NULL");
    /* comments are blanked in a copy (newlines kept): a driver that looks
     * for a second statement (SQLite's ODBC driver) takes a ';' in a
     * comment for one. Optimizer hints (slash-star followed by +) are
     * kept. MySQL's rules add executable comments (slash-star followed
     * by ! or M!, kept as code), '#' comments, and backslash escapes in
     * both kinds of string ("..." is a string there, not ANSI_QUOTES'
     * identifier). */
    char *buf = strdup(text);
    if (!buf)
        return odbox_fail(err, ODBOX_ENOMEM, "SQL: out of memory");
    char *start = buf, *p = buf;
    int meaningful = 0; /* the current statement has more than comments */
    while (*p) {
        /* MySQL's -- comment wants a blank after it: 1--1 is 1 - -1 there */
        if ((p[0] == '-' && p[1] == '-' && (!mysql_rules || !p[2] || strchr(" \t\r\n", p[2]))) ||
            (mysql_rules && p[0] == '#')) {
            while (*p && *p != '\n')
                *p++ = ' ';
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            char *end = strstr(p + 2, "*/");
            if (!end)
                goto unterminated;
            int exec = mysql_rules && (p[2] == '!' || (p[2] == 'M' && p[3] == '!'));
            if (exec && open_exec) {
                char *code = p + (p[2] == '!' ? 3 : 4);
                while (*code >= '0' && *code <= '9')
                    code++;
                memset(p, ' ', (size_t)(code - p));
                end[0] = end[1] = ' ';
                p = code;
                continue;
            }
            if (exec || p[2] == '+') {
                p = end + 2;
                meaningful = 1;
                continue;
            }
            for (; p < end + 2; p++)
                if (*p != '\n')
                    *p = ' ';
            continue;
        }
        if (*p == '\'' || *p == '"' || *p == '`') {
            char q = *p;
            /* PostgreSQL's E'...' (an escape string) takes backslash
             * escapes too: E or e alone before the quote */
            int escapes = mysql_rules ? q != '`'
                                      : q == '\'' && p > buf && (p[-1] == 'E' || p[-1] == 'e') &&
                                            (p - 1 == buf || !ident_char(p[-2]));
            char *open = p++;
            for (;;) {
                if (!*p) {
                    p = open;
                    goto unterminated;
                }
                if (escapes && *p == '\\' && p[1]) {
                    p += 2;
                    continue;
                }
                if (*p == q) {
                    if (p[1] == q) { /* doubled quote */
                        p += 2;
                        continue;
                    }
                    p++;
                    break;
                }
                p++;
            }
            meaningful = 1;
            continue;
        }
        if (*p == '$' && !(p > buf && ident_char(p[-1]))) {
            /* $tag$ ... $tag$ (tag may be empty); a $ inside an
             * identifier (PostgreSQL allows x$y) starts none */
            char *t = p + 1;
            while ((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') || *t == '_' ||
                   (t > p + 1 && *t >= '0' && *t <= '9'))
                t++;
            if (*t == '$') {
                size_t tl = (size_t)(t - p + 1);
                char tag[80];
                if (tl < sizeof tag) {
                    memcpy(tag, p, tl);
                    tag[tl] = '\0';
                    char *end = strstr(t + 1, tag);
                    if (!end)
                        goto unterminated;
                    p = end + tl;
                    meaningful = 1;
                    continue;
                }
            }
        }
        if (*p == ';') {
            if (push(out, start, p, meaningful) != ODBOX_OK)
                goto oom;
            start = ++p;
            meaningful = 0;
            continue;
        }
        if (!strchr(" \t\r\n", *p))
            meaningful = 1;
        p++;
    }
    if (push(out, start, p, meaningful) != ODBOX_OK)
        goto oom;
    free(buf);
    return ODBOX_OK;
unterminated:
    odbox_sql_script_free(out);
    int line = line_of(buf, p);
    free(buf);
    return odbox_fail(err, ODBOX_EINVAL, "SQL: unterminated quote, comment or dollar quote at line %d", line);
oom:
    odbox_sql_script_free(out);
    free(buf);
    return odbox_fail(err, ODBOX_ENOMEM, "SQL: out of memory");
}

void odbox_sql_script_free(odbox_sql_script *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->stmts[i]);
    free(s->stmts);
    s->stmts = NULL;
    s->n = 0;
}

int odbox_sql_placeholders(const char *text, const char *name, const char *value, char **out,
                           odbox_error *err)
{
    odbox_buf b = {0};
    size_t nl = strlen(name);
    const char *p = text;
    *out = NULL;
    for (;;) {
        const char *m = strstr(p, "${");
        if (!m) {
            odbox_buf_append(&b, p);
            break;
        }
        odbox_buf_appendn(&b, p, (size_t)(m - p));
        if (!strncmp(m + 2, name, nl) && m[2 + nl] == '}') {
            odbox_buf_append(&b, value);
            p = m + 3 + nl;
            continue;
        }
        const char *end = strchr(m, '}');
        odbox_buf_reset(&b);
        return odbox_fail(err, ODBOX_EINVAL, "SQL: unknown placeholder '%.*s' at line %d (only ${%s})",
                          end ? (int)(end - m + 1) : 2, m, line_of(text, m), name);
    }
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "SQL: out of memory");
    return ODBOX_OK;
}

/* PostgreSQL's lexical rules, as odbox_sql_split reads them but for
 * nested comments, which PostgreSQL allows. */
char *odbox_sql_number_params(const char *sql, int *n)
{
    odbox_buf b = {0};
    const char *p = sql, *from = sql;
    *n = 0;
    while (*p) {
        const char *end = NULL;
        if (p[0] == '-' && p[1] == '-') {
            end = p + strcspn(p, "\n");
        } else if (p[0] == '/' && p[1] == '*') {
            int depth = 1;
            for (end = p + 2; *end && depth; end++)
                if (end[0] == '/' && end[1] == '*')
                    depth++, end++;
                else if (end[0] == '*' && end[1] == '/')
                    depth--, end++;
        } else if (*p == '\'' || *p == '"') {
            int escapes = *p == '\'' && p > sql && (p[-1] == 'E' || p[-1] == 'e') && (p - 1 == sql || !ident_char(p[-2]));
            for (end = p + 1; *end; end++) {
                if (escapes && *end == '\\' && end[1])
                    end++;
                else if (*end == *p && end[1] == *p)
                    end++;
                else if (*end == *p)
                    break;
            }
            if (*end)
                end++;
        } else if (*p == '$' && (p == sql || !ident_char(p[-1]))) {
            const char *t = p + 1;
            while ((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') || *t == '_' || (t > p + 1 && *t >= '0' && *t <= '9'))
                t++;
            if (*t == '$') {
                size_t tl = (size_t)(t - p + 1);
                const char *close = NULL;
                for (const char *q = t + 1; *q && !close; q++)
                    if (!strncmp(q, p, tl))
                        close = q;
                end = close ? close + tl : t + strlen(t);
            }
        } else if (*p == '?') {
            odbox_buf_appendn(&b, from, (size_t)(p - from));
            odbox_buf_appendf(&b, "$%d", ++*n);
            from = ++p;
            continue;
        }
        p = end ? end : p + 1;
    }
    odbox_buf_append(&b, from);
    if (!b.data && !b.oom)
        odbox_buf_append(&b, "");
    return odbox_buf_take(&b);
}
