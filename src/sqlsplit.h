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
 * mysql_rules (a dialect's backslash_escapes): MySQL's and MariaDB's
 * lexical rules besides: '#' to the end of the line is a comment, '--'
 * one only before a blank, and a backslash escapes the next character
 * in '...' and "..." strings. */
int odbox_sql_split(const char *text, int mysql_rules, odbox_sql_script *out, odbox_error *err);
void odbox_sql_script_free(odbox_sql_script *s);

/* Replaces every ${name} with value; any other ${...} is ODBOX_EINVAL
 * (a typo must not reach the database). *out is malloc'd. */
int odbox_sql_placeholders(const char *text, const char *name, const char *value, char **out,
                           odbox_error *err);

#endif
