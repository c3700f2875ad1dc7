/* cu_host.c - the CUDA backend's host-side decisions; see cu_host.h. */
#include "cu_host.h"

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

StreamPlan *cu_stream_plan(const PrProgram *g, uint32_t *bad_msg)
{
    *bad_msg = UINT32_MAX;
    size_t P = (size_t)g->P, PV = P * (size_t)g->V, M = (size_t)g->M;
    size_t nkey = PV * M * PR_NKINDS;
    uint32_t *where = malloc((nkey ? nkey : 1) * sizeof *where);
    SpOp **ops = calloc(P ? P : 1, sizeof *ops);
    uint32_t *nops = calloc(P ? P : 1, sizeof *nops);
    SpMsg *msgs = malloc(((size_t)g->nmsgs + 1) * sizeof *msgs);
    StreamPlan *sp = NULL;
    if (!where || !ops || !nops || !msgs)
        goto out;
    memset(where, 0xff, nkey * sizeof *where);
    for (size_t s = 0; s < P; s++) {
        const PrRankDesc *d = &g->ranks[s];
        nops[s] = d->nops;
        if (!(ops[s] = malloc((d->nops ? d->nops : 1) * sizeof **ops)))
            goto out;
        for (uint32_t i = 0; i < d->nops; i++) {
            const PrOp *o = &d->ops[i];
            ops[s][i] = (SpOp){o->kind, o->vstage, o->mb};
            if (o->kind < PR_NKINDS && o->vstage >= 0 && (size_t)o->vstage < PV && o->mb >= 0 &&
                (size_t)o->mb < M)
                where[((size_t)o->vstage * M + (size_t)o->mb) * PR_NKINDS + o->kind] = i;
        }
    }
    for (uint32_t j = 0; j < g->nmsgs; j++) {
        const PrMsg *m = &g->msgs[j];
        uint32_t a = UINT32_MAX, b = UINT32_MAX;
        if (m->from_v >= 0 && (size_t)m->from_v < PV && m->from_mb >= 0 && (size_t)m->from_mb < M &&
            m->from_kind < PR_NKINDS)
            a = where[((size_t)m->from_v * M + (size_t)m->from_mb) * PR_NKINDS + m->from_kind];
        if (m->to_v >= 0 && (size_t)m->to_v < PV && m->to_mb >= 0 && (size_t)m->to_mb < M &&
            m->to_kind < PR_NKINDS)
            b = where[((size_t)m->to_v * M + (size_t)m->to_mb) * PR_NKINDS + m->to_kind];
        if (a == UINT32_MAX || b == UINT32_MAX || m->src < 0 || (size_t)m->src >= P ||
            m->dst < 0 || (size_t)m->dst >= P || a >= nops[m->src] || b >= nops[m->dst] ||
            g->ranks[m->src].ops[a].vstage != m->from_v || g->ranks[m->dst].ops[b].vstage != m->to_v) {
            *bad_msg = j;
            goto out;
        }
        msgs[j] = (SpMsg){(uint32_t)m->src, a, (uint32_t)m->dst, b};
    }
    StreamIn in = {(uint32_t)P, (int32_t)PV, (int32_t)M, (const SpOp *const *)ops, nops, msgs,
                   g->nmsgs};
    sp = stream_plan(&in);
out:
    for (size_t s = 0; ops && s < P; s++)
        free(ops[s]);
    free(ops);
    free(nops);
    free(msgs);
    free(where);
    return sp;
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
