/* odbox — unit tests: random UUIDs (v4) and shard-aware UUIDv7 (layout,
 * decoding, validation). */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "odbox/odbox.h"
#include "unit.h"

/* The 128 bits of a UUID's text as two big-endian halves. */
static void halves(const char *text, uint64_t *msb, uint64_t *lsb)
{
    uint64_t v[2] = {0, 0};
    int n = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '-')
            continue;
        int d = isdigit((unsigned char)*p) ? *p - '0' : tolower((unsigned char)*p) - 'a' + 10;
        v[n / 16] = v[n / 16] << 4 | (uint64_t)d;
        n++;
    }
    ck_assert_int_eq(n, 32);
    *msb = v[0];
    *lsb = v[1];
}

static void assert_lower_text(const char *u)
{
    ck_assert_uint_eq(strlen(u), ODBOX_UUID_LEN);
    for (size_t i = 0; i < ODBOX_UUID_LEN; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            ck_assert_msg(u[i] == '-', "%s: no hyphen at %zu", u, i);
        else
            ck_assert_msg(isdigit((unsigned char)u[i]) || (u[i] >= 'a' && u[i] <= 'f'),
                          "%s: not lower-case hex at %zu", u, i);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

START_TEST(v4_format_version_variant)
{
    char u[ODBOX_UUID_LEN + 1];
    for (int i = 0; i < 200; i++) {
        odbox_uuid_v4(u);
        assert_lower_text(u);
        ck_assert(odbox_uuid_is_valid(u));
        ck_assert_int_eq(odbox_uuid_version(u), 4);
        ck_assert_msg(strchr("89ab", u[19]) != NULL, "%s: variant is not 10xx", u);
        ck_assert_int_eq(u[14], '4');
        odbox_shard_id id = {-1, -1};
        ck_assert_int_eq(odbox_uuid_shard(u, &id), 0); /* not a v7: default shard */
        ck_assert_int_eq(id.group, -1);
    }
}
END_TEST

START_TEST(v4_unique)
{
    enum { N = 10000 };
    char(*ids)[ODBOX_UUID_LEN + 1] = malloc(sizeof *ids * N);
    ck_assert_ptr_nonnull(ids);
    for (int i = 0; i < N; i++)
        odbox_uuid_v4(ids[i]);
    qsort(ids, N, sizeof *ids, cmp_str);
    for (int i = 1; i < N; i++)
        ck_assert_msg(strcmp(ids[i - 1], ids[i]) != 0, "duplicate %s", ids[i]);
    free(ids);
}
END_TEST

/* Every one of the 122 random bits of a v4 id takes both values over a
 * few hundred ids (a stuck or zeroed random source would not). */
START_TEST(v4_random_bits_vary)
{
    uint64_t or_m = 0, or_l = 0, and_m = ~UINT64_C(0), and_l = ~UINT64_C(0);
    for (int i = 0; i < 400; i++) {
        char u[ODBOX_UUID_LEN + 1];
        uint64_t m, l;
        odbox_uuid_v4(u);
        halves(u, &m, &l);
        or_m |= m, or_l |= l, and_m &= m, and_l &= l;
    }
    /* fixed: version nibble 0100 (msb bits 12..15), variant 10 (lsb 62..63) */
    ck_assert_uint_eq(or_m, ~UINT64_C(0) & ~(UINT64_C(0xB) << 12));
    ck_assert_uint_eq(and_m, UINT64_C(0x4) << 12);
    ck_assert_uint_eq(or_l, ~(UINT64_C(1) << 62));
    ck_assert_uint_eq(and_l, UINT64_C(1) << 63);
}
END_TEST

/* A forked child and its parent never hand out the same ids (the ids are
 * drawn from a per-thread pool the child must not inherit). */
START_TEST(v4_fork_child_differs)
{
    char first[ODBOX_UUID_LEN + 1];
    odbox_uuid_v4(first); /* fills this thread's pool */
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char child[ODBOX_UUID_LEN + 1];
        odbox_uuid_v4(child);
        ssize_t w = write(fd[1], child, ODBOX_UUID_LEN);
        _exit(w == ODBOX_UUID_LEN ? 0 : 1);
    }
    close(fd[1]);
    char child[ODBOX_UUID_LEN + 1] = {0}, parent[ODBOX_UUID_LEN + 1];
    ck_assert_int_eq(read(fd[0], child, ODBOX_UUID_LEN), ODBOX_UUID_LEN);
    close(fd[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    odbox_uuid_v4(parent);
    ck_assert(odbox_uuid_is_valid(child));
    ck_assert_str_ne(child, parent);
    ck_assert_str_ne(child, first);
}
END_TEST

enum { THREADS = 4, PER_THREAD = 2000 };
static char thread_ids[THREADS * PER_THREAD][ODBOX_UUID_LEN + 1];

static void *make_ids(void *arg)
{
    char(*out)[ODBOX_UUID_LEN + 1] = arg;
    for (int i = 0; i < PER_THREAD; i++)
        odbox_uuid_v4(out[i]);
    return NULL;
}

START_TEST(v4_unique_across_threads)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, make_ids, thread_ids[i * PER_THREAD]), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    qsort(thread_ids, THREADS * PER_THREAD, sizeof thread_ids[0], cmp_str);
    for (int i = 1; i < THREADS * PER_THREAD; i++)
        ck_assert_msg(strcmp(thread_ids[i - 1], thread_ids[i]) != 0, "duplicate %s", thread_ids[i]);
}
END_TEST

/* Hand-computed: ms 0x0123456789ab -> "01234567-89ab-7xxx-"; the shard
 * word is 0x8000 | group << 6 | member: 0.0 -> 8000, 255.63 -> bfff,
 * 17.42 -> 0x8000 | 0x440 | 0x2a = 846a (byte 8 10000100, byte 9 01101010). */
START_TEST(v7_layout_bit_exact)
{
    static const struct {
        odbox_shard_id id;
        const char *word;
    } cases[] = {{{0, 0}, "8000"}, {{255, 63}, "bfff"}, {{17, 42}, "846a"}, {{1, 0}, "8040"}, {{0, 1}, "8001"}};
    const int64_t ms = INT64_C(0x0123456789ab);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char u[ODBOX_UUID_LEN + 1];
        odbox_error e;
        ck_assert_int_eq(odbox_uuid_v7_sharded_at(cases[i].id, ms, u, &e), ODBOX_OK);
        assert_lower_text(u);
        ck_assert_msg(strncmp(u, "01234567-89ab-7", 15) == 0, "%s: timestamp/version", u);
        ck_assert_msg(strncmp(u + 19, cases[i].word, 4) == 0, "%s: shard word is not %s", u, cases[i].word);
        ck_assert_int_eq(odbox_uuid_version(u), 7);

        uint64_t msb, lsb;
        halves(u, &msb, &lsb);
        ck_assert_uint_eq(msb >> 16, (uint64_t)ms);
        ck_assert_uint_eq((msb >> 12) & 0xF, 7);
        ck_assert_uint_eq(lsb >> 62, 2); /* variant 10 */
        ck_assert_uint_eq((lsb >> 48) & 0x3FFF,
                          (uint64_t)(cases[i].id.group << 6 | cases[i].id.member));

        odbox_shard_id got = {-1, -1};
        ck_assert_int_eq(odbox_uuid_shard(u, &got), 1);
        ck_assert_int_eq(got.group, cases[i].id.group);
        ck_assert_int_eq(got.member, cases[i].id.member);
    }
}
END_TEST

START_TEST(v7_random_bits_vary)
{
    odbox_shard_id id = {3, 4};
    char a[ODBOX_UUID_LEN + 1], b[ODBOX_UUID_LEN + 1];
    ck_assert_int_eq(odbox_uuid_v7_sharded_at(id, 1000, a, NULL), ODBOX_OK);
    ck_assert_int_eq(odbox_uuid_v7_sharded_at(id, 1000, b, NULL), ODBOX_OK);
    ck_assert_str_ne(a, b);
    uint64_t am, al, bm, bl;
    halves(a, &am, &al);
    halves(b, &bm, &bl);
    ck_assert_uint_eq(am >> 12, bm >> 12); /* timestamp + version equal */
    ck_assert_uint_eq(al >> 48, bl >> 48); /* variant + shard equal */
    ck_assert(((am ^ bm) & 0xFFF) != 0 || ((al ^ bl) & UINT64_C(0xFFFFFFFFFFFF)) != 0);
}
END_TEST

START_TEST(v7_timestamp_limits)
{
    odbox_shard_id id = {0, 0};
    char u[ODBOX_UUID_LEN + 1];
    odbox_error e;
    ck_assert_int_eq(odbox_uuid_v7_sharded_at(id, 0, u, &e), ODBOX_OK);
    ck_assert(strncmp(u, "00000000-0000-7", 15) == 0);
    ck_assert_int_eq(odbox_uuid_v7_sharded_at(id, INT64_C(0xFFFFFFFFFFFF), u, &e), ODBOX_OK);
    ck_assert(strncmp(u, "ffffffff-ffff-7", 15) == 0);
    ck_assert_int_eq(odbox_uuid_v7_sharded_at(id, INT64_C(0x1000000000000), u, &e), ODBOX_EINVAL);
    ck_assert_int_eq(e.code, ODBOX_EINVAL);
    ck_assert_int_eq(odbox_uuid_v7_sharded_at(id, -1, u, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_uuid_v7_sharded_at(id, 0, NULL, &e), ODBOX_EINVAL);
}
END_TEST

START_TEST(v7_now_monotonic_prefix)
{
    odbox_shard_id id = {17, 42};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t before = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    uint64_t prev = 0;
    for (int i = 0; i < 5000; i++) {
        char u[ODBOX_UUID_LEN + 1];
        ck_assert_int_eq(odbox_uuid_v7_sharded(id, u, NULL), ODBOX_OK);
        uint64_t msb, lsb;
        halves(u, &msb, &lsb);
        uint64_t ms = msb >> 16;
        ck_assert_msg(ms >= prev, "timestamp went back: %llu < %llu", (unsigned long long)ms,
                      (unsigned long long)prev);
        prev = ms;
        odbox_shard_id got;
        ck_assert_int_eq(odbox_uuid_shard(u, &got), 1);
        ck_assert_int_eq(got.group, 17);
        ck_assert_int_eq(got.member, 42);
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t after = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    ck_assert_int_ge((int64_t)prev, before);
    ck_assert_int_le((int64_t)prev, after);
}
END_TEST

START_TEST(v7_shard_out_of_range)
{
    static const odbox_shard_id bad[] = {{256, 0}, {0, 64}, {-1, 0}, {0, -1}, {1000, 1000}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char u[ODBOX_UUID_LEN + 1] = "x";
        odbox_error e;
        ck_assert_int_eq(odbox_uuid_v7_sharded(bad[i], u, &e), ODBOX_EINVAL);
        ck_assert_int_eq(e.code, ODBOX_EINVAL);
        ck_assert(e.message[0]);
        ck_assert_str_eq(u, "");
        ck_assert_int_eq(odbox_uuid_v7_sharded_at(bad[i], 1, u, NULL), ODBOX_EINVAL);
    }
}
END_TEST

START_TEST(decode_other_versions_and_malformed)
{
    static const char *const no[] = {
        "c232ab00-9414-11ec-b3c8-9f6bdeced846", /* v1 */
        "9b2c1b0e-4f3d-4a8e-9c1d-2f5e6a7b8c9d", /* v4 */
        "01890a5d-ac96-6b3f-846a-000000000000", /* v6 */
        "01890a5d-ac96-7b3f-c46a-000000000000", /* v7, variant 110 (Microsoft) */
        "01890a5d-ac96-7b3f-046a-000000000000", /* v7, variant 0 (NCS) */
        "00000000-0000-0000-0000-000000000000", /* nil */
        "ffffffff-ffff-ffff-ffff-ffffffffffff", /* max */
        "01890a5d-ac96-7b3f-846a-00000000000",  /* short */
        "01890a5d-ac96-7b3f-846a-0000000000000", /* long */
        "01890a5dac96-7b3f-846a-0000000000000", /* hyphen missing */
        "01890a5d-ac96-7b3f-846a_000000000000", /* wrong separator */
        "01890a5d-ac96-7b3f-846g-000000000000", /* not hex */
        "{01890a5d-ac96-7b3f-846a-00000000000}",
        "",
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        odbox_shard_id id = {-1, -1};
        ck_assert_msg(odbox_uuid_shard(no[i], &id) == 0, "decoded %s", no[i]);
        ck_assert_int_eq(id.group, -1);
        ck_assert_int_eq(id.member, -1);
    }
    ck_assert_int_eq(odbox_uuid_shard(NULL, NULL), 0);

    odbox_shard_id id;
    /* either case */
    ck_assert_int_eq(odbox_uuid_shard("01890A5D-AC96-7B3F-846A-0000000000AB", &id), 1);
    ck_assert_int_eq(id.group, 17);
    ck_assert_int_eq(id.member, 42);
    ck_assert_int_eq(odbox_uuid_shard("01890a5d-ac96-7b3f-bfff-0123456789ab", &id), 1);
    ck_assert_int_eq(id.group, 255);
    ck_assert_int_eq(id.member, 63);
    ck_assert_int_eq(odbox_uuid_shard("01890a5d-ac96-7b3f-8000-0123456789ab", NULL), 1);
}
END_TEST

START_TEST(version_and_validity)
{
    ck_assert_int_eq(odbox_uuid_version("c232ab00-9414-11ec-b3c8-9f6bdeced846"), 1);
    ck_assert_int_eq(odbox_uuid_version("9B2C1B0E-4F3D-4A8E-9C1D-2F5E6A7B8C9D"), 4);
    ck_assert_int_eq(odbox_uuid_version("01890a5d-ac96-7b3f-846a-000000000000"), 7);
    ck_assert_int_eq(odbox_uuid_version("01890a5d-ac96-8b3f-846a-000000000000"), 8);
    ck_assert_int_eq(odbox_uuid_version("00000000-0000-0000-0000-000000000000"), 0);
    ck_assert_int_eq(odbox_uuid_version("ffffffff-ffff-ffff-ffff-ffffffffffff"), 0);
    ck_assert_int_eq(odbox_uuid_version("not a uuid"), 0);
    ck_assert_int_eq(odbox_uuid_version(NULL), 0);

    ck_assert(odbox_uuid_is_valid("00000000-0000-0000-0000-000000000000"));
    ck_assert(odbox_uuid_is_valid("9B2C1B0E-4f3d-4A8E-9c1d-2F5E6A7B8C9D"));
    ck_assert(!odbox_uuid_is_valid(NULL));
    ck_assert(!odbox_uuid_is_valid(""));
    ck_assert(!odbox_uuid_is_valid("9b2c1b0e-4f3d-4a8e-9c1d-2f5e6a7b8c9"));
    ck_assert(!odbox_uuid_is_valid("9b2c1b0e-4f3d-4a8e-9c1d-2f5e6a7b8c9d0"));
    ck_assert(!odbox_uuid_is_valid("9b2c1b0e-4f3d-4a8e-9c1d-2f5e6a7b8c9 "));
    ck_assert(!odbox_uuid_is_valid("9b2c1b0e04f3d-4a8e-9c1d-2f5e6a7b8c9d"));
    ck_assert(!odbox_uuid_is_valid("9b2c1b0e4f3d4a8e9c1d2f5e6a7b8c9d"));
}
END_TEST

/* Every byte at every position of an id (the parser reads a digit table),
 * and every shorter string. */
START_TEST(validity_every_byte_every_position)
{
    const char *good = "9b2c1b0e-4f3d-4a8e-9c1d-2f5e6a7b8c9d";
    char u[37];
    for (int i = 0; i < 36; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        for (int b = 1; b < 256; b++) {
            memcpy(u, good, sizeof u);
            u[i] = (char)b;
            int want = dash ? b == '-' : isxdigit(b) != 0;
            ck_assert_msg(odbox_uuid_is_valid(u) == want, "byte 0x%02x at %d", b, i);
        }
        memcpy(u, good, sizeof u);
        u[i] = '\0';
        ck_assert_msg(!odbox_uuid_is_valid(u), "cut at %d", i);
    }
}
END_TEST

Suite *uuid_suite(void)
{
    Suite *s = suite_create("uuid");
    TCase *t = tcase_create("uuid");
    tcase_add_test(t, v4_format_version_variant);
    tcase_add_test(t, v4_unique);
    tcase_add_test(t, v4_random_bits_vary);
    tcase_add_test(t, v4_fork_child_differs);
    tcase_add_test(t, v4_unique_across_threads);
    tcase_add_test(t, v7_layout_bit_exact);
    tcase_add_test(t, v7_random_bits_vary);
    tcase_add_test(t, v7_timestamp_limits);
    tcase_add_test(t, v7_now_monotonic_prefix);
    tcase_add_test(t, v7_shard_out_of_range);
    tcase_add_test(t, decode_other_versions_and_malformed);
    tcase_add_test(t, version_and_validity);
    tcase_add_test(t, validity_every_byte_every_position);
    suite_add_tcase(s, t);
    return s;
}
