/* odbox — ids: random UUIDs (v4, libuuid) and shard-aware UUIDv7
 * (Ekbatan's ShardedUUID layout, see odbox/uuid.h). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <uuid/uuid.h>
#include "internal.h"
#include "odbox/uuid.h"

#define MS_MASK UINT64_C(0xFFFFFFFFFFFF) /* 48-bit millisecond field */

/* The last millisecond handed out by odbox_uuid_v7_sharded: ids made by
 * one process never go back in time, even when the wall clock is stepped
 * back (RFC 9562 6.2 allows holding the timestamp). */
static _Atomic int64_t last_ms;

void odbox_uuid_v4(char out[ODBOX_UUID_LEN + 1])
{
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, out);
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

    /* Bytes 0..5 and 9..15 of a v4 UUID are all random: 60 are needed. */
    uuid_t r;
    uuid_generate_random(r);
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
    if (!text)
        return 0;
    size_t o = 0;
    for (size_t i = 0; i < ODBOX_UUID_LEN; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (text[i] != '-')
                return 0;
            continue;
        }
        int hi = odbox_hex_value(text[i]);
        if (hi < 0)
            return 0;
        int lo = odbox_hex_value(text[++i]);
        if (lo < 0)
            return 0;
        b[o++] = (unsigned char)(hi << 4 | lo);
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
