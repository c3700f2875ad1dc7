/* piperun_mpi.c - one process per rank through MPI for the CPU backend (docs/cuda.md,
 * "Several processes: MPI").
 *
 * The generated program is linked unchanged; the linker routes two calls here:
 *
 *     mpicc -std=c11 -O2 -I<inc> -o NAME DIR/main.c DIR/rank_K.c... \
 *           -Wl,--wrap=pr_main -Wl,--wrap=pr_run \
 *           <lib>/libpiperun_mpi.a <lib>/libpiperun.a -lopenblas -lpthread -lm
 *     mpirun -np P ./NAME [options]
 *
 * __wrap_pr_main initialises MPI (MPI_THREAD_MULTIPLE: the rank thread and the heartbeat
 * thread both call MPI), silences stdout on every process but 0, runs the real pr_main
 * and finalises (or MPI_Abort on a failure, so a failing rank stops the whole job).
 * __wrap_pr_run runs the real threaded runtime (cpu.c) with a copy of the program in
 * which, on process k, rank k runs its generated function and every other rank is a
 * stand-in without arena that does nothing. The runtime hands every message between
 * rank k and another rank to this file's PrTransport, on rank k's own thread:
 *   - pr_send: MPI_Isend of a header (message id, send time) + payload; completed sends
 *     are reaped at the next call, and all of them at the end of the iteration;
 *   - pr_recv: MPI_Irecv from that rank (MPI's non-overtaking order per source keeps the
 *     per-pair issue order of the comm lowering), then MPI_Test in a loop: spinning for
 *     the rank's spin budget, then yielding the CPU between tests (no timed sleep), with
 *     the watchdog and the peer's liveness checked twice a second;
 *   - at the end of each iteration process k sends process 0 what the summary needs (busy
 *     time, measured peak, per-(vstage, kind) op times, the head's micro-batch losses
 *     and, in iteration 1 with --check, the gradients of its slices); process 0 receives
 *     them on its rank thread, so it prints the same summary as the threaded run.
 * With one process (no mpirun, or -np 1) the run is the plain threaded one.
 *
 * Peer failure (docs/runtime.md "Failures"): every process runs a heartbeat thread that
 * sends its rank's last op to every other process once a second (on a duplicate of
 * MPI_COMM_WORLD) and takes theirs. A rank waiting for a peer fails the run naming that
 * peer and its last op when the peer's process is gone (its pid, on the same machine) or
 * when no heartbeat or message has come from it for PR_PEER_SILENCE_S (or --timeout):
 * a killed or stopped process is reported by the runtime, within 10 s. SIGTERM (the
 * launcher stopping the job) prints the processes found gone and the flight recorder.
 *
 * Options that write files or compare gradients act on process 0 only: the others run
 * without --check, --reference and --profile, and write --trace T as T.rankK (their own
 * rank's ops; the trace of process 0 shows rank 0's). The synthetic workload's p2p time
 * counts from the send time on the sender's clock (CLOCK_MONOTONIC, exact on one
 * machine), never later than the receipt.
 *
 * Testing aid: PIPERUN_GRAD_DUMP=FILE writes, after iteration 1, every gradient tensor
 * as text ("name count" then one %.9g value a line) from process 0 (or the single
 * process), so that tests can compare a multi-process run with the threaded one.
 *
 * Errors: a receive that waits --timeout seconds fails the run with a watchdog message
 * naming the rank it waits for; a message that does not fit the program fails it too
 * ("MPI message ..."). One run per process (state is global). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "workload.h"

enum { TAG_DATA = 1, TAG_STATS = 2, TAG_GRAD = 3 };

/* Header in front of every data message: the message id (checked on receipt) at 0, the
 * sender's CLOCK_MONOTONIC send time in ms (a double) at 8. */
#define HDR 16

int __real_pr_main(const PrProgram *prog, int argc, char **argv);
int __real_pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res);
int __wrap_pr_main(const PrProgram *prog, int argc, char **argv);
int __wrap_pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res);

/* One MPI_Isend in flight and the buffer it owns. */
typedef struct Pending {
    MPI_Request req;
    void *buf;
    int dst;
} Pending;

/* A heartbeat: what the sending process's rank is doing (its last op). */
typedef struct Beat {
    int32_t iter;      /* 0-based iteration */
    uint32_t op;       /* the last op it started */
    int32_t has_op;    /* it has started an op */
    int32_t running;   /* that op has not finished */
} Beat;

static struct {
    int me, np;                /* this process's rank (its stage) and the replica's P
                                  processes: ranks and size in comm */
    int world_me, world_np;    /* MPI_COMM_WORLD's */
    int replica;               /* data parallelism: this process's replica (0: none) */
    MPI_Comm comm;             /* the processes of this replica (MPI_COMM_WORLD without
                                  data parallelism): the pipeline's messages */
    MPI_Comm dp_comm;          /* the D processes of this stage (MPI_COMM_NULL: none) */
    const PrProgram *orig;     /* the generated program */
    PrProgram prog;            /* its copy with the run functions replaced */
    PrRankDesc *ranks;         /* [P] */
    atomic_int ranks_done;     /* one process: ranks that ended iteration 1 */
    Pending *pend;             /* sends of rank me not yet complete */
    int npend, cap;
    /* peers */
    int *pid;                  /* [np] process ids */
    bool *same_host;           /* [np] on this machine (pid is meaningful) */
    _Atomic long long *last_heard; /* [np] us on the monotonic clock: last beat or message */
    Beat *peer_beat;           /* [np] the last heartbeat of each process */
    MPI_Comm beat_comm;        /* comm's duplicate for heartbeats */
    pthread_t beat_th;
    bool beat_started;
    pthread_mutex_t beat_mu;
    pthread_cond_t beat_cv;
    int beat_stop;
    /* what this process's rank does, for its heartbeats */
    atomic_int my_iter, my_has_op, my_running;
    atomic_uint my_op;
    PrDpOps dp;                /* pr_dp with data parallelism */
    const char *dump;          /* PIPERUN_GRAD_DUMP */
    bool check;                /* --check as given: every process sends its gradients to
                                  process 0, although only process 0 compares them */
} G;


static bool head_on(const PrProgram *g, int rank)
{
    return g->vstages[g->P * g->V - 1].rank == rank;
}

/* ---- gradients --------------------------------------------------------------------- */

/* PIPERUN_GRAD_DUMP: every tensor of the model. Returns 0 or -1. */
static int grad_dump(PrRun *run)
{
    FILE *f = fopen(G.dump, "w");
    if (!f)
        return -1;
    for (int i = 0; i < pr_model_tensor_count(run); i++) {
        const char *name;
        float *g;
        size_t k;
        pr_model_tensor(run, i, &name, NULL, &g, &k);
        fprintf(f, "%s %zu\n", name, k);
        for (size_t j = 0; j < k; j++)
            fprintf(f, "%.9g\n", (double)g[j]);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static bool want_grads(const PrRun *run)
{
    return run->wl->model && (G.check || G.dump);
}

/* ---- peers: heartbeats and liveness --------------------------------------------------- */

/* Publishes rank r's current op for the heartbeats (the rank thread, at every message). */
static void publish(PrRank *r)
{
    if (atomic_load_explicit(&r->nring, memory_order_relaxed)) {
        atomic_store_explicit(&G.my_op, atomic_load(&r->cur_op), memory_order_relaxed);
        atomic_store_explicit(&G.my_has_op, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&G.my_iter, r->iter, memory_order_relaxed);
    atomic_store_explicit(&G.my_running, atomic_load_explicit(&r->running, memory_order_relaxed),
                          memory_order_relaxed);
}

static void heard(int j)
{
    atomic_store(&G.last_heard[j], (long long)(pr_now_ms() * 1e3));
}

/* The heartbeat thread: every PR_BEAT_S sends this process's Beat to every other process
 * and takes theirs (G.beat_comm, so data messages never mix with them). It waits on a
 * condition variable between beats, so it stops at once when told. */
#define PR_BEAT_S 1.0
static void *beat_main(void *arg)
{
    (void)arg;
    Pending *pend = NULL;
    int npend = 0, cap = 0;
    pthread_mutex_lock(&G.beat_mu);
    while (!G.beat_stop) {
        pthread_mutex_unlock(&G.beat_mu);
        Beat b = {atomic_load(&G.my_iter), atomic_load(&G.my_op), atomic_load(&G.my_has_op),
                  atomic_load(&G.my_running)};
        for (int j = 0; j < G.np; j++) {
            if (j == G.me)
                continue;
            if (npend == cap) {
                int nc = cap ? 2 * cap : 16;
                Pending *np2 = realloc(pend, (size_t)nc * sizeof *np2);
                if (!np2)
                    break;
                pend = np2;
                cap = nc;
            }
            Beat *buf = malloc(sizeof *buf);
            if (!buf)
                break;
            *buf = b;
            pend[npend].buf = buf;
            if (MPI_Isend(buf, (int)sizeof *buf, MPI_BYTE, j, 0, G.beat_comm,
                          &pend[npend].req) != MPI_SUCCESS) {
                free(buf);
                break;
            }
            npend++;
        }
        for (int i = 0; i < npend;) {
            int flag = 0;
            MPI_Test(&pend[i].req, &flag, MPI_STATUS_IGNORE);
            if (flag) {
                free(pend[i].buf);
                pend[i] = pend[--npend];
            } else {
                i++;
            }
        }
        for (;;) {
            int flag = 0;
            MPI_Status st;
            MPI_Iprobe(MPI_ANY_SOURCE, 0, G.beat_comm, &flag, &st);
            if (!flag)
                break;
            Beat in;
            MPI_Recv(&in, (int)sizeof in, MPI_BYTE, st.MPI_SOURCE, 0, G.beat_comm,
                     MPI_STATUS_IGNORE);
            int j = st.MPI_SOURCE;
            if (j >= 0 && j < G.np) {
                pthread_mutex_lock(&G.beat_mu);
                G.peer_beat[j] = in;
                pthread_mutex_unlock(&G.beat_mu);
                heard(j);
            }
        }
        pthread_mutex_lock(&G.beat_mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)PR_BEAT_S;
        if (!G.beat_stop)
            pthread_cond_timedwait(&G.beat_cv, &G.beat_mu, &ts);
    }
    pthread_mutex_unlock(&G.beat_mu);
    /* beats are small (eager): those still pending are dropped with their requests */
    for (int i = 0; i < npend; i++) {
        MPI_Request_free(&pend[i].req);
    }
    free(pend);
    return NULL;
}

/* Is process j gone? Only known for a process on this machine (its pid). */
static bool peer_gone(int j)
{
    return G.same_host && G.same_host[j] && G.pid[j] > 0 && kill((pid_t)G.pid[j], 0) != 0 &&
           errno == ESRCH;
}

/* Fails the run naming process j (= rank j) when it is gone or silent for
 * pr_peer_silence_ms(). Returns 0 or -1. */
static int peer_check(PrRank *r, int j)
{
    PrRun *run = r->run;
    double silence = pr_peer_silence_ms(run);
    double quiet = pr_now_ms() - (double)atomic_load(&G.last_heard[j]) / 1e3;
    bool gone = peer_gone(j);
    if (!gone && quiet < silence)
        return 0;
    pthread_mutex_lock(&G.beat_mu);
    Beat b = G.peer_beat[j];
    pthread_mutex_unlock(&G.beat_mu);
    int64_t op = b.has_op ? (int64_t)b.op : -1;
    if (gone)
        pr_fail(run, j, op, "peer failure: process %d (pid %d) is gone (killed), noticed by "
                "rank %d", j, G.pid[j], r->id);
    else
        pr_fail(run, j, op, "peer failure: no heartbeat for %.1f s (stopped or hung, %s), "
                "noticed by rank %d", silence / 1e3,
                b.running ? "last seen in this op" : "last seen after this op", r->id);
    return -1;
}

/* Waits for request req on behalf of rank r: MPI_Test in a loop (spinning for the
 * rank's budget, then yielding the CPU between tests: no timed sleeps), watching peer
 * j's liveness every PR_LIVE_CHECK_S and the watchdog. what: for the watchdog message.
 * Returns 0 or -1 (pr_fail called, or the run failed elsewhere). */
static int wait_req(PrRank *r, MPI_Request *req, MPI_Status *st, int j, const char *what)
{
    PrRun *run = r->run;
    double now = pr_now_ms(), spin_end = now + r->spin_ms;
    double deadline = now + run->opt.timeout_s * 1e3;
    double next_live = now + PR_LIVE_CHECK_S * 1e3;
    int rc = 0;
    atomic_store(&r->in_wait, 1);
    for (unsigned k = 1;; k++) {
        int flag = 0;
        MPI_Test(req, &flag, st);
        if (flag)
            break;
        if (atomic_load(&run->failed)) {
            rc = -1;
            break;
        }
        if (k & 63)
            continue;
        now = pr_now_ms();
        if (now > spin_end)
            sched_yield();
        if (now > deadline) {
            pr_fail(run, r->id, (int64_t)r->next_op, "watchdog: stuck %.1f s waiting for MPI %s "
                    "from rank %d (iteration %d)", run->opt.timeout_s, what, j, r->iter + 1);
            rc = -1;
            break;
        }
        if (now >= next_live) {
            if (peer_check(r, j) != 0) {
                rc = -1;
                break;
            }
            next_live = now + PR_LIVE_CHECK_S * 1e3;
        }
    }
    atomic_store(&r->in_wait, 0);
    /* a request left behind on failure is dropped with the job (MPI_Abort) */
    return rc;
}

/* ---- the transport: rank me's messages to and from other processes ------------------- */

static bool mpi_remote(int rank)
{
    return G.np > 1 && rank != G.me;
}

/* Completes finished sends of the rank thread. */
static void reap(void)
{
    for (int i = 0; i < G.npend;) {
        int flag = 0;
        MPI_Test(&G.pend[i].req, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            free(G.pend[i].buf);
            G.pend[i] = G.pend[--G.npend];
        } else {
            i++;
        }
    }
}

static int isend(void *buf, int bytes, int dst, int tag)
{
    if (G.npend == G.cap) {
        int cap = G.cap ? 2 * G.cap : 16;
        Pending *p = realloc(G.pend, (size_t)cap * sizeof *p);
        if (!p) {
            free(buf);
            return -1;
        }
        G.pend = p;
        G.cap = cap;
    }
    Pending *p = &G.pend[G.npend];
    p->buf = buf;
    p->dst = dst;
    if (MPI_Isend(buf, bytes, MPI_BYTE, dst, tag, G.comm, &p->req) != MPI_SUCCESS) {
        free(buf);
        return -1;
    }
    G.npend++;
    return 0;
}

/* pr_send to a rank in another process: header (id, send time) + payload, MPI_Isend. */
static int mpi_send(PrRank *r, int32_t peer, uint32_t msg, void *payload)
{
    PrRun *run = r->run;
    publish(r);
    size_t pay = payload ? run->io_bytes : 0;
    unsigned char *buf = malloc(HDR + pay);
    if (!buf || HDR + pay > (size_t)INT32_MAX) {
        free(buf);
        free(payload);
        pr_fail(run, r->id, -1, "out of memory sending message %u to rank %d over MPI", msg,
                peer);
        return -1;
    }
    double t = pr_now_ms();
    memset(buf, 0, HDR);
    memcpy(buf, &msg, sizeof msg);
    memcpy(buf + 8, &t, sizeof t);
    if (pay)
        memcpy(buf + HDR, payload, pay);
    free(payload);
    if (isend(buf, (int)(HDR + pay), peer, TAG_DATA) != 0) {
        pr_fail(run, r->id, -1, "MPI_Isend of message %u to rank %d failed", msg, peer);
        return -1;
    }
    reap();
    return 0;
}

/* pr_recv from a rank in another process: MPI's non-overtaking rule per (source, tag)
 * keeps the per-pair issue order of the comm lowering. */
static int mpi_recv(PrRank *r, int32_t peer, uint32_t msg, void **payload, double *t_send)
{
    PrRun *run = r->run;
    publish(r);
    const PrMsg *m = &run->prog->msgs[msg];
    bool data = m->payload == PR_PAY_ACT || m->payload == PR_PAY_GRAD;
    size_t pay = data ? run->io_bytes : 0;
    unsigned char *buf = malloc(HDR + pay);
    if (!buf) {
        pr_fail(run, r->id, -1, "out of memory receiving from rank %d over MPI", peer);
        return -1;
    }
    MPI_Request req;
    MPI_Status st;
    MPI_Irecv(buf, (int)(HDR + pay), MPI_BYTE, peer, TAG_DATA, G.comm, &req);
    if (wait_req(r, &req, &st, peer, "messages") != 0)
        return -1;   /* buf stays with the pending request; the job is aborted */
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    uint32_t id = UINT32_MAX;
    double t = 0;
    if (n >= HDR) {
        memcpy(&id, buf, sizeof id);
        memcpy(&t, buf + 8, sizeof t);
    }
    if (id != msg || (size_t)n != HDR + pay) {
        free(buf);
        pr_fail(run, r->id, (int64_t)r->next_op, "MPI message from rank %d (id %u, %d bytes) "
                "does not fit the program (expected message %u)", peer, id, n, msg);
        return -1;
    }
    *payload = NULL;
    if (pay) {
        memmove(buf, buf + HDR, pay);   /* the runtime frees the payload with free() */
        *payload = buf;
    } else {
        free(buf);
    }
    /* The sender's clock: the same CLOCK_MONOTONIC on one machine; never later than now. */
    double now = pr_now_ms();
    *t_send = (t > 0 && t < now ? t : now) - run->t_start;
    return 0;
}

static const PrTransport mpi_transport = {mpi_remote, mpi_send, mpi_recv};

/* Stats of rank me, as doubles: busy_ms, peak, M losses, PV*NK op times, PV*NK counts. */
static size_t stats_len(const PrRun *run)
{
    return 2 + (size_t)run->M + 2 * (size_t)run->PV * PR_NKINDS;
}

/* Process k > 0: sends rank k's stats (and iteration 1's gradients) to process 0. */
static int send_stats(PrRank *r)
{
    PrRun *run = r->run;
    size_t n = stats_len(run), nk = (size_t)run->PV * PR_NKINDS;
    double *d = calloc(n, sizeof *d);
    if (!d)
        return -1;
    d[0] = r->busy_ms;
    d[1] = (double)r->peak;
    for (int m = 0; m < run->M && head_on(run->prog, G.me); m++)
        d[2 + m] = run->mb_loss[m];
    pthread_mutex_lock(&r->mu);
    for (size_t k = 0; k < nk; k++) {
        d[2 + (size_t)run->M + k] = r->kind_ms[k];
        d[2 + (size_t)run->M + nk + k] = r->kind_n[k];
    }
    pthread_mutex_unlock(&r->mu);
    if (isend(d, (int)(n * sizeof *d), 0, TAG_STATS) != 0)
        return -1;
    if (r->iter == 0 && want_grads(run)) {
        size_t nf = pr_rank_grad_floats(run, G.me);
        float *gb = malloc((nf ? nf : 1) * sizeof *gb);
        if (!gb || nf * sizeof *gb > (size_t)INT32_MAX) {
            free(gb);
            return -1;
        }
        pr_rank_grad_copy(run, G.me, gb, true);
        if (isend(gb, (int)(nf * sizeof *gb), 0, TAG_GRAD) != 0)
            return -1;
    }
    return 0;
}

/* Process 0: receives rank j's stats (tag TAG_STATS) or gradients (TAG_GRAD). Returns 0
 * or -1. */
static int recv_result(PrRank *r, int j, int tag)
{
    PrRun *run = r->run;
    size_t want = tag == TAG_STATS ? stats_len(run) * sizeof(double)
                                   : pr_rank_grad_floats(run, j) * sizeof(float);
    void *buf = malloc(want ? want : 1);
    if (!buf || want > (size_t)INT32_MAX) {
        free(buf);
        pr_fail(run, G.me, -1, "out of memory receiving results of rank %d", j);
        return -1;
    }
    MPI_Request req;
    MPI_Status st;
    MPI_Irecv(buf, (int)want, MPI_BYTE, j, tag, G.comm, &req);
    if (wait_req(r, &req, &st, j, "results") != 0)
        return -1;
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    if ((size_t)n != want) {
        free(buf);
        pr_fail(run, G.me, -1, "MPI results of rank %d have %d bytes, expected %zu", j, n,
                want);
        return -1;
    }
    PrRank *rj = &run->rank[j];
    if (tag == TAG_STATS) {
        const double *d = buf;
        size_t nk = (size_t)run->PV * PR_NKINDS;
        rj->busy_ms = d[0];
        rj->peak = (int64_t)d[1];
        for (int m = 0; m < run->M && head_on(run->prog, j); m++)
            run->mb_loss[m] = d[2 + m];
        for (size_t k = 0; k < nk; k++) {
            rj->kind_ms[k] = d[2 + (size_t)run->M + k];
            rj->kind_n[k] = (uint32_t)d[2 + (size_t)run->M + nk + k];
        }
    } else {
        pr_rank_grad_copy(run, j, buf, false);
    }
    free(buf);
    return 0;
}

/* The end of rank me's iteration (several processes): its sends complete, its results
 * go to process 0, which gathers every rank's. Returns 0 or -1. */
static int finish_iteration(PrRank *r)
{
    PrRun *run = r->run;
    publish(r);
    if (G.me != 0 && send_stats(r) != 0) {
        pr_fail(run, G.me, -1, "cannot send results to process 0 over MPI");
        return -1;
    }
    while (G.npend > 0) {
        /* the receiver of a large message must post its receive: watch it */
        Pending p = G.pend[--G.npend];
        if (wait_req(r, &p.req, MPI_STATUS_IGNORE, p.dst, "send completions") != 0)
            return -1;
        free(p.buf);
    }
    if (G.me == 0)
        for (int j = 1; j < run->P; j++) {
            if (recv_result(r, j, TAG_STATS) != 0)
                return -1;
            if (r->iter == 0 && want_grads(run) && recv_result(r, j, TAG_GRAD) != 0)
                return -1;
        }
    if (G.me == 0 && G.replica == 0 && r->iter == 0 && G.dump &&
        run->wl->model && grad_dump(run) != 0) {
        pr_fail(run, G.me, -1, "cannot write %s: %s", G.dump, strerror(errno));
        return -1;
    }
    return 0;
}

/* The generated function of a rank this process runs, then (several processes) the end
 * of its iteration, or (one process) the gradient dump by the last rank to finish. */
static int local_run(PrRank *r)
{
    if (G.np > 1)
        publish(r);
    int rc = G.orig->ranks[r->id].run(r);
    if (rc == 0)
        rc = pr_drain_copies(r);
    if (rc == 0) /* data parallelism: the gradients' mean before they are sent (dp.c) */
        rc = pr_dp_reduce(r);
    if (G.np > 1) {
        if (rc == 0)
            rc = finish_iteration(r);
    } else if (rc == 0 && r->iter == 0 && G.dump && r->run->wl->model &&
               atomic_fetch_add(&G.ranks_done, 1) + 1 == r->run->P) {
        if (grad_dump(r->run) != 0)
            pr_fail(r->run, r->id, -1, "cannot write %s: %s", G.dump, strerror(errno));
    }
    return rc;
}

/* The run function of every rank this process does not run: nothing (its ops run in
 * its own process). */
static int standin_run(PrRank *r)
{
    (void)r;
    return 0;
}

/* ---- data parallelism (docs/runtime.md "Data parallelism", runtime/core/dp.c) ---- */

/* The sum over the D processes of rank r's stage: MPI_Allreduce on the stage's
 * communicator (a sum of doubles whose result MPI gives every process alike). */
static int mpi_allreduce(PrRank *r, double *buf, size_t n)
{
    if (n > (size_t)INT32_MAX ||
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, G.dp_comm) != MPI_SUCCESS) {
        pr_fail(r->run, r->id, -1, "MPI_Allreduce of %zu gradient floats failed", n);
        return -1;
    }
    return 0;
}

/* The shards of the other replicas (pr_dp_shard) into buf: MPI_Allgatherv. */
static int mpi_allgather(PrRank *r, float *buf, size_t n)
{
    int D = pr_dp_degree(G.orig);
    int *cnt = calloc((size_t)D, sizeof *cnt), *at = calloc((size_t)D, sizeof *at);
    int rc = -1;
    if (cnt && at && n <= (size_t)INT32_MAX) {
        for (int d = 0; d < D; d++) {
            size_t lo, hi;
            pr_dp_shard(n, D, d, &lo, &hi);
            at[d] = (int)lo;
            cnt[d] = (int)(hi - lo);
        }
        if (MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, at, MPI_FLOAT,
                           G.dp_comm) == MPI_SUCCESS)
            rc = 0;
    }
    free(cnt);
    free(at);
    if (rc != 0)
        pr_fail(r->run, r->id, -1, "MPI_Allgatherv of %zu parameter floats failed", n);
    return rc;
}

/* With data_parallel D and P x D processes: this process is rank world_me = replica x P
 * + stage (piperun.h pr_dp_rank); comm holds its replica's P processes (ranked by
 * stage), dp_comm its stage's D (ranked by replica). Otherwise comm is MPI_COMM_WORLD.
 * Returns 0 or -1. */
static int dp_split(const PrProgram *prog)
{
    G.comm = MPI_COMM_WORLD;
    G.dp_comm = MPI_COMM_NULL;
    G.me = G.world_me;
    G.np = G.world_np;
    G.replica = 0;
    int P = prog->P, D = pr_dp_degree(prog);
    if (D <= 1 || G.world_np <= 1 || G.world_np != pr_dp_nranks(P, D))
        return 0; /* one process (threaded replicas) or a count pr_run refuses */
    G.replica = pr_dp_replica(P, G.world_me);
    int stage = pr_dp_stage(P, G.world_me);
    if (MPI_Comm_split(MPI_COMM_WORLD, G.replica, stage, &G.comm) != MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, stage, G.replica, &G.dp_comm) != MPI_SUCCESS)
        return -1;
    MPI_Comm_rank(G.comm, &G.me);
    MPI_Comm_size(G.comm, &G.np);
    G.dp = (PrDpOps){G.replica, mpi_allreduce, mpi_allgather};
    return 0;
}

/* ---- the wrapped entry points ----------------------------------------------------------- */

int __wrap_pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res)
{
    if (pr_process_count_check(prog, G.world_np, res) != 0)
        return 1;
    G.orig = prog;
    G.check = o->check && G.replica == 0; /* replica 0's process 0 compares */
    G.dump = getenv("PIPERUN_GRAD_DUMP");
    if (G.dump && !*G.dump)
        G.dump = NULL;
    G.ranks = calloc((size_t)prog->P, sizeof *G.ranks);
    if (!G.ranks) {
        if (res)
            snprintf(res->error, sizeof res->error, "out of memory");
        return 1;
    }
    atomic_store(&G.ranks_done, 0);
    for (int s = 0; s < prog->P; s++) {
        G.ranks[s] = prog->ranks[s];
        bool local = G.np == 1 || s == G.me;
        G.ranks[s].run = local ? local_run : standin_run;
        if (!local)
            for (int w = 0; w < PR_NWORKLOADS; w++)
                G.ranks[s].arena_bytes[w] = G.ranks[s].workspace_bytes[w] = 0;
    }
    pr_transport = G.np > 1 ? &mpi_transport : NULL;
    pr_dp = G.dp_comm != MPI_COMM_NULL ? &G.dp : NULL;
    G.prog = *prog;
    G.prog.ranks = G.ranks;
    PrOptions opt = *o;
    char trace[4096];
    pr_process_options(&opt, G.world_np > 1 ? G.world_me : 0, trace, sizeof trace);
    if (G.world_np > 1 && G.world_me != 0)
        opt.check = false;   /* process 0 compares every process's gradients */
    int rc = __real_pr_run(&G.prog, &opt, res);
    pr_transport = NULL;
    pr_dp = NULL;
    if (rc == 0) {
        for (int i = 0; i < G.npend; i++)
            free(G.pend[i].buf);
        G.npend = 0;
    }
    free(G.ranks);
    G.ranks = NULL;
    return rc;
}

/* Appends s to buf at n (async-signal-safe); returns the new length. */
static size_t sig_puts(char *buf, size_t n, const char *s)
{
    while (*s)
        buf[n++] = *s++;
    return n;
}

/* Appends v >= 0 in decimal to buf at n (async-signal-safe); returns the new length. */
static size_t sig_putu(char *buf, size_t n, int v)
{
    char d[12];
    int k = 0;
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && k < 11);
    while (k)
        buf[n++] = d[--k];
    return n;
}

/* SIGTERM: the launcher stops the job, typically because a process died. Names the
 * processes of this machine that are gone, prints the flight recorder, exits 1.
 * Async-signal-safe: write, kill and pr_flight_write_signal only. */
static void on_term(int sig)
{
    (void)sig;
    char buf[160];
    size_t n = sig_puts(buf, 0, "piperun: process ");
    n = sig_putu(buf, n, G.me);
    n = sig_puts(buf, n, " stopped by the launcher (SIGTERM)\n");
    ssize_t w = write(2, buf, n);
    for (int j = 0; j < G.np; j++)
        if (j != G.me && peer_gone(j)) {
            n = sig_puts(buf, 0, "piperun: peer failure: rank ");
            n = sig_putu(buf, n, j);
            n = sig_puts(buf, n, " (its process) is gone (killed)\n");
            w = write(2, buf, n);
        }
    (void)w;
    pr_flight_write_signal(2);
    _exit(1);
}

/* Exchanges pids and host names, starts the heartbeat thread. Returns 0 or -1. */
static int peers_start(void)
{
    G.pid = calloc((size_t)G.np, sizeof *G.pid);
    G.same_host = calloc((size_t)G.np, sizeof *G.same_host);
    G.last_heard = calloc((size_t)G.np, sizeof *G.last_heard);
    G.peer_beat = calloc((size_t)G.np, sizeof *G.peer_beat);
    char (*hosts)[64] = calloc((size_t)G.np, sizeof *hosts);
    char me[64] = "";
    if (!G.pid || !G.same_host || !G.last_heard || !G.peer_beat || !hosts) {
        free(hosts);
        return -1;
    }
    gethostname(me, sizeof me - 1);
    int pid = (int)getpid();
    MPI_Allgather(&pid, 1, MPI_INT, G.pid, 1, MPI_INT, G.comm);
    MPI_Allgather(me, 64, MPI_CHAR, hosts, 64, MPI_CHAR, G.comm);
    long long now = (long long)(pr_now_ms() * 1e3);
    for (int j = 0; j < G.np; j++) {
        G.same_host[j] = !strncmp(hosts[j], me, 64);
        atomic_store(&G.last_heard[j], now);
    }
    free(hosts);
    if (MPI_Comm_dup(G.comm, &G.beat_comm) != MPI_SUCCESS)
        return -1;
    pthread_mutex_init(&G.beat_mu, NULL);
    pthread_cond_init(&G.beat_cv, NULL);
    if (pthread_create(&G.beat_th, NULL, beat_main, NULL) != 0)
        return -1;
    G.beat_started = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    return 0;
}

static void peers_stop(void)
{
    if (G.beat_started) {
        pthread_mutex_lock(&G.beat_mu);
        G.beat_stop = 1;
        pthread_cond_signal(&G.beat_cv);
        pthread_mutex_unlock(&G.beat_mu);
        pthread_join(G.beat_th, NULL);
        G.beat_started = false;
    }
}

int __wrap_pr_main(const PrProgram *prog, int argc, char **argv)
{
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "piperun: MPI_Init_thread failed\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &G.world_me);
    MPI_Comm_size(MPI_COMM_WORLD, &G.world_np);
    if (dp_split(prog) != 0) {
        fprintf(stderr, "piperun: cannot split the data-parallel communicators\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    if (G.world_np > 1 && provided < MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "piperun: this MPI does not support MPI_THREAD_MULTIPLE (the rank "
                "and heartbeat threads both call MPI)\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    if (G.np > 1 && peers_start() != 0) {
        fprintf(stderr, "piperun: cannot start the heartbeats of process %d\n", G.me);
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    if (G.world_np > 1 && G.world_me != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "piperun: cannot silence stdout of process %d\n", G.world_me);
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    int rc = __real_pr_main(prog, argc, argv);
    fflush(stdout);
    fflush(stderr);
    peers_stop();
    if (G.comm != MPI_COMM_WORLD)
        MPI_Comm_free(&G.comm);
    if (G.dp_comm != MPI_COMM_NULL)
        MPI_Comm_free(&G.dp_comm);
    if (rc == 1 && G.world_np > 1) {
        /* The others may wait for this rank: stop the whole job. */
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    MPI_Finalize();
    return rc;
}
