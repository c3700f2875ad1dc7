/* comm.c - the send/recv lowering and its simulation; see comm.h and
 * docs/semantics.md "Communication".
 *
 * Messages are generated consumer by consumer (rank, then list position), so each
 * rank's recvs come out in program order; a message's matching index (seq) on its pair
 * (src, dst) is the order of the recvs. Sends are placed on the producer's rank after
 * the producing op and after the previous send of the same pair, so the sends of a
 * pair are issued in the receiver's order. Items are then placed with one stable
 * counting sort over the slots 2*(op number) + kind: linear in ops + messages. */
#include "comm.h"

#include <stdlib.h>
#include <string.h>

#include "waitgraph.h"
#include "util.h"

/* The lowering over a built wait graph. */
static CommPlan *plan_graph(const Graph *g)
{
    const Pipeline *p = g->p;
    CommPlan *cp = xcalloc(1, sizeof *cp);
    cp->P = (uint32_t)p->P;
    size_t P = (size_t)p->P, nm = 0;
    uint32_t *seq = xcalloc(P, sizeof *seq), *last = xcalloc(P, sizeof *last);
    uint32_t *touched = xmalloc(P * sizeof *touched), ntouched = 0;
    uint8_t *seen = xcalloc(P, 1);
    uint32_t *src = xmalloc(g->maxpred * sizeof *src);
    uint32_t *dpi = xmalloc(g->maxpred * sizeof *dpi);
    /* one message per wait across ranks: the graph counted them */
    cp->msgs = xmalloc(((size_t)g->ncross + 1) * sizeof *cp->msgs);
    for (uint32_t b = 0; b < cp->P; b++) {
        for (uint32_t j = 0; j < p->stages[b].n; j++) {
            uint32_t u = g->off[b] + j, k = 0;
            /* a wait across ranks is a data or a dep wait (stream and memory waits
             * stay on the rank) */
            for (uint32_t e = g->pstart[u]; e < g->pstart[u + 1]; e++) {
                const Pred *w = &g->pred[e];
                if (g->rank[w->node] != b)
                    src[k++] = w->node, dpi[k - 1] = w->why == WAIT_DEP ? w->dep : NONE;
            }
            /* order by producer (rank, position) = node number; keep dep index along */
            for (uint32_t x = 1; x < k; x++)
                for (uint32_t y = x; y > 0 && (src[y - 1] > src[y] ||
                                               (src[y - 1] == src[y] && dpi[y - 1] > dpi[y]));
                     y--) {
                    uint32_t t = src[y];
                    src[y] = src[y - 1];
                    src[y - 1] = t;
                    t = dpi[y];
                    dpi[y] = dpi[y - 1];
                    dpi[y - 1] = t;
                }
            for (uint32_t e = 0; e < k; e++) {
                uint32_t a = g->rank[src[e]], ap = graph_pos(g, src[e]);
                if (!seen[a]) {
                    seen[a] = 1;
                    touched[ntouched++] = a;
                }
                cp->msgs[nm++] = (CommMsg){a, ap, b, j, seq[a]++, dpi[e] != NONE,
                                           dpi[e] != NONE ? p->deps[dpi[e]].loc : LOC_NONE};
            }
        }
        for (uint32_t t = 0; t < ntouched; t++) {
            seq[touched[t]] = 0;
            seen[touched[t]] = 0;
        }
        ntouched = 0;
    }
    if (nm >= NONE / 2)
        die("too many messages");
    cp->nmsgs = (uint32_t)nm;
    free(src);
    free(dpi);

    /* send positions: after the producer and after the previous send of the pair */
    uint32_t *sendpos = xmalloc((nm ? nm : 1) * sizeof *sendpos);
    uint32_t curdst = NONE;
    for (size_t k = 0; k < nm; k++) {
        CommMsg *m = &cp->msgs[k];
        if (m->dst != curdst) {
            for (uint32_t t = 0; t < ntouched; t++) {
                last[touched[t]] = 0;
                seen[touched[t]] = 0;
            }
            ntouched = 0;
            curdst = m->dst;
        }
        if (!seen[m->src]) {
            seen[m->src] = 1;
            touched[ntouched++] = m->src;
            last[m->src] = 0;
        }
        uint32_t sp = m->src_pos > last[m->src] ? m->src_pos : last[m->src];
        last[m->src] = sp;
        sendpos[k] = sp;
    }
    free(seq);
    free(last);
    free(touched);
    free(seen);

    /* place: stable counting sort on slot 2 * (op number) + kind */
    size_t nslots = 2 * (size_t)g->N + 1;
    uint32_t *cnt = xcalloc(nslots + 1, sizeof *cnt);
    for (size_t k = 0; k < nm; k++) {
        const CommMsg *m = &cp->msgs[k];
        cnt[2 * ((size_t)g->off[m->dst] + m->dst_pos) + COMM_RECV + 1]++;
        cnt[2 * ((size_t)g->off[m->src] + sendpos[k]) + COMM_SEND + 1]++;
    }
    for (size_t s = 0; s < nslots; s++)
        cnt[s + 1] += cnt[s];
    cp->items = xmalloc((2 * nm + 1) * sizeof *cp->items);
    cp->start = xmalloc(((size_t)cp->P + 1) * sizeof *cp->start);
    for (uint32_t r = 0; r <= cp->P; r++)
        cp->start[r] = cnt[2 * (size_t)g->off[r]];
    for (size_t k = 0; k < nm; k++) {
        const CommMsg *m = &cp->msgs[k];
        cp->items[cnt[2 * ((size_t)g->off[m->dst] + m->dst_pos) + COMM_RECV]++] =
            (CommItem){COMM_RECV, m->src, (uint32_t)k, m->dst_pos};
        cp->items[cnt[2 * ((size_t)g->off[m->src] + sendpos[k]) + COMM_SEND]++] =
            (CommItem){COMM_SEND, m->dst, (uint32_t)k, sendpos[k]};
    }
    free(cnt);
    free(sendpos);
    return cp;
}

CommPlan *comm_plan(const Pipeline *p)
{
    OpIndex *idx = opindex_build(p);
    Graph g;
    graph_build(&g, p, idx);
    CommPlan *cp = plan_graph(&g);
    graph_free(&g);
    opindex_free(idx);
    return cp;
}

void comm_plan_free(CommPlan *cp)
{
    if (!cp)
        return;
    free(cp->msgs);
    free(cp->items);
    free(cp->start);
    free(cp);
}

/* ---- simulation ----------------------------------------------------------------- */

typedef struct Sim {
    const Pipeline *p;
    const CommPlan *cp;
    CommMode mode;
    uint32_t *op, *it;      /* [P] next op, next item of each rank */
    uint8_t *blocked;       /* [P] */
    uint8_t *posted, *at;   /* [nmsgs] send reached / recv reached */
    uint8_t *done;          /* [nmsgs] matched (rendezvous) */
    uint32_t *ready, nready;
} Sim;

static void wake(Sim *s, uint32_t r)
{
    if (s->blocked[r]) {
        s->blocked[r] = 0;
        s->ready[s->nready++] = r;
    }
}

/* Runs rank r until it blocks or finishes. */
static void run_rank(Sim *s, uint32_t r)
{
    const CommPlan *cp = s->cp;
    uint32_t n = s->p->stages[r].n, end = cp->start[r + 1];
    for (;;) {
        uint32_t t = s->it[r], i = s->op[r];
        if (t < end && 2 * (uint64_t)cp->items[t].pos + cp->items[t].kind <= 2 * (uint64_t)i) {
            const CommItem *c = &cp->items[t];
            uint32_t k = c->msg;
            if (c->kind == COMM_SEND) {
                s->posted[k] = 1;
                if (s->mode == COMM_EAGER) {
                    wake(s, c->peer);
                } else if (!s->done[k]) {
                    if (!s->at[k]) {
                        s->blocked[r] = 1;
                        return;
                    }
                    s->done[k] = 1;
                    wake(s, c->peer);
                }
            } else {
                s->at[k] = 1;
                if (!s->posted[k]) {
                    s->blocked[r] = 1;
                    return;
                }
                if (s->mode == COMM_RENDEZVOUS && !s->done[k]) {
                    s->done[k] = 1;
                    wake(s, c->peer);
                }
            }
            s->it[r] = t + 1;
        } else if (i < n) {
            s->op[r] = i + 1;
        } else {
            return;
        }
    }
}

/* Runs every rank of cp until each has finished or blocks; *s holds the end state
 * (comm_run_free frees it). */
static void comm_run(Sim *s, const Pipeline *p, const CommPlan *cp, CommMode mode)
{
    size_t P = cp->P ? cp->P : 1, nm = cp->nmsgs ? cp->nmsgs : 1;
    *s = (Sim){p, cp, mode, xcalloc(P, sizeof(uint32_t)), xcalloc(P, sizeof(uint32_t)),
               xcalloc(P, 1), xcalloc(nm, 1), xcalloc(nm, 1), xcalloc(nm, 1),
               xmalloc(P * sizeof(uint32_t)), 0};
    for (uint32_t r = 0; r < cp->P; r++) {
        s->it[r] = cp->start[r];
        s->ready[s->nready++] = cp->P - 1 - r;
    }
    while (s->nready)
        run_rank(s, s->ready[--s->nready]);
}

static void comm_run_free(Sim *s)
{
    free(s->op);
    free(s->it);
    free(s->blocked);
    free(s->posted);
    free(s->at);
    free(s->done);
    free(s->ready);
}

CommHang comm_simulate(const Pipeline *p, const CommPlan *cp, CommMode mode)
{
    Sim s;
    comm_run(&s, p, cp, mode);
    CommHang h = {false, 0, 0, 0, NONE};
    for (uint32_t r = 0; r < cp->P; r++) {
        if (!s.blocked[r])
            continue;
        if (!h.hung) {
            h.hung = true;
            h.rank = r;
            h.item = s.it[r];
            uint32_t peer = cp->items[s.it[r]].peer;
            h.peer_item = s.blocked[peer] ? s.it[peer] : NONE;
        }
        h.nblocked++;
    }
    comm_run_free(&s);
    return h;
}

/* ---- the verdict without the plan ---------------------------------------------- */

/* Under COMM_EAGER a send never blocks, so rank a has posted a message once it has run
 * the op after which the send is placed, and a rank reaches op j once every message
 * into j is posted. The plan places the send of a message from a to b after its
 * producer and after every earlier send of the pair (b's order): after op `thr`, the
 * running maximum of the producers' positions of the pair's messages in b's order. So
 * whether comm_simulate hangs follows from each rank's progress (ops run) alone: the
 * final state of this monotone system is the simulation's whatever the order the ranks
 * run in. About 4 bytes a message instead of the plan's 64. */
bool comm_hangs(const Graph *g)
{
    const Pipeline *p = g->p;
    size_t P = (size_t)p->P;
    /* thr[k]: the op of its producer's rank after which message k is sent; messages
     * numbered consumer by consumer (rank, position, then the order of its waits) */
    uint32_t *thr = xmalloc(((size_t)g->ncross + 1) * sizeof *thr);
    uint32_t *mfirst = xmalloc((P + 1) * sizeof *mfirst); /* first message of each rank */
    uint32_t *last = xcalloc(P ? P : 1, sizeof *last), *touched = xmalloc((P ? P : 1) * sizeof *touched);
    uint8_t *seen = xcalloc(P ? P : 1, 1);
    size_t nm = 0;
    for (uint32_t b = 0; b < P; b++) {
        uint32_t ntouched = 0;
        mfirst[b] = (uint32_t)nm;
        for (uint32_t u = g->off[b]; u < g->off[b + 1]; u++)
            for (uint32_t e = g->pstart[u]; e < g->pstart[u + 1]; e++) {
                uint32_t w = g->pred[e].node, a = g->rank[w];
                if (a == b)
                    continue;
                uint32_t pos = graph_pos(g, w);
                if (!seen[a]) {
                    seen[a] = 1;
                    touched[ntouched++] = a;
                    last[a] = pos;
                }
                last[a] = pos > last[a] ? pos : last[a];
                thr[nm++] = last[a];
            }
        for (uint32_t t = 0; t < ntouched; t++)
            seen[touched[t]] = 0;
    }
    mfirst[P] = (uint32_t)nm;
    free(last);
    free(touched);
    free(seen);
    /* run: done[r] ops run; a blocked rank waits on one rank (a list per rank waited on) */
    uint32_t *done = xcalloc(P ? P : 1, sizeof *done), *mcur = xmalloc((P ? P : 1) * sizeof *mcur);
    uint32_t *whead = xmalloc((P ? P : 1) * sizeof *whead), *wnext = xmalloc((P ? P : 1) * sizeof *wnext);
    uint32_t *ready = xmalloc((P ? P : 1) * sizeof *ready), nready = 0;
    for (uint32_t r = 0; r < P; r++) {
        mcur[r] = mfirst[r];
        whead[r] = NONE;
        ready[nready++] = (uint32_t)P - 1 - r;
    }
    while (nready) {
        uint32_t r = ready[--nready], n = p->stages[r].n, from = done[r];
        while (done[r] < n) {
            uint32_t u = g->off[r] + done[r], k = mcur[r], blocker = NONE;
            for (uint32_t e = g->pstart[u]; e < g->pstart[u + 1]; e++) {
                uint32_t a = g->rank[g->pred[e].node];
                if (a == r)
                    continue;
                if (done[a] <= thr[k++]) {
                    blocker = a;
                    break;
                }
            }
            if (blocker != NONE) {
                wnext[r] = whead[blocker];
                whead[blocker] = r;
                break;
            }
            mcur[r] = k;
            done[r]++;
        }
        if (done[r] == from)
            continue; /* no progress: who waits on r still waits */
        for (uint32_t w = whead[r]; w != NONE; w = wnext[w]) /* r ran: they may go on */
            ready[nready++] = w;
        whead[r] = NONE;
    }
    bool hung = false;
    for (uint32_t r = 0; r < P; r++)
        hung |= done[r] < p->stages[r].n;
    free(thr);
    free(mfirst);
    free(done);
    free(mcur);
    free(whead);
    free(wnext);
    free(ready);
    return hung;
}

/* ---- the check ------------------------------------------------------------------ */

#define CHAIN_SHOWN 16

int check_comm(Diag *d, const Pipeline *p, const Graph *g)
{
    if (!comm_hangs(g))
        return 0; /* the plan is needed only to explain a hang */
    CommPlan *cp = plan_graph(g);
    CommHang h = comm_simulate(p, cp, COMM_EAGER);
    if (!h.hung) {
        comm_plan_free(cp);
        return 0;
    }
    /* Every blocked rank waits in a recv whose send is never reached: follow the
     * senders until a rank repeats, and walk that chain. We need each rank's blocked
     * item, so simulate again keeping them (cheap, and only on failure). */
    size_t P = cp->P;
    Sim s;
    comm_run(&s, p, cp, COMM_EAGER);
    uint32_t *visit = xcalloc(P, sizeof *visit), r = h.rank, step = 1;
    while (!visit[r]) {
        visit[r] = step++;
        r = cp->items[s.it[r]].peer;
    }
    /* r is on the cycle of blocked ranks; walk it once from there */
    uint32_t r0 = r;
    StrBuf m = {0};
    char a[48], b[48];
    uint32_t *ranks = xmalloc((P + 1) * sizeof *ranks), nr = 0;
    do {
        ranks[nr++] = r;
        r = cp->items[s.it[r]].peer;
    } while (r != r0);
    for (uint32_t k = 0; k < nr && k < CHAIN_SHOWN; k++) {
        const CommItem *c = &cp->items[s.it[ranks[k]]];
        const CommMsg *msg = &cp->msgs[c->msg];
        const Op *cons = &p->stages[msg->dst].ops[msg->dst_pos];
        const Op *prod = &p->stages[msg->src].ops[msg->src_pos];
        sb_printf(&m, "%sstage %u blocks before %s in the recv of %s from stage %u", k ? ", while " : "",
                  msg->dst, op_name(a, sizeof a, (OpKind)cons->kind, cons->mb, cons->chunk),
                  op_name(b, sizeof b, (OpKind)prod->kind, prod->mb, prod->chunk), msg->src);
    }
    if (nr > CHAIN_SHOWN)
        sb_printf(&m, ", ... (%u stages)", nr);
    sb_printf(&m, ": every send of the cycle comes after a recv that waits for it (the "
                  "stages' list orders, all streams together, wait for each other)");
    const CommMsg *m0 = &cp->msgs[cp->items[s.it[ranks[0]]].msg];
    diag_error(d, p->stages[m0->dst].ops[m0->dst_pos].loc, DIAG_DEADLOCK, "%s", m.s);
    for (uint32_t k = 0; k < nr && k < CHAIN_SHOWN; k++) {
        const CommMsg *msg = &cp->msgs[cp->items[s.it[ranks[k]]].msg];
        const Op *cons = &p->stages[msg->dst].ops[msg->dst_pos];
        const Op *prod = &p->stages[msg->src].ops[msg->src_pos];
        diag_note(d, cons->loc, "stage %u waits here, before %s, for %s of stage %u", msg->dst,
                  op_name(b, sizeof b, (OpKind)cons->kind, cons->mb, cons->chunk),
                  op_name(a, sizeof a, (OpKind)prod->kind, prod->mb, prod->chunk), msg->src);
        uint32_t sp = msg->src_pos;
        for (uint32_t t = cp->start[msg->src]; t < cp->start[msg->src + 1]; t++)
            if (cp->items[t].kind == COMM_SEND && cp->items[t].msg == cp->items[s.it[ranks[k]]].msg)
                sp = cp->items[t].pos;
        const Op *at = &p->stages[msg->src].ops[sp];
        diag_note(d, prod->loc, "stage %u would send %s after %s, which it never reaches",
                  msg->src, op_name(a, sizeof a, (OpKind)prod->kind, prod->mb, prod->chunk),
                  op_name(b, sizeof b, (OpKind)at->kind, at->mb, at->chunk));
        if (msg->sync)
            diag_note(d, msg->loc, "the message comes from this dep line");
    }
    sb_free(&m);
    free(ranks);
    free(visit);
    comm_run_free(&s);
    comm_plan_free(cp);
    return 1;
}
