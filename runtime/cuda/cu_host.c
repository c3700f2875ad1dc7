/* cu_host.c - the CUDA backend's host-side decisions; see cu_host.h. */
#include "cu_host.h"

#include "prtable.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cu_pick_device(int np, int local, int nlocal, int ngpu, int rank, int *dev, char *why,
                   size_t why_n)
{
    if (ngpu < 1) {
        snprintf(why, why_n, "no GPU found: the CUDA backend needs a CUDA device");
        return -1;
    }
    if (np <= 1) {
        *dev = rank % ngpu;
        return 0;
    }
    if (ngpu == 1) {         /* one visible GPU per process (CUDA_VISIBLE_DEVICES) */
        *dev = 0;
        return 0;
    }
    if (nlocal > ngpu || local < 0 || local >= nlocal) {
        snprintf(why, why_n, "%d processes on this node but %d GPUs: NCCL needs one GPU per "
                 "process (give each process one GPU with CUDA_VISIBLE_DEVICES, or run "
                 "without mpirun: one process drives several ranks)", nlocal, ngpu);
        return -1;
    }
    *dev = local;
    return 0;
}

void cu_env_defaults(void)
{
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

int cu_nccl_max_ctas(int sm_count, int pending)
{
    int cap = sm_count / (pending > 0 ? pending + 1 : 1);
    return cap < 1 ? 1 : cap > 32 ? 32 : cap;
}

/* The next message id of the table (a difference to *prev), checked to be sent
 * (`send`) or received by rank rd->rank and listed once (seen bit 1: sent, 2:
 * received). */
static uint32_t sp_msg(PrTableReader *rd, const PrProgram *g, uint8_t *seen, uint32_t *prev, bool send)
{
    int64_t m = (int64_t)*prev + pr_unzigzag(pr_table_num(rd, UINT64_MAX));
    if (rd->bad)
        return 0;
    if (m < 0 || m >= (int64_t)g->nmsgs) {
        pr_table_fail(rd, "message %lld is out of range", (long long)m);
        return 0;
    }
    int32_t end = send ? g->msgs[m].src : g->msgs[m].dst;
    if (end != rd->rank) {
        pr_table_fail(rd, "message %lld is %s by rank %d", (long long)m, send ? "sent" : "received",
                (int)end);
        return 0;
    }
    if (seen[m] & (send ? 1 : 2)) {
        pr_table_fail(rd, "message %lld is listed twice", (long long)m);
        return 0;
    }
    seen[m] |= send ? 1 : 2;
    *prev = (uint32_t)m;
    return (uint32_t)m;
}

/* Reads rank s's table into sp->rank[s] and sp->send_after. Returns 0 or -1 (rd->why). */
static int read_rank_streams(const PrProgram *g, int32_t s, StreamPlan *sp, uint8_t *seen,
                             char *why, size_t why_n)
{
    const PrRankDesc *d = &g->ranks[s];
    StreamRank *k = &sp->rank[s];
    PrTableReader rd = {d->streams, d->streams, "stream plan", s, why, why_n, false};
    if (pr_table_num(&rd, UINT32_MAX) != PR_STREAMS_VERSION)
        pr_table_fail(&rd, "stream plan format %d expected", PR_STREAMS_VERSION);
    uint32_t n = (uint32_t)pr_table_num(&rd, UINT32_MAX);
    if (!rd.bad && n != d->nops)
        pr_table_fail(&rd, "%u ops, the op table has %u", n, d->nops);
    if (rd.bad)
        return -1;
    /* each op takes at least 4 characters, each wait or message 1 */
    size_t left = strlen(rd.s);
    k->nops = n;
    k->stream = malloc((size_t)n + 1);
    k->wstart = malloc(((size_t)n + 1) * sizeof *k->wstart);
    k->rstart = malloc(((size_t)n + 1) * sizeof *k->rstart);
    k->waits = malloc((left + 1) * sizeof *k->waits);
    k->recvs = malloc((left + 1) * sizeof *k->recvs);
    if (!k->stream || !k->wstart || !k->rstart || !k->waits || !k->recvs) {
        snprintf(why, why_n, "out of memory reading the stream plan of rank %d", s);
        return -1;
    }
    uint32_t nw = 0, nr = 0, prev = 0;
    for (uint32_t i = 0; i < n && !rd.bad; i++) {
        k->stream[i] = (uint8_t)pr_table_num(&rd, STREAM_N - 1);
        if (!rd.bad && k->stream[i] != plan_kind_stream(d->ops[i].kind))
            pr_table_fail(&rd, "op %u is on another stream than its kind's", i);
        k->wstart[i] = nw;
        uint64_t c = pr_table_num(&rd, left);
        for (uint64_t x = 0; x < c && !rd.bad; x++) {
            uint32_t back = (uint32_t)pr_table_num(&rd, i);
            if (!rd.bad && back == 0)
                pr_table_fail(&rd, "op %u waits for itself", i);
            k->waits[nw++] = i - back;
        }
        k->rstart[i] = nr;
        c = pr_table_num(&rd, left);
        for (uint64_t x = 0; x < c && !rd.bad; x++)
            k->recvs[nr++] = sp_msg(&rd, g, seen, &prev, false);
        c = pr_table_num(&rd, left);
        for (uint64_t x = 0; x < c && !rd.bad; x++)
            sp->send_after[sp_msg(&rd, g, seen, &prev, true)] = i;
    }
    k->wstart[n] = nw;
    k->rstart[n] = nr;
    if (!rd.bad && *rd.s)
        pr_table_fail(&rd, "characters after the last op");
    return rd.bad ? -1 : 0;
}

StreamPlan *cu_stream_plan(const PrProgram *g, char *why, size_t why_n)
{
    StreamPlan *sp = calloc(1, sizeof *sp);
    uint8_t *seen = calloc((size_t)g->nmsgs + 1, 1);
    if (!sp || !seen || g->P < 1) {
        snprintf(why, why_n, g->P < 1 ? "the program has no ranks"
                                      : "out of memory reading the stream plan");
        goto fail;
    }
    sp->P = (uint32_t)g->P;
    sp->nmsgs = g->nmsgs;
    sp->rank = calloc((size_t)g->P, sizeof *sp->rank);
    sp->send_after = malloc(((size_t)g->nmsgs + 1) * sizeof *sp->send_after);
    if (!sp->rank || !sp->send_after) {
        snprintf(why, why_n, "out of memory reading the stream plan");
        goto fail;
    }
    for (int32_t s = 0; s < g->P; s++) {
        if (!g->ranks[s].streams) {
            snprintf(why, why_n, "rank %d has no stream plan: the CUDA backend runs a program "
                     "generated with `pipec emit --backend cuda`", s);
            goto fail;
        }
        if (read_rank_streams(g, s, sp, seen, why, why_n) != 0)
            goto fail;
    }
    for (uint32_t m = 0; m < g->nmsgs; m++)
        if (seen[m] != 3) {
            snprintf(why, why_n, "message %u is %s in the stream plan", m,
                     seen[m] & 1 ? "never received" : "never sent");
            goto fail;
        }
    free(seen);
    return sp;
fail:
    free(seen);
    stream_plan_free(sp);
    return NULL;
}

/* One communicator's abort, on its own thread. */
typedef struct AbortJob {
    const CuTeardown *t;
    int k;
} AbortJob;

static void *abort_one(void *arg)
{
    AbortJob *j = arg;
    j->t->abort_comm(j->t->ctx, j->k);
    return NULL;
}

/* Aborts every communicator at once: a thread each, joined; one that cannot get a
 * thread is aborted here after the others have started. */
static void abort_all(const CuTeardown *t)
{
    pthread_t *th = calloc((size_t)(t->ncomms > 0 ? t->ncomms : 1), sizeof *th);
    AbortJob *job = calloc((size_t)(t->ncomms > 0 ? t->ncomms : 1), sizeof *job);
    bool *up = calloc((size_t)(t->ncomms > 0 ? t->ncomms : 1), sizeof *up);
    for (int k = 0; k < t->ncomms; k++) {
        if (!th || !job || !up)
            break;
        job[k] = (AbortJob){t, k};
        up[k] = pthread_create(&th[k], NULL, abort_one, &job[k]) == 0;
    }
    for (int k = 0; k < t->ncomms; k++)
        if (!(th && job && up && up[k]))
            t->abort_comm(t->ctx, k);
    for (int k = 0; th && job && up && k < t->ncomms; k++)
        if (up[k])
            pthread_join(th[k], NULL);
    free(th);
    free(job);
    free(up);
}

/* The teardown proper, on the caller's thread or on a reaper thread watched by a
 * deadline. */
typedef struct Reaper {
    CuTeardown t;
    bool failed;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done, abandoned;
} Reaper;

static void teardown_steps(const CuTeardown *t, bool failed)
{
    for (int k = 0; k < t->nthreads; k++)
        t->join(t->ctx, k);
    if (failed)
        abort_all(t);
    else
        for (int k = 0; k < t->ncomms; k++)
            t->destroy_comm(t->ctx, k);
    if (t->free_comms)
        t->free_comms(t->ctx);
}

static void *reaper_main(void *arg)
{
    Reaper *r = arg;
    teardown_steps(&r->t, r->failed);
    pthread_mutex_lock(&r->mu);
    r->done = true;
    bool abandoned = r->abandoned;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (abandoned) {   /* the caller gave up on us: the reaper owns the record */
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        free(r);
    }
    return NULL;
}

int cu_teardown(const CuTeardown *t, bool failed)
{
    if (!failed || t->deadline_s <= 0 || !t->give_up) {
        teardown_steps(t, failed);
        return 0;
    }
    Reaper *r = calloc(1, sizeof *r);
    pthread_t th;
    if (!r) {
        teardown_steps(t, failed);
        return 0;
    }
    r->t = *t;
    r->failed = failed;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pthread_create(&th, NULL, reaper_main, r) != 0) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        free(r);
        teardown_steps(t, failed);
        return 0;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double whole = floor(t->deadline_s);
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)((t->deadline_s - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    while (!r->done)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT)
            break;
    bool done = r->done;
    if (!done)
        r->abandoned = true;
    pthread_mutex_unlock(&r->mu);
    if (done) {
        pthread_join(th, NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        free(r);
        return 0;
    }
    pthread_detach(th);
    t->give_up(t->ctx, t->deadline_s);
    return -1;
}
