/* odbox — what a statement's text does, read without the server
 * (sqltext.c); not installed. */
#ifndef ODBOX_SQLTEXT_H
#define ODBOX_SQLTEXT_H

/* sql past its leading blanks and parentheses. */
const char *odbox_sql_start(const char *sql);

/* 1 when sql is a read (it starts with SELECT or SHOW): sending it again
 * changes nothing. */
int odbox_sql_is_read(const char *sql);

/* 1 when a statement of sql ends, or begins, a transaction: COMMIT, END,
 * ABORT, BEGIN, START TRANSACTION, PREPARE TRANSACTION, ROLLBACK (not
 * ROLLBACK TO a savepoint), also after a comment or another statement
 * and a ';'; and 1 for text odbox cannot split (an unterminated quote as
 * it reads it). mysql_rules: the text follows MySQL's lexical rules ('#'
 * comments, backslash escapes; odbox_sql_split), and what commits there
 * implicitly (DDL but a temporary table's, account and table-maintenance
 * statements, SET autocommit, LOCK or UNLOCK TABLES) is
 * ODBOX_TX_IMPLICIT_COMMIT. ODBOX_ENOMEM when the split ran out of
 * memory. */
#define ODBOX_TX_IMPLICIT_COMMIT 2
int odbox_sql_ends_tx(const char *sql, int mysql_rules);

/* 1 when sql's first statement is ROLLBACK TO a savepoint (ROLLBACK
 * [WORK | TRANSACTION] TO [SAVEPOINT] name): what a transaction whose
 * server aborted it at a failed statement may still take. */
int odbox_sql_is_savepoint_rollback(const char *sql);

/* 1 when a statement of sql changes a session setting that odbox's
 * setup made and its own statements rely on: the time zone, the client
 * encoding, the date style, MySQL's sql_mode and autocommit (SET, SET
 * SESSION, SET @@...; with mysql_rules any assignment of a SET's list,
 * and LOCAL as SESSION), or RESET or DISCARD anything; also behind a
 * comment or after a ';', as odbox_sql_ends_tx looks. ODBOX_ENOMEM when
 * the split ran out of memory. */
int odbox_sql_changes_session(const char *sql, int mysql_rules);

#endif
