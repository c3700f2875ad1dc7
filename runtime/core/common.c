/* common.c - the runtime core every backend shares (core.h), as
 * nccl-tests' common.cu is shared by its tests: the run's options, checks and results,
 * the failure record, fault injection (PIPERUN_FAULT), the fatal-signal handler and the
 * flight recorder, the liveness of rank threads, the barrier between the main thread
 * and the ranks, and the run loop's skeleton (pr_run_core). The CPU backend
 * (cpu.c) and the CUDA backend (cuda/piperun_cuda.c) supply a PrBackend: what
 * differs (devices, arenas, copy threads, messages, where the optimizer step runs).
 *
 * Per iteration the main thread and every rank thread meet at three barriers: the
 * start, the end (every op of every rank has finished) and the hand-back (the main
 * thread has read the losses, checked the gradients and, on the CPU, stepped the
 * optimizer). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

/* The run in progress, for the fatal-signal handler's flight recorder. */
static PrRun *volatile g_run;

double pr_peer_silence_ms(const PrRun *run)
{
    double s = PR_PEER_SILENCE_S;
    if (run->opt.timeout_s < s)
        s = run->opt.timeout_s;
    return s * 1e3;
}

int pr_held_pieces(const PrRun *run, const PrOp *o, int w, PrHeldPiece out[PR_PIECES])
{
    if (!pr_op_placed(o, w))
        return 0;
    const int64_t *from = run->prog->vstages[o->vstage].from[w];
    int n = 0;
    for (int k = 0; k < PR_PIECES; k++) {
        int64_t lo, len = pr_region_piece_held(from, o->held[w], k, &lo);
        if (len == 0)
            continue;
        if (o->at[w][k] < 0)
            return -1;
        out[n++] = (PrHeldPiece){lo, o->at[w][k], len};
    }
    return n;
}

/* ---- liveness of the rank threads (peer failure) ------------------------------------ */

void pr_live_start(PrLive *l, int s, double now)
{
    memset(l, 0, sizeof *l);
    l->s = s;
    l->seen = now;
}

int pr_live_check(PrRun *run, PrLive *l, int watcher, double now)
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

void pr_ring_start(PrRank *r, uint32_t i, double t0)
{
    unsigned n = atomic_load_explicit(&r->nring, memory_order_relaxed);
    PrRingEntry *e = &r->ring[n % PR_RING];
    e->op = i;
    e->iter = r->iter;
    e->t0 = t0 - r->run->t_start;
    e->t1 = 0;
    atomic_store_explicit(&r->nring, n + 1, memory_order_release);
}

void pr_ring_end(PrRank *r, double t1)
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
    if (run->D > 1)
        fprintf(f, "piperun: replica %d, rank %d, its last %u ops (oldest first):\n",
                run->replica, s, k);
    else
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

static void fault_parse(PrRun *run)
{
    for (int s = 0; s < run->P; s++)
        run->rank[s].fault_op = -1;
    const char *f = getenv("PIPERUN_FAULT");
    if (!f || !*f)
        return;
    int rank, op;
    char what[16] = "";
    /* rank: of the P x D ranks (piperun.h pr_dp_rank); this run injects only into its
     * replica's */
    if (sscanf(f, "%d:%d:%15s", &rank, &op, what) != 3 || rank < 0 ||
        rank >= pr_dp_nranks(run->P, run->D) || op < 0) {
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
    if (pr_dp_replica(run->P, rank) != run->replica)
        return;
    run->rank[pr_dp_stage(run->P, rank)].fault_op = op;
    run->rank[pr_dp_stage(run->P, rank)].fault_what = w;
}

int pr_fault_inject(PrRank *r, uint32_t i)
{
    PrRun *run = r->run;
    if (r->fault_op != (int)i)
        return 0;
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
    return 0;
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

/* "F3.1", as pr_op_name, with put_* only. */
static void put_op(char *buf, size_t *n, const PrOp *o)
{
    put_str(buf, n, pr_kind_name(o->kind));
    put_int(buf, n, o->mb);
    if (o->chunk) {
        put_str(buf, n, ".");
        put_int(buf, n, o->chunk);
    }
}

/* Async-signal-safe: formats with put_*, writes, exits. The process state may be
 * corrupt, so nothing else is attempted: every rank stops with the process. */
static void on_signal(int sig)
{
    char buf[256];
    size_t n = 0;
    put_str(buf, &n, "piperun: ");
    if (pr_tl_rank >= 0) {
        put_str(buf, &n, "rank ");
        put_int(buf, &n, pr_tl_rank);
        if (pr_tl_op) {
            put_str(buf, &n, ", op ");
            put_op(buf, &n, pr_tl_op);
            put_str(buf, &n, " (#");
            put_int(buf, &n, (long)pr_tl_opi);
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
        if (e->op < r->d->nops)
            put_op(buf, &len, &r->d->ops[e->op]);
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
    if (pr_tl_rank >= 0 && pr_tl_rank < run->ranks_ready) {
        flight_write_rank(fd, run, pr_tl_rank);
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

/* ---- barrier between the main thread and the ranks ---------------------------------- */

/* Every rank (me) and the main thread (me = NULL) call it; returns -1 when the run
 * failed. A rank spins for up to the run's spin budget (run->spin_ms: 0 when the ranks
 * outnumber the CPUs) before it blocks on run->cv: the barriers after an iteration's
 * end and at the next one's start are passed a few microseconds apart, and a rank that
 * blocked there would cost a futex wake-up and a context switch each time. The main
 * thread blocks at once (it waits out the whole iteration) and checks every
 * PR_LIVE_CHECK_S that each rank is alive (a rank that dies or stops while no other
 * rank waits for it). */
int pr_barrier(PrRun *run, PrRank *me)
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
    if (me) {
        atomic_store(&me->in_wait, 1);
        double spin_end = pr_now_ms() + run->spin_ms;
        for (unsigned k = 1; atomic_load(&run->bar_seq) == gen && !atomic_load(&run->failed);
             k++) {
            if (!(k & 15) && pr_now_ms() > spin_end)
                break;
            pr_cpu_relax();
        }
    }
    double now = pr_now_ms();
    if (!me)
        for (int s = 0; s < run->P; s++)
            pr_live_start(&run->live[s], s, now);
    pthread_mutex_lock(&run->mu);
    while (atomic_load(&run->bar_seq) == gen && !atomic_load(&run->failed)) {
        if (me) {
            pthread_cond_wait(&run->cv, &run->mu);
            continue;
        }
        pr_cond_wait_until(&run->cv, &run->mu, pr_now_ms() + PR_LIVE_CHECK_S * 1e3);
        if (atomic_load(&run->bar_seq) != gen || atomic_load(&run->failed))
            break;
        pthread_mutex_unlock(&run->mu);
        now = pr_now_ms();
        for (int s = 0; s < run->P; s++)
            if (pr_live_check(run, &run->live[s], -1, now) != 0)
                break;
        pthread_mutex_lock(&run->mu);
    }
    pthread_mutex_unlock(&run->mu);
    if (me)
        atomic_store(&me->in_wait, 0);
    return atomic_load(&run->failed) ? -1 : 0;
}

void pr_options_default(PrOptions *o, const PrProgram *prog)
{
    memset(o, 0, sizeof *o);
    o->workload = prog && !prog->model_unavailable ? PR_MLP : PR_SYNTHETIC;
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
    void *own[] = {res->loss, res->iter_ms, res->busy_ms, res->peak_arena, res->grad_name,
                   res->grad_err};
    for (size_t j = 0; j < sizeof own / sizeof own[0]; j++)
        free(own[j]);
    memset(res, 0, sizeof *res);
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
    if (o->workload == PR_MLP && prog->model_unavailable) {
        snprintf(why, n, "the mlp workload is not available: %s", prog->model_unavailable);
        return -1;
    }
    if (o->check && o->workload != PR_MLP) {
        snprintf(why, n, "--check needs the mlp workload");
        return -1;
    }
    return 0;
}


/* ---- checks of the calls generated code makes ----------------------------------------- */

int pr_msg_check(PrRank *r, int32_t peer, uint32_t msg, bool send)
{
    PrRun *run = r->run;
    if (atomic_load(&run->failed))
        return -1;
    const PrMsg *m = msg < run->prog->nmsgs ? &run->prog->msgs[msg] : NULL;
    if (peer < 0 || peer >= run->P || !m || (send ? m->src : m->dst) != r->id ||
        (send ? m->dst : m->src) != peer) {
        if (send)
            pr_fail(run, r->id, -1, "send of message %u to rank %d does not match the program",
                    msg, peer);
        else
            pr_fail(run, r->id, -1, "receive of message %u from rank %d does not match the "
                    "program", msg, peer);
        return -1;
    }
    return 0;
}

int pr_op_check(PrRank *r, uint32_t i)
{
    if (atomic_load(&r->run->failed))
        return -1;
    if (i >= r->d->nops) {
        pr_fail(r->run, r->id, -1, "op index %u out of range", i);
        return -1;
    }
    atomic_store(&r->cur_op, i);
    return 0;
}

/* ---- the run loop ---------------------------------------------------------------------- */

/* The thread of a rank that ends early (PIPERUN_FAULT die, as a killed process would):
 * marked gone for the peers' liveness checks. */
static void rank_gone(void *arg)
{
    PrRank *r = arg;
    atomic_store(&r->gone, 1);
}

/* A rank thread's iterations: the backend runs the rank's program (rank_iteration)
 * between the start and the end barrier; after the hand-back barrier the backend's
 * rank_step may step the optimizer where the rank's state lives. */
static void rank_iterations(PrRank *r)
{
    PrRun *run = r->run;
    const PrBackend *be = run->be;
    if (be->rank_start && be->rank_start(r) != 0)
        return;
    for (int it = 0; it < run->opt.iters; it++) {
        if (pr_barrier(run, r)) /* start of iteration it */
            return;
        r->iter = it;
        r->dropping = 0;
        r->next_op = 0;
        int rc = be->rank_iteration(r);
        if (rc == 0 && !be->dp_own)
            rc = pr_dp_reduce(r); /* the gradients' mean over the replicas (dp.c) */
        if (rc != 0 && !atomic_load(&run->failed))
            pr_fail(run, r->id, -1, "the rank program failed");
        if (pr_barrier(run, r)) /* end of iteration it */
            return;
        if (pr_barrier(run, r)) /* the main thread has taken the results */
            return;
        if (be->rank_step && be->rank_step(r) != 0)
            return;
    }
    if (be->rank_end)
        be->rank_end(r);
}

static void *rank_main(void *arg)
{
    PrRank *r = arg;
    pr_tl_rank = r->id;
    if (pthread_getcpuclockid(pthread_self(), &r->cpu) == 0)
        atomic_store(&r->started, 1);
    pthread_cleanup_push(rank_gone, r);
    rank_iterations(r);
    pthread_cleanup_pop(0);
    return NULL;
}

/* The run and its ranks' common state (mutexes, op timings, spans), and the result's
 * arrays. Returns NULL when out of memory (res->error says so). */
static PrRun *run_new(const PrBackend *be, const PrWorkload *wl, const PrProgram *prog,
                      const PrOptions *o, PrResult *res, int replica)
{
    PrRun *run = calloc(1, sizeof *run);
    if (!run) {
        snprintf(res->error, sizeof res->error, "out of memory");
        return NULL;
    }
    run->be = be;
    run->wl = wl;
    run->prog = prog;
    run->opt = *o;
    run->P = prog->P;
    run->PV = prog->P * prog->V;
    run->M = prog->M;
    run->D = pr_dp_degree(prog);
    run->replica = replica;
    run->check_here = true;
    pthread_mutex_init(&run->mu, NULL);
    pthread_cond_init(&run->cv, NULL);
    atomic_init(&run->failed, 0);
    run->rank = calloc((size_t)run->P, sizeof *run->rank);
    run->live = calloc((size_t)run->P, sizeof *run->live);
    run->mb_loss = calloc((size_t)run->M, sizeof(double));
    res->iters = o->iters;
    res->loss = calloc((size_t)o->iters, sizeof(double));
    res->iter_ms = calloc((size_t)o->iters, sizeof(double));
    res->busy_ms = calloc((size_t)run->P, sizeof(double));
    res->peak_arena = calloc((size_t)run->P, sizeof(int64_t));
    if (!run->rank || !run->live || !run->mb_loss || !res->loss || !res->iter_ms ||
        !res->busy_ms || !res->peak_arena) {
        pr_fail(run, -1, -1, "out of memory");
        return run;
    }
    size_t nk = (size_t)run->PV * PR_NKINDS;
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
        run->ranks_ready = s + 1;
        r->kind_ms = calloc(nk, sizeof(double));
        r->kind_n = calloc(nk, sizeof(uint32_t));
        r->span = calloc((size_t)o->iters * (r->d->nops ? r->d->nops : 1), sizeof(PrSpan));
        if (!r->kind_ms || !r->kind_n || !r->span) {
            pr_fail(run, s, -1, "out of memory allocating the rank");
            return run;
        }
    }
    fault_parse(run);
    return run;
}

/* The main thread's iterations: it times each from the start to the end barrier, then
 * reads the losses, checks the gradients (iteration 1, --check) and prints the
 * progress: the first and the last iteration, and at most one line a second between. */
static void run_iterations(PrRun *run, PrResult *res)
{
    const PrBackend *be = run->be;
    const PrOptions *o = &run->opt;
    const PrWorkload *wl = run->wl;
    bool mlp = wl->model;
    double last_line = -1e300; /* when the last progress line was printed, ms */
    for (int it = 0; it < o->iters; it++) {
        if (be->iter_begin)
            be->iter_begin(run, it);
        double t0 = pr_now_ms();
        if (pr_barrier(run, NULL) || pr_barrier(run, NULL))
            break;
        res->iter_ms[it] = pr_now_ms() - t0;
        if (be->iter_end && be->iter_end(run, it) != 0)
            break;
        double l = 0;
        for (int m = 0; m < run->M; m++)
            l += run->mb_loss[m];
        res->loss[it] = mlp ? l / run->M : NAN;
        if (it == 0 && o->check && run->check_here && wl->check && wl->check(run, res) != 0)
            pr_fail(run, -1, -1, "the reference iteration failed (out of memory)");
        if (be->step)
            be->step(run);
        /* zero >= 1: each rank's shard of the step, then the all-gather (dp.c), before
         * the next iteration zeroes the gradients */
        for (int s = 0; s < run->P && !be->dp_own && !atomic_load(&run->failed); s++)
            if (pr_dp_step(&run->rank[s]) != 0)
                break;
        if (it == 0 && !atomic_load(&run->failed) && wl->check_weights)
            wl->check_weights(run, res); /* --check: the weights after the step */
        double now = pr_now_ms();
        if (!o->quiet && !o->json && !o->profile &&
            (it == 0 || it == o->iters - 1 || now - last_line >= 1000.0)) {
            last_line = now;
            if (mlp)
                printf("iter %d: loss %.4f  time %.3f ms\n", it + 1, res->loss[it],
                       res->iter_ms[it]);
            else
                printf("iter %d: time %.3f ms\n", it + 1, res->iter_ms[it]);
            fflush(stdout);
        }
        if (pr_barrier(run, NULL))
            break;
    }
}

/* After the iterations (or a failure): stops the rank threads, times the reference,
 * writes the trace and the costs block, fills the result. Returns the exit status. */
static int run_finish(PrRun *run, pthread_t *th, int started, PrResult *res)
{
    const PrBackend *be = run->be;
    const PrOptions *o = &run->opt;
    if (started < run->P && started > 0)
        pr_fail(run, -1, -1, "run aborted");
    if (be->stop)
        be->stop(run, th, started);
    else
        for (int s = 0; s < started; s++)
            pthread_join(th[s], NULL);
    if (be->reference && o->reference && run->wl->reference_ms && !atomic_load(&run->failed) &&
        run->net)
        res->ref_ms = run->wl->reference_ms(run);
    if (!atomic_load(&run->failed) && o->trace && pr_trace_write(run, o->trace) != 0)
        pr_fail(run, -1, -1, "cannot write the trace %s: %s", o->trace, strerror(errno));
    if (!atomic_load(&run->failed) && o->profile && pr_profile_write(run) != 0)
        pr_fail(run, -1, -1, "cannot write the costs block");
    for (int s = 0; s < run->ranks_ready; s++) {
        res->busy_ms[s] = run->rank[s].busy_ms;
        res->peak_arena[s] = run->rank[s].peak;
    }
    if (!atomic_load(&run->failed))
        return 0;
    snprintf(res->error, sizeof res->error, "%s", run->error);
    res->error_shown = true;
    for (int s = 0; s < run->ranks_ready; s++)
        pr_flight_print(run, s, stderr);
    return 1;
}

static void run_free(PrRun *run)
{
    if (run->be->teardown)
        run->be->teardown(run);
    for (int s = 0; s < run->ranks_ready; s++) {
        PrRank *r = &run->rank[s];
        free(r->kind_ms);
        free(r->kind_n);
        free(r->span);
        pr_dp_rank_free(r);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->bell_mu);
        pthread_cond_destroy(&r->bell_cv);
    }
    if (run->wl->teardown)
        run->wl->teardown(run);
    pthread_mutex_destroy(&run->mu);
    pthread_cond_destroy(&run->cv);
    free(run->rank);
    free(run->live);
    free(run->mb_loss);
    free(run);
}

/* One run of prog: replica `replica` of group g (NULL: the only one, or this process's
 * replica under pr_dp). Returns 0 or 1 (res->error says why). */
static int run_one(const PrBackend *be, const PrWorkload *wl, const PrProgram *prog,
                   const PrOptions *o, PrResult *res, PrDpGroup *g, int replica)
{
    PrRun *run = run_new(be, wl, prog, o, res, g ? replica : pr_dp ? pr_dp->replica : 0);
    if (!run)
        return 1;
    if (g)
        pr_dp_group_join(g, run, replica);
    pthread_t *th = calloc((size_t)run->P, sizeof *th);
    int started = 0;
    if (!th)
        pr_fail(run, -1, -1, "out of memory");
    if (!atomic_load(&run->failed) &&
        (!wl->setup || wl->setup(run) == 0) && be->setup(run) == 0) {
        run->t_start = pr_now_ms();
        if (replica == 0)
            g_run = run;
        if (!be->start || be->start(run) == 0)
            for (; started < run->P; started++)
                if (pthread_create(&th[started], NULL, rank_main, &run->rank[started])) {
                    pr_fail(run, -1, -1, "cannot start rank thread %d", started);
                    break;
                }
        if (started == run->P)
            run_iterations(run, res);
    }
    int rc = run_finish(run, th, started, res);
    if (replica == 0)
        g_run = NULL;
    if (g)
        pr_dp_group_leave(g, run);
    run_free(run);
    free(th);
    return rc;
}

/* Replica d > 0 of a threaded data-parallel run (pr_run_core): its own options (silent,
 * no check, trace, profile or reference: replica 0 reports) and result. */
typedef struct ReplicaArg {
    const PrBackend *be;
    const PrWorkload *wl;
    const PrProgram *prog;
    PrOptions o;
    PrResult res;
    PrDpGroup *g;
    int replica, rc;
} ReplicaArg;

static void *replica_main(void *arg)
{
    ReplicaArg *a = arg;
    a->rc = run_one(a->be, a->wl, a->prog, &a->o, &a->res, a->g, a->replica);
    return NULL;
}

/* The D replicas of prog as D runs in this process sharing one group (dp.c): replica 0
 * on this thread, the others on threads of their own. Returns 0 or 1. */
static int run_replicas(const PrBackend *be, const PrWorkload *wl, const PrProgram *prog,
                        const PrOptions *o, PrResult *res)
{
    int D = pr_dp_degree(prog), rc = 1;
    PrDpGroup *g = pr_dp_group_new(D, prog->P);
    ReplicaArg *a = calloc((size_t)D, sizeof *a);
    pthread_t *th = calloc((size_t)D, sizeof *th);
    if (!g || !a || !th) {
        snprintf(res->error, sizeof res->error, "out of memory");
        goto out;
    }
    int started = 1;
    for (; started < D; started++) {
        ReplicaArg *r = &a[started];
        *r = (ReplicaArg){.be = be, .wl = wl, .prog = prog, .o = *o, .g = g,
                          .replica = started};
        r->o.quiet = true;
        r->o.json = r->o.check = r->o.profile = r->o.reference = false;
        r->o.trace = r->o.profile_out = NULL;
        if (pthread_create(&th[started], NULL, replica_main, r) != 0)
            break;
    }
    if (started < D) { /* the started ones stop at their first reduction */
        snprintf(res->error, sizeof res->error, "cannot start the thread of replica %d",
                 started);
        pr_dp_group_stop(g);
    } else {
        rc = run_one(be, wl, prog, o, res, g, 0);
    }
    for (int d = 1; d < started; d++) {
        pthread_join(th[d], NULL);
        if (a[d].rc != 0 && rc == 0) {
            rc = 1;
            snprintf(res->error, sizeof res->error, "%s", a[d].res.error);
            res->error_shown = a[d].res.error_shown;
        }
        pr_result_free(&a[d].res);
    }
out:
    free(th);
    free(a);
    pr_dp_group_free(g);
    return rc;
}

int pr_run_core(const PrBackend *be, const PrWorkload *wl, const PrProgram *prog,
                const PrOptions *o, PrResult *res)
{
    PrResult dummy;
    if (!res)
        res = &dummy;
    memset(res, 0, sizeof *res);
    res->ref_ms = -1;
    res->max_grad_err = -1;
    res->max_weight_err = -1;
    char why[200];
    int rc = 1;
    if (validate(prog, o, why, sizeof why))
        snprintf(res->error, sizeof res->error, "%s", why);
    else if (!wl)
        snprintf(res->error, sizeof res->error, "unknown workload");
    else if (pr_dp_degree(prog) > 1 && !pr_dp && be->dp_own)
        snprintf(res->error, sizeof res->error, "data_parallel %d on this backend runs one "
                 "process per rank: use --launcher mpi (mpirun -np %d)", pr_dp_degree(prog),
                 (int)pr_dp_nranks(prog->P, pr_dp_degree(prog)));
    else if (pr_dp_degree(prog) > 1 && !pr_dp &&
             pr_dp_nranks(prog->P, pr_dp_degree(prog)) > PR_DP_MAX_THREADS)
        snprintf(res->error, sizeof res->error, "data_parallel %d: %lld ranks, more than the "
                 "%d rank threads of one process; use --launcher mpi", pr_dp_degree(prog),
                 (long long)pr_dp_nranks(prog->P, pr_dp_degree(prog)), PR_DP_MAX_THREADS);
    else if (pr_dp_degree(prog) > 1 && !pr_dp)
        rc = run_replicas(be, wl, prog, o, res);
    else
        rc = run_one(be, wl, prog, o, res, NULL, 0);
    if (res == &dummy)
        pr_result_free(res);
    return rc;
}

/* ---- one process per rank (the MPI transports) ------------------------------------------ */

int pr_process_count_check(const PrProgram *prog, int np, PrResult *res)
{
    long long n = prog ? (long long)pr_dp_nranks(prog->P, pr_dp_degree(prog)) : 0;
    if (prog && prog->P >= 1 && (np <= 1 || np == n))
        return 0;
    if (res) {
        memset(res, 0, sizeof *res);
        snprintf(res->error, sizeof res->error,
                 "started with %d MPI processes but the program has %lld ranks; run "
                 "`mpirun -np %lld`", np, n, n);
    }
    return -1;
}

void pr_process_options(PrOptions *o, int me, char *trace, size_t n)
{
    if (me == 0)
        return;
    o->reference = false;
    o->profile = false;
    o->profile_out = NULL;
    if (o->trace) {
        snprintf(trace, n, "%s.rank%d", o->trace, me);
        o->trace = trace;
    }
}

/* The page size, for pr_host_bytes (4 KiB when sysconf cannot say). */
static size_t host_page(void)
{
    long pg = sysconf(_SC_PAGESIZE);
    return pg > 0 ? (size_t)pg : 4096;
}

size_t pr_host_bytes(size_t nfloats)
{
    size_t pg = host_page(), b = nfloats * sizeof(float);
    return b <= pg ? pg : (b + pg - 1) / pg * pg;
}

float *pr_host_alloc(size_t nfloats)
{
    void *p = NULL;
    size_t b = pr_host_bytes(nfloats);
    if (posix_memalign(&p, host_page(), b) != 0)
        return NULL;
    memset(p, 0, b);
    return p;
}
