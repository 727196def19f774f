/* odbox — unit tests of idempotency keys: the input check (a key is
 * 1..255 bytes of valid UTF-8 without control characters; text that is
 * not UTF-8 is what PostgreSQL refuses at the INSERT (22021) while
 * MySQL/MariaDB and SQLite store it, so the check refuses it for every
 * dialect alike), and what a stored key answers to another call: its
 * action's name and params, or its params alone for a row without a name
 * (written before V15). */
#include <stdio.h>
#include <string.h>
#include "odbox/odbox.h"
#include "internal.h"
#include "idempotency.h"
#include "unit.h"

/* key refused with ODBOX_EINVAL, the message naming the caller, the
 * reason and the offset of the first bad byte */
static void refused(const char *key, const char *reason, int byte)
{
    odbox_error e = {0};
    char where[32];
    snprintf(where, sizeof where, "(byte %d)", byte);
    int rc = odbox_idem_key_check("execute", key, &e);
    ck_assert_msg(rc == ODBOX_EINVAL, "key '%s': %s (%s)", key, odbox_errname(rc), e.message);
    ck_assert_msg(strstr(e.message, "execute: ") == e.message && strstr(e.message, reason) && strstr(e.message, where),
                  "key '%s': message '%s' lacks '%s' or '%s'", key, e.message, reason, where);
}

static void accepted(const char *key)
{
    odbox_error e = {0};
    int rc = odbox_idem_key_check("execute", key, &e);
    ck_assert_msg(rc == ODBOX_OK, "key '%s': %s (%s)", key, odbox_errname(rc), e.message);
}

START_TEST(a_key_must_be_valid_utf8)
{
    accepted("req-1");
    accepted("caf\xc3\xa9");            /* U+00E9 */
    accepted("\xc2\x80");               /* U+0080, the first two-byte one */
    accepted("\xe0\xa0\x80");           /* U+0800, the first three-byte one */
    accepted("\xed\x9f\xbf");           /* U+D7FF, below the surrogates */
    accepted("\xee\x80\x80");           /* U+E000, above them */
    accepted("\xef\xbf\xbf");           /* U+FFFF */
    accepted("\xf0\x90\x80\x80");       /* U+10000 */
    accepted("\xf0\x9f\x98\x80 ok");    /* U+1F600 */
    accepted("\xf4\x8f\xbf\xbf");       /* U+10FFFF, the last code point */

    refused("a\xff" "b", "not valid UTF-8", 1);
    refused("\xfe", "not valid UTF-8", 0);
    refused("ab\x80", "not valid UTF-8", 2);           /* a continuation byte alone */
    refused("\xc3", "not valid UTF-8", 0);             /* cut at the end */
    refused("\xe2\x82" "a", "not valid UTF-8", 0);     /* cut before an ASCII byte */
    refused("\xf0\x9f\x98", "not valid UTF-8", 0);
    refused("\xc0\x80", "not valid UTF-8", 0);         /* overlong NUL */
    refused("x\xc1\xbf", "not valid UTF-8", 1);        /* overlong U+007F */
    refused("\xe0\x80\xaf", "not valid UTF-8", 0);     /* overlong '/' */
    refused("\xe0\x9f\xbf", "not valid UTF-8", 0);     /* overlong U+07FF */
    refused("\xf0\x8f\xbf\xbf", "not valid UTF-8", 0); /* overlong U+FFFF */
    refused("\xed\xa0\x80", "not valid UTF-8", 0);     /* U+D800, a surrogate */
    refused("ok\xed\xbf\xbf", "not valid UTF-8", 2);   /* U+DFFF */
    refused("\xf4\x90\x80\x80", "not valid UTF-8", 0); /* U+110000 */
    refused("\xf5\x80\x80\x80", "not valid UTF-8", 0);
    refused("\xf8\x88\x80\x80\x80", "not valid UTF-8", 0);
    /* control characters keep their own message */
    refused("a\x7f", "control character", 1);
    refused("\xc3\xa9\t", "control character", 2);
}
END_TEST

/* Where text that odbox writes stops being UTF-8 (params, payloads, a
 * key's result): the first bad byte's offset, or -1. */
START_TEST(the_first_byte_that_is_not_utf8)
{
    ck_assert_int_eq(odbox_utf8_bad_at(""), -1);
    ck_assert_int_eq(odbox_utf8_bad_at("{\"a\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\"}"), -1);
    ck_assert_int_eq(odbox_utf8_bad_at("\xff"), 0);
    ck_assert_int_eq(odbox_utf8_bad_at("ab\xc3("), 2);         /* a sequence cut by an ASCII byte */
    ck_assert_int_eq(odbox_utf8_bad_at("abc\xe2\x82"), 3);     /* cut by the end */
    ck_assert_int_eq(odbox_utf8_bad_at("x\xed\xa0\x80"), 1);   /* a surrogate */
    ck_assert_int_eq(odbox_utf8_bad_at("\x01\x7f ok"), -1);    /* control characters are UTF-8 */
}
END_TEST

/* How deep JSON text nests (what MariaDB and json-c bound): brackets in
 * strings, escaped quotes among them, do not count. */
START_TEST(json_nesting_depth)
{
    ck_assert_int_eq(odbox_json_depth("42"), 0);
    ck_assert_int_eq(odbox_json_depth("{}"), 1);
    ck_assert_int_eq(odbox_json_depth("{\"a\":[1,{\"b\":[]}],\"c\":{}}"), 4);
    ck_assert_int_eq(odbox_json_depth("{\"a\":\"[[[{{\"}"), 1);
    ck_assert_int_eq(odbox_json_depth("{\"a\":\"\\\"[[\",\"b\":[[]]}"), 3); /* "\"[[" then [[]] */
    ck_assert_int_eq(odbox_json_depth("{\"a\\\\\":[[]]}"), 3);                 /* a key ending in \\ */
}
END_TEST

/* The sequence lengths the check steps by (prometheus' escaping too). */
START_TEST(utf8_sequence_lengths)
{
    ck_assert_uint_eq(odbox_utf8_len((const unsigned char *)"a"), 1);
    ck_assert_uint_eq(odbox_utf8_len((const unsigned char *)""), 1); /* the NUL: the caller's end */
    ck_assert_uint_eq(odbox_utf8_len((const unsigned char *)"\xc3\xa9x"), 2);
    ck_assert_uint_eq(odbox_utf8_len((const unsigned char *)"\xe2\x82\xac"), 3);
    ck_assert_uint_eq(odbox_utf8_len((const unsigned char *)"\xf4\x8f\xbf\xbf"), 4);
    ck_assert_uint_eq(odbox_utf8_len((const unsigned char *)"\xe2\x82"), 0);
    ck_assert_uint_eq(odbox_utf8_len((const unsigned char *)"\xed\xa0\x80"), 0);
    ck_assert_uint_eq(odbox_utf8_len((const unsigned char *)"\xc1\x81"), 0);
}
END_TEST

/* A stored outcome answers only its action: another name is refused
 * whatever the params (both names in the message), the same name with
 * other params too; a row without a name (before V15) by its params. */
START_TEST(a_stored_key_answers_its_action_only)
{
    char p1[65], p2[65];
    odbox_idem_params_sha256("{\"amount\":100}", p1);
    odbox_idem_params_sha256("{\"amount\":200}", p2);
    odbox_idem_outcome o = {.action_id = "0191e5a4-1111-7000-8000-000000000001", .action_name = "Deposit"};
    memcpy(o.params_sha256, p1, sizeof p1);
    odbox_error e = {0};
    ck_assert_int_eq(odbox_idem_match(&o, "req-1", "Deposit", p1, &e), ODBOX_OK);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(odbox_idem_match(&o, "req-1", "Withdraw", i ? p2 : p1, &e), ODBOX_EUNIQUE);
        ck_assert_msg(strstr(e.message, "'req-1' was used by action Deposit (action_id "
                                        "0191e5a4-1111-7000-8000-000000000001), not by Withdraw") &&
                          strstr(e.message, "nothing written"),
                      "%s", e.message);
    }
    ck_assert_int_eq(odbox_idem_match(&o, "req-1", "deposit", p1, &e), ODBOX_EUNIQUE); /* byte by byte */
    ck_assert_int_eq(odbox_idem_match(&o, "req-1", "Deposit", p2, &e), ODBOX_EUNIQUE);
    ck_assert_msg(strstr(e.message, "other parameters"), "%s", e.message);
    o.action_name = NULL; /* unknown: any name, the params decide */
    ck_assert_int_eq(odbox_idem_match(&o, "req-1", "Withdraw", p1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_idem_match(&o, "req-1", "Withdraw", p2, &e), ODBOX_EUNIQUE);
    ck_assert_msg(strstr(e.message, "other parameters"), "%s", e.message);
}
END_TEST

/* The same check on the own-transaction path, before any connection. */
START_TEST(a_transaction_key_must_be_valid_utf8)
{
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open_dsn("postgresql://u@127.0.0.1:1/db", &r, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_open("com.example.unit", r, NULL, &exe, &e), ODBOX_OK);
    odbox_tx *tx = (odbox_tx *)&e;
    odbox_tx_config cfg = {.idempotency_key = "req-\xed\xa0\x80"};
    ck_assert_int_eq(odbox_tx_begin(exe, (odbox_shard_id){0, 0}, &cfg, &tx, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "not valid UTF-8 (byte 4)"), "%s", e.message);
    ck_assert_ptr_null(tx);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
}
END_TEST

Suite *keys_suite(void)
{
    Suite *s = suite_create("keys");
    TCase *t = tcase_create("keys");
    tcase_add_test(t, a_key_must_be_valid_utf8);
    tcase_add_test(t, utf8_sequence_lengths);
    tcase_add_test(t, the_first_byte_that_is_not_utf8);
    tcase_add_test(t, json_nesting_depth);
    tcase_add_test(t, a_transaction_key_must_be_valid_utf8);
    tcase_add_test(t, a_stored_key_answers_its_action_only);
    suite_add_tcase(s, t);
    return s;
}
