/* stream_check.c - the stream plan from the IR, streams.json, and the verifier; see
 * stream_check.h and docs/cuda.md "The verifier".
 *
 * The verifier knows nothing of the plan's rules. It replays each rank's list, reads
 * from the arena plan which bytes every op touches (the pieces of its (v,m) region:
 * F and SI write them, R reads the checkpoint and writes what it rebuilds, B reads and
 * writes them, W and SO read them), adds the memory outside the arena that ops share
 * (the host copy of each (v,m) for SO/SI, each virtual stage's gradients, parameters
 * and host weights for B/W/OG/LW), and checks every conflicting pair of accesses
 * against happens-before: op j ends before op i starts when j is at or before the
 * latest op of j's stream that i's stream has waited for, directly or through other
 * waits and same-stream order (one small vector per op). */
#include "stream_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "region.h"
#include "util.h"

void stream_in_build(StreamInBuf *b, const Pipeline *p, const CommPlan *cp)
{
    memset(b, 0, sizeof *b);
    uint32_t P = (uint32_t)p->P;
    b->ops = xcalloc(P, sizeof *b->ops);
    b->nops = xcalloc(P, sizeof *b->nops);
    for (uint32_t s = 0; s < P; s++) {
        const StageOps *so = &p->stages[s];
        b->nops[s] = so->n;
        b->ops[s] = xmalloc(so->n * sizeof **b->ops);
        for (uint32_t i = 0; i < so->n; i++) {
            const Op *o = &so->ops[i];
            b->ops[s][i] = (SpOp){o->kind, ir_vstage(p, (int32_t)s, o->chunk), (int32_t)o->mb};
        }
    }
    uint32_t nm = cp ? cp->nmsgs : 0;
    b->msgs = xmalloc((nm ? nm : 1) * sizeof *b->msgs);
    for (uint32_t j = 0; j < nm; j++) {
        const CommMsg *m = &cp->msgs[j];
        b->msgs[j] = (SpMsg){m->src, m->src_pos, m->dst, m->dst_pos};
    }
    b->in = (StreamIn){P, p->P * p->V, p->M, (const SpOp *const *)b->ops, b->nops, b->msgs, nm};
}

void stream_in_free(StreamInBuf *b)
{
    for (uint32_t s = 0; b->ops && s < b->in.P; s++)
        free(b->ops[s]);
    free(b->ops);
    free(b->nops);
    free(b->msgs);
    memset(b, 0, sizeof *b);
}

void stream_plan_json(StrBuf *out, const Pipeline *p, const StreamPlan *sp)
{
    sb_puts(out, "{\"ranks\": [");
    for (uint32_t r = 0; r < sp->P; r++) {
        const StreamRank *k = &sp->rank[r];
        const StageOps *so = &p->stages[r];
        sb_printf(out, "%s\n  {\"rank\": %u, \"ops\": [", r ? "," : "", r);
        for (uint32_t i = 0; i < k->nops && i < so->n; i++) {
            const Op *o = &so->ops[i];
            char nm[48];
            op_name(nm, sizeof nm, (OpKind)o->kind, o->mb, o->chunk);
            sb_printf(out, "%s\n    {\"i\": %u, \"op\": \"%s\", \"stream\": \"%s\", \"waits\": [",
                      i ? "," : "", i, nm, stream_name(k->stream[i]));
            for (uint32_t w = k->wstart[i]; w < k->wstart[i + 1]; w++)
                sb_printf(out, "%s%u", w > k->wstart[i] ? ", " : "", k->waits[w]);
            sb_puts(out, "]}");
        }
        sb_puts(out, "\n  ]}");
    }
    sb_puts(out, "\n]}\n");
}

/* ---- the verifier ------------------------------------------------------------------- */

/* Address spaces: the arena, and per (v,m) or per v the memory outside it. */
enum { SPACE_ARENA, SPACE_HOST_ACT, SPACE_GRAD, SPACE_PARAM, SPACE_HOST_W };

typedef struct Access {
    uint32_t op;
    uint8_t write, space;
    uint64_t key;        /* (v,m) or v for the spaces outside the arena */
    int64_t lo, hi;      /* bytes [lo, hi) */
} Access;

typedef struct Piece {
    int64_t off, len;
} Piece;

typedef struct Verify {
    const StreamRank *k;
    int64_t (*fr)[STREAM_N];   /* [nops] latest op per stream that ends before op i starts */
    Access *acc;
    size_t nacc, cap;
    int nbad;
    char *why;
    size_t why_n;
    const Pipeline *p;
    uint32_t rank;
} Verify;

static bool hb(const Verify *v, uint32_t j, uint32_t i)
{
    return (int64_t)j <= v->fr[i][v->k->stream[j]];
}

static void opnm(const Verify *v, uint32_t rank, uint32_t i, char *buf, size_t n)
{
    const StageOps *so = &v->p->stages[rank];
    if (i < so->n)
        op_name(buf, n, (OpKind)so->ops[i].kind, so->ops[i].mb, so->ops[i].chunk);
    else
        snprintf(buf, n, "op #%u", i);
}

/* Records a violation on rank v->rank; the first one is described in v->why. */
static void bad(Verify *v, const char *msg)
{
    if (v->nbad++ == 0 && v->why_n)
        snprintf(v->why, v->why_n, "rank %u: %s", v->rank, msg);
}

/* Op i touches [lo, hi) of (space, key): check it against every earlier access that
 * still matters. An earlier access that op i covers and that ends before i starts is
 * dropped (a read by a later read or write, a write by a later write): whatever must
 * come after it must come after op i too, and that is checked against op i. This keeps
 * the records about as many as the live regions, so the check is near linear. */
static void touch(Verify *v, uint32_t i, int write, int space, uint64_t key, int64_t lo,
                  int64_t hi)
{
    if (hi <= lo)
        return;
    for (size_t a = 0; a < v->nacc;) {
        const Access *e = &v->acc[a];
        if (e->op == i || e->space != space || e->key != key || e->hi <= lo || hi <= e->lo) {
            a++;
            continue;
        }
        bool before = hb(v, e->op, i);
        if ((write || e->write) && !before) {
            if (v->nbad++ == 0 && v->why_n) {
                char x[48], y[48];
                opnm(v, v->rank, i, x, sizeof x);
                opnm(v, v->rank, e->op, y, sizeof y);
                snprintf(v->why, v->why_n, "rank %u: %s (#%u) may %s %s bytes [%lld, %lld) that %s "
                         "(#%u) %s before %s ends: no wait orders them", v->rank, x, i,
                         write ? "overwrite" : "read", space == SPACE_ARENA ? "arena" : "model-state",
                         (long long)(lo > e->lo ? lo : e->lo), (long long)(hi < e->hi ? hi : e->hi),
                         y, e->op, e->write ? "writes" : "reads", y);
            }
            return;
        }
        if (before && lo <= e->lo && e->hi <= hi && (write || !e->write))
            v->acc[a] = v->acc[--v->nacc];   /* covered: op i stands for it */
        else
            a++;
    }
    Access n = {i, (uint8_t)write, (uint8_t)space, key, lo, hi};
    VEC_PUSH(v->acc, v->nacc, v->cap, n);
}

static void touch_pieces(Verify *v, uint32_t i, int write, const Piece *pc, int np)
{
    for (int k = 0; k < np; k++)
        touch(v, i, write, SPACE_ARENA, 0, pc[k].off, pc[k].off + pc[k].len);
}

/* Keeps the first `keep` bytes of the region's pieces (in region order). */
static int trim(Piece *pc, int np, int64_t keep)
{
    int n = 0;
    for (int k = 0; k < np && keep > 0; k++, n++) {
        if (pc[k].len > keep)
            pc[k].len = keep;
        keep -= pc[k].len;
    }
    return n;
}

/* Numbers the virtual stages rank r's list touches 0..*nv-1 (region tables are nv*M).
 * Returns local[PV]: the number of each, -1 for the others. */
static int32_t *number_vstages(const StreamIn *in, uint32_t r, uint32_t n, size_t PV,
                               size_t *nv)
{
    int32_t *local = xmalloc(PV * sizeof *local);
    memset(local, 0xff, PV * sizeof *local);
    *nv = 0;
    for (uint32_t i = 0; i < n; i++) {
        int32_t vs = in->ops[r][i].vstage;
        if (vs >= 0 && (size_t)vs < PV && local[vs] < 0)
            local[vs] = (int32_t)(*nv)++;
    }
    return local;
}

/* Happens-before of op i: v->fr[i][t] = the latest op of stream t that ends before i
 * starts, through same-stream order (last[]: the latest op of each stream so far) and
 * i's waits, each of which must be listed before i. */
static void order_op(Verify *v, const StreamRank *k, uint32_t i, int64_t last[STREAM_N])
{
    uint8_t s = k->stream[i];
    for (int t = 0; t < STREAM_N; t++)
        v->fr[i][t] = -1;
    if (last[s] >= 0) {
        memcpy(v->fr[i], v->fr[last[s]], sizeof v->fr[i]);
        v->fr[i][s] = last[s];
    }
    last[s] = i;
    for (uint32_t w = k->wstart[i]; w < k->wstart[i + 1]; w++) {
        uint32_t d = k->waits[w];
        if (d >= i) {
            char x[48], y[48], m[256];
            opnm(v, v->rank, i, x, sizeof x);
            opnm(v, v->rank, d, y, sizeof y);
            snprintf(m, sizeof m, "%s (#%u) waits for %s (#%u), which is not listed before it "
                     "(its event is not recorded yet)", x, i, y, d);
            bad(v, m);
            continue;
        }
        for (int t = 0; t < STREAM_N; t++)
            if (v->fr[d][t] > v->fr[i][t])
                v->fr[i][t] = v->fr[d][t];
        if ((int64_t)d > v->fr[i][k->stream[d]])
            v->fr[i][k->stream[d]] = d;
    }
}

/* Where the arena plan puts op i's (v,m) region: ArenaRank's pieces and held bytes of
 * op i, and the region's piece boundaries (NULL at and from, held 0: not planned). */
typedef struct OpPlace {
    const int64_t *at, *from;
    int64_t held;
} OpPlace;

/* The placed pieces of op i's region that lie below region byte upto, in region order,
 * into pc; returns their number. Only for a planned op (held > 0: at and from set). */
static int placed(OpPlace a, int64_t upto, Piece *pc)
{
    int n = 0;
    for (int k = 0; k < ARENA_PIECES; k++) {
        int64_t lo, len = pr_region_piece_held(a.from, upto, k, &lo);
        if (a.at[k] >= 0 && len > 0)
            pc[n++] = (Piece){a.at[k], len};
    }
    return n;
}

/* The accesses of op i (kind o->kind) to its (v,m) region, whose current pieces are
 * pc[0..*npc) in region order, and to the memory outside the arena (module comment),
 * checked against happens-before; updates the pieces to where the region is after i. */
static void touch_op(Verify *v, uint32_t i, const SpOp *o, uint64_t vmk, Piece *pc, int *npc,
                     OpPlace a)
{
    uint64_t vs = (uint64_t)o->vstage;
    switch (o->kind) {
    case OP_F:
        touch(v, i, 0, SPACE_PARAM, vs, 0, 1);
        *npc = a.held > 0 ? placed(a, a.held, pc) : 0;
        touch_pieces(v, i, 1, pc, *npc);
        break;
    case OP_R:
    case OP_RO: /* an R run at its list position */
        touch(v, i, 0, SPACE_PARAM, vs, 0, 1);
        if (a.held > 0) { /* reads the checkpoint, rebuilds the rest */
            touch_pieces(v, i, 0, pc, *npc);
            int64_t ext = 0;
            for (int k = 0; k < *npc; k++)
                ext += pc[k].len;
            *npc = placed(a, a.from[ARENA_PIECES], pc);
            int64_t lo = 0;
            for (int k = 0; k < *npc; lo += pc[k].len, k++)
                if (lo >= ext)
                    touch_pieces(v, i, 1, &pc[k], 1);
        }
        break;
    case OP_SO:
        if (a.held > 0) {
            touch_pieces(v, i, 0, pc, *npc);
            touch(v, i, 1, SPACE_HOST_ACT, vmk, 0, a.held);
            *npc = 0;
        }
        break;
    case OP_SI:
        if (a.held > 0) {
            touch(v, i, 0, SPACE_HOST_ACT, vmk, 0, a.held);
            *npc = placed(a, a.held, pc);
            touch_pieces(v, i, 1, pc, *npc);
        }
        break;
    case OP_B:
        touch(v, i, 0, SPACE_PARAM, vs, 0, 1);
        touch(v, i, 1, SPACE_GRAD, vs, 0, 1);
        touch_pieces(v, i, 1, pc, *npc);
        *npc = trim(pc, *npc, a.held);
        break;
    case OP_W:
        touch(v, i, 0, SPACE_PARAM, vs, 0, 1);
        touch(v, i, 1, SPACE_GRAD, vs, 0, 1);
        touch_pieces(v, i, 0, pc, *npc);
        *npc = 0;
        break;
    case OP_OG:
        touch(v, i, 0, SPACE_GRAD, vs, 0, 1);
        touch(v, i, 1, SPACE_HOST_W, vs, 0, 1);
        break;
    case OP_LW:
        touch(v, i, 0, SPACE_HOST_W, vs, 0, 1);
        touch(v, i, 1, SPACE_PARAM, vs, 0, 1);
        break;
    default:
        break;
    }
}

/* Verifies rank r's plan: replays its list in order, ordering each op (order_op) and
 * checking its accesses (touch_op) against the arena plan ar (may be NULL). */
static int check_rank(Verify *v, const StreamIn *in, const ArenaRank *ar,
                      const int64_t (*from)[ARENA_PIECES + 1], uint32_t r)
{
    const StreamRank *k = v->k;
    uint32_t n = k->nops;
    size_t PV = (size_t)(in->PV > 0 ? in->PV : 1), M = (size_t)(in->M > 0 ? in->M : 1);
    size_t nv;
    int32_t *local = number_vstages(in, r, n, PV, &nv);
    size_t nvm = (nv ? nv : 1) * M;
    Piece(*pcs)[ARENA_PIECES] = xcalloc(nvm, sizeof *pcs);
    int *npc = xcalloc(nvm, sizeof *npc);
    int64_t last[STREAM_N] = {-1, -1, -1};
    for (uint32_t i = 0; i < n; i++) {
        order_op(v, k, i, last);
        const SpOp *o = &in->ops[r][i];
        if (o->kind >= OP_NKINDS || o->vstage < 0 || o->vstage >= in->PV || o->mb < 0 ||
            o->mb >= in->M)
            continue;
        size_t vmk = (size_t)local[o->vstage] * M + (size_t)o->mb;
        bool planned = ar && i < ar->nops;
        OpPlace a = {planned ? ar->at[i] : NULL, planned ? from[o->vstage] : NULL,
                     planned ? ar->held[i] : 0};
        touch_op(v, i, o, vmk, pcs[vmk], &npc[vmk], a);
    }
    free(local);
    free(pcs);
    free(npc);
    return 0;
}

int stream_plan_check(const Pipeline *p, const StreamIn *in, const StreamPlan *sp,
                      const ArenaPlan *ap, char *why, size_t why_n)
{
    if (why_n)
        why[0] = 0;
    Verify v = {0};
    v.why = why;
    v.why_n = why_n;
    v.p = p;
    int64_t(**fr)[STREAM_N] = xcalloc(sp->P, sizeof *fr);
    for (uint32_t r = 0; r < sp->P && r < in->P; r++) {
        v.k = &sp->rank[r];
        v.rank = r;
        v.nacc = 0;
        fr[r] = xmalloc(((size_t)v.k->nops + 1) * sizeof *fr[r]);
        v.fr = fr[r];
        check_rank(&v, in, ap && r < (uint32_t)ap->P ? &ap->rank[r] : NULL,
                   ap ? (const int64_t(*)[ARENA_PIECES + 1])ap->from : NULL, r);
    }
    /* messages: produced before sent, received before consumed */
    uint32_t *cons = xmalloc(((size_t)sp->nmsgs + 1) * sizeof *cons); /* op that waits for j */
    memset(cons, 0xff, ((size_t)sp->nmsgs + 1) * sizeof *cons);
    for (uint32_t r = 0; r < sp->P; r++)
        for (uint32_t c = 0; c < sp->rank[r].nops; c++)
            for (uint32_t x = sp->rank[r].rstart[c]; x < sp->rank[r].rstart[c + 1]; x++)
                if (sp->rank[r].recvs[x] < sp->nmsgs)
                    cons[sp->rank[r].recvs[x]] = c;
    for (uint32_t j = 0; j < in->nmsgs && j < sp->nmsgs; j++) {
        const SpMsg *m = &in->msgs[j];
        if (m->src >= sp->P || m->dst >= sp->P)
            continue;
        uint32_t sa = sp->send_after[j];
        v.rank = m->src;
        v.k = &sp->rank[m->src];
        v.fr = fr[m->src];
        char x[48], y[48], msg[200];
        if (sa >= v.k->nops || (sa != m->src_pos && !hb(&v, m->src_pos, sa))) {
            opnm(&v, m->src, m->src_pos, x, sizeof x);
            opnm(&v, m->src, sa, y, sizeof y);
            snprintf(msg, sizeof msg, "the send of message %u (from %s, #%u) waits for %s (#%u), "
                     "which may end before the producer", j, x, m->src_pos, y, sa);
            bad(&v, msg);
        }
        v.rank = m->dst;
        v.k = &sp->rank[m->dst];
        v.fr = fr[m->dst];
        uint32_t c = cons[j];
        bool got = c < v.k->nops && m->dst_pos < v.k->nops &&
                   (c == m->dst_pos || (c < m->dst_pos && hb(&v, c, m->dst_pos)));
        if (!got) {
            opnm(&v, m->dst, m->dst_pos, x, sizeof x);
            opnm(&v, m->src, m->src_pos, y, sizeof y);
            snprintf(msg, sizeof msg, "%s (#%u) may start before message %u (%s of rank %u) "
                     "arrives: no receive is waited for", x, m->dst_pos, j, y, m->src);
            bad(&v, msg);
        }
    }
    free(cons);
    for (uint32_t r = 0; r < sp->P; r++)
        free(fr[r]);
    free(fr);
    free(v.acc);
    return v.nbad;
}

int stream_plan_verify(const Pipeline *p, const StreamIn *in, const StreamPlan *sp,
                       const ArenaPlan *syn, const ArenaPlan *mlp, char *why, size_t why_n)
{
    int nbad = stream_plan_check(p, in, sp, syn, why, why_n);
    if (!nbad && mlp)
        nbad = stream_plan_check(p, in, sp, mlp, why, why_n);
    return nbad;
}
