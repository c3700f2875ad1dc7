/* opindex.c - the op index (see opindex.h): dense tables, one per op kind present, when
 * P*V*M is small enough, else a sorted array searched in O(log ops). */
#include "opindex.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

struct IdxEnt {
    uint64_t key;   /* (kind * PV + v) * M + mb */
    uint32_t pos;
    uint32_t ord;   /* build order, so the first occurrence wins */
};

static int cmp_ent(const void *a, const void *b)
{
    const IdxEnt *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->ord < y->ord ? -1 : x->ord > y->ord;
}

OpIndex *opindex_build(const Pipeline *p)
{
    OpIndex *x = xcalloc(1, sizeof *x);
    x->P = p->P;
    x->V = p->V;
    x->PV = p->P * p->V;
    x->vshape = p->placement == PLACE_VSHAPE;
    x->M = p->M > 0 ? (uint32_t)p->M : 0;
    uint64_t nops = pipeline_nops(p);
    uint64_t cells = (uint64_t)OP_NKINDS * (uint64_t)(x->PV > 0 ? x->PV : 0) * x->M;
    if (cells <= 8 * nops + (1u << 20)) {
        x->dense = true;
        uint64_t per = (uint64_t)(x->PV > 0 ? x->PV : 0) * x->M;
        for (int32_t s = 0; s < p->P; s++) {
            const StageOps *st = &p->stages[s];
            for (uint32_t i = 0; i < st->n; i++) {
                const Op *op = &st->ops[i];
                if (!ir_op_in_range(p, op))
                    continue;
                uint32_t *t = x->kt[op->kind];
                if (!t) {
                    t = x->kt[op->kind] = xmalloc(per * sizeof *t);
                    memset(t, 0xff, per * sizeof *t);
                }
                uint64_t v = (uint64_t)ir_vstage(p, s, op->chunk);
                uint32_t *cell = &t[v * x->M + op->mb];
                if (*cell == NONE) {
                    *cell = i;
                    x->count++;
                }
            }
        }
        return x;
    }
    IdxEnt *e = xmalloc((nops ? nops : 1) * sizeof *e);
    uint64_t n = 0;
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *st = &p->stages[s];
        for (uint32_t i = 0; i < st->n; i++) {
            const Op *op = &st->ops[i];
            if (!ir_op_in_range(p, op))
                continue;
            uint64_t v = (uint64_t)ir_vstage(p, s, op->chunk);
            e[n] = (IdxEnt){((uint64_t)op->kind * x->PV + v) * x->M + op->mb, i, (uint32_t)n};
            n++;
        }
    }
    qsort(e, n, sizeof *e, cmp_ent);
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++)
        if (k == 0 || e[k - 1].key != e[i].key)
            e[k++] = e[i];
    x->ents = e;
    x->nents = x->count = k;
    return x;
}

/* First sparse entry with key >= key. */
static uint64_t lower_bound(const OpIndex *x, uint64_t key)
{
    uint64_t lo = 0, hi = x->nents;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (x->ents[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool opindex_find_sparse(const OpIndex *x, OpKind kind, int32_t v, uint32_t mb,
                         int32_t *rank, uint32_t *pos)
{
    uint64_t key = ((uint64_t)kind * x->PV + (uint64_t)v) * x->M + mb;
    uint64_t i = lower_bound(x, key);
    if (i == x->nents || x->ents[i].key != key)
        return false;
    if (pos)
        *pos = x->ents[i].pos;
    if (rank)
        *rank = opindex_owner(x, v);
    return true;
}

/* The dense form of opindex_next (present) and opindex_next_absent (!present): the
 * first m >= from whose (kind, v, m) is present (or absent), or NONE. kind and v are in
 * range; for !present, from < M. */
static uint32_t dense_next(const OpIndex *x, OpKind kind, int32_t v, uint32_t from,
                           bool present)
{
    const uint32_t *t = x->kt[kind];
    if (!t)
        return present ? NONE : from;
    t += (uint64_t)v * x->M;
    for (uint32_t m = from; m < x->M; m++)
        if ((t[m] != NONE) == present)
            return m;
    return NONE;
}

uint32_t opindex_next(const OpIndex *x, OpKind kind, int32_t v, uint32_t from)
{
    if ((unsigned)kind >= OP_NKINDS || v < 0 || v >= x->PV)
        return NONE;
    if (x->dense)
        return dense_next(x, kind, v, from, true);
    uint64_t base = ((uint64_t)kind * x->PV + (uint64_t)v) * x->M;
    if (from >= x->M)
        return NONE;
    uint64_t i = lower_bound(x, base + from);
    if (i < x->nents && x->ents[i].key < base + x->M)
        return (uint32_t)(x->ents[i].key - base);
    return NONE;
}

uint32_t opindex_next_absent(const OpIndex *x, OpKind kind, int32_t v, uint32_t from)
{
    if (from >= x->M)
        return NONE;
    if ((unsigned)kind >= OP_NKINDS || v < 0 || v >= x->PV)
        return from;
    if (x->dense)
        return dense_next(x, kind, v, from, false);
    uint64_t base = ((uint64_t)kind * x->PV + (uint64_t)v) * x->M;
    uint32_t m = from;
    for (uint64_t i = lower_bound(x, base + from); m < x->M; i++, m++)
        if (i >= x->nents || x->ents[i].key != base + m)
            return m;
    return NONE;
}

uint64_t opindex_count(const OpIndex *x)
{
    return x->count;
}

void opindex_free(OpIndex *x)
{
    if (!x)
        return;
    for (int k = 0; k < OP_NKINDS; k++)
        free(x->kt[k]);
    free(x->ents);
    free(x);
}

