/* check.c - the verifier: the op index, completeness and placement, same-rank order,
 * the memory bound; the wait graph and the comm lowering live in waitgraph.c and
 * comm.c. The rules are docs/spec.md "Completeness", "Dependencies" and "Memory"
 * paragraphs; docs/semantics.md states them with every decision taken here. */
#include "check.h"

#include "actions.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "waitgraph.h"
#include "memory.h"
#include "opsem.h"
#include "util.h"

/* ---- sizes and names ---------------------------------------------------------- */

/* Bytes as "3.6 GiB" (one decimal) down to "512 B". */
static char *fmt_size(char *buf, size_t n, double b)
{
    double a = fabs(b);
    if (a >= 1073741824.0)
        snprintf(buf, n, "%.1f GiB", b / 1073741824.0);
    else if (a >= 1048576.0)
        snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    else if (a >= 1024.0)
        snprintf(buf, n, "%.1f KiB", b / 1024.0);
    else
        snprintf(buf, n, "%.0f B", b);
    return buf;
}

static char *opn(char *buf, size_t n, const Op *op)
{
    return op_name(buf, n, (OpKind)op->kind, op->mb, op->chunk);
}

/* The expansion note's name of op (a const Op *) on stage s (a DiagOpNamer). */
static void name_op(char *buf, size_t n, const void *ctx, uint32_t s)
{
    const Op *op = ctx;
    char a[48];
    if (op->chunk)
        snprintf(buf, n, "%s (stage %u, micro-batch %u, chunk %u)", opn(a, sizeof a, op), s,
                 op->mb, op->chunk);
    else
        snprintf(buf, n, "%s (stage %u, micro-batch %u)", opn(a, sizeof a, op), s, op->mb);
}

/* Tells diag which op the next error is about, so that an op expanded from a template
 * is named in the expansion note: "F7 (stage 0, micro-batch 7)". The name is written
 * only when an error needs it: once per op, formatting it was a quarter of check's time
 * on a schedule template. */
static void about(Diag *d, uint32_t s, const Op *op)
{
    if (diag_wants_op(d))
        diag_set_op_lazy(d, name_op, op, s);
}

static char *refn(char *buf, size_t n, OpRef r)
{
    char o[48];
    snprintf(buf, n, "%u:%s", r.stage, op_name(o, sizeof o, (OpKind)r.kind, r.mb, r.chunk));
    return buf;
}

/* ---- completeness and placement (docs/spec.md "Completeness") -------------------- */

#define MISSING_SHOWN 12

/* Appends the runs of absent (kind, v, m) as "F4..F7, F9"; *shown / *more count runs. */
static void missing_runs(StrBuf *b, const OpIndex *idx, OpKind k, int32_t v, uint32_t chunk,
                         uint32_t M, int *shown, uint64_t *more)
{
    uint32_t m = 0;
    /* a run starts at each absent op after a present one: one scan when none is absent */
    while (m < M && (m = opindex_next_absent(idx, k, v, m)) != NONE) {
        uint32_t nx = opindex_next(idx, k, v, m);
        uint32_t end = nx == NONE ? M : nx;
        if (*shown < MISSING_SHOWN) {
            char a[48], z[48];
            sb_puts(b, *shown ? ", " : "");
            op_name(a, sizeof a, k, m, chunk);
            if (end - m == 1)
                sb_puts(b, a);
            else
                sb_printf(b, "%s..%s", a, op_name(z, sizeof z, k, end - 1, chunk));
            (*shown)++;
        } else {
            (*more)++;
        }
        m = end;
    }
}

static void check_missing(Diag *d, const Pipeline *p, const OpIndex *idx)
{
    for (int32_t s = 0; s < p->P; s++) {
        StrBuf b = {0};
        int shown = 0;
        uint64_t more = 0;
        for (int k = OP_F; k <= OP_B; k++)
            for (int32_t c = 0; c < p->V; c++)
                missing_runs(&b, idx, (OpKind)k, ir_vstage(p, s, c), (uint32_t)c,
                             (uint32_t)p->M, &shown, &more);
        if (shown) {
            const StageOps *st = &p->stages[s];
            Loc at = st->declared && st->loc.file != LOC_NONE_FILE ? st->loc : p->loc;
            if (more)
                sb_printf(&b, ", and %llu more runs", (unsigned long long)more);
            diag_error(d, at, DIAG_MISSING, "%s missing on stage %d%s", b.s, s,
                       st->declared ? "" : " (the pipeline has no `stage` block for it)");
        }
        sb_free(&b);
    }
}

/* An overlapped recompute (docs/semantics.md "Overlapped recomputation"): one R of its
 * (v,m), R or RO (`duplicate`), and a host listed after it that does not wait for it
 * (`order`: the host's all-reduces are where it runs). */
static void check_host(Diag *d, const Pipeline *p, const OpIndex *idx, int32_t s, uint32_t i)
{
    char a[48], z[48];
    const StageOps *st = &p->stages[s];
    const Op *op = &st->ops[i];
    int32_t v = ir_vstage(p, s, op->chunk);
    uint32_t at;
    if (opindex_find(idx, OP_R, v, op->mb, NULL, &at)) {
        diag_error(d, op->loc, DIAG_DUPLICATE, "%s on stage %d: its (virtual stage, micro-batch) "
                   "also has %s; at most one recompute each", opn(a, sizeof a, op), s,
                   op_name(z, sizeof z, OP_R, op->mb, op->chunk));
        diag_note(d, st->ops[at].loc, "%s is here", z);
    }
    int64_t h = opsem_host(st, i);
    if (h < 0) {
        diag_error(d, op->loc, DIAG_ORDER, "%s on stage %d has no host: an overlapped recompute "
                   "runs inside the all-reduces of the next compute op listed after it",
                   opn(a, sizeof a, op), s);
        return;
    }
    const Op *ho = &st->ops[h];
    OpCosts c;
    if (ho->chunk == op->chunk && ho->mb == op->mb && ho->kind == OP_B &&
        (opsem_costs(p, s, op->chunk, &c), opsem_self_host_ok(&c)))
        return; /* layer-granular: its own B hosts it (docs/semantics.md) */
    if (ho->chunk == op->chunk && ho->mb == op->mb && opsem_waits_on((OpKind)ho->kind, (OpKind)op->kind)) {
        diag_error(d, op->loc, DIAG_ORDER, "%s on stage %d cannot run inside %s, which waits "
                   "for it: list it before an earlier op", opn(a, sizeof a, op), s,
                   opn(z, sizeof z, ho));
        diag_note(d, ho->loc, "%s is here", z);
    }
}

static void check_ops(Diag *d, const Pipeline *p, const OpIndex *idx)
{
    char a[48], z[48];
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *st = &p->stages[s];
        for (uint32_t i = 0; i < st->n; i++) {
            const Op *op = &st->ops[i];
            if (op->kind < OP_NKINDS)
                about(d, (uint32_t)s, op);
            if (op->kind >= OP_NKINDS) {
                diag_error(d, op->loc, DIAG_VALUE, "unknown op kind %u on stage %d", op->kind, s);
                continue;
            }
            if (op->chunk >= (uint32_t)p->V) {
                diag_error(d, op->loc, DIAG_PLACEMENT,
                           "%s on stage %d names chunk %u, but each stage holds %d chunk%s "
                           "(virtual stages vs(%d, 0..%d))",
                           opn(a, sizeof a, op), s, op->chunk, p->V, p->V == 1 ? "" : "s", s,
                           p->V - 1);
                continue;
            }
            if (op->mb >= (uint32_t)p->M) {
                diag_error(d, op->loc, DIAG_VALUE,
                           "%s on stage %d: micro-batch %u out of range (microbatches %d)",
                           opn(a, sizeof a, op), s, op->mb, p->M);
                continue;
            }
            int32_t v = ir_vstage(p, s, op->chunk);
            uint32_t first = i; /* the index holds every op in range: its first occurrence */
            opindex_find(idx, (OpKind)op->kind, v, op->mb, NULL, &first);
            if (first != i) {
                diag_error(d, op->loc, DIAG_DUPLICATE, "duplicate %s on stage %d",
                           opn(a, sizeof a, op), s);
                diag_note(d, st->ops[first].loc, "first %s is here", opn(a, sizeof a, op));
                continue;
            }
            if (OP_IS_CHUNKWIDE(op->kind) && op->mb != 0) {
                diag_error(d, op->loc, DIAG_VALUE,
                           "%s on stage %d: %s acts on a whole chunk and takes micro-batch 0 (%s)",
                           opn(a, sizeof a, op), s, op_kind_name[op->kind],
                           op_name(z, sizeof z, (OpKind)op->kind, 0, op->chunk));
                continue;
            }
            /* the op's pair (SO/SI, OG/LW: op_sem[].pair) on the same (v,m) or chunk */
            OpKind pk = (OpKind)op_sem[op->kind].pair;
            uint32_t pm = OP_IS_CHUNKWIDE(pk) ? 0 : op->mb;
            if (pk != OP_NKINDS && !opindex_find(idx, pk, v, pm, NULL, NULL))
                diag_error(d, op->loc, DIAG_MISSING, "%s on stage %d has no %s: %s",
                           opn(a, sizeof a, op), s, op_name(z, sizeof z, pk, pm, op->chunk),
                           op_sem[op->kind].why_pair);
            if (op_sem[op->kind].overlaps_host)
                check_host(d, p, idx, s, i);
        }
    }
    diag_clear_op(d); /* the last op named had no error */
}

/* A dep endpoint must name an op that exists, on the stage it names. */
static void check_dep_ref(Diag *d, const Pipeline *p, const OpIndex *idx, const Dep *dp, OpRef r)
{
    char a[64];
    if (r.kind >= OP_NKINDS) {
        diag_error(d, dp->loc, DIAG_VALUE, "dep names an unknown op kind");
    } else if (r.stage >= (uint32_t)p->P) {
        diag_error(d, dp->loc, DIAG_PLACEMENT, "dep names %s, but there is no stage %u (stages %d)",
                   refn(a, sizeof a, r), r.stage, p->P);
    } else if (r.chunk >= (uint32_t)p->V) {
        diag_error(d, dp->loc, DIAG_PLACEMENT,
                   "dep names %s, but stage %u holds only %d chunk%s", refn(a, sizeof a, r),
                   r.stage, p->V, p->V == 1 ? "" : "s");
    } else if (r.mb >= (uint32_t)p->M) {
        diag_error(d, dp->loc, DIAG_VALUE, "dep names %s: micro-batch %u out of range (microbatches %d)",
                   refn(a, sizeof a, r), r.mb, p->M);
    } else if (!opindex_find(idx, (OpKind)r.kind, ir_vstage(p, r.stage, r.chunk), r.mb, NULL, NULL)) {
        diag_error(d, dp->loc, DIAG_PLACEMENT, "dep names %s, but stage %u has no such op",
                   refn(a, sizeof a, r), r.stage);
        const StageOps *st = &p->stages[r.stage];
        if (st->declared && st->loc.file != LOC_NONE_FILE)
            diag_note(d, st->loc, "stage %u is here", r.stage);
    }
}

static void check_structure(Diag *d, const Pipeline *p, const OpIndex *idx)
{
    check_ops(d, p, idx);
    check_missing(d, p, idx);
    for (uint32_t i = 0; i < p->ndeps; i++) {
        check_dep_ref(d, p, idx, &p->deps[i], p->deps[i].from);
        check_dep_ref(d, p, idx, &p->deps[i], p->deps[i].to);
    }
}

/* ---- same-rank order (docs/spec.md "Dependencies"; code `order`) ------------------ */

/* The rule broken, in words: a row of the op semantics table (opsem.h). */
static const char *order_reason(OpKind u, OpKind w)
{
    return opsem_why(u, w);
}

static void check_order(Diag *d, const Graph *g)
{
    const Pipeline *p = g->p;
    char a[48], b[48];
    for (uint32_t u = 0; u < g->N; u++) {
        for (uint32_t k = g->pstart[u]; k < g->pstart[u + 1]; k++) {
            const Pred *e = &g->pred[k];
            uint32_t w = e->node;
            if ((e->why != WAIT_DATA && e->why != WAIT_DEP) || !graph_left_out(g, u, w))
                continue;
            uint32_t s = g->rank[u];
            const Op *ou = graph_op(g, u);
            const Op *ow = graph_op(g, w);
            opn(a, sizeof a, ou);
            opn(b, sizeof b, ow);
            if (e->why == WAIT_DATA) {
                about(d, s, ou);
                diag_error(d, ou->loc, DIAG_ORDER,
                           "%s is listed before %s on stage %u, but it waits for it: %s", a, b,
                           s, order_reason((OpKind)ou->kind, (OpKind)ow->kind));
                diag_note(d, ow->loc, "%s is here", b);
            } else if (w == u) {
                diag_error(d, p->deps[e->dep].loc, DIAG_ORDER,
                           "dep makes %s on stage %u wait for itself", a, s);
            } else {
                diag_error(d, p->deps[e->dep].loc, DIAG_ORDER,
                           "dep makes %s wait for %s, which is listed after it on stage %u", a,
                           b, s);
                diag_note(d, ou->loc, "%s is here", a);
                diag_note(d, ow->loc, "%s is here", b);
            }
        }
    }
}

/* ---- memory (docs/spec.md "Memory"; code `memory`) --------------------------------- */

#define LIVE_CAP 65536

/* "weights 26.0 GiB + 8 micro-batches x 3.6 GiB activations" into b (and "+ 1.0 GiB
 * working memory of the op" when the peak op holds some). */
static void composition(StrBuf *b, const Pipeline *p, const OpIndex *idx, int32_t s,
                        const MemRank *r)
{
    char w[32], x[32];
    sb_printf(b, "weights %s", fmt_size(w, sizeof w, r->weights));
    if (r->states > 0)
        sb_printf(b, " + model states %s loaded by LW", fmt_size(w, sizeof w, r->states));
    if (r->peak_op == NONE)
        return;
    double *held = xmalloc(LIVE_CAP * sizeof *held);
    uint32_t n = mem_live_idx(p, idx, s, r->peak_op, held, LIVE_CAP);
    uint32_t k = n < LIVE_CAP ? n : LIVE_CAP;
    double lo = INFINITY, hi = 0;
    for (uint32_t i = 0; i < k; i++) {
        lo = held[i] < lo ? held[i] : lo;
        hi = held[i] > hi ? held[i] : hi;
    }
    const char *unit = p->V == 1 ? (n == 1 ? "micro-batch" : "micro-batches")
                                 : (n == 1 ? "micro-batch chunk" : "micro-batch chunks");
    if (n && hi - lo <= 1e-9 * hi)
        sb_printf(b, " + %u %s x %s activations", n, unit,
                  fmt_size(x, sizeof x, hi));
    else if (n)
        sb_printf(b, " + %s activations held by %u %s (the largest %s)",
                  fmt_size(x, sizeof x, r->peak - r->weights - r->states - r->work), n, unit,
                  fmt_size(w, sizeof w, hi));
    if (r->work > 0)
        sb_printf(b, " + %s working memory of the op", fmt_size(x, sizeof x, r->work));
    free(held);
}

/* idx: the op index, or NULL to build one only when a rank is over its budget (the
 * composition of the message needs it). */
static void check_memory(Diag *d, const Pipeline *p, const OpIndex *idx)
{
    if (!p->has_memory)
        return;
    OpIndex *own = NULL;
    MemRank *mr = xmalloc((size_t)p->P * sizeof *mr);
    mem_walk(p, mr);
    for (int32_t s = 0; s < p->P; s++) {
        const MemRank *r = &mr[s];
        if (!(r->peak > p->memory))
            continue;
        char pk[32], bu[32], ov[32], on[48];
        StrBuf comp = {0};
        if (!idx)
            idx = own = opindex_build(p);
        composition(&comp, p, idx, s, r);
        const StageOps *st = &p->stages[s];
        Loc at = r->peak_op != NONE ? st->ops[r->peak_op].loc
                                    : (st->loc.file != LOC_NONE_FILE ? st->loc : p->loc);
        fmt_size(pk, sizeof pk, r->peak);
        fmt_size(bu, sizeof bu, p->memory);
        char exact[80] = "";
        if (strcmp(pk, bu) == 0)
            snprintf(exact, sizeof exact, " (%.0f > %.0f bytes)", r->peak, p->memory);
        if (r->peak_op != NONE)
            about(d, (uint32_t)s, &st->ops[r->peak_op]);
        if (r->peak_op != NONE)
            diag_error(d, at, DIAG_MEMORY,
                       "stage %d needs %s at %s, over its budget of %s by %s%s: %s", s, pk,
                       opn(on, sizeof on, &st->ops[r->peak_op]), bu,
                       fmt_size(ov, sizeof ov, r->peak - p->memory), exact, comp.s);
        else
            diag_error(d, at, DIAG_MEMORY,
                       "stage %d needs %s for its weights alone, over its budget of %s by %s%s",
                       s, pk, bu, fmt_size(ov, sizeof ov, r->peak - p->memory), exact);
        if (p->shape_loc[3].file != LOC_NONE_FILE)
            diag_note(d, p->shape_loc[3], "the budget is set here");
        sb_free(&comp);
    }
    opindex_free(own);
    free(mr);
}

void check_mem_table(FILE *out, const Pipeline *p)
{
    MemRank *mr = xmalloc((size_t)p->P * sizeof *mr);
    mem_walk(p, mr);
    fprintf(out, "%5s %12s %12s %12s %12s %12s  %s\n", "stage", "peak", "budget", "headroom",
            "weights", "activations", "at (live)");
    for (int32_t s = 0; s < p->P; s++) {
        const MemRank *r = &mr[s];
        char pk[32], bu[32] = "-", hr[32] = "-", w[32], ac[32], on[48] = "-";
        fmt_size(pk, sizeof pk, r->peak);
        if (p->has_memory) {
            fmt_size(bu, sizeof bu, p->memory);
            fmt_size(hr, sizeof hr, p->memory - r->peak);
        }
        fmt_size(w, sizeof w, r->weights + r->states);
        fmt_size(ac, sizeof ac, r->peak - r->weights - r->states);
        if (r->peak_op != NONE)
            opn(on, sizeof on, &p->stages[s].ops[r->peak_op]);
        fprintf(out, "%5d %12s %12s %12s %12s %12s  %s (%u)%s\n", s, pk, bu, hr, w, ac, on,
                r->live_at_peak, p->has_memory && r->peak > p->memory ? "  OVER" : "");
    }
    free(mr);
}

/* ---- entry -------------------------------------------------------------------- */

int check_pipeline(Diag *d, const Pipeline *p, unsigned what)
{
    int before = d->nerr;
    if (p->P <= 0 || p->M <= 0 || p->V <= 0 || !p->stages)
        return 0; /* the elaborator reported the shape */
    bool vouched = (what & CHECK_SOUND) && !(what & CHECK_STRUCTURE);
    /* the memory check alone on a vouched pipeline needs no index unless over budget */
    OpIndex *idx = vouched && !(what & CHECK_DEPS) ? NULL : opindex_build(p);

    /* The later checks need the structure sound; run it quietly when not asked for. */
    bool sound = true;
    if (!vouched) {
        Diag quiet = *d;
        quiet.nerr = 0;
        quiet.max_errors = -1; /* count, never print */
        Diag *sd = (what & CHECK_STRUCTURE) ? d : &quiet;
        int s0 = sd->nerr;
        check_structure(sd, p, idx);
        sound = sd->nerr == s0;
    }

    if (sound && (what & CHECK_DEPS)) {
        Graph g;
        graph_build(&g, p, idx);
        int o0 = d->nerr;
        check_order(d, &g);
        check_waitgraph(d, &g); /* reports every cycle it counts */
        if (d->nerr == o0)
            check_comm(d, p, &g);
        graph_free(&g);
        /* PyTorch's runtime actions the file keeps (docs/semantics.md "Runtime actions") */
        actions_check_pipeline(d, p);
    }
    if (sound && (what & CHECK_MEMORY))
        check_memory(d, p, idx);
    opindex_free(idx);
    return d->nerr - before;
}
