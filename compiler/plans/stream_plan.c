/* stream_plan.c - the CUDA backend's stream plan; see stream_plan.h, plan/streams.h and
 * docs/cuda.md "The stream plan". One walk over each rank's list keeps, per stream, the last op that
 * frees arena memory, per (v,m) and kind the op listed so far, per (v,m) its last op,
 * and per virtual stage its last B/W and last chunk-wide op; each op's waits are read
 * off those and the op kind table (opsem.h). */
#include "stream_plan.h"

#include "opsem.h"

#include <stdlib.h>
#include <string.h>

const char *stream_name(unsigned s)
{
    static const char *const n[STREAM_N] = {"compute", "d2h", "h2d"};
    return s < STREAM_N ? n[s] : "?";
}

/* Adds op dep to the waits w of an op on stream si when it is another stream's. The
 * tables it comes from hold only ops listed before the op (they are updated after its
 * waits are read). */
static void add_wait(uint32_t *w, uint32_t *n, uint32_t dep, uint8_t si, const uint8_t *stream)
{
    if (dep == SP_NONE || stream[dep] == si)
        return;
    for (uint32_t k = 0; k < *n; k++)
        if (w[k] == dep)
            return;
    w[(*n)++] = dep;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

#define MAX_WAITS (OPSEM_MAX_WAITS + STREAM_N + 2)

/* The waits of one rank (rules 1-4 of plan/streams.h). Returns 0 or -1 (memory). */
static int plan_rank(const StreamIn *in, uint32_t r, StreamRank *k)
{
    const SpOp *ops = in->ops[r];
    uint32_t n = in->nops[r];
    size_t PV = in->PV > 0 ? (size_t)in->PV : 1, M = in->M > 0 ? (size_t)in->M : 1;
    /* the virtual stages this rank's ops act on, numbered 0..nv-1 (V of them when the
     * placement is right), so the tables are V*M, not P*V*M */
    int32_t *local = malloc(PV * sizeof *local);
    size_t nv = 0;
    if (local) {
        memset(local, 0xff, PV * sizeof *local);
        for (uint32_t i = 0; i < n; i++)
            if (ops[i].vstage >= 0 && (size_t)ops[i].vstage < PV && local[ops[i].vstage] < 0)
                local[ops[i].vstage] = (int32_t)nv++;
    }
    size_t nvm = (nv ? nv : 1) * M, nvs = nv ? nv : 1;
    uint32_t *at = malloc(nvm * OP_NKINDS * sizeof *at);   /* op of (v,m,kind) so far */
    uint32_t *last_vm = malloc(nvm * sizeof *last_vm);
    uint32_t *last_bw = malloc(nvs * sizeof *last_bw), *last_cw = malloc(nvs * sizeof *last_cw);
    k->nops = n;
    k->stream = malloc((n ? n : 1) * sizeof *k->stream);
    k->wstart = malloc(((size_t)n + 1) * sizeof *k->wstart);
    k->waits = malloc(((size_t)n * MAX_WAITS + 1) * sizeof *k->waits);
    int rc = -1;
    if (!local || !at || !last_vm || !last_bw || !last_cw || !k->stream || !k->wstart ||
        !k->waits)
        goto out;
    memset(at, 0xff, nvm * OP_NKINDS * sizeof *at);
    memset(last_vm, 0xff, nvm * sizeof *last_vm);
    memset(last_bw, 0xff, nvs * sizeof *last_bw);
    memset(last_cw, 0xff, nvs * sizeof *last_cw);
    uint32_t last_free[STREAM_N] = {SP_NONE, SP_NONE, SP_NONE}, nw = 0;
    for (uint32_t i = 0; i < n; i++) {
        const SpOp *o = &ops[i];
        bool known = o->kind < OP_NKINDS && o->vstage >= 0 && o->vstage < in->PV && o->mb >= 0 &&
                     o->mb < in->M;
        const OpSem *sem = o->kind < OP_NKINDS ? &op_sem[o->kind] : NULL;
        uint8_t s = sem ? (uint8_t)sem->stream : STREAM_COMPUTE;
        k->stream[i] = s;
        k->wstart[i] = nw;
        if (!known)
            continue;
        uint32_t *w = k->waits + nw, m = 0;
        size_t v = (size_t)local[o->vstage], vmk = v * M + (size_t)o->mb;
        /* 1. the table's data dependencies that live on this rank */
        for (unsigned d = 0; d < sem->nwait; d++) {
            const OpWaitRule *rule = &sem->wait[d];
            int64_t v2 = (int64_t)o->vstage + rule->dv;
            if (v2 < 0 || v2 >= in->PV || local[v2] < 0)
                continue;   /* on another rank: a message */
            size_t m2 = OP_IS_CHUNKWIDE(rule->kind) ? 0 : (size_t)o->mb;
            add_wait(w, &m, at[((size_t)local[v2] * M + m2) * OP_NKINDS + rule->kind], s,
                     k->stream);
        }
        if (sem->waits_last_bw)
            add_wait(w, &m, last_bw[v], s, k->stream);
        /* 2. memory order (docs/spec.md "Time") */
        if (sem->mem == MEM_ALLOC)
            for (unsigned t = 0; t < STREAM_N; t++)
                add_wait(w, &m, last_free[t], s, k->stream);
        /* 3. the bytes: the op before it on the same region or model states */
        if (OP_IS_CHUNKWIDE(o->kind)) {
            add_wait(w, &m, last_cw[v], s, k->stream);
            last_cw[v] = i;
        } else {
            add_wait(w, &m, last_vm[vmk], s, k->stream);
            last_vm[vmk] = i;
        }
        if (at[vmk * OP_NKINDS + o->kind] == SP_NONE)
            at[vmk * OP_NKINDS + o->kind] = i;
        if (op_backward(o->kind))
            last_bw[v] = i;
        if (sem->mem == MEM_FREE)
            last_free[s] = i;
        /* on one stream, the latest wait implies the earlier ones */
        uint32_t keep = 0;
        for (uint32_t a = 0; a < m; a++) {
            bool later = false;
            for (uint32_t c = 0; c < m; c++)
                later |= c != a && k->stream[w[c]] == k->stream[w[a]] && w[c] > w[a];
            if (!later)
                w[keep++] = w[a];
        }
        qsort(w, keep, sizeof *w, cmp_u32);
        nw += keep;
    }
    k->wstart[n] = nw;
    rc = 0;
out:
    free(local);
    free(at);
    free(last_vm);
    free(last_bw);
    free(last_cw);
    return rc;
}

/* The receives each op waits for (rule 4): a counting sort of the messages by consumer. */
static int plan_recvs(const StreamIn *in, StreamPlan *sp)
{
    for (uint32_t r = 0; r < in->P; r++) {
        StreamRank *k = &sp->rank[r];
        k->rstart = calloc((size_t)k->nops + 2, sizeof *k->rstart);
        if (!k->rstart)
            return -1;
    }
    for (uint32_t j = 0; j < in->nmsgs; j++) {
        const SpMsg *m = &in->msgs[j];
        if (m->dst < in->P && m->dst_pos < sp->rank[m->dst].nops)
            sp->rank[m->dst].rstart[m->dst_pos + 2]++;
    }
    for (uint32_t r = 0; r < in->P; r++) {
        StreamRank *k = &sp->rank[r];
        for (uint32_t i = 0; i < k->nops; i++)
            k->rstart[i + 2] += k->rstart[i + 1];
        k->recvs = malloc(((size_t)k->rstart[k->nops + 1] + 1) * sizeof *k->recvs);
        if (!k->recvs)
            return -1;
    }
    for (uint32_t j = 0; j < in->nmsgs; j++) {
        const SpMsg *m = &in->msgs[j];
        if (m->dst < in->P && m->dst_pos < sp->rank[m->dst].nops) {
            StreamRank *k = &sp->rank[m->dst];
            k->recvs[k->rstart[m->dst_pos + 1]++] = j;
        }
    }
    return 0;
}

StreamPlan *stream_plan(const StreamIn *in)
{
    StreamPlan *sp = calloc(1, sizeof *sp);
    if (!sp)
        return NULL;
    sp->P = in->P;
    sp->nmsgs = in->nmsgs;
    sp->rank = calloc(in->P ? in->P : 1, sizeof *sp->rank);
    sp->send_after = malloc(((size_t)in->nmsgs + 1) * sizeof *sp->send_after);
    if (!sp->rank || !sp->send_after)
        goto fail;
    for (uint32_t r = 0; r < in->P; r++)
        if (plan_rank(in, r, &sp->rank[r]) != 0)
            goto fail;
    if (plan_recvs(in, sp) != 0)
        goto fail;
    for (uint32_t j = 0; j < in->nmsgs; j++)
        sp->send_after[j] = in->msgs[j].src_pos;
    return sp;
fail:
    stream_plan_free(sp);
    return NULL;
}
