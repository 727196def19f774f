/* odbox — a strict parser of the Prometheus text format 0.0.4 (see
 * promparse.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "promparse.h"

#define MAXL 32 /* labels on one sample */

typedef struct label {
    char name[128];
    char value[1024];
} label;

typedef struct series_t {
    char key[2048]; /* name + sorted labels without le / quantile */
    int has_sum, has_count, has_inf;
    double last_le, last_cum, inf_count, count;
    int nbuckets;
    struct series_t *next;
} series_t;

typedef struct parser {
    int line;
    char *msg;
    size_t cap;
    char family[128], type[16];
    int has_help, has_type;
    char done[8192]; /* "\nname\n" of finished families */
    series_t *list;       /* series of the current family */
    char **sample_keys; /* every series key written, to find repeats */
    size_t nkeys, capkeys;
} parser;

static int fail(parser *p, const char *fmt, ...)
{
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(p->msg, p->cap, "line %d: %s", p->line, m);
    return -1;
}

static int alpha_(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int digit(int c) { return c >= '0' && c <= '9'; }

/* Reads a name at *s into out; colons for metric names. */
static int read_name(const char **s, char *out, size_t cap, int colons)
{
    const char *b = *s;
    if (!(alpha_(**s) || (colons && **s == ':')))
        return -1;
    while (alpha_(**s) || digit(**s) || (colons && **s == ':'))
        (*s)++;
    size_t n = (size_t)(*s - b);
    if (n >= cap)
        return -1;
    memcpy(out, b, n);
    out[n] = '\0';
    return 0;
}

static int utf8_ok(const unsigned char *s)
{
    while (*s) {
        size_t n = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
                                 : s[0] >= 0xf0 && s[0] <= 0xf4                             ? 4
                                                                                              : 0;
        if (!n)
            return 0;
        for (size_t i = 1; i < n; i++)
            if ((s[i] & 0xc0) != 0x80)
                return 0;
        if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
            (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
            return 0;
        s += n;
    }
    return 1;
}

/* Go's ParseFloat as the text format uses it: decimal numbers, NaN, +Inf, -Inf. */
static int parse_value(const char *t, double *v)
{
    if (!strcmp(t, "NaN")) {
        *v = NAN;
        return 0;
    }
    if (!strcmp(t, "+Inf") || !strcmp(t, "-Inf")) {
        *v = t[0] == '+' ? INFINITY : -INFINITY;
        return 0;
    }
    if (!*t || strspn(t, "0123456789.eE+-") != strlen(t))
        return -1;
    char *end;
    *v = strtod(t, &end);
    return *end ? -1 : 0;
}

/* Unescapes a label value (\\, \", \n) up to the closing quote. */
static int read_label_value(const char **s, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        char c = *(*s)++;
        if (!c || c == '\n')
            return -1;
        if (c == '"')
            break;
        if (c == '\\') {
            char e = *(*s)++;
            c = e == '\\' ? '\\' : e == '"' ? '"' : e == 'n' ? '\n' : 0;
            if (!c)
                return -1;
        }
        if (n + 1 >= cap)
            return -1;
        out[n++] = c;
    }
    out[n] = '\0';
    return 0;
}

static int label_cmp(const void *a, const void *b) { return strcmp(((const label *)a)->name, ((const label *)b)->name); }

static int end_family(parser *p)
{
    for (series_t *s = p->list; s; s = s->next) {
        if (!strcmp(p->type, "histogram") || !strcmp(p->type, "summary")) {
            if (!s->has_sum || !s->has_count)
                return fail(p, "%s: series %s lacks _sum or _count", p->family, s->key);
        }
        if (!strcmp(p->type, "histogram")) {
            if (!s->has_inf)
                return fail(p, "%s: series %s has no le=\"+Inf\" bucket", p->family, s->key);
            if (s->inf_count != s->count)
                return fail(p, "%s: series %s: +Inf bucket %g but _count %g", p->family, s->key, s->inf_count, s->count);
        }
    }
    while (p->list) {
        series_t *n = p->list->next;
        free(p->list);
        p->list = n;
    }
    if (p->family[0]) {
        if (!p->has_help || !p->has_type)
            return fail(p, "%s: HELP and TYPE are both required", p->family);
        size_t l = strlen(p->done);
        snprintf(p->done + l, sizeof p->done - l, "\n%s\n", p->family);
    }
    p->family[0] = '\0';
    p->has_help = p->has_type = 0;
    p->type[0] = '\0';
    return 0;
}

static int begin_family(parser *p, const char *name)
{
    if (!strcmp(p->family, name))
        return 0;
    if (end_family(p))
        return -1;
    char key[160];
    snprintf(key, sizeof key, "\n%s\n", name);
    if (strstr(p->done, key))
        return fail(p, "family %s appears again after other families", name);
    snprintf(p->family, sizeof p->family, "%s", name);
    return 0;
}

static int comment_line(parser *p, const char *s)
{
    char name[128];
    if (!strncmp(s, "# HELP ", 7)) {
        s += 7;
        if (read_name(&s, name, sizeof name, 1) || *s != ' ')
            return fail(p, "HELP: bad metric name");
        if (begin_family(p, name))
            return -1;
        if (p->has_help || p->list)
            return fail(p, "%s: HELP twice or after samples", name);
        for (s++; *s; s++)
            if (*s == '\\' && s[1] != '\\' && s[1] != 'n')
                return fail(p, "%s: HELP has a bad escape", name);
            else if (*s == '\\')
                s++;
        if (!utf8_ok((const unsigned char *)s))
            return fail(p, "%s: HELP is not UTF-8", name);
        p->has_help = 1;
        return 0;
    }
    if (!strncmp(s, "# TYPE ", 7)) {
        s += 7;
        if (read_name(&s, name, sizeof name, 1) || *s != ' ')
            return fail(p, "TYPE: bad metric name");
        if (begin_family(p, name))
            return -1;
        if (p->has_type || p->list)
            return fail(p, "%s: TYPE twice or after samples", name);
        s++;
        if (strcmp(s, "counter") && strcmp(s, "gauge") && strcmp(s, "histogram") && strcmp(s, "summary") &&
            strcmp(s, "untyped"))
            return fail(p, "%s: unknown type '%s'", name, s);
        snprintf(p->type, sizeof p->type, "%s", s);
        p->has_type = 1;
        return 0;
    }
    return fail(p, "a comment other than HELP or TYPE");
}

static series_t *series_of(parser *p, const char *key)
{
    for (series_t *s = p->list; s; s = s->next)
        if (!strcmp(s->key, key))
            return s;
    series_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    snprintf(s->key, sizeof s->key, "%s", key);
    s->last_le = -INFINITY;
    s->next = p->list;
    p->list = s;
    return s;
}

static int remember(parser *p, const char *key)
{
    for (size_t i = 0; i < p->nkeys; i++)
        if (!strcmp(p->sample_keys[i], key))
            return fail(p, "series %s written twice", key);
    if (p->nkeys == p->capkeys) {
        size_t cap = p->capkeys ? p->capkeys * 2 : 64;
        char **n = realloc(p->sample_keys, cap * sizeof *n);
        if (!n)
            return fail(p, "out of memory");
        p->sample_keys = n, p->capkeys = cap;
    }
    if (!(p->sample_keys[p->nkeys] = strdup(key)))
        return fail(p, "out of memory");
    p->nkeys++;
    return 0;
}

/* The labels of a sample, *sp at its '{': past the '}' on return. */
static int read_labels(parser *p, const char **sp, const char *name, label *l, int *nlp)
{
    const char *s = *sp + 1;
    int nl = 0;
    while (*s != '}') {
        if (nl == MAXL)
            return fail(p, "too many labels");
        if (read_name(&s, l[nl].name, sizeof l[nl].name, 0) || *s++ != '=' || *s++ != '"' ||
            read_label_value(&s, l[nl].value, sizeof l[nl].value))
            return fail(p, "%s: bad label", name);
        if (!strncmp(l[nl].name, "__", 2))
            return fail(p, "%s: reserved label name %s", name, l[nl].name);
        if (!utf8_ok((const unsigned char *)l[nl].value))
            return fail(p, "%s: label %s is not UTF-8", name, l[nl].name);
        for (int i = 0; i < nl; i++)
            if (!strcmp(l[i].name, l[nl].name))
                return fail(p, "%s: label %s twice", name, l[nl].name);
        nl++;
        if (*s == ',') {
            s++;
            if (*s == '}')
                return fail(p, "%s: a trailing comma", name);
        } else if (*s != '}')
            return fail(p, "%s: labels not closed", name);
    }
    *sp = s + 1;
    *nlp = nl;
    return 0;
}

/* Which family (into fam) and part ("", "_bucket", "_sum", "_count") the
 * sample name of value v is: the current family's, of a part its type
 * has. */
static int family_part(parser *p, const char *name, double v, char *fam, size_t cap, const char **part)
{
    *part = "";
    snprintf(fam, cap, "%s", name);
    if (strcmp(p->family, name)) {
        static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
        for (int k = 0; k < 3; k++) {
            size_t nl2 = strlen(name), sl = strlen(suffixes[k]);
            if (nl2 > sl && !strcmp(name + nl2 - sl, suffixes[k]) && !strncmp(name, p->family, nl2 - sl) &&
                strlen(p->family) == nl2 - sl) {
                *part = suffixes[k];
                fam[nl2 - sl] = '\0';
            }
        }
    }
    if (strcmp(fam, p->family))
        return fail(p, "sample %s outside its family (HELP and TYPE first, samples together)", name);
    if (!p->has_type)
        return fail(p, "%s: sample before TYPE", name);
    int hist = !strcmp(p->type, "histogram"), summ = !strcmp(p->type, "summary");
    if (!hist && !summ && **part)
        return fail(p, "%s: a %s family has no %s samples", name, p->type, *part);
    if (hist && !**part)
        return fail(p, "%s: a histogram's samples are _bucket, _sum and _count", name);
    if (summ && !strcmp(*part, "_bucket"))
        return fail(p, "%s: a summary has no buckets", name);
    if (!strcmp(p->type, "counter") && (v < 0 || isnan(v)))
        return fail(p, "%s: a counter of %g", name, v);
    return 0;
}

/* What a part of a histogram or summary says about its series se: a sum,
 * a count, a bucket (le increasing, counts cumulative) or a quantile. */
static int series_part(parser *p, series_t *se, const char *name, const char *part, double v, const char *le,
                       const char *quantile, int summ)
{
    if (!strcmp(part, "_sum"))
        se->has_sum = 1;
    else if (!strcmp(part, "_count")) {
        if (v < 0 || isnan(v))
            return fail(p, "%s: a count of %g", name, v);
        se->has_count = 1, se->count = v;
    } else if (!strcmp(part, "_bucket")) {
        double bound;
        if (!le || parse_value(le, &bound) || isnan(bound))
            return fail(p, "%s: a bucket without a valid le", name);
        if (se->has_inf || bound <= se->last_le)
            return fail(p, "%s: le %s does not increase", name, le);
        if (v < se->last_cum || isnan(v))
            return fail(p, "%s: bucket counts are not cumulative", name);
        se->last_le = bound, se->last_cum = v;
        if (isinf(bound))
            se->has_inf = 1, se->inf_count = v;
    } else if (summ && !*part) {
        double q;
        if (!quantile || parse_value(quantile, &q) || !(q >= 0 && q <= 1))
            return fail(p, "%s: a summary sample without a quantile in 0..1", name);
    }
    return 0;
}

static int sample_line(parser *p, const char *s)
{
    char name[128];
    label l[MAXL];
    int nl = 0;
    if (read_name(&s, name, sizeof name, 1))
        return fail(p, "bad metric name");
    if (*s == '{' && read_labels(p, &s, name, l, &nl))
        return -1;
    if (*s++ != ' ')
        return fail(p, "%s: no space before the value", name);
    double v;
    if (parse_value(s, &v))
        return fail(p, "%s: bad value '%s' (or a timestamp, which odbox never writes)", name, s);

    /* which family and part */
    const char *part = "";
    char fam[128];
    if (family_part(p, name, v, fam, sizeof fam, &part))
        return -1;
    int hist = !strcmp(p->type, "histogram"), summ = !strcmp(p->type, "summary");

    /* the series key: labels sorted, le and quantile set apart */
    const char *le = NULL, *quantile = NULL;
    label rest[MAXL];
    int nr = 0;
    for (int i = 0; i < nl; i++) {
        if (!strcmp(l[i].name, "le") && hist)
            le = l[i].value;
        else if (!strcmp(l[i].name, "quantile") && summ)
            quantile = l[i].value;
        else
            rest[nr++] = l[i];
    }
    qsort(rest, (size_t)nr, sizeof rest[0], label_cmp);
    char key[2048];
    size_t kl = (size_t)snprintf(key, sizeof key, "%s{", fam);
    for (int i = 0; i < nr && kl < sizeof key; i++)
        kl += (size_t)snprintf(key + kl, sizeof key - kl, "%s=%s,", rest[i].name, rest[i].value);
    char full[2200];
    int fl = snprintf(full, sizeof full, "%s}%s|le=%s|q=%s", key, part, le ? le : "", quantile ? quantile : "");
    /* a cut key could make two series one */
    if (kl >= sizeof key || fl < 0 || (size_t)fl >= sizeof full)
        return fail(p, "a series' labels are too long");
    if (remember(p, full))
        return -1;
    series_t *se = series_of(p, key);
    if (!se)
        return fail(p, "out of memory");
    return series_part(p, se, name, part, v, le, quantile, summ);
}

int prom_check(const char *text, size_t *samples, char *msg, size_t cap)
{
    parser *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    p->msg = msg;
    p->cap = cap;
    size_t n = 0;
    int rc = 0;
    size_t len = strlen(text);
    if (len && text[len - 1] != '\n') {
        snprintf(msg, cap, "the text does not end with a newline");
        rc = -1;
    }
    for (const char *s = text; rc == 0 && *s;) {
        const char *e = strchr(s, '\n');
        size_t ll = (size_t)(e - s);
        char *ln = malloc(ll + 1);
        if (!ln) {
            rc = fail(p, "out of memory");
            break;
        }
        memcpy(ln, s, ll);
        ln[ll] = '\0';
        p->line++;
        if (!ll)
            rc = fail(p, "a blank line");
        else if (ln[0] == '#')
            rc = comment_line(p, ln);
        else
            rc = sample_line(p, ln), n++;
        free(ln);
        s = e + 1;
    }
    if (rc == 0)
        rc = end_family(p);
    while (p->list) {
        series_t *x = p->list->next;
        free(p->list);
        p->list = x;
    }
    for (size_t i = 0; i < p->nkeys; i++)
        free(p->sample_keys[i]);
    free(p->sample_keys);
    free(p);
    if (samples)
        *samples = n;
    return rc;
}

int prom_value(const char *text, const char *series, double *value)
{
    size_t sl = strlen(series);
    for (const char *s = text; s && *s; s = strchr(s, '\n'), s = s ? s + 1 : NULL) {
        if (!strncmp(s, series, sl) && s[sl] == ' ') {
            const char *v = s + sl + 1, *e = strchr(v, '\n');
            char t[64];
            size_t n = e ? (size_t)(e - v) : strlen(v);
            if (n >= sizeof t)
                return -1;
            memcpy(t, v, n);
            t[n] = '\0';
            return parse_value(t, value);
        }
    }
    return -1;
}
