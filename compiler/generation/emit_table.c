/* emit_table.c - writes packed op tables (emit_table.h; the format is docs/runtime.md
 * "Packed op tables", the number code runtime/prtable.h, the reader
 * runtime/program_table.c). */
#include "emit_table.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "prtable.h"

/* Distinct rows of `width` 64-bit words, in first-seen order, found by hash. */
typedef struct Dict {
    uint32_t width;
    uint64_t *rows;       /* [n * width] */
    uint32_t n;
    size_t cap;           /* rows allocated */
    uint32_t *slot;       /* [nslot] row + 1, 0 = empty */
    uint32_t nslot;       /* a power of two, > 2n */
} Dict;

static uint64_t row_hash(const uint64_t *row, uint32_t w)
{
    uint64_t h = 1469598103934665603ull;
    for (uint32_t k = 0; k < w; k++) {
        h ^= row[k];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static void dict_rehash(Dict *d, uint32_t nslot)
{
    free(d->slot);
    d->nslot = nslot;
    d->slot = xcalloc(nslot, sizeof *d->slot);
    for (uint32_t r = 0; r < d->n; r++) {
        uint64_t h = row_hash(&d->rows[(size_t)r * d->width], d->width);
        uint32_t i = (uint32_t)h & (nslot - 1);
        while (d->slot[i])
            i = (i + 1) & (nslot - 1);
        d->slot[i] = r + 1;
    }
}

/* The index of row in d, added when new. */
static uint32_t dict_add(Dict *d, const uint64_t *row)
{
    if (2 * ((size_t)d->n + 1) >= d->nslot)
        dict_rehash(d, d->nslot ? 2 * d->nslot : 64);
    uint32_t i = (uint32_t)row_hash(row, d->width) & (d->nslot - 1);
    size_t bytes = d->width * sizeof *row;
    for (; d->slot[i]; i = (i + 1) & (d->nslot - 1))
        if (!memcmp(&d->rows[(size_t)(d->slot[i] - 1) * d->width], row, bytes))
            return d->slot[i] - 1;
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 16;
        d->rows = xrealloc(d->rows, d->cap * bytes);
    }
    memcpy(&d->rows[(size_t)d->n * d->width], row, bytes);
    d->slot[i] = ++d->n;
    return d->n - 1;
}

static void dict_free(Dict *d)
{
    free(d->rows);
    free(d->slot);
}

/* The table's characters, before they are cut into lines. */
typedef struct Chars {
    char *s;
    size_t len, cap;
} Chars;

static void put_num(Chars *c, uint64_t v)
{
    if (c->len + PR_NUM_MAX_CHARS > c->cap) {
        c->cap = c->cap ? 2 * c->cap : 4096;
        c->s = xrealloc(c->s, c->cap);
    }
    c->len += (size_t)pr_num_put(c->s + c->len, v);
}

static void put_int(Chars *c, int64_t v)
{
    put_num(c, pr_zigzag(v));
}

static void put_dict(Chars *c, const Dict *d, bool signed_words)
{
    put_num(c, d->n);
    for (size_t k = 0; k < (size_t)d->n * d->width; k++)
        put_num(c, signed_words ? pr_zigzag((int64_t)d->rows[k]) : d->rows[k]);
}

/* The dictionary rows of op o: costs (as bit patterns), places, memory amounts. */
static void op_rows(const PrOp *o, uint64_t cost[3], uint64_t place[2 * PR_PIECES],
                    uint64_t mem[6])
{
    cost[0] = pr_double_bits(o->cost_ms);
    cost[1] = pr_double_bits(o->cost_bytes);
    cost[2] = pr_double_bits(o->link_ms);
    for (int w = 0; w < PR_NWORKLOADS; w++) {
        for (int k = 0; k < PR_PIECES; k++)
            place[w * PR_PIECES + k] = (uint64_t)o->at[w][k];
        mem[w] = (uint64_t)o->held[w];
        mem[2 + w] = (uint64_t)o->mem_alloc[w];
        mem[4 + w] = (uint64_t)o->mem_free[w];
    }
}

/* Writes the messages of steps [*k, ...) around op `op` that are `what` (their count,
 * then each as a difference to *prev; sends also with how many ops before `op` their
 * producer is, and their payload); moves *k past them. */
static void put_msgs(Chars *c, const PackRank *r, uint32_t op, uint32_t *k, uint8_t what,
                     uint32_t *prev)
{
    uint32_t n = 0;
    while (*k + n < r->nsteps && r->steps[*k + n].what == what)
        n++;
    put_num(c, n);
    for (uint32_t j = 0; j < n; j++) {
        uint32_t m = r->steps[*k + j].idx;
        put_int(c, (int64_t)m - (int64_t)*prev);
        if (what == PR_STEP_SEND) {
            put_num(c, op - r->from_op[m]);
            put_num(c, r->payload[m]);
        }
        *prev = m;
    }
    *k += n;
}

/* The whole table of r as characters (the layout of docs/runtime.md). */
static void pack(Chars *c, const PackRank *r, PackStats *st)
{
    Dict dc = {.width = 3}, dp = {.width = 2 * PR_PIECES}, dm = {.width = 6};
    uint32_t *ix = xmalloc(((size_t)r->nops * 3 + 1) * sizeof *ix);
    for (uint32_t i = 0; i < r->nops; i++) {
        uint64_t cost[3], place[2 * PR_PIECES], mem[6];
        op_rows(&r->ops[i], cost, place, mem);
        ix[3 * i] = dict_add(&dc, cost);
        ix[3 * i + 1] = dict_add(&dp, place);
        ix[3 * i + 2] = dict_add(&dm, mem);
    }
    put_num(c, PR_TABLE_VERSION);
    put_num(c, (uint64_t)r->V);
    for (int32_t k = 0; k < r->V; k++)
        put_num(c, (uint64_t)r->vstage[k]);
    put_dict(c, &dc, false);
    put_dict(c, &dp, true);
    put_dict(c, &dm, true);
    int64_t mb = 0, line = 0;
    uint32_t prev = 0, k = 0;
    for (uint32_t i = 0; i < r->nops; i++) {
        const PrOp *o = &r->ops[i];
        put_num(c, o->kind);
        put_num(c, o->chunk);
        put_num(c, o->flags | (o->nso_before ? PR_PACK_WAIT_SO : 0));
        put_int(c, o->mb - mb);
        put_int(c, o->line - line);
        mb = o->mb;
        line = o->line;
        for (int j = 0; j < 3; j++)
            put_num(c, ix[3 * i + j]);
        put_msgs(c, r, i, &k, PR_STEP_RECV, &prev);
        k++; /* the op's own step */
        put_msgs(c, r, i, &k, PR_STEP_SEND, &prev);
    }
    if (st)
        *st = (PackStats){dc.n, dp.n, dm.n, c->len};
    free(ix);
    dict_free(&dc);
    dict_free(&dp);
    dict_free(&dm);
}

/* Cuts c into the lines of a C string literal, appended to b, and frees it. */
static void put_lines(StrBuf *b, Chars *c)
{
    enum { WIDTH = 92 };
    char line[WIDTH + 8];
    for (size_t at = 0; at < c->len; at += WIDTH) {
        size_t n = c->len - at < WIDTH ? c->len - at : WIDTH;
        memcpy(line, "    \"", 5);
        memcpy(line + 5, c->s + at, n);
        memcpy(line + 5 + n, "\"\n", 3);
        sb_puts(b, line);
    }
    free(c->s);
}

void emit_pack_rank(StrBuf *b, const PackRank *r, PackStats *st)
{
    Chars c = {0};
    pack(&c, r, st);
    put_lines(b, &c);
}

/* The table of docs/cuda.md "The stream plan's table": the version, the op count, then
 * per op its stream, its waits (each as the op's index minus the wait's), the messages
 * it receives and those whose send waits for it (each id as a difference to the
 * previous id of the table). The sends are bucketed by op (a counting sort). */
void emit_pack_streams(StrBuf *b, const PackStreams *r, size_t *nchars)
{
    const StreamRank *k = r->k;
    uint32_t n = k->nops;
    uint32_t *start = xcalloc((size_t)n + 2, sizeof *start);
    uint32_t *sends = xmalloc(((size_t)r->nsends + 1) * sizeof *sends);
    for (uint32_t j = 0; j < r->nsends; j++)
        if (r->send_after[r->sends[j]] < n)
            start[r->send_after[r->sends[j]] + 2]++;
    for (uint32_t i = 0; i < n; i++)
        start[i + 2] += start[i + 1];
    for (uint32_t j = 0; j < r->nsends; j++)
        if (r->send_after[r->sends[j]] < n)
            sends[start[r->send_after[r->sends[j]] + 1]++] = r->sends[j];
    Chars c = {0};
    put_num(&c, PR_STREAMS_VERSION);
    put_num(&c, n);
    uint32_t prev = 0;
    for (uint32_t i = 0; i < n; i++) {
        put_num(&c, k->stream[i]);
        put_num(&c, k->wstart[i + 1] - k->wstart[i]);
        for (uint32_t w = k->wstart[i]; w < k->wstart[i + 1]; w++)
            put_num(&c, i - k->waits[w]);
        put_num(&c, k->rstart[i + 1] - k->rstart[i]);
        for (uint32_t x = k->rstart[i]; x < k->rstart[i + 1]; x++) {
            put_int(&c, (int64_t)k->recvs[x] - (int64_t)prev);
            prev = k->recvs[x];
        }
        put_num(&c, start[i + 1] - start[i]);
        for (uint32_t x = start[i]; x < start[i + 1]; x++) {
            put_int(&c, (int64_t)sends[x] - (int64_t)prev);
            prev = sends[x];
        }
    }
    if (nchars)
        *nchars = c.len;
    put_lines(b, &c);
    free(start);
    free(sends);
}
