/* sim.c - the simulator of DESIGN.md "Time": an event-driven list scheduler that is
 * linear in the number of ops, plus the --json object and the human summary.
 *
 * Legend: P = ranks, M = micro-batches, V = chunks per rank, PV = P*V virtual stages;
 * an op's global id g = off[rank] + position in the rank's list. Times in ms, memory in
 * bytes.
 *
 * Model. Each rank has three streams (compute: F/B/W/R; d2h: SO, OG; h2d: SI, LW) that
 * run their ops in listed order. An op starts at the latest of: its stream is free; every op it
 * waits for (DESIGN.md "Dependencies" and `dep` edges) has ended, plus the waiting
 * rank's `p2p` when that op is on another rank; for an allocating op (F, R, SI, LW), the
 * last SO listed before it on its rank has ended (SOs end in listed order, so that is
 * every earlier SO). Because streams never reorder, start times are a max-plus longest
 * path over a DAG and need no priority queue.
 *
 * Algorithm. One cursor per (rank, stream) walks the rank's list. A cursor advances
 * while its head op's predecessors have all ended; when one has not, the cursor hangs
 * itself on that predecessor's waiter list (one cursor waits on one op at a time) and
 * is pushed back on the ready stack when the predecessor completes. Every op is
 * completed once and each cursor head is re-examined at most once per predecessor, so
 * the whole run is O(ops + deps). Ops never reached leave the schedule stuck (a cycle).
 *
 * Memory. The per-op byte changes come from the list-order walk of DESIGN.md "Memory"
 * (the same amounts as mem_walk); the simulator replays them in time order (allocations
 * at an op's start, frees at its end, frees first at equal times) for the peak and the
 * trace's counter track. docs/simulator.md states the readings chosen.
 *
 * Model-state offload (docs/semantics.md "Model-state offload"): OG(c) waits for every
 * B and W of chunk c on its rank (as they run in listed order on one stream, for the
 * last-listed one) and lasts grads / host_bw + opt_host; LW(c) lasts wload / host_bw and
 * every F of chunk c waits for it. LW allocates the chunk's grads + wload bytes at its
 * start, OG frees them at its end. */
#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define CROSS 0x80000000u   /* flag on a dep source id: the source is on another rank */

/* Costs of one (rank, chunk), looked up once per run (ir_cost is not free). */
typedef struct CostRow {
    double f, b, w, r;          /* ms */
    double act, ckpt, wact;     /* bytes */
    double grads, wload;        /* bytes OG moves out / LW brings back */
    double opt_host;            /* ms: OG's host optimizer step */
} CostRow;

typedef struct RankCost {
    double p2p;                 /* ms added to a cross-rank wait */
    double ms_per_byte;         /* 1000 / host_bw; 0 when unlimited */
    double frac;                /* swap_fraction */
    double weights;             /* bytes */
} RankCost;

typedef struct Cursor {
    uint32_t rank;
    uint32_t stream;            /* Stream */
    uint32_t pos;               /* next list position to look at */
    uint32_t last_so;           /* global id of the last SO listed before pos, or NONE */
    uint32_t next;              /* next cursor on the same waiter list / ready stack */
    double free_at;             /* ms: when the stream is free */
} Cursor;

/* Scratch memory of one run, kept between sim_makespan calls. */
typedef struct Sim {
    uint32_t *index;    /* [OP_NKINDS][PV*M]: global id of (kind, v, m), or NONE */
    double *held;       /* [PV*M]: bytes (v,m) holds during the list walk */
    double *mstate;     /* [P*V]: model-state bytes LW loaded for (rank, chunk) */
    uint32_t *lastbw;   /* [P*V]: global id of the last-listed B or W of (rank, chunk) */
    double *end;        /* [nops] ms; < 0 while not done */
    double *dur;        /* [nops] ms */
    double *delta;      /* [nops] bytes: > 0 allocated at start, < 0 freed at end */
    uint32_t *waiter;   /* [nops]: first cursor waiting for the op, or NONE */
    uint32_t *off;      /* [P+1]: global id of each rank's first op */
    int32_t *vst;       /* [P*V]: virtual stage of (rank, chunk) */
    int32_t *vowner;    /* [PV]: rank owning each virtual stage */
    CostRow *cost;      /* [P*V] */
    RankCost *rc;       /* [P] */
    Cursor *cur;        /* [3P] */
    uint32_t *depoff;   /* [nops+1]: dep sources of op g are depsrc[depoff[g]..depoff[g+1]) */
    uint32_t *depsrc;   /* [ndeps]: global id | CROSS */
    uint8_t *smask;     /* [P]: bit st set when the rank has ops on stream st */
    size_t cap_index, cap_held, cap_dur, cap_delta, cap_waiter, cap_end, cap_off, cap_rc,
        cap_cur, cap_vst, cap_cost, cap_vowner, cap_depoff, cap_depsrc, cap_smask, cap_mstate,
        cap_lastbw;
    uint64_t nops;
    uint64_t nvm;       /* PV*M */
    bool has_deps;
} Sim;

static void grow(void **p, size_t *cap, size_t need, size_t esz)
{
    if (need <= *cap && *p)
        return;
    free(*p);
    *p = xmalloc((need ? need : 1) * esz);
    *cap = need;
}
#define GROW(field, capf, need) grow((void **)&s->field, &s->capf, (need), sizeof *s->field)

static void sim_scratch_release(Sim *s)
{
    free(s->index);
    free(s->held);
    free(s->mstate);
    free(s->lastbw);
    free(s->end);
    free(s->dur);
    free(s->delta);
    free(s->waiter);
    free(s->off);
    free(s->vst);
    free(s->vowner);
    free(s->cost);
    free(s->rc);
    free(s->cur);
    free(s->depoff);
    free(s->depsrc);
    free(s->smask);
}

void sim_scratch_free(void *scratch)
{
    if (!scratch)
        return;
    sim_scratch_release(scratch);
    free(scratch);
}

/* 1 + the stream of each op kind (op_stream of ir.h, as a table the compiler can
 * inline); 0 for kinds out of range. IN_STREAM(kind, st): the kind runs on stream st. */
static const uint8_t stream1[256] = {
    [OP_F] = 1 + STREAM_COMPUTE, [OP_B] = 1 + STREAM_COMPUTE, [OP_W] = 1 + STREAM_COMPUTE,
    [OP_R] = 1 + STREAM_COMPUTE, [OP_SO] = 1 + STREAM_D2H, [OP_SI] = 1 + STREAM_H2D,
    [OP_OG] = 1 + STREAM_D2H, [OP_LW] = 1 + STREAM_H2D,
};
#define IN_STREAM(kind, st) (stream1[(kind)] == 1u + (unsigned)(st))

static bool op_valid(const Pipeline *p, const Op *op)
{
    return op->kind < OP_NKINDS && op->chunk < (uint32_t)p->V && op->mb < (uint32_t)p->M;
}

static uint32_t lookup(const Sim *s, OpKind k, uint64_t vm)
{
    return s->index[(uint64_t)k * s->nvm + vm];
}

/* The op index, the cost tables, per-op durations and memory changes (the list walk of
 * DESIGN.md "Memory") and the dep lists. Returns false when the pipeline cannot be
 * indexed densely (P*V*M beyond the op count: an incomplete schedule, so not runnable).
 * ext_end, when not NULL, receives the end times instead of s->end. */
static bool prepare(Sim *s, const Pipeline *p, double *ext_end)
{
    int32_t P = p->P, V = p->V, M = p->M;
    s->nops = pipeline_nops(p);
    if (P <= 0 || V <= 0 || M <= 0)
        return false;
    s->nvm = (uint64_t)P * (uint64_t)V * (uint64_t)M;
    /* A checked schedule has an F and a B for every (v,m): nvm <= nops / 2. */
    if (s->nvm > s->nops || s->nops >= (uint64_t)CROSS)
        return false;
    size_t nops = (size_t)s->nops, nvm = (size_t)s->nvm, pv = (size_t)P * (size_t)V;

    GROW(index, cap_index, (size_t)OP_NKINDS * nvm);
    GROW(held, cap_held, nvm);
    GROW(dur, cap_dur, nops);
    GROW(delta, cap_delta, nops);
    GROW(waiter, cap_waiter, nops);
    if (!ext_end)
        GROW(end, cap_end, nops);
    GROW(off, cap_off, (size_t)P + 1);
    GROW(rc, cap_rc, (size_t)P);
    GROW(cur, cap_cur, 3 * (size_t)P);
    GROW(vst, cap_vst, pv);
    GROW(cost, cap_cost, pv);
    GROW(vowner, cap_vowner, pv);
    GROW(smask, cap_smask, (size_t)P);
    GROW(mstate, cap_mstate, pv);
    GROW(lastbw, cap_lastbw, pv);

    double *end = ext_end ? ext_end : s->end;
    memset(s->index, 0xff, (size_t)OP_NKINDS * nvm * sizeof *s->index);
    memset(s->waiter, 0xff, nops * sizeof *s->waiter);
    for (size_t i = 0; i < nvm; i++)
        s->held[i] = 0;
    for (size_t i = 0; i < pv; i++) {
        s->mstate[i] = 0;
        s->lastbw[i] = NONE;
    }
    for (size_t i = 0; i < nops; i++)
        end[i] = -1;

    for (int32_t r = 0; r < P; r++) {
        RankCost *rc = &s->rc[r];
        rc->p2p = ir_cost(p, r, 0, COST_P2P);
        double bw = ir_cost(p, r, 0, COST_HOST_BW);
        rc->ms_per_byte = (bw > 0 && isfinite(bw)) ? 1000.0 / bw : 0;
        rc->frac = ir_cost(p, r, 0, COST_SWAP_FRACTION);
        rc->weights = ir_cost(p, r, 0, COST_WEIGHTS);
        for (int32_t c = 0; c < V; c++) {
            CostRow *k = &s->cost[(size_t)r * V + c];
            k->f = ir_cost(p, r, c, COST_F);
            k->b = ir_cost(p, r, c, COST_B);
            k->w = ir_cost(p, r, c, COST_W);
            k->r = ir_cost(p, r, c, COST_R);
            k->act = ir_cost(p, r, c, COST_ACT);
            k->ckpt = ir_cost(p, r, c, COST_CKPT);
            k->wact = ir_cost(p, r, c, COST_WACT);
            k->grads = ir_cost(p, r, c, COST_GRADS);
            k->wload = ir_cost(p, r, c, COST_WLOAD);
            k->opt_host = ir_cost(p, r, c, COST_OPT_HOST);
            int32_t v = ir_vstage(p, r, c);
            s->vst[(size_t)r * V + c] = v;
            if (v >= 0 && (size_t)v < pv)
                s->vowner[v] = r;
        }
    }

    /* The index: the first occurrence of each (kind, v, m) wins, as in check.h. */
    uint32_t g = 0;
    for (int32_t r = 0; r < P; r++) {
        s->off[r] = g;
        const StageOps *so = &p->stages[r];
        for (uint32_t i = 0; i < so->n; i++, g++) {
            const Op *op = &so->ops[i];
            if (!op_valid(p, op))
                continue;
            uint64_t vm = (uint64_t)s->vst[(size_t)r * V + op->chunk] * M + op->mb;
            uint32_t *slot = &s->index[(uint64_t)op->kind * s->nvm + vm];
            if (*slot == NONE)
                *slot = g;
            if (op->kind == OP_B || op->kind == OP_W)
                s->lastbw[(size_t)r * V + op->chunk] = g;
        }
    }
    s->off[P] = g;

    /* Durations and memory changes, walking each rank's list in order. */
    for (int32_t r = 0; r < P; r++) {
        const StageOps *so = &p->stages[r];
        const RankCost *rc = &s->rc[r];
        uint32_t base = s->off[r];
        unsigned mask = 0;
        for (uint32_t i = 0; i < so->n; i++) {
            const Op *op = &so->ops[i];
            uint32_t gi = base + i;
            s->dur[gi] = 0;
            s->delta[gi] = 0;
            mask |= stream1[op->kind] ? 1u << (stream1[op->kind] - 1) : 0;
            if (!op_valid(p, op))
                continue;
            const CostRow *k = &s->cost[(size_t)r * V + op->chunk];
            uint64_t vm = (uint64_t)s->vst[(size_t)r * V + op->chunk] * M + op->mb;
            double *held = &s->held[vm], d = 0, x = 0;
            switch ((OpKind)op->kind) {
            case OP_F:
                d = k->f;
                x = lookup(s, OP_R, vm) != NONE ? k->ckpt : k->act;
                *held += x;
                break;
            case OP_B: {
                bool w = lookup(s, OP_W, vm) != NONE;
                d = w ? k->b - k->w : k->b;
                double keep = w ? fmin(k->wact, *held) : 0;
                x = -(*held - keep);
                *held = keep;
                break;
            }
            case OP_W:
                d = k->w;
                x = -*held;
                *held = 0;
                break;
            case OP_R:
                d = k->r;
                x = k->act - k->ckpt;
                *held += x;
                break;
            case OP_SO:
                x = -(rc->frac * *held);
                *held += x;
                d = -x * rc->ms_per_byte;
                break;
            case OP_SI: {
                /* Brings back what the SO moved, if the SO was walked already. */
                uint32_t o = lookup(s, OP_SO, vm);
                if (o != NONE && o >= base && o < gi)
                    x = -s->delta[o];
                *held += x;
                d = x * rc->ms_per_byte;
                break;
            }
            case OP_LW: {
                double *ms = &s->mstate[(size_t)r * V + op->chunk];
                x = k->grads + k->wload;
                *ms += x;
                d = k->wload * rc->ms_per_byte;
                break;
            }
            case OP_OG: {
                double *ms = &s->mstate[(size_t)r * V + op->chunk];
                x = -*ms;
                *ms = 0;
                d = k->grads * rc->ms_per_byte + k->opt_host;
                break;
            }
            default:
                unreachable();
            }
            s->dur[gi] = d > 0 ? d : 0;
            s->delta[gi] = x;
        }
        s->smask[r] = (uint8_t)mask;
    }

    /* `dep A -> B` lists, as compressed rows keyed by B's global id. */
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
                uint64_t vm = (uint64_t)s->vst[(size_t)o->stage * V + o->chunk] * M + o->mb;
                uint32_t id = lookup(s, (OpKind)o->kind, vm);
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
    return true;
}

/* Runs the cursors to completion. start may be NULL (makespan only). Returns the number
 * of ops completed; *makespan gets the last end. */
static uint64_t schedule(Sim *s, const Pipeline *p, double *end, double *start, double *makespan)
{
    int32_t P = p->P, V = p->V;
    uint32_t M = (uint32_t)p->M, PV = (uint32_t)P * (uint32_t)V;
    uint32_t ncur = 3 * (uint32_t)P, ready = NONE;
    for (uint32_t c = 0; c < ncur; c++) {
        Cursor *k = &s->cur[c];
        k->rank = c / 3;
        k->stream = c % 3;
        k->pos = 0;
        k->last_so = NONE;
        k->free_at = 0;
        k->next = NONE;
        /* A stream with no ops on its rank never needs its cursor. */
        if (s->smask[k->rank] & (1u << k->stream)) {
            k->next = ready;
            ready = c;
        }
    }
    uint64_t done = 0;
    double last = 0;

    while (ready != NONE) {
        uint32_t cid = ready;
        Cursor *k = &s->cur[cid];
        ready = k->next;
        k->next = NONE;
        uint32_t r = k->rank;
        const StageOps *so = &p->stages[r];
        const uint32_t base = s->off[r];
        const int32_t *vst = &s->vst[(size_t)r * V];
        const double p2p = s->rc[r].p2p;
        uint32_t blocked = NONE;

        while (k->pos < so->n) {
            const Op *op = &so->ops[k->pos];
            uint32_t g = base + k->pos;
            OpKind kind = (OpKind)op->kind;
            if (!IN_STREAM(op->kind, k->stream)) {
                if (kind == OP_SO)
                    k->last_so = g;
                k->pos++;
                continue;
            }
            double t = k->free_at;
            if (op_valid(p, op)) {
                uint32_t v = (uint32_t)vst[op->chunk];
                uint64_t vm = (uint64_t)v * M + op->mb;
                uint32_t pre[4];
                bool cross[4] = {false, false, false, false};
                int np = 0;
#define WAIT_FOR(kk, vmx) pre[np++] = lookup(s, (kk), (vmx))
                switch (kind) {
                case OP_F:
                    if (v > 0) {
                        cross[np] = s->vowner[v - 1] != (int32_t)r;
                        WAIT_FOR(OP_F, vm - M);
                    }
                    WAIT_FOR(OP_LW, (uint64_t)v * M);
                    break;
                case OP_B:
                    if (v + 1 < PV) {
                        cross[np] = s->vowner[v + 1] != (int32_t)r;
                        WAIT_FOR(OP_B, vm + M);
                    }
                    WAIT_FOR(OP_F, vm);
                    WAIT_FOR(OP_R, vm);
                    WAIT_FOR(OP_SI, vm);
                    break;
                case OP_W:
                    WAIT_FOR(OP_B, vm);
                    break;
                case OP_R:
                    WAIT_FOR(OP_F, vm);
                    WAIT_FOR(OP_SI, vm);
                    break;
                case OP_SO:
                    WAIT_FOR(OP_F, vm);
                    break;
                case OP_SI:
                    WAIT_FOR(OP_SO, vm);
                    break;
                case OP_OG:
                    pre[np++] = s->lastbw[(size_t)r * V + op->chunk];
                    break;
                case OP_LW:
                    break;
                default:
                    unreachable();
                }
#undef WAIT_FOR
                for (int i = 0; i < np; i++) {
                    uint32_t q = pre[i];
                    if (q == NONE)
                        continue;
                    double e = end[q];
                    if (e < 0) {
                        blocked = q;
                        goto wait;
                    }
                    if (cross[i])
                        e += p2p;
                    if (e > t)
                        t = e;
                }
                if ((kind == OP_F || kind == OP_R || kind == OP_SI || kind == OP_LW) &&
                    k->last_so != NONE) {
                    double e = end[k->last_so];
                    if (e < 0) {
                        blocked = k->last_so;
                        goto wait;
                    }
                    if (e > t)
                        t = e;
                }
                if (s->has_deps) {
                    for (uint32_t i = s->depoff[g]; i < s->depoff[g + 1]; i++) {
                        uint32_t q = s->depsrc[i] & ~CROSS;
                        double e = end[q];
                        if (e < 0) {
                            blocked = q;
                            goto wait;
                        }
                        if (s->depsrc[i] & CROSS)
                            e += p2p;
                        if (e > t)
                            t = e;
                    }
                }
            }
            double e = t + s->dur[g];
            end[g] = e;
            if (start)
                start[g] = t;
            k->free_at = e;
            if (e > last)
                last = e;
            done++;
            k->pos++;
            for (uint32_t w = s->waiter[g]; w != NONE;) {
                uint32_t nx = s->cur[w].next;
                s->cur[w].next = ready;
                ready = w;
                w = nx;
            }
            s->waiter[g] = NONE;
        }
        continue;
    wait:
        k->next = s->waiter[blocked];
        s->waiter[blocked] = cid;
    }
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

SimResult *simulate(const Pipeline *p)
{
    SimResult *res = xcalloc(1, sizeof *res);
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
    double makespan;
    uint64_t done = schedule(&s, p, eb, sb, &makespan);
    res->stuck = done != s.nops;
    if (res->stuck)
        for (size_t i = 0; i < nops; i++)
            if (eb[i] < 0)
                eb[i] = sb[i] = 0;
    res->makespan_ms = makespan;

    double idle_sum = 0;
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
        /* Sums of the same doubles in another order can differ in the last bit. */
        S->busy_ms = busy;
        S->idle_ms = fmax(0, makespan - busy);
        S->fwd_bubble_ms = fmax(0, fwd);
        S->bwd_bubble_ms = fmax(0, bwd);
        idle_sum += S->idle_ms;
        double w = s.rc[r].weights;
        S->static_mem_bytes = w;
        S->peak_mem_bytes = replay(so, st, en, s.delta + base, w, NULL, NULL);
        S->peak_act_bytes = S->peak_mem_bytes - w;
    }
    res->bubble_ratio = (P > 0 && makespan > 0) ? idle_sum / (P * makespan) : 0;
    sim_scratch_release(&s);
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
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    double x = bytes;
    while (fabs(x) >= 1024 && u < 5) {
        x /= 1024;
        u++;
    }
    if (!isfinite(bytes))
        snprintf(buf, n, "-");
    else if (u == 0)
        snprintf(buf, n, "%.0f B", x);
    else
        snprintf(buf, n, "%.1f %s", x, unit[u]);
    return buf;
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
              sim_fmt_num(b, sizeof b, round(r->bubble_ratio * 1e4) / 1e4));
    sb_puts(out, ", \"per_stage\": [");
    for (int32_t s = 0; s < p->P; s++) {
        const SimStage *S = &r->stage[s];
        sb_printf(out, "%s{\"stage\": %d, \"busy_ms\": %s, \"idle_ms\": %s", s ? ", " : "", s,
                  sim_fmt_num(a, sizeof a, S->busy_ms), sim_fmt_num(b, sizeof b, S->idle_ms));
        sb_printf(out, ", \"fwd_bubble_ms\": %s, \"bwd_bubble_ms\": %s",
                  sim_fmt_num(a, sizeof a, S->fwd_bubble_ms),
                  sim_fmt_num(b, sizeof b, S->bwd_bubble_ms));
        sb_printf(out, ", \"peak_mem_bytes\": %s, \"budget_bytes\": %s"
                       ", \"static_mem_bytes\": %s, \"peak_act_bytes\": %s}",
                  sim_fmt_bytes(a, sizeof a, S->peak_mem_bytes),
                  p->has_memory ? sim_fmt_bytes(b, sizeof b, p->memory) : "null",
                  sim_fmt_bytes(c, sizeof c, S->static_mem_bytes),
                  sim_fmt_bytes(d, sizeof d, S->peak_act_bytes));
    }
    sb_puts(out, "]}\n");
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
    sb_printf(out, "makespan      %.3f ms\n", r->makespan_ms);
    if (r->makespan_ms > 0)
        sb_printf(out, "throughput    %.2f micro-batches/s\n", p->M / (r->makespan_ms / 1000.0));
    else
        sb_puts(out, "throughput    -\n");
    sb_printf(out, "bubble ratio  %.4f (%.2f%% of P x makespan idle)\n\n", r->bubble_ratio,
              100 * r->bubble_ratio);
    sb_printf(out, "%5s %9s %9s %10s %10s %10s %10s %6s\n", "stage", "busy ms", "idle ms",
              "fwd bubble", "bwd bubble", "peak mem", "budget", "use");
    for (int32_t s = 0; s < p->P; s++) {
        const SimStage *S = &r->stage[s];
        sb_printf(out, "%5d %9.3f %9.3f %10.3f %10.3f %10s %10s", s, S->busy_ms, S->idle_ms,
                  S->fwd_bubble_ms, S->bwd_bubble_ms,
                  sim_fmt_size(a, sizeof a, S->peak_mem_bytes),
                  p->has_memory ? sim_fmt_size(b, sizeof b, p->memory) : "-");
        if (p->has_memory && p->memory > 0)
            sb_printf(out, " %5.1f%%%s\n", 100 * S->peak_mem_bytes / p->memory,
                      S->peak_mem_bytes > p->memory ? "  over budget" : "");
        else
            sb_puts(out, "      -\n");
    }
}
