/* odbox — splitting SQL scripts into statements; not installed. */
#ifndef ODBOX_SQLSPLIT_H
#define ODBOX_SQLSPLIT_H

#include <stddef.h>
#include "odbox/error.h"

typedef struct odbox_sql_script {
    char **stmts;   /* each without its terminating ';' and outer blanks */
    size_t n;
} odbox_sql_script;

/* Splits text at ';' outside string literals, quoted identifiers,
 * comments and PostgreSQL dollar quotes (and its E'...' strings, with
 * backslash escapes). Comments become blanks (but MySQL's executable
 * comments and hints); statements that hold only blanks and comments are
 * dropped. An unterminated literal or comment is ODBOX_EINVAL.
 * rules: ODBOX_SQL_MYSQL (a dialect's backslash_escapes is 1) for
 * MySQL's and MariaDB's lexical rules besides: '#' to the end of the
 * line is a comment, '--' one only before a blank, a backslash escapes
 * the next character in '...' and "..." strings, and executable comments
 * (slash-star followed by '!' or MariaDB's 'M!') are code; elsewhere
 * they are comments. With ODBOX_SQL_OPEN_EXEC too, an executable
 * comment's markers (with its version) become blanks and its text is
 * split as the rest: the text as a server whatever its version could
 * run it, for looking at what it does. */
#define ODBOX_SQL_MYSQL 1
#define ODBOX_SQL_OPEN_EXEC 2
int odbox_sql_split(const char *text, int rules, odbox_sql_script *out, odbox_error *err);
void odbox_sql_script_free(odbox_sql_script *s);

/* Replaces every ${name} with value; any other ${...} is ODBOX_EINVAL
 * (a typo must not reach the database). *out is malloc'd. */
int odbox_sql_placeholders(const char *text, const char *name, const char *value, char **out,
                           odbox_error *err);

/* sql with $1, $2, ... for its '?' placeholders, outside string
 * literals (and E'...' with backslash escapes), quoted names, comments
 * (nested ones too) and dollar quotes, as PostgreSQL reads them (libpq
 * numbers its parameters); *n their count. malloc'd; NULL when out of
 * memory. Text odbox cannot close is copied as it is. */
char *odbox_sql_number_params(const char *sql, int *n);

#endif
