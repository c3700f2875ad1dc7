/* arena_plan.c - static memory planning (see arena_plan.h for the model). */
#include "arena_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "opsem.h"
#include "util.h"

#define NONE UINT32_MAX

/* Limits of the offline plans (incarnations of one rank): the greedy orders run up to
 * ARENA_GREEDY_MAX, up to ARENA_SHUFFLES shuffled greedy orders (fewer on larger ranks:
 * about ARENA_SHUFFLE_WORK / n^2) and the exact search (within ARENA_EXACT_NODES nodes)
 * up to ARENA_EXACT_MAX. Beyond them the fast plan stands and `check --mem` shows its fragmentation. */
#define ARENA_GREEDY_MAX 8192
#define ARENA_EXACT_MAX 64
#define ARENA_EXACT_NODES 3000L
#define ARENA_SHUFFLES 2000
#define ARENA_SHUFFLE_WORK 4000000u

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

/* One incarnation of a (v,m) region: the prefix [0, size) at one offset, live over
 * list times [t0, t1], except that [keep, size) already ends at tk (a split B frees
 * everything above wact). size > 0. */
typedef struct Inc {
    int64_t size, keep;
    uint64_t t0, tk, t1;
    int64_t off;
} Inc;

/* A placed piece, absolute addresses and list times. */
typedef struct Placed {
    int64_t lo, hi;
    uint64_t t0, t1;
    uint32_t inc;
} Placed;

/* Positions of the ops of one (v,m) on a rank. */
typedef struct Pos {
    uint32_t at[OP_NKINDS];
} Pos;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The (at most two) pieces of an incarnation, relative to its offset. */
static int inc_pieces(const Inc *in, Placed pc[2])
{
    int n = 0;
    if (in->keep > 0)
        pc[n++] = (Placed){0, in->keep, in->t0, in->t1, 0};
    if (in->keep < in->size)
        pc[n++] = (Placed){in->keep, in->size, in->t0, in->tk, 0};
    return n;
}

/* Whether incarnation `in` fits at offset off against the live placed pieces. */
static bool fits(const Inc *in, int64_t off, const Placed *act, size_t nact)
{
    Placed pc[2];
    int n = inc_pieces(in, pc);
    for (int g = 0; g < n; g++)
        for (size_t k = 0; k < nact; k++) {
            const Placed *s = &act[k];
            if (s->t1 < pc[g].t0 || pc[g].t1 < s->t0)
                continue;
            if (off + pc[g].lo < s->hi && s->lo < off + pc[g].hi)
                return false;
        }
    return true;
}

/* ---- placement ------------------------------------------------------------------- */

/* Free address ranges [lo, hi) of the online allocator, sorted by lo, disjoint and not
 * adjacent. */
typedef struct Gaps {
    int64_t (*g)[2];
    size_t n, cap;
} Gaps;

static void gaps_free(Gaps *z, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return;
    size_t a = 0, b = z->n;
    while (a < b) { /* first gap with lo > the freed lo */
        size_t mid = (a + b) / 2;
        if (z->g[mid][0] <= lo)
            a = mid + 1;
        else
            b = mid;
    }
    bool left = a > 0 && z->g[a - 1][1] == lo, right = a < z->n && z->g[a][0] == hi;
    if (left && right) {
        z->g[a - 1][1] = z->g[a][1];
        memmove(&z->g[a], &z->g[a + 1], (z->n - a - 1) * sizeof *z->g);
        z->n--;
    } else if (left) {
        z->g[a - 1][1] = hi;
    } else if (right) {
        z->g[a][0] = lo;
    } else {
        if (z->n == z->cap) {
            z->cap = z->cap ? 2 * z->cap : 16;
            z->g = xrealloc(z->g, z->cap * sizeof *z->g);
        }
        memmove(&z->g[a + 1], &z->g[a], (z->n - a) * sizeof *z->g);
        z->g[a][0] = lo;
        z->g[a][1] = hi;
        z->n++;
    }
}

/* The lowest free range of `size` bytes (first fit), or with best set the smallest one
 * that fits (best fit, lowest on ties), taken. */
static int64_t gaps_take(Gaps *z, int64_t size, bool best)
{
    size_t pick = z->n;
    for (size_t i = 0; i < z->n; i++)
        if (z->g[i][1] - z->g[i][0] >= size) {
            if (!best) {
                pick = i;
                break;
            }
            if (pick == z->n || z->g[i][1] - z->g[i][0] < z->g[pick][1] - z->g[pick][0])
                pick = i;
        }
    if (pick == z->n)
        unreachable(); /* the last gap is unbounded */
    int64_t off = z->g[pick][0];
    z->g[pick][0] += size;
    if (z->g[pick][0] == z->g[pick][1]) {
        memmove(&z->g[pick], &z->g[pick + 1], (z->n - pick - 1) * sizeof *z->g);
        z->n--;
    }
    return off;
}

/* An event of the online allocator: at list time t, incarnation inc allocates
 * (what 0), frees its top piece (1) or frees its bottom piece (2). */
typedef struct PEv {
    uint64_t t;
    uint32_t inc;
    uint8_t what;
} PEv;

static int cmp_pev(const void *a, const void *b)
{
    const PEv *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    if (x->what != y->what) /* frees first */
        return x->what > y->what ? -1 : 1;
    return x->inc < y->inc ? -1 : x->inc > y->inc;
}

/* The fast plan: the incarnations allocated and freed in list-time order by a first-fit
 * allocator, as a real allocator would at run time, but with every free known in
 * advance. O(n log n + n * gaps). Writes off[]; returns the arena size. */
static int64_t place_online(const Inc *incs, size_t n, bool best, int64_t *off)
{
    PEv *ev = xmalloc((3 * n + 1) * sizeof *ev);
    size_t ne = 0;
    for (size_t i = 0; i < n; i++) {
        ev[ne++] = (PEv){incs[i].t0, (uint32_t)i, 0};
        if (incs[i].keep < incs[i].size && incs[i].keep > 0)
            ev[ne++] = (PEv){incs[i].tk + 1, (uint32_t)i, 1};
        ev[ne++] = (PEv){incs[i].t1 + 1, (uint32_t)i, 2};
    }
    qsort(ev, ne, sizeof *ev, cmp_pev);
    Gaps z = {NULL, 0, 0};
    gaps_free(&z, 0, INT64_MAX);
    int64_t arena = 0;
    for (size_t e = 0; e < ne; e++) {
        const Inc *in = &incs[ev[e].inc];
        int64_t o = off[ev[e].inc];
        switch (ev[e].what) {
        case 0:
            o = off[ev[e].inc] = gaps_take(&z, in->size, best);
            if (o + in->size > arena)
                arena = o + in->size;
            break;
        case 1:
            gaps_free(&z, o + in->keep, o + in->size);
            break;
        default:
            if (in->keep < in->size && in->keep > 0)
                gaps_free(&z, o, o + in->keep);
            else
                gaps_free(&z, o, o + in->size);
            break;
        }
    }
    free(z.g);
    free(ev);
    return arena;
}

/* The lowest 0-based offset at which incarnation `in` overlaps (in address and list
 * time) none of the placed pieces pl[0..npl). cand is scratch. */
static int64_t lowest_fit(const Inc *in, const Placed *pl, size_t npl, int64_t **cand,
                          size_t *capcand)
{
    Placed pc[2];
    int np = inc_pieces(in, pc);
    size_t nc = 0;
    VEC_PUSH(*cand, nc, *capcand, 0);
    for (size_t k = 0; k < npl; k++)
        for (int g = 0; g < np; g++)
            if (!(pl[k].t1 < pc[g].t0 || pc[g].t1 < pl[k].t0) && pl[k].hi - pc[g].lo >= 0)
                VEC_PUSH(*cand, nc, *capcand, pl[k].hi - pc[g].lo);
    qsort(*cand, nc, sizeof **cand, cmp_i64);
    for (size_t k = 0; k < nc; k++) {
        if (k && (*cand)[k] == (*cand)[k - 1])
            continue;
        if (fits(in, (*cand)[k], pl, npl))
            return (*cand)[k];
    }
    unreachable(); /* above every placed piece it always fits */
}

/* Places the incarnations in the order ord[] (a permutation), each at its lowest fit.
 * Stops early, returning INT64_MAX, once the arena would exceed `limit`. */
static int64_t place_greedy(const Inc *incs, size_t n, const uint32_t *ord, int64_t limit,
                            int64_t *off)
{
    Placed *pl = xmalloc((2 * n + 1) * sizeof *pl);
    size_t npl = 0, capcand = 0;
    int64_t *cand = NULL, arena = 0;
    for (size_t oi = 0; oi < n; oi++) {
        const Inc *in = &incs[ord[oi]];
        int64_t o = lowest_fit(in, pl, npl, &cand, &capcand);
        if (o + in->size > limit) {
            arena = INT64_MAX;
            break;
        }
        off[ord[oi]] = o;
        Placed pc[2];
        int np = inc_pieces(in, pc);
        for (int g = 0; g < np; g++)
            pl[npl++] = (Placed){o + pc[g].lo, o + pc[g].hi, pc[g].t0, pc[g].t1, ord[oi]};
        if (o + in->size > arena)
            arena = o + in->size;
    }
    free(cand);
    free(pl);
    return arena;
}

/* Orders for the offline greedy plans (the "greedy by size" family of TensorFlow Lite's
 * and TelaMalloc's planners, Maas et al., ASPLOS'23 §3): a key each, larger first;
 * ties by size (larger first), then first allocation, then creation. */
typedef enum { ORD_SIZE, ORD_SPAN, ORD_AREA, ORD_START, ORD_N } OrdKind;

typedef struct OrdEnt {
    double key;
    int64_t size;
    uint64_t t0;
    uint32_t i;
} OrdEnt;

static int cmp_ord(const void *a, const void *b)
{
    const OrdEnt *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static void order_by(const Inc *incs, size_t n, OrdKind k, uint32_t *ord)
{
    OrdEnt *e = xmalloc(n * sizeof *e);
    for (size_t i = 0; i < n; i++) {
        const Inc *in = &incs[i];
        double span = (double)(in->t1 - in->t0 + 1);
        double key = k == ORD_SIZE ? (double)in->size
                   : k == ORD_SPAN ? span
                   : k == ORD_AREA ? (double)in->size * span
                                   : -(double)in->t0;
        e[i] = (OrdEnt){key, in->size, in->t0, (uint32_t)i};
    }
    qsort(e, n, sizeof *e, cmp_ord);
    for (size_t i = 0; i < n; i++)
        ord[i] = e[i].i;
    free(e);
}

/* The bounded exact search (MiniMalloc's idea, Moffitt, ASPLOS'23: build the packing
 * bottom up, always filling the lowest hole, and cut a branch as soon as a block would
 * rise above the target). At each node every unplaced incarnation is tried at its
 * lowest fit, lowest offsets first; `budget` counts the nodes left. */
typedef struct Dfs {
    const Inc *incs;
    size_t n;
    int64_t target;
    Placed *pl;
    size_t npl;
    uint8_t *done;
    int64_t *off;
    int64_t *cand;
    size_t capcand;
    long budget;
} Dfs;

static bool dfs(Dfs *s, size_t depth)
{
    if (depth == s->n)
        return true;
    if (--s->budget < 0)
        return false;
    /* candidates: (offset, index), lowest offset first, larger first on ties */
    size_t nc = 0;
    int64_t (*c)[2] = xmalloc(s->n * sizeof *c);
    for (size_t i = 0; i < s->n; i++) {
        if (s->done[i])
            continue;
        int64_t o = lowest_fit(&s->incs[i], s->pl, s->npl, &s->cand, &s->capcand);
        if (o + s->incs[i].size > s->target) {
            free(c);
            return false; /* it can only rise: the branch is dead */
        }
        size_t j = nc++;
        for (; j > 0 && (c[j - 1][0] > o || (c[j - 1][0] == o &&
                                             s->incs[c[j - 1][1]].size < s->incs[i].size)); j--) {
            c[j][0] = c[j - 1][0];
            c[j][1] = c[j - 1][1];
        }
        c[j][0] = o;
        c[j][1] = (int64_t)i;
    }
    bool ok = false;
    for (size_t k = 0; k < nc && !ok && s->budget >= 0; k++) {
        size_t i = (size_t)c[k][1];
        Placed pc[2];
        int np = inc_pieces(&s->incs[i], pc);
        size_t npl0 = s->npl;
        for (int g = 0; g < np; g++)
            s->pl[s->npl++] = (Placed){c[k][0] + pc[g].lo, c[k][0] + pc[g].hi, pc[g].t0,
                                       pc[g].t1, (uint32_t)i};
        s->done[i] = 1;
        s->off[i] = c[k][0];
        ok = dfs(s, depth + 1);
        s->done[i] = 0;
        s->npl = npl0;
    }
    free(c);
    return ok;
}

/* Plans offsets for the incarnations: the fast online plan; where it leaves a gap
 * above `peak` (the walk's peak), the offline greedy orders; where they still do and
 * the rank is small, the bounded exact search. Writes off[]; returns the arena. */
static int64_t place_all(const Inc *incs, size_t n, int64_t peak, bool quick, int64_t *off)
{
    if (!n)
        return 0;
    int64_t best = place_online(incs, n, false, off);
    if (best <= peak)
        return best;
    int64_t *tmp = xmalloc(n * sizeof *tmp);
    int64_t bf = place_online(incs, n, true, tmp);
    if (bf < best) {
        best = bf;
        memcpy(off, tmp, n * sizeof *off);
    }
    if (best <= peak || n > ARENA_GREEDY_MAX) {
        free(tmp);
        return best;
    }
    uint32_t *ord = xmalloc(n * sizeof *ord);
    for (int k = 0; k < ORD_N && best > peak; k++) {
        order_by(incs, n, (OrdKind)k, ord);
        int64_t a = place_greedy(incs, n, ord, best - 1, tmp);
        if (a < best) {
            best = a;
            memcpy(off, tmp, n * sizeof *off);
        }
    }
    /* Shuffled orders (seeded: plans are deterministic), for small ranks. */
    uint64_t rs = 0x9E3779B97F4A7C15ull;
    size_t shuffles = quick ? 0 : ARENA_SHUFFLE_WORK / (n * n);
    if (shuffles > ARENA_SHUFFLES)
        shuffles = ARENA_SHUFFLES;
    for (size_t k = 0; k < shuffles && best > peak; k++) {
        order_by(incs, n, (OrdKind)(k % ORD_N), ord);
        for (size_t i = n; i > 1; i--) { /* a partial shuffle keeps some of the order */
            rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
            if (rs % 3 == 0) {
                size_t j = (size_t)(rs >> 8) % i;
                uint32_t t = ord[i - 1];
                ord[i - 1] = ord[j];
                ord[j] = t;
            }
        }
        int64_t a = place_greedy(incs, n, ord, best - 1, tmp);
        if (a < best) {
            best = a;
            memcpy(off, tmp, n * sizeof *off);
        }
    }
    if (best > peak && n <= ARENA_EXACT_MAX && !quick) {
        Dfs s = {incs, n, peak, xmalloc((2 * n + 1) * sizeof(Placed)), 0, xcalloc(n, 1), tmp,
                 NULL, 0, ARENA_EXACT_NODES};
        if (dfs(&s, 0)) {
            best = 0;
            for (size_t i = 0; i < n; i++) {
                off[i] = tmp[i];
                if (tmp[i] + incs[i].size > best)
                    best = tmp[i] + incs[i].size;
            }
        }
        free(s.pl);
        free(s.done);
        free(s.cand);
    }
    free(ord);
    free(tmp);
    return best;
}

/* Builder state of plan_rank. */
typedef struct Build {
    Inc *incs;
    size_t n, cap;
} Build;

static uint32_t new_inc(Build *b, int64_t size, uint64_t t0)
{
    Inc in = {size, size, t0, t0, t0, 0};
    VEC_PUSH(b->incs, b->n, b->cap, in);
    return (uint32_t)(b->n - 1);
}

/* Ends incarnation ix at list time t (its whole prefix). */
static void end_inc(Build *b, uint32_t ix, uint64_t t)
{
    Inc *in = &b->incs[ix];
    in->t1 = t;
    if (in->keep == in->size)
        in->tk = t;
}

/* Plans rank s into r. */
static void plan_rank(const Pipeline *p, int32_t s, const ArenaSizes *sz, int full_swap,
                      double budget, bool quick, ArenaRank *r)
{
    const StageOps *so = &p->stages[s];
    uint32_t n = so->n;
    size_t V = (size_t)p->V, M = (size_t)p->M;
    r->nops = n;
    r->off = xmalloc((n ? n : 1) * sizeof *r->off);
    r->rest = xmalloc((n ? n : 1) * sizeof *r->rest);
    r->split = xcalloc(n ? n : 1, sizeof *r->split);
    r->held = xcalloc(n ? n : 1, sizeof *r->held);
    r->alloc = xcalloc(n ? n : 1, sizeof *r->alloc);
    r->freed = xcalloc(n ? n : 1, sizeof *r->freed);
    for (uint32_t i = 0; i < n; i++)
        r->off[i] = r->rest[i] = -1;
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

    /* Build the incarnations of every (chunk, mb), walking its ops in list order, and
     * note for each op the incarnation it works on (opinc) and, while the region is in
     * two places, the one holding its part from byte splitat on (splitop). */
    Build b = {NULL, 0, 0};
    uint32_t *opinc = xmalloc(n * sizeof *opinc), *splitop = xmalloc(n * sizeof *splitop);
    int64_t *splitat = xcalloc(n, sizeof *splitat);
    for (uint32_t i = 0; i < n; i++)
        opinc[i] = splitop[i] = NONE;
    for (size_t c = 0; c < V; c++)
        for (size_t m = 0; m < M; m++) {
            const Pos *q = &pos[c * M + m];
            uint32_t F = q->at[OP_F], B = q->at[OP_B], W = q->at[OP_W],
                     R = q->at[OP_R] != NONE ? q->at[OP_R] : q->at[OP_RO]; /* RO: an R */
            uint32_t SO = q->at[OP_SO], SI = q->at[OP_SI];
            if (F == NONE || B == NONE || B < F)
                continue;
            const ArenaSizes *z = &sz[ir_vstage(p, s, (int32_t)c)];
            int64_t a = align_up(z->act);
            if (a == 0)
                continue;
            if (R != NONE && (R < F || R > B))
                R = NONE; /* misordered R: plan as if F kept everything */
            if (W != NONE && W < B)
                W = NONE;
            int64_t kk = R != NONE ? align_up(z->ckpt < z->act ? z->ckpt : z->act) : a;
            int64_t w = W != NONE ? align_up(z->wact < z->act ? z->wact : z->act) : 0;
            uint32_t last = W != NONE ? W : B;
            /* A swap moves the region out and back when nothing of (v,m) that needs
             * the bytes (R, B, W) is listed between the SO and the SI. */
            bool swap = SO != NONE && SI != NONE && SO > F && SI > SO &&
                        SI < last && !(R != NONE && R > SO && R < SI) && !(B > SO && B < SI);
            uint32_t ev[6] = {F, R, SO, SI, B, W};
            uint32_t order[6];
            int ne = 0;
            for (int e = 0; e < 6; e++)
                if (ev[e] != NONE && ev[e] <= last && (swap || (e != 2 && e != 3))) {
                    int j = ne++;
                    for (; j > 0 && ev[order[j - 1]] > ev[e]; j--)
                        order[j] = order[j - 1];
                    order[j] = (uint32_t)e;
                }
            uint32_t cur = NONE, top = NONE;
            int64_t h = 0, moved = 0, topat = 0;
            for (int e = 0; e < ne; e++) {
                uint32_t i = ev[order[e]];
                uint64_t t = i;
                switch (order[e]) {
                case 0: /* F */
                    h = kk;
                    cur = h > 0 ? new_inc(&b, h, 2 * t) : NONE;
                    r->held[i] = h;
                    break;
                case 1: /* R: what it rebuilds, [ckpt, act), gets a place of its own */
                    if (a > h && cur == NONE) {
                        /* F kept nothing (an empty checkpoint: the embedding slice of
                         * the mlp model): the whole region is R's, in one place */
                        cur = new_inc(&b, a, 2 * t);
                        r->held[i] = a;
                        h = a;
                    } else if (a > h) {
                        top = new_inc(&b, a - h, 2 * t);
                        topat = h;
                        opinc[i] = cur;
                        r->held[i] = a - h;
                        h = a;
                    }
                    break;
                case 2: /* SO */
                    opinc[i] = cur;
                    if (!swap_frees) {
                        /* moves the top swap_fraction of the prefix; the rest stays */
                        moved = (int64_t)(frac * (double)h) / ARENA_ALIGN * ARENA_ALIGN;
                        if (cur == NONE || moved <= 0 || top != NONE || R != NONE ||
                            b.incs[cur].keep < h) {
                            moved = 0; /* nothing to free (or already split by B) */
                        } else {
                            b.incs[cur].keep = h - moved;
                            b.incs[cur].tk = 2 * t + 1;
                        }
                        r->held[i] = moved;
                        break;
                    }
                    if (cur != NONE)
                        end_inc(&b, cur, 2 * t + 1);
                    if (top != NONE) { /* split by an R: both parts go */
                        end_inc(&b, top, 2 * t + 1);
                        splitop[i] = top;
                        splitat[i] = topat;
                    }
                    moved = h;
                    h = 0;
                    cur = top = NONE;
                    r->held[i] = moved;
                    break;
                case 3: /* SI */
                    if (!swap_frees) {
                        /* the moved top comes back as a piece of its own */
                        if (moved > 0) {
                            top = new_inc(&b, moved, 2 * t);
                            topat = h - moved;
                        }
                        r->held[i] = moved;
                        opinc[i] = top;
                        break;
                    }
                    h = moved;
                    cur = h > 0 ? new_inc(&b, h, 2 * t) : NONE;
                    r->held[i] = h;
                    break;
                case 4: /* B */
                    if (cur != NONE) {
                        Inc *in = &b.incs[cur];
                        int64_t keep = W != NONE ? (w < h ? w : h) : 0;
                        opinc[i] = cur;
                        r->held[i] = keep;
                        if (top != NONE) {
                            splitop[i] = top;
                            splitat[i] = topat;
                            /* split by a partial swap: the top part keeps what lies
                             * above its start; the bottom part stays whole to W */
                            Inc *tp = &b.incs[top];
                            if (keep <= topat) {
                                end_inc(&b, top, 2 * t + 1);
                                top = NONE;
                            } else if (keep - topat < tp->size) {
                                tp->keep = keep - topat;
                                tp->tk = 2 * t + 1;
                            }
                            if (keep == 0) {
                                end_inc(&b, cur, 2 * t + 1);
                                cur = NONE;
                            } else if (keep < in->size && in->keep == in->size) {
                                in->keep = keep; /* W needs only [0, wact) */
                                in->tk = 2 * t + 1;
                            }
                        } else if (keep == 0) {
                            end_inc(&b, cur, 2 * t + 1);
                            cur = NONE;
                        } else if (in->keep == in->size) {
                            in->keep = keep;
                            in->tk = 2 * t + 1;
                        }
                        h = keep;
                    }
                    continue;
                case 5: /* W */
                    if (cur != NONE) {
                        Inc *in = &b.incs[cur];
                        in->t1 = 2 * t + 1;
                    }
                    if (top != NONE) {
                        Inc *in = &b.incs[top];
                        in->t1 = 2 * t + 1;
                    }
                    break;
                }
                if (opinc[i] == NONE)
                    opinc[i] = cur;
                if (top != NONE && splitop[i] == NONE && order[e] != 3) {
                    splitop[i] = top;
                    splitat[i] = topat;
                }
            }
            /* SO/SI of a (v,m) that is not swapped: nothing moves; they name the place. */
            if (!swap) {
                if (SO != NONE && SO >= F)
                    opinc[SO] = opinc[F];
                if (SI != NONE && SI >= F)
                    opinc[SI] = opinc[F];
            }
        }

    /* What each op allocates and frees: the walk of DESIGN.md "Memory" (the one rule,
     * opsem_mem_step) over the aligned region sizes; its peak is what the arena
     * should be. */
    OpCosts *cc = xcalloc(V, sizeof *cc);
    for (size_t c = 0; c < V; c++) {
        const ArenaSizes *z = &sz[ir_vstage(p, s, (int32_t)c)];
        int64_t a = align_up(z->act);
        cc[c].act = (double)a;
        cc[c].ckpt = (double)align_up(z->ckpt < z->act ? z->ckpt : z->act);
        cc[c].wact = (double)align_up(z->wact < z->act ? z->wact : z->act);
        cc[c].frac = swap_frees ? 1.0 : frac;
    }
    VmMem *vmst = xcalloc(V * M, sizeof *vmst);
    double live = 0, peak = 0;
    r->peak_op = 0;
    for (uint32_t i = 0; i < n; i++) {
        const Op *o = &so->ops[i];
        if (o->chunk >= V || o->mb >= M || o->kind >= OP_NKINDS || OP_IS_CHUNKWIDE(o->kind))
            continue;
        const Pos *q = &pos[o->chunk * M + o->mb];
        unsigned has = 0;
        for (int k = 0; k < OP_NKINDS; k++)
            if (q->at[k] != NONE)
                has |= opsem_has_bit((OpKind)k);
        double al, fr;
        opsem_mem_step((OpKind)o->kind, &cc[o->chunk], has, &vmst[o->chunk * M + o->mb], &al, &fr);
        r->alloc[i] = (int64_t)al;
        r->freed[i] = (int64_t)fr;
        live += al;
        if (live > peak) {
            peak = live;
            r->peak_op = i;
        }
        live -= fr;
    }
    r->peak_live = (int64_t)peak;
    free(vmst);
    free(cc);

    /* Place them: the arena is the highest end placed. */
    size_t ninc = b.n;
    Inc *incs = b.incs;
    int64_t *ioff = xmalloc((ninc ? ninc : 1) * sizeof *ioff);
    /* Within a budget, any plan that fits it will do: the search stops there. */
    int64_t enough = r->peak_live;
    if (budget > 0) {
        double room = budget - ir_cost(p, s, 0, COST_WEIGHTS);
        if (room > (double)enough)
            enough = room > 4.0e18 ? INT64_MAX / 2 : (int64_t)room;
    }
    r->size = place_all(incs, ninc, enough, quick, ioff);
    for (size_t i = 0; i < ninc; i++)
        incs[i].off = ioff[i];
    free(ioff);

    /* Offsets per op. */
    for (uint32_t i = 0; i < n; i++) {
        if (opinc[i] != NONE)
            r->off[i] = incs[opinc[i]].off;
        if (splitop[i] != NONE) {
            r->rest[i] = incs[splitop[i]].off;
            r->split[i] = splitat[i];
        }
    }
    free(incs);
    free(opinc);
    free(splitop);
    free(splitat);
    free(pos);
}

ArenaPlan *arena_plan(const Pipeline *p, const ArenaSizes *sz, int full_swap)
{
    return arena_plan_within(p, sz, full_swap, 0, false);
}

ArenaPlan *arena_plan_within(const Pipeline *p, const ArenaSizes *sz, int full_swap,
                             double budget, bool quick)
{
    ArenaPlan *a = xcalloc(1, sizeof *a);
    a->P = p->P;
    a->rank = xcalloc(p->P > 0 ? (size_t)p->P : 1, sizeof *a->rank);
    ArenaSizes *own = NULL;
    if (!sz)
        sz = own = arena_sizes_from_costs(p);
    for (int32_t s = 0; s < p->P; s++)
        plan_rank(p, s, sz, full_swap, budget, quick, &a->rank[s]);
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
        free(a->rank[s].rest);
        free(a->rank[s].split);
        free(a->rank[s].alloc);
        free(a->rank[s].freed);
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

void arena_plan_report(FILE *out, const Pipeline *p, const ArenaSizes *sz, const char *what)
{
    ArenaPlan *a = arena_plan(p, sz, sz ? 1 : 0);
    fprintf(out, "arena plan (static; fragmentation = arena / peak live, 1.000 = none)\n"
                 "  sizes: %s\n",
            what);
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
    ArenaPlan *a = arena_plan_within(p, NULL, 0, p->memory, false);
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
        double frag = r->peak_live > 0 ? (double)r->size / (double)r->peak_live : 1.0;
        char bp[32], bf[32];
        fmt_bytes(bp, sizeof bp, (double)r->peak_live);
        fmt_bytes(bf, sizeof bf, (double)(r->size - r->peak_live));
        if (r->size > r->peak_live && w + (double)r->peak_live <= p->memory)
            diag_error(d, loc, DIAG_MEMORY,
                       "stage %d: no packing of its activations within the budget was found: "
                       "static arena %s for a walk peak of %s (fragmentation %.3f, %s lost) + "
                       "weights %s = %s exceeds the budget %s by %s",
                       s, ba, bp, frag, bf, bw, bt, bb, bo);
        else
            diag_error(d, loc, DIAG_MEMORY,
                       "stage %d: static arena %s + weights %s = %s exceeds the budget %s by %s",
                       s, ba, bw, bt, bb, bo);
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
