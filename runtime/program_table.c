/* program_table.c - packed programs (docs/runtime.md "Packed op tables"): unpacking the
 * ranks' tables into ops, steps and the message table at start-up (pr_program_unpack),
 * and the loop that runs a rank's steps (pr_run_steps). The number code is prtable.h's;
 * compiler/generation/emit_table.c writes the tables. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "prtable.h"

int pr_run_steps(PrRank *r)
{
    const PrRankDesc *d = r->d;
    const PrMsg *msgs = r->run->prog->msgs;
    for (uint32_t k = 0; k < d->nsteps; k++) {
        const PrStep *st = &d->steps[k];
        if (st->what == PR_STEP_OP)
            PR_CHECK(pr_op(r, st->idx));
        else if (st->what == PR_STEP_RECV)
            PR_CHECK(pr_recv(r, msgs[st->idx].src, st->idx));
        else
            PR_CHECK(pr_send(r, msgs[st->idx].dst, st->idx));
    }
    return 0;
}

static int64_t rd_int(PrTableReader *rd)
{
    return pr_unzigzag(pr_table_num(rd, UINT64_MAX));
}

/* The next index into a dictionary of n rows. */
static uint32_t rd_idx(PrTableReader *rd, uint32_t n, const char *what)
{
    if (!n && !rd->bad)
        pr_table_fail(rd, "an op refers to the empty %s dictionary", what);
    return (uint32_t)pr_table_num(rd, n ? n - 1 : 0);
}

static double rd_double(PrTableReader *rd)
{
    return pr_bits_double(pr_table_num(rd, UINT64_MAX));
}

/* The dictionaries of one rank's table: rows that ops refer to by index. */
typedef struct Dicts {
    uint32_t V, ncost, nplace, nmem;
    int32_t *vstage;       /* [V] */
    double *cost;          /* [ncost * 3]: cost_ms, cost_bytes, link_ms */
    int64_t *place;        /* [nplace * 2 * PR_PIECES]: at[PR_MLP][..], at[PR_SYNTHETIC][..] */
    int64_t *mem;          /* [nmem * 6]: held, mem_alloc, mem_free, each [PR_MLP],
                              [PR_SYNTHETIC] */
} Dicts;

static void dicts_free(Dicts *t)
{
    free(t->vstage);
    free(t->cost);
    free(t->place);
    free(t->mem);
}

/* A count of rows of `width` numbers that a table of `left` characters can hold. */
static uint64_t rd_count(PrTableReader *rd, uint64_t width)
{
    return pr_table_num(rd, strlen(rd->s) / (width ? width : 1));
}

/* Reads the header of a table: the version, the chunks' virtual stages and the
 * dictionaries. Returns 0 or -1 (rd->why says why; *t is freed either way on -1). */
static int read_dicts(PrTableReader *rd, const PrProgram *g, Dicts *t)
{
    memset(t, 0, sizeof *t);
    if (pr_table_num(rd, UINT32_MAX) != PR_TABLE_VERSION) {
        pr_table_fail(rd, "table format %d expected", PR_TABLE_VERSION);
        return -1;
    }
    t->V = (uint32_t)pr_table_num(rd, (uint64_t)g->V);
    if (!rd->bad && t->V != (uint32_t)g->V)
        pr_table_fail(rd, "%u chunks, the program has %d", t->V, g->V);
    t->vstage = calloc(t->V + 1, sizeof *t->vstage);
    for (uint32_t c = 0; c < t->V && t->vstage; c++)
        t->vstage[c] = (int32_t)pr_table_num(rd, (uint64_t)g->P * (uint64_t)g->V - 1);
    t->ncost = (uint32_t)rd_count(rd, 3);
    t->cost = malloc((t->ncost + 1) * 3 * sizeof *t->cost);
    for (size_t k = 0; t->cost && k < (size_t)t->ncost * 3; k++)
        t->cost[k] = rd_double(rd);
    t->nplace = (uint32_t)rd_count(rd, 2 * PR_PIECES);
    t->place = malloc((t->nplace + 1) * 2 * PR_PIECES * sizeof *t->place);
    for (size_t k = 0; t->place && k < (size_t)t->nplace * 2 * PR_PIECES; k++)
        t->place[k] = rd_int(rd);
    t->nmem = (uint32_t)rd_count(rd, 6);
    t->mem = malloc((t->nmem + 1) * 6 * sizeof *t->mem);
    for (size_t k = 0; t->mem && k < (size_t)t->nmem * 6; k++)
        t->mem[k] = rd_int(rd);
    if (!rd->bad && (!t->vstage || !t->cost || !t->place || !t->mem))
        snprintf(rd->why, rd->why_n, "out of memory unpacking the op table of rank %d",
                 rd->rank), rd->bad = true;
    if (rd->bad) {
        dicts_free(t);
        return -1;
    }
    return 0;
}

/* Fills op o from its dictionary rows. */
static void op_from_dicts(PrOp *o, const Dicts *t, uint32_t cost, uint32_t place, uint32_t mem)
{
    o->cost_ms = t->cost[3 * cost];
    o->cost_bytes = t->cost[3 * cost + 1];
    o->link_ms = t->cost[3 * cost + 2];
    const int64_t *at = &t->place[(size_t)place * 2 * PR_PIECES];
    for (int w = 0; w < PR_NWORKLOADS; w++)
        for (int k = 0; k < PR_PIECES; k++)
            o->at[w][k] = at[w * PR_PIECES + k];
    const int64_t *m = &t->mem[(size_t)mem * 6];
    for (int w = 0; w < PR_NWORKLOADS; w++) {
        o->held[w] = m[w];
        o->mem_alloc[w] = m[2 + w];
        o->mem_free[w] = m[4 + w];
    }
}

/* What unpacking the whole program builds besides the copy of the program. */
typedef struct Unpacked {
    PrProgram prog;        /* first: pr_program_free frees the block from &prog */
    PrRankDesc *ranks;
    PrMsg *msgs;
    uint8_t *seen;         /* [nmsgs] bit 1: sent, bit 2: received */
} Unpacked;

/* Reads one message id of rank s's steps around op i of ops (a difference to the
 * previous one) and records its end on this rank: the consumer (a receive: op i) or the
 * producer (a send: op i or one before it). */
static uint32_t read_msg(PrTableReader *rd, Unpacked *u, uint32_t *prev, int32_t s, const PrOp *ops,
                         uint32_t i, bool send)
{
    int64_t m = (int64_t)*prev + rd_int(rd);
    if (rd->bad)
        return 0;
    if (m < 0 || m >= (int64_t)u->prog.nmsgs || (u->seen[m] & (send ? 1 : 2))) {
        pr_table_fail(rd, "message %lld is out of range or listed twice", (long long)m);
        return 0;
    }
    PrMsg *g = &u->msgs[m];
    u->seen[m] |= send ? 1 : 2;
    const PrOp *o = &ops[i - (send ? pr_table_num(rd, i) : 0)];
    if (send) {
        g->src = s;
        g->from_kind = o->kind;
        g->from_v = o->vstage;
        g->from_mb = o->mb;
        g->payload = (uint8_t)pr_table_num(rd, PR_PAY_GRAD);
    } else {
        g->dst = s;
        g->to_kind = o->kind;
        g->to_v = o->vstage;
        g->to_mb = o->mb;
    }
    *prev = (uint32_t)m;
    return (uint32_t)m;
}

/* Unpacks rank s's table into its ops and steps. Returns 0 or -1. */
static int unpack_rank(Unpacked *u, int32_t s, char *why, size_t why_n)
{
    const PrProgram *g = &u->prog;
    PrRankDesc *d = &u->ranks[s];
    PrTableReader rd = {d->table, d->table, "op table", s, why, why_n, false};
    Dicts t;
    if (read_dicts(&rd, g, &t) != 0)
        return -1;
    uint32_t n = d->nops;
    PrOp *ops = calloc(n + 1, sizeof *ops);
    size_t cap = (size_t)n * 2 + 1, ns = 0;
    PrStep *steps = malloc(cap * sizeof *steps);
    int32_t mb = 0, line = 0;
    uint32_t nso = 0, prev = 0;
    if (!ops || !steps)
        snprintf(why, why_n, "out of memory unpacking the op table of rank %d", s), rd.bad = true;
    for (uint32_t i = 0; i < n && !rd.bad; i++) {
        PrOp *o = &ops[i];
        o->kind = (uint8_t)pr_table_num(&rd, PR_NKINDS - 1);
        o->chunk = (uint8_t)pr_table_num(&rd, t.V - 1);
        unsigned flags = (unsigned)pr_table_num(&rd, 2 * PR_PACK_WAIT_SO - 1);
        o->flags = (uint16_t)(flags & ~(unsigned)PR_PACK_WAIT_SO);
        o->nso_before = flags & PR_PACK_WAIT_SO ? nso : 0;
        nso += o->kind == PR_SO;
        o->vstage = t.vstage[o->chunk];
        mb += (int32_t)rd_int(&rd);
        line += (int32_t)rd_int(&rd);
        o->mb = mb;
        o->line = line;
        if (!rd.bad && (mb < 0 || mb >= g->M))
            pr_table_fail(&rd, "micro-batch %d of op %u is outside 0..%d", mb, i, g->M - 1);
        uint32_t cost = rd_idx(&rd, t.ncost, "cost");
        uint32_t place = rd_idx(&rd, t.nplace, "place");
        uint32_t mem = rd_idx(&rd, t.nmem, "memory");
        if (rd.bad)
            break;
        op_from_dicts(o, &t, cost, place, mem);
        for (int dir = 0; dir < 3 && !rd.bad; dir++) {
            uint64_t k = dir == 1 ? 1 : pr_table_num(&rd, g->nmsgs);
            if (ns + k + 2 > cap) {
                while (ns + k + 2 > cap)
                    cap *= 2;
                PrStep *grown = realloc(steps, cap * sizeof *steps);
                if (!grown) {
                    snprintf(why, why_n, "out of memory unpacking the op table of rank %d", s);
                    rd.bad = true;
                    break;
                }
                steps = grown;
            }
            for (uint64_t j = 0; j < k && !rd.bad; j++)
                steps[ns++] = dir == 1 ? (PrStep){PR_STEP_OP, i}
                                       : (PrStep){dir ? PR_STEP_SEND : PR_STEP_RECV,
                                                  read_msg(&rd, u, &prev, s, ops, i, dir == 2)};
        }
    }
    if (!rd.bad && *rd.s)
        pr_table_fail(&rd, "characters after the last op");
    dicts_free(&t);
    if (rd.bad) {
        free(ops);
        free(steps);
        return -1;
    }
    d->ops = ops;
    d->steps = steps;
    d->nsteps = (uint32_t)ns;
    d->run = pr_run_steps;
    return 0;
}

void pr_program_free(PrProgram *prog)
{
    if (!prog)
        return;
    Unpacked *u = (Unpacked *)prog;
    for (int32_t s = 0; u->ranks && s < prog->P; s++)
        if (u->ranks[s].table) {
            free((void *)u->ranks[s].ops);
            free((void *)u->ranks[s].steps);
        }
    free(u->ranks);
    free(u->msgs);
    free(u->seen);
    free(u);
}

int pr_program_unpack(const PrProgram *prog, PrProgram **out, char *why, size_t why_n)
{
    *out = NULL;
    Unpacked *u = calloc(1, sizeof *u);
    if (!u) {
        snprintf(why, why_n, "out of memory unpacking the program");
        return -1;
    }
    u->prog = *prog;
    bool packed = false;
    for (int32_t s = 0; prog->ranks && s < prog->P; s++)
        packed |= prog->ranks[s].table != NULL;
    if (!packed) {
        *out = &u->prog;
        return 0;
    }
    if (prog->P < 1 || prog->V < 1 || prog->M < 1 || prog->abi != PIPERUN_ABI) {
        snprintf(why, why_n, "the program was generated for another libpiperun ABI");
        free(u);
        return -1;
    }
    u->ranks = calloc((size_t)prog->P, sizeof *u->ranks);
    u->msgs = calloc((size_t)prog->nmsgs + 1, sizeof *u->msgs);
    u->seen = calloc((size_t)prog->nmsgs + 1, 1);
    u->prog.ranks = u->ranks;
    u->prog.msgs = u->msgs;
    int rc = 0;
    if (!u->ranks || !u->msgs || !u->seen) {
        snprintf(why, why_n, "out of memory unpacking the program");
        rc = -1;
    }
    for (int32_t s = 0; rc == 0 && s < prog->P; s++) {
        u->ranks[s] = prog->ranks[s];
        if (!u->ranks[s].table) {
            snprintf(why, why_n, "rank %d has no op table", s);
            rc = -1;
        } else if (unpack_rank(u, s, why, why_n) != 0) {
            u->ranks[s].table = NULL; /* nothing of it to free */
            rc = -1;
        }
    }
    for (uint32_t m = 0; rc == 0 && m < prog->nmsgs; m++)
        if (u->seen[m] != 3) {
            snprintf(why, why_n, "message %u of the op tables is %s", m,
                     u->seen[m] & 1 ? "never received" : "never sent");
            rc = -1;
        }
    if (rc != 0) {
        for (int32_t s = 0; u->ranks && s < prog->P; s++)
            if (!u->ranks[s].ops)
                u->ranks[s].table = NULL;
        pr_program_free(&u->prog);
        return -1;
    }
    *out = &u->prog;
    return 0;
}
