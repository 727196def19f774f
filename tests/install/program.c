/* A user's program, built by tests/install/installcheck.sh with nothing
 * but `pkg-config --cflags --libs odbox` against the installed odbox. It
 * calls json-c itself, as an action's perform does through
 * odbox/action.h, so the link needs json-c from odbox.pc too. */
#include <odbox/odbox.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    json_object *params = json_object_new_object();
    json_object_object_add(params, "amount", json_object_new_int64(5));
    odbox_registry *r = NULL;
    odbox_error err;
    /* pools connect lazily: no server is needed to open a registry */
    int rc = odbox_registry_open_dsn("postgresql://app:secret@127.0.0.1:1/app", &r, &err);
    const char *text = json_object_to_json_string_ext(params, JSON_C_TO_STRING_PLAIN);
    int ok = rc == ODBOX_OK && strcmp(text, "{\"amount\":5}") == 0;
    printf("odbox %s, registry %s, params %s\n", odbox_version(), odbox_errname(rc), text);
    odbox_registry_free(&r);
    json_object_put(params);
    return ok ? 0 : 1;
}
