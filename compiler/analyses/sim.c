/* sim.c - the simulator of docs/spec.md "Time": an event-driven list scheduler that is
 * linear in the number of ops, plus the --json object and the human summary.
 *
 * Legend: P = ranks, M = micro-batches, V = chunks per rank, PV = P*V virtual stages;
 * an op's global id g = off[rank] + position in the rank's list. Times in ms, memory in
 * bytes.
 *
 * Model. Each rank has three streams (compute: F/B/W/R; d2h: SO, OG; h2d: SI, LW) that
 * run their ops in listed order. An op starts at the latest of: its stream is free; every op it
 * waits for (docs/spec.md "Dependencies" and `dep` edges) has ended, plus the waiting
 * rank's `p2p` when that op is on another rank; for an allocating op (F, R, SI, LW),
 * every op listed before it on its rank that frees memory (B, W, SO) has ended (each
 * stream ends its ops in listed order, so that is the last such op of each other
 * stream). Every one of these rules is a row of the op semantics table (opsem.h).
 * Because streams never reorder, start times are a max-plus longest path over a DAG
 * and need no priority queue.
 *
 * Algorithm. One cursor per (rank, stream) walks the rank's list. A cursor advances
 * while its head op's predecessors have all ended; when one has not, the cursor hangs
 * itself on that predecessor's waiter list (one cursor waits on one op at a time) and
 * is pushed back on the ready stack when the predecessor completes. Every op is
 * completed once and each cursor head is re-examined at most once per predecessor, so
 * the whole run is O(ops + deps). Ops never reached leave the schedule stuck (a cycle).
 *
 * Memory. The per-op byte changes are the list-order walk of docs/spec.md "Memory"
 * (mem_walk_ops); because allocating ops wait for every listed-earlier free, the memory
 * in use at any instant never exceeds the walk's peak, and peak_mem_bytes is that peak
 * (mem_walk). The same changes replayed in time order (allocations at an op's start,
 * frees at its end) give the trace's and the SVG's memory curve, which stays under it.
 * docs/simulator.md states the readings chosen. */
#include "sim.h"

#include "costmodel.h"
#include "human.h"
#include "memory.h"
#include "opsem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CROSS 0x80000000u   /* flag on a dep source id: the source is on another rank */

typedef struct RankCost {
    double p2p;                 /* ms added to a cross-rank wait */
    double weights;             /* bytes */
} RankCost;

typedef struct Cursor {
    uint32_t rank;
    uint32_t stream;            /* Stream */
    uint32_t pos;               /* next list position to look at */
    uint32_t lastfree[STREAM_N]; /* per stream: global id of the last op listed before pos
                                  * that frees memory, or NONE */
    uint32_t next;              /* next cursor on the same waiter list / ready stack */
    double free_at;             /* ms: when the stream is free */
} Cursor;

/* A transfer on a shared host link: its op, its (link, stream) slot of Sim.nshare and,
 * while pending, its start (ms). */
typedef struct LinkXfer {
    uint32_t g;
    uint32_t slot;
    double t;
} LinkXfer;

/* One rank's data-parallel stream while the run goes (docs/simulator.md "Data
 * parallelism"), ms. */
typedef struct DpRank {
    double free_at;     /* the stream is free */
    double cstart;      /* start of the last compute op scheduled (zero-3 prefetch) */
    double reduce, gather, opt; /* sums of durations */
    double end;         /* the last end of its stream and of its optimizer steps */
    uint32_t nq, npend; /* chunks issued / pending after them in Sim.dpq */
    bool done;          /* the optimizer steps are placed */
} DpRank;

/* Scratch memory of one run, kept between sim_makespan calls. */
typedef struct Sim {
    OpIndex *idx;       /* the op index (rebuilt every run) */
    uint32_t *lastbw;   /* [P*V]: global id of the last-listed B or W of (rank, chunk) */
    double *end;        /* [nops] ms; < 0 while not done */
    double *dur;        /* [nops] ms */
    double *delta;      /* [nops] bytes: > 0 allocated at start, < 0 freed at end */
    uint32_t *waiter;   /* [nops]: first cursor waiting for the op, or NONE */
    uint32_t *off;      /* [P+1]: global id of each rank's first op */
    int32_t *vst;       /* [P*V]: virtual stage of (rank, chunk) */
    int32_t *vowner;    /* [PV]: rank owning each virtual stage */
    RankCost *rc;       /* [P] */
    Cursor *cur;        /* [3P] */
    uint32_t *depoff;   /* [nops+1]: dep sources of op g are depsrc[depoff[g]..depoff[g+1]) */
    uint32_t *depsrc;   /* [ndeps]: global id | CROSS */
    uint8_t *smask;     /* [P]: bit st set when the rank has ops on stream st */
    double *freed;      /* [max ops of a rank] scratch of the walk */
    /* Shared host links (docs/simulator.md "Shared host links"); link is NULL when
     * every rank has its own link (host_link_ranks 1), and then nothing below is used. */
    double *link;       /* [nops] ms of the op's duration on a shared link at full host_bw */
    double *rem;        /* [nops] link ms a transfer in flight has left */
    struct LinkXfer *inflight; /* [3P]: transfers started, sharing their link */
    struct LinkXfer *pend;     /* [3P]: transfers whose start is known, not yet reached */
    uint32_t *nshare;   /* [STREAM_N * P]: transfers in flight per (link, stream) */
    uint32_t ninflight, npend;
    int32_t link_ranks; /* host_link_ranks */
    /* The data-parallel stream (docs/spec.md "Time", docs/simulator.md "Data
     * parallelism"); dp is false with one replica or no parameters, and then nothing
     * below is used. */
    bool dp, dp_zero3;
    CmDpTime *dpt;      /* [P*V] per (rank, chunk) */
    DpRank *dpr;        /* [P] */
    uint32_t *dpq;      /* [P*V]: per rank, its chunks in the order their reductions were
                         * issued (the first nq of row r), then pending ones (zero 3) */
    double *red_end;    /* [P*V] ms: end of the chunk's reduction (< 0 while none) */
    bool record;        /* keep the items in span (simulate's run) */
    SimDpSpan *span;
    size_t nspan, cap_span;
    size_t cap_link, cap_rem, cap_inflight, cap_pend, cap_nshare;
    size_t cap_dpt, cap_dpr, cap_dpq, cap_red_end;
    size_t cap_dur, cap_delta, cap_waiter, cap_end, cap_off, cap_rc, cap_cur, cap_vst,
        cap_vowner, cap_depoff, cap_depsrc, cap_smask, cap_lastbw, cap_freed;
    uint64_t nops;
    uint64_t nvm;       /* PV*M */
    bool has_deps;
} Sim;

static void grow(void **p, size_t *cap, size_t need, size_t esz)
{
    if (need <= *cap && *p)
        return;
    free(*p);
    *p = xmalloc(need * esz);
    *cap = need;
}
#define GROW(field, capf, need) grow((void **)&s->field, &s->capf, (need), sizeof *s->field)

static void sim_scratch_release(Sim *s)
{
    opindex_free(s->idx);
    s->idx = NULL;
    free(s->lastbw);
    free(s->freed);
    free(s->end);
    free(s->dur);
    free(s->delta);
    free(s->waiter);
    free(s->off);
    free(s->vst);
    free(s->vowner);
    free(s->rc);
    free(s->cur);
    free(s->depoff);
    free(s->depsrc);
    free(s->smask);
    free(s->link);
    free(s->rem);
    free(s->inflight);
    free(s->pend);
    free(s->nshare);
    free(s->dpt);
    free(s->dpr);
    free(s->dpq);
    free(s->red_end);
    free(s->span);
}

void sim_scratch_free(void *scratch)
{
    if (!scratch)
        return;
    sim_scratch_release(scratch);
    free(scratch);
}

/* IN_STREAM(kind, st): the kind runs on stream st (op_sem of opsem.h). */
#define IN_STREAM(kind, st) ((unsigned)(kind) < OP_NKINDS && op_sem[(kind)].stream == (Stream)(st))

/* Global id of op (k, v, m), or NONE. */
static uint32_t lookup(const Sim *s, OpKind k, int32_t v, uint32_t m)
{
    return opindex_global(s->idx, s->off, k, v, m);
}

/* Sizes the scratch arrays for p, builds the op index and fills the rank tables (op
 * offsets, p2p, weights, virtual stages and their owners); clears end (or ext_end) and
 * the waiter lists. Returns false when the pipeline cannot be indexed densely (P*V*M
 * beyond the op count: an incomplete schedule, so not runnable). */
static bool prepare_tables(Sim *s, const Pipeline *p, double *ext_end)
{
    int32_t P = p->P, V = p->V, M = p->M;
    s->nops = pipeline_nops(p);
    if (P <= 0 || V <= 0 || M <= 0)
        return false;
    s->nvm = (uint64_t)P * (uint64_t)V * (uint64_t)M;
    /* A checked schedule has an F and a B for every (v,m): nvm <= nops / 2. */
    if (s->nvm > s->nops || s->nops >= (uint64_t)CROSS)
        return false;
    size_t nops = (size_t)s->nops, pv = (size_t)P * (size_t)V, maxn = 1;
    for (int32_t r = 0; r < P; r++)
        if (p->stages[r].n > maxn)
            maxn = p->stages[r].n;

    GROW(dur, cap_dur, nops);
    GROW(delta, cap_delta, nops);
    GROW(waiter, cap_waiter, nops);
    if (!ext_end)
        GROW(end, cap_end, nops);
    GROW(off, cap_off, (size_t)P + 1);
    GROW(rc, cap_rc, (size_t)P);
    GROW(cur, cap_cur, 3 * (size_t)P);
    GROW(vst, cap_vst, pv);
    GROW(vowner, cap_vowner, pv);
    GROW(smask, cap_smask, (size_t)P);
    GROW(lastbw, cap_lastbw, pv);
    GROW(freed, cap_freed, maxn);
    double nl = ir_cost(p, 0, 0, COST_HOST_LINK_RANKS);
    s->link_ranks = nl >= 2 && P > 1 ? (int32_t)fmin(nl, P) : 1;
    if (s->link_ranks > 1) {
        GROW(link, cap_link, nops);
        GROW(rem, cap_rem, nops);
        GROW(inflight, cap_inflight, 3 * (size_t)P);
        GROW(pend, cap_pend, 3 * (size_t)P);
        GROW(nshare, cap_nshare, STREAM_N * (size_t)P);
        memset(s->nshare, 0, STREAM_N * (size_t)P * sizeof *s->nshare);
    }
    s->ninflight = s->npend = 0;
    opindex_free(s->idx);
    s->idx = opindex_build(p);

    double *end = ext_end ? ext_end : s->end;
    memset(s->waiter, 0xff, nops * sizeof *s->waiter);
    for (size_t i = 0; i < pv; i++)
        s->lastbw[i] = NONE;
    for (size_t i = 0; i < nops; i++)
        end[i] = -1;

    uint32_t g = 0;
    for (int32_t r = 0; r < P; r++) {
        s->rc[r].p2p = ir_cost(p, r, 0, COST_P2P);
        s->rc[r].weights = ir_cost(p, r, 0, COST_WEIGHTS);
        for (int32_t c = 0; c < V; c++) {
            int32_t v = ir_vstage(p, r, c);
            s->vst[(size_t)r * V + c] = v;
            if (v >= 0 && (size_t)v < pv)
                s->vowner[v] = r;
        }
        s->off[r] = g;
        g += p->stages[r].n;
    }
    s->off[P] = g;
    return true;
}

/* Durations and memory changes of rank r's ops (cost: the rank's per-chunk costs): the
 * walk gives what each op allocates and frees, the table how long it takes; an
 * overlapped op takes only the part its host's all-reduces do not hide. Also fills
 * lastbw and smask for the rank. */
static void prepare_rank(Sim *s, const Pipeline *p, int32_t r, const OpCosts *cost)
{
    int32_t V = p->V;
    const StageOps *so = &p->stages[r];
    uint32_t base = s->off[r];
    unsigned mask = 0;
    int64_t host = -1;   /* the host of the overlapped ops met last, and its */
    double budget = 0;   /* all-reduce time not yet used by them (ms) */
    double *alloc = s->delta + base;
    mem_walk_ops(p, s->idx, r, alloc, s->freed);
    /* mem_vm_has of every (chunk, micro-batch) of the rank from one scan of its list:
     * an op's virtual stage is its rank's chunk, so every op of (v, m) is on v's owner
     * (as the memory walk's walk_init reads it); the index where V*M is not O(ops). */
    size_t VM = (size_t)V * (size_t)p->M;
    uint8_t *hasv = NULL;
    if (VM <= 4 * (size_t)so->n + 1024) {
        hasv = xcalloc(VM ? VM : 1, 1);
        for (uint32_t i = 0; i < so->n; i++)
            if (ir_op_in_range(p, &so->ops[i]))
                hasv[(size_t)so->ops[i].chunk * p->M + so->ops[i].mb] |=
                    (uint8_t)opsem_has_bit((OpKind)so->ops[i].kind);
    }
    for (uint32_t i = 0; i < so->n; i++) {
        const Op *op = &so->ops[i];
        uint32_t gi = base + i;
        double a = alloc[i], f = s->freed[i];
        s->dur[gi] = 0;
        s->delta[gi] = a - f;
        if (s->link_ranks > 1)
            s->link[gi] = 0;
        if (!ir_op_in_range(p, op))
            continue;
        mask |= 1u << op_sem[op->kind].stream;
        if (op_backward(op->kind))
            s->lastbw[(size_t)r * V + op->chunk] = gi;
        int32_t v = s->vst[(size_t)r * V + op->chunk];
        unsigned has = OP_IS_CHUNKWIDE(op->kind) ? 0
                       : hasv ? hasv[(size_t)op->chunk * p->M + op->mb]
                              : mem_vm_has(s->idx, v, op->mb);
        const OpCosts *k = &cost[op->chunk];
        if (op_sem[op->kind].overlaps_host) {
            /* inside its host's all-reduces: only the exposed part takes the stream */
            int64_t h = opsem_host(so, i);
            const Op *ho = &so->ops[h < 0 ? 0 : h];
            /* hosted by its own B: layer-granular, in that B's later all-reduces */
            bool self = h >= 0 && ho->kind == OP_B && ho->chunk == op->chunk && ho->mb == op->mb;
            if (h != host) {
                host = h;
                budget = h < 0 || !ir_op_in_range(p, ho) ? 0
                         : self                    ? opsem_self_budget(k)
                                                   : opsem_comm((OpKind)ho->kind, &cost[ho->chunk]);
            }
            s->dur[gi] = self ? opsem_exposed_self(k, &budget) : opsem_exposed(k, &budget);
            continue;
        }
        double moved = opsem_moved((OpKind)op->kind, k, a, f);
        s->dur[gi] = opsem_duration((OpKind)op->kind, k, has, moved);
        if (s->link_ranks > 1)
            s->link[gi] = fmin(opsem_link_ms((OpKind)op->kind, k, moved), s->dur[gi]);
    }
    free(hasv);
    s->smask[r] = (uint8_t)mask;
}

/* The `dep A -> B` lists, as compressed rows keyed by B's global id (depoff, depsrc;
 * a source on another rank is flagged CROSS). */
static void prepare_deps(Sim *s, const Pipeline *p)
{
    int32_t P = p->P, V = p->V, M = p->M;
    size_t nops = (size_t)s->nops;
    s->has_deps = false;
    if (p->ndeps) {
        GROW(depoff, cap_depoff, nops + 1);
        GROW(depsrc, cap_depsrc, (size_t)p->ndeps);
        memset(s->depoff, 0, (nops + 1) * sizeof *s->depoff);
        uint32_t *from = xmalloc(p->ndeps * sizeof *from), *to = xmalloc(p->ndeps * sizeof *to);
        for (uint32_t i = 0; i < p->ndeps; i++) {
            const Dep *e = &p->deps[i];
            uint32_t ids[2] = {NONE, NONE};
            const OpRef *ref[2] = {&e->from, &e->to};
            for (int j = 0; j < 2; j++) {
                const OpRef *o = ref[j];
                if (o->stage >= P || o->chunk >= V || o->kind >= OP_NKINDS || o->mb >= (uint32_t)M)
                    continue;
                uint32_t id = lookup(s, (OpKind)o->kind, s->vst[(size_t)o->stage * V + o->chunk], o->mb);
                if (id != NONE && id >= s->off[o->stage] && id < s->off[o->stage + 1])
                    ids[j] = id;
            }
            from[i] = ids[0];
            to[i] = ids[1];
            if (ids[0] != NONE && ids[1] != NONE)
                s->depoff[ids[1] + 1]++;
        }
        for (size_t i = 0; i < nops; i++)
            s->depoff[i + 1] += s->depoff[i];
        for (uint32_t i = 0; i < p->ndeps; i++) {
            if (from[i] == NONE || to[i] == NONE)
                continue;
            bool cross = p->deps[i].from.stage != p->deps[i].to.stage;
            /* depoff[to] counts up while filling; restored below. */
            s->depsrc[s->depoff[to[i]]++] = from[i] | (cross ? CROSS : 0);
            s->has_deps = true;
        }
        for (size_t i = nops; i > 0; i--)
            s->depoff[i] = s->depoff[i - 1];
        s->depoff[0] = 0;
        free(from);
        free(to);
    }
}

/* The data-parallel stream's durations per (rank, chunk) (cm_dp_time_moe of the rank's
 * `params`, `expert_params`, `dp_bw`, `dp_latency`, `mem_bw` and the pipeline's
 * data_parallel, expert_parallel, zero and grad_dtype) and its per-rank state; sets
 * s->dp when there is anything to move. */
static void prepare_dp(Sim *s, const Pipeline *p)
{
    size_t P = (size_t)p->P, pv = P * (size_t)p->V;
    CmDp dp = cm_dp(p);
    s->dp = false;
    s->dp_zero3 = dp.zero == 3;
    if (dp.D <= 1)
        return;
    GROW(dpt, cap_dpt, pv);
    GROW(dpr, cap_dpr, P);
    GROW(dpq, cap_dpq, pv);
    GROW(red_end, cap_red_end, pv);
    for (int32_t r = 0; r < p->P; r++) {
        double bw = ir_cost(p, r, 0, COST_DP_BW), lat = ir_cost(p, r, 0, COST_DP_LATENCY);
        double mbw = ir_cost(p, r, 0, COST_MEM_BW);
        for (int32_t c = 0; c < p->V; c++) {
            double n = ir_cost(p, r, c, COST_PARAMS);
            cm_dp_time_moe(n, ir_cost(p, r, c, COST_EXPERT_PARAMS), p->expert_parallel, &dp, bw,
                           lat, mbw, &s->dpt[(size_t)r * p->V + c]);
            if (n > 0)
                s->dp = true;
        }
    }
}

/* Records an item of rank r's data-parallel stream when the run keeps them. */
static void dp_span(Sim *s, uint32_t r, SimDpKind kind, uint32_t chunk, double start, double end)
{
    if (!s->record)
        return;
    if (s->nspan == s->cap_span) {
        s->cap_span = s->cap_span ? 2 * s->cap_span : 64;
        s->span = xrealloc(s->span, s->cap_span * sizeof *s->span);
    }
    s->span[s->nspan++] = (SimDpSpan){start, end, (int32_t)r, (uint8_t)kind, (uint8_t)chunk};
}

/* Resets the data-parallel streams before a run. */
static void dp_start(Sim *s, const Pipeline *p)
{
    if (!s->dp)
        return;
    memset(s->dpr, 0, (size_t)p->P * sizeof *s->dpr);
    s->nspan = 0;
    for (size_t i = 0; i < (size_t)p->P * (size_t)p->V; i++)
        s->red_end[i] = -1;
}

/* Issues the reduction of chunk c of rank r (its last B/W ended at bw_end) on the rank's
 * data-parallel stream. */
static void dp_reduce(Sim *s, const Pipeline *p, uint32_t r, uint32_t c, double bw_end)
{
    DpRank *d = &s->dpr[r];
    size_t rc = (size_t)r * p->V + c;
    double t = fmax(d->free_at, bw_end) + s->dpt[rc].reduce;
    dp_span(s, r, SIM_DP_REDUCE, c, t - s->dpt[rc].reduce, t);
    d->free_at = t;
    d->reduce += s->dpt[rc].reduce;
    d->end = fmax(d->end, t);
    s->red_end[rc] = t;
}

/* Issues the reductions of rank r held back behind a zero-3 gather, in the order their
 * last B/W ended. */
static void dp_flush(Sim *s, const Pipeline *p, uint32_t r, const double *end)
{
    DpRank *d = &s->dpr[r];
    uint32_t *q = s->dpq + (size_t)r * p->V;
    for (; d->npend; d->npend--, d->nq++) {
        uint32_t c = q[d->nq];
        dp_reduce(s, p, r, c, end[s->lastbw[(size_t)r * p->V + c]]);
    }
}

/* Compute op g (chunk c) of rank r is about to start at *t: at zero 3 the all-gather of its
 * chunk's parameters runs first on the data-parallel stream, from when the rank's
 * previous compute op started (prefetch) or the stream is free, and the op waits for it;
 * then the reductions held back behind it are issued. */
static void dp_before(Sim *s, const Pipeline *p, uint32_t r, const Op *op, const double *end,
                      double *t)
{
    DpRank *d = &s->dpr[r];
    const CmDpTime *k = &s->dpt[(size_t)r * p->V + op->chunk];
    if (s->dp_zero3 && op_sem[op->kind].reads_params && k->gather_op > 0) {
        double e = fmax(d->free_at, d->cstart) + k->gather_op;
        dp_span(s, r, SIM_DP_GATHER, op->chunk, e - k->gather_op, e);
        d->free_at = e;
        d->gather += k->gather_op;
        d->end = fmax(d->end, e);
        *t = fmax(*t, e);
        dp_flush(s, p, r, end);
    }
    d->cstart = *t;
}

/* Compute op g (chunk c) of rank r ended at e: when it is its chunk's last-listed B or W,
 * the chunk's gradients are complete and their reduction is issued (at zero 3 after the
 * next op's gather, so that a prefetch is not queued behind it). */
static void dp_after(Sim *s, const Pipeline *p, uint32_t r, const Op *op, uint32_t g, double e)
{
    size_t rc = (size_t)r * p->V + op->chunk;
    if (s->lastbw[rc] != g || !(ir_cost(p, (int32_t)r, op->chunk, COST_PARAMS) > 0))
        return;
    DpRank *d = &s->dpr[r];
    uint32_t *q = s->dpq + (size_t)r * p->V;
    q[d->nq + d->npend] = op->chunk;
    if (s->dp_zero3) {
        d->npend++;
    } else {
        d->nq++;
        dp_reduce(s, p, r, op->chunk, e);
    }
}

/* Rank r's compute stream has run its list (it is free at cfree): the held-back
 * reductions are issued, then each chunk's optimizer step runs on the compute stream
 * once its reduction has ended, in the order the reductions were issued, and at zero 1
 * and 2 the all-gather of its updated parameters follows on the data-parallel stream.
 * A chunk with an OG op takes its optimizer step on the host (docs/semantics.md
 * "Model-state offload"): its reduction only. */
static void dp_finish(Sim *s, const Pipeline *p, uint32_t r, double cfree, const double *end)
{
    DpRank *d = &s->dpr[r];
    if (d->done)
        return;
    d->done = true;
    dp_flush(s, p, r, end);
    const uint32_t *q = s->dpq + (size_t)r * p->V;
    for (uint32_t i = 0; i < d->nq; i++) {
        size_t rc = (size_t)r * p->V + q[i];
        if (lookup(s, OP_OG, s->vst[rc], 0) != NONE)
            continue;
        const CmDpTime *k = &s->dpt[rc];
        cfree = fmax(cfree, s->red_end[rc]) + k->opt;
        dp_span(s, r, SIM_DP_OPT, q[i], cfree - k->opt, cfree);
        d->opt += k->opt;
        d->end = fmax(d->end, cfree);
        if (k->gather_after > 0) {
            d->free_at = fmax(d->free_at, cfree) + k->gather_after;
            dp_span(s, r, SIM_DP_ALLGATHER, q[i], d->free_at - k->gather_after, d->free_at);
            d->gather += k->gather_after;
            d->end = fmax(d->end, d->free_at);
        }
    }
}

/* The op index, the rank tables, per-op durations and memory changes (the walk of
 * docs/spec.md "Memory", mem_walk_ops) and the dep lists. Returns false when the pipeline
 * cannot be indexed densely (P*V*M beyond the op count: an incomplete schedule, so not
 * runnable). ext_end, when not NULL, receives the end times instead of s->end. */
static bool prepare(Sim *s, const Pipeline *p, double *ext_end)
{
    if (!prepare_tables(s, p, ext_end))
        return false;
    OpCosts *cost = xmalloc((size_t)p->V * sizeof *cost);
    for (int32_t r = 0; r < p->P; r++) {
        for (int32_t c = 0; c < p->V; c++)
            opsem_costs(p, r, c, &cost[c]);
        prepare_rank(s, p, r, cost);
    }
    free(cost);
    prepare_deps(s, p);
    prepare_dp(s, p);
    return true;
}

/* Resets one cursor per (rank, stream) to the head of its list and returns the ready
 * stack of those whose stream has ops (linked through Cursor.next). */
static uint32_t cursors_start(Sim *s, int32_t P)
{
    uint32_t ncur = 3 * (uint32_t)P, ready = NONE;
    for (uint32_t c = 0; c < ncur; c++) {
        Cursor *k = &s->cur[c];
        k->rank = c / 3;
        k->stream = c % 3;
        k->pos = 0;
        for (int st = 0; st < STREAM_N; st++)
            k->lastfree[st] = NONE;
        k->free_at = 0;
        k->next = NONE;
        /* A stream with no ops on its rank never needs its cursor. */
        if (s->smask[k->rank] & (1u << k->stream)) {
            k->next = ready;
            ready = c;
        }
    }
    return ready;
}

/* The ops the op at cursor k's head waits for (global ids, NONE when absent) with a
 * cross-rank flag each: its data dependencies (op_sem waits), the last B/W of its chunk
 * when it waits for that, and for an allocating op the last freeing op listed before it
 * on every stream. Returns how many were written to pre[] / cross[]. */
static int op_preds(const Sim *s, const Pipeline *p, const Cursor *k, const Op *op,
                    uint32_t *pre, bool *cross)
{
    uint32_t r = k->rank, PV = (uint32_t)p->P * (uint32_t)p->V;
    int32_t v = s->vst[(size_t)r * p->V + op->chunk];
    const OpSem *sem = &op_sem[op->kind];
    int np = 0;
    for (int i = 0; i < sem->nwait; i++) {
        const OpWaitRule *w = &sem->wait[i];
        int32_t u = v + w->dv;
        if (u < 0 || u >= (int32_t)PV)
            continue;
        cross[np] = s->vowner[u] != (int32_t)r;
        pre[np++] = lookup(s, (OpKind)w->kind, u, OP_IS_CHUNKWIDE(w->kind) ? 0 : op->mb);
    }
    if (sem->waits_last_bw) {
        cross[np] = false;
        pre[np++] = s->lastbw[(size_t)r * p->V + op->chunk];
    }
    if (sem->mem == MEM_ALLOC)
        for (int st = 0; st < STREAM_N; st++) {
            cross[np] = false;
            pre[np++] = k->lastfree[st];
        }
    return np;
}

/* The earliest start of global op g, the head of cursor k (docs/spec.md "Time"): raises *t
 * (the stream's free time) to the end of every op it waits for, plus the rank's p2p for
 * one on another rank. Returns NONE, or the id of a predecessor not yet ended. */
static uint32_t earliest_start(const Sim *s, const Pipeline *p, const Cursor *k, const Op *op,
                               uint32_t g, const double *end, double *t)
{
    const double p2p = s->rc[k->rank].p2p;
    uint32_t pre[OPSEM_MAX_WAITS + 1 + STREAM_N];
    bool cross[OPSEM_MAX_WAITS + 1 + STREAM_N];
    int np = op_preds(s, p, k, op, pre, cross);
    for (int i = 0; i < np; i++) {
        uint32_t q = pre[i];
        if (q == NONE)
            continue;
        double e = end[q];
        if (e < 0)
            return q;
        if (cross[i])
            e += p2p;
        if (e > *t)
            *t = e;
    }
    if (!s->has_deps)
        return NONE;
    for (uint32_t i = s->depoff[g]; i < s->depoff[g + 1]; i++) {
        uint32_t q = s->depsrc[i] & ~CROSS;
        double e = end[q];
        if (e < 0)
            return q;
        if (s->depsrc[i] & CROSS)
            e += p2p;
        if (e > *t)
            *t = e;
    }
    return NONE;
}

/* ---- shared host links (docs/simulator.md "Shared host links") -------------------- */

/* A transfer's duration depends on the transfers in flight beside it, so it cannot be
 * fixed when its start is known: the cursor that reaches it records its start
 * (link_queue) and waits on it, and when nothing else can move, link_step advances a
 * clock to the next start or completion of a transfer. Between two such events the n
 * transfers in flight on one (link, stream) each progress at 1/n of their full-bandwidth
 * rate (processor sharing: a fair share of host_bw, each direction on its own). Every op
 * whose start is still unknown waits, directly or not, for a transfer not yet ended, so
 * no start unknown to the clock can come before its next event: the events are taken in
 * time order. */

/* Records that transfer g of rank r (a kind on stream st) starts at t. */
static void link_queue(Sim *s, uint32_t r, Stream st, uint32_t g, double t, double *start)
{
    LinkXfer *x = &s->pend[s->npend++];
    x->g = g;
    x->slot = (r / (uint32_t)s->link_ranks) * STREAM_N + st;
    x->t = t;
    if (start)
        start[g] = t;
}

/* Pushes the cursors waiting for op g on the ready stack. */
static void wake(Sim *s, uint32_t g, uint32_t *ready)
{
    for (uint32_t w = s->waiter[g]; w != NONE;) {
        uint32_t nx = s->cur[w].next;
        s->cur[w].next = *ready;
        *ready = w;
        w = nx;
    }
    s->waiter[g] = NONE;
}

/* Moves the link clock *now to the next event: ends the transfers that complete then
 * (an OG's opt_host follows its copy: it ends that much later) and starts the pending
 * ones that start then. Returns false when there is no event left. */
static bool link_step(Sim *s, double *end, uint32_t *ready, uint64_t *done, double *last,
                      double *now)
{
    double T = INFINITY;
    for (uint32_t i = 0; i < s->npend; i++)
        T = fmin(T, s->pend[i].t);
    for (uint32_t i = 0; i < s->ninflight; i++) {
        const LinkXfer *x = &s->inflight[i];
        T = fmin(T, *now + s->rem[x->g] * s->nshare[x->slot]);
    }
    if (!(T < INFINITY))
        return false;
    T = fmax(T, *now);
    double dt = T - *now, eps = 1e-12 * fmax(1, T);
    /* progress at the shares of the interval, then the completions */
    for (uint32_t i = 0; i < s->ninflight; i++) {
        const LinkXfer *x = &s->inflight[i];
        double n = s->nshare[x->slot];
        s->rem[x->g] = *now + s->rem[x->g] * n <= T + eps ? 0 : s->rem[x->g] - dt / n;
    }
    uint32_t kept = 0;
    for (uint32_t i = 0; i < s->ninflight; i++) {
        LinkXfer x = s->inflight[i];
        if (s->rem[x.g] > 0) {
            s->inflight[kept++] = x;
            continue;
        }
        s->nshare[x.slot]--;
        double e = T + (s->dur[x.g] - s->link[x.g]);
        end[x.g] = e;
        if (e > *last)
            *last = e;
        (*done)++;
        wake(s, x.g, ready);
    }
    s->ninflight = kept;
    kept = 0;
    for (uint32_t i = 0; i < s->npend; i++) {
        LinkXfer x = s->pend[i];
        if (x.t > T + eps) {
            s->pend[kept++] = x;
            continue;
        }
        s->rem[x.g] = s->link[x.g];
        s->nshare[x.slot]++;
        s->inflight[s->ninflight++] = x;
    }
    s->npend = kept;
    *now = T;
    return true;
}

/* Cursor k's head, op g of kind `kind`, ends at e: its stream is free then and the
 * cursor moves on. */
static void cursor_advance(Cursor *k, OpKind kind, uint32_t g, double e)
{
    k->free_at = e;
    if (kind < OP_NKINDS && op_sem[kind].mem == MEM_FREE)
        k->lastfree[k->stream] = g;
    k->pos++;
}

/* Runs the cursors to completion. start may be NULL (makespan only). Returns the number
 * of ops completed; *makespan gets the last end. */
static uint64_t schedule(Sim *s, const Pipeline *p, double *end, double *start, double *makespan)
{
    uint32_t ready = cursors_start(s, p->P);
    dp_start(s, p);
    uint64_t done = 0;
    double last = 0, now = 0;
    bool shared = s->link_ranks > 1;

    do {
        while (ready != NONE) {
            uint32_t cid = ready;
            Cursor *k = &s->cur[cid];
            ready = k->next;
            k->next = NONE;
            const StageOps *so = &p->stages[k->rank];
            const uint32_t base = s->off[k->rank];
            uint32_t blocked = NONE;

            while (k->pos < so->n) {
                const Op *op = &so->ops[k->pos];
                uint32_t g = base + k->pos;
                OpKind kind = (OpKind)op->kind;
                if (!IN_STREAM(op->kind, k->stream)) {
                    if (kind < OP_NKINDS && op_sem[kind].mem == MEM_FREE)
                        k->lastfree[op_sem[kind].stream] = g;
                    k->pos++;
                    continue;
                }
                if (shared && s->link[g] > 0 && end[g] >= 0) { /* the link clock ended it */
                    cursor_advance(k, kind, g, end[g]);
                    continue;
                }
                double t = k->free_at;
                if (ir_op_in_range(p, op) && (blocked = earliest_start(s, p, k, op, g, end, &t)) != NONE)
                    break;
                if (shared && s->link[g] > 0) { /* its end waits for the link clock */
                    link_queue(s, k->rank, (Stream)k->stream, g, t, start);
                    blocked = g;
                    break;
                }
                bool dp = s->dp && k->stream == STREAM_COMPUTE && ir_op_in_range(p, op);
                if (dp)
                    dp_before(s, p, k->rank, op, end, &t);
                double e = t + s->dur[g];
                end[g] = e;
                if (start)
                    start[g] = t;
                if (e > last)
                    last = e;
                done++;
                if (dp)
                    dp_after(s, p, k->rank, op, g, e);
                cursor_advance(k, kind, g, e);
                wake(s, g, &ready);
            }
            if (blocked != NONE) { /* wait on it: back on the ready stack when it ends */
                k->next = s->waiter[blocked];
                s->waiter[blocked] = cid;
            } else if (s->dp && k->stream == STREAM_COMPUTE) {
                dp_finish(s, p, k->rank, k->free_at, end);
                last = fmax(last, s->dpr[k->rank].end);
            }
        }
    } while (shared && link_step(s, end, &ready, &done, &last, &now));
    *makespan = last;
    return done;
}

double sim_makespan(const Pipeline *p, void **scratch)
{
    Sim *s = *scratch;
    if (!s)
        *scratch = s = xcalloc(1, sizeof *s);
    if (!prepare(s, p, NULL))
        return s->nops == 0 && p->P > 0 ? 0 : INFINITY;
    double makespan;
    uint64_t done = schedule(s, p, s->end, NULL, &makespan);
    return done == s->nops ? makespan : INFINITY;
}

void sim_busy(const Pipeline *p, double *busy)
{
    Sim s;
    memset(&s, 0, sizeof s);
    for (int32_t r = 0; r < p->P; r++)
        busy[r] = 0;
    if (prepare(&s, p, NULL))
        for (int32_t r = 0; r < p->P; r++)
            for (uint32_t i = 0; i < p->stages[r].n; i++)
                if (IN_STREAM(p->stages[r].ops[i].kind, STREAM_COMPUTE))
                    busy[r] += s.dur[s.off[r] + i];
    sim_scratch_release(&s);
}

double sim_busy_rank(const Pipeline *p, int32_t r)
{
    Sim s;
    memset(&s, 0, sizeof s);
    double busy = 0;
    if (r >= 0 && r < p->P && prepare_tables(&s, p, NULL)) {
        OpCosts *cost = xmalloc((size_t)p->V * sizeof *cost);
        for (int32_t c = 0; c < p->V; c++)
            opsem_costs(p, r, c, &cost[c]);
        prepare_rank(&s, p, r, cost);
        free(cost);
        for (uint32_t i = 0; i < p->stages[r].n; i++)
            if (IN_STREAM(p->stages[r].ops[i].kind, STREAM_COMPUTE))
                busy += s.dur[s.off[r] + i];
    }
    sim_scratch_release(&s);
    return busy;
}

/* ---- the lower bound (docs/simulator.md "Lower bound") ---------------------------- */

/* One op of a (rank, stream) in Jackson's preemptive schedule: its head (earliest start
 * over the dependency graph), its remaining duration and its tail (the longest path from
 * its end to the end of the iteration), ms. */
typedef struct JpsItem {
    double head, rem, tail;
} JpsItem;

/* Sorts it[0..n) by head, stably (the order qsort's merge sort gives, so that the sums
 * below add in the same order): nothing to do when already sorted, as the items of a
 * list usually are; else a merge sort through tmp (room for n). */
static void jps_sort(JpsItem *it, size_t n, JpsItem *tmp)
{
    size_t i = 1;
    while (i < n && it[i - 1].head <= it[i].head)
        i++;
    if (i >= n)
        return;
    JpsItem *src = it, *dst = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                dst[k++] = src[b].head < src[a].head ? src[b++] : src[a++];
            while (a < mid)
                dst[k++] = src[a++];
            while (b < hi)
                dst[k++] = src[b++];
        }
        JpsItem *t = src;
        src = dst;
        dst = t;
    }
    if (src != it)
        memcpy(it, src, n * sizeof *it);
}

/* A binary max-heap of items by tail. */
static void heap_push(JpsItem *h, size_t *n, JpsItem it)
{
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2].tail < it.tail) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = it;
}

static JpsItem heap_pop(JpsItem *h, size_t *n)
{
    JpsItem top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1].tail > h[c].tail)
            c++;
        if (h[c].tail <= last.tail)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* Jackson's preemptive schedule on one machine (Carlier 1982): at every moment run the
 * released op with the longest tail, preempting at releases. Its value, the largest end
 * + tail, equals max over subsets S of (min head + sum of durations + min tail over S),
 * a bound for every non-preemptive order. Sorts it[] by head; heap has room for n. */
static double jps(JpsItem *it, size_t n, JpsItem *heap)
{
    jps_sort(it, n, heap);
    size_t i = 0, nh = 0;
    double t = 0, best = 0;
    while (i < n || nh) {
        if (!nh && t < it[i].head)
            t = it[i].head;
        while (i < n && it[i].head <= t)
            heap_push(heap, &nh, it[i++]);
        JpsItem top = heap_pop(heap, &nh);
        double next = i < n ? it[i].head : INFINITY;
        if (t + top.rem <= next) {
            t += top.rem;
            if (t + top.tail > best)
                best = t + top.tail;
        } else {
            top.rem -= next - t;
            t = next;
            heap_push(heap, &nh, top);
        }
    }
    return best;
}

/* The ops global op g waits for in every order (global ids | CROSS), appended to pre
 * (room for OPSEM_MAX_WAITS + the dep lines + the rank's ops): the op_sem waits, for a
 * kind that waits for the last-listed B or W of its chunk every B and W of that chunk
 * (the last-listed one ends last, whatever the order), and the `dep` lines. The waits of
 * an allocating op for listed-earlier frees are orders' own, not the ops', and are left
 * out (memory is ignored). Returns the count. */
static uint32_t lb_preds(const Sim *s, const Pipeline *p, int32_t r, uint32_t i, uint32_t *pre)
{
    const Op *op = &p->stages[r].ops[i];
    uint32_t g = s->off[r] + i, n = 0, PV = (uint32_t)p->P * (uint32_t)p->V;
    int32_t v = s->vst[(size_t)r * p->V + op->chunk];
    const OpSem *sem = &op_sem[op->kind];
    for (int k = 0; k < sem->nwait; k++) {
        const OpWaitRule *w = &sem->wait[k];
        int32_t u = v + w->dv;
        if (u < 0 || u >= (int32_t)PV)
            continue;
        uint32_t q = lookup(s, (OpKind)w->kind, u, OP_IS_CHUNKWIDE(w->kind) ? 0 : op->mb);
        if (q != NONE)
            pre[n++] = q | (s->vowner[u] != r ? CROSS : 0);
    }
    if (sem->waits_last_bw)
        for (uint32_t j = 0; j < p->stages[r].n; j++) {
            const Op *o = &p->stages[r].ops[j];
            if (op_backward(o->kind) && o->chunk == op->chunk && ir_op_in_range(p, o))
                pre[n++] = s->off[r] + j;
        }
    if (s->has_deps)
        for (uint32_t k = s->depoff[g]; k < s->depoff[g + 1]; k++)
            pre[n++] = s->depsrc[k];
    return n;
}

/* The bound over a prepared Sim (its op index, durations, ranks and deps; a run of
 * schedule() changes none of them). */
static double lower_bound_of(const Sim *s, const Pipeline *p)
{
    int32_t P = p->P;
    size_t nops = (size_t)s->nops, maxn = 1;
    for (int32_t r = 0; r < P; r++)
        if (p->stages[r].n > maxn)
            maxn = p->stages[r].n;
    /* rank of every op; predecessor lists (CSR) and their successor mirror */
    int32_t *rank = xmalloc(nops * sizeof *rank);
    uint32_t *poff = xcalloc(nops + 1, sizeof *poff);
    uint32_t *tmp = xmalloc((OPSEM_MAX_WAITS + (size_t)p->ndeps + maxn) * sizeof *tmp);
    size_t cap = 2 * nops + 16, npre = 0;
    uint32_t *pre = xmalloc(cap * sizeof *pre);
    for (int32_t r = 0; r < P; r++)
        for (uint32_t i = 0; i < p->stages[r].n; i++) {
            uint32_t g = s->off[r] + i, k = 0;
            rank[g] = r;
            if (ir_op_in_range(p, &p->stages[r].ops[i]))
                k = lb_preds(s, p, r, i, tmp);
            if (npre + k > cap) {
                cap = 2 * (npre + k);
                pre = xrealloc(pre, cap * sizeof *pre);
            }
            memcpy(pre + npre, tmp, k * sizeof *tmp);
            npre += k;
            poff[g + 1] = (uint32_t)npre;
        }
    uint32_t *soff = xcalloc(nops + 1, sizeof *soff), *suc = xmalloc((npre + 1) * sizeof *suc);
    uint32_t *indeg = xcalloc(nops, sizeof *indeg), *order = xmalloc(nops * sizeof *order);
    for (size_t e = 0; e < npre; e++)
        soff[(pre[e] & ~CROSS) + 1]++;
    for (size_t g = 0; g < nops; g++)
        soff[g + 1] += soff[g];
    for (size_t g = 0; g < nops; g++)
        for (uint32_t e = poff[g]; e < poff[g + 1]; e++) {
            uint32_t q = pre[e] & ~CROSS;
            suc[soff[q] + indeg[q]++] = (uint32_t)g;
        }
    /* Kahn's topological order over the predecessor counts */
    size_t head = 0, tail = 0;
    for (size_t g = 0; g < nops; g++) {
        indeg[g] = poff[g + 1] - poff[g];
        if (!indeg[g])
            order[tail++] = (uint32_t)g;
    }
    while (head < tail) {
        uint32_t g = order[head++];
        for (uint32_t e = soff[g]; e < soff[g + 1]; e++)
            if (!--indeg[suc[e]])
                order[tail++] = suc[e];
    }
    double lb = NAN;
    if (tail == nops) {
        /* heads forward, tails backward; a cross-rank edge adds the waiting rank's p2p */
        double *hd = xcalloc(nops, sizeof *hd), *tl = xcalloc(nops, sizeof *tl);
        for (size_t k = 0; k < nops; k++) {
            uint32_t g = order[k];
            for (uint32_t e = poff[g]; e < poff[g + 1]; e++) {
                uint32_t q = pre[e] & ~CROSS;
                double t = hd[q] + s->dur[q] + (pre[e] & CROSS ? s->rc[rank[g]].p2p : 0);
                if (t > hd[g])
                    hd[g] = t;
            }
        }
        for (size_t k = nops; k-- > 0;) {
            uint32_t g = order[k];
            for (uint32_t e = poff[g]; e < poff[g + 1]; e++) {
                uint32_t q = pre[e] & ~CROSS;
                double t = s->dur[g] + tl[g] + (pre[e] & CROSS ? s->rc[rank[g]].p2p : 0);
                if (t > tl[q])
                    tl[q] = t;
            }
        }
        /* one machine per (rank, stream) */
        JpsItem *it = xmalloc(maxn * sizeof *it), *heap = xmalloc(maxn * sizeof *heap);
        lb = 0;
        for (int32_t r = 0; r < P; r++)
            for (int st = 0; st < STREAM_N; st++) {
                size_t n = 0;
                for (uint32_t i = 0; i < p->stages[r].n; i++) {
                    const Op *op = &p->stages[r].ops[i];
                    uint32_t g = s->off[r] + i;
                    if (ir_op_in_range(p, op) && IN_STREAM(op->kind, st))
                        it[n++] = (JpsItem){hd[g], s->dur[g], tl[g]};
                }
                double b = n ? jps(it, n, heap) : 0;
                if (b > lb)
                    lb = b;
            }
        free(it);
        free(heap);
        free(hd);
        free(tl);
    }
    free(rank);
    free(poff);
    free(tmp);
    free(pre);
    free(soff);
    free(suc);
    free(indeg);
    free(order);
    return lb;
}

double sim_lower_bound(const Pipeline *p)
{
    Sim s;
    memset(&s, 0, sizeof s);
    if (!prepare(&s, p, NULL)) {
        double nb = s.nops == 0 && p->P > 0 ? 0 : NAN;
        sim_scratch_release(&s);
        return nb;
    }
    double lb = lower_bound_of(&s, p);
    sim_scratch_release(&s);
    return lb;
}

int32_t sim_dp_replicas(const Pipeline *p)
{
    return p->data_parallel > 1 ? p->data_parallel : 1;
}

/* Replays one rank's memory changes in time order: merges the three streams' event
 * sequences (each already sorted, streams never reorder), frees before allocations at
 * equal times. Calls fn (if any) after every change; returns the peak. */
static double replay(const StageOps *so, const double *start, const double *end,
                     const double *delta, double base,
                     void (*fn)(void *ctx, double t_ms, double bytes), void *ctx)
{
    uint32_t pos[STREAM_N] = {0, 0, 0};
    double cur = base, peak = base;
    for (;;) {
        int best = -1;
        double bt = 0;
        bool bfree = false;
        for (int st = 0; st < STREAM_N; st++) {
            uint32_t i = pos[st];
            while (i < so->n && (!IN_STREAM(so->ops[i].kind, st) || delta[i] == 0))
                i++;
            pos[st] = i;
            if (i >= so->n)
                continue;
            bool fr = delta[i] < 0;
            double t = fr ? end[i] : start[i];
            if (best < 0 || t < bt || (t == bt && fr && !bfree)) {
                best = st;
                bt = t;
                bfree = fr;
            }
        }
        if (best < 0)
            break;
        uint32_t i = pos[best]++;
        cur += delta[i];
        if (cur > peak)
            peak = cur;
        if (fn)
            fn(ctx, bt, cur);
    }
    return peak;
}

static double **alloc_rows(const Pipeline *p, double *block)
{
    double **rows = xmalloc(((size_t)p->P + 1) * sizeof *rows);
    rows[0] = block;  /* sim_free frees rows[0] */
    size_t o = 0;
    for (int32_t r = 0; r < p->P; r++) {
        rows[r] = block + o;
        o += p->stages[r].n;
    }
    return rows;
}

/* The metrics of SimResult beyond the per-rank rows (docs/simulator.md "Metrics"),
 * from the sums of idle and of recompute time over the ranks (ms). */
static void sim_metrics(SimResult *res, const Pipeline *p, double idle_sum, double recompute_sum,
                        double lower_bound_ms)
{
    double ms = res->makespan_ms;
    res->lower_bound_ms = lower_bound_ms;
    /* the bound sums the same durations in another order than the run: a few ulps above
     * a makespan that meets it are rounding, not a schedule beating the bound */
    if (res->lower_bound_ms > ms && res->lower_bound_ms - ms <= 1e-9 * ms)
        res->lower_bound_ms = ms;
    if (res->stuck || !(ms > 0) || p->P <= 0)
        return;
    res->overhead_ratio = (idle_sum + recompute_sum) / (p->P * ms);
    const CostInputs *ci = p->cost_inputs;
    if (!ci)
        return;
    double dp = sim_dp_replicas(p), sec = ms / 1000.0;
    res->tokens_per_s = p->M * ci->model.mbs * ci->model.seq * dp / sec;
    if (ci->has_device && ci->device.peak_flops > 0)
        res->mfu = cm_iteration_flops(p) * dp /
                   (sec * (double)p->P * ci->tp * dp * ci->device.peak_flops);
}

SimResult *simulate(const Pipeline *p)
{
    SimResult *res = xcalloc(1, sizeof *res);
    res->lower_bound_ms = res->overhead_ratio = res->tokens_per_s = res->mfu = NAN;
    int32_t P = p->P > 0 ? p->P : 0;
    size_t nops = (size_t)pipeline_nops(p);
    res->stage = xcalloc(P ? (size_t)P : 1, sizeof *res->stage);
    double *sb = xcalloc(nops ? nops : 1, sizeof *sb), *eb = xcalloc(nops ? nops : 1, sizeof *eb);
    res->start = alloc_rows(p, sb);
    res->end = alloc_rows(p, eb);

    Sim s = {0};
    if (!prepare(&s, p, eb)) {
        res->stuck = nops > 0;
        for (size_t i = 0; i < nops; i++)
            eb[i] = 0;
        for (int32_t r = 0; r < P; r++) {
            res->stage[r].static_mem_bytes = res->stage[r].peak_mem_bytes =
                ir_cost(p, r, 0, COST_WEIGHTS);
        }
        sim_scratch_release(&s);
        return res;
    }
    /* Without the data-parallel stream first, for what it exposes. */
    double makespan, base_ms = 0;
    if (s.dp) {
        s.dp = false;
        schedule(&s, p, eb, sb, &base_ms);
        prepare(&s, p, eb);
        s.record = true;
    }
    uint64_t done = schedule(&s, p, eb, sb, &makespan);
    res->stuck = done != s.nops;
    if (res->stuck)
        for (size_t i = 0; i < nops; i++)
            if (eb[i] < 0)
                eb[i] = sb[i] = 0;
    res->makespan_ms = makespan;

    double idle_sum = 0, recompute_sum = 0;
    MemRank *mr = xmalloc((size_t)P * sizeof *mr);
    mem_walk(p, mr);
    for (int32_t r = 0; r < P; r++) {
        const StageOps *so = &p->stages[r];
        uint32_t base = s.off[r];
        const double *st = sb + base, *en = eb + base, *du = s.dur + base;
        SimStage *S = &res->stage[r];
        uint32_t firstF = NONE, firstB = NONE, lastB = NONE;
        double busy = 0;
        for (uint32_t i = 0; i < so->n; i++) {
            OpKind k = (OpKind)so->ops[i].kind;
            if (!IN_STREAM(k, STREAM_COMPUTE))
                continue;
            busy += du[i];
            if (opsem_has_bit(k) == VM_HAS_R)
                recompute_sum += du[i];
            if (k == OP_F && firstF == NONE)
                firstF = i;
            if (k == OP_B) {
                if (firstB == NONE)
                    firstB = i;
                lastB = i;
            }
        }
        /* Compute ops run back to back in list order, so the ops listed inside a window
         * are exactly the ones running in it: idle = window - their durations. */
        double fwd = 0, bwd = 0;
        if (firstF != NONE && firstB != NONE && firstF < firstB) {
            double w = st[firstB] - st[firstF];
            for (uint32_t i = firstF; i < firstB; i++)
                if (IN_STREAM(so->ops[i].kind, STREAM_COMPUTE))
                    w -= du[i];
            fwd = w;
        }
        if (firstB != NONE) {
            double w = en[lastB] - st[firstB];
            for (uint32_t i = firstB; i <= lastB; i++)
                if (IN_STREAM(so->ops[i].kind, STREAM_COMPUTE))
                    w -= du[i];
            bwd = w;
        }
        if (s.dp) {
            const DpRank *d = &s.dpr[r];
            double own = d->end;
            for (uint32_t i = 0; i < so->n; i++)
                own = fmax(own, en[i]);
            S->dp_reduce_ms = d->reduce;
            S->dp_gather_ms = d->gather;
            S->opt_ms = d->opt;
            S->dp_exposed_ms = fmax(0, own - base_ms);
            busy += d->opt;
        }
        /* Sums of the same doubles in another order can differ in the last bit. */
        S->busy_ms = busy;
        S->idle_ms = fmax(0, makespan - busy);
        S->fwd_bubble_ms = fmax(0, fwd);
        S->bwd_bubble_ms = fmax(0, bwd);
        idle_sum += S->idle_ms;
        double w = s.rc[r].weights;
        S->static_mem_bytes = w;
        /* docs/spec.md "Time": list order is memory order, so the peak is the walk's;
         * the time-ordered replay (the memory curve) never exceeds it. */
        S->peak_mem_bytes = mr[r].peak;
        S->peak_act_bytes = S->peak_mem_bytes - w;
    }
    free(mr);
    if (s.dp) {
        res->dp = true;
        res->dp_exposed_ms = fmax(0, makespan - base_ms);
        res->dpspan = s.span; /* kept: the trace draws them */
        res->ndpspan = s.nspan;
        s.span = NULL;
    }
    res->bubble_ratio = (P > 0 && makespan > 0) ? idle_sum / (P * makespan) : 0;
    /* sim_lower_bound over the tables this run prepared */
    double lb = lower_bound_of(&s, p);
    sim_scratch_release(&s);
    sim_metrics(res, p, idle_sum, recompute_sum, lb);
    return res;
}

void sim_free(SimResult *r)
{
    if (!r)
        return;
    if (r->start)
        free(r->start[0]);
    if (r->end)
        free(r->end[0]);
    free(r->start);
    free(r->end);
    free(r->stage);
    free(r->dpspan);
    free(r);
}

void sim_mem_deltas(const Pipeline *p, double **delta)
{
    Sim s = {0};
    if (prepare(&s, p, NULL)) {
        for (int32_t r = 0; r < p->P; r++)
            memcpy(delta[r], s.delta + s.off[r], p->stages[r].n * sizeof **delta);
    } else {
        for (int32_t r = 0; r < p->P; r++)
            memset(delta[r], 0, p->stages[r].n * sizeof **delta);
    }
    sim_scratch_release(&s);
}

double **sim_mem_deltas_new(const Pipeline *p)
{
    size_t P = p->P > 0 ? (size_t)p->P : 0, off = 0;
    double **delta = xmalloc((P + 1) * sizeof *delta);
    double *block = xcalloc((size_t)pipeline_nops(p) + 1, sizeof *block);
    for (size_t s = 0; s < P; s++) {
        delta[s] = block + off;
        off += p->stages[s].n;
    }
    delta[P] = block; /* past the ranks: the block, for sim_mem_deltas_free */
    sim_mem_deltas(p, delta);
    return delta;
}

void sim_mem_deltas_free(const Pipeline *p, double **delta)
{
    if (!delta)
        return;
    free(delta[p->P > 0 ? p->P : 0]);
    free(delta);
}

double sim_mem_replay(const Pipeline *p, const SimResult *r, double *const *delta, int32_t s,
                      void (*fn)(void *ctx, double t_ms, double bytes), void *ctx)
{
    return replay(&p->stages[s], r->start[s], r->end[s], delta[s],
                  ir_cost(p, s, 0, COST_WEIGHTS), fn, ctx);
}

/* ---- number formatting ------------------------------------------------------------ */

char *sim_fmt_num(char *buf, size_t n, double x)
{
    if (!isfinite(x)) {
        snprintf(buf, n, "null");
        return buf;
    }
    if (x == 0)
        x = 0;  /* no "-0.0" */
    /* Plain decimals in [1e-4, 1e16), as Python's repr; the shortest %g form outside. */
    double ax = fabs(x);
    bool plain = ax == 0 || (ax >= 1e-4 && ax < 1e16);
    for (int prec = plain ? 0 : 1; prec <= 25; prec++) {
        snprintf(buf, n, plain ? "%.*f" : "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    if (!strpbrk(buf, ".eEn"))
        strncat(buf, ".0", n - strlen(buf) - 1);
    return buf;
}

char *sim_fmt_bytes(char *buf, size_t n, double x)
{
    if (!isfinite(x))
        snprintf(buf, n, "null");
    else
        snprintf(buf, n, "%.0f", x == 0 ? 0 : round(x));
    return buf;
}

char *sim_fmt_size(char *buf, size_t n, double bytes)
{
    return human_size(buf, n, bytes);
}

void sim_json_string(StrBuf *out, const char *s)
{
    sb_putc(out, '"');
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        if (*c == '"' || *c == '\\')
            sb_printf(out, "\\%c", *c);
        else if (*c < 0x20)
            sb_printf(out, "\\u%04x", *c);
        else
            sb_putc(out, (char)*c);
    }
    sb_putc(out, '"');
}

/* ---- --json and the summary ------------------------------------------------------- */

void sim_write_json(StrBuf *out, const Pipeline *p, const SimResult *r)
{
    char a[64], b[64], c[64], d[64];
    sb_puts(out, "{\"pipeline\": ");
    sim_json_string(out, p->name);
    sb_printf(out, ", \"stages\": %d, \"microbatches\": %d, \"chunks\": %d", p->P, p->M, p->V);
    sb_printf(out, ", \"makespan_ms\": %s, \"bubble_ratio\": %s",
              sim_fmt_num(a, sizeof a, r->makespan_ms),
              sim_fmt_num(b, sizeof b, r->bubble_ratio));
    sb_puts(out, ", \"per_stage\": [");
    for (int32_t s = 0; s < p->P; s++) {
        const SimStage *S = &r->stage[s];
        sb_printf(out, "%s{\"stage\": %d, \"busy_ms\": %s, \"idle_ms\": %s", s ? ", " : "", s,
                  sim_fmt_num(a, sizeof a, S->busy_ms), sim_fmt_num(b, sizeof b, S->idle_ms));
        sb_printf(out, ", \"fwd_bubble_ms\": %s, \"bwd_bubble_ms\": %s",
                  sim_fmt_num(a, sizeof a, S->fwd_bubble_ms),
                  sim_fmt_num(b, sizeof b, S->bwd_bubble_ms));
        sb_printf(out, ", \"peak_mem_bytes\": %s, \"budget_bytes\": %s"
                       ", \"static_mem_bytes\": %s, \"peak_act_bytes\": %s",
                  sim_fmt_bytes(a, sizeof a, S->peak_mem_bytes),
                  p->has_memory ? sim_fmt_bytes(b, sizeof b, p->memory) : "null",
                  sim_fmt_bytes(c, sizeof c, S->static_mem_bytes),
                  sim_fmt_bytes(d, sizeof d, S->peak_act_bytes));
        if (r->dp) { /* the data-parallel stream's keys */
            sb_printf(out, ", \"dp_reduce_ms\": %s, \"dp_gather_ms\": %s",
                      sim_fmt_num(a, sizeof a, S->dp_reduce_ms),
                      sim_fmt_num(b, sizeof b, S->dp_gather_ms));
            sb_printf(out, ", \"opt_ms\": %s, \"dp_exposed_ms\": %s",
                      sim_fmt_num(a, sizeof a, S->opt_ms),
                      sim_fmt_num(b, sizeof b, S->dp_exposed_ms));
        }
        sb_putc(out, '}');
    }
    sb_printf(out, "], \"lower_bound_ms\": %s, \"overhead_ratio\": %s",
              sim_fmt_num(a, sizeof a, r->lower_bound_ms),
              sim_fmt_num(b, sizeof b, r->overhead_ratio));
    sb_printf(out, ", \"tokens_per_s\": %s, \"mfu\": %s",
              sim_fmt_num(a, sizeof a, r->tokens_per_s), sim_fmt_num(b, sizeof b, r->mfu));
    if (r->dp)
        sb_printf(out, ", \"dp_exposed_ms\": %s", sim_fmt_num(a, sizeof a, r->dp_exposed_ms));
    sb_puts(out, "}\n");
}

void sim_write_summary(StrBuf *out, const Pipeline *p, const SimResult *r)
{
    char a[64], b[64];
    sb_printf(out, "pipeline %s: %d stage%s, %d micro-batch%s, %d chunk%s\n",
              p->name ? p->name : "(unnamed)", p->P, p->P == 1 ? "" : "s", p->M,
              p->M == 1 ? "" : "es", p->V, p->V == 1 ? "" : "s");
    if (r->stuck)
        sb_puts(out, "warning: the schedule cannot run to the end (a cycle of waits); "
                     "the numbers cover the ops that ran\n");
    sb_printf(out, "makespan      %.3f ms\n", human_fix(r->makespan_ms, 3));
    if (r->makespan_ms > 0)
        sb_printf(out, "throughput    %.2f micro-batches/s\n", p->M / (r->makespan_ms / 1000.0));
    else
        sb_puts(out, "throughput    -\n");
    sb_printf(out, "bubble ratio  %.4f (%.2f%% of P x makespan idle)\n",
              human_fix(r->bubble_ratio, 4), human_fix(100 * r->bubble_ratio, 2));
    if (isfinite(r->overhead_ratio))
        sb_printf(out, "overhead      %.4f (idle + recompute, %.2f%% of P x makespan)\n",
                  human_fix(r->overhead_ratio, 4), human_fix(100 * r->overhead_ratio, 2));
    else
        sb_puts(out, "overhead      -\n");
    if (isfinite(r->lower_bound_ms) && r->lower_bound_ms > 0)
        sb_printf(out, "makespan %.3f ms, %.2f%% above the lower bound (%.3f ms)\n",
                  human_fix(r->makespan_ms, 3),
                  human_fix(100 * (r->makespan_ms / r->lower_bound_ms - 1), 2),
                  human_fix(r->lower_bound_ms, 3));
    else
        sb_puts(out, "lower bound   -\n");
    if (isfinite(r->tokens_per_s))
        sb_printf(out, "tokens/s      %.0f\n", r->tokens_per_s);
    else
        sb_puts(out, "tokens/s      - (no model)\n");
    if (isfinite(r->mfu))
        sb_printf(out, "MFU           %.2f%% (model FLOPs / (makespan x GPUs x peak))\n",
                  human_fix(100 * r->mfu, 2));
    else
        sb_puts(out, "MFU           - (no model or device)\n");
    sb_putc(out, '\n');
    sb_printf(out, "%5s %9s %9s %10s %10s %10s %10s %6s\n", "stage", "busy ms", "idle ms",
              "fwd bubble", "bwd bubble", "peak mem", "budget", "use");
    for (int32_t s = 0; s < p->P; s++) {
        const SimStage *S = &r->stage[s];
        sb_printf(out, "%5d %9.3f %9.3f %10.3f %10.3f %10s %10s", s, human_fix(S->busy_ms, 3),
                  human_fix(S->idle_ms, 3), human_fix(S->fwd_bubble_ms, 3),
                  human_fix(S->bwd_bubble_ms, 3),
                  sim_fmt_size(a, sizeof a, S->peak_mem_bytes),
                  p->has_memory ? sim_fmt_size(b, sizeof b, p->memory) : "-");
        if (p->has_memory && p->memory > 0)
            sb_printf(out, " %5.1f%%%s\n", 100 * S->peak_mem_bytes / p->memory,
                      S->peak_mem_bytes > p->memory ? "  over budget" : "");
        else
            sb_puts(out, "      -\n");
    }
    if (!r->dp)
        return;
    sb_printf(out, "\ndata parallel %d replicas, zero %d, %s gradients: the iteration ends "
                   "%.3f ms later than without its stream\n",
              sim_dp_replicas(p), p->zero, grad_dtype_name[p->grad_dtype],
              human_fix(r->dp_exposed_ms, 3));
    sb_printf(out, "%5s %10s %10s %10s %10s\n", "stage", "reduce ms", "gather ms", "opt ms",
              "exposed ms");
    for (int32_t s = 0; s < p->P; s++) {
        const SimStage *S = &r->stage[s];
        sb_printf(out, "%5d %10.3f %10.3f %10.3f %10.3f\n", s, human_fix(S->dp_reduce_ms, 3),
                  human_fix(S->dp_gather_ms, 3), human_fix(S->opt_ms, 3),
                  human_fix(S->dp_exposed_ms, 3));
    }
}
