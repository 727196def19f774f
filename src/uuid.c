/* odbox — ids: random UUIDs (v4) and shard-aware UUIDv7 (Ekbatan's
 * ShardedUUID layout, see odbox/uuid.h).
 *
 * The random bits come from a per-thread pool filled by getrandom(2), 256
 * bytes (16 ids) per call. libuuid's uuid_generate_random makes six
 * system calls per id (getrandom, then getpid/getuid/gettid/getppid to
 * reseed random()), which showed up in every action's cost; it stays as
 * the source when getrandom is not available. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <uuid/uuid.h>
#include "internal.h"
#include "odbox/uuid.h"

#define MS_MASK UINT64_C(0xFFFFFFFFFFFF) /* 48-bit millisecond field */

/* The last millisecond handed out by odbox_uuid_v7_sharded: ids made by
 * one process never go back in time, even when the wall clock is stepped
 * back (RFC 9562 6.2 allows holding the timestamp). */
static _Atomic int64_t last_ms;

#define POOL_BYTES 256

typedef struct random_pool {
    unsigned char bytes[POOL_BYTES];
    size_t left; /* unused bytes at the end of bytes */
} random_pool;

static _Thread_local random_pool pool;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A forked child must not hand out the ids its parent still holds; the
 * forking thread is the child's only thread. */
static void pool_forget(void)
{
    memset(&pool, 0, sizeof pool);
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, pool_forget);
}

/* 16 random bytes, used once. */
static void random16(unsigned char out[16])
{
    pthread_once(&atfork_once, register_atfork);
    if (pool.left < 16) {
        size_t got = 0;
        while (got < POOL_BYTES) {
            ssize_t n = getrandom(pool.bytes + got, POOL_BYTES - got, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        if (got < POOL_BYTES) {
            memset(&pool, 0, sizeof pool);
            uuid_generate_random(out);
            return;
        }
        pool.left = POOL_BYTES;
    }
    unsigned char *p = pool.bytes + POOL_BYTES - pool.left;
    memcpy(out, p, 16);
    memset(p, 0, 16); /* nothing handed out stays in memory */
    pool.left -= 16;
}

static void format_bytes(const unsigned char b[16], char out[ODBOX_UUID_LEN + 1]);

void odbox_uuid_v4(char out[ODBOX_UUID_LEN + 1])
{
    unsigned char b[16];
    random16(b);
    b[6] = (unsigned char)((b[6] & 0x0F) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3F) | 0x80); /* RFC 9562 variant */
    format_bytes(b, out);
}

static void format_bytes(const unsigned char b[16], char out[ODBOX_UUID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[b[i] >> 4];
        out[o++] = hex[b[i] & 0x0F];
    }
    out[o] = '\0';
}

int odbox_uuid_v7_sharded_at(odbox_shard_id id, int64_t unix_ms, char out[ODBOX_UUID_LEN + 1],
                             odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "uuid: out is NULL");
    out[0] = '\0';
    if (id.group < 0 || id.group > ODBOX_SHARD_GROUP_MAX || id.member < 0 || id.member > ODBOX_SHARD_MEMBER_MAX)
        return odbox_fail(err, ODBOX_EINVAL, "uuid: shard %d.%d is out of range 0..%d.0..%d", id.group,
                          id.member, ODBOX_SHARD_GROUP_MAX, ODBOX_SHARD_MEMBER_MAX);
    if (unix_ms < 0 || (uint64_t)unix_ms > MS_MASK)
        return odbox_fail(err, ODBOX_EINVAL, "uuid: timestamp %lld ms does not fit in 48 bits",
                          (long long)unix_ms);

    unsigned char r[16]; /* 60 random bits are needed */
    random16(r);
    uint64_t rand12 = ((uint64_t)r[10] << 8 | r[11]) & 0x0FFF;
    uint64_t rand48 = 0;
    for (int i = 0; i < 6; i++)
        rand48 = rand48 << 8 | r[i];

    uint64_t shard = (uint64_t)((unsigned)id.group << 6 | (unsigned)id.member);
    uint64_t msb = ((uint64_t)unix_ms & MS_MASK) << 16 | 0x7000 | rand12;
    uint64_t lsb = UINT64_C(0x8000000000000000) | shard << 48 | rand48;

    unsigned char b[16];
    for (int i = 0; i < 8; i++) {
        b[i] = (unsigned char)(msb >> (56 - 8 * i));
        b[8 + i] = (unsigned char)(lsb >> (56 - 8 * i));
    }
    format_bytes(b, out);
    return ODBOX_OK;
}

int odbox_uuid_v7_sharded(odbox_shard_id id, char out[ODBOX_UUID_LEN + 1], odbox_error *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    int64_t prev = atomic_load(&last_ms);
    while (now > prev && !atomic_compare_exchange_weak(&last_ms, &prev, now))
        ;
    if (prev > now)
        now = prev;
    return odbox_uuid_v7_sharded_at(id, now, out, err);
}

/* Parses 8-4-4-4-12 text of either case into 16 bytes; 0 when malformed. */
static int parse(const char *text, unsigned char b[16])
{
    static const unsigned char at[16] = {0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34};
    if (!text)
        return 0;
    /* in text order, so that a short string stops at its NUL */
    for (int i = 0; i < 16; i++) {
        const unsigned char *p = (const unsigned char *)text + at[i];
        if ((i == 4 || i == 6 || i == 8 || i == 10) && p[-1] != '-')
            return 0;
        unsigned hi = odbox_hex_digit[p[0]];
        if (hi > 15)
            return 0;
        unsigned lo = odbox_hex_digit[p[1]];
        if (lo > 15)
            return 0;
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    return text[ODBOX_UUID_LEN] == '\0';
}

int odbox_uuid_is_valid(const char *text)
{
    unsigned char b[16];
    return parse(text, b);
}

int odbox_uuid_version(const char *text)
{
    unsigned char b[16];
    if (!parse(text, b))
        return 0;
    int v = b[6] >> 4;
    return v >= 1 && v <= 8 ? v : 0;
}

int odbox_uuid_shard(const char *text, odbox_shard_id *id)
{
    unsigned char b[16];
    if (!parse(text, b) || b[6] >> 4 != 7 || (b[8] & 0xC0) != 0x80)
        return 0;
    unsigned v = ((unsigned)b[8] << 8 | b[9]) & 0x3FFF;
    if (id) {
        id->group = (int)(v >> 6);
        id->member = (int)(v & 0x3F);
    }
    return 1;
}

/* RFC 9562 method 1: rand_a is a 12-bit counter; past 4096 the counter
 * carries into the millisecond. Ids made with one unix_ms sort by seq. */
void odbox_uuid_v7_seq(int64_t unix_ms, size_t seq, char out[ODBOX_UUID_LEN + 1])
{
    unsigned char b[16];
    random16(b);
    uint64_t ms = ((uint64_t)unix_ms + (uint64_t)(seq >> 12)) & MS_MASK;
    for (int i = 0; i < 6; i++)
        b[i] = (unsigned char)(ms >> (40 - 8 * i));
    b[6] = (unsigned char)(0x70 | ((seq >> 8) & 0x0F));
    b[7] = (unsigned char)(seq & 0xFF);
    b[8] = (unsigned char)((b[8] & 0x3F) | 0x80);
    format_bytes(b, out);
}
