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

/* How long a waiter spins on the awaited state before it blocks on a condition
 * variable (when the ranks do not outnumber the CPUs). A wake-up from a blocked wait
 * costs a futex call on each side and a context switch (tens of microseconds on a busy
 * machine); most waits of a pipeline with short ops end sooner than this. A receiver
 * adapts its own budget between SPIN_MIN_MS and SPIN_MS, as glibc's adaptive mutexes
 * do: it doubles after a wait that ended while spinning and halves after one that had
 * to block, so that on a machine whose CPUs are taken by others (where the awaited rank
 * is not running and spinning only delays it) the waits become plain blocking ones. */
#define SPIN_MS 0.05
#define SPIN_MIN_MS 0.001

static _Thread_local int tl_rank = -1;
static _Thread_local const PrOp *tl_op;
static _Thread_local uint32_t tl_opi;

const PrTransport *pr_transport;

/* The run in progress, for the fatal-signal handler's flight recorder. */
static PrRun *volatile g_run;

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

double pr_peer_silence_ms(const PrRun *run)
{
    double s = PR_PEER_SILENCE_S;
    if (run->opt.timeout_s < s)
        s = run->opt.timeout_s;
    return s * 1e3;
}

double pr_spin_budget_ms(const PrRun *run)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* a spinning waiter would take the CPU the rank it waits for needs */
    return ncpu >= run->P ? SPIN_MS : 0.0;
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
        PrRank *r = &run->rank[s];
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_lock(&r->bell_mu);
        pthread_cond_broadcast(&r->bell_cv);
        pthread_mutex_unlock(&r->bell_mu);
    }
}

/* Blocks on cv (mutex mu held) until it is signalled or until deadline (ms on the
 * monotonic clock). Not a sleep: every state change a waiter waits for signals cv. */
static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline)
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

/* ---- liveness of the rank threads (peer failure) ------------------------------------ */

/* What a waiter knows about a rank it watches. */
typedef struct PrLive {
    int s;                 /* the watched rank */
    double seen;           /* ms: the last sign of life */
    struct timespec cpu;   /* its thread's CPU time then */
} Live;

static void live_start(Live *l, int s, double now)
{
    memset(l, 0, sizeof *l);
    l->s = s;
    l->seen = now;
}

/* Fails the run naming rank l->s when its thread has ended (killed) or has used no CPU
 * outside a runtime wait for pr_peer_silence_ms() (stopped or hung): a healthy rank
 * either computes or waits in the runtime. watcher: the rank that noticed (-1: the
 * main thread). Returns 0 or -1. */
static int live_check(PrRun *run, Live *l, int watcher, double now)
{
    PrRank *p = &run->rank[l->s];
    char by[40] = "the main thread";
    if (watcher >= 0)
        snprintf(by, sizeof by, "rank %d", watcher);
    int64_t op = atomic_load(&p->nring) ? (int64_t)atomic_load(&p->cur_op) : -1;
    if (atomic_load(&p->gone)) {
        pr_fail(run, l->s, op, "peer failure: the rank's thread is gone (killed), noticed by %s",
                by);
        return -1;
    }
    struct timespec ts;
    if (atomic_load(&p->in_wait) || !atomic_load(&p->started) ||
        clock_gettime(p->cpu, &ts) != 0) {
        l->seen = now;
        return 0;
    }
    if (ts.tv_sec != l->cpu.tv_sec || ts.tv_nsec != l->cpu.tv_nsec) {
        l->cpu = ts;
        l->seen = now;
        return 0;
    }
    double silence = pr_peer_silence_ms(run);
    if (now - l->seen < silence)
        return 0;
    pr_fail(run, l->s, op, "peer failure: no progress for %.1f s %s (stopped or hung), "
            "noticed by %s", silence / 1e3,
            atomic_load(&p->running) ? "in this op" : "after this op", by);
    return -1;
}

/* ---- the flight recorder ------------------------------------------------------------- */

static void ring_start(PrRank *r, uint32_t i, double t0)
{
    unsigned n = atomic_load_explicit(&r->nring, memory_order_relaxed);
    PrRingEntry *e = &r->ring[n % PR_RING];
    e->op = i;
    e->iter = r->iter;
    e->t0 = t0 - r->run->t_start;
    e->t1 = 0;
    atomic_store_explicit(&r->nring, n + 1, memory_order_release);
}

static void ring_end(PrRank *r, double t1)
{
    unsigned n = atomic_load_explicit(&r->nring, memory_order_relaxed);
    if (n)
        r->ring[(n - 1) % PR_RING].t1 = t1 - r->run->t_start;
}

void pr_flight_print(const PrRun *run, int s, FILE *f)
{
    const PrRank *r = &run->rank[s];
    unsigned n = atomic_load(&r->nring), k = n < PR_RING ? n : PR_RING;
    if (!k)
        return;
    fprintf(f, "piperun: rank %d, its last %u ops (oldest first):\n", s, k);
    for (unsigned j = n - k; j < n; j++) {
        const PrRingEntry *e = &r->ring[j % PR_RING];
        char nm[32] = "?";
        if (e->op < r->d->nops)
            pr_op_name(nm, sizeof nm, &r->d->ops[e->op]);
        if (e->t1 > 0)
            fprintf(f, "  iter %d  #%-5u %-8s %10.3f ms .. %10.3f ms\n", e->iter + 1, e->op,
                    nm, e->t0, e->t1);
        else
            fprintf(f, "  iter %d  #%-5u %-8s %10.3f ms .. (not finished)\n", e->iter + 1,
                    e->op, nm, e->t0);
    }
}

/* ---- faults (testing aid) ------------------------------------------------------ */

enum { FAULT_NONE, FAULT_FAIL, FAULT_SEGV, FAULT_ALLOC, FAULT_DROP, FAULT_STOP, FAULT_DIE };

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
            : !strcmp(what, "stop")  ? FAULT_STOP
            : !strcmp(what, "die")   ? FAULT_DIE
                                     : FAULT_NONE;
    if (w == FAULT_NONE) {
        fprintf(stderr, "piperun: ignoring PIPERUN_FAULT=%s (what: fail segv alloc drop stop "
                "die)\n", f);
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
    pr_flight_write_signal(2);
    _exit(1);
}

/* One rank's flight recorder, formatted with put_* only. */
static void flight_write_rank(int fd, const PrRun *run, int s)
{
    static const char *const kn[PR_NKINDS] = {"F", "B", "W", "R", "SO", "SI", "OG", "LW"};
    const PrRank *r = &run->rank[s];
    unsigned n = atomic_load(&r->nring), k = n < PR_RING ? n : PR_RING;
    if (!k)
        return;
    char buf[256];
    size_t len = 0;
    put_str(buf, &len, "piperun: rank ");
    put_int(buf, &len, s);
    put_str(buf, &len, ", its last ops (oldest first; iteration, #op, op, start and end us):\n");
    ssize_t w = write(fd, buf, len);
    for (unsigned j = n - k; j < n; j++) {
        const PrRingEntry *e = &r->ring[j % PR_RING];
        len = 0;
        put_str(buf, &len, "  iter ");
        put_int(buf, &len, e->iter + 1);
        put_str(buf, &len, "  #");
        put_int(buf, &len, (long)e->op);
        put_str(buf, &len, " ");
        if (e->op < r->d->nops) {
            const PrOp *o = &r->d->ops[e->op];
            put_str(buf, &len, o->kind < PR_NKINDS ? kn[o->kind] : "?");
            put_int(buf, &len, o->mb);
            if (o->chunk) {
                put_str(buf, &len, ".");
                put_int(buf, &len, o->chunk);
            }
        }
        put_str(buf, &len, "  ");
        put_int(buf, &len, (long)(e->t0 * 1e3));
        put_str(buf, &len, " .. ");
        if (e->t1 > 0)
            put_int(buf, &len, (long)(e->t1 * 1e3));
        else
            put_str(buf, &len, "(not finished)");
        put_str(buf, &len, "\n");
        w = write(fd, buf, len);
    }
    (void)w;
}

void pr_flight_write_signal(int fd)
{
    const PrRun *run = g_run;
    if (!run || !run->rank)
        return;
    if (tl_rank >= 0 && tl_rank < run->ranks_ready) {
        flight_write_rank(fd, run, tl_rank);
        return;
    }
    for (int s = 0; s < run->ranks_ready; s++)
        flight_write_rank(fd, run, s);
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
    if (pr_transport && pr_transport->remote(peer))
        return pr_transport->send(r, peer, msg, payload);
    PrNode *nd = malloc(sizeof *nd);
    if (!nd) {
        free(payload);
        pr_fail(run, r->id, -1, "out of memory sending message %u", msg);
        return -1;
    }
    *nd = (PrNode){msg, payload, pr_now_ms() - run->t_start, NULL};
    pr_chan_put(run, r->id, peer, nd);
    return 0;
}

void pr_chan_put(PrRun *run, int src, int dst, PrNode *nd)
{
    PrChan *c = &run->chan[(size_t)src * (size_t)run->P + (size_t)dst];
    atomic_store_explicit(&nd->next, NULL, memory_order_relaxed);
    atomic_store_explicit(&c->tail->next, nd, memory_order_release);
    c->tail = nd;
    atomic_fetch_add(&c->count, 1);
    /* Pairs with the receiver's store to sleeping before its last look at count (both
     * sequentially consistent): either it sees the node or this sees it sleeping. */
    PrRank *d = &run->rank[dst];
    if (atomic_load(&d->sleeping)) {
        /* taking the mutex orders this after the receiver's wait began; signalling
         * after releasing it spares the woken receiver a second wait, on the mutex */
        pthread_mutex_lock(&d->bell_mu);
        pthread_mutex_unlock(&d->bell_mu);
        pthread_cond_signal(&d->bell_cv);
    }
}

/* The watchdog of a receive fired on rank r: reports the rank whose receive deadline
 * passed first (when several ranks wait on each other, the one that waited longest,
 * whichever thread the scheduler woke first). */
static void watchdog_fire(PrRun *run, PrRank *r, double now)
{
    PrRank *w = r;
    long long best = atomic_load(&r->wd_deadline_us);
    for (int s = 0; s < run->P; s++) {
        long long d = atomic_load(&run->rank[s].wd_deadline_us);
        if (d > 0 && d < best && d <= (long long)(now * 1e3)) {
            best = d;
            w = &run->rank[s];
        }
    }
    uint32_t msg = atomic_load(&w->wd_msg);
    const PrMsg *m = &run->prog->msgs[msg];
    static const char *const kn[PR_NKINDS] = {"F", "B", "W", "R", "SO", "SI", "OG", "LW"};
    pr_fail(run, w->id, (int64_t)atomic_load(&w->wd_op),
            "watchdog: stuck %.1f s in the receive of message %u (%s%d of virtual "
            "stage %d on rank %d)",
            run->opt.timeout_s, msg, m->from_kind < PR_NKINDS ? kn[m->from_kind] : "?",
            m->from_mb, m->from_v, m->src);
}

/* Waits until channel c holds a message, the run fails (-1) or the watchdog fires
 * (-1, pr_fail called): spins up to run->spin_ms, then blocks on the rank's bell,
 * checking every PR_LIVE_CHECK_S that the sending rank is alive. */
static int chan_wait(PrRank *r, PrChan *c, int peer, uint32_t msg)
{
    PrRun *run = r->run;
    double now = pr_now_ms(), spin_end = now + r->spin_ms;
    for (unsigned k = 1; !atomic_load(&c->count) && !atomic_load(&run->failed); k++) {
        if (!(k & 15) && pr_now_ms() > spin_end)
            break;
        cpu_relax();
    }
    if (atomic_load(&c->count) || atomic_load(&run->failed)) {
        if (r->spin_ms < run->spin_ms)
            r->spin_ms = r->spin_ms * 2 < run->spin_ms ? r->spin_ms * 2 : run->spin_ms;
        return atomic_load(&run->failed) ? -1 : 0;
    }
    if (r->spin_ms > SPIN_MIN_MS)
        r->spin_ms /= 2;
    now = pr_now_ms();
    double deadline = now + run->opt.timeout_s * 1e3;
    double next_live = now + PR_LIVE_CHECK_S * 1e3;
    Live l;
    live_start(&l, peer, now);
    atomic_store(&r->wd_msg, msg);
    atomic_store(&r->wd_op, r->next_op);
    atomic_store(&r->wd_deadline_us, (long long)(deadline * 1e3));
    atomic_store(&r->in_wait, 1);
    int rc = 0;
    for (;;) {
        pthread_mutex_lock(&r->bell_mu);
        atomic_store(&r->sleeping, 1);
        if (!atomic_load(&c->count) && !atomic_load(&run->failed))
            wait_until(&r->bell_cv, &r->bell_mu, next_live < deadline ? next_live : deadline);
        atomic_store(&r->sleeping, 0);
        pthread_mutex_unlock(&r->bell_mu);
        if (atomic_load(&c->count))
            break;
        if (atomic_load(&run->failed)) {
            rc = -1;
            break;
        }
        now = pr_now_ms();
        if (now > deadline) {
            watchdog_fire(run, r, now);
            rc = -1;
            break;
        }
        if (now >= next_live) {
            if (live_check(run, &l, r->id, now) != 0) {
                rc = -1;
                break;
            }
            next_live = now + PR_LIVE_CHECK_S * 1e3;
        }
    }
    atomic_store(&r->in_wait, 0);
    atomic_store(&r->wd_deadline_us, 0);
    return rc;
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
    PrNode *nd, remote;   /* the message, moved out of its queue node */
    if (pr_transport && pr_transport->remote(peer)) {
        remote = (PrNode){msg, NULL, 0, NULL};
        if (pr_transport->recv(r, peer, msg, &remote.payload, &remote.t_send) != 0)
            return -1;
        nd = &remote;
    } else {
        PrChan *c = &run->chan[(size_t)peer * (size_t)run->P + (size_t)r->id];
        if (chan_wait(r, c, peer, msg) != 0)
            return -1;
        /* the successor of the dummy head becomes the new dummy; its message moves out */
        PrNode *next = atomic_load_explicit(&c->head->next, memory_order_acquire);
        if (c->head != &c->stub)
            free(c->head);
        c->head = next;
        atomic_fetch_sub(&c->count, 1);
        remote = (PrNode){next->msg, next->payload, next->t_send, NULL};
        next->payload = NULL;
        nd = &remote;
    }
    if (nd->msg != msg) {
        free(nd->payload);
        uint32_t got = nd->msg;
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
    double t0 = pr_now_ms();
    if (o->nso_before) {
        /* An allocating copy (SI, LW) waits for every SO listed before it (an SI's own SO
         * among them): memory order (compiler/opsem.h). */
        double deadline = t0 + run->opt.timeout_s * 1e3;
        pthread_mutex_lock(&r->mu);
        while (r->q[0].done < o->nso_before && !atomic_load(&run->failed)) {
            if (pr_now_ms() > deadline) {
                pthread_mutex_unlock(&r->mu);
                pr_fail(run, r->id, i, "watchdog: %s stuck %.1f s waiting for an SO listed "
                        "before it", o->kind == PR_SI ? "SI" : "LW", run->opt.timeout_s);
                return -1;
            }
            wait_until(&r->cv, &r->mu, deadline);
        }
        pthread_mutex_unlock(&r->mu);
        if (atomic_load(&run->failed))
            return -1;
        t0 = pr_now_ms();
    }
    if (o->kind == PR_OG || o->kind == PR_LW)
        return state_op(r, i);
    int w = run->opt.workload;
    size_t k = vm(run, o->vstage, o->mb);
    int64_t bytes = o->held[w];
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
            pthread_cond_wait(&r->cv, &r->mu);
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
    atomic_store(&r->in_wait, 1);
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
            atomic_store(&r->in_wait, 0);
            pr_fail(run, r->id, all ? -1 : (int64_t)op,
                    "watchdog: stuck %.1f s waiting for %s", run->opt.timeout_s,
                    all ? "the copy streams at the end of the iteration"
                    : si_k != SIZE_MAX ? "the swap-in of its activations"
                                       : "earlier swap-outs");
            return -1;
        }
        wait_until(&r->cv, &r->mu, deadline);
    }
    pthread_mutex_unlock(&r->mu);
    atomic_store(&r->in_wait, 0);
    return atomic_load(&run->failed) ? -1 : 0;
}

int pr_drain_copies(PrRank *r)
{
    return wait_copies(r, 0, 0, SIZE_MAX, 1);
}

/* Waits until this iteration's LW of virtual stage v has finished (F of an offloaded
 * chunk); fails after the timeout. */
static int wait_lw(PrRank *r, uint32_t op, int32_t v)
{
    PrRun *run = r->run;
    if (v < 0 || v >= run->PV)
        return 0;
    double deadline = pr_now_ms() + run->opt.timeout_s * 1e3;
    atomic_store(&r->in_wait, 1);
    pthread_mutex_lock(&r->mu);
    while (r->lw_done[v] != (uint32_t)r->iter + 1 && !atomic_load(&run->failed)) {
        if (pr_now_ms() > deadline) {
            pthread_mutex_unlock(&r->mu);
            atomic_store(&r->in_wait, 0);
            pr_fail(run, r->id, (int64_t)op, "watchdog: stuck %.1f s waiting for the LW of its chunk",
                    run->opt.timeout_s);
            return -1;
        }
        wait_until(&r->cv, &r->mu, deadline);
    }
    pthread_mutex_unlock(&r->mu);
    atomic_store(&r->in_wait, 0);
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
    atomic_store_explicit(&r->running, 1, memory_order_relaxed);
    double t_issue = pr_now_ms();
    ring_start(r, i, t_issue);
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
        case FAULT_STOP:
            /* like a stopped process: no CPU, no progress, until the run is aborted */
            pthread_mutex_lock(&r->bell_mu);
            while (!atomic_load(&run->failed))
                pthread_cond_wait(&r->bell_cv, &r->bell_mu);
            pthread_mutex_unlock(&r->bell_mu);
            return -1;
        case FAULT_DIE:
            /* like a killed process: the thread ends without a word */
            pthread_exit(NULL);
        }
    }

    /* The waits the simulator assumes, as the compiler wrote them from its op table:
     * the SOs listed before an allocating op, the op's SI, its chunk's LW. */
    bool needs_si = (o->flags & PR_WAIT_SI) != 0;
    if (o->kind == PR_SO || o->kind == PR_SI || o->kind == PR_OG || o->kind == PR_LW) {
        int dir = o->kind == PR_SO || o->kind == PR_OG ? 0 : 1;
        pthread_mutex_lock(&r->mu);
        r->q[dir].op[r->q[dir].tail++] = i;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        tl_op = NULL;
        r->next_op = i + 1;
        ring_end(r, t_issue);
        atomic_store_explicit(&r->running, 0, memory_order_relaxed);
        return 0;
    }
    bool waits = o->nso_before || needs_si || (o->flags & PR_HAS_LW);
    if (o->nso_before || needs_si)
        if (wait_copies(r, i, o->nso_before, needs_si ? k : SIZE_MAX, 0))
            return -1;
    if ((o->flags & PR_HAS_LW) && wait_lw(r, i, o->vstage))
        return -1;

    double t0 = waits ? pr_now_ms() : t_issue;
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
    ring_end(r, t1);
    atomic_store_explicit(&r->running, 0, memory_order_relaxed);
    tl_op = NULL;
    return rc;
}

/* ---- barrier between the main thread and the ranks ---------------------------------- */

/* Every rank (me) and the main thread (me = NULL) call it; returns -1 when the run
 * failed. Waiters block on run->cv at once: three barriers per iteration cost a few
 * wake-ups, while a thread spinning there would take a CPU from a rank that computes
 * (the stand-in ranks of an MPI process arrive as the iteration starts). The main
 * thread checks every PR_LIVE_CHECK_S that each rank is alive (a rank that dies or
 * stops while no other rank waits for it). */
static int barrier(PrRun *run, PrRank *me)
{
    pthread_mutex_lock(&run->mu);
    int gen = atomic_load(&run->bar_seq);
    if (++run->bar_count == run->P + 1) {
        run->bar_count = 0;
        atomic_store(&run->bar_seq, gen + 1);
        pthread_cond_broadcast(&run->cv);
        pthread_mutex_unlock(&run->mu);
        return atomic_load(&run->failed) ? -1 : 0;
    }
    pthread_mutex_unlock(&run->mu);
    if (me)
        atomic_store(&me->in_wait, 1);
    double now = pr_now_ms();
    if (!me)
        for (int s = 0; s < run->P; s++)
            live_start(&run->live[s], s, now);
    pthread_mutex_lock(&run->mu);
    while (atomic_load(&run->bar_seq) == gen && !atomic_load(&run->failed)) {
        if (me) {
            pthread_cond_wait(&run->cv, &run->mu);
            continue;
        }
        wait_until(&run->cv, &run->mu, pr_now_ms() + PR_LIVE_CHECK_S * 1e3);
        if (atomic_load(&run->bar_seq) != gen || atomic_load(&run->failed))
            break;
        pthread_mutex_unlock(&run->mu);
        now = pr_now_ms();
        for (int s = 0; s < run->P; s++)
            if (live_check(run, &run->live[s], -1, now) != 0)
                break;
        pthread_mutex_lock(&run->mu);
    }
    pthread_mutex_unlock(&run->mu);
    if (me)
        atomic_store(&me->in_wait, 0);
    return atomic_load(&run->failed) ? -1 : 0;
}

/* The thread of a rank that ends early (PIPERUN_FAULT die, as a killed process would):
 * marked gone for the peers' liveness checks. */
static void rank_gone(void *arg)
{
    PrRank *r = arg;
    atomic_store(&r->gone, 1);
}

static void rank_iterations(PrRank *r)
{
    PrRun *run = r->run;
    for (int it = 0; it < run->opt.iters; it++) {
        if (barrier(run, r)) /* start of iteration it */
            return;
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
        if (barrier(run, r)) /* end of iteration it */
            return;
        if (barrier(run, r)) /* the main thread has stepped the optimizer */
            return;
    }
}

static void *rank_main(void *arg)
{
    PrRank *r = arg;
    tl_rank = r->id;
    if (pthread_getcpuclockid(pthread_self(), &r->cpu) == 0)
        atomic_store(&r->started, 1);
    pthread_cleanup_push(rank_gone, r);
    rank_iterations(r);
    pthread_cleanup_pop(0);
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
    pthread_mutex_destroy(&r->bell_mu);
    pthread_cond_destroy(&r->bell_cv);
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
    for (int c = 0; run->chan && c < run->P * run->P; c++)
        run->chan[c].head = run->chan[c].tail = &run->chan[c].stub;
    run->live = calloc((size_t)run->P, sizeof *run->live);
    run->spin_ms = pr_spin_budget_ms(run);
    res->iters = o->iters;
    res->loss = calloc((size_t)o->iters, sizeof(double));
    res->iter_ms = calloc((size_t)o->iters, sizeof(double));
    res->busy_ms = calloc((size_t)run->P, sizeof(double));
    res->peak_arena = calloc((size_t)run->P, sizeof(int64_t));
    run->mb_loss = calloc((size_t)run->M, sizeof(double));
    int started = 0, ranks_init = 0;
    pthread_t *th = calloc((size_t)run->P, sizeof *th);
    if (!run->rank || !run->chan || !run->live || !res->loss || !res->iter_ms || !res->busy_ms ||
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
        pthread_mutex_init(&r->bell_mu, NULL);
        pthread_cond_init(&r->bell_cv, NULL);
        atomic_init(&r->cur_op, 0);
        r->spin_ms = run->spin_ms;
    }
    ranks_init = run->ranks_ready = run->P;
    parse_fault(run);
    if (o->workload == PR_MLP && pr_mlp_setup(run) != 0)
        goto done;
    for (int s = 0; s < run->P; s++)
        if (rank_init(run, s) != 0)
            goto done;
    run->t_start = pr_now_ms();
    g_run = run;
    for (; started < run->P; started++)
        if (pthread_create(&th[started], NULL, rank_main, &run->rank[started]) != 0) {
            pr_fail(run, -1, -1, "cannot start rank thread %d", started);
            goto done;
        }
    double last_line = -1e300; /* when the last progress line was printed, ms */
    for (int it = 0; it < o->iters; it++) {
        if (o->workload == PR_MLP)
            pr_mlp_zero(run);
        if (it == 1) /* profile from the second iteration on: the first warms up */
            for (int s = 0; s < run->P; s++) {
                memset(run->rank[s].kind_ms, 0, (size_t)run->PV * PR_NKINDS * sizeof(double));
                memset(run->rank[s].kind_n, 0, (size_t)run->PV * PR_NKINDS * sizeof(uint32_t));
            }
        double t0 = pr_now_ms();
        if (barrier(run, NULL))
            break;
        if (barrier(run, NULL))
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
        /* Progress: the first and the last iteration, and at most one line a second
         * between them. */
        double now = pr_now_ms();
        if (!o->quiet && !o->json && !o->profile &&
            (it == 0 || it == o->iters - 1 || now - last_line >= 1000.0)) {
            last_line = now;
            if (o->workload == PR_MLP)
                printf("iter %d: loss %.4f  time %.3f ms\n", it + 1, res->loss[it],
                       res->iter_ms[it]);
            else
                printf("iter %d: time %.3f ms\n", it + 1, res->iter_ms[it]);
            fflush(stdout);
        }
        if (barrier(run, NULL))
            break;
    }
done:
    res->ref_ms = -1;
    if (o->reference && o->workload == PR_MLP && !atomic_load(&run->failed) &&
        (run->model || run->tf))
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
    if (rc) {
        snprintf(res->error, sizeof res->error, "%s", run->error);
        for (int s = 0; s < ranks_init; s++)
            pr_flight_print(run, s, stderr);
    }
    g_run = NULL;
    for (int s = 0; s < ranks_init; s++)
        rank_free(&run->rank[s]);
    for (int c = 0; run->chan && c < run->P * run->P; c++) {
        PrChan *ch = &run->chan[c];
        for (PrNode *nd = ch->head, *nx; nd; nd = nx) {
            nx = atomic_load(&nd->next);
            free(nd->payload);
            if (nd != &ch->stub)
                free(nd);
        }
    }
    if (o->workload == PR_MLP)
        pr_mlp_teardown(run);
    pthread_mutex_destroy(&run->mu);
    pthread_cond_destroy(&run->cv);
    free(th);
    free(run->rank);
    free(run->chan);
    free(run->live);
    free(run->mb_loss);
    free(run);
    if (res == &dummy)
        pr_result_free(res);
    return rc;
}
