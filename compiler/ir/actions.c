/* actions.c - the runtime-action rules of actions.h, after PyTorch's
 * _PipelineScheduleRuntime._step_microbatches (torch/distributed/pipelining): a RECV
 * posts a receive that the compute of its stage and micro-batch waits for, a SEND
 * sends what the compute produced, NCCL pairs the point-to-point operations of two
 * ranks in issue order, UNSHARD/RESHARD gather and free an FSDP stage's parameters
 * (computing on a sharded stage stops the runtime), REDUCE_GRAD reduces the stage's
 * gradients. docs/csv.md "The comms form", docs/semantics.md "Runtime actions". */
#include "actions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

const ActionRun action_run[ACTION_N] = {
    [ACTION_UNSHARD] = {"treat it as a no-op",
                        "pipec models ZeRO-3's parameter gathers only as memory, with the "
                        "'zero 3' setting"},
    [ACTION_RESHARD] = {"treat it as a no-op",
                        "pipec models ZeRO-3's gathered parameters only as memory, with the "
                        "'zero 3' setting"},
    [ACTION_REDUCE_GRAD] = {"treat it as a no-op",
                            "pipec models data parallelism with the 'data_parallel', 'zero' "
                            "and 'grad_dtype' settings, and the gradient reduction takes no "
                            "time"},
    [ACTION_OVERLAP_F_B] = {"run each pair as its F then its B, one after the other",
                            "pipec has no overlapped F/B op"},
};

/* The name of (vstage, kind, mb) in the style's spelling; spell for compute kinds. */
static char *seq_name(char *buf, size_t n, const SeqStyle *st, uint32_t v, uint32_t kind,
                      uint32_t mb, const char *spell)
{
    const char *k = kind >= SEQ_ACTION ? action_kind_name[kind - SEQ_ACTION] : spell;
    bool chunkwide = kind >= SEQ_ACTION && !ACTION_IS_P2P(kind - SEQ_ACTION);
    if (kind == SEQ_ACTION + ACTION_OVERLAP_F_B)
        snprintf(buf, n, "%s", k);
    else if (st->csv && chunkwide)
        snprintf(buf, n, "%u%s", v, k);
    else if (st->csv)
        snprintf(buf, n, "%u%s%u", v, k, mb);
    else if (st->chunk[v])
        snprintf(buf, n, "%s%u.%u", k, mb, st->chunk[v]);
    else
        snprintf(buf, n, "%s%u", k, mb);
    return buf;
}

static char *item_name(char *buf, size_t n, const SeqStyle *st, const SeqItem *it)
{
    return seq_name(buf, n, st, it->vstage, it->kind, it->mb, it->spell);
}

static bool is_p2p(const SeqItem *it)
{
    return it->kind >= SEQ_ACTION && ACTION_IS_P2P(it->kind - SEQ_ACTION);
}

static bool is_compute(const SeqItem *it)
{
    return it->kind < SEQ_ACTION;
}

/* The point-to-point kind of it: 0 SEND_F, 1 RECV_F, 2 SEND_B, 3 RECV_B. */
static uint32_t p2p(const SeqItem *it)
{
    return it->kind - SEQ_ACTION;
}

typedef struct Ctx {
    Diag *d;
    const SeqItem *it;
    size_t n;
    uint32_t P, S;
    const uint32_t *owner;
    const SeqStyle *st;
    const char *rank_word;  /* "rank" or "stage" */
    size_t *comp;           /* indices of the compute items, by (vstage, mb, kind, index) */
    size_t ncomp;
} Ctx;

static const Ctx *sort_ctx; /* for the qsort comparators (single-threaded) */

static int cmp_comp(const void *a, const void *b)
{
    const SeqItem *x = &sort_ctx->it[*(const size_t *)a], *y = &sort_ctx->it[*(const size_t *)b];
    if (x->vstage != y->vstage)
        return x->vstage < y->vstage ? -1 : 1;
    if (x->mb != y->mb)
        return x->mb < y->mb ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    return (*(const size_t *)a > *(const size_t *)b) - (*(const size_t *)a < *(const size_t *)b);
}

/* The first compute item of kind k for (v, mb) on rank r, or n. */
static size_t find_compute(const Ctx *c, uint32_t r, uint32_t v, uint32_t mb, uint32_t k)
{
    size_t lo = 0, hi = c->ncomp;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const SeqItem *m = &c->it[c->comp[mid]];
        if (m->vstage < v || (m->vstage == v && (m->mb < mb || (m->mb == mb && m->kind < k))))
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < c->ncomp; lo++) {
        const SeqItem *m = &c->it[c->comp[lo]];
        if (m->vstage != v || m->mb != mb || m->kind != k)
            break;
        if (m->rank == r)
            return c->comp[lo];
    }
    return c->n;
}

/* A RECV_F of (stage, mb) comes before the F it feeds and a SEND_F after the F that
 * produces it; RECV_B and SEND_B likewise around the backward (I, B or BW) of the
 * same stage and micro-batch. An action without that compute is left to the pairing. */
static void check_order(const Ctx *c)
{
    char b1[48], b2[48];
    for (size_t i = 0; i < c->n; i++) {
        const SeqItem *a = &c->it[i];
        if (!is_p2p(a))
            continue;
        bool fwd = p2p(a) < 2, send = (p2p(a) & 1) == 0;
        size_t j = find_compute(c, a->rank, a->vstage, a->mb, fwd ? SEQ_F : SEQ_B);
        if (j == c->n)
            continue;
        const SeqItem *x = &c->it[j];
        if (send && j > i) {
            diag_error(c->d, a->loc, DIAG_ORDER, "%s comes before %s, which produces what it sends",
                       item_name(b1, sizeof b1, c->st, a), item_name(b2, sizeof b2, c->st, x));
            diag_note(c->d, x->loc, "%s is here", b2);
        } else if (!send && j < i) {
            diag_error(c->d, a->loc, DIAG_ORDER,
                       "%s comes after %s, which consumes what it receives",
                       item_name(b1, sizeof b1, c->st, a), item_name(b2, sizeof b2, c->st, x));
            diag_note(c->d, x->loc, "%s is here", b2);
        }
    }
}

/* peer[] of the point-to-point items, for the pair comparators. */
static const uint32_t *sort_peer;

/* Sends by (rank, peer, index); receives by (peer, rank, index): both (src, dst, index). */
static int cmp_pair(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const SeqItem *x = &sort_ctx->it[i], *y = &sort_ctx->it[j];
    bool xs = (p2p(x) & 1) == 0, ys = (p2p(y) & 1) == 0;
    uint32_t xsrc = xs ? x->rank : sort_peer[i], xdst = xs ? sort_peer[i] : x->rank;
    uint32_t ysrc = ys ? y->rank : sort_peer[j], ydst = ys ? sort_peer[j] : y->rank;
    if (xsrc != ysrc)
        return xsrc < ysrc ? -1 : 1;
    if (xdst != ydst)
        return xdst < ydst ? -1 : 1;
    return (i > j) - (i < j);
}

/* The stage on the other side of a point-to-point item: a SEND_F's is s+1, a RECV_F's
 * s-1, a SEND_B's s-1, a RECV_B's s+1 (-1 past either end). */
static int64_t other_stage(const SeqItem *a)
{
    bool fwd = p2p(a) < 2, send = (p2p(a) & 1) == 0;
    return (int64_t)a->vstage + (fwd == send ? 1 : -1);
}

/* Per ordered pair of ranks, the n-th SEND meets the n-th RECV with the same
 * micro-batch and the matching type and stage, as NCCL pairs them. */
static void check_pairs(Ctx *c, const uint32_t *peer)
{
    Diag *d = c->d;
    const char *rw = c->rank_word;
    char b1[48], b2[48], b3[48];
    size_t *snd = xmalloc((c->n + 1) * sizeof *snd), *rcv = xmalloc((c->n + 1) * sizeof *rcv);
    size_t ns = 0, nr = 0;
    for (size_t i = 0; i < c->n; i++)
        if (is_p2p(&c->it[i]) && peer[i] != c->P) {
            if ((p2p(&c->it[i]) & 1) == 0)
                snd[ns++] = i;
            else
                rcv[nr++] = i;
        }
    sort_ctx = c;
    sort_peer = peer;
    qsort(snd, ns, sizeof *snd, cmp_pair);
    qsort(rcv, nr, sizeof *rcv, cmp_pair);
    size_t si = 0, ri = 0;
    while (si < ns || ri < nr) {
        /* the next pair (src, dst) in order, and its runs in snd and rcv */
        uint64_t ks = si < ns ? (uint64_t)c->it[snd[si]].rank << 32 | peer[snd[si]] : UINT64_MAX;
        uint64_t kr = ri < nr ? (uint64_t)peer[rcv[ri]] << 32 | c->it[rcv[ri]].rank : UINT64_MAX;
        uint64_t key = ks < kr ? ks : kr;
        uint32_t src = (uint32_t)(key >> 32), dst = (uint32_t)key;
        for (;;) {
            bool hs = si < ns && ks == key, hr = ri < nr && kr == key;
            if (!hs && !hr)
                break;
            const SeqItem *s = hs ? &c->it[snd[si]] : NULL, *v = hr ? &c->it[rcv[ri]] : NULL;
            if (!v || !s) {
                const SeqItem *a = v ? v : s;
                uint32_t k = p2p(a), want = k ^ 1u; /* SEND <-> RECV of the same direction */
                diag_error(d, a->loc, DIAG_MISSING, "%s on %s %u has no matching %s on %s %u",
                           item_name(b1, sizeof b1, c->st, a), rw, v ? dst : src,
                           seq_name(b2, sizeof b2, c->st, (uint32_t)other_stage(a),
                                    SEQ_ACTION + want, a->mb, NULL),
                           rw, v ? src : dst);
                break;
            }
            uint32_t want = (uint32_t)other_stage(s);
            if (p2p(v) != p2p(s) + 1 || v->vstage != want || v->mb != s->mb) {
                diag_error(d, v->loc, DIAG_ORDER,
                           "%s on %s %u is matched with %s from %s %u: it is %s %u's next "
                           "receive from %s %u and that is %s %u's next send to %s %u, so "
                           "NCCL pairs them; expected %s",
                           item_name(b1, sizeof b1, c->st, v), rw, dst,
                           item_name(b2, sizeof b2, c->st, s), rw, src, rw, dst, rw, src, rw,
                           src, rw, dst,
                           seq_name(b3, sizeof b3, c->st, want, SEQ_ACTION + p2p(s) + 1, s->mb,
                                    NULL));
                diag_note(d, s->loc, "%s is here", b2);
                break;
            }
            si++, ri++;
            ks = si < ns ? (uint64_t)c->it[snd[si]].rank << 32 | peer[snd[si]] : UINT64_MAX;
            kr = ri < nr ? (uint64_t)peer[rcv[ri]] << 32 | c->it[rcv[ri]].rank : UINT64_MAX;
        }
        while (si < ns && ((uint64_t)c->it[snd[si]].rank << 32 | peer[snd[si]]) == key)
            si++;
        while (ri < nr && ((uint64_t)peer[rcv[ri]] << 32 | c->it[rcv[ri]].rank) == key)
            ri++;
    }
    free(snd);
    free(rcv);
}

/* After the pairing holds: runs the ranks' point-to-point actions with blocking
 * (rendezvous) sends, a SEND and its RECV completing together; compute never blocks.
 * When no rank can move and some have actions left, the schedule deadlocks: reported at
 * the first stuck rank's action, naming what its peer waits in. */
static void check_deadlock(const Ctx *c, const uint32_t *peer)
{
    uint32_t P = c->P;
    size_t *q = xmalloc((c->n + 1) * sizeof *q), nq = 0;
    for (size_t i = 0; i < c->n; i++)
        if (is_p2p(&c->it[i]))
            q[nq++] = i;
    size_t *head = xmalloc((P + 1) * sizeof *head), *end = xmalloc((P + 1) * sizeof *end);
    for (uint32_t k = 0; k < P; k++)
        head[k] = end[k] = nq;
    for (size_t i = 0; i < nq; i++) { /* a rank's items are contiguous */
        uint32_t k = c->it[q[i]].rank;
        if (head[k] == nq)
            head[k] = i;
        end[k] = i + 1;
    }
    for (bool moved = true; moved;) {
        moved = false;
        for (uint32_t k = 0; k < P; k++) {
            if (head[k] >= end[k])
                continue;
            uint32_t o = peer[q[head[k]]];
            if (o == k) { /* a rank sending to itself does not wait */
                head[k]++, moved = true;
                continue;
            }
            if (head[o] < end[o] && peer[q[head[o]]] == k &&
                (p2p(&c->it[q[head[o]]]) & 1) != (p2p(&c->it[q[head[k]]]) & 1)) {
                head[k]++, head[o]++, moved = true;
            }
        }
    }
    const char *rw = c->rank_word;
    for (uint32_t k = 0; k < P; k++) {
        if (head[k] >= end[k])
            continue;
        char b1[48], b2[48];
        const SeqItem *a = &c->it[q[head[k]]];
        uint32_t o = peer[q[head[k]]];
        if (head[o] < end[o]) {
            const SeqItem *w = &c->it[q[head[o]]];
            diag_error(c->d, a->loc, DIAG_DEADLOCK,
                       "%s on %s %u waits for %s %u, which waits in %s: with blocking "
                       "sends neither can go on", item_name(b1, sizeof b1, c->st, a), rw, k, rw,
                       o, item_name(b2, sizeof b2, c->st, w));
            diag_note(c->d, w->loc, "%s is here", b2);
        } else {
            diag_error(c->d, a->loc, DIAG_DEADLOCK,
                       "%s on %s %u waits for %s %u, which has no comm action left",
                       item_name(b1, sizeof b1, c->st, a), rw, k, rw, o);
        }
        break;
    }
    free(q);
    free(head);
    free(end);
}

/* FSDP and gradient-reduction order, as warnings (PyTorch's runtime raises on the
 * first three only for stages wrapped in FSDP, which a schedule does not say; a stage
 * with UNSHARD or RESHARD actions is taken to be one). */
static void check_sharding(const Ctx *c)
{
    Diag *d = c->d;
    uint32_t S = c->S;
    char b1[48], b2[48];
    uint8_t *fsdp = xcalloc(S + 1, 1), *warned = xcalloc(S + 1, 1);
    size_t *last_toggle = xmalloc((S + 1) * sizeof *last_toggle); /* last UNSHARD/RESHARD */
    size_t *last_bw = xmalloc((S + 1) * sizeof *last_bw);
    bool *up = xcalloc(S + 1, sizeof *up);
    for (uint32_t v = 0; v < S; v++)
        last_toggle[v] = last_bw[v] = c->n;
    for (size_t i = 0; i < c->n; i++) {
        const SeqItem *a = &c->it[i];
        if (a->vstage >= S)
            continue;
        if (a->kind == SEQ_ACTION + ACTION_UNSHARD || a->kind == SEQ_ACTION + ACTION_RESHARD)
            fsdp[a->vstage] = 1;
        if (a->kind == SEQ_B || a->kind == SEQ_W)
            last_bw[a->vstage] = i;
    }
    for (size_t i = 0; i < c->n; i++) {
        const SeqItem *a = &c->it[i];
        uint32_t v = a->vstage;
        if (v >= S)
            continue;
        if (a->kind == SEQ_ACTION + ACTION_UNSHARD || a->kind == SEQ_ACTION + ACTION_RESHARD) {
            bool un = a->kind == SEQ_ACTION + ACTION_UNSHARD;
            if (up[v] == un) {
                diag_warning(d, a->loc, WARN_ACTION,
                             un ? "%s of stage %u, which is already unsharded: PyTorch's "
                                  "runtime stops with 'Unsharding the same stage twice'"
                                : "%s of stage %u, which is not unsharded: PyTorch's runtime "
                                  "stops with 'Resharding without unsharding'",
                             item_name(b1, sizeof b1, c->st, a), v);
                if (last_toggle[v] < c->n)
                    diag_note(d, c->it[last_toggle[v]].loc, "the %s before it is here",
                              item_name(b2, sizeof b2, c->st, &c->it[last_toggle[v]]));
            }
            up[v] = un;
            last_toggle[v] = i;
        } else if (is_compute(a) && fsdp[v] && !up[v] && !warned[v]) {
            warned[v] = 1;
            if (last_toggle[v] < c->n) {
                diag_warning(d, a->loc, WARN_ACTION,
                             "%s computes on stage %u after its %s and before the next "
                             "UNSHARD: PyTorch's runtime stops with 'Attempted to compute on "
                             "sharded stage'", item_name(b1, sizeof b1, c->st, a), v,
                             item_name(b2, sizeof b2, c->st, &c->it[last_toggle[v]]));
                diag_note(d, c->it[last_toggle[v]].loc, "%s is here", b2);
            } else {
                diag_warning(d, a->loc, WARN_ACTION,
                             "%s computes on stage %u before its first UNSHARD: PyTorch's "
                             "runtime stops with 'Attempted to compute on sharded stage'",
                             item_name(b1, sizeof b1, c->st, a), v);
            }
        } else if (a->kind == SEQ_ACTION + ACTION_REDUCE_GRAD && last_bw[v] < c->n &&
                   last_bw[v] > i) {
            const SeqItem *w = &c->it[last_bw[v]];
            diag_warning(d, a->loc, WARN_ACTION,
                         "%s of stage %u comes before %s, the stage's last backward: it "
                         "reduces gradients that are not complete",
                         item_name(b1, sizeof b1, c->st, a), v, item_name(b2, sizeof b2, c->st, w));
            diag_note(d, w->loc, "%s is here", b2);
        }
    }
    free(fsdp);
    free(warned);
    free(last_toggle);
    free(last_bw);
    free(up);
}

/* One warning per kind that pipec does not run as PyTorch's runtime does
 * (action_run[]), at its first action, with the kind's count. */
static void warn_not_run(Diag *d, const SeqItem *items, size_t n)
{
    size_t first[ACTION_N], count[ACTION_N] = {0};
    for (size_t i = 0; i < n; i++) {
        if (items[i].kind < SEQ_ACTION || items[i].kind >= SEQ_ACTION + ACTION_N)
            continue;
        uint32_t k = items[i].kind - SEQ_ACTION;
        if (!count[k]++)
            first[k] = i;
    }
    for (uint32_t k = 0; k < ACTION_N; k++) {
        const ActionRun *r = &action_run[k];
        if (!count[k] || !r->runs)
            continue;
        diag_warning(d, items[first[k]].loc, WARN_ACTION,
                     "%s is kept for the round trip (%zu action%s), but pipec's simulation "
                     "and generated programs %s: %s", action_kind_name[k], count[k],
                     count[k] == 1 ? "" : "s, the first here", r->runs, r->instead);
    }
}

int actions_check(Diag *d, const SeqItem *items, size_t n, uint32_t P, const uint32_t *owner,
                  uint32_t S, const SeqStyle *style)
{
    int nerr0 = d->nerr;
    char b1[48];
    Ctx c = {d, items, n, P, S, owner, style, style->csv ? "rank" : "stage", NULL, 0};
    bool any_p2p = false;
    for (size_t i = 0; i < n; i++) {
        const SeqItem *a = &items[i];
        any_p2p |= is_p2p(a);
        if (a->kind >= SEQ_ACTION && !is_p2p(a) && a->kind != SEQ_ACTION + ACTION_OVERLAP_F_B &&
            (a->vstage >= S || owner[a->vstage] != a->rank))
            diag_error(d, a->loc, DIAG_PLACEMENT, "%s is on %s %u, which does not hold stage %u",
                       item_name(b1, sizeof b1, style, a), c.rank_word, a->rank, a->vstage);
        if (a->kind != SEQ_ACTION + ACTION_OVERLAP_F_B)
            continue;
        if (i + 2 >= n || !is_compute(&items[i + 1]) || items[i + 1].rank != a->rank ||
            !is_compute(&items[i + 2]) || items[i + 2].rank != a->rank)
            diag_error(d, a->loc, DIAG_SYNTAX,
                       "OVERLAP_F_B must be followed by the two compute ops it overlaps");
    }
    if (any_p2p) {
        uint32_t *peer = xmalloc((n + 1) * sizeof *peer);
        for (size_t i = 0; i < n; i++) { /* the other rank, or P when there is none */
            const SeqItem *a = &items[i];
            peer[i] = P;
            if (!is_p2p(a))
                continue;
            int64_t other = other_stage(a);
            bool send = (p2p(a) & 1) == 0;
            if (a->vstage >= S || owner[a->vstage] != a->rank)
                diag_error(d, a->loc, DIAG_PLACEMENT,
                           "%s is on %s %u, which does not hold stage %u",
                           item_name(b1, sizeof b1, style, a), c.rank_word, a->rank, a->vstage);
            else if (other < 0 || other >= (int64_t)S)
                diag_error(d, a->loc, DIAG_MISSING, "%s has no %s stage to %s",
                           item_name(b1, sizeof b1, style, a),
                           other > (int64_t)a->vstage ? "next" : "previous",
                           send ? "send to" : "receive from");
            else
                peer[i] = owner[other];
        }
        if (d->nerr == nerr0) {
            c.comp = xmalloc((n + 1) * sizeof *c.comp);
            for (size_t i = 0; i < n; i++)
                if (is_compute(&items[i]))
                    c.comp[c.ncomp++] = i;
            sort_ctx = &c;
            qsort(c.comp, c.ncomp, sizeof *c.comp, cmp_comp);
            check_order(&c);
            check_pairs(&c, peer);
            if (d->nerr == nerr0)
                check_deadlock(&c, peer);
            free(c.comp);
        }
        free(peer);
    }
    check_sharding(&c);
    warn_not_run(d, items, n);
    return d->nerr - nerr0;
}

int actions_check_pipeline(Diag *d, const Pipeline *p)
{
    if (!p->nactions)
        return 0;
    uint32_t S = (uint32_t)p->P * (uint32_t)p->V;
    uint32_t *owner = xmalloc(S * sizeof *owner), *chunk = xmalloc(S * sizeof *chunk);
    for (uint32_t v = 0; v < S; v++) {
        int32_t s, ch;
        ir_owner(p, (int32_t)v, &s, &ch);
        owner[v] = (uint32_t)s;
        chunk[v] = (uint32_t)ch;
    }
    size_t n = p->nactions, cap = 0, k = 0;
    for (int32_t s = 0; s < p->P; s++)
        n += p->stages[s].n;
    SeqItem *it = NULL;
    size_t nit = 0;
    VEC_RESERVE(it, n + 1, cap);
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *st = &p->stages[s];
        for (uint32_t i = 0; i <= st->n; i++) {
            for (; k < p->nactions && p->actions[k].rank == s && p->actions[k].pos <= i; k++) {
                const Action *a = &p->actions[k];
                it[nit++] = (SeqItem){(uint32_t)s, (uint32_t)ir_vstage(p, s, a->chunk), a->mb,
                                      SEQ_ACTION + a->kind, NULL, a->loc};
            }
            if (i == st->n)
                break;
            const Op *o = &st->ops[i];
            uint32_t kind = o->kind == OP_F ? SEQ_F : o->kind == OP_B ? SEQ_B
                          : o->kind == OP_W ? SEQ_W : SEQ_ACTION + ACTION_N;
            if (kind == SEQ_ACTION + ACTION_N)
                continue; /* R, SO, SI, OG, LW, RO: no PyTorch action */
            it[nit++] = (SeqItem){(uint32_t)s, (uint32_t)ir_vstage(p, s, o->chunk), o->mb, kind,
                                  op_kind_name[o->kind], o->loc};
        }
    }
    SeqStyle style = {false, chunk};
    int err = actions_check(d, it, nit, (uint32_t)p->P, owner, S, &style);
    free(it);
    free(owner);
    free(chunk);
    return err;
}
