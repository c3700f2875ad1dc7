/* exact.c - `pipec tune --exact`: the order of a file's ops that minimises the makespan
 * within its memory budget, as a mixed-integer program (Qi et al., Zero Bubble Pipeline
 * Parallelism, ICLR 2024, §3: start-time variables, pairwise order binaries, big-M
 * stream constraints, memory over the order binaries) solved with COIN-OR CBC through its
 * C interface. The formulation, with the valid inequalities and the symmetry breaking
 * that let the solver prove optimality, is docs/tune.md "Exact search".
 *
 * Every rule comes from the op table (opsem.h) and the memory walk (memory.h); the order
 * found is simulated again (sim_makespan) and walked (mem_walk), and a simulated makespan
 * above the program's is reported as an internal error: a rule the program missed. */
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmds.h"
#include "driver.h"
#include "exact.h"
#include "human.h"
#include "memory.h"
#include "opindex.h"
#include "opsem.h"
#include "print.h"
#include "sim.h"
#include "util.h"

#ifdef PIPEC_HAVE_CBC
#include <coin/Cbc_C_Interface.h>
#include <dlfcn.h>
#endif

#define EXACT_PACKAGE "coinor-libcbc-dev"

#ifdef PIPEC_HAVE_CBC
#ifndef PIPEC_CBC_SONAME
#define PIPEC_CBC_SONAME "libCbcSolver.so.3"
#endif

/* The solver's functions, loaded on first use (cbc_load): linked in, CBC and the
 * libraries it pulls in (CLP, BLAS, LAPACK, the C++ runtime) cost every pipec process
 * about 20 ms of loading and relocation, most of a `check` of a 100k-op schedule
 * (docs/performance.md "The compiler at scale"). Only `tune --exact` calls them. */
#define CBC_FUNCS(X)                                                                       \
    X(Cbc_newModel) X(Cbc_deleteModel) X(Cbc_setLogLevel) X(Cbc_loadProblem)              \
    X(Cbc_setInteger) X(Cbc_setParameter) X(Cbc_setMaximumSeconds) X(Cbc_getNumCols)     \
    X(Cbc_solve) X(Cbc_bestSolution) X(Cbc_isProvenOptimal) X(Cbc_isSecondsLimitReached) \
    X(Cbc_getBestPossibleObjValue)
#define CBC_PTR(name) __typeof__(&name) name;
static struct {
    CBC_FUNCS(CBC_PTR)
} cbc_fn;
#undef CBC_PTR

/* Loads the solver's library and its functions once. Returns false (and says why on
 * stderr once) when the library or one of its functions is missing. */
static bool cbc_load(void)
{
    static int state; /* 0 not tried, 1 loaded, -1 failed */
    if (state)
        return state > 0;
    state = -1;
    void *h = dlopen(PIPEC_CBC_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "pipec tune: cannot load the COIN-OR CBC solver: %s\n", dlerror());
        return false;
    }
#define CBC_SYM(name)                                                                      \
    if (!(*(void **)&cbc_fn.name = dlsym(h, #name))) {                                     \
        fprintf(stderr, "pipec tune: the COIN-OR CBC solver %s lacks %s\n", PIPEC_CBC_SONAME, \
                #name);                                                                    \
        return false;                                                                      \
    }
    CBC_FUNCS(CBC_SYM)
#undef CBC_SYM
    state = 1;
    return true;
}

/* From here on the solver's functions are called through cbc_fn. */
#define Cbc_newModel cbc_fn.Cbc_newModel
#define Cbc_deleteModel cbc_fn.Cbc_deleteModel
#define Cbc_setLogLevel cbc_fn.Cbc_setLogLevel
#define Cbc_loadProblem cbc_fn.Cbc_loadProblem
#define Cbc_setInteger cbc_fn.Cbc_setInteger
#define Cbc_setParameter cbc_fn.Cbc_setParameter
#define Cbc_setMaximumSeconds cbc_fn.Cbc_setMaximumSeconds
#define Cbc_getNumCols cbc_fn.Cbc_getNumCols
#define Cbc_solve cbc_fn.Cbc_solve
#define Cbc_bestSolution cbc_fn.Cbc_bestSolution
#define Cbc_isProvenOptimal cbc_fn.Cbc_isProvenOptimal
#define Cbc_isSecondsLimitReached cbc_fn.Cbc_isSecondsLimitReached
#define Cbc_getBestPossibleObjValue cbc_fn.Cbc_getBestPossibleObjValue
#endif

bool exact_available(void)
{
#ifdef PIPEC_HAVE_CBC
    return cbc_load();
#else
    return false;
#endif
}

static const char *const status_name[] = {"optimal", "feasible", "infeasible", "timeout"};

#ifdef PIPEC_HAVE_CBC

/* One op of the program: its rank, position in the file's list, stream and memory role
 * (op_sem), duration (ms), memory change in the walk (bytes allocated at its start,
 * freed at its end) and its time window. */
typedef struct XOp {
    int32_t rank;
    uint32_t pos;
    uint8_t kind;
    uint8_t stream;       /* Stream */
    uint8_t role;         /* OpMemRole */
    int32_t v;
    uint32_t mb;
    double d, alloc, freed;
    double head, tail;    /* longest path before its start / after its end, ms */
    uint32_t ntopo_in;
} XOp;

typedef struct XEdge {
    uint32_t from, to;
    double lag;           /* to starts >= from's start + lag */
    bool sym;             /* a symmetry-breaking order, not a rule of the schedule */
} XEdge;

typedef struct Model {
    const Pipeline *p;
    OpIndex *idx;
    XOp *op;
    uint32_t n;
    uint32_t *off;        /* [P+1]: rank s holds ops off[s]..off[s+1]-1 */
    XEdge *e;
    uint32_t ne, ecap;
    uint64_t *reach;      /* n x words bits: reach[i] has j when i must precede j */
    uint32_t words;
    int *ycol;            /* [pair index within a rank] column of y(i before j), i < j */
    uint64_t *yoff;       /* [P]: start of rank s's pairs in ycol */
    double ub, lb0;
} Model;

static void add_edge(Model *m, uint32_t from, uint32_t to, double lag, bool sym)
{
    if (m->ne == m->ecap) {
        m->ecap = m->ecap ? 2 * m->ecap : 256;
        m->e = xrealloc(m->e, m->ecap * sizeof *m->e);
    }
    m->e[m->ne++] = (XEdge){from, to, lag, sym};
}

static bool reaches(const Model *m, uint32_t i, uint32_t j)
{
    return (m->reach[(size_t)i * m->words + j / 64] >> (j % 64)) & 1u;
}

/* The column of y for ops i < j of one rank (both global ids). */
static int ycol(const Model *m, int32_t s, uint32_t i, uint32_t j)
{
    uint64_t n = m->off[s + 1] - m->off[s], a = i - m->off[s], b = j - m->off[s];
    return m->ycol[m->yoff[s] + a * n + b];
}

static void model_free(Model *m)
{
    opindex_free(m->idx);
    free(m->op);
    free(m->off);
    free(m->e);
    free(m->reach);
    free(m->ycol);
    free(m->yoff);
}

/* The global id of op (kind, v, mb), or UINT32_MAX when absent. */
static uint32_t find(const Model *m, OpKind k, int32_t v, uint32_t mb)
{
    return opindex_global(m->idx, m->off, k, v, mb);
}

/* Where host_link_ranks was set: the pipeline's costs block, the device's field, or the
 * pipeline. */
static Loc link_ranks_loc(const Pipeline *p)
{
    if ((p->costs.set & ~p->costs.derived) & (1u << COST_HOST_LINK_RANKS))
        return p->costs.loc;
    const Field *f = p->device ? field_find(p->device->fields, p->device->nfields,
                                            "host_link_ranks")
                               : NULL;
    return f ? f->loc : p->loc;
}

/* Reads p's ops, durations, memory changes and waits. Returns false after an error for
 * what the program does not model: an overlapped recompute (RO; its time depends on the
 * op listed after it, docs/semantics.md "Overlapped recomputation"), or host transfers
 * on a link several ranks share (their times depend on each other's overlap,
 * docs/simulator.md "Shared host links"). */
static bool model_ops(Diag *d, Model *m)
{
    const Pipeline *p = m->p;
    m->idx = opindex_build(p);
    m->off = xcalloc((size_t)p->P + 1, sizeof *m->off);
    for (int32_t s = 0; s < p->P; s++)
        m->off[s + 1] = m->off[s] + p->stages[s].n;
    m->n = m->off[p->P];
    m->op = xcalloc(m->n ? m->n : 1, sizeof *m->op);
    /* the simulator's rule for a shared link (sim.c, prepare) */
    double nl = ir_cost(p, 0, 0, COST_HOST_LINK_RANKS);
    bool shared = nl >= 2 && p->P > 1;
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *so = &p->stages[s];
        double *alloc = xcalloc(so->n + 1, sizeof *alloc);
        double *freed = xcalloc(so->n + 1, sizeof *freed);
        mem_walk_ops(p, m->idx, s, alloc, freed);
        for (uint32_t i = 0; i < so->n; i++) {
            const Op *o = &so->ops[i];
            char nm[48];
            bool refuse = true;
            if (o->kind == OP_RO)
                diag_error(d, o->loc, DIAG_LIMIT,
                           "tune --exact does not model %s: an overlapped recompute's time "
                           "depends on the op listed after it (it models F, B, W, R, SO, SI, "
                           "OG and LW)",
                           op_name(nm, sizeof nm, (OpKind)o->kind, o->mb, o->chunk));
            else if (shared && op_sem[o->kind].stream != STREAM_COMPUTE)
                diag_error(d, link_ranks_loc(p), DIAG_LIMIT,
                           "tune --exact cannot model host_link_ranks %g: the transfers of "
                           "ranks sharing a host link share its bandwidth, so their times "
                           "depend on each other (%s is one); use host_link_ranks 1",
                           nl, op_name(nm, sizeof nm, (OpKind)o->kind, o->mb, o->chunk));
            else
                refuse = false;
            if (refuse) {
                free(alloc);
                free(freed);
                return false;
            }
            XOp *x = &m->op[m->off[s] + i];
            OpCosts c;
            opsem_costs(p, s, o->chunk, &c);
            x->rank = s;
            x->pos = i;
            x->kind = o->kind;
            x->stream = (uint8_t)op_sem[o->kind].stream;
            x->role = op_sem[o->kind].mem;
            x->v = ir_vstage(p, s, o->chunk);
            x->mb = o->mb;
            unsigned has = OP_IS_CHUNKWIDE(o->kind) ? 0 : mem_vm_has(m->idx, x->v, o->mb);
            double moved = opsem_moved((OpKind)o->kind, &c, alloc[i], freed[i]);
            x->d = opsem_duration((OpKind)o->kind, &c, has, moved);
            x->alloc = alloc[i];
            x->freed = freed[i];
        }
        free(alloc);
        free(freed);
    }
    /* The waits of docs/spec.md "Dependencies" (op_sem rows) and the file's dep lines. */
    int32_t PV = p->P * p->V;
    for (uint32_t j = 0; j < m->n; j++) {
        const XOp *x = &m->op[j];
        const OpSem *sem = &op_sem[x->kind];
        for (int w = 0; w < sem->nwait; w++) {
            int32_t v = x->v + sem->wait[w].dv;
            if (v < 0 || v >= PV)
                continue;
            uint32_t i = find(m, (OpKind)sem->wait[w].kind, v,
                              OP_IS_CHUNKWIDE(sem->wait[w].kind) ? 0 : x->mb);
            if (i == UINT32_MAX)
                continue;
            double p2p = m->op[i].rank != x->rank ? ir_cost(p, x->rank, 0, COST_P2P) : 0;
            add_edge(m, i, j, m->op[i].d + p2p, false);
        }
        /* OG waits for the last-listed B or W of its chunk: on the one compute stream
         * that is the last of them to end, so it waits for every one. */
        if (sem->waits_last_bw)
            for (uint32_t i = m->off[x->rank]; i < m->off[x->rank + 1]; i++)
                if (op_backward(m->op[i].kind) && m->op[i].v == x->v)
                    add_edge(m, i, j, m->op[i].d, false);
    }
    for (uint32_t k = 0; k < p->ndeps; k++) {
        const Dep *dp = &p->deps[k];
        uint32_t i = find(m, (OpKind)dp->from.kind, ir_vstage(p, dp->from.stage, dp->from.chunk),
                          dp->from.mb);
        uint32_t j = find(m, (OpKind)dp->to.kind, ir_vstage(p, dp->to.stage, dp->to.chunk),
                          dp->to.mb);
        if (i == UINT32_MAX || j == UINT32_MAX)
            continue;
        double p2p = m->op[i].rank != m->op[j].rank ? ir_cost(p, m->op[j].rank, 0, COST_P2P) : 0;
        add_edge(m, i, j, m->op[i].d + p2p, false);
    }
    return true;
}

/* Symmetry breaking (docs/tune.md "Exact search"): costs depend on (rank, chunk) only,
 * so when every micro-batch of each virtual stage has the same optional ops and the file
 * has no dep lines, the ops of one kind on a virtual stage v can run in micro-batch
 * order: giving the i-th slot of each kind to micro-batch i keeps every wait (the i-th
 * slot waits for i distinct producers, so for the i-th producer slot) and every memory
 * change. SO and SI run on their own streams, one per rank, so the same holds for them. */
static void model_symmetry(Model *m)
{
    const Pipeline *p = m->p;
    if (p->ndeps)
        return;
    int32_t PV = p->P * p->V;
    for (int32_t v = 0; v < PV; v++) {
        unsigned has0 = mem_vm_has(m->idx, v, 0);
        for (int32_t mb = 1; mb < p->M; mb++)
            if (mem_vm_has(m->idx, v, (uint32_t)mb) != has0)
                return; /* the argument relabels neighbouring stages alike */
    }
    for (int32_t v = 0; v < PV; v++) {
        static const OpKind kinds[] = {OP_F, OP_B, OP_W, OP_R, OP_SO, OP_SI};
        for (size_t k = 0; k < ARRAY_LEN(kinds); k++)
            for (int32_t mb = 0; mb + 1 < p->M; mb++) {
                uint32_t i = find(m, kinds[k], v, (uint32_t)mb);
                uint32_t j = find(m, kinds[k], v, (uint32_t)mb + 1);
                if (i != UINT32_MAX && j != UINT32_MAX)
                    add_edge(m, i, j, m->op[i].d, true);
            }
    }
}

/* Topological order of the edges, heads and tails (longest paths), the reachability
 * bits. Returns false on a cycle (which check rejects before). */
static bool model_paths(Model *m)
{
    uint32_t n = m->n;
    uint32_t *order = xmalloc((n ? n : 1) * sizeof *order);
    uint32_t *start = xcalloc((size_t)n + 1, sizeof *start);
    uint32_t *adj = xmalloc((m->ne ? m->ne : 1) * sizeof *adj);
    for (uint32_t k = 0; k < m->ne; k++) {
        start[m->e[k].from + 1]++;
        m->op[m->e[k].to].ntopo_in++;
    }
    for (uint32_t i = 0; i < n; i++)
        start[i + 1] += start[i];
    uint32_t *fill = xmalloc(((size_t)n + 1) * sizeof *fill);
    memcpy(fill, start, ((size_t)n + 1) * sizeof *fill);
    for (uint32_t k = 0; k < m->ne; k++)
        adj[fill[m->e[k].from]++] = k;
    free(fill);
    uint32_t nq = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!m->op[i].ntopo_in)
            order[nq++] = i;
    for (uint32_t q = 0; q < nq; q++)
        for (uint32_t a = start[order[q]]; a < start[order[q] + 1]; a++) {
            const XEdge *e = &m->e[adj[a]];
            if (m->op[e->to].head < m->op[e->from].head + e->lag)
                m->op[e->to].head = m->op[e->from].head + e->lag;
            if (--m->op[e->to].ntopo_in == 0)
                order[nq++] = e->to;
        }
    bool ok = nq == n;
    m->words = (n + 63) / 64;
    m->reach = xcalloc((size_t)n * m->words + 1, sizeof *m->reach);
    for (uint32_t q = nq; ok && q-- > 0;) {
        uint32_t i = order[q];
        XOp *x = &m->op[i];
        for (uint32_t a = start[i]; a < start[i + 1]; a++) {
            const XEdge *e = &m->e[adj[a]];
            /* e->lag - x->d is the p2p of the edge (or 0). */
            double t = e->lag - x->d + m->op[e->to].d + m->op[e->to].tail;
            if (x->tail < t)
                x->tail = t;
            uint64_t *ri = &m->reach[(size_t)i * m->words], *rj = &m->reach[(size_t)e->to * m->words];
            ri[e->to / 64] |= 1ull << (e->to % 64);
            for (uint32_t w = 0; w < m->words; w++)
                ri[w] |= rj[w];
        }
    }
    free(order);
    free(start);
    free(adj);
    return ok;
}

/* Whether the list order of ops i < j of one rank matters, and how (docs/tune.md "Exact
 * search", streams and list order). The program orders each rank's list by the ops'
 * events: an allocating op at its start, a freeing op at its end (docs/spec.md "Time":
 * an allocating op waits for every freeing op listed before it, and the memory walk
 * counts what is listed before). y = 1 (i listed before j) needs t_j - t_i >= *l1, y = 0
 * t_i - t_j >= *l0. On one stream the list is the stream's order (l1 = d_i, l0 = d_j);
 * across streams only an allocating op against an allocating or freeing one matters,
 * by event order. Two frees on different streams, or an op that neither allocates nor
 * frees (OG) on another stream, need no order: false. */
static bool pair_lags(const Model *m, uint32_t i, uint32_t j, double *l1, double *l0)
{
    const XOp *x = &m->op[i], *y = &m->op[j];
    if (x->stream == y->stream) {
        *l1 = x->d, *l0 = y->d;
        return true;
    }
    if (x->role == MEM_NONE || y->role == MEM_NONE || (x->role == MEM_FREE && y->role == MEM_FREE))
        return false;
    /* event_i = t_i (+ d_i when it frees); y = 1: event_i <= event_j */
    double ei = x->role == MEM_FREE ? x->d : 0, ej = y->role == MEM_FREE ? y->d : 0;
    *l1 = ei - ej;
    *l0 = ej - ei;
    return true;
}

/* Whether i is before j in the program's solution x (i, j on one rank). */
static bool before(const Model *m, const double *x, uint32_t i, uint32_t j)
{
    if (reaches(m, i, j))
        return true;
    if (reaches(m, j, i))
        return false;
    int32_t s = m->op[i].rank;
    return i < j ? x[ycol(m, s, i, j)] > 0.5 : x[ycol(m, s, j, i)] < 0.5;
}

/* Appends coefficient c of "j is before i" to a row (cols/coefs at *nz), adding the
 * constant part to *k: fixed pairs give a constant, free ones y or 1 - y. */
static void add_before(const Model *m, uint32_t j, uint32_t i, double c, int *cols,
                       double *coefs, int *nz, double *k)
{
    if (reaches(m, j, i)) {
        *k += c;
    } else if (reaches(m, i, j)) {
        /* never before */
    } else if (j < i) {
        cols[*nz] = ycol(m, m->op[i].rank, j, i);
        coefs[(*nz)++] = c;
    } else {
        *k += c;
        cols[*nz] = ycol(m, m->op[i].rank, i, j);
        coefs[(*nz)++] = -c;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The program as it is built, loaded into the solver in one call (adding rows one by
 * one to CBC copies its matrix each time). */
typedef struct Lp {
    double *clb, *cub, *obj;
    char *isint;
    int ncol, ccap;
    double *rlb, *rub;
    int nrow, rcap;
    int *trow, *tcol;
    double *tval;
    size_t nt, tcap;
} Lp;

static int lp_col(Lp *lp, double lb, double ub, double obj, bool isint)
{
    if (lp->ncol == lp->ccap) {
        lp->ccap = lp->ccap ? 2 * lp->ccap : 1024;
        lp->clb = xrealloc(lp->clb, (size_t)lp->ccap * sizeof *lp->clb);
        lp->cub = xrealloc(lp->cub, (size_t)lp->ccap * sizeof *lp->cub);
        lp->obj = xrealloc(lp->obj, (size_t)lp->ccap * sizeof *lp->obj);
        lp->isint = xrealloc(lp->isint, (size_t)lp->ccap);
    }
    lp->clb[lp->ncol] = lb, lp->cub[lp->ncol] = ub, lp->obj[lp->ncol] = obj;
    lp->isint[lp->ncol] = isint;
    return lp->ncol++;
}

/* A row sum(coefs[k] x[cols[k]]) >= rhs ('G') or <= rhs ('L'). */
static void lp_row(Lp *lp, int nz, const int *cols, const double *coefs, char sense, double rhs)
{
    if (lp->nrow == lp->rcap) {
        lp->rcap = lp->rcap ? 2 * lp->rcap : 1024;
        lp->rlb = xrealloc(lp->rlb, (size_t)lp->rcap * sizeof *lp->rlb);
        lp->rub = xrealloc(lp->rub, (size_t)lp->rcap * sizeof *lp->rub);
    }
    lp->rlb[lp->nrow] = sense == 'G' ? rhs : -INFINITY;
    lp->rub[lp->nrow] = sense == 'G' ? INFINITY : rhs;
    for (int k = 0; k < nz; k++) {
        if (lp->nt == lp->tcap) {
            lp->tcap = lp->tcap ? 2 * lp->tcap : 4096;
            lp->trow = xrealloc(lp->trow, lp->tcap * sizeof *lp->trow);
            lp->tcol = xrealloc(lp->tcol, lp->tcap * sizeof *lp->tcol);
            lp->tval = xrealloc(lp->tval, lp->tcap * sizeof *lp->tval);
        }
        lp->trow[lp->nt] = lp->nrow, lp->tcol[lp->nt] = cols[k], lp->tval[lp->nt++] = coefs[k];
    }
    lp->nrow++;
}

/* Loads lp into cbc (compressed columns) and frees it. */
static void lp_load(Lp *lp, Cbc_Model *cbc)
{
    CoinBigIndex *start = xcalloc((size_t)lp->ncol + 1, sizeof *start);
    int *index = xmalloc((lp->nt ? lp->nt : 1) * sizeof *index);
    double *value = xmalloc((lp->nt ? lp->nt : 1) * sizeof *value);
    for (size_t k = 0; k < lp->nt; k++)
        start[lp->tcol[k] + 1]++;
    for (int c = 0; c < lp->ncol; c++)
        start[c + 1] += start[c];
    CoinBigIndex *fill = xmalloc((size_t)lp->ncol * sizeof *fill + 1);
    memcpy(fill, start, (size_t)lp->ncol * sizeof *fill);
    for (size_t k = 0; k < lp->nt; k++) {
        CoinBigIndex at = fill[lp->tcol[k]]++;
        index[at] = lp->trow[k];
        value[at] = lp->tval[k];
    }
    for (int r = 0; r < lp->nrow; r++) {
        if (isinf(lp->rlb[r]))
            lp->rlb[r] = -DBL_MAX;
        if (isinf(lp->rub[r]))
            lp->rub[r] = DBL_MAX;
    }
    Cbc_loadProblem(cbc, lp->ncol, lp->nrow, start, index, value, lp->clb, lp->cub, lp->obj,
                    lp->rlb, lp->rub);
    for (int c = 0; c < lp->ncol; c++)
        if (lp->isint[c])
            Cbc_setInteger(cbc, c);
    free(start);
    free(fill);
    free(index);
    free(value);
    free(lp->clb), free(lp->cub), free(lp->obj), free(lp->isint);
    free(lp->rlb), free(lp->rub);
    free(lp->trow), free(lp->tcol), free(lp->tval);
}

/* model_build's memory rows of rank s (docs/spec.md "Memory", the walk in list
 * order): at the start of every allocating op a, weights + alloc_a + the net change of
 * every op listed before it <= budget. In GiB, to keep the coefficients near 1. rc and
 * rv: scratch of n + 2 entries. */
static void memory_rows(Model *m, Lp *cbc, const MemRank *walk, int32_t s, int *rc, double *rv)
{
    const Pipeline *p = m->p;
    uint32_t a = m->off[s], b = m->off[s + 1];
    if (!p->has_memory)
        return;
    const double G = 1.0 / 1073741824.0;
    for (uint32_t i = a; i < b; i++) {
        if (m->op[i].alloc <= 0)
            continue;
        int cnt = 0;
        double k = 0;
        for (uint32_t j = a; j < b; j++)
            if (j != i && m->op[j].alloc != m->op[j].freed)
                add_before(m, j, i, (m->op[j].alloc - m->op[j].freed) * G, rc, rv, &cnt,
                           &k);
        double rhs = (p->memory - walk[s].weights - m->op[i].alloc) * G - k;
        if (cnt)
            lp_row(cbc, cnt, rc, rv, 'L', rhs);
        else if (rhs < -1e-12)
            /* a fixed prefix over budget: no order fits */
            cbc->cub[i + 1] = -1, cbc->clb[i + 1] = 0;
    }
}

/* Builds the program in cbc (docs/tune.md "Exact search"): column 0 the makespan C,
 * columns 1..n the start times, then one binary per free pair of a rank. */
static void model_build(Model *m, Lp *cbc, const MemRank *walk)
{
    const Pipeline *p = m->p;
    uint32_t n = m->n;
    int cols[4];
    double coefs[4];
    lp_col(cbc, m->lb0, m->ub, 1.0, false);
    for (uint32_t i = 0; i < n; i++) {
        const XOp *x = &m->op[i];
        double hi = m->ub - x->d - x->tail;
        lp_col(cbc, x->head, hi < x->head ? x->head : hi, 0.0, false);
    }
    m->yoff = xcalloc((size_t)p->P + 1, sizeof *m->yoff);
    for (int32_t s = 0; s < p->P; s++) {
        uint64_t k = m->off[s + 1] - m->off[s];
        m->yoff[s + 1] = m->yoff[s] + k * k;
    }
    m->ycol = xmalloc((m->yoff[p->P] ? m->yoff[p->P] : 1) * sizeof *m->ycol);
    for (int32_t s = 0; s < p->P; s++)
        for (uint32_t i = m->off[s]; i < m->off[s + 1]; i++)
            for (uint32_t j = i + 1; j < m->off[s + 1]; j++) {
                int *slot = &m->ycol[m->yoff[s] + (uint64_t)(i - m->off[s]) * (m->off[s + 1] - m->off[s]) + (j - m->off[s])];
                double l1, l0;
                *slot = -1;
                if (reaches(m, i, j) || reaches(m, j, i) || !pair_lags(m, i, j, &l1, &l0))
                    continue;
                *slot = lp_col(cbc, 0, 1, 0.0, true);
            }
    /* Waits: t_j - t_i >= lag (the rules; symmetry orders are in the pair rows). */
    for (uint32_t k = 0; k < m->ne; k++) {
        if (m->e[k].sym)
            continue;
        cols[0] = (int)m->e[k].to + 1, coefs[0] = 1;
        cols[1] = (int)m->e[k].from + 1, coefs[1] = -1;
        lp_row(cbc, 2, cols, coefs, 'G', m->e[k].lag);
    }
    int *rc = xmalloc(((size_t)n + 2) * sizeof *rc);
    double *rv = xmalloc(((size_t)n + 2) * sizeof *rv);
    for (int32_t s = 0; s < p->P; s++) {
        uint32_t a = m->off[s], b = m->off[s + 1];
        double minhead[STREAM_N], mintail[STREAM_N];
        for (int st = 0; st < STREAM_N; st++)
            minhead[st] = mintail[st] = INFINITY;
        for (uint32_t i = a; i < b; i++) {
            int st = m->op[i].stream;
            minhead[st] = fmin(minhead[st], m->op[i].head);
            mintail[st] = fmin(mintail[st], m->op[i].tail);
        }
        /* The list order of each pair that has one (pair_lags), as two big-M rows; on a
         * stream, a pair the waits order is a plain precedence. Big-M from the time
         * windows: M >= lag - (lowest t_j - highest t_i). */
        for (uint32_t i = a; i < b; i++)
            for (uint32_t j = i + 1; j < b; j++) {
                const XOp *x = &m->op[i], *y = &m->op[j];
                cols[0] = (int)j + 1, coefs[0] = 1;
                cols[1] = (int)i + 1, coefs[1] = -1;
                bool one = x->stream == y->stream;
                if (reaches(m, i, j)) {
                    if (one)
                        lp_row(cbc, 2, cols, coefs, 'G', x->d);
                    continue;
                }
                if (reaches(m, j, i)) {
                    if (one)
                        lp_row(cbc, 2, cols, coefs, 'L', -y->d);
                    continue;
                }
                int yc = ycol(m, s, i, j);
                double l1, l0;
                if (yc < 0 || !pair_lags(m, i, j, &l1, &l0))
                    continue;
                double M1 = fmax(l1 - cbc->clb[j + 1] + cbc->cub[i + 1], 0);
                double M2 = fmax(l0 - cbc->clb[i + 1] + cbc->cub[j + 1], 0);
                cols[2] = yc, coefs[2] = -M1;
                lp_row(cbc, 3, cols, coefs, 'G', l1 - M1);
                coefs[0] = -1, coefs[1] = 1, coefs[2] = M2;
                lp_row(cbc, 3, cols, coefs, 'G', l0);
            }
        for (uint32_t i = a; i < b; i++) {
            const XOp *x = &m->op[i];
            int st = x->stream;
            /* C >= t_i + d_i + tail_i. */
            cols[0] = 0, coefs[0] = 1;
            cols[1] = (int)i + 1, coefs[1] = -1;
            lp_row(cbc, 2, cols, coefs, 'G', x->d + x->tail);
            /* What runs after i on its stream: C >= t_i + d_i + sum of d_j after i
             * + the least tail of the stream. */
            int cnt = 0;
            double k = 0;
            for (uint32_t j = a; j < b; j++)
                if (j != i && m->op[j].stream == st)
                    add_before(m, i, j, m->op[j].d, rc + 2, rv + 2, &cnt, &k);
            rc[0] = 0, rv[0] = 1;
            rc[1] = (int)i + 1, rv[1] = -1;
            for (int q = 0; q < cnt; q++)
                rv[2 + q] = -rv[2 + q];
            lp_row(cbc, cnt + 2, rc, rv, 'G', x->d + k + mintail[st]);
            /* What runs before i on its stream: t_i >= least head + sum of d_j before. */
            cnt = 0;
            k = 0;
            for (uint32_t j = a; j < b; j++)
                if (j != i && m->op[j].stream == st)
                    add_before(m, j, i, m->op[j].d, rc + 1, rv + 1, &cnt, &k);
            rc[0] = (int)i + 1, rv[0] = 1;
            for (int q = 0; q < cnt; q++)
                rv[1 + q] = -rv[1 + q];
            lp_row(cbc, cnt + 1, rc, rv, 'G', minhead[st] + k);
        }
        memory_rows(m, cbc, walk, s, rc, rv);
    }
    free(rc);
    free(rv);
}

/* The ops of one rank in a new order: seq[off[s]..off[s+1]-1] are the global ids of
 * rank s's ops in list order. orig[s] is rank s's list as the file had it. */
static void apply_seq(const Model *m, Pipeline *p, Op *const *orig, const uint32_t *seq)
{
    for (int32_t s = 0; s < p->P; s++)
        for (uint32_t k = m->off[s]; k < m->off[s + 1]; k++)
            p->stages[s].ops[k - m->off[s]] = orig[s][m->op[seq[k]].pos];
}

/* The simulated makespan of p's current order (ms), or INFINITY when it stalls or a
 * rank's walk exceeds the budget. */
static double order_makespan(Pipeline *p, MemRank *walk)
{
    void *scratch = NULL;
    double ms = sim_makespan(p, &scratch);
    sim_scratch_free(scratch);
    mem_walk(p, walk);
    for (int32_t s = 0; s < p->P && p->has_memory; s++)
        if (walk[s].peak > p->memory)
            return INFINITY;
    return isfinite(ms) ? ms : INFINITY;
}

/* An op's event in the list order (pair_lags): its start, or its end when it frees. */
static double event_time(const Model *m, const double *x, uint32_t i)
{
    return x[i + 1] + (m->op[i].role == MEM_FREE ? m->op[i].d : 0);
}

/* Whether op i goes ahead of op j among the ops free to be listed next: the earlier
 * event, a free before an allocation at the same time (it only lowers the walk), then
 * the file's order. */
static bool seq_first(const Model *m, const double *x, uint32_t i, uint32_t j)
{
    double ei = event_time(m, x, i), ej = event_time(m, x, j);
    if (ei != ej)
        return ei < ej;
    bool fi = m->op[i].role == MEM_FREE, fj = m->op[j].role == MEM_FREE;
    if (fi != fj)
        return fi;
    return i < j;
}

/* The order of the solution x as seq (see apply_seq): each rank's list in an order that
 * keeps every pair the program ordered (the waits, and y where pair_lags gives one),
 * taking among the ops free to go next the one seq_first ranks first. Pairs without an
 * order in the program (two frees on different streams) follow their events. */
static void solution_seq(const Model *m, const double *x, uint32_t *seq)
{
    for (int32_t s = 0; s < m->p->P; s++) {
        uint32_t a = m->off[s], b = m->off[s + 1], k = b - a;
        if (!k)
            continue;
        uint32_t *indeg = xcalloc(k, sizeof *indeg);
        bool *done = xcalloc(k, sizeof *done);
        double l1, l0;
        for (uint32_t i = a; i < b; i++)
            for (uint32_t j = a; j < b; j++)
                if (i != j && (reaches(m, i, j) || reaches(m, j, i) || pair_lags(m, i, j, &l1, &l0)) &&
                    before(m, x, i, j))
                    indeg[j - a]++;
        for (uint32_t q = a; q < b; q++) {
            uint32_t pick = UINT32_MAX;
            for (uint32_t i = a; i < b; i++)
                if (!done[i - a] && !indeg[i - a] && (pick == UINT32_MAX || seq_first(m, x, i, pick)))
                    pick = i;
            if (pick == UINT32_MAX) /* a cycle of ties (zero durations): by events */
                for (uint32_t i = a; i < b; i++)
                    if (!done[i - a] && (pick == UINT32_MAX || seq_first(m, x, i, pick)))
                        pick = i;
            done[pick - a] = true;
            seq[q] = pick;
            for (uint32_t j = a; j < b; j++)
                if (!done[j - a] && j != pick && indeg[j - a] &&
                    (reaches(m, pick, j) || reaches(m, j, pick) || pair_lags(m, pick, j, &l1, &l0)) &&
                    before(m, x, pick, j))
                    indeg[j - a]--;
        }
        free(indeg);
        free(done);
    }
}

/* Priority rules of the list scheduler, lower first: B (and R, which B waits for), F, W
 * in the order each rule gives them (docs/tune.md "Exact search": the incumbent). The
 * copies (SO, SI, OG, LW) rank first: they have streams of their own, so they compete
 * only with each other there. */
static const uint8_t greedy_prio[][OP_NKINDS] = {
    {[OP_B] = 0, [OP_R] = 0, [OP_F] = 1, [OP_W] = 2},
    {[OP_B] = 0, [OP_R] = 0, [OP_W] = 1, [OP_F] = 2},
    {[OP_F] = 0, [OP_B] = 1, [OP_R] = 1, [OP_W] = 2},
    {[OP_W] = 0, [OP_B] = 1, [OP_R] = 1, [OP_F] = 2},
};

/* Whether op a goes before op b (both ready on one rank) under rule. */
static bool greedy_first(const Model *m, int rule, uint32_t a, uint32_t b)
{
    const XOp *x = &m->op[a], *y = &m->op[b];
    uint8_t pa = greedy_prio[rule][x->kind], pb = greedy_prio[rule][y->kind];
    if (pa != pb)
        return pa < pb;
    if (x->mb != y->mb)
        return x->mb < y->mb;
    if (x->v != y->v)
        return x->kind == OP_F ? x->v < y->v : x->v > y->v;
    return a < b;
}

/* A micro-batch started on a rank: the bytes it still allocates there, those it holds. */
typedef struct Need {
    double need, held;
    uint32_t mb;
} Need;

static int cmp_need(const void *a, const void *b)
{
    const Need *x = a, *y = b;
    return (x->need > y->need) - (x->need < y->need);
}

/* The banker's safety test on one rank: after micro-batch mb's allocation (it then
 * still needs `need` and holds `held`; avail bytes are free), can the started
 * micro-batches (st, sorted by need; mb's entry, if any, is replaced) finish one after
 * another, each releasing what it holds? */
static bool banker_safe(const Need *st, uint32_t nst, uint32_t mb, double need, double held,
                        double avail)
{
    const double eps = 1e-6;
    if (avail < -eps)
        return false;
    bool mine = false;
    for (uint32_t k = 0; k < nst; k++) {
        if (st[k].mb == mb)
            continue;
        if (!mine && need <= st[k].need) {
            if (need > avail + eps)
                return false;
            avail += held;
            mine = true;
        }
        if (st[k].need > avail + eps)
            return false;
        avail += st[k].held;
    }
    return mine || need <= avail + eps;
}

/* The waits of m (symmetry orders left out) as lists: out[pstart[i]..pstart[i+1]) are
 * the indices into m->e of the waits on op i, left[j] the number of waits of op j.
 * pstart has n + 1 entries (zeroed), left n (zeroed), out m->ne. */
static void wait_lists(const Model *m, uint32_t *pstart, uint32_t *out, uint32_t *left)
{
    for (uint32_t k = 0; k < m->ne; k++)
        if (!m->e[k].sym) {
            pstart[m->e[k].from + 1]++;
            left[m->e[k].to]++;
        }
    for (uint32_t i = 0; i < m->n; i++)
        pstart[i + 1] += pstart[i];
    uint32_t *at = xmalloc(((size_t)m->n + 1) * sizeof *at);
    memcpy(at, pstart, ((size_t)m->n + 1) * sizeof *at);
    for (uint32_t k = 0; k < m->ne; k++)
        if (!m->e[k].sym)
            out[at[m->e[k].from]++] = k;
    free(at);
}

/* A list schedule of the ops within the budget (non-delay: each rank runs, as soon as
 * it is free, the ready op that fits and that rule ranks first; the rank that can
 * start soonest goes first). Memory is handed out as by the banker's algorithm, per
 * rank: an op allocates only when what is left afterwards still lets every other
 * micro-batch the rank has started, and this one, make their remaining allocations on
 * it, so no rank fills up with micro-batches it cannot finish. cap > 0 also limits the
 * micro-batches started and not finished on rank s to cap (P - s), as 1F1B's warm-up
 * does. Writes seq (see apply_seq) and returns true, or false when it stalls. */
static bool greedy_order(const Model *m, const MemRank *walk, int rule, int cap, uint32_t *seq)
{
    const Pipeline *p = m->p;
    uint32_t n = m->n, M = (uint32_t)p->M, P = (uint32_t)p->P;
    uint32_t *pstart = xcalloc((size_t)n + 1, sizeof *pstart);
    uint32_t *out = xmalloc((m->ne ? m->ne : 1) * sizeof *out);
    uint32_t *left = xcalloc(n ? n : 1, sizeof *left);
    double *est = xcalloc(n ? n : 1, sizeof *est);
    double *tfree = xcalloc((size_t)P * STREAM_N, sizeof *tfree); /* per (rank, stream) */
    double *freeend = xcalloc(P, sizeof *freeend); /* the last end of a free listed */
    double *mem = xcalloc(P, sizeof *mem);
    uint32_t *fill = xcalloc(P, sizeof *fill);
    /* per (rank, micro-batch): bytes still to allocate, ops still to run, started */
    double *rem = xcalloc((size_t)P * M, sizeof *rem);
    double *hold = xcalloc((size_t)P * M, sizeof *hold);
    Need *byneed = xmalloc(((size_t)M + 1) * sizeof *byneed);
    uint32_t *todo = xcalloc((size_t)P * M, sizeof *todo);
    bool *started = xcalloc((size_t)P * M, sizeof *started);
    uint32_t *inflight = xcalloc(P, sizeof *inflight);
    /* per rank: the ready ops (waits all scheduled), at most its op count */
    uint32_t *ready = xmalloc((n ? n : 1) * sizeof *ready);
    uint32_t *nready = xcalloc(P, sizeof *nready);
    wait_lists(m, pstart, out, left);
    for (uint32_t i = 0; i < n; i++) {
        const XOp *x = &m->op[i];
        if (!OP_IS_CHUNKWIDE(x->kind)) {
            rem[(size_t)x->rank * M + x->mb] += x->alloc;
            todo[(size_t)x->rank * M + x->mb]++;
        }
        if (!left[i])
            ready[m->off[x->rank] + nready[x->rank]++] = i;
    }
    bool ok = true;
    for (uint32_t step = 0; step < n && ok; step++) {
        int32_t bs = -1;
        uint32_t bk = 0;
        double bt = INFINITY;
        for (int32_t s = 0; s < (int32_t)P; s++) {
            double room = p->has_memory ? p->memory - walk[s].weights - mem[s] : INFINITY;
            /* the started micro-batches, by the bytes they still need */
            uint32_t nst = 0;
            for (uint32_t mb = 0; mb < M && p->has_memory; mb++)
                if (started[(size_t)s * M + mb] && todo[(size_t)s * M + mb])
                    byneed[nst++] = (Need){rem[(size_t)s * M + mb], hold[(size_t)s * M + mb], mb};
            qsort(byneed, nst, sizeof *byneed, cmp_need);
            uint32_t limit = cap ? (uint32_t)cap * (P - (uint32_t)s) : UINT32_MAX;
            double t = INFINITY;
            uint32_t pick = UINT32_MAX, pk = 0;
            for (uint32_t k = 0; k < nready[s]; k++) {
                uint32_t i = ready[m->off[s] + k];
                const XOp *x = &m->op[i];
                size_t key = (size_t)s * M + x->mb;
                bool wide = OP_IS_CHUNKWIDE(x->kind); /* LW, OG: no micro-batch */
                if (!wide && !started[key] && inflight[s] >= limit)
                    continue;
                if (x->alloc > 0 && p->has_memory &&
                    !(wide ? banker_safe(byneed, nst, UINT32_MAX, 0, 0, room - x->alloc)
                           : banker_safe(byneed, nst, x->mb, rem[key] - x->alloc,
                                         hold[key] + x->alloc, room - x->alloc)))
                    continue;
                /* its stream free, its waits ended, and an allocation after the frees
                 * listed before it (docs/spec.md "Time") */
                double ti = fmax(tfree[(size_t)s * STREAM_N + x->stream], est[i]);
                if (x->role == MEM_ALLOC)
                    ti = fmax(ti, freeend[s]);
                if (ti < t || (ti == t && greedy_first(m, rule, i, pick))) {
                    t = ti;
                    pick = i;
                    pk = k;
                }
            }
            if (pick != UINT32_MAX && t < bt) {
                bt = t;
                bs = s;
                bk = pk;
            }
        }
        if (bs < 0) {
            ok = false;
            break;
        }
        uint32_t bi = ready[m->off[bs] + bk];
        ready[m->off[bs] + bk] = ready[m->off[bs] + --nready[bs]];
        const XOp *x = &m->op[bi];
        size_t key = (size_t)bs * M + x->mb;
        if (!OP_IS_CHUNKWIDE(x->kind)) {
            if (!started[key]) {
                started[key] = true;
                inflight[bs]++;
            }
            rem[key] -= x->alloc;
            hold[key] += x->alloc - x->freed;
            if (--todo[key] == 0)
                inflight[bs]--;
        }
        seq[m->off[bs] + fill[bs]++] = bi;
        tfree[(size_t)bs * STREAM_N + x->stream] = bt + x->d;
        if (x->role == MEM_FREE)
            freeend[bs] = fmax(freeend[bs], bt + x->d);
        mem[bs] += x->alloc - x->freed;
        for (uint32_t a = pstart[bi]; a < pstart[bi + 1]; a++) {
            const XEdge *e = &m->e[out[a]];
            est[e->to] = fmax(est[e->to], bt + e->lag);
            if (--left[e->to] == 0)
                ready[m->off[m->op[e->to].rank] + nready[m->op[e->to].rank]++] = e->to;
        }
    }
    free(pstart), free(out), free(left), free(est), free(tfree), free(freeend), free(mem), free(fill);
    free(rem), free(hold), free(byneed), free(todo), free(started), free(inflight), free(ready), free(nready);
    return ok;
}

/* What the solver process sends back: a header, then the ncol values of the best
 * solution when has_x. */
typedef struct SolveMsg {
    int has_x, optimal, limit;
    double bound;
} SolveMsg;

static bool write_all(int fd, const void *buf, size_t len)
{
    const char *b = buf;
    while (len) {
        ssize_t w = write(fd, b, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w, len -= (size_t)w;
    }
    return true;
}

/* Runs CBC on the loaded model in a child process, so that the time limit holds even
 * where CBC does not look at the clock (its root LP can take minutes on large models):
 * the child is killed at deadline (CLOCK_MONOTONIC seconds). Fills msg and x (ncol
 * values); returns false when the child was killed, failed, or could not start. */
static bool solve_forked(Cbc_Model *cbc, int ncol, double deadline, SolveMsg *msg, double *x)
{
    int fd[2];
    if (pipe(fd)) {
        fprintf(stderr, "pipec tune: cannot start the solver: %s\n", strerror(errno));
        return false;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "pipec tune: cannot start the solver: %s\n", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return false;
    }
    if (pid == 0) {
        close(fd[0]);
        Cbc_solve(cbc);
        const double *sol = Cbc_bestSolution(cbc);
        SolveMsg r = {.has_x = sol != NULL,
                      .optimal = Cbc_isProvenOptimal(cbc) && !Cbc_isSecondsLimitReached(cbc),
                      .limit = Cbc_isSecondsLimitReached(cbc),
                      .bound = Cbc_getBestPossibleObjValue(cbc)};
        bool ok = write_all(fd[1], &r, sizeof r) &&
                  (!sol || write_all(fd[1], sol, (size_t)ncol * sizeof *sol));
        _exit(ok ? 0 : 1);
    }
    close(fd[1]);
    size_t want = sizeof *msg, got = 0;
    char *hdr = (char *)msg;
    bool eof = false, killed = false;
    while (!eof) {
        double left = deadline - now_s();
        if (left <= 0) {
            kill(pid, SIGKILL);
            killed = true;
            break;
        }
        struct pollfd pf = {.fd = fd[0], .events = POLLIN};
        int pr = poll(&pf, 1, (int)fmin(left * 1000 + 1, 1000));
        if (pr < 0 && errno != EINTR)
            break;
        if (pr <= 0)
            continue;
        char *dst;
        size_t room;
        if (got < sizeof *msg) {
            dst = hdr + got, room = sizeof *msg - got;
        } else {
            if (msg->has_x)
                want = sizeof *msg + (size_t)ncol * sizeof *x;
            if (got >= want) {
                char c;
                ssize_t r = read(fd[0], &c, 1);
                eof = r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN);
                continue;
            }
            dst = (char *)x + (got - sizeof *msg), room = want - got;
        }
        ssize_t r = read(fd[0], dst, room);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            eof = true;
        else
            got += (size_t)r;
    }
    close(fd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (killed)
        return false;
    if (msg->has_x)
        want = sizeof *msg + (size_t)ncol * sizeof *x;
    if (got < sizeof *msg || got < want || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "pipec tune: internal error: the solver process failed\n");
        return false;
    }
    return true;
}

/* The exact search refuses models with more order pairs than this (the program has
 * about 10 nonzeros per pair): docs/tune.md "Exact search", limits. */
#define EXACT_MAX_PAIRS 500000u

/* The incumbent of the exact search: the file's order when it fits, or the best list
 * schedule (greedy_order over every priority rule and cap); its order goes to best
 * (seq is scratch) and p is left in the last order tried. Returns its makespan, ms
 * (INFINITY when none fits). */
static double incumbent(const Model *m, Pipeline *p, Op **orig, MemRank *walk, uint32_t *seq,
                        uint32_t *best)
{
    for (uint32_t i = 0; i < m->n; i++)
        best[i] = i;
    double inc = order_makespan(p, walk);
    for (int k = 0; k < 3 * (int)ARRAY_LEN(greedy_prio); k++) {
        if (!greedy_order(m, walk, k % (int)ARRAY_LEN(greedy_prio),
                          k / (int)ARRAY_LEN(greedy_prio), seq))
            continue;
        apply_seq(m, p, orig, seq);
        double ms = order_makespan(p, walk);
        if (ms < inc) {
            inc = ms;
            memcpy(best, seq, m->n * sizeof *seq);
        }
    }
    return inc;
}

/* The exact search's verdict into res: the solver's order (msg, NULL when the solver
 * did not answer in time or was not needed) applied to p and checked by simulation,
 * else the incumbent (best, of makespan inc) when nothing shorter exists or the time
 * ran out. Returns 0, or 1 after an internal error (the solver's order does not
 * simulate to its objective). */
static int exact_result(const Model *m, Pipeline *p, Op **orig, MemRank *walk, uint32_t *seq,
                        const uint32_t *best, const SolveMsg *msg, const double *x, double inc,
                        ExactResult *res)
{
    bool have = isfinite(inc);
    double bound = fmax(msg ? msg->bound : -INFINITY, m->lb0);
    bool limit = !msg || msg->limit;
    if (msg && msg->has_x) {
        double obj = x[0];
        solution_seq(m, x, seq);
        apply_seq(m, p, orig, seq);
        double ms = order_makespan(p, walk);
        double t = 1e-6 * fmax(1.0, fabs(obj));
        if (!isfinite(ms) || ms > obj + t || (msg->optimal && ms < obj - t)) {
            fprintf(stderr,
                    "pipec tune: internal error: the order found simulates to %.9g ms%s, the "
                    "program says %.9g ms (a rule the program misses)\n",
                    ms, isinf(ms) ? " (or exceeds the budget)" : "", obj);
            return 1;
        }
        res->status = msg->optimal ? EXACT_OPTIMAL : EXACT_FEASIBLE;
        res->makespan_ms = ms;
        res->lower_bound_ms = msg->optimal ? ms : fmin(ms, bound);
    } else if (!limit) {
        /* Proven: nothing shorter than the incumbent, or nothing fits at all. */
        res->status = have ? EXACT_OPTIMAL : EXACT_INFEASIBLE;
        res->makespan_ms = res->lower_bound_ms = have ? inc : NAN;
        apply_seq(m, p, orig, best);
    } else if (have) {
        res->status = EXACT_FEASIBLE;
        res->makespan_ms = inc;
        res->lower_bound_ms = fmin(inc, bound);
        apply_seq(m, p, orig, best);
    } else {
        res->status = EXACT_TIMEOUT;
        res->lower_bound_ms = bound;
    }
    if (isfinite(res->makespan_ms))
        res->gap = res->makespan_ms > 0
                       ? (res->makespan_ms - res->lower_bound_ms) / res->makespan_ms : 0;
    return 0;
}

int exact_search(Diag *d, Pipeline *p, double time_limit_s, ExactResult *res)
{
    double t_begin = now_s();
    *res = (ExactResult){.status = EXACT_TIMEOUT, .makespan_ms = NAN, .lower_bound_ms = NAN,
                         .gap = NAN};
    Model m = {.p = p};
    if (!model_ops(d, &m)) {
        model_free(&m);
        return 1;
    }
    uint64_t pairs = 0;
    for (int32_t s = 0; s < p->P; s++) {
        uint64_t k = m.off[s + 1] - m.off[s];
        pairs += k * (k ? k - 1 : 0) / 2;
    }
    if (pairs > EXACT_MAX_PAIRS) {
        diag_error(d, p->loc, DIAG_LIMIT,
                   "tune --exact: %llu pairs of ops to order on the ranks, more than the "
                   "%u the exact search takes (fewer micro-batches or chunks)",
                   (unsigned long long)pairs, EXACT_MAX_PAIRS);
        model_free(&m);
        return 1;
    }
    model_symmetry(&m);
    if (!model_paths(&m)) {
        fprintf(stderr, "pipec tune: internal error: the waits of the schedule form a cycle\n");
        model_free(&m);
        return 1;
    }
    MemRank *walk = xcalloc((size_t)p->P, sizeof *walk);
    mem_walk(p, walk);
    Op **orig = xcalloc((size_t)p->P, sizeof *orig);
    for (int32_t s = 0; s < p->P; s++)
    {
        orig[s] = xmalloc((p->stages[s].n ? p->stages[s].n : 1) * sizeof(Op));
        memcpy(orig[s], p->stages[s].ops, p->stages[s].n * sizeof(Op));
    }
    uint32_t *seq = xmalloc((m.n ? m.n : 1) * sizeof *seq);
    uint32_t *best = xmalloc((m.n ? m.n : 1) * sizeof *best);
    double inc = incumbent(&m, p, orig, walk, seq, best);
    mem_walk(p, walk); /* the weights, for the memory rows */
    /* An upper bound of the optimum: the incumbent, else any order's longest path
     * (every op once, each step with at most the largest p2p). */
    double maxp2p = 0, total = 0;
    for (int32_t s = 0; s < p->P; s++)
        maxp2p = fmax(maxp2p, ir_cost(p, s, 0, COST_P2P));
    for (uint32_t i = 0; i < m.n; i++)
        total += m.op[i].d;
    bool have = isfinite(inc);
    m.ub = have ? inc : total + m.n * maxp2p;
    m.ub = m.ub * (1 + 1e-9) + 1e-9;
    /* A bound before the search: the longest wait path and each stream's work. */
    for (uint32_t i = 0; i < m.n; i++)
        m.lb0 = fmax(m.lb0, m.op[i].head + m.op[i].d + m.op[i].tail);
    for (int32_t s = 0; s < p->P; s++)
        for (int st = 0; st < STREAM_N; st++) {
            double mh = INFINITY, mt = INFINITY, sum = 0;
            for (uint32_t i = m.off[s]; i < m.off[s + 1]; i++)
                if (m.op[i].stream == st) {
                    mh = fmin(mh, m.op[i].head);
                    mt = fmin(mt, m.op[i].tail);
                    sum += m.op[i].d;
                }
            if (isfinite(mh))
                m.lb0 = fmax(m.lb0, mh + sum + mt);
        }
    Cbc_Model *cbc = NULL;
    int rc = 0;
    /* The solver looks only for orders at least 1e-6 (relative) shorter than the
     * incumbent (C's upper bound), so the incumbent is optimal when it proves there are
     * none. */
    double tol = 1e-6 * fmax(1.0, have ? inc : m.ub);
    SolveMsg msg = {0};
    double *x = NULL;
    bool solved = false;
    if (have && m.lb0 >= inc - tol) {
        msg.bound = inc;
        solved = true; /* proven by the bound alone */
    } else {
        if (have)
            m.ub = inc - tol;
        cbc = Cbc_newModel();
        Cbc_setLogLevel(cbc, getenv("PIPEC_CBC_LOG") ? 1 : 0);
        Lp lp = {0};
        model_build(&m, &lp, walk);
        lp_load(&lp, cbc);
        double left = time_limit_s - (now_s() - t_begin);
        char lim[32];
        snprintf(lim, sizeof lim, "%g", fmax(left, 0.01));
        Cbc_setParameter(cbc, "sec", lim);
        Cbc_setMaximumSeconds(cbc, fmax(left, 0.01));
        int ncol = Cbc_getNumCols(cbc);
        x = xmalloc((size_t)ncol * sizeof *x);
        /* CBC stops itself at the limit in its search; the deadline's slack lets it. */
        double deadline = t_begin + time_limit_s * 1.05 + 0.5;
        solved = solve_forked(cbc, ncol, deadline, &msg, x);
        if (!solved && now_s() < deadline) {
            rc = 1; /* the process failed, not the clock */
            goto done;
        }
    }
    rc = exact_result(&m, p, orig, walk, seq, best, solved ? &msg : NULL, x, inc, res);
done:
    res->seconds = now_s() - t_begin;
    if (cbc)
        Cbc_deleteModel(cbc);
    free(x);
    for (int32_t s = 0; s < p->P; s++)
        free(orig[s]);
    free(orig);
    free(seq);
    free(best);
    free(walk);
    model_free(&m);
    return rc;
}

#else /* !PIPEC_HAVE_CBC */

int exact_search(Diag *d, Pipeline *p, double time_limit_s, ExactResult *res)
{
    (void)d, (void)p, (void)time_limit_s;
    *res = (ExactResult){.status = EXACT_TIMEOUT, .makespan_ms = NAN, .lower_bound_ms = NAN,
                         .gap = NAN};
    fprintf(stderr, "pipec tune: --exact needs the COIN-OR CBC solver, and this pipec was "
                    "built without it: install the Debian package " EXACT_PACKAGE
                    " (make deps) and rebuild\n");
    return 1;
}

#endif

/* Reads --exact's options. Returns -1 to go on, else the exit code. */
static int exact_args(int argc, char **argv, DriverOpts *o, const char **out, double *limit,
                      bool *json)
{
    enum { OPT_EXACT = 256, OPT_LIMIT, OPT_JSON, OPT_HELP };
    static const struct option longopts[] = {
        {"exact", no_argument, NULL, OPT_EXACT},
        {"time-limit", required_argument, NULL, OPT_LIMIT},
        {"json", no_argument, NULL, OPT_JSON},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, OPT_HELP},
        DRIVER_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "ho:" DRIVER_SHORTOPTS, longopts, NULL)) != -1) {
        if (driver_common_opt(o, opt, optarg))
            continue;
        char *end = NULL;
        switch (opt) {
        case OPT_EXACT: break;
        case 'o': *out = optarg; break;
        case OPT_JSON: *json = true; break;
        case OPT_LIMIT:
            *limit = strtod(optarg, &end);
            if (!*optarg || *end || !(*limit > 0) || *limit > 1e6) {
                fprintf(stderr, "pipec tune: --time-limit wants seconds > 0, not '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'h':
        case OPT_HELP:
        default:
            return driver_usage_status("tune", opt == 'h' || opt == OPT_HELP);
        }
    }
    return driver_operands(argc, "tune", 1);
}

int cmd_tune_exact(int argc, char **argv)
{
    DriverOpts o = {0};
    const char *out = NULL;
    double limit = 60;
    bool json = false;
    int rc = exact_args(argc, argv, &o, &out, &limit, &json);
    if (rc >= 0) {
        driver_opts_free(&o);
        return rc;
    }
    if (!exact_available()) {
#ifdef PIPEC_HAVE_CBC
        fprintf(stderr, "pipec tune: --exact needs the COIN-OR CBC solver's library: install "
                        "the Debian package " EXACT_PACKAGE " (make deps)\n");
#else
        fprintf(stderr, "pipec tune: --exact needs the COIN-OR CBC solver, and this pipec was "
                        "built without it: install the Debian package " EXACT_PACKAGE
                        " (make deps) and rebuild\n");
#endif
        driver_opts_free(&o);
        return 2;
    }
    const char *path = argv[optind];
    Diag d = {0};
    Pipeline *p = driver_compile(&d, &o, path);
    if (!p) {
        driver_opts_free(&o);
        diag_free(&d);
        return 1;
    }
    void *scratch = NULL;
    double own = sim_makespan(p, &scratch);
    sim_scratch_free(scratch);
    bool own_fits = isfinite(own) && mem_fits(p, NULL);
    ExactResult r;
    rc = exact_search(&d, p, limit, &r);
    if (!rc) {
        char b1[64], b2[64], b3[64];
        StrBuf sb = {0};
        if (json) {
            sb_printf(&sb, "{\"status\": \"%s\", \"makespan_ms\": %s, \"lower_bound_ms\": %s, "
                           "\"gap\": %s}\n",
                      status_name[r.status], sim_fmt_num(b1, sizeof b1, r.makespan_ms),
                      sim_fmt_num(b2, sizeof b2, r.lower_bound_ms),
                      sim_fmt_num(b3, sizeof b3, r.gap));
        } else {
            sb_printf(&sb, "# %s: %d stages, %d micro-batches, budget %s\n", path, p->P, p->M,
                      p->has_memory ? sim_fmt_size(b1, sizeof b1, p->memory) : "none");
            sb_printf(&sb, "exact search: %s after %.1f s\n", status_name[r.status], r.seconds);
            if (r.status == EXACT_OPTIMAL || r.status == EXACT_FEASIBLE)
                sb_printf(&sb, "makespan %.3f ms (the file's order: %.3f ms%s), lower bound "
                               "%.3f ms, gap %.2f%%\n",
                          r.makespan_ms, own, own_fits ? "" : ", over budget", r.lower_bound_ms,
                          100 * r.gap);
            else if (r.status == EXACT_INFEASIBLE)
                sb_puts(&sb, "no order of the file's ops fits the memory budget\n");
            else
                sb_printf(&sb, "no order found within %g s; lower bound %.3f ms\n", limit,
                          r.lower_bound_ms);
        }
        FILE *to = out && !strcmp(out, "-") ? stderr : stdout;
        fputs(sb.s ? sb.s : "", to);
        sb_free(&sb);
        if (out && (r.status == EXACT_OPTIMAL || r.status == EXACT_FEASIBLE)) {
            StrBuf pb = {0};
            sb_printf(&pb, "# %s - the order `pipec tune --exact %s` found (%s): makespan %s\n",
                      p->name, path, status_name[r.status], human_ms(b1, sizeof b1, r.makespan_ms));
            print_pipeline(&pb, p);
            rc = write_output(out, &pb) ? 1 : 0;
            sb_free(&pb);
        } else if (out) {
            fprintf(stderr, "pipec tune: no order to write to %s\n", out);
        }
        if (r.status == EXACT_TIMEOUT)
            rc = 1;
    }
    pipeline_free(p);
    driver_opts_free(&o);
    diag_free(&d);
    return rc;
}
