/* arena_plan.c - static memory planning (see arena_plan.h for the model). */
#include "arena_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define NONE UINT32_MAX

static int64_t align_up(int64_t n)
{
    if (n <= 0)
        return 0;
    return (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
}

static int64_t clamp_bytes(double b)
{
    if (!(b > 0))
        return 0;
    if (b > 4.0e18)
        return (int64_t)4000000000000000000LL;
    return (int64_t)ceil(b);
}

ArenaSizes *arena_sizes_from_costs(const Pipeline *p)
{
    size_t nv = (size_t)p->P * (size_t)p->V;
    ArenaSizes *sz = xcalloc(nv, sizeof *sz);
    for (int32_t s = 0; s < p->P; s++)
        for (int32_t c = 0; c < p->V; c++) {
            ArenaSizes *z = &sz[ir_vstage(p, s, c)];
            z->act = clamp_bytes(ir_cost(p, s, c, COST_ACT));
            z->ckpt = clamp_bytes(ir_cost(p, s, c, COST_CKPT));
            z->wact = clamp_bytes(ir_cost(p, s, c, COST_WACT));
        }
    return sz;
}

/* A piece of a region: bytes [lo, hi) relative to its incarnation, live over list
 * times [t0, t1] (op i starts at 2i and ends at 2i+1). */
typedef struct Piece {
    int64_t lo, hi;
    uint64_t t0, t1;
} Piece;

/* One incarnation of a (v,m) region: its pieces, then its offset once placed. */
typedef struct Inc {
    uint32_t first_piece, npieces;
    uint64_t t0;     /* earliest piece start */
    int64_t off;
} Inc;

/* A placed piece, absolute addresses. */
typedef struct Placed {
    int64_t lo, hi;
    uint64_t t0, t1;
} Placed;

/* Positions of the ops of one (v,m) on a rank. */
typedef struct Pos {
    uint32_t at[OP_NKINDS];
} Pos;

static int cmp_inc(const void *a, const void *b)
{
    const Inc *x = a, *y = b;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct Ev {
    uint64_t t;
    int64_t delta;
} Ev;

static int cmp_ev(const void *a, const void *b)
{
    const Ev *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    /* frees first: a free at t is the end of the op before the one allocating at t */
    return x->delta < y->delta ? -1 : x->delta > y->delta ? 1 : 0;
}

static bool fits(const Piece *pc, uint32_t n, int64_t off, const Placed *act, size_t nact)
{
    for (uint32_t g = 0; g < n; g++)
        for (size_t k = 0; k < nact; k++) {
            const Placed *s = &act[k];
            if (s->t1 < pc[g].t0 || pc[g].t1 < s->t0)
                continue;
            if (off + pc[g].lo < s->hi && s->lo < off + pc[g].hi)
                return false;
        }
    return true;
}

/* Plans rank s into r. */
static void plan_rank(const Pipeline *p, int32_t s, const ArenaSizes *sz, int full_swap,
                      ArenaRank *r)
{
    const StageOps *so = &p->stages[s];
    uint32_t n = so->n;
    size_t V = (size_t)p->V, M = (size_t)p->M;
    r->nops = n;
    r->off = xmalloc((n ? n : 1) * sizeof *r->off);
    r->held = xcalloc(n ? n : 1, sizeof *r->held);
    for (uint32_t i = 0; i < n; i++)
        r->off[i] = -1;
    if (!n || !V || !M)
        return;

    /* Index the ops of each (chunk, mb) on this rank; the first occurrence wins. */
    Pos *pos = xmalloc(V * M * sizeof *pos);
    for (size_t k = 0; k < V * M; k++)
        for (int j = 0; j < OP_NKINDS; j++)
            pos[k].at[j] = NONE;
    for (uint32_t i = 0; i < n; i++) {
        const Op *o = &so->ops[i];
        if (o->chunk >= V || o->mb >= M || o->kind >= OP_NKINDS)
            continue;
        Pos *q = &pos[o->chunk * M + o->mb];
        if (q->at[o->kind] == NONE)
            q->at[o->kind] = i;
    }
    double frac = ir_cost(p, s, 0, COST_SWAP_FRACTION);
    bool swap_frees = full_swap || frac >= 1.0;

    Piece *pieces = NULL;
    size_t npieces = 0, cappieces = 0;
    Inc *incs = NULL;
    size_t nincs = 0, capincs = 0;
    /* For each (chunk, mb): its incarnations (index into incs before sorting). */
    uint32_t *inc0 = xmalloc(V * M * sizeof *inc0), *inc1 = xmalloc(V * M * sizeof *inc1);

    for (size_t c = 0; c < V; c++)
        for (size_t m = 0; m < M; m++) {
            size_t k = c * M + m;
            inc0[k] = inc1[k] = NONE;
            const Pos *q = &pos[k];
            uint32_t F = q->at[OP_F], B = q->at[OP_B], W = q->at[OP_W], R = q->at[OP_R];
            uint32_t SO = q->at[OP_SO], SI = q->at[OP_SI];
            if (F == NONE || B == NONE || B < F)
                continue;
            const ArenaSizes *z = &sz[ir_vstage(p, s, (int32_t)c)];
            int64_t a = align_up(z->act);
            int64_t kk = R != NONE ? align_up(z->ckpt < z->act ? z->ckpt : z->act) : a;
            int64_t w = W != NONE ? align_up(z->wact < z->act ? z->wact : z->act) : 0;
            if (R != NONE && (R < F || R > B))
                kk = a, R = NONE; /* misordered R: plan as if F kept everything */
            if (W != NONE && W < B)
                w = 0, W = NONE;
            if (a == 0)
                continue;
            /* Elementary segments between the prefix boundaries. */
            int64_t bnd[4] = {0, kk, w, a};
            qsort(bnd, 4, sizeof bnd[0], cmp_i64);
            bool swap = swap_frees && SO != NONE && SI != NONE && SO > F && SI > SO &&
                        SI < B;
            uint32_t start0 = (uint32_t)npieces;
            Piece later[4];
            int nlater = 0;
            int64_t held_so = 0;
            for (int j = 0; j < 3; j++) {
                int64_t lo = bnd[j], hi = bnd[j + 1];
                if (hi <= lo)
                    continue;
                uint64_t t0 = (R != NONE && lo >= kk) ? 2ull * R : 2ull * F;
                uint64_t t1 = (W != NONE && hi <= w) ? 2ull * W + 1 : 2ull * B + 1;
                Piece pc = {lo, hi, t0, t1};
                if (swap) {
                    uint64_t tso = 2ull * SO + 1, tsi = 2ull * SI;
                    if (t0 <= 2ull * SO && t1 >= tso) {
                        /* live at the SO: moved out, back in at the SI */
                        if (hi > held_so)
                            held_so = hi;
                        Piece first = {lo, hi, t0, tso};
                        VEC_PUSH(pieces, npieces, cappieces, first);
                        later[nlater++] = (Piece){lo, hi, tsi, t1};
                        continue;
                    }
                    if (t0 > 2ull * SO) { /* allocated after the SO (by an R) */
                        later[nlater++] = pc;
                        continue;
                    }
                }
                VEC_PUSH(pieces, npieces, cappieces, pc);
            }
            if ((uint32_t)npieces > start0) {
                Inc in = {start0, (uint32_t)npieces - start0, 0, 0};
                in.t0 = pieces[start0].t0;
                for (uint32_t g = start0; g < npieces; g++)
                    if (pieces[g].t0 < in.t0)
                        in.t0 = pieces[g].t0;
                inc0[k] = (uint32_t)nincs;
                VEC_PUSH(incs, nincs, capincs, in);
            }
            if (nlater) {
                Inc in = {(uint32_t)npieces, (uint32_t)nlater, UINT64_MAX, 0};
                for (int g = 0; g < nlater; g++) {
                    VEC_PUSH(pieces, npieces, cappieces, later[g]);
                    if (later[g].t0 < in.t0)
                        in.t0 = later[g].t0;
                }
                inc1[k] = (uint32_t)nincs;
                VEC_PUSH(incs, nincs, capincs, in);
            }
            /* What each op of (v,m) works on; fixed up with offsets after placement. */
            r->held[F] = R != NONE ? kk : a;
            if (R != NONE)
                r->held[R] = a - kk;
            if (swap) {
                r->held[SO] = held_so;
                r->held[SI] = held_so;
            }
        }

    /* Place the incarnations in order of first allocation (first fit). */
    uint32_t *order = xmalloc((nincs ? nincs : 1) * sizeof *order);
    {
        Inc *sorted = xmalloc((nincs ? nincs : 1) * sizeof *sorted);
        memcpy(sorted, incs, nincs * sizeof *sorted);
        for (size_t i = 0; i < nincs; i++)
            sorted[i].off = (int64_t)i; /* remember the original index */
        qsort(sorted, nincs, sizeof *sorted, cmp_inc);
        for (size_t i = 0; i < nincs; i++)
            order[i] = (uint32_t)sorted[i].off;
        free(sorted);
    }
    Placed *act = NULL;
    size_t nact = 0, capact = 0;
    int64_t *cand = NULL;
    size_t capcand = 0;
    int64_t arena = 0;
    for (size_t oi = 0; oi < nincs; oi++) {
        Inc *in = &incs[order[oi]];
        /* Drop pieces that ended before this incarnation starts. */
        size_t keep = 0;
        for (size_t k = 0; k < nact; k++)
            if (act[k].t1 >= in->t0)
                act[keep++] = act[k];
        nact = keep;
        const Piece *pc = &pieces[in->first_piece];
        size_t ncand = 0;
        VEC_PUSH(cand, ncand, capcand, 0);
        int64_t top = 0;
        for (size_t k = 0; k < nact; k++) {
            if (act[k].hi > top)
                top = act[k].hi;
            for (uint32_t g = 0; g < in->npieces; g++)
                if (act[k].hi - pc[g].lo >= 0)
                    VEC_PUSH(cand, ncand, capcand, act[k].hi - pc[g].lo);
        }
        qsort(cand, ncand, sizeof *cand, cmp_i64);
        int64_t off = top;
        size_t tried = 0;
        for (size_t k = 0; k < ncand && tried < ARENA_MAX_CANDIDATES; k++) {
            if (k && cand[k] == cand[k - 1])
                continue;
            tried++;
            if (fits(pc, in->npieces, cand[k], act, nact)) {
                off = cand[k];
                break;
            }
        }
        in->off = off;
        for (uint32_t g = 0; g < in->npieces; g++) {
            Placed pl = {off + pc[g].lo, off + pc[g].hi, pc[g].t0, pc[g].t1};
            VEC_PUSH(act, nact, capact, pl);
            if (pl.hi > arena)
                arena = pl.hi;
        }
    }
    r->size = arena;

    /* Peak of live bytes: a sweep over piece starts and ends. */
    Ev *ev = xmalloc((2 * npieces + 1) * sizeof *ev);
    for (size_t g = 0; g < npieces; g++) {
        ev[2 * g] = (Ev){pieces[g].t0, pieces[g].hi - pieces[g].lo};
        ev[2 * g + 1] = (Ev){pieces[g].t1 + 1, -(pieces[g].hi - pieces[g].lo)};
    }
    qsort(ev, 2 * npieces, sizeof *ev, cmp_ev);
    int64_t live = 0;
    r->peak_live = 0;
    r->peak_op = 0;
    for (size_t e = 0; e < 2 * npieces; e++) {
        live += ev[e].delta;
        if (live > r->peak_live) {
            r->peak_live = live;
            r->peak_op = (uint32_t)(ev[e].t / 2);
        }
    }

    /* Offsets per op. */
    for (uint32_t i = 0; i < n; i++) {
        const Op *o = &so->ops[i];
        if (o->chunk >= V || o->mb >= M || o->kind >= OP_NKINDS)
            continue;
        size_t k = o->chunk * M + o->mb;
        uint32_t SI = pos[k].at[OP_SI];
        bool second = inc1[k] != NONE && SI != NONE && i >= SI;
        uint32_t ix = second ? inc1[k] : inc0[k];
        if (o->kind == OP_SI && inc1[k] == NONE)
            ix = inc0[k]; /* not swapped out: comes back in place (nothing moves) */
        if (ix != NONE)
            r->off[i] = incs[ix].off;
    }
    free(ev);
    free(act);
    free(cand);
    free(order);
    free(pieces);
    free(incs);
    free(inc0);
    free(inc1);
    free(pos);
}

ArenaPlan *arena_plan(const Pipeline *p, const ArenaSizes *sz, int full_swap)
{
    ArenaPlan *a = xcalloc(1, sizeof *a);
    a->P = p->P;
    a->rank = xcalloc(p->P > 0 ? (size_t)p->P : 1, sizeof *a->rank);
    ArenaSizes *own = NULL;
    if (!sz)
        sz = own = arena_sizes_from_costs(p);
    for (int32_t s = 0; s < p->P; s++)
        plan_rank(p, s, sz, full_swap, &a->rank[s]);
    free(own);
    return a;
}

void arena_plan_free(ArenaPlan *a)
{
    if (!a)
        return;
    for (int32_t s = 0; s < a->P; s++) {
        free(a->rank[s].off);
        free(a->rank[s].held);
    }
    free(a->rank);
    free(a);
}

/* "3.5 GiB", or bytes when small. */
static void fmt_bytes(char *buf, size_t n, double b)
{
    if (b < 1024.0)
        snprintf(buf, n, "%.0f B", b);
    else if (b < 1024.0 * 1024)
        snprintf(buf, n, "%.1f KiB", b / 1024);
    else if (b < 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, n, "%.1f GiB", b / (1024.0 * 1024 * 1024));
}

void arena_plan_report(FILE *out, const Pipeline *p)
{
    ArenaPlan *a = arena_plan(p, NULL, 0);
    fprintf(out, "arena plan (static, first fit; fragmentation = arena / peak live):\n");
    fprintf(out, "%5s %12s %12s %8s %12s %12s %12s\n", "rank", "arena", "peak live",
            "frag", "weights", "total", "budget");
    for (int32_t s = 0; s < p->P; s++) {
        const ArenaRank *r = &a->rank[s];
        double w = ir_cost(p, s, 0, COST_WEIGHTS);
        char b1[32], b2[32], b3[32], b4[32], b5[32];
        fmt_bytes(b1, sizeof b1, (double)r->size);
        fmt_bytes(b2, sizeof b2, (double)r->peak_live);
        fmt_bytes(b3, sizeof b3, w);
        fmt_bytes(b4, sizeof b4, w + (double)r->size);
        if (p->has_memory)
            fmt_bytes(b5, sizeof b5, p->memory);
        else
            snprintf(b5, sizeof b5, "-");
        double frag = r->peak_live > 0 ? (double)r->size / (double)r->peak_live : 1.0;
        fprintf(out, "%5d %12s %12s %8.3f %12s %12s %12s\n", s, b1, b2, frag, b3, b4, b5);
    }
    arena_plan_free(a);
}

int arena_check(Diag *d, const Pipeline *p)
{
    if (!p->has_memory)
        return 0;
    ArenaPlan *a = arena_plan(p, NULL, 0);
    int nerr = 0;
    for (int32_t s = 0; s < p->P; s++) {
        const ArenaRank *r = &a->rank[s];
        double w = ir_cost(p, s, 0, COST_WEIGHTS);
        double total = w + (double)r->size;
        if (total <= p->memory)
            continue;
        char bt[32], bb[32], bo[32], ba[32], bw[32];
        fmt_bytes(bt, sizeof bt, total);
        fmt_bytes(bb, sizeof bb, p->memory);
        fmt_bytes(bo, sizeof bo, total - p->memory);
        fmt_bytes(ba, sizeof ba, (double)r->size);
        fmt_bytes(bw, sizeof bw, w);
        Loc loc = p->stages[s].loc.file != LOC_NONE_FILE ? p->stages[s].loc : p->loc;
        diag_error(d, loc, DIAG_MEMORY,
                   "stage %d: static arena %s + weights %s = %s exceeds the budget %s by %s",
                   s, ba, bw, bt, bb, bo);
        double frag = r->peak_live > 0 ? (double)r->size / (double)r->peak_live : 1.0;
        if (r->peak_op < p->stages[s].n) {
            char nm[32];
            const Op *o = &p->stages[s].ops[r->peak_op];
            diag_note(d, o->loc, "live activations peak at %s (fragmentation %.3f)",
                      op_name(nm, sizeof nm, o->kind, o->mb, o->chunk), frag);
        }
        nerr++;
    }
    arena_plan_free(a);
    return nerr;
}
