/* print.c - the canonical explicit form; see print.h. */
#include "print.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "units.h"

/* Shortest %.Ne digits that read back to x: "d.ddde+XX". 17 significant digits
 * (%.16e) always read back (IEEE 754 binary64), so that is the last resort. */
static void shortest_exp(char *tmp, size_t n, double x)
{
    for (int prec = 0; prec < 16; prec++) {
        snprintf(tmp, n, "%.*e", prec, x);
        if (strtod(tmp, NULL) == x)
            return;
    }
    snprintf(tmp, n, "%.16e", x);
}

char *print_decimal(char *buf, size_t n, double x)
{
    if (isnan(x)) {
        snprintf(buf, n, "nan");
        return buf;
    }
    if (isinf(x)) {
        snprintf(buf, n, x < 0 ? "-inf" : "inf");
        return buf;
    }
    if (x == 0) {
        snprintf(buf, n, "0");
        return buf;
    }
    char tmp[64];
    shortest_exp(tmp, sizeof tmp, x);

    /* Split "-d.ddde+XX" into sign, digits and the decimal exponent of the first digit. */
    const char *s = tmp;
    bool neg = *s == '-';
    if (neg)
        s++;
    char digits[32];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9' && nd < (int)sizeof digits - 1)
            digits[nd++] = *s;
    int e = *s == 'e' ? atoi(s + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;

    /* value = 0.d0d1d2... * 10^(e+1); emit as a plain decimal. */
    char out[PRINT_NUM_MAX];
    size_t k = 0;
    if (neg)
        out[k++] = '-';
    if (e < 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = 0; i < -e - 1 && k < sizeof out - 40; i++)
            out[k++] = '0';
        for (int i = 0; i < nd; i++)
            out[k++] = digits[i];
    } else {
        for (int i = 0; i <= e && k < sizeof out - 40; i++)
            out[k++] = i < nd ? digits[i] : '0';
        if (nd > e + 1) {
            out[k++] = '.';
            for (int i = e + 1; i < nd; i++)
                out[k++] = digits[i];
        }
    }
    out[k] = 0;
    snprintf(buf, n, "%s", out);
    return buf;
}

char *print_time(char *buf, size_t n, double ms)
{
    char num[PRINT_NUM_MAX];
    snprintf(buf, n, "%sms", print_decimal(num, sizeof num, ms));
    return buf;
}

/* The size unit (of units.h) giving the smallest whole quotient of x, or "B" (with
 * *q = x). Two units never give the same quotient of a non-zero x. */
static const char *size_unit(double x, double *q)
{
    const char *best = "B";
    *q = x;
    if (!isfinite(x) || x == 0 || x != floor(x))
        return best;
    for (size_t i = 0; i < unit_count; i++) {
        if (unit_table[i].cls != UNIT_SIZE)
            continue;
        double u = unit_table[i].factor, r = x / u;
        if (r == floor(r) && r * u == x && fabs(r) < fabs(*q)) {
            *q = r;
            best = unit_table[i].name;
        }
    }
    return best;
}

/* x in its size unit (size_unit) followed by `per` ("" or "/s") into buf[n]. */
static char *print_size_per(char *buf, size_t n, double x, const char *per)
{
    double q;
    const char *u = size_unit(x, &q);
    char num[PRINT_NUM_MAX];
    snprintf(buf, n, "%s%s%s", print_decimal(num, sizeof num, q), u, per);
    return buf;
}

char *print_size(char *buf, size_t n, double bytes)
{
    return print_size_per(buf, n, bytes, "");
}

char *print_bw(char *buf, size_t n, double bytes_per_s)
{
    return print_size_per(buf, n, bytes_per_s, "/s");
}

char *print_cost_value(char *buf, size_t n, CostField f, double v)
{
    switch (cost_field_unit[f]) {
    case UNIT_TIME:
        return print_time(buf, n, v);
    case UNIT_SIZE:
        return print_size(buf, n, v);
    case UNIT_BW:
        return print_bw(buf, n, v);
    case UNIT_FRACTION:
    case UNIT_NONE:
        break;
    }
    return print_decimal(buf, n, v);
}

/* Whether field f of block b is printed: set, and readable back (an unlimited host_bw
 * cannot be written in the language and equals the default, so it is left out). */
static bool cost_printed(const CostBlock *b, int f)
{
    return (b->set & (1u << f)) && isfinite(b->v[f]);
}

/* " f 1ms b 2ms" for the printed fields of b. */
static void print_cost_fields_inline(StrBuf *out, const CostBlock *b)
{
    char v[PRINT_NUM_MAX];
    for (int f = 0; f < COST_NFIELDS; f++)
        if (cost_printed(b, f))
            sb_printf(out, " %s %s", cost_field_name[f],
                      print_cost_value(v, sizeof v, (CostField)f, b->v[f]));
}

static bool block_has_fields(const CostBlock *b)
{
    for (int f = 0; f < COST_NFIELDS; f++)
        if (cost_printed(b, f))
            return true;
    return false;
}

static void print_costs(StrBuf *out, const Pipeline *p)
{
    char v[PRINT_NUM_MAX];
    if (block_has_fields(&p->costs)) {
        sb_puts(out, "  costs {\n");
        for (int f = 0; f < COST_NFIELDS; f++)
            if (cost_printed(&p->costs, f))
                sb_printf(out, "    %s %s\n", cost_field_name[f],
                          print_cost_value(v, sizeof v, (CostField)f,
                                           p->costs.v[f]));
        sb_puts(out, "  }\n");
    }
    for (int32_t s = 0; p->stage_costs && s < p->P; s++)
        if (block_has_fields(&p->stage_costs[s])) {
            sb_printf(out, "  costs stage %d {", (int)s);
            print_cost_fields_inline(out, &p->stage_costs[s]);
            sb_puts(out, " }\n");
        }
    int64_t nv = (int64_t)p->P * p->V;
    for (int64_t vs = 0; p->vstage_costs && vs < nv; vs++)
        if (block_has_fields(&p->vstage_costs[vs])) {
            sb_printf(out, "  costs vstage %lld {", (long long)vs);
            print_cost_fields_inline(out, &p->vstage_costs[vs]);
            sb_puts(out, " }\n");
        }
}

/* Appends " KINDmb[.chunk]" without going through printf: print runs over millions of
 * ops. */
static void put_op(StrBuf *out, const Op *op)
{
    char buf[32], *e = buf + sizeof buf, *q = e;
    uint32_t c = op->chunk, m = op->mb;
    if (c) {
        do
            *--q = (char)('0' + c % 10);
        while (c /= 10);
        *--q = '.';
    }
    do
        *--q = (char)('0' + m % 10);
    while (m /= 10);
    const char *k = op->kind < OP_NKINDS ? op_kind_name[op->kind] : "?";
    size_t kl = strlen(k);
    q -= kl;
    memcpy(q, k, kl);
    *--q = ' ';
    size_t len = (size_t)(e - q);
    VEC_RESERVE(out->s, out->len + len + 1, out->cap);
    memcpy(out->s + out->len, q, len);
    out->len += len;
    out->s[out->len] = 0;
}

/* A stage that has runtime actions: ops and actions, PRINT_OPS_PER_LINE items a line. */
static void print_stage_actions(StrBuf *out, const Pipeline *p, int32_t s, uint32_t k)
{
    const StageOps *st = &p->stages[s];
    uint32_t n = st->n, end = k;
    while (end < p->nactions && p->actions[end].rank == s)
        end++;
    bool wrap = n + (end - k) > PRINT_OPS_PER_LINE;
    uint32_t items = 0;
    for (uint32_t i = 0; i <= n; i++) {
        for (; k < end && p->actions[k].pos <= i; k++, items++) {
            char b[48];
            if (wrap && items % PRINT_OPS_PER_LINE == 0)
                sb_puts(out, "\n   ");
            sb_printf(out, " %s", action_name(b, sizeof b, &p->actions[k]));
        }
        if (i == n)
            break;
        if (wrap && items % PRINT_OPS_PER_LINE == 0)
            sb_puts(out, "\n   ");
        put_op(out, &st->ops[i]);
        items++;
    }
    sb_puts(out, wrap ? "\n  }\n" : " }\n");
}

static void print_stage(StrBuf *out, const Pipeline *p, int32_t s)
{
    const StageOps *st = &p->stages[s];
    sb_printf(out, "  stage %d {", (int)s);
    uint32_t k = 0;
    while (k < p->nactions && p->actions[k].rank < s)
        k++;
    if (k < p->nactions && p->actions[k].rank == s) {
        print_stage_actions(out, p, s, k);
        return;
    }
    if (st->n <= PRINT_OPS_PER_LINE) {
        for (uint32_t i = 0; i < st->n; i++)
            put_op(out, &st->ops[i]);
        sb_puts(out, " }\n");
        return;
    }
    for (uint32_t i = 0; i < st->n; i++) {
        if (i % PRINT_OPS_PER_LINE == 0)
            sb_puts(out, "\n   ");
        put_op(out, &st->ops[i]);
    }
    sb_puts(out, "\n  }\n");
}

static void put_ref(StrBuf *out, const OpRef *r)
{
    char name[48];
    sb_printf(out, "%u:%s", (unsigned)r->stage, op_name(name, sizeof name, (OpKind)r->kind, r->mb, r->chunk));
}

void print_dp_settings(StrBuf *out, const Pipeline *p)
{
    if (p->data_parallel != 1)
        sb_printf(out, "  data_parallel %d\n", (int)p->data_parallel);
    if (p->zero != 0)
        sb_printf(out, "  zero %d\n", (int)p->zero);
    if (p->grad_dtype != GRAD_BF16)
        sb_printf(out, "  grad_dtype %s\n", grad_dtype_name[p->grad_dtype]);
    if (p->expert_parallel != 1)
        sb_printf(out, "  expert_parallel %d\n", (int)p->expert_parallel);
}

void print_pipeline(StrBuf *out, const Pipeline *p)
{
    char v[PRINT_NUM_MAX];
    sb_printf(out, "pipeline %s {\n", p->name ? p->name : "unnamed");
    sb_printf(out, "  stages %d\n", (int)p->P);
    sb_printf(out, "  microbatches %d\n", (int)p->M);
    sb_printf(out, "  chunks %d%s\n", (int)p->V, p->placement == PLACE_VSHAPE ? " vshape" : "");
    if (p->has_memory && isfinite(p->memory))
        sb_printf(out, "  memory %s\n", print_size(v, sizeof v, p->memory));
    print_dp_settings(out, p);

    size_t before = out->len;
    sb_putc(out, '\n');
    print_costs(out, p);
    if (out->len == before + 1) { /* no costs at all: drop the separator */
        out->len = before;
        out->s[before] = 0;
    }

    if (p->P > 0)
        sb_putc(out, '\n');
    for (int32_t s = 0; s < p->P; s++)
        print_stage(out, p, s);

    if (p->ndeps)
        sb_putc(out, '\n');
    for (uint32_t i = 0; i < p->ndeps; i++) {
        sb_puts(out, "  dep ");
        put_ref(out, &p->deps[i].from);
        sb_puts(out, " -> ");
        put_ref(out, &p->deps[i].to);
        sb_putc(out, '\n');
    }
    sb_puts(out, "}\n");
}
