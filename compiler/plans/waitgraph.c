/* waitgraph.c - the wait graph of all ranks and the `deadlock` check
 * (docs/spec.md "Dependencies"; docs/semantics.md "The wait graph").
 *
 * Nodes are ops. u waits for w when w is the previous op of u's stream on u's rank,
 * a data dependency of u, when u allocates (F, R, SI, LW) the last op listed before u
 * on each other stream of its rank that frees memory (B, W, SO: docs/spec.md "Time"), or
 * the source of a `dep` line into u. OG(c) waits for every B and W of chunk c on its
 * rank; they run in listed order on one stream, so its edge goes to the last-listed
 * one. Every rule but the `dep` lines is a row of the op semantics table (opsem.h).
 * The graph is implicit: predecessors come from the op index, so building it is
 * linear and needs 18 bytes per op (plus about 10 while looking for a cycle).
 *
 * A cycle is found in linear time (Kahn's algorithm, run backwards from the sinks, no
 * recursion). Only then are the strongly connected components of what remains
 * computed (iterative Tarjan), and in each the smallest cycle searched by a 0-1 BFS in
 * which a wait across ranks costs 1 and a wait on the same rank 0: the smallest cycle
 * is the one with the fewest cross-stage waits. The search starts from every op that
 * waits across ranks within a work budget (exact on every schedule of modest size). */
#include <stdlib.h>
#include <string.h>

#include "waitgraph.h"
#include "opsem.h"
#include "util.h"

/* ---- building -------------------------------------------------------------------- */

uint32_t graph_ref(const Graph *g, OpRef r)
{
    const Pipeline *p = g->p;
    if (r.kind >= OP_NKINDS || r.stage >= (uint32_t)p->P || r.chunk >= (uint32_t)p->V ||
        r.mb >= (uint32_t)p->M)
        return NONE;
    return opindex_global(g->idx, g->off, (OpKind)r.kind, ir_vstage(p, r.stage, r.chunk), r.mb);
}

/* The waits of one op, computed from the op index (graph_build's per-op step). */
typedef struct PredCtx {
    const Graph *g;
    const OpIndex *idx;
    Pred *buf;
    uint32_t n;
} PredCtx;

static void add_data(PredCtx *c, OpKind k, int32_t v, uint32_t mb)
{
    uint32_t u = opindex_global(c->idx, c->g->off, k, v, mb);
    if (u != UINT32_MAX)
        c->buf[c->n++] = (Pred){u, WAIT_DATA, 0};
}

/* OG(v): the last-listed B or W of virtual stage v (all on v's owner). O(M). */
static void add_last_bw(PredCtx *c, int32_t v)
{
    const OpIndex *idx = c->idx;
    uint32_t best = NONE;
    int32_t r = 0;
    for (int k = OP_B; k <= OP_W; k++)
        for (uint32_t m = opindex_next(idx, (OpKind)k, v, 0); m != NONE;
             m = opindex_next(idx, (OpKind)k, v, m + 1)) {
            uint32_t pos;
            if (opindex_find(idx, (OpKind)k, v, m, &r, &pos) && (best == NONE || pos > best))
                best = pos;
        }
    if (best != NONE)
        c->buf[c->n++] = (Pred){c->g->off[r] + best, WAIT_DATA, 0};
}

void graph_build(Graph *g, const Pipeline *p, const OpIndex *idx)
{
    memset(g, 0, sizeof *g);
    g->p = p;
    g->idx = idx;
    g->off = xmalloc(((size_t)p->P + 1) * sizeof *g->off);
    uint64_t n = 0;
    for (int32_t s = 0; s < p->P; s++) {
        g->off[s] = (uint32_t)n;
        n += p->stages[s].n;
    }
    if (n >= NONE || p->ndeps >= (1u << 30))
        die("too many ops for the wait graph");
    g->off[p->P] = g->N = (uint32_t)n;
    size_t N1 = n ? n : 1;
    g->rank = xmalloc(N1 * sizeof *g->rank);
    /* dep predecessors as CSR by target */
    uint32_t *dstart = xcalloc(N1 + 1, sizeof *dstart);
    uint32_t *dfrom = xmalloc((p->ndeps ? p->ndeps : 1) * sizeof *dfrom);
    uint32_t *ddep = xmalloc((p->ndeps ? p->ndeps : 1) * sizeof *ddep);
    for (int32_t s = 0; s < p->P; s++)
        for (uint32_t i = 0; i < p->stages[s].n; i++)
            g->rank[g->off[s] + i] = (uint16_t)s;
    if (p->ndeps) {
        uint32_t *to = xmalloc(p->ndeps * sizeof *to);
        for (uint32_t i = 0; i < p->ndeps; i++) {
            uint32_t a = graph_ref(g, p->deps[i].from), b = graph_ref(g, p->deps[i].to);
            to[i] = (a == NONE) ? NONE : b;
            if (to[i] != NONE)
                dstart[to[i] + 1]++;
        }
        for (uint32_t u = 0; u < g->N; u++)
            dstart[u + 1] += dstart[u];
        uint32_t *fill = xmalloc(N1 * sizeof *fill);
        memcpy(fill, dstart, g->N * sizeof *fill);
        for (uint32_t i = 0; i < p->ndeps; i++) {
            if (to[i] == NONE)
                continue;
            uint32_t k = fill[to[i]]++;
            dfrom[k] = graph_ref(g, p->deps[i].from);
            ddep[k] = i;
        }
        free(fill);
        free(to);
    }
    /* every op's waits, once: the previous op on its stream, the last freeing op listed
     * before it on each other stream when it allocates, its data waits (a row of
     * opsem.h each), its dep lines. The array is sized for the common case (stream +
     * two data waits per op) and grows only beyond it. */
    g->pstart = xmalloc((N1 + 1) * sizeof *g->pstart);
    size_t cap = 3 * (size_t)n + p->ndeps + 16, ne = 0;
    g->pred = xmalloc(cap * sizeof *g->pred);
    uint32_t maxn = 0, ncross = 0;
    Pred buf[2 + (STREAM_N - 1) + OPSEM_MAX_WAITS + 1];
    int32_t PV = p->P * p->V;
    for (int32_t s = 0; s < p->P; s++) {
        uint32_t last[STREAM_N] = {NONE, NONE, NONE}, lastfree[STREAM_N] = {NONE, NONE, NONE};
        const StageOps *st = &p->stages[s];
        for (uint32_t i = 0; i < st->n; i++) {
            uint32_t u = g->off[s] + i;
            const Op *op = &st->ops[i];
            OpKind k = (OpKind)op->kind;
            const OpSem *sem = k < OP_NKINDS ? &op_sem[k] : NULL;
            Stream sm = sem ? sem->stream : STREAM_COMPUTE;
            PredCtx c = {g, idx, buf, 0};
            if (last[sm] != NONE)
                buf[c.n++] = (Pred){last[sm], WAIT_STREAM, 0};
            last[sm] = u;
            /* the frees of its own stream precede it through the stream wait */
            if (sem && sem->mem == MEM_ALLOC)
                for (int j = 0; j < STREAM_N; j++)
                    if (j != (int)sm && lastfree[j] != NONE)
                        buf[c.n++] = (Pred){lastfree[j], WAIT_MEMORY, 0};
            if (sem && sem->mem == MEM_FREE)
                lastfree[sm] = u;
            if (sem && op->chunk < (uint32_t)p->V && op->mb < (uint32_t)p->M) {
                int32_t v = ir_vstage(p, s, op->chunk);
                for (int w = 0; w < sem->nwait; w++) {
                    const OpWaitRule *r = &sem->wait[w];
                    if (v + r->dv >= 0 && v + r->dv < PV)
                        add_data(&c, (OpKind)r->kind, v + r->dv,
                                 OP_IS_CHUNKWIDE(r->kind) ? 0 : op->mb);
                }
                if (sem->waits_last_bw)
                    add_last_bw(&c, v);
            }
            uint32_t nd = dstart[u + 1] - dstart[u];
            if (ne + c.n + nd > cap) {
                cap = 2 * cap + c.n + nd;
                g->pred = xrealloc(g->pred, cap * sizeof *g->pred);
            }
            g->pstart[u] = (uint32_t)ne;
            for (uint32_t x = 0; x < c.n; x++) {
                g->pred[ne++] = buf[x];
                ncross += g->rank[buf[x].node] != (uint16_t)s;
            }
            for (uint32_t x = dstart[u]; x < dstart[u + 1]; x++) {
                g->pred[ne++] = (Pred){dfrom[x], WAIT_DEP, ddep[x]};
                ncross += g->rank[dfrom[x]] != (uint16_t)s;
            }
            if (c.n + nd > maxn)
                maxn = c.n + nd;
            if (ne >= NONE)
                die("too many waits for the wait graph");
        }
    }
    g->pstart[g->N] = (uint32_t)ne;
    g->ncross = ncross;
    g->maxpred = maxn ? maxn : 1;
    free(dstart);
    free(dfrom);
    free(ddep);
}

void graph_free(Graph *g)
{
    free(g->off);
    free(g->rank);
    free(g->pstart);
    free(g->pred);
    memset(g, 0, sizeof *g);
}

uint32_t graph_preds(const Graph *g, uint32_t u, Pred *buf, bool all)
{
    uint32_t n = 0;
    for (uint32_t k = g->pstart[u]; k < g->pstart[u + 1]; k++)
        if (all || !graph_left_out(g, u, g->pred[k].node))
            buf[n++] = g->pred[k];
    return n;
}

char *node_name(const Graph *g, uint32_t u, char *buf, size_t n)
{
    const Op *op = graph_op(g, u);
    char o[48];
    snprintf(buf, n, "stage %u %s", g->rank[u], op_name(o, sizeof o, (OpKind)op->kind, op->mb, op->chunk));
    return buf;
}

/* ---- cycles ----------------------------------------------------------------------- */

/* The subgraph of the ops left by Kahn's algorithm, as CSR over predecessors. */
typedef struct Sub {
    uint32_t *start;  /* [N+1] */
    Pred *e;          /* edges to ops that are also left */
} Sub;

/* Every op that an op left waits for is left too (Kahn peels an op only once no op
 * left waits for it), so each op left keeps all its predecessors. */
static void sub_build(Sub *sb, const Graph *g, const uint32_t *left, Pred *buf)
{
    sb->start = xcalloc((size_t)g->N + 1, sizeof *sb->start);
    for (uint32_t u = 0; u < g->N; u++)
        sb->start[u + 1] = sb->start[u] + (left[u] ? graph_preds(g, u, buf, false) : 0);
    sb->e = xmalloc(((size_t)sb->start[g->N] + 1) * sizeof *sb->e);
    for (uint32_t u = 0; u < g->N; u++) {
        if (!left[u])
            continue;
        uint32_t n = graph_preds(g, u, buf, false);
        memcpy(&sb->e[sb->start[u]], buf, n * sizeof *buf);
    }
}

/* Iterative Tarjan over the subgraph; comp[u] = component id (NONE for ops not left).
 * Returns the number of components; *size gets each component's size. */
static uint32_t tarjan(const Graph *g, const Sub *sb, const uint32_t *left, uint32_t *comp,
                       uint32_t **size)
{
    uint32_t N = g->N; /* > 0: only a graph with a cycle gets here */
    uint32_t *index = xmalloc(N * sizeof *index), *low = xmalloc(N * sizeof *low);
    uint32_t *stk = xmalloc(N * sizeof *stk), *fn = xmalloc(N * sizeof *fn);
    uint32_t *fe = xmalloc(N * sizeof *fe);
    uint8_t *on = xcalloc(N, 1);
    uint32_t nidx = 0, sp = 0, ncomp = 0;
    size_t cap = 0;
    *size = NULL;
    for (uint32_t u = 0; u < N; u++) {
        index[u] = NONE;
        comp[u] = NONE;
    }
    for (uint32_t r = 0; r < N; r++) {
        if (!left[r] || index[r] != NONE)
            continue;
        uint32_t fp = 0;
        fn[fp] = r;
        fe[fp++] = sb->start[r];
        index[r] = low[r] = nidx++;
        stk[sp++] = r;
        on[r] = 1;
        while (fp) {
            uint32_t u = fn[fp - 1];
            if (fe[fp - 1] < sb->start[u + 1]) {
                uint32_t w = sb->e[fe[fp - 1]++].node;
                if (index[w] == NONE) {
                    index[w] = low[w] = nidx++;
                    stk[sp++] = w;
                    on[w] = 1;
                    fn[fp] = w;
                    fe[fp++] = sb->start[w];
                } else if (on[w] && index[w] < low[u]) {
                    low[u] = index[w];
                }
                continue;
            }
            fp--;
            if (fp && low[u] < low[fn[fp - 1]])
                low[fn[fp - 1]] = low[u];
            if (low[u] == index[u]) {
                uint32_t n = 0, w;
                do {
                    w = stk[--sp];
                    on[w] = 0;
                    comp[w] = ncomp;
                    n++;
                } while (w != u);
                size_t nc = ncomp;
                VEC_PUSH(*size, nc, cap, n);
                ncomp++;
            }
        }
    }
    free(index);
    free(low);
    free(stk);
    free(fn);
    free(fe);
    free(on);
    return ncomp;
}

/* Scratch for the 0-1 BFS, reused across starts (stamped, never cleared). */
typedef struct Bfs {
    uint32_t *dist, *par, *stamp, now;
    uint32_t *cur, *next;   /* node lists of the current and the next distance */
    size_t ncur, nnext, ccur, cnext;
} Bfs;

static uint32_t cost(const Graph *g, uint32_t a, uint32_t b)
{
    return g->rank[a] != g->rank[b];
}

/* The smallest cycle through `start` within component c: fills cyc (start first, each
 * op waiting for the next, the last waiting for start) and returns its cross-rank
 * cost, or NONE. *work counts nodes popped. */
static uint32_t bfs_cycle(const Graph *g, const Sub *sb, const uint32_t *comp, uint32_t c,
                          uint32_t start, Bfs *b, uint32_t bound, uint32_t **cyc,
                          uint32_t *ncyc, uint64_t *work)
{
    b->now++;
    b->ncur = b->nnext = 0;
    b->stamp[start] = b->now;
    b->dist[start] = 0;
    b->par[start] = NONE;
    VEC_PUSH(b->cur, b->ncur, b->ccur, start);
    uint32_t best = NONE, bestlast = NONE, d = 0;
    while (b->ncur || b->nnext) {
        if (!b->ncur) {
            uint32_t *t = b->cur;
            size_t tc = b->ccur;
            b->cur = b->next;
            b->ccur = b->cnext;
            b->ncur = b->nnext;
            b->next = t;
            b->cnext = tc;
            b->nnext = 0;
            d++;
        }
        if (d >= best || d >= bound)
            break;
        uint32_t x = b->cur[--b->ncur];
        if (b->dist[x] != d)
            continue;
        (*work)++;
        for (uint32_t k = sb->start[x]; k < sb->start[x + 1]; k++) {
            uint32_t w = sb->e[k].node;
            if (comp[w] != c)
                continue;
            uint32_t nd = d + cost(g, x, w);
            if (w == start) {
                if (nd < best) {
                    best = nd;
                    bestlast = x;
                }
                continue;
            }
            if (b->stamp[w] == b->now && b->dist[w] <= nd)
                continue;
            b->stamp[w] = b->now;
            b->dist[w] = nd;
            b->par[w] = x;
            if (nd == d)
                VEC_PUSH(b->cur, b->ncur, b->ccur, w);
            else
                VEC_PUSH(b->next, b->nnext, b->cnext, w);
        }
    }
    if (best == NONE || best >= bound)
        return NONE;
    uint32_t n = 0;
    for (uint32_t x = bestlast; x != NONE; x = b->par[x])
        n++;
    *cyc = xrealloc(*cyc, n * sizeof **cyc);
    *ncyc = n;
    uint32_t i = n;
    for (uint32_t x = bestlast; x != NONE; x = b->par[x])
        (*cyc)[--i] = x;
    return best;
}

/* The edge kind of "a waits for b" inside the subgraph (the first such edge). */
static const Pred *edge_of(const Sub *sb, uint32_t a, uint32_t b)
{
    for (uint32_t k = sb->start[a]; k < sb->start[a + 1]; k++)
        if (sb->e[k].node == b)
            return &sb->e[k];
    return NULL;
}

#define WALK_SHOWN 24

/* Reports one cycle: cyc[i] waits for cyc[i+1], the last for cyc[0]. */
static void report_cycle(Diag *d, const Graph *g, const Sub *sb, const uint32_t *cyc,
                         uint32_t L, uint32_t hops)
{
    /* rotate to the op of smallest (rank, position) that waits across ranks */
    uint32_t r0 = NONE;
    for (uint32_t i = 0; i < L; i++) {
        uint32_t a = cyc[i], b = cyc[(i + 1) % L];
        if (g->rank[a] != g->rank[b] && (r0 == NONE || a < cyc[r0]))
            r0 = i;
    }
    if (r0 == NONE)
        r0 = 0;
    uint32_t *c = xmalloc(L * sizeof *c);
    for (uint32_t i = 0; i < L; i++)
        c[i] = cyc[(r0 + i) % L];

    StrBuf m = {0};
    char a[64], o[48];
    uint32_t *named = xmalloc((L + 1) * sizeof *named), nnamed = 0;
    uint32_t *deps = xmalloc((L + 1) * sizeof *deps), ndeps = 0;
    sb_puts(&m, node_name(g, c[0], a, sizeof a));
    named[nnamed++] = c[0];
    uint32_t i = 0, segs = 0;
    bool first = true;
    while (i < L) {
        uint32_t x = c[i], y = c[(i + 1) % L];
        if (segs == WALK_SHOWN) {
            sb_printf(&m, ", ... and so on back to %s", node_name(g, c[0], a, sizeof a));
            break;
        }
        if (g->rank[x] != g->rank[y]) {
            const Pred *e = edge_of(sb, x, y);
            sb_printf(&m, "%s %s%s", first ? " waits for" : ", which waits for",
                      node_name(g, y, a, sizeof a),
                      e && e->why == WAIT_DEP ? " (by a dep line)" : "");
            if (e && e->why == WAIT_DEP)
                deps[ndeps++] = e->dep;
            i++;
        } else {
            uint32_t j = i;
            while (j < L && g->rank[c[j]] == g->rank[c[(j + 1) % L]])
                j++;
            y = c[j % L];
            const Op *oy = graph_op(g, y);
            sb_printf(&m, "%s %s on stage %u", first ? " comes after" : ", which comes after",
                      op_name(o, sizeof o, (OpKind)oy->kind, oy->mb, oy->chunk), g->rank[y]);
            i = j;
        }
        if (i < L)
            named[nnamed++] = c[i];
        first = false;
        segs++;
    }
    sb_printf(&m, " (a cycle of %u cross-stage waits)", hops);
    diag_error(d, graph_op(g, c[0])->loc, DIAG_DEADLOCK, "%s", m.s);
    for (uint32_t k = 1; k < nnamed; k++) /* the error itself points at named[0] */
        diag_note(d, graph_op(g, named[k])->loc, "%s is here", node_name(g, named[k], a, sizeof a));
    for (uint32_t k = 0; k < ndeps; k++)
        diag_note(d, g->p->deps[deps[k]].loc, "the dep line is here");
    sb_free(&m);
    free(named);
    free(deps);
    free(c);
}

#define DEADLOCKS_SHOWN 10
#define BFS_WORK 20000000u

int check_waitgraph(Diag *d, const Graph *g)
{
    uint32_t N = g->N, N1 = N ? N : 1;
    Pred *buf = xmalloc(g->maxpred * sizeof *buf);
    uint32_t *out = xcalloc(N1, sizeof *out), *queue = xmalloc(N1 * sizeof *queue);
    const uint32_t *pst = g->pstart;
    const Pred *pe = g->pred;
    for (uint32_t u = 0; u < N; u++)
        for (uint32_t k = pst[u]; k < pst[u + 1]; k++)
            if (!graph_left_out(g, u, pe[k].node))
                out[pe[k].node]++;
    /* Kahn backwards: peel ops nothing waits for; what is left reaches a cycle. */
    uint32_t qh = 0, qt = 0;
    for (uint32_t u = 0; u < N; u++)
        if (!out[u])
            queue[qt++] = u;
    while (qh < qt) {
        uint32_t u = queue[qh++];
        for (uint32_t k = pst[u]; k < pst[u + 1]; k++)
            if (!graph_left_out(g, u, pe[k].node) && --out[pe[k].node] == 0)
                queue[qt++] = pe[k].node;
    }
    free(queue);
    int nerr = 0;
    if (qt == N) {
        free(out);
        free(buf);
        return 0;
    }
    Sub sb;
    sub_build(&sb, g, out, buf);
    uint32_t *comp = xmalloc(N1 * sizeof *comp), *size;
    uint32_t ncomp = tarjan(g, &sb, out, comp, &size);
    Bfs b = {0};
    b.dist = xmalloc(N1 * sizeof *b.dist);
    b.par = xmalloc(N1 * sizeof *b.par);
    b.stamp = xcalloc(N1, sizeof *b.stamp);
    /* ops of each cyclic component, grouped */
    uint32_t *cstart = xcalloc((size_t)ncomp + 1, sizeof *cstart);
    uint32_t *members = xmalloc(N1 * sizeof *members);
    for (uint32_t u = 0; u < N; u++)
        if (comp[u] != NONE)
            cstart[comp[u] + 1]++;
    for (uint32_t k = 0; k < ncomp; k++)
        cstart[k + 1] += cstart[k];
    uint32_t *fill = xmalloc(((size_t)ncomp + 1) * sizeof *fill);
    memcpy(fill, cstart, ((size_t)ncomp + 1) * sizeof *fill);
    for (uint32_t u = 0; u < N; u++)
        if (comp[u] != NONE)
            members[fill[comp[u]]++] = u;
    free(fill);
    uint32_t *cyc = NULL, ncyc = 0, *best = NULL, nbest = 0;
    uint64_t work = 0;
    for (uint32_t c = 0; c < ncomp; c++) {
        if (size[c] < 2)
            continue;
        nerr++;
        if (nerr > DEADLOCKS_SHOWN) {
            diag_error(d, graph_op(g, members[cstart[c]])->loc, DIAG_DEADLOCK,
                       "another cycle: %u ops wait for each other", size[c]);
            continue;
        }
        uint32_t bestcost = NONE;
        for (uint32_t k = cstart[c]; k < cstart[c + 1]; k++) {
            uint32_t u = members[k];
            bool cross = false;
            for (uint32_t e = sb.start[u]; e < sb.start[u + 1] && !cross; e++)
                cross = comp[sb.e[e].node] == c && g->rank[sb.e[e].node] != g->rank[u];
            if (!cross)
                continue;
            if (bestcost != NONE && work > BFS_WORK)
                break;
            uint32_t cst = bfs_cycle(g, &sb, comp, c, u, &b, bestcost, &cyc, &ncyc, &work);
            if (cst != NONE) { /* below bestcost: bfs_cycle's bound */
                bestcost = cst;
                uint32_t *t = best;
                best = cyc;
                cyc = t;
                nbest = ncyc;
            }
        }
        if (bestcost != NONE)
            report_cycle(d, g, &sb, best, nbest, bestcost);
        else
            diag_error(d, graph_op(g, members[cstart[c]])->loc, DIAG_DEADLOCK,
                       "%u ops wait for each other in a cycle", size[c]);
    }
    free(cyc);
    free(best);
    free(cstart);
    free(members);
    free(b.dist);
    free(b.par);
    free(b.stamp);
    free(b.cur);
    free(b.next);
    free(size);
    free(comp);
    free(sb.start);
    free(sb.e);
    free(out);
    free(buf);
    return nerr;
}
