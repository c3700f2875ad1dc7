/* piperun_mpi.c - one process per rank through MPI for the CPU backend (docs/cuda.md,
 * "Several processes: MPI").
 *
 * The generated program is linked unchanged; the linker routes two calls here:
 *
 *     mpicc -std=c11 -O2 -I<inc> -o NAME DIR/main.c DIR/rank_K.c... -Wl,--wrap=pr_main -Wl,--wrap=pr_run \
 *           <lib>/libpiperun_mpi.a <lib>/libpiperun.a -lopenblas -lpthread -lm
 *     mpirun -np P ./NAME [options]
 *
 * __wrap_pr_main initialises MPI (MPI_THREAD_SERIALIZED), silences stdout on every
 * process but 0, runs the real pr_main and finalises (or MPI_Abort on a failure, so a
 * failing rank stops the whole job). __wrap_pr_run runs the real threaded runtime
 * (piperun.c) with a copy of the program in which, on process k:
 *   - rank k runs its generated function (wrapped: afterwards it waits for its copy
 *     threads and tells the proxy that the iteration's program is over);
 *   - every other rank is a stand-in without arena; the thread of the first of them
 *     (the proxy) is the only thread that calls MPI. Each iteration it moves what rank
 *     k's pr_send put on the in-process channel k->j to process j (MPI_Isend: header +
 *     payload), receives what process j sends (MPI_Iprobe/MPI_Recv per source, so
 *     MPI's non-overtaking order keeps the per-pair issue order of the comm lowering)
 *     onto channel j->k for rank k's pr_recv, and gathers on process 0 what the
 *     summary needs: busy time, measured peak, per-(vstage, kind) op times, the head's
 *     micro-batch losses and, in iteration 1 with --check, the gradients of every
 *     slice. Process 0 therefore prints the same summary as the threaded run.
 * With one process (no mpirun, or -np 1) the run is the plain threaded one.
 *
 * Options that write files or compare gradients act on process 0 only: the others run
 * without --check, --reference and --profile, and write --trace T as T.rankK (their own
 * rank's ops; the trace of process 0 shows rank 0's). The synthetic workload's p2p time
 * counts from the arrival at the receiving process.
 *
 * Testing aid: PIPERUN_GRAD_DUMP=FILE writes, after iteration 1, every gradient tensor
 * as text ("name count" then one %.9g value a line) from process 0 (or the single
 * process), so that tests can compare a multi-process run with the threaded one.
 *
 * Errors: a peer that sends nothing for --timeout seconds fails the run with a
 * watchdog message naming the rank it waits for; a message that does not fit the
 * program fails it too ("MPI message ..."). One run per process (state is global). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "piperun_internal.h"

enum { TAG_DATA = 1, TAG_STATS = 2, TAG_GRAD = 3 };

/* Header in front of every data message: the message id, checked on receipt. */
#define HDR 8

int __real_pr_main(const PrProgram *prog, int argc, char **argv);
int __real_pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res);
int __wrap_pr_main(const PrProgram *prog, int argc, char **argv);
int __wrap_pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res);

/* One MPI_Isend in flight and the buffer it owns. */
typedef struct Pending {
    MPI_Request req;
    void *buf;
} Pending;

static struct {
    int me, np;                /* MPI rank and size */
    const PrProgram *orig;     /* the generated program */
    PrProgram prog;            /* its copy with the run functions replaced */
    PrRankDesc *ranks;         /* [P] */
    int proxy;                 /* the stand-in rank whose thread calls MPI, or -1 */
    int *out_n, *in_n;         /* [P] messages per iteration me -> j, j -> me */
    atomic_int local_done;     /* iteration + 1 when rank me's program and copies ended */
    atomic_int ranks_done;     /* one process: ranks that ended iteration 1 */
    const char *dump;          /* PIPERUN_GRAD_DUMP */
    bool check;                /* --check as given: every process sends its gradients to
                                  process 0, although only process 0 compares them */
} G;

static double rank_now(const PrRun *run)
{
    return pr_now_ms() - run->t_start;
}

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
}

static bool head_on(const PrProgram *g, int rank)
{
    return g->vstages[g->P * g->V - 1].rank == rank;
}

/* ---- gradients --------------------------------------------------------------------- */

/* Floats of the gradients of every slice on rank s (what it sends in iteration 1). */
static size_t grad_floats(const PrRun *run, int s)
{
    size_t n = 0;
    for (int v = 0; v < run->PV; v++) {
        if (run->prog->vstages[v].rank != s)
            continue;
        for (int i = 0; i < mlp_param_count(run->model); i++)
            if (mlp_param_in_slice(run->model, i, &run->slice[v])) {
                size_t k;
                mlp_param(run->model, i, NULL, NULL, NULL, &k);
                n += k;
            }
    }
    return n;
}

/* Copies rank s's gradients to buf (pack) or from buf into the model (!pack). */
static void grad_copy(PrRun *run, int s, float *buf, bool pack)
{
    for (int v = 0; v < run->PV; v++) {
        if (run->prog->vstages[v].rank != s)
            continue;
        for (int i = 0; i < mlp_param_count(run->model); i++)
            if (mlp_param_in_slice(run->model, i, &run->slice[v])) {
                float *g;
                size_t k;
                mlp_param(run->model, i, NULL, NULL, &g, &k);
                if (pack)
                    memcpy(buf, g, k * sizeof *g);
                else
                    memcpy(g, buf, k * sizeof *g);
                buf += k;
            }
    }
}

/* PIPERUN_GRAD_DUMP: every tensor of the model. Returns 0 or -1. */
static int grad_dump(PrRun *run)
{
    FILE *f = fopen(G.dump, "w");
    if (!f)
        return -1;
    for (int i = 0; i < mlp_param_count(run->model); i++) {
        const char *name;
        float *g;
        size_t k;
        mlp_param(run->model, i, &name, NULL, &g, &k);
        fprintf(f, "%s %zu\n", name, k);
        for (size_t j = 0; j < k; j++)
            fprintf(f, "%.9g\n", (double)g[j]);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static bool want_grads(const PrRun *run)
{
    return run->opt.workload == PR_MLP && (G.check || G.dump);
}

/* ---- the local rank ------------------------------------------------------------------ */

/* Waits until rank r's copy threads have drained their queues. Returns 0 or -1. */
static int drain_copies(PrRank *r)
{
    PrRun *run = r->run;
    double deadline = pr_now_ms() + run->opt.timeout_s * 1e3;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        bool idle = r->q[0].head == r->q[0].tail && r->q[1].head == r->q[1].tail;
        pthread_mutex_unlock(&r->mu);
        if (idle)
            return 0;
        if (atomic_load(&run->failed))
            return -1;
        if (pr_now_ms() > deadline) {
            pr_fail(run, r->id, -1, "watchdog: stuck %.1f s waiting for the copy streams",
                    run->opt.timeout_s);
            return -1;
        }
        nap_us(100);
    }
}

/* The generated function of a rank this process runs, then the hand-over to the proxy
 * (several processes) or the gradient dump (one process, the last rank to finish). */
static int local_run(PrRank *r)
{
    int rc = G.orig->ranks[r->id].run(r);
    if (rc == 0)
        rc = drain_copies(r);
    if (G.np > 1) {
        atomic_store(&G.local_done, r->iter + 1);
    } else if (rc == 0 && r->iter == 0 && G.dump && r->run->opt.workload == PR_MLP &&
               atomic_fetch_add(&G.ranks_done, 1) + 1 == r->run->P) {
        if (grad_dump(r->run) != 0)
            pr_fail(r->run, r->id, -1, "cannot write %s: %s", G.dump, strerror(errno));
    }
    return rc;
}

/* ---- the proxy ------------------------------------------------------------------------- */

typedef struct Proxy {
    PrRun *run;
    Pending *pend;
    int npend, cap;
    int *out_left, *in_left;   /* [P] */
    bool *stats_left, *grads_left; /* [P] process 0: what it still waits for */
    bool sent_stats;
    double last_progress;
} Proxy;

static int isend(Proxy *x, void *buf, int bytes, int dst, int tag)
{
    if (x->npend == x->cap) {
        int cap = x->cap ? 2 * x->cap : 16;
        Pending *p = realloc(x->pend, (size_t)cap * sizeof *p);
        if (!p) {
            free(buf);
            return -1;
        }
        x->pend = p;
        x->cap = cap;
    }
    Pending *p = &x->pend[x->npend];
    p->buf = buf;
    if (MPI_Isend(buf, bytes, MPI_BYTE, dst, tag, MPI_COMM_WORLD, &p->req) != MPI_SUCCESS) {
        free(buf);
        return -1;
    }
    x->npend++;
    return 0;
}

/* Moves what rank me queued for rank j onto MPI. Returns messages moved, or -1. */
static int pump_out(Proxy *x, int j)
{
    PrRun *run = x->run;
    int moved = 0;
    for (;;) {
        pthread_mutex_lock(&run->mu);
        PrChan *c = &run->chan[(size_t)G.me * (size_t)run->P + (size_t)j];
        PrNode *nd = c->head;
        if (nd) {
            c->head = nd->next;
            if (!c->head)
                c->tail = NULL;
        }
        pthread_mutex_unlock(&run->mu);
        if (!nd)
            return moved;
        size_t pay = nd->payload ? run->io_bytes : 0;
        unsigned char *buf = malloc(HDR + pay);
        if (!buf || HDR + pay > (size_t)INT32_MAX) {
            free(buf);
            free(nd->payload);
            free(nd);
            pr_fail(run, G.me, -1, "out of memory sending message to rank %d over MPI", j);
            return -1;
        }
        uint32_t id = nd->msg;
        memset(buf, 0, HDR);
        memcpy(buf, &id, sizeof id);
        if (pay)
            memcpy(buf + HDR, nd->payload, pay);
        free(nd->payload);
        free(nd);
        if (isend(x, buf, (int)(HDR + pay), j, TAG_DATA) != 0) {
            pr_fail(run, G.me, -1, "MPI_Isend of message %u to rank %d failed", id, j);
            return -1;
        }
        x->out_left[j]--;
        moved++;
    }
}

/* Receives one message from process j onto the channel j -> me if one is there.
 * Returns 1, 0 (nothing yet) or -1. */
static int pump_in(Proxy *x, int j)
{
    PrRun *run = x->run;
    int flag = 0, n = 0;
    MPI_Status st;
    MPI_Iprobe(j, TAG_DATA, MPI_COMM_WORLD, &flag, &st);
    if (!flag)
        return 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    unsigned char *buf = malloc(n > HDR ? (size_t)n : HDR);
    PrNode *nd = malloc(sizeof *nd);
    if (!buf || !nd) {
        free(buf);
        free(nd);
        pr_fail(run, G.me, -1, "out of memory receiving from rank %d over MPI", j);
        return -1;
    }
    MPI_Recv(buf, n, MPI_BYTE, j, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    uint32_t id;
    memcpy(&id, buf, sizeof id);
    const PrProgram *g = run->prog;
    size_t pay = n > HDR ? (size_t)n - HDR : 0;
    bool fits = n >= HDR && id < g->nmsgs && g->msgs[id].src == j && g->msgs[id].dst == G.me;
    if (fits && pay) {
        fits = (g->msgs[id].payload == PR_PAY_ACT || g->msgs[id].payload == PR_PAY_GRAD) &&
               pay == run->io_bytes;
    }
    if (!fits) {
        free(buf);
        free(nd);
        pr_fail(run, G.me, -1, "MPI message from rank %d (id %u, %d bytes) does not fit the "
                "program", j, id, n);
        return -1;
    }
    void *payload = NULL;
    if (pay) {
        memmove(buf, buf + HDR, pay);   /* the runtime frees the payload with free() */
        payload = buf;
    } else {
        free(buf);
    }
    *nd = (PrNode){id, payload, rank_now(run), NULL};
    pthread_mutex_lock(&run->mu);
    PrChan *c = &run->chan[(size_t)j * (size_t)run->P + (size_t)G.me];
    if (c->tail)
        c->tail->next = nd;
    else
        c->head = nd;
    c->tail = nd;
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
    x->in_left[j]--;
    return 1;
}

/* Stats of rank me, as doubles: busy_ms, peak, M losses, PV*NK op times, PV*NK counts. */
static size_t stats_len(const PrRun *run)
{
    return 2 + (size_t)run->M + 2 * (size_t)run->PV * PR_NKINDS;
}

static int send_stats(Proxy *x)
{
    PrRun *run = x->run;
    PrRank *r = &run->rank[G.me];
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
    if (isend(x, d, (int)(n * sizeof *d), 0, TAG_STATS) != 0)
        return -1;
    if (r->iter == 0 && want_grads(run)) {
        size_t nf = grad_floats(run, G.me);
        float *gb = malloc((nf ? nf : 1) * sizeof *gb);
        if (!gb || nf * sizeof *gb > (size_t)INT32_MAX) {
            free(gb);
            return -1;
        }
        grad_copy(run, G.me, gb, true);
        if (isend(x, gb, (int)(nf * sizeof *gb), 0, TAG_GRAD) != 0)
            return -1;
    }
    return 0;
}

/* Process 0: takes rank j's stats (tag TAG_STATS) or gradients if they are there.
 * Returns 1, 0 or -1. */
static int recv_result(Proxy *x, int j, int tag)
{
    PrRun *run = x->run;
    int flag = 0, n = 0;
    MPI_Status st;
    MPI_Iprobe(j, tag, MPI_COMM_WORLD, &flag, &st);
    if (!flag)
        return 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    size_t want = tag == TAG_STATS ? stats_len(run) * sizeof(double)
                                   : grad_floats(run, j) * sizeof(float);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf) {
        pr_fail(run, G.me, -1, "out of memory receiving results of rank %d", j);
        return -1;
    }
    MPI_Recv(buf, n, MPI_BYTE, j, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if ((size_t)n != want) {
        free(buf);
        pr_fail(run, G.me, -1, "MPI results of rank %d have %d bytes, expected %zu", j, n,
                want);
        return -1;
    }
    PrRank *r = &run->rank[j];
    if (tag == TAG_STATS) {
        const double *d = buf;
        size_t nk = (size_t)run->PV * PR_NKINDS;
        r->busy_ms = d[0];
        r->peak = (int64_t)d[1];
        for (int m = 0; m < run->M && head_on(run->prog, j); m++)
            run->mb_loss[m] = d[2 + m];
        for (size_t k = 0; k < nk; k++) {
            r->kind_ms[k] = d[2 + (size_t)run->M + k];
            r->kind_n[k] = (uint32_t)d[2 + (size_t)run->M + nk + k];
        }
        x->stats_left[j] = false;
    } else {
        grad_copy(run, j, buf, false);
        x->grads_left[j] = false;
    }
    free(buf);
    return 1;
}

/* Completes finished sends. Returns how many completed. */
static int reap(Proxy *x)
{
    int done = 0;
    for (int i = 0; i < x->npend;) {
        int flag = 0;
        MPI_Test(&x->pend[i].req, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            free(x->pend[i].buf);
            x->pend[i] = x->pend[--x->npend];
            done++;
        } else {
            i++;
        }
    }
    return done;
}

/* One iteration of the proxy. Returns 0 or -1. */
static int proxy_iteration(Proxy *x, int it)
{
    PrRun *run = x->run;
    int P = run->P;
    for (int j = 0; j < P; j++) {
        x->out_left[j] = G.out_n[j];
        x->in_left[j] = G.in_n[j];
        x->stats_left[j] = G.me == 0 && j != 0;
        x->grads_left[j] = G.me == 0 && j != 0 && it == 0 && want_grads(run);
    }
    x->sent_stats = G.me == 0;
    x->last_progress = pr_now_ms();
    for (;;) {
        if (atomic_load(&run->failed))
            return -1;
        int progress = 0, left = 0;
        bool local_over = atomic_load(&G.local_done) == it + 1;
        for (int j = 0; j < P; j++) {
            if (j == G.me)
                continue;
            int k = pump_out(x, j);
            if (k < 0)
                return -1;
            progress += k;
            /* a rank that stopped sending (PIPERUN_FAULT drop) sends no more */
            if (local_over && x->out_left[j] > 0)
                x->out_left[j] = 0;
            while (x->in_left[j] > 0) {
                int got = pump_in(x, j);
                if (got < 0)
                    return -1;
                if (!got)
                    break;
                progress++;
            }
            for (int tag = TAG_STATS; tag <= TAG_GRAD; tag++) {
                bool *flagp = tag == TAG_STATS ? &x->stats_left[j] : &x->grads_left[j];
                if (!*flagp)
                    continue;
                int got = recv_result(x, j, tag);
                if (got < 0)
                    return -1;
                progress += got;
            }
            left += x->out_left[j] + x->in_left[j] + x->stats_left[j] + x->grads_left[j];
        }
        if (!x->sent_stats && local_over) {
            if (send_stats(x) != 0) {
                pr_fail(run, G.me, -1, "cannot send results to process 0 over MPI");
                return -1;
            }
            x->sent_stats = true;
            progress++;
        }
        progress += reap(x);
        left += x->npend + !local_over + !x->sent_stats;
        if (!left)
            break;
        if (progress) {
            x->last_progress = pr_now_ms();
            continue;
        }
        if (pr_now_ms() - x->last_progress > run->opt.timeout_s * 1e3) {
            int who = -1;
            const char *what = "messages";
            for (int j = 0; j < P && who < 0; j++)
                if (x->in_left[j] > 0)
                    who = j;
                else if (x->stats_left[j] || x->grads_left[j])
                    who = j, what = "results";
            if (who >= 0)
                pr_fail(run, G.me, -1, "watchdog: stuck %.1f s waiting for MPI %s from rank %d "
                        "(iteration %d)", run->opt.timeout_s, what, who, it + 1);
            else
                pr_fail(run, G.me, -1, "watchdog: stuck %.1f s in MPI sends (iteration %d)",
                        run->opt.timeout_s, it + 1);
            return -1;
        }
        nap_us(50);
    }
    if (G.me == 0 && it == 0 && G.dump && run->opt.workload == PR_MLP &&
        grad_dump(run) != 0) {
        pr_fail(run, G.me, -1, "cannot write %s: %s", G.dump, strerror(errno));
        return -1;
    }
    return 0;
}

/* The run function of every rank this process does not run. */
static int standin_run(PrRank *r)
{
    if (r->id != G.proxy)
        return 0;
    PrRun *run = r->run;
    int P = run->P;
    Proxy x = {.run = run};
    x.out_left = calloc((size_t)P, sizeof *x.out_left);
    x.in_left = calloc((size_t)P, sizeof *x.in_left);
    x.stats_left = calloc((size_t)P, sizeof *x.stats_left);
    x.grads_left = calloc((size_t)P, sizeof *x.grads_left);
    int rc = -1;
    if (!x.out_left || !x.in_left || !x.stats_left || !x.grads_left)
        pr_fail(run, G.me, -1, "out of memory in the MPI proxy");
    else
        rc = proxy_iteration(&x, r->iter);
    /* On failure the job is aborted; sends still in flight are left to MPI_Abort. */
    for (int i = 0; rc == 0 && i < x.npend; i++)
        free(x.pend[i].buf);
    free(x.pend);
    free(x.out_left);
    free(x.in_left);
    free(x.stats_left);
    free(x.grads_left);
    return rc;
}

/* ---- the wrapped entry points ----------------------------------------------------------- */

int __wrap_pr_run(const PrProgram *prog, const PrOptions *o, PrResult *res)
{
    if (!prog || prog->P < 1 || (G.np > 1 && G.np != prog->P)) {
        if (res) {
            memset(res, 0, sizeof *res);
            snprintf(res->error, sizeof res->error,
                     "started with %d MPI processes but the program has %d ranks; run "
                     "`mpirun -np %d`", G.np, prog ? prog->P : 0, prog ? prog->P : 0);
        }
        return 1;
    }
    G.orig = prog;
    G.check = o->check;
    G.dump = getenv("PIPERUN_GRAD_DUMP");
    if (G.dump && !*G.dump)
        G.dump = NULL;
    G.ranks = calloc((size_t)prog->P, sizeof *G.ranks);
    G.out_n = calloc((size_t)prog->P, sizeof *G.out_n);
    G.in_n = calloc((size_t)prog->P, sizeof *G.in_n);
    if (!G.ranks || !G.out_n || !G.in_n) {
        free(G.ranks);
        free(G.out_n);
        free(G.in_n);
        if (res)
            snprintf(res->error, sizeof res->error, "out of memory");
        return 1;
    }
    atomic_store(&G.local_done, 0);
    atomic_store(&G.ranks_done, 0);
    G.proxy = -1;
    for (int s = 0; s < prog->P; s++) {
        G.ranks[s] = prog->ranks[s];
        bool local = G.np == 1 || s == G.me;
        G.ranks[s].run = local ? local_run : standin_run;
        if (!local) {
            for (int w = 0; w < PR_NWORKLOADS; w++)
                G.ranks[s].arena_bytes[w] = 0;
            if (G.proxy < 0)
                G.proxy = s;
        }
    }
    for (uint32_t i = 0; i < prog->nmsgs; i++) {
        const PrMsg *m = &prog->msgs[i];
        if (m->src == G.me && m->dst >= 0 && m->dst < prog->P)
            G.out_n[m->dst]++;
        if (m->dst == G.me && m->src >= 0 && m->src < prog->P)
            G.in_n[m->src]++;
    }
    G.prog = *prog;
    G.prog.ranks = G.ranks;
    PrOptions opt = *o;
    char trace[4096];
    if (G.np > 1 && G.me != 0) {
        opt.check = false;
        opt.reference = false;
        opt.profile = false;
        opt.profile_out = NULL;
        if (opt.trace) {
            snprintf(trace, sizeof trace, "%s.rank%d", opt.trace, G.me);
            opt.trace = trace;
        }
    }
    int rc = __real_pr_run(&G.prog, &opt, res);
    free(G.ranks);
    free(G.out_n);
    free(G.in_n);
    G.ranks = NULL;
    G.out_n = G.in_n = NULL;
    return rc;
}

int __wrap_pr_main(const PrProgram *prog, int argc, char **argv)
{
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "piperun: MPI_Init_thread failed\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &G.me);
    MPI_Comm_size(MPI_COMM_WORLD, &G.np);
    if (provided < MPI_THREAD_SERIALIZED) {
        fprintf(stderr, "piperun: this MPI does not support MPI_THREAD_SERIALIZED\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    if (G.np > 1 && G.me != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "piperun: cannot silence stdout of process %d\n", G.me);
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    int rc = __real_pr_main(prog, argc, argv);
    fflush(stdout);
    fflush(stderr);
    if (rc == 1 && G.np > 1) {
        /* The others may wait for this rank: stop the whole job. */
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    MPI_Finalize();
    return rc;
}
