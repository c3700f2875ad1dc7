/* sim_trace.c - `pipec sim --trace T.json`: the Chrome trace event format (JSON object
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
 *   - with the data-parallel stream (SimResult.dp), a thread STREAM_N "data parallel"
 *     per stage with its gathers, reductions and all-gathers, and the optimizer steps
 *     on the compute thread, category "dp";
 *   - a counter ("C") track "memory" per stage: live bytes over time (the simulator's
 *     replay of docs/spec.md "Memory"), named in GiB.
 *
 * Runs that measure real timelines can reuse this writer with their own SimResult. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opindex.h"
#include "opsem.h"
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

/* The trace being written: its output, whether an event was written yet (separators),
 * and the next flow id. */
typedef struct TraceW {
    StrBuf *out;
    const Pipeline *p;
    const SimResult *r;
    bool first;
    uint64_t flow;
} TraceW;

/* Starts the next event: a newline, after a comma unless it is the first. */
static void sep(TraceW *w)
{
    sb_puts(w->out, w->first ? "\n" : ",\n");
    w->first = false;
}

/* The header (pipeline, makespan, bubble ratio) and the metadata events: a process per
 * stage, a thread per stream (named for offload when the schedule has OG/LW). */
static void trace_metadata(TraceW *w)
{
    const Pipeline *p = w->p;
    char a[64], b[64];
    sb_puts(w->out, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"pipeline\": ");
    sim_json_string(w->out, p->name);
    sb_printf(w->out, ", \"makespan_ms\": %s, \"bubble_ratio\": %s}, \"traceEvents\": [",
              sim_fmt_num(a, sizeof a, w->r->makespan_ms),
              sim_fmt_num(b, sizeof b, w->r->bubble_ratio));
    bool offload = opsem_lists(p, op_chunkwide);
    const char *const *sname = offload ? stream_name_offload : stream_name;
    for (int32_t s = 0; s < p->P; s++) {
        sep(w);
        sb_printf(w->out, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
                          "\"args\": {\"name\": \"stage %d\"}},\n"
                          "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                          "\"args\": {\"sort_index\": %d}}",
                  s, s, s, s);
        for (int t = 0; t < STREAM_N; t++)
            sb_printf(w->out, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, "
                              "\"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                      s, t, sname[t]);
        if (w->r->dp)
            sb_printf(w->out, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, "
                              "\"tid\": %d, \"args\": {\"name\": \"data parallel\"}}",
                      s, STREAM_N);
    }
}

/* The data-parallel stream's items (docs/spec.md "Time") on thread STREAM_N of their
 * stage, the optimizer steps on the compute thread: "reduce.1", "gather.1",
 * "all-gather.1", "opt.1" for chunk 1. */
static void trace_dp(TraceW *w)
{
    static const char *const what[] = {"gather", "reduce", "opt", "all-gather"};
    char a[64], b[64];
    for (size_t i = 0; i < w->r->ndpspan; i++) {
        const SimDpSpan *x = &w->r->dpspan[i];
        sep(w);
        sb_printf(w->out, "{\"name\": \"%s.%u\", \"cat\": \"dp\", \"ph\": \"X\", "
                          "\"pid\": %d, \"tid\": %d, \"ts\": %s, \"dur\": %s, "
                          "\"args\": {\"chunk\": %u}}",
                  what[x->kind], (unsigned)x->chunk, x->stage,
                  x->kind == SIM_DP_OPT ? (int)STREAM_COMPUTE : (int)STREAM_N,
                  us(a, sizeof a, x->start), us(b, sizeof b, x->end - x->start),
                  (unsigned)x->chunk);
    }
}

/* One complete ("X") event per op. */
static void trace_ops(TraceW *w)
{
    const Pipeline *p = w->p;
    char a[64], b[64], name[48];
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *so = &p->stages[s];
        for (uint32_t i = 0; i < so->n; i++) {
            const Op *o = &so->ops[i];
            if (o->kind >= OP_NKINDS)
                continue;
            sep(w);
            double st = w->r->start[s][i], en = w->r->end[s][i];
            sb_printf(w->out, "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, "
                              "\"tid\": %d, \"ts\": %s, \"dur\": %s, \"args\": {\"mb\": %u, "
                              "\"chunk\": %u, \"vstage\": %d}}",
                      op_name(name, sizeof name, (OpKind)o->kind, o->mb, o->chunk),
                      op_kind_name[o->kind], s, (int)op_stream((OpKind)o->kind),
                      us(a, sizeof a, st), us(b, sizeof b, en - st), o->mb, o->chunk,
                      o->chunk < (uint32_t)p->V ? ir_vstage(p, s, o->chunk) : -1);
        }
    }
}

/* A flow (`name`, "s" just inside the end of op fpos on rank fr, on stream ftid; "f"
 * at the start of op tpos on rank to, stream ttid). */
static void trace_flow(TraceW *w, const char *name, int32_t fr, uint32_t fpos, int ftid,
                       int32_t to, uint32_t tpos, int ttid)
{
    char a[64], b[64];
    double fe = w->r->end[fr][fpos], fs = w->r->start[fr][fpos];
    /* The flow start must lie inside the producer's slice. */
    double ts = fe > fs ? fe - fmin((fe - fs) / 2, 1e-6) : fe;
    sep(w);
    sb_printf(w->out, "{\"name\": \"%s\", \"cat\": \"dep\", \"ph\": \"s\", \"id\": %" PRIu64
                      ", \"pid\": %d, \"tid\": %d, \"ts\": %s},\n"
                      "{\"name\": \"%s\", \"cat\": \"dep\", \"ph\": \"f\", \"bp\": \"e\", "
                      "\"id\": %" PRIu64 ", \"pid\": %d, \"tid\": %d, \"ts\": %s}",
              name, w->flow, fr, ftid, us(a, sizeof a, ts), name, w->flow, to, ttid,
              us(b, sizeof b, w->r->start[to][tpos]));
    w->flow++;
}

/* Flows of the cross-rank F(v-1,m) -> F(v,m) and B(v+1,m) -> B(v,m) chains. */
static void trace_chain_flows(TraceW *w, const OpIndex *idx)
{
    const Pipeline *p = w->p;
    int32_t PV = p->P * p->V;
    for (int kind = 0; kind < 2; kind++)
        for (int32_t v = 0; v < PV; v++)
            for (int32_t m = 0; m < p->M; m++) {
                int32_t u = kind == 0 ? v - 1 : v + 1;  /* the producer's vstage */
                int32_t fr, to;
                uint32_t fpos, tpos;
                if (u < 0 || u >= PV ||
                    !opindex_find(idx, (OpKind)kind, v, (uint32_t)m, &to, &tpos) ||
                    !opindex_find(idx, (OpKind)kind, u, (uint32_t)m, &fr, &fpos) || to == fr)
                    continue;
                trace_flow(w, "p2p", fr, fpos, 0, to, tpos, 0);
            }
}

/* Flows of the `dep` edges between ranks (each end on the rank the edge names). */
static void trace_dep_flows(TraceW *w, const OpIndex *idx)
{
    const Pipeline *p = w->p;
    for (uint32_t i = 0; i < p->ndeps; i++) {
        const Dep *d = &p->deps[i];
        const OpRef *ref[2] = {&d->from, &d->to};
        int32_t rank[2] = {-1, -1};
        uint32_t pos[2] = {0, 0};
        for (int j = 0; j < 2; j++) {
            const OpRef *o = ref[j];
            if (o->stage >= p->P || o->kind >= OP_NKINDS || o->chunk >= p->V ||
                o->mb >= (uint32_t)p->M ||
                !opindex_find(idx, (OpKind)o->kind, ir_vstage(p, o->stage, o->chunk), o->mb,
                              &rank[j], &pos[j]))
                break;
        }
        if (rank[0] < 0 || rank[1] < 0 || rank[0] == rank[1] || rank[0] != d->from.stage ||
            rank[1] != d->to.stage)
            continue;
        trace_flow(w, "dep", rank[0], pos[0], (int)op_stream((OpKind)d->from.kind), rank[1],
                   pos[1], (int)op_stream((OpKind)d->to.kind));
    }
}

/* A counter track of live memory per stage: the weights at 0, then the replay. */
static void trace_memory(TraceW *w)
{
    const Pipeline *p = w->p;
    char a[64];
    double **delta = sim_mem_deltas_new(p);
    for (int32_t s = 0; s < p->P; s++) {
        sep(w);
        sb_printf(w->out, "{\"name\": \"memory\", \"ph\": \"C\", \"pid\": %d, \"ts\": 0, "
                          "\"args\": {\"GiB\": %s}}",
                  s, sim_fmt_num(a, sizeof a, ir_cost(p, s, 0, COST_WEIGHTS) / 1073741824.0));
        CounterCtx c = {w->out, s, false, 0, 0};
        sim_mem_replay(p, w->r, delta, s, counter_sample, &c);
        counter_flush(&c);
    }
    sim_mem_deltas_free(p, delta);
}

void sim_write_trace(StrBuf *out, const Pipeline *p, const SimResult *r)
{
    TraceW w = {out, p, r, true, 0};
    trace_metadata(&w);
    trace_ops(&w);
    trace_dp(&w);
    /* Cross-rank dependencies, when every (v,m) can have its ops (P*V*M <= ops). */
    uint64_t nvm = (uint64_t)p->P * (uint64_t)(p->V > 0 ? p->V : 0) *
                   (uint64_t)(p->M > 0 ? p->M : 0);
    if (nvm > 0 && nvm <= pipeline_nops(p)) {
        OpIndex *idx = opindex_build(p);
        trace_chain_flows(&w, idx);
        trace_dep_flows(&w, idx);
        opindex_free(idx);
    }
    trace_memory(&w);
    sb_puts(out, "\n]}\n");
}
