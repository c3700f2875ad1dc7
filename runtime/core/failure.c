/* failure.c - the bottom of the runtime core (core.h): the failure record
 * (pr_fail) and what it and every other core file use: the monotonic clock and timed
 * waits, the names of op kinds, ops and workloads, the rank thread's current op and the
 * process's transport. It calls no other file of the runtime: the core's other files
 * (common.c, dp.c, trace.c, profile.c, router.c) call down into it, and what a
 * failure must do above it (stop the other replicas of data parallelism) it does
 * through the run's on_fail hook. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "core.h"

/* Set by the CPU backend's MPI transport (runtime/mpi/piperun_mpi.c); here because the
 * core (dp.c) reads it with every backend. */
const PrTransport *pr_transport;

_Thread_local int pr_tl_rank = -1;
_Thread_local const PrOp *pr_tl_op;
_Thread_local uint32_t pr_tl_opi;

const char *pr_kind_name(int kind)
{
    return plan_kind_name(kind);
}

double pr_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void pr_spin_ms(double ms)
{
    if (!(ms > 0))
        return;
    double end = pr_now_ms() + ms;
    while (pr_now_ms() < end)
        ;
}

void pr_op_name(char *buf, size_t n, const PrOp *o)
{
    const char *k = pr_kind_name(o->kind);
    if (o->chunk)
        snprintf(buf, n, "%s%d.%d", k, (int)o->mb, (int)o->chunk);
    else
        snprintf(buf, n, "%s%d", k, (int)o->mb);
}

void pr_fail(PrRun *run, int rank, int64_t op, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&run->mu);
    bool first = !atomic_load(&run->failed);
    if (first) {
        char rp[24] = ""; /* data parallelism: which replica; the rank is its stage's */
        if (run->D > 1)
            snprintf(rp, sizeof rp, "replica %d, ", run->replica);
        if (rank >= 0 && op >= 0 && (uint64_t)op < run->prog->ranks[rank].nops) {
            const PrOp *o = &run->prog->ranks[rank].ops[op];
            char nm[32], where[48] = "";
            pr_op_name(nm, sizeof nm, o);
            if (o->line > 0)
                snprintf(where, sizeof where, ", line %d", (int)o->line);
            snprintf(run->error, sizeof run->error, "%srank %d, op %.20s (#%lld%.20s): %.150s",
                     rp, rank, nm, (long long)op, where, msg);
        } else if (rank >= 0) {
            snprintf(run->error, sizeof run->error, "%srank %d: %.200s", rp, rank, msg);
        } else {
            snprintf(run->error, sizeof run->error, "%s%.200s", rp, msg);
        }
        atomic_store(&run->failed, 1);
        /* Printed when recorded, not after teardown: a teardown that hangs (a GPU
         * communicator that cannot be aborted) or a process killed by its launcher must
         * not swallow the reason (docs/runtime.md "Failures"). */
        fprintf(stderr, "piperun: %s\n", run->error);
        fflush(stderr);
    }
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
    for (int s = 0; run->rank && s < run->ranks_ready; s++) {
        PrRank *r = &run->rank[s];
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        if (run->be && run->be->wake)
            run->be->wake(r);
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_lock(&r->bell_mu);
        pthread_cond_broadcast(&r->bell_cv);
        pthread_mutex_unlock(&r->bell_mu);
    }
    if (first && run->on_fail) /* data parallelism: the other replicas wait for this one */
        run->on_fail(run);
}

void pr_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline)
{
    double ms = deadline - pr_now_ms();
    if (ms < 0)
        ms = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)(ms * 1e6);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_cond_timedwait(cv, mu, &ts);
}

const char *pr_workload_name(const PrProgram *g, int w)
{
    static const char *const arch[3] = {"mlp", "gpt", "llama"};
    if (w != PR_MLP)
        return "synthetic";
    return g->model_arch >= 0 && g->model_arch < 3 ? arch[g->model_arch] : "model";
}
