/* arena_plan.c - static memory planning (see arena_plan.h for the model). */
#include "arena_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "opindex.h"
#include "opsem.h"
#include "util.h"

/* Limits of the offline plans (incarnations of one rank): the greedy orders run up to
 * ARENA_GREEDY_MAX incarnations, the exact search up to ARENA_EXACT_MAX, within
 * ARENA_EXACT_WORK / n nodes (n at least 128; a node costs O(n), so a rank it cannot
 * pack costs about a second), its first round ARENA_EXACT_FIRST nodes per order; then
 * up to ARENA_SHUFFLES shuffled greedy orders (fewer on larger ranks: about
 * ARENA_SHUFFLE_WORK / n^2). Beyond them the fast plan stands and `check --mem` shows
 * its fragmentation. */
#define ARENA_GREEDY_MAX 8192
#define ARENA_EXACT_MAX 4096
#define ARENA_EXACT_WORK (200000L * 128)
#define ARENA_EXACT_FIRST 5000L
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
    ArenaSizes *sz = xcalloc(nv ? nv : 1, sizeof *sz);
    double *lay = xmalloc((nv ? nv : 1) * sizeof *lay);
    cm_ckpt_layers(p, lay);
    for (int32_t s = 0; s < p->P; s++)
        for (int32_t c = 0; c < p->V; c++) {
            int32_t v = ir_vstage(p, s, c);
            ArenaSizes *z = &sz[v];
            z->act = clamp_bytes(ir_cost(p, s, c, COST_ACT));
            z->ckpt = clamp_bytes(ir_cost(p, s, c, COST_CKPT));
            z->wact = clamp_bytes(ir_cost(p, s, c, COST_WACT));
            z->ckpt_layers = clamp_bytes(lay[v]);
            z->ract = clamp_bytes(ir_cost(p, s, c, COST_RACT));
        }
    free(lay);
    return sz;
}

void arena_region_cuts(const ArenaSizes *z, int64_t from[ARENA_PIECES + 1])
{
    int64_t a = align_up(z->act);
    pr_region_cuts(align_up(z->ckpt_layers < z->act ? z->ckpt_layers : z->act),
                   align_up(z->ckpt < z->act ? z->ckpt : z->act),
                   align_up(z->wact < z->act ? z->wact : z->act), a, from);
}

/* What an R of a (v,m) of sizes z allocates, aligned: the region above the checkpoint,
 * [ckpt, act), or, when `ract` is smaller (layer-granular recomputation), ract bytes:
 * one layer's rebuilt activations, which its B frees (docs/semantics.md "Memory"). */
static int64_t r_bytes(const ArenaSizes *z)
{
    int64_t a = align_up(z->act), k = align_up(z->ckpt < z->act ? z->ckpt : z->act);
    int64_t r = align_up(z->ract);
    return z->ract > 0 && r < a - k ? r : a - k;
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

/* Sorts ev[0..ne) into cmp_pev's order. Events come in incarnation order, so a stable
 * counting sort on 3 * t + (2 - what) gives exactly that order, in linear time where
 * list times are small (about twice the op count, as build_vm makes them); qsort
 * otherwise. */
static void sort_events(PEv *ev, size_t ne)
{
    uint64_t tmax = 0;
    for (size_t e = 0; e < ne; e++)
        tmax = ev[e].t > tmax ? ev[e].t : tmax;
    if (tmax > 8 * (uint64_t)ne + 64) {
        qsort(ev, ne, sizeof *ev, cmp_pev);
        return;
    }
    size_t nk = 3 * ((size_t)tmax + 1);
    uint32_t *cnt = xcalloc(nk + 1, sizeof *cnt);
    for (size_t e = 0; e < ne; e++)
        cnt[3 * ev[e].t + (2 - ev[e].what) + 1]++;
    for (size_t k = 0; k < nk; k++)
        cnt[k + 1] += cnt[k];
    PEv *out = xmalloc((ne ? ne : 1) * sizeof *out);
    for (size_t e = 0; e < ne; e++)
        out[cnt[3 * ev[e].t + (2 - ev[e].what)]++] = ev[e];
    memcpy(ev, out, ne * sizeof *ev);
    free(out);
    free(cnt);
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
    sort_events(ev, ne);
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
 * time) none of the placed pieces pl[0..npl). Only the pieces live at the same time as
 * one of its pieces can collide: those, shifted to that piece's origin (lo - pc.lo,
 * hi - pc.lo), go to *near once, and each candidate offset (the top of one of them, or
 * 0) is tested against them alone. cand and near are scratch. */
static int64_t lowest_fit(const Inc *in, const Placed *pl, size_t npl, int64_t **cand,
                          size_t *capcand, int64_t (**near)[2], size_t *capnear)
{
    Placed pc[2];
    int np = inc_pieces(in, pc);
    size_t nc = 0, nn = 0;
    VEC_PUSH(*cand, nc, *capcand, 0);
    for (size_t k = 0; k < npl; k++)
        for (int g = 0; g < np; g++)
            if (!(pl[k].t1 < pc[g].t0 || pc[g].t1 < pl[k].t0)) {
                if (nn == *capnear) {
                    *capnear = *capnear ? 2 * *capnear : 64;
                    *near = xrealloc(*near, *capnear * sizeof **near);
                }
                /* at offset o the piece covers [o + pc.lo, o + pc.hi): it collides iff
                 * o in (lo - pc.hi, hi - pc.lo) */
                (*near)[nn][0] = pl[k].lo - pc[g].hi;
                (*near)[nn++][1] = pl[k].hi - pc[g].lo;
                if (pl[k].hi - pc[g].lo >= 0)
                    VEC_PUSH(*cand, nc, *capcand, pl[k].hi - pc[g].lo);
            }
    qsort(*cand, nc, sizeof **cand, cmp_i64);
    for (size_t k = 0; k < nc; k++) {
        int64_t o = (*cand)[k];
        if (k && o == (*cand)[k - 1])
            continue;
        bool ok = true;
        for (size_t q = 0; q < nn && ok; q++)
            ok = !((*near)[q][0] < o && o < (*near)[q][1]);
        if (ok)
            return o;
    }
    unreachable(); /* above every placed piece it always fits */
}

/* Places the incarnations in the order ord[] (a permutation), each at its lowest fit.
 * Stops early, returning INT64_MAX, once the arena would exceed `limit`. */
static int64_t place_greedy(const Inc *incs, size_t n, const uint32_t *ord, int64_t limit,
                            int64_t *off)
{
    Placed *pl = xmalloc((2 * n + 1) * sizeof *pl);
    size_t npl = 0, capcand = 0, capnear = 0;
    int64_t *cand = NULL, arena = 0;
    int64_t (*near)[2] = NULL;
    for (size_t oi = 0; oi < n; oi++) {
        const Inc *in = &incs[ord[oi]];
        int64_t o = lowest_fit(in, pl, npl, &cand, &capcand, &near, &capnear);
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
    free(near);
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

/* ---- the exact search ------------------------------------------------------------ */

/* The bounded exact search, after MiniMalloc (Moffitt, ASPLOS'23, §4): it builds only
 * canonical packings, in which every incarnation rests on the skyline of those placed
 * before it (any packing can be pushed down into one, since an incarnation's bottom
 * piece spans its whole life). List time is cut into sections at every event; the
 * skyline is a floor per section. Each node takes the lowest section that still has
 * unplaced bytes and branches on the incarnations that can rest exactly on that floor
 * within the run of sections at that height (one per set of identical ones; two that
 * are disjoint in time commute, so they are tried in one order only), in the order of
 * the current SkyOrder, and last on leaving the hole empty (the run rises to its lower
 * neighbour). A branch dies as soon as a section's floor plus the unplaced bytes live
 * in it exceed the target (MiniMalloc's inference). `nodes` counts what is left.
 * Legend: n incarnations, ns sections, both O(ops of the rank). */

/* The orders in which the exact search tries the incarnations that can rest on the
 * lowest floor (a portfolio: which one finds a packing soonest varies by schedule):
 * smaller first, larger first, longer-lived first, earlier first, larger size x
 * lifetime first. */
typedef enum { SKY_SMALL, SKY_SIZE, SKY_SPAN, SKY_START, SKY_AREA, SKY_NORDERS } SkyOrder;

typedef struct Sky {
    const Inc *incs;
    size_t n, ns;       /* incarnations, sections */
    int64_t target;
    uint32_t (*sec)[3]; /* [n] first section, end of the top piece's, end of its life */
    int64_t *h;         /* [ns] the skyline: floor of each section */
    int64_t *rem;       /* [ns] bytes of unplaced incarnations live in each section */
    uint8_t *done;      /* [n] */
    int64_t *off;       /* [n] */
    uint32_t *cand;     /* stack of the candidates of the nodes on the path */
    size_t ncand, capcand;
    int64_t *undo;      /* stack of saved floors */
    size_t nundo, capundo;
    long nodes;
    SkyOrder order;
} Sky;

/* Whether incarnation a goes before b in the search's current order. */
static bool sky_before(const Sky *k, size_t a, size_t b)
{
    const Inc *x = &k->incs[a], *y = &k->incs[b];
    uint64_t sx = x->t1 - x->t0, sy = y->t1 - y->t0;
    switch (k->order) {
    case SKY_SMALL:
        return x->size < y->size || (x->size == y->size && x->t0 <= y->t0);
    case SKY_SIZE:
        return x->size > y->size || (x->size == y->size && sx >= sy);
    case SKY_SPAN:
        return sx > sy || (sx == sy && x->size >= y->size);
    case SKY_START:
        return x->t0 < y->t0 || (x->t0 == y->t0 && x->size >= y->size);
    default:
        return (double)x->size * (double)sx >= (double)y->size * (double)sy;
    }
}

/* The height incarnation i occupies in section j (inside its life). */
static int64_t sky_height(const Sky *k, size_t i, size_t j)
{
    return j < k->sec[i][1] ? k->incs[i].size : k->incs[i].keep;
}

/* Raises the floors of sections [a, b) to lv (placement: plus the incarnation's
 * height), saving the old ones; false when a section would exceed the target. */
static bool sky_raise(Sky *k, size_t a, size_t b, int64_t lv, size_t inc)
{
    bool ok = true;
    for (size_t j = a; j < b; j++) {
        int64_t nh = inc < k->n ? lv + sky_height(k, inc, j) : lv;
        int64_t nr = inc < k->n ? k->rem[j] - sky_height(k, inc, j) : k->rem[j];
        VEC_PUSH(k->undo, k->nundo, k->capundo, k->h[j]);
        k->h[j] = nh;
        k->rem[j] = nr;
        if (nh + nr > k->target)
            ok = false;
    }
    return ok;
}

static void sky_restore(Sky *k, size_t a, size_t b, size_t inc)
{
    for (size_t j = b; j-- > a;) {
        k->h[j] = k->undo[--k->nundo];
        if (inc < k->n)
            k->rem[j] += sky_height(k, inc, j);
    }
}

static bool same_shape(const Sky *k, size_t a, size_t b)
{
    const Inc *x = &k->incs[a], *y = &k->incs[b];
    return x->size == y->size && x->keep == y->keep && k->sec[a][0] == k->sec[b][0] &&
           k->sec[a][1] == k->sec[b][1] && k->sec[a][2] == k->sec[b][2];
}

/* One node: `placed` incarnations are placed, the last one (`last`, k->n for none) at
 * floor lastfl within the run [pa, pb) of its node. True when a packing is found (off[]
 * then holds it); on false, k is as it was. */
static bool sky_dfs(Sky *k, size_t placed, int64_t lastfl, size_t pa, size_t pb, size_t last)
{
    if (placed == k->n)
        return true;
    if (--k->nodes < 0)
        return false;
    size_t lo = k->ns;
    for (size_t j = 0; j < k->ns; j++)
        if (k->rem[j] > 0 && (lo == k->ns || k->h[j] < k->h[lo]))
            lo = j;
    int64_t fl = k->h[lo];
    size_t a = lo, b = lo + 1; /* the run of sections at floor fl around lo */
    while (a > 0 && k->h[a - 1] == fl)
        a--;
    while (b < k->ns && k->h[b] == fl)
        b++;
    /* the incarnations that can rest at fl within the run, in the current order; two
     * that are disjoint in time and were both candidates at the parent (placed last,
     * within its run [pa, pb)) commute, so after one the other comes only in index
     * order */
    size_t base = k->ncand, nc = 0;
    for (size_t i = 0; i < k->n; i++) {
        if (k->done[i] || k->sec[i][0] < a || k->sec[i][2] > b)
            continue;
        if (last < k->n && lastfl == fl && i < last && k->sec[i][0] >= pa &&
            k->sec[i][2] <= pb &&
            (k->sec[i][2] <= k->sec[last][0] || k->sec[last][2] <= k->sec[i][0]))
            continue;
        VEC_PUSH(k->cand, k->ncand, k->capcand, 0);
        uint32_t *c = &k->cand[base];
        size_t j = nc++;
        for (; j > 0; j--) {
            if (sky_before(k, c[j - 1], i))
                break;
            c[j] = c[j - 1];
        }
        c[j] = (uint32_t)i;
    }
    bool ok = false;
    for (size_t ci = 0; ci < nc && !ok && k->nodes >= 0; ci++) {
        size_t i = k->cand[base + ci];
        bool dup = false;
        for (size_t cj = 0; cj < ci && !dup; cj++)
            dup = same_shape(k, k->cand[base + cj], i);
        if (dup)
            continue;
        size_t s0 = k->sec[i][0], s1 = k->sec[i][2];
        k->done[i] = 1;
        k->off[i] = fl;
        ok = sky_raise(k, s0, s1, fl, i) && sky_dfs(k, placed + 1, fl, a, b, i);
        if (!ok) {
            k->done[i] = 0;
            sky_restore(k, s0, s1, i);
        }
    }
    k->ncand = base;
    if (ok || k->nodes < 0)
        return ok;
    /* leave the hole empty: the run rises to its lower neighbour (a neighbour below
     * fl has no unplaced bytes: nothing can reach over it) */
    int64_t up = INT64_MAX;
    if (a > 0 && k->h[a - 1] > fl)
        up = k->h[a - 1];
    if (b < k->ns && k->h[b] > fl && k->h[b] < up)
        up = k->h[b];
    if (up == INT64_MAX)
        return false;
    ok = sky_raise(k, a, b, up, k->n) && sky_dfs(k, placed, up, 0, 0, k->n);
    if (!ok)
        sky_restore(k, a, b, k->n);
    return ok;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t sec_of(const uint64_t *bd, size_t nb, uint64_t t)
{
    size_t a = 0, b = nb;
    while (a < b) {
        size_t m = (a + b) / 2;
        if (bd[m] < t)
            a = m + 1;
        else
            b = m;
    }
    return (uint32_t)a;
}

/* Searches for a packing of the incarnations within `target` bytes, visiting at most
 * `nodes` nodes in all: every order of the portfolio in turn, with a node allowance
 * that grows fourfold each round (restarts, as heavy-tailed searches want). Writes
 * off[] and returns true when it finds one. */
static bool place_exact(const Inc *incs, size_t n, int64_t target, long nodes, int64_t *off)
{
    uint64_t *bd = xmalloc(3 * n * sizeof *bd);
    size_t nb = 0;
    for (size_t i = 0; i < n; i++) {
        bd[nb++] = incs[i].t0;
        bd[nb++] = incs[i].tk + 1;
        bd[nb++] = incs[i].t1 + 1;
    }
    qsort(bd, nb, sizeof *bd, cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < nb; i++)
        if (!u || bd[i] != bd[u - 1])
            bd[u++] = bd[i];
    Sky k = {incs, n, u - 1, target, xmalloc(n * sizeof *k.sec), xcalloc(u, sizeof *k.h),
             xcalloc(u, sizeof *k.rem), xcalloc(n, 1), off, NULL, 0, 0, NULL, 0, 0, 0, 0};
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        k.sec[i][0] = sec_of(bd, u, incs[i].t0);
        k.sec[i][1] = sec_of(bd, u, incs[i].tk + 1);
        k.sec[i][2] = sec_of(bd, u, incs[i].t1 + 1);
        for (size_t j = k.sec[i][0]; j < k.sec[i][2]; j++)
            k.rem[j] += sky_height(&k, i, j);
    }
    for (size_t j = 0; j < k.ns; j++)
        ok = ok && k.rem[j] <= target;
    for (long per = ARENA_EXACT_FIRST; ok && nodes > 0; per *= 4) {
        bool cut = false; /* some order ran out of nodes: a larger allowance may help */
        for (int o = 0; o < SKY_NORDERS && nodes > 0; o++) {
            k.order = (SkyOrder)o;
            long allow = o == SKY_SMALL ? 4 * per : per; /* the order that wins most */
            k.nodes = allow < nodes ? allow : nodes;
            long given = k.nodes;
            if (sky_dfs(&k, 0, -1, 0, 0, n))
                goto found;
            cut = cut || k.nodes < 0;
            nodes -= given - (k.nodes > 0 ? k.nodes : 0);
        }
        if (!cut)
            break; /* every order searched to the end: none within the target */
    }
    ok = false;
found:
    free(bd);
    free(k.sec);
    free(k.h);
    free(k.rem);
    free(k.done);
    free(k.cand);
    free(k.undo);
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
    if (best > peak && n <= ARENA_EXACT_MAX && !quick &&
        place_exact(incs, n, peak, ARENA_EXACT_WORK / (long)(n > 128 ? n : 128), tmp)) {
        best = 0;
        for (size_t i = 0; i < n; i++) {
            off[i] = tmp[i];
            if (tmp[i] + incs[i].size > best)
                best = tmp[i] + incs[i].size;
        }
    }
    /* Shuffled greedy orders (seeded: plans are deterministic), for small ranks, where
     * the exact search found nothing. */
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
    free(ord);
    free(tmp);
    return best;
}

/* ---- building the incarnations ---------------------------------------------------- */

/* What plan_rank builds: the incarnations, and for each op the incarnation it works on
 * (opinc) and, while its region is in two places, the one holding the region's bytes
 * from splitat on (splitop). held is the plan's held[] (ArenaRank). Each incarnation is
 * also cut at its region's piece boundaries (runtime/region.h) into pieces, each an
 * incarnation of its own (pcs), placed independently where whole incarnations leave a
 * gap: incarnation j starts at region byte ibase[j] and its pieces are pcs[pfirst[j] ..
 * pfirst[j + 1]), piece q starting at region byte plo[q]. */
typedef struct Build {
    Inc *incs;
    size_t n, cap;
    uint32_t *opinc, *splitop; /* [nops] NONE for none */
    int64_t *splitat;          /* [nops] */
    int64_t *held;             /* [nops] */
    int64_t *ibase;            /* [n] */
    size_t ibcap;
    Inc *pcs;                  /* [np] */
    size_t np, pcap;
    int64_t *plo;              /* [np] */
    size_t plcap;
    uint32_t *pfirst;          /* [n + 1] */
    size_t pfn, pfcap;
} Build;

static uint32_t new_inc(Build *b, int64_t base, int64_t size, uint64_t t0)
{
    Inc in = {size, size, t0, t0, t0, 0};
    VEC_PUSH(b->incs, b->n, b->cap, in);
    size_t nb = b->n - 1;
    VEC_PUSH(b->ibase, nb, b->ibcap, base);
    return (uint32_t)(b->n - 1);
}

/* Cuts incarnations [j0, b->n) of one region at its piece boundaries from[]: a piece
 * below the incarnation's keep lives as long as it, one above it ends at tk. */
static void cut_incs(Build *b, size_t j0, const int64_t from[ARENA_PIECES + 1])
{
    for (size_t j = j0; j < b->n; j++) {
        const Inc *in = &b->incs[j];
        int64_t lo = b->ibase[j], end = lo + in->size;
        VEC_PUSH(b->pfirst, b->pfn, b->pfcap, (uint32_t)b->np);
        for (int k = 1; k <= ARENA_PIECES && lo < end; k++) {
            int64_t hi = k == ARENA_PIECES || from[k] > end ? end : from[k];
            if (hi <= lo)
                continue;
            Inc y = *in;
            int64_t kp = in->keep - (lo - b->ibase[j]);
            y.size = hi - lo;
            y.keep = kp <= 0 ? 0 : kp > y.size ? y.size : kp;
            if (y.keep == 0) { /* all of it above the keep: ends with it */
                y.t1 = in->tk;
                y.keep = y.size;
            }
            if (y.keep == y.size)
                y.tk = y.t1;
            VEC_PUSH(b->pcs, b->np, b->pcap, y);
            size_t nl = b->np - 1;
            VEC_PUSH(b->plo, nl, b->plcap, lo);
            lo = hi;
        }
    }
}

/* Ends incarnation ix at list time t (its whole prefix). */
static void end_inc(Build *b, uint32_t ix, uint64_t t)
{
    Inc *in = &b->incs[ix];
    in->t1 = t;
    if (in->keep == in->size)
        in->tk = t;
}

/* One (v,m) region while its ops are walked in list order: cur holds its prefix
 * [0, h) (or, split, its bottom part), top its part from byte topat on (after an R,
 * or the piece a partial swap brings back); moved is what the SO moved out. The sizes
 * are aligned: a = act, kk what F allocates, w what B keeps for W. */
typedef struct VmBuild {
    uint32_t cur, top;
    int64_t h, moved, topat;
    int64_t a, kk, w;
    bool has_r, has_w;
    bool swap_frees;  /* an SO frees the whole prefix (else the top frac of it) */
    double frac;
} VmBuild;

static void vm_f(Build *b, VmBuild *v, uint32_t i)
{
    v->h = v->kk;
    v->cur = v->h > 0 ? new_inc(b, 0, v->h, 2 * (uint64_t)i) : NONE;
    b->held[i] = v->h;
}

/* R: what it rebuilds, [ckpt, act), gets a place of its own. */
static void vm_r(Build *b, VmBuild *v, uint32_t i)
{
    if (v->a <= v->h)
        return;
    if (v->cur == NONE) {
        /* F kept nothing (an empty checkpoint: the embedding slice of the mlp model):
         * the whole region is R's, in one place */
        v->cur = new_inc(b, 0, v->a, 2 * (uint64_t)i);
        b->held[i] = v->a;
    } else {
        v->top = new_inc(b, v->h, v->a - v->h, 2 * (uint64_t)i);
        v->topat = v->h;
        b->opinc[i] = v->cur;
        b->held[i] = v->a - v->h;
    }
    v->h = v->a;
}

static void vm_so(Build *b, VmBuild *v, uint32_t i)
{
    uint64_t t = 2 * (uint64_t)i + 1;
    b->opinc[i] = v->cur;
    if (!v->swap_frees) {
        /* moves the top swap_fraction of the prefix; the rest stays */
        v->moved = (int64_t)(v->frac * (double)v->h) / ARENA_ALIGN * ARENA_ALIGN;
        if (v->cur == NONE || v->moved <= 0 || v->top != NONE || v->has_r ||
            b->incs[v->cur].keep < v->h) {
            v->moved = 0; /* nothing to free (or already split by B) */
        } else {
            b->incs[v->cur].keep = v->h - v->moved;
            b->incs[v->cur].tk = t;
        }
        b->held[i] = v->moved;
        return;
    }
    if (v->cur != NONE)
        end_inc(b, v->cur, t);
    if (v->top != NONE) { /* split by an R: both parts go */
        end_inc(b, v->top, t);
        b->splitop[i] = v->top;
        b->splitat[i] = v->topat;
    }
    v->moved = v->h;
    v->h = 0;
    v->cur = v->top = NONE;
    b->held[i] = v->moved;
}

static void vm_si(Build *b, VmBuild *v, uint32_t i)
{
    if (!v->swap_frees) {
        /* the moved top comes back as a piece of its own */
        if (v->moved > 0) {
            v->top = new_inc(b, v->h - v->moved, v->moved, 2 * (uint64_t)i);
            v->topat = v->h - v->moved;
        }
        b->held[i] = v->moved;
        b->opinc[i] = v->top;
        return;
    }
    v->h = v->moved;
    v->cur = v->h > 0 ? new_inc(b, 0, v->h, 2 * (uint64_t)i) : NONE;
    b->held[i] = v->h;
}

/* B frees everything but what W needs, [0, wact). */
static void vm_b(Build *b, VmBuild *v, uint32_t i)
{
    uint64_t t = 2 * (uint64_t)i + 1;
    if (v->cur == NONE)
        return;
    Inc *in = &b->incs[v->cur];
    int64_t keep = v->has_w ? (v->w < v->h ? v->w : v->h) : 0;
    b->opinc[i] = v->cur;
    b->held[i] = keep;
    if (v->top != NONE) {
        b->splitop[i] = v->top;
        b->splitat[i] = v->topat;
        /* split by a partial swap: the top part keeps what lies above its start; the
         * bottom part stays whole to W */
        Inc *tp = &b->incs[v->top];
        if (keep <= v->topat) {
            end_inc(b, v->top, t);
            v->top = NONE;
        } else if (keep - v->topat < tp->size) {
            tp->keep = keep - v->topat;
            tp->tk = t;
        }
        if (keep == 0) {
            end_inc(b, v->cur, t);
            v->cur = NONE;
        } else if (keep < in->size && in->keep == in->size) {
            in->keep = keep;
            in->tk = t;
        }
    } else if (keep == 0) {
        end_inc(b, v->cur, t);
        v->cur = NONE;
    } else if (in->keep == in->size) {
        in->keep = keep;
        in->tk = t;
    }
    v->h = keep;
}

static void vm_w(Build *b, VmBuild *v, uint32_t i)
{
    if (v->cur != NONE)
        b->incs[v->cur].t1 = 2 * (uint64_t)i + 1;
    if (v->top != NONE)
        b->incs[v->top].t1 = 2 * (uint64_t)i + 1;
}

/* Builds the incarnations of one (v,m) whose ops sit at q (aligned sizes z), walking
 * F, R, SO, SI, B and W in list order. A (v,m) without F or B, or with B before F,
 * gets no region; a misordered R or W is planned as absent. */
static void build_vm(Build *b, const Pos *q, const ArenaSizes *z, bool swap_frees, double frac)
{
    uint32_t F = q->at[OP_F], B = q->at[OP_B], W = q->at[OP_W], R = NONE;
    for (int k = 0; k < OP_NKINDS && R == NONE; k++)
        if (op_sem[k].runs_as == OP_R) /* R, and RO: an R at its list position */
            R = q->at[k];
    uint32_t SO = q->at[OP_SO], SI = q->at[OP_SI];
    VmBuild v = {NONE, NONE, 0, 0, 0, align_up(z->act), 0, 0, false, false, swap_frees, frac};
    if (F == NONE || B == NONE || B < F || v.a == 0)
        return;
    if (R != NONE && (R < F || R > B))
        R = NONE; /* misordered R: plan as if F kept everything */
    if (W != NONE && W < B)
        W = NONE;
    v.has_r = R != NONE;
    v.has_w = W != NONE;
    v.kk = v.has_r ? align_up(z->ckpt < z->act ? z->ckpt : z->act) : v.a;
    if (v.has_r)
        v.a = v.kk + r_bytes(z); /* the region R rebuilds: all of act, or one layer */
    v.w = v.has_w ? align_up(z->wact < z->act ? z->wact : z->act) : 0;
    uint32_t last = v.has_w ? W : B;
    /* A swap moves the region out and back when nothing of (v,m) that needs the bytes
     * (R, B, W) is listed between the SO and the SI. */
    bool swap = SO != NONE && SI != NONE && SO > F && SI > SO && SI < last &&
                !(v.has_r && R > SO && R < SI) && !(B > SO && B < SI);
    static void (*const step[6])(Build *, VmBuild *, uint32_t) = {vm_f, vm_r, vm_so,
                                                                    vm_si, vm_b, vm_w};
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
    for (int e = 0; e < ne; e++) {
        uint32_t i = ev[order[e]];
        step[order[e]](b, &v, i);
        if (order[e] == 4)
            continue; /* B names its places itself */
        if (b->opinc[i] == NONE)
            b->opinc[i] = v.cur;
        if (v.top != NONE && b->splitop[i] == NONE && order[e] != 3) {
            b->splitop[i] = v.top;
            b->splitat[i] = v.topat;
        }
    }
    /* SO/SI of a (v,m) that is not swapped: nothing moves; they name the place. */
    if (!swap) {
        if (SO != NONE && SO >= F)
            b->opinc[SO] = b->opinc[F];
        if (SI != NONE && SI >= F)
            b->opinc[SI] = b->opinc[F];
    }
}

/* ---- one rank ---------------------------------------------------------------------- */

/* Allocates the per-op arrays of r (no region: every piece at -1). */
static void rank_init(ArenaRank *r, uint32_t n)
{
    size_t n1 = n ? n : 1;
    r->nops = n;
    r->held = xcalloc(n1, sizeof *r->held);
    r->alloc = xcalloc(n1, sizeof *r->alloc);
    r->freed = xcalloc(n1, sizeof *r->freed);
    r->at = xmalloc(n1 * sizeof *r->at);
    for (uint32_t i = 0; i < n; i++)
        for (int k = 0; k < ARENA_PIECES; k++)
            r->at[i][k] = -1;
}

/* The list positions of the ops of each (chunk, mb) of rank s ([V*M]); the first
 * occurrence wins. */
static Pos *index_ops(const StageOps *so, size_t V, size_t M)
{
    Pos *pos = xmalloc(V * M * sizeof *pos);
    for (size_t k = 0; k < V * M; k++)
        for (int j = 0; j < OP_NKINDS; j++)
            pos[k].at[j] = NONE;
    for (uint32_t i = 0; i < so->n; i++) {
        const Op *o = &so->ops[i];
        if (o->chunk >= V || o->mb >= M || o->kind >= OP_NKINDS)
            continue;
        Pos *q = &pos[o->chunk * M + o->mb];
        if (q->at[o->kind] == NONE)
            q->at[o->kind] = i;
    }
    return pos;
}

/* What each op of rank s allocates and frees: the walk of docs/spec.md "Memory" (the one
 * rule, opsem_mem_step) over the aligned region sizes, into r->alloc, r->freed; its
 * peak (r->peak_live, r->peak_op) is what the arena should be. */
static void walk_rank(const Pipeline *p, int32_t s, const ArenaSizes *sz, const Pos *pos,
                      double frac, ArenaRank *r)
{
    const StageOps *so = &p->stages[s];
    size_t V = (size_t)p->V, M = (size_t)p->M;
    OpCosts *cc = xcalloc(V, sizeof *cc);
    for (size_t c = 0; c < V; c++) {
        const ArenaSizes *z = &sz[ir_vstage(p, s, (int32_t)c)];
        cc[c].act = (double)align_up(z->act);
        cc[c].ckpt = (double)align_up(z->ckpt < z->act ? z->ckpt : z->act);
        cc[c].wact = (double)align_up(z->wact < z->act ? z->wact : z->act);
        cc[c].ract = (double)r_bytes(z);
        cc[c].frac = frac;
    }
    /* the same walk over the unaligned sizes, for the padding the alignment adds */
    OpCosts *cr = xcalloc(V, sizeof *cr);
    for (size_t c = 0; c < V; c++) {
        const ArenaSizes *z = &sz[ir_vstage(p, s, (int32_t)c)];
        int64_t k = z->ckpt < z->act ? z->ckpt : z->act;
        cr[c].act = (double)z->act;
        cr[c].ckpt = (double)k;
        cr[c].wact = (double)(z->wact < z->act ? z->wact : z->act);
        cr[c].ract = (double)(z->ract > 0 && z->ract < z->act - k ? z->ract : z->act - k);
        cr[c].frac = frac;
    }
    VmMem *vmst = xcalloc(V * M, sizeof *vmst), *vraw = xcalloc(V * M, sizeof *vraw);
    double live = 0, peak = 0, rlive = 0, rpeak = 0;
    r->peak_op = 0;
    for (uint32_t i = 0; i < so->n; i++) {
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
        opsem_mem_step((OpKind)o->kind, &cr[o->chunk], has, &vraw[o->chunk * M + o->mb], &al, &fr);
        rlive += al;
        rpeak = fmax(rpeak, rlive);
        rlive -= fr;
    }
    r->peak_live = (int64_t)peak;
    r->pad = peak > rpeak ? (int64_t)peak - (int64_t)rpeak : 0;
    free(vmst);
    free(vraw);
    free(cc);
    free(cr);
}

/* Places the incarnations of b (the arena is the highest end placed, r->size): whole,
 * and where that leaves a gap above the walk's peak (or, within a budget, above the room
 * it leaves), cut into pieces, keeping the smaller arena. Writes each piece's offset to
 * poff[np]. Within a budget any plan that fits it will do: the search stops there. */
static void place_rank(const Pipeline *p, int32_t s, Build *b, double budget, bool quick,
                       ArenaRank *r, int64_t *poff)
{
    int64_t *ioff = xmalloc((b->n ? b->n : 1) * sizeof *ioff);
    int64_t enough = r->peak_live;
    if (budget > 0) {
        double room = budget - ir_cost(p, s, 0, COST_WEIGHTS);
        if (room > (double)enough)
            enough = room > 4.0e18 ? INT64_MAX / 2 : (int64_t)room;
    }
    r->size = place_all(b->incs, b->n, enough, quick, ioff);
    for (size_t j = 0; j < b->n; j++)
        for (uint32_t q = b->pfirst[j]; q < b->pfirst[j + 1]; q++)
            poff[q] = ioff[j] + (b->plo[q] - b->ibase[j]);
    if (r->size > enough && b->np > b->n) {
        int64_t *tmp = xmalloc(b->np * sizeof *tmp);
        int64_t a = place_all(b->pcs, b->np, enough, quick, tmp);
        if (a < r->size) {
            r->size = a;
            memcpy(poff, tmp, b->np * sizeof *poff);
        }
        free(tmp);
    }
    free(ioff);
}

/* Where piece k of op i's region lives: region bytes [from[k], ...) are in the
 * incarnation the op works on (or, split, the one from splitat on), whose piece that
 * holds byte from[k] is at poff. cuts: the plan's piece boundaries per virtual stage. */
static void pieces_of_ops(const Pipeline *p, int32_t s, const int64_t (*cuts)[ARENA_PIECES + 1],
                          const Build *b, const int64_t *poff, ArenaRank *r)
{
    const StageOps *so = &p->stages[s];
    for (uint32_t i = 0; i < r->nops; i++) {
        const Op *o = &so->ops[i];
        if (o->chunk >= (uint32_t)p->V || b->opinc[i] == NONE)
            continue;
        const int64_t *from = cuts[ir_vstage(p, s, o->chunk)];
        for (int k = 0; k < ARENA_PIECES; k++) {
            int64_t x = from[k];
            uint32_t j = b->splitop[i] != NONE && x >= b->splitat[i] ? b->splitop[i]
                                                                      : b->opinc[i];
            if (from[k + 1] == x || from[k + 1] <= b->ibase[j] ||
                x >= b->ibase[j] + b->incs[j].size)
                continue;
            if (x < b->ibase[j]) {
                /* the piece a partial swap brings back starts inside piece k (the cost
                 * model's view, never emitted): where piece k would start */
                uint32_t q = b->pfirst[j];
                r->at[i][k] = poff[q] - (b->plo[q] - x);
                continue;
            }
            for (uint32_t q = b->pfirst[j]; q < b->pfirst[j + 1]; q++)
                if (b->plo[q] <= x && x < b->plo[q] + b->pcs[q].size) {
                    r->at[i][k] = poff[q] + (x - b->plo[q]);
                    break;
                }
        }
    }
}

/* Plans rank s into r: index its ops, build the incarnations of every (chunk, mb) and
 * cut them at the piece boundaries cuts[v] (ArenaPlan.from), walk the memory rule for
 * the peak, place. */
static void plan_rank(const Pipeline *p, int32_t s, const ArenaSizes *sz,
                      const int64_t (*cuts)[ARENA_PIECES + 1], int full_swap, double budget,
                      bool quick, ArenaRank *r)
{
    const StageOps *so = &p->stages[s];
    uint32_t n = so->n;
    size_t V = (size_t)p->V, M = (size_t)p->M;
    rank_init(r, n);
    if (!n || !V || !M)
        return;
    Pos *pos = index_ops(so, V, M);
    double frac = ir_cost(p, s, 0, COST_SWAP_FRACTION);
    bool swap_frees = full_swap || frac >= 1.0;
    Build b = {0};
    b.opinc = xmalloc(n * sizeof *b.opinc);
    b.splitop = xmalloc(n * sizeof *b.splitop);
    b.splitat = xcalloc(n, sizeof *b.splitat);
    b.held = r->held;
    for (uint32_t i = 0; i < n; i++)
        b.opinc[i] = b.splitop[i] = NONE;
    for (size_t c = 0; c < V; c++) {
        int32_t v = ir_vstage(p, s, (int32_t)c);
        for (size_t m = 0; m < M; m++) {
            size_t j0 = b.n;
            build_vm(&b, &pos[c * M + m], &sz[v], swap_frees, frac);
            cut_incs(&b, j0, cuts[v]);
        }
    }
    VEC_PUSH(b.pfirst, b.pfn, b.pfcap, (uint32_t)b.np);
    walk_rank(p, s, sz, pos, swap_frees ? 1.0 : frac, r);
    int64_t *poff = xmalloc((b.np ? b.np : 1) * sizeof *poff);
    place_rank(p, s, &b, budget, quick, r, poff);
    pieces_of_ops(p, s, cuts, &b, poff, r);
    free(poff);
    free(b.incs);
    free(b.ibase);
    free(b.pcs);
    free(b.plo);
    free(b.pfirst);
    free(b.opinc);
    free(b.splitop);
    free(b.splitat);
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
    size_t nv = (size_t)p->P * (size_t)p->V;
    a->from = xmalloc((nv ? nv : 1) * sizeof *a->from);
    for (size_t v = 0; v < nv; v++)
        arena_region_cuts(&sz[v], a->from[v]);
    for (int32_t s = 0; s < p->P; s++)
        plan_rank(p, s, sz, (const int64_t(*)[ARENA_PIECES + 1])a->from, full_swap, budget,
                  quick, &a->rank[s]);
    free(own);
    return a;
}

void arena_plan_free(ArenaPlan *a)
{
    if (!a)
        return;
    for (int32_t s = 0; s < a->P; s++) {
        free(a->rank[s].held);
        free(a->rank[s].at);
        free(a->rank[s].alloc);
        free(a->rank[s].freed);
    }
    free(a->rank);
    free(a->from);
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

double arena_workspace(const Pipeline *p, int32_t s)
{
    double most = 0;
    for (int32_t c = 0; c < p->V; c++) {
        OpCosts cc;
        opsem_costs(p, s, c, &cc);
        bool used[OP_NKINDS] = {0};
        const StageOps *so = &p->stages[s];
        for (uint32_t i = 0; i < so->n; i++)
            if (so->ops[i].chunk == (uint32_t)c && so->ops[i].kind < OP_NKINDS)
                used[so->ops[i].kind] = true;
        for (int k = 0; k < OP_NKINDS; k++)
            if (used[k])
                most = fmax(most, opsem_work((OpKind)k, &cc));
    }
    return most;
}

void arena_plan_report(FILE *out, const Pipeline *p, const ArenaSizes *sz, const int64_t *wsp,
                       const char *what)
{
    ArenaPlan *a = arena_plan(p, sz, sz ? 1 : 0);
    if (!sz && p->has_memory) {
        /* the budget check's plan where it packs tighter (its search aims at the room
         * the budget leaves, which can be easier to reach than the walk's peak), so
         * the table and `pipec check` agree on what fits */
        ArenaPlan *b = arena_plan_within(p, NULL, 0, p->memory, false);
        for (int32_t s = 0; s < p->P; s++)
            if (b->rank[s].size < a->rank[s].size)
                a->rank[s].size = b->rank[s].size;
        arena_plan_free(b);
    }
    fprintf(out, "arena plan (static; fragmentation = arena / peak live, 1.000 = none)\n"
                 "  sizes: %s\n",
            what);
    fprintf(out, "%5s %12s %12s %8s %12s %12s %12s\n", "rank", "arena", "peak live",
            "frag", "weights", "total", "budget");
    for (int32_t s = 0; s < p->P; s++) {
        const ArenaRank *r = &a->rank[s];
        double w = ir_cost(p, s, 0, COST_WEIGHTS);
        double ws = wsp ? (double)wsp[s] : arena_workspace(p, s);
        char b1[32], b2[32], b3[32], b4[32], b5[32];
        fmt_bytes(b1, sizeof b1, (double)r->size);
        fmt_bytes(b2, sizeof b2, (double)r->peak_live);
        fmt_bytes(b3, sizeof b3, w);
        fmt_bytes(b4, sizeof b4, w + (double)r->size + ws);
        if (p->has_memory)
            fmt_bytes(b5, sizeof b5, p->memory);
        else
            snprintf(b5, sizeof b5, "-");
        double frag = r->peak_live > 0 ? (double)r->size / (double)r->peak_live : 1.0;
        fprintf(out, "%5d %12s %12s %8.3f %12s %12s %12s\n", s, b1, b2, frag, b3, b4, b5);
    }
    arena_plan_free(a);
}

/* One planned rank in an ArenaMemo: the key bytes (everything plan_rank reads for a
 * budget check) and the three numbers arena_check reports. */
typedef struct MemoEnt {
    uint64_t hash;
    unsigned char *key;
    size_t klen;
    int64_t size, peak_live, pad;
    uint32_t peak_op;
} MemoEnt;

struct ArenaMemo {
    MemoEnt *e;      /* open addressing, cap a power of two; key NULL = empty */
    size_t n, cap;
};

ArenaMemo *arena_memo_new(void)
{
    return xcalloc(1, sizeof(ArenaMemo));
}

void arena_memo_free(ArenaMemo *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++)
        free(m->e[i].key);
    free(m->e);
    free(m);
}

static void key_put(unsigned char **k, size_t *len, size_t *cap, const void *v, size_t n)
{
    if (*len + n > *cap) {
        *cap = (*len + n) * 2 + 64;
        *k = xrealloc(*k, *cap);
    }
    memcpy(*k + *len, v, n);
    *len += n;
}

/* The key of rank s's budget-check plan: rank, shape, budget, weights, swap fraction,
 * the region sizes of its virtual stages (the piece cuts follow from them) and its op
 * list. */
static unsigned char *memo_key(const Pipeline *p, int32_t s, const ArenaSizes *sz, size_t *len)
{
    unsigned char *k = NULL;
    size_t cap = 0;
    *len = 0;
    int32_t hdr[5] = {s, p->P, p->V, p->M, (int32_t)p->placement};
    double d[3] = {p->memory, ir_cost(p, s, 0, COST_WEIGHTS), ir_cost(p, s, 0, COST_SWAP_FRACTION)};
    key_put(&k, len, &cap, hdr, sizeof hdr);
    key_put(&k, len, &cap, d, sizeof d);
    for (int32_t c = 0; c < p->V; c++)
        key_put(&k, len, &cap, &sz[ir_vstage(p, s, c)], sizeof *sz);
    const StageOps *so = &p->stages[s];
    for (uint32_t i = 0; i < so->n; i++) {
        unsigned char o[6] = {so->ops[i].kind, so->ops[i].chunk};
        memcpy(o + 2, &so->ops[i].mb, 4);
        key_put(&k, len, &cap, o, sizeof o);
    }
    return k;
}

static uint64_t memo_hash(const unsigned char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ k[i]) * 1099511628211ull;
    return h;
}

/* The slot of key k in m: its entry, or the empty slot where it goes. */
static MemoEnt *memo_slot(ArenaMemo *m, uint64_t h, const unsigned char *k, size_t n)
{
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        MemoEnt *e = &m->e[i];
        if (!e->key || (e->hash == h && e->klen == n && !memcmp(e->key, k, n)))
            return e;
    }
}

static void memo_grow(ArenaMemo *m)
{
    MemoEnt *old = m->e;
    size_t ocap = m->cap;
    m->cap = ocap ? 2 * ocap : 256;
    m->e = xcalloc(m->cap, sizeof *m->e);
    for (size_t i = 0; i < ocap; i++)
        if (old[i].key)
            *memo_slot(m, old[i].hash, old[i].key, old[i].klen) = old[i];
    free(old);
}

/* Rank s's budget-check plan (arena_plan_within(p, NULL, 0, p->memory, false)'s rank
 * s): size, peak_live and peak_op, from memo when it planned the same rank before. */
static void plan_rank_checked(const Pipeline *p, int32_t s, const ArenaSizes *sz,
                              const int64_t (*cuts)[ARENA_PIECES + 1], ArenaMemo *memo,
                              ArenaRank *out)
{
    size_t klen = 0;
    unsigned char *key = memo ? memo_key(p, s, sz, &klen) : NULL;
    uint64_t h = key ? memo_hash(key, klen) : 0;
    if (memo && memo->cap) {
        MemoEnt *e = memo_slot(memo, h, key, klen);
        if (e->key) {
            *out = (ArenaRank){.size = e->size, .peak_live = e->peak_live, .pad = e->pad,
                               .peak_op = e->peak_op};
            free(key);
            return;
        }
    }
    ArenaRank r = {0};
    plan_rank(p, s, sz, cuts, 0, p->memory, false, &r);
    *out = (ArenaRank){.size = r.size, .peak_live = r.peak_live, .pad = r.pad,
                       .peak_op = r.peak_op};
    free(r.held);
    free(r.at);
    free(r.alloc);
    free(r.freed);
    if (!memo)
        return;
    if (2 * (memo->n + 1) > memo->cap)
        memo_grow(memo);
    MemoEnt *e = memo_slot(memo, h, key, klen);
    *e = (MemoEnt){h, key, klen, out->size, out->peak_live, out->pad, out->peak_op};
    memo->n++;
}

int64_t arena_charged(const ArenaRank *r)
{
    return r->size - r->pad;
}

int arena_check(Diag *d, const Pipeline *p)
{
    return arena_check_memo(d, p, NULL);
}

/* An upper bound of rank s's arena, bytes, whatever the packing: the sum of the sizes of
 * every incarnation it could hold. An incarnation starts only at an allocating op
 * (op_sem[].mem: build_vm's F, R, RO and SI; at most one per op), and holds at most
 * its region's largest extent (act, or ckpt + what an R rebuilds). Every plan of
 * place_all is at most the first-fit replay's, and first-fit places each incarnation at
 * or below the highest end placed before it, so the arena never exceeds the sum.
 * Saturates at INT64_MAX. */
static int64_t arena_bound(const Pipeline *p, int32_t s, const ArenaSizes *sz)
{
    int64_t *most = xmalloc((p->V > 0 ? (size_t)p->V : 1) * sizeof *most);
    for (int32_t c = 0; c < p->V; c++) {
        const ArenaSizes *z = &sz[ir_vstage(p, s, c)];
        int64_t a = align_up(z->act), k = align_up(z->ckpt < z->act ? z->ckpt : z->act);
        int64_t r = k + r_bytes(z);
        most[c] = a > r ? a : r;
    }
    const StageOps *so = &p->stages[s];
    int64_t sum = 0;
    for (uint32_t i = 0; i < so->n && sum < INT64_MAX; i++) {
        const Op *o = &so->ops[i];
        if (o->kind >= OP_NKINDS || op_sem[o->kind].mem != MEM_ALLOC || o->chunk >= (uint32_t)p->V)
            continue;
        int64_t m = most[o->chunk];
        sum = sum > INT64_MAX - m ? INT64_MAX : sum + m;
    }
    free(most);
    return sum;
}

int arena_check_memo(Diag *d, const Pipeline *p, ArenaMemo *memo)
{
    if (!p->has_memory)
        return 0;
    ArenaSizes *sz = arena_sizes_from_costs(p);
    size_t nv = (size_t)p->P * (size_t)p->V;
    int64_t(*cuts)[ARENA_PIECES + 1] = xmalloc((nv ? nv : 1) * sizeof *cuts);
    for (size_t v = 0; v < nv; v++)
        arena_region_cuts(&sz[v], cuts[v]);
    ArenaRank *ranks = xcalloc(p->P > 0 ? (size_t)p->P : 1, sizeof *ranks);
    double *wsp = xmalloc((p->P > 0 ? (size_t)p->P : 1) * sizeof *wsp);
    bool *fits = xcalloc(p->P > 0 ? (size_t)p->P : 1, sizeof *fits);
    for (int32_t s = 0; s < p->P; s++) {
        /* The verdict is all a budget check reports of a rank that fits: when even the
         * bound of its arena fits, no plan is needed (the same verdict, no output). */
        wsp[s] = arena_workspace(p, s);
        double w = ir_cost(p, s, 0, COST_WEIGHTS);
        if (w + (double)arena_bound(p, s, sz) + wsp[s] <= p->memory) {
            fits[s] = true;
            continue;
        }
        plan_rank_checked(p, s, sz, (const int64_t(*)[ARENA_PIECES + 1])cuts, memo, &ranks[s]);
    }
    free(sz);
    free(cuts);
    int nerr = 0;
    for (int32_t s = 0; s < p->P; s++) {
        if (fits[s])
            continue;
        const ArenaRank *r = &ranks[s];
        double w = ir_cost(p, s, 0, COST_WEIGHTS), ws = wsp[s];
        double total = w + (double)arena_charged(r) + ws;
        if (total <= p->memory)
            continue;
        char bws[48] = "", bpad[64] = "";
        if (r->pad > 0) {
            char x[32];
            fmt_bytes(x, sizeof x, (double)r->pad);
            snprintf(bpad, sizeof bpad, " less %s of alignment", x);
        }
        if (ws > 0) {
            char x[32];
            fmt_bytes(x, sizeof x, ws);
            snprintf(bws, sizeof bws, " + workspace %s", x);
        }
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
        if (r->size > r->peak_live && w + (double)(r->peak_live - r->pad) + ws <= p->memory)
            diag_error(d, loc, DIAG_MEMORY,
                       "stage %d: no packing of its activations within the budget was found: "
                       "static arena %s%s for a walk peak of %s (fragmentation %.3f, %s lost) + "
                       "weights %s%s = %s exceeds the budget %s by %s",
                       s, ba, bpad, bp, frag, bf, bw, bws, bt, bb, bo);
        else
            diag_error(d, loc, DIAG_MEMORY,
                       "stage %d: static arena %s%s + weights %s%s = %s exceeds the budget %s "
                       "by %s",
                       s, ba, bpad, bw, bws, bt, bb, bo);
        if (r->peak_op < p->stages[s].n) {
            char nm[32];
            const Op *o = &p->stages[s].ops[r->peak_op];
            diag_note(d, o->loc, "live activations peak at %s (fragmentation %.3f)",
                      op_name(nm, sizeof nm, o->kind, o->mb, o->chunk), frag);
        }
        nerr++;
    }
    free(ranks);
    free(wsp);
    free(fits);
    return nerr;
}
