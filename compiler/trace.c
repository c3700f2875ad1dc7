/* trace.c - `pipec sim --trace T.json`: the Chrome trace event format (JSON object
 * form), as read by Perfetto and chrome://tracing.
 *
 *   - one process per stage (pid = stage, "process_name" metadata "stage S"), one
 *     thread per stream (tid 0 compute, 1 d2h: SO and OG, 2 h2d: SI and LW,
 *     "thread_name" metadata);
 *   - one complete ("X") event per op: name "F3" / "B3.1", cat = its kind, ts and dur
 *     in microseconds, args {mb, chunk, vstage};
 *   - one flow ("s" just inside the producer's end, "f" with "bp": "e" at the
 *     consumer's start) per cross-rank dependency: F(v-1,m) -> F(v,m),
 *     B(v+1,m) -> B(v,m), and `dep` edges between ranks;
 *   - a counter ("C") track "memory" per stage: live bytes over time (the simulator's
 *     replay of DESIGN.md "Memory"), named in GiB.
 *
 * Runs that measure real timelines can reuse this writer with their own SimResult. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static const char *const stream_name[STREAM_N] = {"compute", "d2h (swap out)", "h2d (swap in)"};
/* The copy streams' names when the schedule has OG/LW (model-state offload). */
static const char *const stream_name_offload[STREAM_N] = {
    "compute", "d2h (swap out, grad offload + host step)", "h2d (swap in, weight load)"};

/* Microseconds with up to 3 decimals (nanoseconds). */
static char *us(char *buf, size_t n, double ms)
{
    double x = round(ms * 1e6) / 1e3;
    snprintf(buf, n, "%.3f", x == 0 ? 0 : x);
    /* Trim trailing zeros: "12.500" -> "12.5", "3.000" -> "3". */
    char *dot = strchr(buf, '.');
    if (dot) {
        char *e = buf + strlen(buf);
        while (e > dot + 1 && e[-1] == '0')
            *--e = 0;
        if (e == dot + 1)
            *dot = 0;
    }
    return buf;
}

typedef struct CounterCtx {
    StrBuf *out;
    int32_t stage;
    bool have;
    double t, bytes;   /* the pending sample (the last change at time t wins) */
} CounterCtx;

static void counter_flush(CounterCtx *c)
{
    if (!c->have)
        return;
    char a[64], b[64];
    sb_printf(c->out, ",\n{\"name\": \"memory\", \"ph\": \"C\", \"pid\": %d, \"ts\": %s, "
                      "\"args\": {\"GiB\": %s}}",
              c->stage, us(a, sizeof a, c->t), sim_fmt_num(b, sizeof b, c->bytes / 1073741824.0));
    c->have = false;
}

static void counter_sample(void *ctx, double t, double bytes)
{
    CounterCtx *c = ctx;
    if (c->have && t != c->t)
        counter_flush(c);
    c->have = true;
    c->t = t;
    c->bytes = bytes;
}

/* Position of (kind, v, m) in its owner's list, via a per-call dense table. */
typedef struct Where {
    int32_t rank;
    uint32_t pos;
} Where;

void sim_write_trace(StrBuf *out, const Pipeline *p, const SimResult *r)
{
    char a[64], b[64];
    sb_puts(out, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"pipeline\": ");
    sim_json_string(out, p->name);
    sb_printf(out, ", \"makespan_ms\": %s, \"bubble_ratio\": %s}, \"traceEvents\": [",
              sim_fmt_num(a, sizeof a, r->makespan_ms), sim_fmt_num(b, sizeof b, r->bubble_ratio));
    bool first = true, offload = false;
    for (int32_t s = 0; s < p->P && !offload; s++)
        for (uint32_t i = 0; i < p->stages[s].n && !offload; i++)
            offload = OP_IS_CHUNKWIDE(p->stages[s].ops[i].kind);
    const char *const *sname = offload ? stream_name_offload : stream_name;
#define SEP() (sb_puts(out, first ? "\n" : ",\n"), first = false)
    for (int32_t s = 0; s < p->P; s++) {
        SEP();
        sb_printf(out, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
                       "\"args\": {\"name\": \"stage %d\"}},\n"
                       "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                       "\"args\": {\"sort_index\": %d}}",
                  s, s, s, s);
        for (int t = 0; t < STREAM_N; t++)
            sb_printf(out, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, "
                           "\"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                      s, t, sname[t]);
    }
    char name[48];
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *so = &p->stages[s];
        for (uint32_t i = 0; i < so->n; i++) {
            const Op *o = &so->ops[i];
            if (o->kind >= OP_NKINDS)
                continue;
            SEP();
            double st = r->start[s][i], en = r->end[s][i];
            sb_printf(out, "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, "
                           "\"tid\": %d, \"ts\": %s, \"dur\": %s, \"args\": {\"mb\": %u, "
                           "\"chunk\": %u, \"vstage\": %d}}",
                      op_name(name, sizeof name, (OpKind)o->kind, o->mb, o->chunk),
                      op_kind_name[o->kind], s, (int)op_stream((OpKind)o->kind),
                      us(a, sizeof a, st), us(b, sizeof b, en - st), o->mb, o->chunk,
                      o->chunk < (uint32_t)p->V ? ir_vstage(p, s, o->chunk) : -1);
        }
    }

    /* Cross-rank dependencies. A dense table maps (kind, v, m) to a rank and position
     * (the first occurrence), for the F and B chains and the `dep` edges. */
    uint64_t nvm = (uint64_t)p->P * (uint64_t)(p->V > 0 ? p->V : 0) * (uint64_t)(p->M > 0 ? p->M : 0);
    uint64_t nops = pipeline_nops(p), flow = 0;
    if (nvm > 0 && nvm <= nops) {
        Where *w = xmalloc(OP_NKINDS * nvm * sizeof *w);
        for (uint64_t i = 0; i < OP_NKINDS * nvm; i++)
            w[i].rank = -1;
        for (int32_t s = 0; s < p->P; s++)
            for (uint32_t i = 0; i < p->stages[s].n; i++) {
                const Op *o = &p->stages[s].ops[i];
                if (o->kind >= OP_NKINDS || o->chunk >= (uint32_t)p->V || o->mb >= (uint32_t)p->M)
                    continue;
                uint64_t k = o->kind * nvm +
                             (uint64_t)ir_vstage(p, s, o->chunk) * (uint64_t)p->M + o->mb;
                if (w[k].rank < 0)
                    w[k] = (Where){s, i};
            }
        int32_t PV = p->P * p->V;
        for (int kind = 0; kind < 2; kind++)
            for (int32_t v = 0; v < PV; v++)
                for (int32_t m = 0; m < p->M; m++) {
                    int32_t u = kind == 0 ? v - 1 : v + 1;  /* the producer's vstage */
                    if (u < 0 || u >= PV)
                        continue;
                    Where to = w[kind * nvm + (uint64_t)v * p->M + m];
                    Where fr = w[kind * nvm + (uint64_t)u * p->M + m];
                    if (to.rank < 0 || fr.rank < 0 || to.rank == fr.rank)
                        continue;
                    double fe = r->end[fr.rank][fr.pos], fs = r->start[fr.rank][fr.pos];
                    /* The flow start must lie inside the producer's slice. */
                    double ts = fe > fs ? fe - fmin((fe - fs) / 2, 1e-6) : fe;
                    SEP();
                    sb_printf(out, "{\"name\": \"p2p\", \"cat\": \"dep\", \"ph\": \"s\", "
                                   "\"id\": %" PRIu64 ", \"pid\": %d, \"tid\": 0, \"ts\": %s},\n"
                                   "{\"name\": \"p2p\", \"cat\": \"dep\", \"ph\": \"f\", "
                                   "\"bp\": \"e\", \"id\": %" PRIu64 ", \"pid\": %d, \"tid\": 0, "
                                   "\"ts\": %s}",
                              flow, fr.rank, us(a, sizeof a, ts), flow, to.rank,
                              us(b, sizeof b, r->start[to.rank][to.pos]));
                    flow++;
                }
        /* `dep` edges between ranks. */
        for (uint32_t i = 0; i < p->ndeps; i++) {
            const Dep *d = &p->deps[i];
            const OpRef *ref[2] = {&d->from, &d->to};
            Where at[2] = {{-1, 0}, {-1, 0}};
            for (int j = 0; j < 2; j++) {
                const OpRef *o = ref[j];
                if (o->stage >= p->P || o->kind >= OP_NKINDS || o->chunk >= p->V || o->mb >= (uint32_t)p->M)
                    break;
                at[j] = w[o->kind * nvm + (uint64_t)ir_vstage(p, o->stage, o->chunk) * p->M + o->mb];
            }
            if (at[0].rank < 0 || at[1].rank < 0 || at[0].rank == at[1].rank ||
                at[0].rank != d->from.stage || at[1].rank != d->to.stage)
                continue;
            double fe = r->end[at[0].rank][at[0].pos], fs = r->start[at[0].rank][at[0].pos];
            double ts = fe > fs ? fe - fmin((fe - fs) / 2, 1e-6) : fe;
            SEP();
            sb_printf(out, "{\"name\": \"dep\", \"cat\": \"dep\", \"ph\": \"s\", \"id\": %" PRIu64
                           ", \"pid\": %d, \"tid\": %d, \"ts\": %s},\n"
                           "{\"name\": \"dep\", \"cat\": \"dep\", \"ph\": \"f\", \"bp\": \"e\", "
                           "\"id\": %" PRIu64 ", \"pid\": %d, \"tid\": %d, \"ts\": %s}",
                      flow, at[0].rank, (int)op_stream((OpKind)d->from.kind), us(a, sizeof a, ts),
                      flow, at[1].rank, (int)op_stream((OpKind)d->to.kind),
                      us(b, sizeof b, r->start[at[1].rank][at[1].pos]));
            flow++;
        }
        free(w);
    }
    /* Live memory per stage. */
    double **delta = xmalloc(((size_t)p->P + 1) * sizeof *delta);
    double *block = xmalloc(((size_t)nops + 1) * sizeof *block);
    size_t off = 0;
    for (int32_t s = 0; s < p->P; s++) {
        delta[s] = block + off;
        off += p->stages[s].n;
    }
    sim_mem_deltas(p, delta);
    for (int32_t s = 0; s < p->P; s++) {
        SEP();
        sb_printf(out, "{\"name\": \"memory\", \"ph\": \"C\", \"pid\": %d, \"ts\": 0, "
                       "\"args\": {\"GiB\": %s}}",
                  s, sim_fmt_num(a, sizeof a, ir_cost(p, s, 0, COST_WEIGHTS) / 1073741824.0));
        CounterCtx c = {out, s, false, 0, 0};
        sim_mem_replay(p, r, delta, s, counter_sample, &c);
        counter_flush(&c);
    }
    free(block);
    free(delta);
#undef SEP
    sb_puts(out, "\n]}\n");
}
