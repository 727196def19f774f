/* odbox — NATS helper for tests/relay/nats.test and bench/relay_nats.sh:
 *   nats-tool create URL STREAM SUBJECT   a file stream on SUBJECT (a
 *                                         wildcard is fine), 2 min dedup window
 *   nats-tool count URL STREAM            reads every message of STREAM and
 *       prints "messages N distinct D duplicates X disorder V bytes B": distinct
 *       Nats-Msg-Id values, messages beyond one per id, and messages whose
 *       payload.seq is below an earlier one of the same aggregateid; B is
 *       the mean body size
 *   nats-tool publish URL SUBJECT N SIZE THREADS   N messages of SIZE bytes
 *       with JetStream, each waiting for its ack, on THREADS threads;
 *       prints "published N in MS ms: R msg/s" (the raw baseline)
 * Exits 0, or 1 with the NATS error on stderr. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <json-c/json.h>
#include <nats/nats.h>

static int fail(const char *what, natsStatus s, jsErrCode j)
{
    fprintf(stderr, "nats-tool: %s: %s (JetStream error %d)\n", what, natsStatus_GetText(s), (int)j);
    return 1;
}

static int create(jsCtx *js, const char *stream, const char *subject)
{
    jsStreamConfig c;
    jsErrCode j = 0;
    jsStreamConfig_Init(&c);
    c.Name = stream;
    c.Subjects = &subject;
    c.SubjectsLen = 1;
    c.Storage = js_FileStorage;
    c.Duplicates = 120LL * 1000000000LL; /* ns */
    jsStreamInfo *si = NULL;
    natsStatus s = js_AddStream(&si, js, &c, NULL, &j);
    jsStreamInfo_Destroy(si);
    return s == NATS_OK ? 0 : fail("add stream", s, j);
}

/* id -> count, and aggregateid -> the highest seq seen */
static int count(jsCtx *js, const char *stream)
{
    jsStreamInfo *si = NULL;
    jsErrCode j = 0;
    natsStatus s = js_GetStreamInfo(&si, js, stream, NULL, &j);
    if (s != NATS_OK)
        return fail("stream info", s, j);
    uint64_t first = si->State.FirstSeq, last = si->State.LastSeq, n = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    json_object *ids = json_object_new_object(), *seqs = json_object_new_object();
    long long messages = 0, dups = 0, disorder = 0, bytes = 0, id_bad = 0, unkeyed = 0;
    for (uint64_t q = first; n && q <= last; q++) {
        natsMsg *m = NULL;
        if ((s = js_GetMsg(&m, js, stream, q, NULL, &j)) != NATS_OK)
            return fail("get message", s, j);
        const char *id = NULL;
        natsMsgHeader_Get(m, "Nats-Msg-Id", &id);
        messages++;
        bytes += natsMsg_GetDataLength(m);
        json_object *v;
        if (id && json_object_object_get_ex(ids, id, &v))
            dups++;
        else if (id)
            json_object_object_add(ids, id, json_object_new_int(1));
        json_object *body = json_tokener_parse(natsMsg_GetData(m)), *agg, *pl, *seq, *eid;
        /* the header the stream deduplicates by is the event's id */
        if (!id || !json_object_object_get_ex(body, "id", &eid) || strcmp(json_object_get_string(eid), id))
            id_bad++;
        if (body && json_object_object_get_ex(body, "aggregateid", &agg) && json_object_get_string(agg) &&
            json_object_object_get_ex(body, "payload", &pl) && json_object_object_get_ex(pl, "seq", &seq)) {
            const char *a = json_object_get_string(agg);
            if (json_object_object_get_ex(seqs, a, &v) && json_object_get_int(v) > json_object_get_int(seq))
                disorder++;
            else
                json_object_object_add(seqs, a, json_object_new_int(json_object_get_int(seq)));
        } else {
            unkeyed++; /* no order to check */
        }
        json_object_put(body);
        natsMsg_Destroy(m);
    }
    printf("messages %lld distinct %d duplicates %lld disorder %lld bytes %lld id_bad %lld unkeyed %lld\n", messages,
           json_object_object_length(ids), dups, disorder, messages ? bytes / messages : 0, id_bad, unkeyed);
    json_object_put(ids);
    json_object_put(seqs);
    return 0;
}

typedef struct pub_job {
    jsCtx *js;
    const char *subject;
    const char *body;
    int size, from, n;
    natsStatus s;
} pub_job;

static void *publisher(void *arg)
{
    pub_job *p = arg;
    for (int i = p->from; i < p->from + p->n && p->s == NATS_OK; i++) {
        char id[32];
        jsPubOptions o;
        jsPubOptions_Init(&o);
        snprintf(id, sizeof id, "raw-%d", i);
        o.MsgId = id;
        jsPubAck *ack = NULL;
        p->s = js_Publish(&ack, p->js, p->subject, p->body, p->size, &o, NULL);
        jsPubAck_Destroy(ack);
    }
    return NULL;
}

static int publish(jsCtx *js, const char *subject, int n, int size, int threads)
{
    char *body = malloc((size_t)size + 1);
    pub_job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    if (!body || !jobs || !t)
        return 1;
    memset(body, 'x', (size_t)size);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < threads; i++) {
        jobs[i] = (pub_job){js, subject, body, size, i * (n / threads), n / threads + (i == threads - 1 ? n % threads : 0),
                            NATS_OK};
        pthread_create(&t[i], NULL, publisher, &jobs[i]);
    }
    int rc = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        if (jobs[i].s != NATS_OK)
            rc = fail("publish", jobs[i].s, 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    if (!rc)
        printf("published %d in %.0f ms: %.0f msg/s\n", n, ms, n / (ms / 1e3));
    free(body);
    free(jobs);
    free(t);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: nats-tool create URL STREAM SUBJECT | count URL STREAM |"
                        " publish URL SUBJECT N SIZE THREADS\n");
        return 2;
    }
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    natsStatus s = natsConnection_ConnectTo(&nc, argv[2]);
    if (s == NATS_OK)
        s = natsConnection_JetStream(&js, nc, NULL);
    int rc = s == NATS_OK ? 0 : fail("connect", s, 0);
    if (!rc && !strcmp(argv[1], "create") && argc == 5)
        rc = create(js, argv[3], argv[4]);
    else if (!rc && !strcmp(argv[1], "count") && argc == 4)
        rc = count(js, argv[3]);
    else if (!rc && !strcmp(argv[1], "publish") && argc == 7)
        rc = publish(js, argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]) > 0 ? atoi(argv[6]) : 1);
    else if (!rc)
        rc = 2;
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    nats_Close();
    return rc;
}
