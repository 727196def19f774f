/* odbox — runs SQL statements on a DSN through odbox, for the CLI tests
 * (every dialect, SQLite too, with no database client): sqlrun DSN SQL...
 * A statement that returns rows prints each row's first column. Exit 0,
 * or 1 with the error (never the password: odbox's messages omit it). */
#include <stdio.h>
#include "odbox/odbox.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fputs("usage: sqlrun DSN SQL...\n", stderr);
        return 2;
    }
    odbox_conn *c = NULL;
    odbox_error e = {0};
    int rc = odbox_conn_open(argv[1], &c, &e);
    for (int i = 2; rc == ODBOX_OK && i < argc; i++) {
        odbox_stmt *s = NULL;
        if ((rc = odbox_stmt_prepare(c, argv[i], &s, &e)) == ODBOX_OK && (rc = odbox_stmt_execute(s, &e)) == ODBOX_OK)
            while (odbox_stmt_column_count(s) > 0 && (rc = odbox_stmt_fetch(s, &e)) == 1) {
                const char *v = NULL;
                int null = 0;
                if ((rc = odbox_stmt_get_text(s, 1, &v, &null, &e)) != ODBOX_OK)
                    break;
                puts(null ? "NULL" : v);
            }
        odbox_stmt_free(&s);
        rc = rc > 0 ? ODBOX_OK : rc;
    }
    odbox_conn_close(&c);
    if (rc != ODBOX_OK) {
        fprintf(stderr, "sqlrun: %s\n", e.message);
        return 1;
    }
    return 0;
}
