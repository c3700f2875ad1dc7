/* piperun.c - the CPU runtime core: rank threads, copy threads for SO/SI, messages,
 * failure handling and the watchdog, iterations and the summary (piperun.h,
 * docs/runtime.md). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "piperun_internal.h"

/* Waits are cut into slices so that a failure elsewhere is noticed quickly. */
#define WAIT_SLICE_MS 50.0

static _Thread_local int tl_rank = -1;
static _Thread_local const PrOp *tl_op;
static _Thread_local uint32_t tl_opi;

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
    static const char *const kn[PR_NKINDS] = {"F", "B", "W", "R", "SO", "SI", "OG", "LW"};
    const char *k = o->kind < PR_NKINDS ? kn[o->kind] : "?";
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
    if (!atomic_load(&run->failed)) {
        if (rank >= 0 && op >= 0 && (uint64_t)op < run->prog->ranks[rank].nops) {
            const PrOp *o = &run->prog->ranks[rank].ops[op];
            char nm[32], where[48] = "";
            pr_op_name(nm, sizeof nm, o);
            if (o->line > 0)
                snprintf(where, sizeof where, ", line %d", (int)o->line);
            snprintf(run->error, sizeof run->error, "rank %d, op %.20s (#%lld%.20s): %.150s",
                     rank, nm, (long long)op, where, msg);
        } else if (rank >= 0) {
            snprintf(run->error, sizeof run->error, "rank %d: %.200s", rank, msg);
        } else {
            snprintf(run->error, sizeof run->error, "%.200s", msg);
        }
        atomic_store(&run->failed, 1);
    }
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
    for (int s = 0; run->rank && s < run->ranks_ready; s++) {
        pthread_mutex_lock(&run->rank[s].mu);
        pthread_cond_broadcast(&run->rank[s].cv);
        pthread_mutex_unlock(&run->rank[s].mu);
    }
}

/* Waits on cv (mutex mu held) for at most one slice, or until deadline (ms on the
 * monotonic clock) when that comes first, so the earliest deadline fires first. */
static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline)
{
    double ms = WAIT_SLICE_MS, left = deadline - pr_now_ms();
    if (left < ms)
        ms = left > 0 ? left : 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(ms * 1e6);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

static void wait_slice(pthread_cond_t *cv, pthread_mutex_t *mu)
{
    wait_until(cv, mu, pr_now_ms() + WAIT_SLICE_MS);
}

/* ---- faults (testing aid) ------------------------------------------------------ */

enum { FAULT_NONE, FAULT_FAIL, FAULT_SEGV, FAULT_ALLOC, FAULT_DROP };

static void parse_fault(PrRun *run)
{
    for (int s = 0; s < run->P; s++)
        run->rank[s].fault_op = -1;
    const char *f = getenv("PIPERUN_FAULT");
    if (!f || !*f)
        return;
    int rank, op;
    char what[16] = "";
    if (sscanf(f, "%d:%d:%15s", &rank, &op, what) != 3 || rank < 0 || rank >= run->P ||
        op < 0) {
        fprintf(stderr, "piperun: ignoring PIPERUN_FAULT=%s (want rank:op:what)\n", f);
        return;
    }
    int w = !strcmp(what, "fail")    ? FAULT_FAIL
            : !strcmp(what, "segv")  ? FAULT_SEGV
            : !strcmp(what, "alloc") ? FAULT_ALLOC
            : !strcmp(what, "drop")  ? FAULT_DROP
                                     : FAULT_NONE;
    if (w == FAULT_NONE) {
        fprintf(stderr, "piperun: ignoring PIPERUN_FAULT=%s (what: fail segv alloc drop)\n", f);
        return;
    }
    run->rank[rank].fault_op = op;
    run->rank[rank].fault_what = w;
}

/* ---- signals --------------------------------------------------------------------- */

static void put_str(char *buf, size_t *n, const char *s)
{
    while (*s && *n < 250)
        buf[(*n)++] = *s++;
}

static void put_int(char *buf, size_t *n, long v)
{
    char d[24];
    int k = 0;
    if (v < 0) {
        put_str(buf, n, "-");
        v = -v;
    }
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && k < 23);
    while (k && *n < 250)
        buf[(*n)++] = d[--k];
}

/* Async-signal-safe: formats with put_*, writes, exits. The process state may be
 * corrupt, so nothing else is attempted: every rank stops with the process. */
static void on_signal(int sig)
{
    char buf[256];
    size_t n = 0;
    put_str(buf, &n, "piperun: ");
    if (tl_rank >= 0) {
        put_str(buf, &n, "rank ");
        put_int(buf, &n, tl_rank);
        if (tl_op) {
            static const char *const kn[PR_NKINDS] = {"F", "B", "W", "R", "SO", "SI", "OG", "LW"};
            put_str(buf, &n, ", op ");
            put_str(buf, &n, tl_op->kind < PR_NKINDS ? kn[tl_op->kind] : "?");
            put_int(buf, &n, tl_op->mb);
            if (tl_op->chunk) {
                put_str(buf, &n, ".");
                put_int(buf, &n, tl_op->chunk);
            }
            put_str(buf, &n, " (#");
            put_int(buf, &n, (long)tl_opi);
            put_str(buf, &n, ")");
        }
        put_str(buf, &n, ": ");
    }
    put_str(buf, &n, "fatal signal ");
    put_str(buf, &n, sig == SIGSEGV   ? "SIGSEGV"
                     : sig == SIGBUS  ? "SIGBUS"
                     : sig == SIGFPE  ? "SIGFPE"
                     : sig == SIGILL  ? "SIGILL"
                     : sig == SIGABRT ? "SIGABRT (assertion or abort)"
                                      : "?");
    put_str(buf, &n, "; stopping every rank\n");
    ssize_t w = write(2, buf, n);
    (void)w;
    _exit(1);
}

void pr_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

/* ---- messages -------------------------------------------------------------------- */

static size_t vm(const PrRun *run, int v, int m)
{
    return (size_t)v * (size_t)run->M + (size_t)m;
}

int pr_send(PrRank *r, int32_t peer, uint32_t msg)
{
    PrRun *run = r->run;
    if (atomic_load(&run->failed))
        return -1;
    if (msg >= run->prog->nmsgs || run->prog->msgs[msg].src != r->id ||
        run->prog->msgs[msg].dst != peer) {
        pr_fail(run, r->id, -1, "send of message %u to rank %d does not match the program",
                msg, peer);
        return -1;
    }
    if (r->dropping)
        return 0;
    const PrMsg *m = &run->prog->msgs[msg];
    void *payload = NULL;
    if (m->payload == PR_PAY_ACT || m->payload == PR_PAY_GRAD) {
        void **slot = m->payload == PR_PAY_ACT ? &r->out_f[vm(run, m->from_v, m->from_mb)]
                                               : &r->out_b[vm(run, m->from_v, m->from_mb)];
        payload = *slot;
        *slot = NULL;
    }
    PrNode *nd = malloc(sizeof *nd);
    if (!nd) {
        free(payload);
        pr_fail(run, r->id, -1, "out of memory sending message %u", msg);
        return -1;
    }
    *nd = (PrNode){msg, payload, pr_now_ms() - run->t_start, NULL};
    pthread_mutex_lock(&run->mu);
    PrChan *c = &run->chan[(size_t)r->id * (size_t)run->P + (size_t)peer];
    if (c->tail)
        c->tail->next = nd;
    else
        c->head = nd;
    c->tail = nd;
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
    return 0;
}

int pr_recv(PrRank *r, int32_t peer, uint32_t msg)
{
    PrRun *run = r->run;
    if (atomic_load(&run->failed))
        return -1;
    if (msg >= run->prog->nmsgs || run->prog->msgs[msg].dst != r->id ||
        run->prog->msgs[msg].src != peer || peer < 0 || peer >= run->P) {
        pr_fail(run, r->id, -1, "receive of message %u from rank %d does not match the program",
                msg, peer);
        return -1;
    }
    const PrMsg *m = &run->prog->msgs[msg];
    double deadline = pr_now_ms() + run->opt.timeout_s * 1e3;
    PrChan *c = &run->chan[(size_t)peer * (size_t)run->P + (size_t)r->id];
    pthread_mutex_lock(&run->mu);
    while (!c->head && !atomic_load(&run->failed)) {
        if (pr_now_ms() > deadline) {
            pthread_mutex_unlock(&run->mu);
            static const char *const kn[PR_NKINDS] = {"F", "B", "W", "R", "SO", "SI", "OG", "LW"};
            pr_fail(run, r->id, (int64_t)r->next_op,
                    "watchdog: stuck %.1f s in the receive of message %u (%s%d of virtual "
                    "stage %d on rank %d)",
                    run->opt.timeout_s, msg, m->from_kind < PR_NKINDS ? kn[m->from_kind] : "?",
                    m->from_mb, m->from_v, peer);
            return -1;
        }
        wait_until(&run->cv, &run->mu, deadline);
    }
    if (atomic_load(&run->failed)) {
        pthread_mutex_unlock(&run->mu);
        return -1;
    }
    PrNode *nd = c->head;
    c->head = nd->next;
    if (!c->head)
        c->tail = NULL;
    pthread_mutex_unlock(&run->mu);
    if (nd->msg != msg) {
        free(nd->payload);
        uint32_t got = nd->msg;
        free(nd);
        pr_fail(run, r->id, (int64_t)r->next_op,
                "message order: expected message %u from rank %d, got %u", msg, peer, got);
        return -1;
    }
    if (nd->payload) {
        void **slot = m->payload == PR_PAY_ACT ? &r->in_f[vm(run, m->to_v, m->to_mb)]
                                               : &r->in_b[vm(run, m->to_v, m->to_mb)];
        free(*slot);
        *slot = nd->payload;
    }
    /* The cost model's p2p time, replayed by the synthetic workload. */
    if (run->opt.workload == PR_SYNTHETIC && r->d->p2p_ms > 0) {
        double ready = run->t_start + nd->t_send + r->d->p2p_ms * run->opt.time_scale;
        double now = pr_now_ms();
        if (ready > now)
            pr_spin_ms(ready - now);
    }
    free(nd);
    return 0;
}

/* ---- copy threads ------------------------------------------------------------------ */

typedef struct CopyArg {
    PrRank *r;
    int dir;   /* 0: SO, 1: SI */
} CopyArg;

static int grow_host(PrRank *r, size_t k, int64_t bytes)
{
    if (r->host_cap[k] >= bytes)
        return 0;
    void *p = realloc(r->host[k], (size_t)bytes);
    if (!p)
        return -1;
    r->host[k] = p;
    r->host_cap[k] = bytes;
    return 0;
}

/* Runs one OG or LW on the copy thread: the mlp workload moves the chunk's gradients
 * out and steps its host weights (OG) or copies them back (LW); the synthetic workload
 * busy-waits the modelled time. */
static int state_op(PrRank *r, uint32_t i)
{
    PrRun *run = r->run;
    const PrOp *o = &r->d->ops[i];
    double t0 = pr_now_ms();
    int rc = 0;
    if (run->opt.workload == PR_MLP)
        rc = o->kind == PR_OG ? pr_mlp_offload(r, o) : pr_mlp_load(r, o);
    else
        pr_spin_ms(o->cost_ms * run->opt.time_scale);
    if (rc)
        return -1;
    double t1 = pr_now_ms();
    PrSpan *sp = &r->span[(size_t)r->iter * r->d->nops + i];
    sp->t0 = t0 - run->t_start;
    sp->t1 = t1 - run->t_start;
    pthread_mutex_lock(&r->mu);
    if (o->kind == PR_LW && o->vstage >= 0 && o->vstage < run->PV)
        r->lw_done[o->vstage] = (uint32_t)r->iter + 1;
    size_t kk = (size_t)o->vstage * PR_NKINDS + o->kind;
    r->kind_ms[kk] += t1 - t0;
    r->kind_n[kk]++;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Runs one SO or SI on the copy thread. */
static int copy_op(PrRank *r, uint32_t i)
{
    PrRun *run = r->run;
    const PrOp *o = &r->d->ops[i];
    if (o->kind == PR_OG || o->kind == PR_LW)
        return state_op(r, i);
    int w = run->opt.workload;
    size_t k = vm(run, o->vstage, o->mb);
    int64_t bytes = o->held[w];
    double t0 = pr_now_ms();
    if (o->kind == PR_SI) {
        /* SI waits for every SO listed before it (its own SO among them). */
        double deadline = t0 + run->opt.timeout_s * 1e3;
        pthread_mutex_lock(&r->mu);
        while (r->q[0].done < o->nso_before && !atomic_load(&run->failed)) {
            if (pr_now_ms() > deadline) {
                pthread_mutex_unlock(&r->mu);
                pr_fail(run, r->id, i, "watchdog: SI stuck %.1f s waiting for its SO",
                        run->opt.timeout_s);
                return -1;
            }
            wait_slice(&r->cv, &r->mu);
        }
        pthread_mutex_unlock(&r->mu);
        if (atomic_load(&run->failed))
            return -1;
        t0 = pr_now_ms();
    }
    if (o->mem_alloc[w] > 0) { /* live bytes as the compiler's walk counts them */
        pthread_mutex_lock(&r->mu);
        r->live += o->mem_alloc[w];
        if (r->live > r->peak)
            r->peak = r->live;
        pthread_mutex_unlock(&r->mu);
    }
    if (bytes > 0 && (o->off[w] >= 0 || o->rest[w] >= 0)) {
        if (o->kind == PR_SO) {
            if (grow_host(r, k, bytes) != 0) {
                pr_fail(run, r->id, i, "out of host memory (%lld bytes) for the swap",
                        (long long)bytes);
                return -1;
            }
            /* a region in two places (after an R) goes out as one */
            int64_t first = o->rest[w] >= 0 ? o->split[w] : bytes;
            if (first > bytes)
                first = bytes;
            if (first > 0 && o->off[w] >= 0)
                memcpy(r->host[k], r->arena + o->off[w], (size_t)first);
            if (first < bytes)
                memcpy((char *)r->host[k] + first, r->arena + o->rest[w],
                       (size_t)(bytes - first));
        } else {
            if (r->host_cap[k] < bytes) {
                pr_fail(run, r->id, i, "SI of %lld bytes without a matching SO",
                        (long long)bytes);
                return -1;
            }
            memcpy(r->arena + o->off[w], r->host[k], (size_t)bytes);
        }
    }
    if (w == PR_SYNTHETIC) {
        double ms = o->cost_ms * run->opt.time_scale;
        double left = t0 + ms - pr_now_ms();
        if (left > 0) {
            struct timespec ts = {(time_t)(left / 1e3), (long)(fmod(left, 1e3) * 1e6)};
            nanosleep(&ts, NULL);
        }
    }
    double t1 = pr_now_ms();
    PrSpan *sp = &r->span[(size_t)r->iter * r->d->nops + i];
    sp->t0 = t0 - run->t_start;
    sp->t1 = t1 - run->t_start;
    pthread_mutex_lock(&r->mu);
    r->live -= o->mem_free[w];
    if (o->kind == PR_SI)
        r->si_done[k] = (uint32_t)r->iter + 1;
    size_t kk = (size_t)o->vstage * PR_NKINDS + o->kind;
    r->kind_ms[kk] += t1 - t0;
    r->kind_n[kk]++;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static void *copy_main(void *arg)
{
    CopyArg *a = arg;
    PrRank *r = a->r;
    int dir = a->dir;
    free(a);
    tl_rank = r->id;
    PrCopyQ *q = &r->q[dir];
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (q->head == q->tail && !r->stop && !atomic_load(&r->run->failed))
            wait_slice(&r->cv, &r->mu);
        if (r->stop || atomic_load(&r->run->failed)) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        uint32_t i = q->op[q->head];
        pthread_mutex_unlock(&r->mu);
        tl_op = &r->d->ops[i];
        tl_opi = i;
        int rc = copy_op(r, i);
        tl_op = NULL;
        pthread_mutex_lock(&r->mu);
        q->head++;
        q->done++;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        if (rc)
            return NULL;
    }
}

/* Waits until cond holds for rank r's copy state; fails after the timeout. */
static int wait_copies(PrRank *r, uint32_t op, uint32_t so_done, size_t si_k, int all)
{
    PrRun *run = r->run;
    double deadline = pr_now_ms() + run->opt.timeout_s * 1e3;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        bool ok = r->q[0].done >= so_done;
        if (si_k != SIZE_MAX)
            ok = ok && r->si_done[si_k] == (uint32_t)r->iter + 1;
        if (all)
            ok = ok && r->q[0].head == r->q[0].tail && r->q[1].head == r->q[1].tail;
        if (ok || atomic_load(&run->failed))
            break;
        if (pr_now_ms() > deadline) {
            pthread_mutex_unlock(&r->mu);
            pr_fail(run, r->id, all ? -1 : (int64_t)op,
                    "watchdog: stuck %.1f s waiting for %s", run->opt.timeout_s,
                    all ? "the copy streams at the end of the iteration"
                    : si_k != SIZE_MAX ? "the swap-in of its activations"
                                       : "earlier swap-outs");
            return -1;
        }
        wait_slice(&r->cv, &r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return atomic_load(&run->failed) ? -1 : 0;
}

/* Waits until this iteration's LW of virtual stage v has finished (F of an offloaded
 * chunk); fails after the timeout. */
static int wait_lw(PrRank *r, uint32_t op, int32_t v)
{
    PrRun *run = r->run;
    if (v < 0 || v >= run->PV)
        return 0;
    double deadline = pr_now_ms() + run->opt.timeout_s * 1e3;
    pthread_mutex_lock(&r->mu);
    while (r->lw_done[v] != (uint32_t)r->iter + 1 && !atomic_load(&run->failed)) {
        if (pr_now_ms() > deadline) {
            pthread_mutex_unlock(&r->mu);
            pr_fail(run, r->id, (int64_t)op, "watchdog: stuck %.1f s waiting for the LW of its chunk",
                    run->opt.timeout_s);
            return -1;
        }
        wait_slice(&r->cv, &r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return atomic_load(&run->failed) ? -1 : 0;
}

/* ---- ops --------------------------------------------------------------------------- */

int pr_op(PrRank *r, uint32_t i)
{
    PrRun *run = r->run;
    if (atomic_load(&run->failed))
        return -1;
    if (i >= r->d->nops) {
        pr_fail(run, r->id, -1, "op index %u out of range", i);
        return -1;
    }
    const PrOp *o = &r->d->ops[i];
    atomic_store(&r->cur_op, i);
    tl_op = o;
    tl_opi = i;
    int w = run->opt.workload;
    size_t k = vm(run, o->vstage, o->mb);

    if (r->fault_op == (int)i) {
        switch (r->fault_what) {
        case FAULT_FAIL:
            pr_fail(run, r->id, i, "injected failure (PIPERUN_FAULT)");
            return -1;
        case FAULT_SEGV:
            raise(SIGSEGV);
            break;
        case FAULT_ALLOC:
            pr_fail(run, r->id, i, "out of memory (injected by PIPERUN_FAULT)");
            return -1;
        case FAULT_DROP:
            r->dropping = 1;
            break;
        }
    }

    /* Waits the simulator assumes: allocating ops wait for earlier SOs, B/R wait for
     * their SI. */
    bool allocates = o->kind == PR_F || o->kind == PR_R;
    bool needs_si = (o->kind == PR_B || o->kind == PR_R) && (o->flags & PR_HAS_SI);
    if (o->kind == PR_SO || o->kind == PR_SI || o->kind == PR_OG || o->kind == PR_LW) {
        int dir = o->kind == PR_SO || o->kind == PR_OG ? 0 : 1;
        pthread_mutex_lock(&r->mu);
        r->q[dir].op[r->q[dir].tail++] = i;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        tl_op = NULL;
        r->next_op = i + 1;
        return 0;
    }
    if ((allocates && o->nso_before) || needs_si)
        if (wait_copies(r, i, allocates ? o->nso_before : 0, needs_si ? k : SIZE_MAX, 0))
            return -1;
    if (o->kind == PR_F && (o->flags & PR_HAS_LW) && wait_lw(r, i, o->vstage))
        return -1;

    double t0 = pr_now_ms();
    /* Live bytes, as the compiler's walk counts them: allocations at the start, frees
     * at the end (PrOp.mem_alloc, mem_free). */
    pthread_mutex_lock(&r->mu);
    r->live += o->mem_alloc[w];
    if (r->live > r->peak)
        r->peak = r->live;
    pthread_mutex_unlock(&r->mu);

    int rc = w == PR_MLP ? pr_mlp_op(r, i, o) : pr_synthetic_op(r, o);

    double t1 = pr_now_ms();
    pthread_mutex_lock(&r->mu);
    r->live -= o->mem_free[w];
    size_t kk = (size_t)o->vstage * PR_NKINDS + o->kind;
    r->kind_ms[kk] += t1 - t0;
    r->kind_n[kk]++;
    pthread_mutex_unlock(&r->mu);
    r->busy_ms += t1 - t0;
    r->next_op = i + 1;
    PrSpan *sp = &r->span[(size_t)r->iter * r->d->nops + i];
    sp->t0 = t0 - run->t_start;
    sp->t1 = t1 - run->t_start;
    tl_op = NULL;
    return rc;
}

/* ---- barrier between the main thread and the ranks ---------------------------------- */

/* Every rank and the main thread call it; returns -1 when the run failed. */
static int barrier(PrRun *run)
{
    pthread_mutex_lock(&run->mu);
    int gen = run->bar_gen;
    if (++run->bar_count == run->P + 1) {
        run->bar_count = 0;
        run->bar_gen++;
        pthread_cond_broadcast(&run->cv);
    } else {
        while (gen == run->bar_gen && !atomic_load(&run->failed))
            wait_slice(&run->cv, &run->mu);
    }
    pthread_mutex_unlock(&run->mu);
    return atomic_load(&run->failed) ? -1 : 0;
}

static void *rank_main(void *arg)
{
    PrRank *r = arg;
    PrRun *run = r->run;
    tl_rank = r->id;
    for (int it = 0; it < run->opt.iters; it++) {
        if (barrier(run)) /* start of iteration it */
            return NULL;
        r->iter = it;
        r->dropping = 0;
        r->next_op = 0;
        pthread_mutex_lock(&r->mu);
        for (int d = 0; d < 2; d++)
            r->q[d].head = r->q[d].tail = r->q[d].done = 0;
        pthread_mutex_unlock(&r->mu);
        int rc = r->d->run(r);
        if (rc == 0)
            rc = wait_copies(r, 0, 0, SIZE_MAX, 1);
        if (rc != 0 && !atomic_load(&run->failed))
            pr_fail(run, r->id, -1, "the rank program failed");
        if (barrier(run)) /* end of iteration it */
            return NULL;
        if (barrier(run)) /* the main thread has stepped the optimizer */
            return NULL;
    }
    return NULL;
}

/* ---- setup and teardown -------------------------------------------------------------- */

void pr_options_default(PrOptions *o, const PrProgram *prog)
{
    memset(o, 0, sizeof *o);
    o->workload = prog && !prog->mlp_unavailable ? PR_MLP : PR_SYNTHETIC;
    o->iters = 1;
    o->time_scale = 1.0;
    o->timeout_s = 30.0;
    o->lr = 0.05;
    o->seed = 1;
    o->threads_blas = 1;
}

void pr_result_free(PrResult *res)
{
    if (!res)
        return;
    free(res->loss);
    free(res->iter_ms);
    free(res->busy_ms);
    free(res->peak_arena);
    free(res->grad_name);
    free(res->grad_err);
    memset(res, 0, sizeof *res);
}

static void rank_free(PrRank *r)
{
    if (r->copy_started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        for (int d = 0; d < 2; d++)
            pthread_join(r->copy_th[d], NULL);
    }
    for (size_t k = 0; r->in_f && k < r->nvm; k++) {
        free(r->in_f[k]);
        free(r->in_b[k]);
        free(r->out_f[k]);
        free(r->out_b[k]);
        free(r->host[k]);
    }
    free(r->in_f);
    free(r->in_b);
    free(r->out_f);
    free(r->out_b);
    free(r->host);
    free(r->host_cap);
    free(r->si_done);
    free(r->lw_done);
    free(r->tokens);
    free(r->targets);
    free(r->q[0].op);
    free(r->q[1].op);
    free(r->kind_ms);
    free(r->kind_n);
    free(r->span);
    free(r->arena);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

static int rank_init(PrRun *run, int s)
{
    PrRank *r = &run->rank[s];
    r->nvm = (size_t)run->PV * (size_t)run->M;
    size_t nvm = r->nvm, nops = r->d->nops ? r->d->nops : 1;
    r->in_f = calloc(nvm, sizeof(void *));
    r->in_b = calloc(nvm, sizeof(void *));
    r->out_f = calloc(nvm, sizeof(void *));
    r->out_b = calloc(nvm, sizeof(void *));
    r->host = calloc(nvm, sizeof(void *));
    r->host_cap = calloc(nvm, sizeof(int64_t));
    r->si_done = calloc(nvm, sizeof(uint32_t));
    r->lw_done = calloc((size_t)(run->PV > 0 ? run->PV : 1), sizeof(uint32_t));
    r->q[0].op = calloc(nops, sizeof(uint32_t));
    r->q[1].op = calloc(nops, sizeof(uint32_t));
    r->kind_ms = calloc((size_t)run->PV * PR_NKINDS, sizeof(double));
    r->kind_n = calloc((size_t)run->PV * PR_NKINDS, sizeof(uint32_t));
    r->span = calloc((size_t)run->opt.iters * nops, sizeof(PrSpan));
    int64_t ab = r->d->arena_bytes[run->opt.workload];
    r->arena_bytes = ab;
    size_t asz = (size_t)(ab > 0 ? (ab + 63) / 64 * 64 : 64);
    r->arena = aligned_alloc(64, asz);
    if (!r->in_f || !r->in_b || !r->out_f || !r->out_b || !r->host || !r->host_cap ||
        !r->si_done || !r->lw_done || !r->q[0].op || !r->q[1].op || !r->kind_ms ||
        !r->kind_n || !r->span || !r->arena) {
        pr_fail(run, s, -1, "out of memory allocating the rank (arena %lld bytes)",
                (long long)ab);
        return -1;
    }
    memset(r->arena, 0, asz);
    if (run->opt.workload == PR_MLP) {
        size_t bt = (size_t)run->prog->mlp_B * (size_t)run->prog->mlp_T;
        r->tokens = calloc(bt ? bt : 1, sizeof(int));
        r->targets = calloc(bt ? bt : 1, sizeof(int));
        if (!r->tokens || !r->targets) {
            pr_fail(run, s, -1, "out of memory");
            return -1;
        }
    }
    for (int d = 0; d < 2; d++) {
        CopyArg *a = malloc(sizeof *a);
        if (!a) {
            pr_fail(run, s, -1, "out of memory");
            return -1;
        }
        *a = (CopyArg){r, d};
        if (pthread_create(&r->copy_th[d], NULL, copy_main, a) != 0) {
            free(a);
            if (d == 1) { /* stop the first one */
                r->stop = 1;
                pthread_cond_broadcast(&r->cv);
                pthread_join(r->copy_th[0], NULL);
            }
            pr_fail(run, s, -1, "cannot start a copy thread");
            return -1;
        }
    }
    r->copy_started = 1;
    return 0;
}

static int validate(const PrProgram *prog, const PrOptions *o, char *why, size_t n)
{
    if (!prog || prog->abi != PIPERUN_ABI) {
        snprintf(why, n, "the program was generated for another libpiperun ABI");
        return -1;
    }
    if (prog->P < 1 || prog->M < 1 || prog->V < 1) {
        snprintf(why, n, "bad program shape");
        return -1;
    }
    if (o->iters < 1 || o->iters > 1000000) {
        snprintf(why, n, "--iters must be in 1..1000000");
        return -1;
    }
    if (!(o->timeout_s > 0)) {
        snprintf(why, n, "--timeout must be > 0 seconds");
        return -1;
    }
    if (!(o->time_scale >= 0) || o->time_scale > 1e6) {
        snprintf(why, n, "--time-scale must be in 0..1e6");
        return -1;
    }
    if (o->workload != PR_MLP && o->workload != PR_SYNTHETIC) {
        snprintf(why, n, "unknown workload");
        return -1;
    }
    if (o->workload == PR_MLP && prog->mlp_unavailable) {
        snprintf(why, n, "the mlp workload is not available: %s", prog->mlp_unavailable);
        return -1;
    }
    if (o->check && o->workload != PR_MLP) {
        snprintf(why, n, "--check needs the mlp workload");
        return -1;
    }
    return 0;
}

int pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res)
{
    PrResult dummy;
    if (!res)
        res = &dummy;
    memset(res, 0, sizeof *res);
    res->ref_ms = -1;
    res->max_grad_err = -1;
    char why[200];
    if (validate(prog, o, why, sizeof why)) {
        snprintf(res->error, sizeof res->error, "%s", why);
        if (res == &dummy)
            pr_result_free(res);
        return 1;
    }
    PrRun *run = calloc(1, sizeof *run);
    if (!run) {
        snprintf(res->error, sizeof res->error, "out of memory");
        return 1;
    }
    run->prog = prog;
    run->opt = *o;
    run->P = prog->P;
    run->PV = prog->P * prog->V;
    run->M = prog->M;
    pthread_mutex_init(&run->mu, NULL);
    pthread_cond_init(&run->cv, NULL);
    atomic_init(&run->failed, 0);
    run->rank = calloc((size_t)run->P, sizeof *run->rank);
    run->chan = calloc((size_t)run->P * (size_t)run->P, sizeof *run->chan);
    res->iters = o->iters;
    res->loss = calloc((size_t)o->iters, sizeof(double));
    res->iter_ms = calloc((size_t)o->iters, sizeof(double));
    res->busy_ms = calloc((size_t)run->P, sizeof(double));
    res->peak_arena = calloc((size_t)run->P, sizeof(int64_t));
    run->mb_loss = calloc((size_t)run->M, sizeof(double));
    int started = 0, ranks_init = 0;
    pthread_t *th = calloc((size_t)run->P, sizeof *th);
    if (!run->rank || !run->chan || !res->loss || !res->iter_ms || !res->busy_ms ||
        !res->peak_arena || !run->mb_loss || !th) {
        pr_fail(run, -1, -1, "out of memory");
        goto done;
    }
    for (int s = 0; s < run->P; s++) {
        PrRank *r = &run->rank[s];
        r->run = run;
        r->id = s;
        r->d = &prog->ranks[s];
        pthread_mutex_init(&r->mu, NULL);
        pthread_cond_init(&r->cv, NULL);
        atomic_init(&r->cur_op, 0);
    }
    ranks_init = run->ranks_ready = run->P;
    parse_fault(run);
    if (o->workload == PR_MLP && pr_mlp_setup(run) != 0)
        goto done;
    for (int s = 0; s < run->P; s++)
        if (rank_init(run, s) != 0)
            goto done;
    run->t_start = pr_now_ms();
    for (; started < run->P; started++)
        if (pthread_create(&th[started], NULL, rank_main, &run->rank[started]) != 0) {
            pr_fail(run, -1, -1, "cannot start rank thread %d", started);
            goto done;
        }
    for (int it = 0; it < o->iters; it++) {
        if (o->workload == PR_MLP)
            pr_mlp_zero(run);
        if (it == 1) /* profile from the second iteration on: the first warms up */
            for (int s = 0; s < run->P; s++) {
                memset(run->rank[s].kind_ms, 0, (size_t)run->PV * PR_NKINDS * sizeof(double));
                memset(run->rank[s].kind_n, 0, (size_t)run->PV * PR_NKINDS * sizeof(uint32_t));
            }
        double t0 = pr_now_ms();
        if (barrier(run))
            break;
        if (barrier(run))
            break;
        res->iter_ms[it] = pr_now_ms() - t0;
        double l = 0;
        for (int m = 0; m < run->M; m++)
            l += run->mb_loss[m];
        res->loss[it] = o->workload == PR_MLP ? l / run->M : NAN;
        if (it == 0 && o->check && pr_mlp_check(run, res) != 0)
            pr_fail(run, -1, -1, "the reference iteration failed (out of memory)");
        if (o->workload == PR_MLP)
            pr_mlp_step(run);
        if (!o->quiet && !o->json && !o->profile) {
            if (o->workload == PR_MLP)
                printf("iter %d: loss %.4f  time %.3f ms\n", it + 1, res->loss[it],
                       res->iter_ms[it]);
            else
                printf("iter %d: time %.3f ms\n", it + 1, res->iter_ms[it]);
            fflush(stdout);
        }
        if (barrier(run))
            break;
    }
done:
    res->ref_ms = -1;
    if (o->reference && o->workload == PR_MLP && !atomic_load(&run->failed) && run->model)
        res->ref_ms = pr_mlp_reference_ms(run);
    if (started < run->P && started > 0)
        pr_fail(run, -1, -1, "run aborted");
    for (int s = 0; s < started; s++)
        pthread_join(th[s], NULL);
    if (!atomic_load(&run->failed) && o->trace && pr_trace_write(run, o->trace) != 0)
        pr_fail(run, -1, -1, "cannot write the trace %s: %s", o->trace, strerror(errno));
    for (int s = 0; s < ranks_init; s++) {
        res->busy_ms[s] = run->rank[s].busy_ms;
        res->peak_arena[s] = run->rank[s].peak;
    }
    if (!atomic_load(&run->failed) && o->profile) {
        if (pr_profile_write(run) != 0)
            pr_fail(run, -1, -1, "cannot write the costs block");
    }
    int rc = atomic_load(&run->failed) ? 1 : 0;
    if (rc)
        snprintf(res->error, sizeof res->error, "%s", run->error);
    for (int s = 0; s < ranks_init; s++)
        rank_free(&run->rank[s]);
    for (int c = 0; run->chan && c < run->P * run->P; c++)
        for (PrNode *nd = run->chan[c].head, *nx; nd; nd = nx) {
            nx = nd->next;
            free(nd->payload);
            free(nd);
        }
    if (o->workload == PR_MLP)
        pr_mlp_teardown(run);
    pthread_mutex_destroy(&run->mu);
    pthread_cond_destroy(&run->cv);
    free(th);
    free(run->rank);
    free(run->chan);
    free(run->mb_loss);
    free(run);
    if (res == &dummy)
        pr_result_free(res);
    return rc;
}
