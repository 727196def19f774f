/* odbox — what a statement's text does, read without the server: a
 * read, the end of a transaction (also MySQL's implicit commits), a
 * change of the session settings odbox's setup made. Text only: the
 * connection's state is stmt.c's (odbox_sql_refused_in_tx). */
#include <ctype.h>
#include <string.h>
#include <strings.h>
#include "sqltext.h"
#include "sqlsplit.h"
#include "odbox/error.h"

const char *odbox_sql_start(const char *sql)
{
    while (*sql == ' ' || *sql == '\t' || *sql == '\n' || *sql == '\r' || *sql == '(')
        sql++;
    return sql;
}

/* c can be part of a word (a keyword, a name). */
static int word_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

/* When sql starts with the keyword kw (any case) as a whole word: the
 * text after it and its blanks; else NULL. */
static const char *sql_word(const char *sql, const char *kw)
{
    size_t n = strlen(kw);
    for (size_t k = 0; k < n; k++)
        if (!sql[k] || (sql[k] & ~0x20) != kw[k])
            return NULL;
    return word_char(sql[n]) ? NULL : odbox_sql_start(sql + n);
}

/* A statement's first word: past blanks, parentheses and optimizer hints
 * (slash-star followed by +, which the split keeps), none of which is a
 * word of the statement. */
static const char *statement_start(const char *sql)
{
    sql = odbox_sql_start(sql);
    const char *hint_end;
    while (!strncmp(sql, "/*+", 3) && (hint_end = strstr(sql + 3, "*/")))
        sql = odbox_sql_start(hint_end + 2);
    return sql;
}

/* rest past MariaDB's OR REPLACE after CREATE, when it is there. */
static const char *after_or_replace(const char *rest)
{
    const char *after = sql_word(rest, "OR");
    return after && (after = sql_word(after, "REPLACE")) ? after : rest;
}

int odbox_sql_is_read(const char *sql)
{
    sql = odbox_sql_start(sql);
    return sql_word(sql, "SELECT") || sql_word(sql, "SHOW");
}

/* An assignment of a SET, [SESSION] [@@[SESSION.]]name = ...: name and
 * what follows. local: LOCAL too, which is SESSION on MySQL (on
 * PostgreSQL, SET LOCAL lasts until the transaction ends). */
static const char *set_item_target(const char *item, int local)
{
    const char *rest = odbox_sql_start(item);
    const char *after = sql_word(rest, "SESSION");
    if (after || (local && (after = sql_word(rest, "LOCAL"))))
        rest = after;
    if (!strncmp(rest, "@@", 2))
        rest += 2;
    if (!strncasecmp(rest, "SESSION.", 8))
        rest += 8;
    else if (local && !strncasecmp(rest, "LOCAL.", 6))
        rest += 6;
    return rest;
}

/* 1 when an assignment of the SET statement sql sets a variable that
 * match takes (given its name and what follows). mysql_rules: every
 * assignment of the list (SET @a = 1, autocommit = 0 sets both; a ','
 * inside parentheses or quotes separates nothing), LOCAL as SESSION;
 * else only the first (PostgreSQL's SET takes one, and a ',' is its
 * value's). */
static int set_names(const char *sql, int mysql_rules, int (*match)(const char *target))
{
    const char *p = sql_word(odbox_sql_start(sql), "SET");
    while (p) {
        if (match(set_item_target(p, mysql_rules)))
            return 1;
        if (!mysql_rules)
            return 0;
        int depth = 0;
        char quote = 0;
        for (; *p && (quote || depth > 0 || (*p != ',' && *p != ';')); p++) {
            if (quote && *p == '\\' && quote != '`' && p[1])
                p++;
            else if (quote)
                quote = *p == quote ? 0 : quote;
            else if (*p == '\'' || *p == '"' || *p == '`')
                quote = *p;
            else
                depth += (*p == '(') - (*p == ')');
        }
        p = *p == ',' ? p + 1 : NULL;
    }
    return 0;
}

/* what commits when set: autocommit, and SET PASSWORD */
static int commits_when_set(const char *target)
{
    return sql_word(target, "AUTOCOMMIT") || sql_word(target, "PASSWORD");
}

/* After CREATE [OR REPLACE] (MariaDB's) or DROP: the text after
 * TEMPORARY (and TABLE), or NULL. */
static const char *temporary_table(const char *rest)
{
    rest = sql_word(after_or_replace(rest), "TEMPORARY");
    return rest ? sql_word(rest, "TABLE") : NULL;
}

/* MySQL and MariaDB commit the open transaction before (and after) DDL,
 * account and table-maintenance statements, and the replica's controls
 * (their manuals: "statements that cause an implicit commit"); not a
 * temporary table's CREATE or DROP. Turning autocommit off or on commits
 * too (the next statement, or this one), and so do LOCK and UNLOCK
 * TABLES. */
static int mysql_commits_implicitly(const char *sql)
{
    static const char *const ddl[] = {"ALTER", "RENAME", "TRUNCATE", "GRANT",  "REVOKE", "FLUSH",
                                      "INSTALL", "UNINSTALL", "CACHE", "RESET", "CHANGE", "IMPORT"};
    for (size_t i = 0; i < sizeof ddl / sizeof ddl[0]; i++)
        if (sql_word(sql, ddl[i]))
            return 1;
    const char *rest;
    if ((rest = sql_word(sql, "CREATE")) || (rest = sql_word(sql, "DROP")))
        return !temporary_table(rest);
    static const char *const maintenance[] = {"ANALYZE", "OPTIMIZE", "REPAIR", "CHECK"};
    for (size_t i = 0; i < sizeof maintenance / sizeof maintenance[0]; i++)
        if ((rest = sql_word(sql, maintenance[i]))) {
            const char *after = sql_word(rest, "NO_WRITE_TO_BINLOG");
            if (after || (after = sql_word(rest, "LOCAL")))
                rest = after;
            return sql_word(rest, "TABLE") || sql_word(rest, "TABLES"); /* not MariaDB's ANALYZE SELECT */
        }
    if ((rest = sql_word(sql, "LOAD")))
        return sql_word(rest, "INDEX") != NULL;
    if ((rest = sql_word(sql, "START")) || (rest = sql_word(sql, "STOP")))
        return sql_word(rest, "SLAVE") || sql_word(rest, "REPLICA") || sql_word(rest, "ALL");
    if ((rest = sql_word(sql, "LOCK")) || (rest = sql_word(sql, "UNLOCK")))
        return sql_word(rest, "TABLES") || sql_word(rest, "TABLE");
    return set_names(sql, 1, commits_when_set);
}

/* sql past ROLLBACK [WORK | TRANSACTION]; NULL when it starts otherwise. */
static const char *after_rollback(const char *sql)
{
    const char *rest = sql_word(sql, "ROLLBACK");
    if (!rest)
        return NULL;
    const char *after = sql_word(rest, "WORK");
    if (!after)
        after = sql_word(rest, "TRANSACTION");
    return after ? after : rest;
}

/* One statement, by its first words: 1 when it ends or restarts the
 * transaction, ODBOX_TX_IMPLICIT_COMMIT when (with MySQL's rules) the
 * server commits the transaction before running it, else 0. */
static int statement_ends_tx(const char *sql, int mysql_rules)
{
    sql = statement_start(sql);
    if (mysql_rules && mysql_commits_implicitly(sql))
        return ODBOX_TX_IMPLICIT_COMMIT;
    static const char *const words[] = {"COMMIT", "END", "ABORT", "BEGIN"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (sql_word(sql, words[i]))
            return 1;
    const char *rest = sql_word(sql, "START");
    if (rest)
        return sql_word(rest, "TRANSACTION") != NULL;
    if ((rest = sql_word(sql, "PREPARE"))) { /* PostgreSQL's two-phase commit takes the transaction away */
        const char *after = sql_word(rest, "TRANSACTION");
        return after && !sql_word(after, "FROM"); /* MySQL's PREPARE transaction FROM: a statement's name */
    }
    if (!(rest = after_rollback(sql)))
        return 0;
    return !sql_word(rest, "TO"); /* ROLLBACK TO a savepoint stays inside */
}

int odbox_sql_is_savepoint_rollback(const char *sql)
{
    const char *rest = after_rollback(statement_start(sql));
    return rest && sql_word(rest, "TO");
}

/* 1 when word (upper case) stands in sql as a word of its own. */
static int has_word(const char *sql, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = sql; *p; p++)
        if ((p == sql || !word_char(p[-1])) && !strncasecmp(p, word, n) && !word_char(p[n]))
            return 1;
    return 0;
}

/* A CREATE of a function, procedure or trigger whose body is compound
 * (BEGIN ...; END, BEGIN ATOMIC): its ';'s and its END are no statements
 * of their own. */
static int compound_body(const char *sql)
{
    const char *rest = sql_word(odbox_sql_start(sql), "CREATE");
    if (!rest)
        return 0;
    rest = after_or_replace(rest);
    const char *after;
    if ((after = sql_word(rest, "TEMP")) || (after = sql_word(rest, "TEMPORARY")) ||
        (after = sql_word(rest, "CONSTRAINT")))
        rest = after;
    return (sql_word(rest, "FUNCTION") || sql_word(rest, "PROCEDURE") || sql_word(rest, "TRIGGER")) &&
           has_word(sql, "BEGIN");
}

/* check's answer for sql's first statement, by its first words; else,
 * when a comment before them or a second statement after a ';' could
 * hide one, the first answer not 0 for a statement of sql split as a
 * migration file is (comments blanked; MySQL's executable comments
 * opened, as a server runs their text). Text odbox cannot split is 1:
 * what a server makes of it is not known. */
static int any_statement(const char *sql, int mysql_rules, int (*check)(const char *stmt, int mysql_rules))
{
    int answer = check(sql, mysql_rules);
    if (answer || !strpbrk(sql, mysql_rules ? ";-/#" : ";-/") || compound_body(sql))
        return answer;
    odbox_sql_script script;
    odbox_error e;
    int rc = odbox_sql_split(sql, mysql_rules ? ODBOX_SQL_MYSQL | ODBOX_SQL_OPEN_EXEC : 0, &script, &e);
    if (rc != ODBOX_OK)
        return rc == ODBOX_ENOMEM ? rc : 1;
    for (size_t i = 0; i < script.n && !answer; i++)
        answer = check(script.stmts[i], mysql_rules);
    odbox_sql_script_free(&script);
    return answer;
}

int odbox_sql_ends_tx(const char *sql, int mysql_rules)
{
    return any_statement(sql, mysql_rules, statement_ends_tx);
}

/* A SET of what odbox's session setup set and its statements rely on:
 * the time zone (the database's time it writes and compares), the
 * client encoding and date style (how it reads text and dates back),
 * MySQL's sql_mode and autocommit (on, as odbox keeps a session between
 * its transactions). */
static int setup_setting(const char *target)
{
    static const char *const names[] = {"TIME ZONE", "TIMEZONE", "TIME_ZONE", "CLIENT_ENCODING", "NAMES",
                                        "CHARACTER SET", "CHARSET", "CHARACTER_SET_", "COLLATION_CONNECTION",
                                        "DATESTYLE", "INTERVALSTYLE", "SQL_MODE", "STANDARD_CONFORMING_STRINGS",
                                        "AUTOCOMMIT"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i]);
        if (!strncasecmp(target, names[i], n) && (names[i][n - 1] == '_' || !word_char(target[n])))
            return 1;
    }
    return 0;
}

/* PostgreSQL's set_config('name', value, is_local) sets as SET does (or
 * as SET LOCAL): taken for a change whatever its is_local. */
static int set_config_call(const char *sql)
{
    for (const char *p = sql; (p = strcasestr(p, "set_config")) != NULL; p += 10) {
        if (p > sql && word_char(p[-1]))
            continue;
        const char *arg = odbox_sql_start(p + 10); /* past the '(' too */
        if (*arg == '\'' && setup_setting(arg + 1))
            return 1;
    }
    return 0;
}

/* RESET and DISCARD undo the setup whole. */
static int statement_changes_session(const char *sql, int mysql_rules)
{
    sql = statement_start(sql);
    return sql_word(sql, "RESET") || sql_word(sql, "DISCARD") || set_names(sql, mysql_rules, setup_setting) ||
           set_config_call(sql);
}

int odbox_sql_changes_session(const char *sql, int mysql_rules)
{
    return any_statement(sql, mysql_rules, statement_changes_session);
}
