/* cpu.c - the CPU runtime core: rank threads, copy threads for SO/SI, messages,
 * failure handling and the watchdog, iterations and the summary (piperun.h,
 * docs/runtime.md). */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET (Linux): cpu_rank_start */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "workload.h"

/* How long a waiter spins on the awaited state before it blocks on a condition
 * variable (when the ranks do not outnumber the CPUs). A wake-up from a blocked wait
 * costs a futex call on each side and a context switch (tens of microseconds on a busy
 * machine, and the woken thread's lateness delays the next hand-off the other way); most
 * waits of a pipeline with short ops end sooner than this. A receiver adapts its own
 * budget between SPIN_MIN_MS and SPIN_MS from how long its waits really took (from the
 * start of the wait to the message's send time): it doubles after a wait that a spin of
 * the full budget would have caught, whether or not this one blocked, and halves after
 * one that took longer. Halving after every wait that blocked (glibc's adaptive mutexes'
 * rule) let one late wake-up start a cascade: the woken rank sent late, so the other
 * rank's spin ran out too, halved its budget, blocked, and so on until both blocked at
 * every hand-off (2-3x the iteration time, docs/performance.md). On a machine whose CPUs
 * are taken by others the awaited rank is often not running, its messages come later
 * than SPIN_MS, and the waits become plain blocking ones. */
#define SPIN_MS 0.1
#define SPIN_MIN_MS 0.001

double pr_spin_budget_ms(const PrRun *run)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* a spinning waiter would take the CPU the rank it waits for needs */
    int ranks = run->P * (run->dp_group ? run->D : 1); /* the replicas' threads too */
    return ncpu >= ranks ? SPIN_MS : 0.0;
}

/* ---- messages -------------------------------------------------------------------- */

int pr_send(PrRank *r, int32_t peer, uint32_t msg)
{
    PrRun *run = r->run;
    if (pr_msg_check(r, peer, msg, true) != 0)
        return -1;
    if (r->dropping)
        return 0;
    void *payload = pr_io_send(r, &run->prog->msgs[msg]);
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
    PrChan *c = &run->cpu_run->chan[(size_t)src * (size_t)run->P + (size_t)dst];
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
    pr_fail(run, w->id, (int64_t)atomic_load(&w->wd_op),
            "watchdog: stuck %.1f s in the receive of message %u (%s%d of virtual "
            "stage %d on rank %d)",
            run->opt.timeout_s, msg, pr_kind_name(m->from_kind),
            m->from_mb, m->from_v, m->src);
}

/* Whether the rank a spinning waiter waits for is on a CPU: its thread's CPU-time clock
 * read every SPIN_WATCH_MS of the spin. A producer that got less than half of that
 * time (another process holds its CPU, or it waits itself) will not send within the
 * spin, which would only keep a CPU from it: the waiter blocks at once. */
#define SPIN_WATCH_MS 0.01
typedef struct PrSpinWatch {
    const PrRank *p;   /* NULL: not watched (its thread has not started) */
    double wall;       /* ms, pr_now_ms of the last reading */
    double cpu;        /* ms of CPU time of p's thread then */
} PrSpinWatch;

static double thread_cpu_ms(const PrRank *p)
{
    struct timespec ts;
    if (clock_gettime(p->cpu, &ts) != 0)
        return -1;
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void spin_watch_start(PrSpinWatch *w, const PrRank *p, double now)
{
    w->p = atomic_load(&p->started) ? p : NULL;
    w->wall = now;
    w->cpu = w->p ? thread_cpu_ms(p) : 0;
    if (w->cpu < 0)
        w->p = NULL;
}

/* false when the watched rank used under half the CPU time of the wall time since
 * the last reading (at least SPIN_WATCH_MS ago). */
static bool spin_watch_ok(PrSpinWatch *w, double now)
{
    if (!w->p || now - w->wall < SPIN_WATCH_MS)
        return true;
    double cpu = thread_cpu_ms(w->p);
    if (cpu < 0)
        return true;
    bool ran = cpu - w->cpu >= 0.5 * (now - w->wall);
    w->wall = now;
    w->cpu = cpu;
    return ran;
}

/* Adapts rank r's spin budget after a wait that began at t_wait (ms) for a message
 * sent at t_sent (ms): doubles it (up to run->spin_ms) when a spin of the full budget
 * would have caught the message, halves it (down to SPIN_MIN_MS) otherwise. */
static void spin_adapt(PrRank *r, double t_wait, double t_sent)
{
    double cap = r->run->spin_ms, waited = t_sent - t_wait;
    if (waited <= cap)
        r->spin_ms = r->spin_ms * 2 < cap ? r->spin_ms * 2 : cap;
    else if (r->spin_ms > SPIN_MIN_MS)
        r->spin_ms /= 2;
}

/* The send time of the oldest message on channel c (which holds one), ms on
 * pr_now_ms's clock. */
static double chan_sent_ms(const PrRun *run, const PrChan *c)
{
    const PrNode *nd = atomic_load_explicit(&c->head->next, memory_order_acquire);
    return nd ? run->t_start + nd->t_send : pr_now_ms();
}

/* Waits until channel c holds a message, the run fails (-1) or the watchdog fires
 * (-1, pr_fail called): spins up to r->spin_ms, then blocks on the rank's bell,
 * checking every PR_LIVE_CHECK_S that the sending rank is alive; adapts the budget
 * (spin_adapt). */
static int chan_wait(PrRank *r, PrChan *c, int peer, uint32_t msg)
{
    PrRun *run = r->run;
    double now = pr_now_ms(), t_wait = now, spin_end = now + r->spin_ms;
    PrSpinWatch sw;
    spin_watch_start(&sw, &run->rank[peer], now);
    for (unsigned k = 1; !atomic_load(&c->count) && !atomic_load(&run->failed); k++) {
        if (!(k & 15) && ((now = pr_now_ms()) > spin_end || !spin_watch_ok(&sw, now)))
            break;
        pr_cpu_relax();
    }
    if (atomic_load(&run->failed))
        return -1;
    if (atomic_load(&c->count)) {
        spin_adapt(r, t_wait, t_wait);
        return 0;
    }
    now = pr_now_ms();
    double deadline = now + run->opt.timeout_s * 1e3;
    double next_live = now + PR_LIVE_CHECK_S * 1e3;
    PrLive l;
    pr_live_start(&l, peer, now);
    atomic_store(&r->wd_msg, msg);
    atomic_store(&r->wd_op, r->next_op);
    atomic_store(&r->wd_deadline_us, (long long)(deadline * 1e3));
    atomic_store(&r->in_wait, 1);
    int rc = 0;
    for (;;) {
        pthread_mutex_lock(&r->bell_mu);
        atomic_store(&r->sleeping, 1);
        if (!atomic_load(&c->count) && !atomic_load(&run->failed))
            pr_cond_wait_until(&r->bell_cv, &r->bell_mu, next_live < deadline ? next_live : deadline);
        atomic_store(&r->sleeping, 0);
        pthread_mutex_unlock(&r->bell_mu);
        if (atomic_load(&c->count)) {
            spin_adapt(r, t_wait, chan_sent_ms(run, c));
            break;
        }
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
            if (pr_live_check(run, &l, r->id, now) != 0) {
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
    if (pr_msg_check(r, peer, msg, false) != 0)
        return -1;
    const PrMsg *m = &run->prog->msgs[msg];
    PrNode *nd, remote;   /* the message, moved out of its queue node */
    if (pr_transport && pr_transport->remote(peer)) {
        remote = (PrNode){msg, NULL, 0, NULL};
        if (pr_transport->recv(r, peer, msg, &remote.payload, &remote.t_send) != 0)
            return -1;
        nd = &remote;
    } else {
        PrChan *c = &run->cpu_run->chan[(size_t)peer * (size_t)run->P + (size_t)r->id];
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
    pr_io_recv(r, m, nd->payload);
    /* The cost model's p2p time, replayed by the synthetic workload. */
    if (run->wl->replay && r->d->p2p_ms > 0) {
        double ready = run->t_start + nd->t_send + r->d->p2p_ms * run->opt.time_scale;
        double now = pr_now_ms();
        if (ready > now)
            pr_spin_ms(ready - now);
    }
    return 0;
}

/* ---- copy threads ------------------------------------------------------------------ */

/* ---- shared host links of the synthetic replay (docs/runtime.md) ------------------ */

/* One direction of a host link shared by PrProgram.host_link_ranks ranks: the
 * transfers in flight share it equally (processor sharing, the simulator's model:
 * docs/simulator.md "Shared host links"). vt is the virtual clock: the full-bandwidth
 * ms each transfer in flight has been given; it advances at 1/n of the wall clock while
 * n transfers are in flight, and a transfer of w ms that joined at vt0 ends when vt
 * reaches vt0 + w. */
typedef struct PrLinkDir {
    double vt;       /* ms of full-bandwidth transfer per transfer in flight */
    double t_last;   /* ms, wall clock of vt's last update */
    int n;           /* transfers in flight */
} PrLinkDir;

struct PrLink {
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* a transfer left: the others' ends come earlier */
    PrLinkDir dir[2];        /* 0 device to host (SO, OG), 1 host to device (SI, LW) */
};

static void link_advance(PrLinkDir *d, double now)
{
    if (d->n > 0)
        d->vt += (now - d->t_last) / d->n;
    d->t_last = now;
}

/* A transfer on a link: started by link_join, waited for by link_leave. */
typedef struct PrXfer {
    PrLink *l;          /* NULL: the rank's own link */
    int dir;
    double target;      /* shared: the link's vt at which it ends; own: its end, ms */
} PrXfer;

/* Starts a transfer of w ms at full bandwidth on direction dir of rank r's link (0 device
 * to host, 1 host to device), sharing it with the transfers in flight there. The caller
 * may copy its bytes before link_leave: that time is part of the transfer's. */
static PrXfer link_join(PrRank *r, int dir, double w)
{
    PrRun *run = r->run;
    int n = run->prog->host_link_ranks;
    if (w < 0)
        w = 0;
    if (!run->cpu_run->link || n < 2)
        return (PrXfer){NULL, dir, pr_now_ms() + w};
    PrXfer x = {&run->cpu_run->link[r->id / n], dir, 0};
    PrLinkDir *d = &x.l->dir[dir];
    pthread_mutex_lock(&x.l->mu);
    link_advance(d, pr_now_ms());
    x.target = d->vt + w;
    d->n++;
    pthread_mutex_unlock(&x.l->mu);
    return x;
}

/* Holds the calling copy thread until transfer x has had its time. */
static void link_leave(PrRun *run, const PrXfer *x)
{
    if (!x->l) {
        double left = x->target - pr_now_ms();
        if (left > 0) {
            struct timespec ts = {(time_t)(left / 1e3), (long)(fmod(left, 1e3) * 1e6)};
            nanosleep(&ts, NULL);
        }
        return;
    }
    PrLinkDir *d = &x->l->dir[x->dir];
    pthread_mutex_lock(&x->l->mu);
    for (;;) {
        double now = pr_now_ms();
        link_advance(d, now);
        double left = x->target - d->vt;
        if (left <= 1e-6 || atomic_load(&run->failed))
            break;
        pr_cond_wait_until(&x->l->cv, &x->l->mu, now + left * d->n);
    }
    link_advance(d, pr_now_ms());
    d->n--;
    pthread_cond_broadcast(&x->l->cv);
    pthread_mutex_unlock(&x->l->mu);
}

/* The links of the synthetic replay when ranks share them; 0 or -1 (pr_fail called). */
static int links_init(PrRun *run)
{
    int n = run->prog->host_link_ranks;
    if (n < 2 || !run->wl->replay)
        return 0;
    PrCpuRun *cr = run->cpu_run;
    cr->nlinks = (run->P + n - 1) / n;
    cr->link = calloc((size_t)cr->nlinks, sizeof *cr->link);
    if (!cr->link) {
        cr->nlinks = 0;
        pr_fail(run, -1, -1, "out of memory");
        return -1;
    }
    for (int i = 0; i < cr->nlinks; i++) {
        pthread_mutex_init(&cr->link[i].mu, NULL);
        pthread_cond_init(&cr->link[i].cv, NULL);
    }
    return 0;
}

static void links_free(PrCpuRun *cr)
{
    for (int i = 0; i < cr->nlinks; i++) {
        pthread_mutex_destroy(&cr->link[i].mu);
        pthread_cond_destroy(&cr->link[i].cv);
    }
    free(cr->link);
    cr->link = NULL;
    cr->nlinks = 0;
}

typedef struct CopyArg {
    PrRank *r;
    int dir;   /* 0: SO, 1: SI */
} CopyArg;

static int grow_host(PrRank *r, size_t k, int64_t bytes)
{
    if (r->cpu_rank->host_cap[k] >= bytes)
        return 0;
    void *p = realloc(r->cpu_rank->host[k], (size_t)bytes);
    if (!p)
        return -1;
    r->cpu_rank->host[k] = p;
    r->cpu_rank->host_cap[k] = bytes;
    return 0;
}

/* Runs one OG or LW on the copy thread: a model workload moves the chunk's gradients
 * out and steps its host weights (OG) or copies them back (LW); without a state hook
 * (synthetic) the copy thread busy-waits the modelled time. */
static int state_op(PrRank *r, uint32_t i)
{
    PrRun *run = r->run;
    const PrOp *o = &r->d->ops[i];
    double t0 = pr_now_ms();
    int rc = 0;
    if (run->wl->state) {
        rc = run->wl->state(r, o);
    } else { /* the copy over the (perhaps shared) link, then OG's host step */
        PrXfer x = link_join(r, pr_copy_dir(o->kind), o->link_ms * run->opt.time_scale);
        link_leave(run, &x);
        pr_spin_ms((o->cost_ms - o->link_ms) * run->opt.time_scale);
    }
    if (rc)
        return -1;
    double t1 = pr_now_ms();
    PrSpan *sp = &r->span[(size_t)r->iter * r->d->nops + i];
    sp->t0 = t0 - run->t_start;
    sp->t1 = t1 - run->t_start;
    pthread_mutex_lock(&r->mu);
    if (o->kind == PR_LW && o->vstage >= 0 && o->vstage < run->PV)
        r->cpu_rank->lw_done[o->vstage] = (uint32_t)r->iter + 1;
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
         * among them): memory order (compiler/ir/opsem.h). */
        double deadline = t0 + run->opt.timeout_s * 1e3;
        pthread_mutex_lock(&r->mu);
        while (r->cpu_rank->q[0].done < o->nso_before && !atomic_load(&run->failed)) {
            if (pr_now_ms() > deadline) {
                pthread_mutex_unlock(&r->mu);
                pr_fail(run, r->id, i, "watchdog: %s stuck %.1f s waiting for an SO listed "
                        "before it", pr_kind_name(o->kind), run->opt.timeout_s);
                return -1;
            }
            pr_cond_wait_until(&r->cv, &r->mu, deadline);
        }
        pthread_mutex_unlock(&r->mu);
        if (atomic_load(&run->failed))
            return -1;
        t0 = pr_now_ms();
    }
    if (o->kind == PR_OG || o->kind == PR_LW)
        return state_op(r, i);
    int w = run->wl->plan;
    size_t k = pr_vm(run, o->vstage, o->mb);
    int64_t bytes = o->held[w];
    if (o->mem_alloc[w] > 0) { /* live bytes as the compiler's walk counts them */
        pthread_mutex_lock(&r->mu);
        r->live += o->mem_alloc[w];
        if (r->live > r->peak)
            r->peak = r->live;
        pthread_mutex_unlock(&r->mu);
    }
    PrHeldPiece pc[PR_PIECES];
    int np = bytes > 0 && (o->kind == PR_SO || o->kind == PR_SI) ? pr_held_pieces(run, o, w, pc)
                                                                 : 0;
    if (np < 0) {
        pr_fail(run, r->id, i, "the plan places no arena bytes for part of the region it moves");
        return -1;
    }
    if (np > 0 && o->kind == PR_SO && grow_host(r, k, bytes) != 0) {
        pr_fail(run, r->id, i, "out of host memory (%lld bytes) for the swap", (long long)bytes);
        return -1;
    }
    if (np > 0 && o->kind == PR_SI && r->cpu_rank->host_cap[k] < bytes) {
        pr_fail(run, r->id, i, "SI of %lld bytes without a matching SO", (long long)bytes);
        return -1;
    }
    /* the synthetic replay's time on the link starts before the copy and includes it */
    PrXfer x = {0};
    if (run->wl->replay)
        x = link_join(r, pr_copy_dir(o->kind), o->cost_ms * run->opt.time_scale);
    /* the held prefix [0, bytes) sits in the host buffer at region coordinates: SO
     * gathers it from the region's pieces, SI scatters it into the SI's */
    for (int j = 0; j < np; j++) {
        unsigned char *dev = r->arena + pc[j].at, *host = (unsigned char *)r->cpu_rank->host[k] + pc[j].lo;
        if (o->kind == PR_SO)
            memcpy(host, dev, (size_t)pc[j].n);
        else
            memcpy(dev, host, (size_t)pc[j].n);
    }
    if (run->wl->replay) /* the modelled time, the copy above included */
        link_leave(run, &x);
    double t1 = pr_now_ms();
    PrSpan *sp = &r->span[(size_t)r->iter * r->d->nops + i];
    sp->t0 = t0 - run->t_start;
    sp->t1 = t1 - run->t_start;
    pthread_mutex_lock(&r->mu);
    r->live -= o->mem_free[w];
    if (o->kind == PR_SI)
        r->cpu_rank->si_done[k] = (uint32_t)r->iter + 1;
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
    pr_tl_rank = r->id;
    PrCopyQ *q = &r->cpu_rank->q[dir];
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (q->head == q->tail && !r->stop && !atomic_load(&r->run->failed))
            pthread_cond_wait(&q->cv, &r->mu);
        if (r->stop || atomic_load(&r->run->failed)) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        uint32_t i = q->op[q->head];
        pthread_mutex_unlock(&r->mu);
        pr_tl_op = &r->d->ops[i];
        pr_tl_opi = i;
        int rc = copy_op(r, i);
        pr_tl_op = NULL;
        pthread_mutex_lock(&r->mu);
        q->head++;
        q->done++;
        pthread_cond_broadcast(&r->cv); /* the rank thread, an SI waiting for SOs */
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
    const PrCpuRank *c = r->cpu_rank;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        bool ok = c->q[0].done >= so_done;
        if (si_k != SIZE_MAX)
            ok = ok && c->si_done[si_k] == (uint32_t)r->iter + 1;
        if (all)
            ok = ok && c->q[0].head == c->q[0].tail && c->q[1].head == c->q[1].tail;
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
        pr_cond_wait_until(&r->cv, &r->mu, deadline);
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
    while (r->cpu_rank->lw_done[v] != (uint32_t)r->iter + 1 && !atomic_load(&run->failed)) {
        if (pr_now_ms() > deadline) {
            pthread_mutex_unlock(&r->mu);
            atomic_store(&r->in_wait, 0);
            pr_fail(run, r->id, (int64_t)op, "watchdog: stuck %.1f s waiting for the LW of its chunk",
                    run->opt.timeout_s);
            return -1;
        }
        pr_cond_wait_until(&r->cv, &r->mu, deadline);
    }
    pthread_mutex_unlock(&r->mu);
    atomic_store(&r->in_wait, 0);
    return atomic_load(&run->failed) ? -1 : 0;
}

/* ---- ops --------------------------------------------------------------------------- */

int pr_op(PrRank *r, uint32_t i)
{
    PrRun *run = r->run;
    if (pr_op_check(r, i) != 0)
        return -1;
    const PrOp *o = &r->d->ops[i];
    atomic_store_explicit(&r->running, 1, memory_order_relaxed);
    double t_issue = pr_now_ms();
    pr_ring_start(r, i, t_issue);
    pr_tl_op = o;
    pr_tl_opi = i;
    int w = run->wl->plan;
    size_t k = pr_vm(run, o->vstage, o->mb);

    if (pr_fault_inject(r, i) != 0)
        return -1;

    /* The waits the simulator assumes, as the compiler wrote them from its op table:
     * the SOs listed before an allocating op, the op's SI, its chunk's LW. */
    bool needs_si = (o->flags & PR_WAIT_SI) != 0;
    int dir = pr_copy_dir(o->kind);
    if (dir >= 0) {
        pthread_mutex_lock(&r->mu);
        PrCopyQ *q = &r->cpu_rank->q[dir];
        q->op[q->tail++] = i;
        pthread_cond_signal(&q->cv); /* its copy thread only */
        pthread_mutex_unlock(&r->mu);
        pr_tl_op = NULL;
        r->next_op = i + 1;
        pr_ring_end(r, t_issue);
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

    int rc = run->wl->op(r, i, o);

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
    pr_ring_end(r, t1);
    atomic_store_explicit(&r->running, 0, memory_order_relaxed);
    pr_tl_op = NULL;
    return rc;
}

/* ---- setup and teardown -------------------------------------------------------------- */

static void rank_free(PrRank *r)
{
    PrCpuRank *c = r->cpu_rank;
    if (c && c->copy_started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_broadcast(&c->q[0].cv);
        pthread_cond_broadcast(&c->q[1].cv);
        pthread_mutex_unlock(&r->mu);
        for (int d = 0; d < 2; d++)
            pthread_join(c->copy_th[d], NULL);
    }
    pr_io_free(&r->io, free);
    free(r->arena);
    if (!c) /* never set up */
        return;
    for (size_t k = 0; c->host && k < r->nvm; k++)
        free(c->host[k]);
    for (int d = 0; c->q && d < 2; d++)
        pthread_cond_destroy(&c->q[d].cv);
    void *own[] = {c->host, c->host_cap, c->si_done, c->lw_done, c->q ? c->q[0].op : NULL,
                   c->q ? c->q[1].op : NULL, c->q, c};
    for (size_t j = 0; j < sizeof own / sizeof own[0]; j++)
        free(own[j]);
    r->cpu_rank = NULL;
}

static int rank_init(PrRun *run, int s)
{
    PrRank *r = &run->rank[s];
    r->nvm = (size_t)run->PV * (size_t)run->M;
    size_t nvm = r->nvm, nops = r->d->nops ? r->d->nops : 1;
    PrCpuRank *c = r->cpu_rank = calloc(1, sizeof *c);
    if (!c) {
        pr_fail(run, s, -1, "out of memory allocating the rank");
        return -1;
    }
    int io = pr_io_init(&r->io, nvm);
    c->host = calloc(nvm, sizeof(void *));
    c->host_cap = calloc(nvm, sizeof(int64_t));
    c->si_done = calloc(nvm, sizeof(uint32_t));
    c->lw_done = calloc((size_t)(run->PV > 0 ? run->PV : 1), sizeof(uint32_t));
    c->q = calloc(2, sizeof *c->q);
    for (int d = 0; c->q && d < 2; d++) {
        pthread_cond_init(&c->q[d].cv, NULL);
        c->q[d].op = calloc(nops, sizeof(uint32_t));
    }
    int64_t ab = r->d->arena_bytes[run->wl->plan];
    int64_t wb = r->d->workspace_bytes[run->wl->plan];
    r->arena_bytes = ab;
    /* one allocation: the arena, then the workspace above it (arena_plan.h) */
    size_t asz = (size_t)(ab > 0 ? (ab + 63) / 64 * 64 : 64);
    size_t wsz = (size_t)(wb > 0 ? (wb + 63) / 64 * 64 : 0);
    r->arena = aligned_alloc(64, asz + wsz);
    r->work = r->arena && wsz ? r->arena + asz : NULL;
    r->work_bytes = wb > 0 ? wb : 0;
    if (io != 0 || !c->host || !c->host_cap || !c->si_done || !c->lw_done || !c->q ||
        !c->q[0].op || !c->q[1].op || !r->arena) {
        pr_fail(run, s, -1, "out of memory allocating the rank (arena %lld bytes)",
                (long long)ab);
        return -1;
    }
    memset(r->arena, 0, asz + wsz);
    for (int d = 0; d < 2; d++) {
        CopyArg *a = malloc(sizeof *a);
        if (!a) {
            pr_fail(run, s, -1, "out of memory");
            return -1;
        }
        *a = (CopyArg){r, d};
        if (pthread_create(&c->copy_th[d], NULL, copy_main, a) != 0) {
            free(a);
            if (d == 1) { /* stop the first one */
                pthread_mutex_lock(&r->mu);
                r->stop = 1;
                pthread_cond_broadcast(&c->q[0].cv);
                pthread_mutex_unlock(&r->mu);
                pthread_join(c->copy_th[0], NULL);
            }
            pr_fail(run, s, -1, "cannot start a copy thread");
            return -1;
        }
    }
    c->copy_started = 1;
    return 0;
}


/* ---- the CPU backend of the run core (common.c) ------------------------------ */

/* The channels between the rank threads and each rank's arena, buffers and copy
 * threads. */
static int cpu_setup(PrRun *run)
{
    PrCpuRun *cr = calloc(1, sizeof *cr);
    if (cr)
        cr->chan = calloc((size_t)run->P * (size_t)run->P, sizeof *cr->chan);
    if (!cr || !cr->chan) {
        free(cr);
        pr_fail(run, -1, -1, "out of memory");
        return -1;
    }
    run->cpu_run = cr;
    for (int c = 0; c < run->P * run->P; c++)
        cr->chan[c].head = cr->chan[c].tail = &cr->chan[c].stub;
    run->spin_ms = pr_spin_budget_ms(run);
    if (links_init(run) != 0)
        return -1;
    for (int s = 0; s < run->P; s++) {
        run->rank[s].spin_ms = run->spin_ms;
        if (rank_init(run, s) != 0)
            return -1;
    }
    return 0;
}

/* One iteration of rank r: its program on this thread, its SO/SI/OG/LW on the copy
 * threads, which it waits for at the end. */
static int cpu_rank_iteration(PrRank *r)
{
    pthread_mutex_lock(&r->mu);
    for (PrCopyQ *q = r->cpu_rank->q; q < r->cpu_rank->q + 2; q++)
        q->head = q->tail = q->done = 0;
    pthread_mutex_unlock(&r->mu);
    int rc = r->d->run(r);
    if (rc == 0)
        rc = wait_copies(r, 0, 0, SIZE_MAX, 1);
    return rc;
}

/* Zeroes the gradients; the op profile counts from the second iteration on (the first
 * warms up). */
static void cpu_iter_begin(PrRun *run, int it)
{
    if (run->wl->zero)
        run->wl->zero(run);
    if (it == 1)
        for (int s = 0; s < run->P; s++) {
            memset(run->rank[s].kind_ms, 0, (size_t)run->PV * PR_NKINDS * sizeof(double));
            memset(run->rank[s].kind_n, 0, (size_t)run->PV * PR_NKINDS * sizeof(uint32_t));
        }
}

static void cpu_step(PrRun *run)
{
    if (run->wl->step && !pr_dp_sharded(run)) /* else: pr_dp_step, per rank */
        run->wl->step(run);
}

static void cpu_teardown(PrRun *run)
{
    for (int s = 0; s < run->ranks_ready; s++)
        rank_free(&run->rank[s]);
    PrCpuRun *cr = run->cpu_run;
    if (!cr)
        return;
    for (int c = 0; c < run->P * run->P; c++) {
        PrChan *ch = &cr->chan[c];
        for (PrNode *nd = ch->head, *nx; nd; nd = nx) {
            nx = atomic_load(&nd->next);
            free(nd->payload);
            if (nd != &ch->stub)
                free(nd);
        }
    }
    free(cr->chan);
    links_free(cr);
    free(cr);
    run->cpu_run = NULL;
}

/* PrBackend.rank_start: binds the rank thread to a CPU of its own when this process
 * runs every rank in threads (no transport) and may use at least as many CPUs as it
 * has rank threads (every replica's): rank thread k, k = replica x P + rank, to the
 * k-th CPU of the process's affinity mask. Unbound, two rank threads that hand
 * messages back and forth end up on one CPU while another idles: a thread that blocked
 * in a wait is woken on its waker's CPU, so once both have blocked they share it and
 * every hand-off is a context switch (2.6x the hand-written loop's iteration on an idle
 * 2-CPU machine, docs/performance.md "A runtime as steady as the loop"). Failing to
 * bind is not an error. Returns 0. */
static int cpu_rank_start(PrRank *r)
{
#ifdef __linux__
    PrRun *run = r->run;
    int D = run->dp_group ? run->D : 1, k = run->replica * run->P + r->id;
    cpu_set_t allowed;
    if (pr_transport || sched_getaffinity(0, sizeof allowed, &allowed) != 0 ||
        CPU_COUNT(&allowed) < run->P * D)
        return 0;
    for (int c = 0, seen = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed) && seen++ == k) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            (void)pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            break;
        }
#else
    (void)r;
#endif
    return 0;
}

/* PrBackend.wake: the copy threads of rank r wait on their queue's own condition
 * variable (r->mu held by the caller). */
static void cpu_wake(PrRank *r)
{
    for (int d = 0; r->cpu_rank && r->cpu_rank->q && d < 2; d++)
        pthread_cond_broadcast(&r->cpu_rank->q[d].cv);
}

/* The CPU backend of the run core (pr_run, common.c). */
const PrBackend pr_backend = {
    .setup = cpu_setup, .rank_start = cpu_rank_start, .rank_iteration = cpu_rank_iteration,
    .iter_begin = cpu_iter_begin,
    .step = cpu_step, .teardown = cpu_teardown, .wake = cpu_wake, .reference = true,
};
