/* emit_c.c - C code generation (see emit_c.h), in two phases as QBE plans and then
 * writes:
 *
 *   emit_plan    the IR -> EmitPlan: op index, the model workload's shape and arena
 *                plan, the synthetic workload's scaled arena plan, the comm plan, the
 *                simulated makespan, and every op's row (flags, waits, cost-model time
 *                and bytes, source line);
 *   write_*      one writer per generated file (program.h, rank_K.c, main.c,
 *                Makefile), which only formats the plan: designated initialisers,
 *                flags by their runtime/piperun.h names.
 *
 * The model workload's shape (mlp_shape) is here too: the runtime checks the region
 * sizes the plan used at start-up. */
#define _POSIX_C_SOURCE 200809L
#include "emit_c.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm.h"
#include "costmodel.h"
#include "memory.h"
#include "mlp_layout.h"
#include "opindex.h"
#include "opsem.h"
#include "piperun.h"
#include "sim.h"
#include "tf_layout.h"

/* Limits of the CPU mlp workload (docs/runtime.md): a model whose parameters or whose
 * per-rank arena exceed these is refused. */
#define MLP_MAX_PARAM_BYTES (1ll << 30)
#define MLP_MAX_ARENA_BYTES (4ll << 30)
/* The synthetic workload's arenas are scaled down to at most this many bytes. */
#define SYNTH_MAX_ARENA (64ll << 20)

/* Region sizes in bytes from a layout's prefix ends in floats. The slice input is the
 * whole checkpoint in both layouts (mlp_region_whole, tf_region_whole): input = ckpt. */
static ArenaSizes sizes_of_layout(size_t act, size_t ckpt, size_t wact)
{
    int64_t f = (int64_t)sizeof(float);
    return (ArenaSizes){.act = (int64_t)act * f, .ckpt = (int64_t)ckpt * f,
                        .wact = (int64_t)wact * f, .ckpt_layers = (int64_t)ckpt * f};
}

ArenaSizes mlp_region_sizes(int vocab, int C, int T, int B, int nl, bool embed, bool head)
{
    /* The runtime's own layout (runtime/mlp_layout.h), in bytes. */
    MlpLayout a = mlp_layout((size_t)vocab, (size_t)C, (size_t)T, (size_t)B, (size_t)nl, embed,
                             head);
    return sizes_of_layout(a.act, a.ckpt, a.wact);
}

static bool model_int(const Entity *m, const char *key, int lo, int hi, int *out)
{
    const Field *f = field_find(m->fields, m->nfields, key);
    if (!f || f->val.kind != VAL_NUM || !(f->val.num >= lo) || f->val.num > hi ||
        f->val.num != floor(f->val.num))
        return false;
    *out = (int)f->val.num;
    return true;
}

/* The model's shape fields (vocab hidden layers seq mbs; arch, and for gpt/llama heads
 * kv_heads ffn) into out. Returns 0, or -1 with the reason in why. */
static int mlp_read_model(const Entity *m, MlpShape *out, char *why, size_t why_n)
{
    static const char *const keys[5] = {"vocab", "hidden", "layers", "seq", "mbs"};
    int *dst[5] = {&out->vocab, &out->C, &out->L, &out->T, &out->B};
    for (int i = 0; i < 5; i++) {
        int lo = i == 2 ? 0 : 1;
        if (!model_int(m, keys[i], lo, 1 << 24, dst[i])) {
            snprintf(why, why_n, "model %s: `%s` must be a whole number in %d..%d", m->name,
                     keys[i], lo, 1 << 24);
            return -1;
        }
    }
    /* The arch picks the workload: gpt and llama run runtime/transformer.h (the cost
     * model's default arch is gpt), mlp runtime/mlp.h. */
    const char *arch = model_arch_name(m);
    out->arch = !strcmp(arch, "gpt") ? TF_GPT : !strcmp(arch, "llama") ? TF_LLAMA : 0;
    if (!out->arch)
        return 0;
    if (!model_int(m, "heads", 1, 1 << 24, &out->heads)) {
        snprintf(why, why_n, "model %s: `heads` must be a whole number in 1..%d", m->name,
                 1 << 24);
        return -1;
    }
    out->kv_heads = out->heads;
    if (field_find(m->fields, m->nfields, "kv_heads") &&
        !model_int(m, "kv_heads", 1, 1 << 24, &out->kv_heads)) {
        snprintf(why, why_n, "model %s: `kv_heads` must be a whole number", m->name);
        return -1;
    }
    /* the cost model's default ffn (docs/cost-model.md "Notation") */
    out->ffn = out->arch == TF_LLAMA ? 256 * (int)ceil(8.0 * out->C / 3.0 / 256.0) : 4 * out->C;
    if (field_find(m->fields, m->nfields, "ffn") && !model_int(m, "ffn", 1, 1 << 24, &out->ffn)) {
        snprintf(why, why_n, "model %s: `ffn` must be a whole number", m->name);
        return -1;
    }
    if (out->C % out->heads || out->heads % out->kv_heads ||
        (out->arch == TF_LLAMA && (out->C / out->heads) % 2)) {
        snprintf(why, why_n, "model %s: heads must divide hidden, kv_heads heads, and a "
                 "llama head size must be even", m->name);
        return -1;
    }
    return 0;
}

/* Blocks per virtual stage (out->layers, allocated): the partition's whole layers, or
 * an even split. Returns 0, or -1 with the reason in why. */
static int mlp_layers(const Pipeline *p, MlpShape *out, char *why, size_t why_n)
{
    int32_t PV = p->P * p->V;
    out->layers = xcalloc((size_t)PV, sizeof *out->layers);
    if (!p->partition_set || p->partition_even) {
        for (int32_t v = 0; v < PV; v++)
            out->layers[v] = (int)((long long)(v + 1) * out->L / PV - (long long)v * out->L / PV);
        return 0;
    }
    /* the cost model's split (ir_partition_units), in whole layers */
    int64_t *units = xcalloc((size_t)PV, sizeof *units);
    int bad = ir_partition_units(p, 2.0 * (1 << 24), units);
    int32_t half = -1; /* the first virtual stage given half a layer */
    long long sum = 0;
    for (int32_t v = 0; v < PV && !bad; v++) {
        out->layers[v] = (int)(units[v] / 2);
        sum += units[v] / 2;
        if (units[v] % 2 && half < 0)
            half = v;
    }
    double half_layers = half >= 0 ? (double)units[half] / 2 : 0;
    free(units);
    if (bad < 0) {
        snprintf(why, why_n, "the partition lists %u entries; the pipeline has %d stages and "
                 "%d virtual stages", p->npartition, p->P, PV);
        return -1;
    }
    if (bad > 0) {
        snprintf(why, why_n, "the mlp workload runs whole layers only (partition entry %d is "
                 "%g)", bad - 1, p->partition[bad - 1]);
        return -1;
    }
    if (half >= 0) {
        if ((int32_t)p->npartition == PV)
            snprintf(why, why_n, "the mlp workload runs whole layers only (partition entry "
                     "%d is %g)", half, half_layers);
        else
            snprintf(why, why_n, "the mlp workload runs whole layers only (the partition "
                     "gives virtual stage %d %g layers)", half, half_layers);
        return -1;
    }
    if (sum != out->L) {
        snprintf(why, why_n, "the partition sums to %lld layers, the model has %d", sum, out->L);
        return -1;
    }
    return 0;
}

/* The size limits of the CPU workload, then each virtual stage's region sizes
 * (out->sizes, allocated). Returns 0, or -1 with the reason in why. */
static int mlp_sizes(const Pipeline *p, const Entity *m, MlpShape *out, char *why,
                     size_t why_n)
{
    int32_t PV = p->P * p->V;
    const char *arch = model_arch_name(m);
    double C = out->C, V = out->vocab;
    double params = out->L * (2 * C + 8 * C * C + 5 * C) + 2 * V * C + V + 2 * C;
    if (out->arch) /* qkv, proj, the MLP, norms and biases per layer; wte, wpe, head */
        params = out->L * (C * (C + 2.0 * C * out->kv_heads / out->heads) + C * C +
                           3.0 * C * out->ffn + 8 * C + 3.0 * out->ffn) +
                 2 * V * C + (double)out->T * C + 2 * C;
    if (params * 8 > (double)MLP_MAX_PARAM_BYTES) {
        snprintf(why, why_n, "model %s is too large for the CPU %s workload (%.3g parameters)",
                 m->name, out->arch ? arch : "mlp", params);
        return -1;
    }
    out->sizes = xcalloc((size_t)PV, sizeof *out->sizes);
    for (int32_t v = 0; v < PV; v++) {
        double per = (double)out->B * out->T * (out->layers[v] * 20.0 * C + 8 * V + 8 * C);
        if (!out->arch && per * 4 > (double)MLP_MAX_ARENA_BYTES) {
            snprintf(why, why_n, "model %s: activations of one micro-batch are too large for "
                     "the CPU mlp workload", m->name);
            return -1;
        }
        if (!out->arch) {
            out->sizes[v] = mlp_region_sizes(out->vocab, out->C, out->T, out->B,
                                             out->layers[v], v == 0, v == PV - 1);
            continue;
        }
        TfDims d = {out->arch, out->vocab, out->C, out->heads, out->kv_heads, out->ffn,
                    out->T, out->B};
        TfLayout a = tf_layout(&d, out->layers[v], v == 0, v == PV - 1);
        if ((double)a.act * 4 > (double)MLP_MAX_ARENA_BYTES) {
            snprintf(why, why_n, "model %s: activations of one micro-batch are too large "
                     "for the CPU %s workload", m->name, arch);
            return -1;
        }
        out->sizes[v] = sizes_of_layout(a.act, a.ckpt, a.wact);
    }
    return 0;
}

int mlp_shape(const Pipeline *p, MlpShape *out, char *why, size_t why_n)
{
    memset(out, 0, sizeof *out);
    const Entity *m = p->model;
    if (!m) {
        snprintf(why, why_n, "the pipeline has no `model`");
        return -1;
    }
    if (mlp_read_model(m, out, why, why_n) != 0)
        return -1;
    if (mlp_layers(p, out, why, why_n) != 0 || mlp_sizes(p, m, out, why, why_n) != 0) {
        mlp_shape_free(out);
        return -1;
    }
    return 0;
}

void mlp_shape_free(MlpShape *s)
{
    free(s->layers);
    free(s->sizes);
    s->layers = NULL;
    s->sizes = NULL;
}

/* ---- escaping ----------------------------------------------------------------------- */

/* A C string literal of s: every byte outside [A-Za-z0-9 _.,:/+=-] is an octal escape,
 * so no quote, backslash, trigraph or newline can come through. */
static void put_cstr(StrBuf *b, const char *s)
{
    sb_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        unsigned char c = *p;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr(" _.,:/+=-", c))
            sb_putc(b, (char)c);
        else
            sb_printf(b, "\\%03o", c);
    }
    sb_putc(b, '"');
}

/* Text for inside a block comment: printable ASCII only, no "*" followed by "/", no
 * "??" (trigraphs), no backslashes. */
static void put_comment(StrBuf *b, const char *s)
{
    char prev = 0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        char c = (char)*p;
        if (*p < 0x20 || *p > 0x7e || c == '\\')
            c = '_';
        if ((prev == '*' && c == '/') || (prev == '?' && c == '?') || (prev == '/' && c == '*'))
            c = '_';
        sb_putc(b, c);
        prev = c;
    }
}

/* A file name from a pipeline name: [A-Za-z0-9_] only, not empty. */
static char *safe_name(const char *s)
{
    StrBuf b = {0};
    for (const char *p = s ? s : ""; *p && b.len < 64; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '_')
            sb_putc(&b, *p);
    if (!b.len)
        sb_puts(&b, "pipeline");
    return b.s;
}

static StrBuf *add_file(EmitOut *o, const char *name)
{
    size_t cap = o->cap;
    VEC_RESERVE(o->files, (size_t)o->n + 1, cap);
    o->cap = (uint32_t)cap;
    EmitFile *f = &o->files[o->n++];
    f->name = xstrdup(name);
    memset(&f->text, 0, sizeof f->text);
    return &f->text;
}

static void header(StrBuf *b, const char *source, const char *what)
{
    sb_puts(b, "/* Generated by pipec " PIPEC_VERSION " from ");
    put_comment(b, source);
    sb_puts(b, ": ");
    sb_puts(b, what);
    sb_puts(b, ".\n * Do not edit: regenerate with `pipec emit`. */\n");
}

/* The runtime kind an op of kind k runs as (op_sem[k].runs_as: RO runs as an R at its
 * list position), "PR_F" .. "PR_LW" of runtime/piperun.h. */
static const char *kind_enum(int k)
{
    static const char *const n[PLAN_NKINDS] = {
#define X(e, s, st) "PR_" s,
        PLAN_KINDS(X)
#undef X
    };
    return (unsigned)k < OP_NKINDS ? n[op_sem[k].runs_as] : "PR_F";
}

/* %.17g, but always a valid C double constant. */
static void put_double(StrBuf *b, double x)
{
    if (!isfinite(x))
        x = 0;
    sb_printf(b, "%.17g", x);
}

/* ---- the emit plan ------------------------------------------------------------------ */

/* What the generated PrOp row of one op says beyond its identity and arena places. */
typedef struct EmitOpRow {
    unsigned flags;       /* PR_HAS_* / PR_WAIT_* (runtime/piperun.h) */
    uint32_t nso_before;  /* SOs listed before it that it waits for */
    double cost_ms;       /* cost-model duration */
    double cost_bytes;    /* cost-model bytes allocated or moved */
    double link_ms;       /* the part of cost_ms on the host link (opsem_link_ms) */
    uint32_t line;        /* source line, 0 when unknown */
} EmitOpRow;

/* Everything the writers print, computed once from the IR: the op index, the arena
 * plans of both workloads, the comm plan, the simulated makespan and every op's row.
 * The writers below only format it. */
typedef struct EmitPlan {
    const Pipeline *p;
    const char *source;     /* the .pipe file named in header comments */
    OpIndex *idx;
    MlpShape mlp;           /* valid when have_mlp */
    bool have_mlp;
    char why[200];          /* mlp_shape's reason when !have_mlp */
    ArenaPlan *plan_mlp;    /* NULL when !have_mlp */
    ArenaSizes *cost;       /* [P*V] cost-model region sizes */
    ArenaPlan *plan_cost;   /* planned with cost */
    ArenaSizes *scaled;     /* [P*V] cost / scale, NULL when scale is 1 */
    ArenaPlan *plan_syn;    /* the synthetic workload's plan: plan_cost, or over scaled */
    double scale;           /* synthetic arena bytes = cost-model bytes / scale (>= 1) */
    CommPlan *cp;
    double sim_ms;          /* simulated makespan, -1 when the simulation is stuck */
    int32_t host_link_ranks; /* consecutive ranks sharing one host link (>= 1) */
    EmitOpRow **rows;       /* [P][n of rank s] */
} EmitPlan;

/* The flags of op o of virtual stage v: the optional ops of its (v,m) (VM_HAS_* of the
 * memory walk) and the waits the op semantics table gives its kind. */
static unsigned op_flags(const EmitPlan *ep, const Op *o, int32_t v)
{
    unsigned has = mem_vm_has(ep->idx, v, o->mb);
    bool has_si = (has & VM_HAS_SO) && (has & VM_HAS_SI);
    bool has_lw = opindex_find(ep->idx, OP_LW, v, 0, NULL, NULL);
    OpKind k = (OpKind)o->kind;
    return ((has & VM_HAS_R) ? PR_HAS_R : 0) | ((has & VM_HAS_W) ? PR_HAS_W : 0) |
           (has_si ? PR_HAS_SI : 0) |
           (opsem_waits_on(k, OP_LW) && has_lw ? PR_HAS_LW : 0) |
           (opsem_waits_on(k, OP_SI) && has_si ? PR_WAIT_SI : 0);
}

/* The rows of rank s: flags, SO waits (allocating ops wait for every SO listed before
 * them: memory order, opsem.h), and the duration and bytes the op semantics table gives
 * over the walk's amounts (memory.h), as the simulator computes them. */
static EmitOpRow *plan_rows(const EmitPlan *ep, Diag *d, int32_t s)
{
    const Pipeline *p = ep->p;
    const StageOps *so = &p->stages[s];
    size_t n1 = so->n ? so->n : 1;
    EmitOpRow *rows = xcalloc(n1, sizeof *rows);
    double *walk_alloc = xmalloc(n1 * sizeof *walk_alloc);
    double *walk_freed = xmalloc(n1 * sizeof *walk_freed);
    mem_walk_ops(p, ep->idx, s, walk_alloc, walk_freed);
    OpCosts *occ = xmalloc((size_t)p->V * sizeof *occ);
    for (int32_t c = 0; c < p->V; c++)
        opsem_costs(p, s, c, &occ[c]);
    uint32_t nso = 0;
    for (uint32_t i = 0; i < so->n; i++) {
        const Op *o = &so->ops[i];
        OpKind k = (OpKind)o->kind;
        int32_t v = ir_vstage(p, s, o->chunk);
        EmitOpRow *r = &rows[i];
        r->flags = op_flags(ep, o, v);
        r->nso_before = op_sem[k].mem == MEM_ALLOC ? nso : 0;
        unsigned has = OP_IS_CHUNKWIDE(k) ? 0 : mem_vm_has(ep->idx, v, o->mb);
        double moved = opsem_moved(k, &occ[o->chunk], walk_alloc[i], walk_freed[i]);
        r->cost_ms = opsem_duration(k, &occ[o->chunk], has, moved);
        r->cost_bytes = moved > 0 ? moved : walk_alloc[i];
        r->link_ms = fmin(opsem_link_ms(k, &occ[o->chunk], moved), r->cost_ms);
        uint32_t col = 0;
        diag_linecol(d, o->loc, &r->line, &col);
        if (k == OP_SO)
            nso++;
    }
    free(walk_alloc);
    free(walk_freed);
    free(occ);
    return rows;
}

/* The synthetic workload's arena plan: the cost-model sizes, scaled down so that no
 * rank's arena exceeds SYNTH_MAX_ARENA. */
static void plan_synthetic(EmitPlan *ep)
{
    const Pipeline *p = ep->p;
    int32_t PV = p->P * p->V;
    ep->cost = arena_sizes_from_costs(p);
    ep->plan_cost = arena_plan(p, ep->cost, 1);
    int64_t maxa = 0;
    for (int32_t s = 0; s < p->P; s++)
        if (ep->plan_cost->rank[s].size > maxa)
            maxa = ep->plan_cost->rank[s].size;
    ep->scale = maxa > SYNTH_MAX_ARENA ? (double)maxa / (double)SYNTH_MAX_ARENA : 1.0;
    ep->plan_syn = ep->plan_cost;
    if (ep->scale > 1.0) {
        ep->scaled = xcalloc((size_t)PV, sizeof *ep->scaled);
        for (int32_t v = 0; v < PV; v++) {
            ep->scaled[v].act = (int64_t)ceil((double)ep->cost[v].act / ep->scale);
            ep->scaled[v].ckpt = (int64_t)ceil((double)ep->cost[v].ckpt / ep->scale);
            ep->scaled[v].wact = (int64_t)ceil((double)ep->cost[v].wact / ep->scale);
            ep->scaled[v].ckpt_layers =
                (int64_t)ceil((double)ep->cost[v].ckpt_layers / ep->scale);
        }
        ep->plan_syn = arena_plan(p, ep->scaled, 1);
    }
}

/* Plans everything the generated files say about p (P, V, M >= 1). */
static void emit_plan(EmitPlan *ep, Diag *d, const Pipeline *p, const char *source)
{
    memset(ep, 0, sizeof *ep);
    ep->p = p;
    ep->source = source;
    ep->idx = opindex_build(p);
    ep->have_mlp = mlp_shape(p, &ep->mlp, ep->why, sizeof ep->why) == 0;
    ep->plan_mlp = ep->have_mlp ? arena_plan(p, ep->mlp.sizes, 1) : NULL;
    plan_synthetic(ep);
    ep->cp = comm_plan(p);
    SimResult *sr = simulate(p);
    ep->sim_ms = sr && !sr->stuck ? sr->makespan_ms : -1;
    ep->host_link_ranks = (int32_t)fmin(ir_cost(p, 0, 0, COST_HOST_LINK_RANKS), INT32_MAX);
    sim_free(sr);
    ep->rows = xcalloc((size_t)p->P, sizeof *ep->rows);
    for (int32_t s = 0; s < p->P; s++)
        ep->rows[s] = plan_rows(ep, d, s);
}

static void emit_plan_free(EmitPlan *ep)
{
    for (int32_t s = 0; s < ep->p->P; s++)
        free(ep->rows[s]);
    free(ep->rows);
    opindex_free(ep->idx);
    free(ep->cost);
    free(ep->scaled);
    if (ep->plan_syn != ep->plan_cost)
        arena_plan_free(ep->plan_syn);
    arena_plan_free(ep->plan_cost);
    arena_plan_free(ep->plan_mlp);
    comm_plan_free(ep->cp);
    if (ep->have_mlp)
        mlp_shape_free(&ep->mlp);
}

/* ---- the writers: one per generated file ---------------------------------------------- */

/* program.h: the declarations the files share. */
static void write_program_h(const EmitPlan *ep, StrBuf *h)
{
    const Pipeline *p = ep->p;
    header(h, ep->source, "declarations shared by the rank files and main.c");
    sb_puts(h, "#ifndef PIPEC_PROGRAM_H\n#define PIPEC_PROGRAM_H\n\n#include \"piperun.h\"\n\n");
    for (int32_t s = 0; s < p->P; s++)
        sb_printf(h, "extern const PrOp pr_rank_%d_ops[%u];\nint pr_rank_%d(PrRank *r);\n", s,
                  p->stages[s].n ? p->stages[s].n : 1, s);
    sb_puts(h, "\n#endif\n");
}

/* Flags as the named constants of runtime/piperun.h joined by `|`, or 0. */
static void put_flags(StrBuf *b, unsigned flags)
{
#define FLAG(x) {x, #x}
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {FLAG(PR_HAS_R), FLAG(PR_HAS_W), FLAG(PR_HAS_SI), FLAG(PR_HAS_LW),
                 FLAG(PR_WAIT_SI)};
#undef FLAG
    bool any = false;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (flags & names[k].bit) {
            sb_printf(b, "%s%s", any ? " | " : "", names[k].name);
            any = true;
        }
    if (!any)
        sb_puts(b, "0");
}

/* "{a, b, c, d}": one row of piece offsets or boundaries. */
static void put_row(StrBuf *b, const int64_t *x, int n)
{
    sb_putc(b, '{');
    for (int k = 0; k < n; k++)
        sb_printf(b, "%s%lld", k ? ", " : "", (long long)x[k]);
    sb_putc(b, '}');
}

/* "SEP.NAME = {[PR_MLP] = {...}, [PR_SYNTHETIC] = {...}}": one per-workload row of n. */
static void put_rows(StrBuf *b, const char *sep, const char *name, const int64_t *mlp,
                     const int64_t *syn, int n)
{
    sb_printf(b, "%s.%s = {[PR_MLP] = ", sep, name);
    put_row(b, mlp, n);
    sb_puts(b, ", [PR_SYNTHETIC] = ");
    put_row(b, syn, n);
    sb_putc(b, '}');
}

/* "SEP.NAME = {[PR_MLP] = mlp, [PR_SYNTHETIC] = syn}": one per-workload field. */
static void put_pair(StrBuf *b, const char *sep, const char *name, int64_t mlp, int64_t syn)
{
    sb_printf(b, "%s.%s = {[PR_MLP] = %lld, [PR_SYNTHETIC] = %lld}", sep, name,
              (long long)mlp, (long long)syn);
}

/* One PrOp initialiser: op i of rank s, with designated fields and named flags. */
static void write_op_row(const EmitPlan *ep, StrBuf *b, int32_t s, uint32_t i)
{
    const Pipeline *p = ep->p;
    const Op *o = &p->stages[s].ops[i];
    const EmitOpRow *r = &ep->rows[s][i];
    const ArenaRank *am = ep->plan_mlp ? &ep->plan_mlp->rank[s] : NULL;
    const ArenaRank *as = &ep->plan_syn->rank[s];
    char nm[32];
    sb_printf(b, "    /* %u: %s */\n    [%u] = {.kind = %s, .chunk = %u, .flags = ", i,
              op_name(nm, sizeof nm, o->kind, o->mb, o->chunk), i, kind_enum(o->kind),
              o->chunk);
    put_flags(b, r->flags);
    sb_printf(b, ", .vstage = %d, .mb = %u, .nso_before = %u,\n      .cost_ms = ",
              ir_vstage(p, s, o->chunk), o->mb, r->nso_before);
    put_double(b, r->cost_ms);
    sb_puts(b, ", .cost_bytes = ");
    put_double(b, r->cost_bytes);
    if (r->link_ms > 0) {
        sb_puts(b, ", .link_ms = ");
        put_double(b, r->link_ms);
    }
    sb_printf(b, ", .line = %u,", r->line);
    static const int64_t none[PR_PIECES] = {-1, -1, -1, -1};
    put_rows(b, "\n      ", "at", am ? am->at[i] : none, as->at[i], PR_PIECES);
    put_pair(b, ",\n      ", "held", am ? am->held[i] : 0, as->held[i]);
    put_pair(b, ", ", "mem_alloc", am ? am->alloc[i] : 0, as->alloc[i]);
    put_pair(b, ", ", "mem_free", am ? am->freed[i] : 0, as->freed[i]);
    sb_puts(b, "},\n");
}

/* The straight-line function of rank s: ops in listed order, with the receives before
 * and the sends after them that the comm lowering places. */
static void write_rank_fn(const EmitPlan *ep, StrBuf *b, int32_t s)
{
    const Pipeline *p = ep->p;
    const StageOps *so = &p->stages[s];
    const CommPlan *cp = ep->cp;
    sb_printf(b, "/* One iteration of rank %d: ops in listed order, with the receives "
                 "before and the\n * sends after them that the comm lowering places. */\n",
              s);
    sb_printf(b, "int pr_rank_%d(PrRank *r)\n{\n", s);
    uint32_t it = cp ? cp->start[s] : 0, end = cp ? cp->start[s + 1] : 0;
    for (uint32_t i = 0; i < so->n; i++) {
        char nm[32];
        for (; it < end && cp->items[it].pos == i && cp->items[it].kind == COMM_RECV; it++) {
            const CommMsg *m = &cp->msgs[cp->items[it].msg];
            const Op *po = &p->stages[m->src].ops[m->src_pos];
            sb_printf(b, "    PR_CHECK(pr_recv(r, %u, %u)); /* from rank %u: %s */\n", m->src,
                      cp->items[it].msg, m->src,
                      op_name(nm, sizeof nm, po->kind, po->mb, po->chunk));
        }
        sb_printf(b, "    PR_CHECK(pr_op(r, %u)); /* %s */\n", i,
                  op_name(nm, sizeof nm, so->ops[i].kind, so->ops[i].mb, so->ops[i].chunk));
        for (; it < end && cp->items[it].pos == i; it++) {
            const CommMsg *m = &cp->msgs[cp->items[it].msg];
            const Op *co = &p->stages[m->dst].ops[m->dst_pos];
            sb_printf(b, "    PR_CHECK(pr_send(r, %u, %u)); /* to rank %u: %s */\n", m->dst,
                      cp->items[it].msg, m->dst,
                      op_name(nm, sizeof nm, co->kind, co->mb, co->chunk));
        }
    }
    sb_puts(b, "    return 0;\n}\n");
}

/* rank_S.c: the op table of rank s and its program. */
static void write_rank_c(const EmitPlan *ep, StrBuf *b, int32_t s)
{
    const StageOps *so = &ep->p->stages[s];
    char what[64];
    snprintf(what, sizeof what, "the program of rank %d", s);
    header(b, ep->source, what);
    sb_puts(b, "#include \"program.h\"\n\n");
    sb_printf(b, "/* Ops of rank %d in program order (runtime/piperun.h PrOp); per-workload "
                 "fields\n * are indexed by PR_MLP and PR_SYNTHETIC. */\n",
              s);
    sb_printf(b, "const PrOp pr_rank_%d_ops[%u] = {\n", s, so->n ? so->n : 1);
    for (uint32_t i = 0; i < so->n; i++)
        write_op_row(ep, b, s, i);
    if (!so->n)
        sb_puts(b, "    {0},\n");
    sb_puts(b, "};\n\n");
    write_rank_fn(ep, b, s);
}

/* main.c's rank table: program, ops, arena bytes, planned peak live bytes, host_bw,
 * p2p. */
static void write_ranks_table(const EmitPlan *ep, StrBuf *b)
{
    const Pipeline *p = ep->p;
    sb_printf(b, "static const PrRankDesc ranks[%d] = {\n", p->P);
    for (int32_t s = 0; s < p->P; s++) {
        const ArenaRank *am = ep->plan_mlp ? &ep->plan_mlp->rank[s] : NULL;
        const ArenaRank *as = &ep->plan_syn->rank[s];
        double bw = ir_cost(p, s, 0, COST_HOST_BW), p2p = ir_cost(p, s, 0, COST_P2P);
        sb_printf(b, "    [%d] = {.run = pr_rank_%d, .ops = pr_rank_%d_ops, .nops = %u,", s, s,
                  s, p->stages[s].n);
        put_pair(b, "\n      ", "arena_bytes", am ? am->size : 0, as->size);
        put_pair(b, ",\n      ", "peak_live_bytes", am ? am->peak_live : 0, as->peak_live);
        sb_puts(b, ",\n      .host_bw = ");
        put_double(b, isfinite(bw) ? bw : 0);
        sb_puts(b, ", .p2p_ms = ");
        put_double(b, p2p);
        sb_puts(b, "},\n");
    }
    sb_puts(b, "};\n\n");
}

/* main.c's virtual-stage table: owner, the mlp blocks and region sizes, and each
 * workload's piece boundaries (its plan's ArenaPlan.from). */
static void write_vstages_table(const EmitPlan *ep, StrBuf *b)
{
    const Pipeline *p = ep->p;
    int32_t PV = p->P * p->V;
    sb_printf(b, "static const PrVstage vstages[%d] = {\n", PV);
    for (int32_t v = 0; v < PV; v++) {
        int32_t s, c;
        ir_owner(p, v, &s, &c);
        const ArenaSizes *z = ep->have_mlp ? &ep->mlp.sizes[v] : NULL;
        static const int64_t none[PR_PIECES + 1] = {0};
        const int64_t *fm = ep->plan_mlp ? ep->plan_mlp->from[v] : none;
        sb_printf(b, "    [%d] = {.rank = %d, .chunk = %d, .layers = %d, .act = %lld, "
                     ".ckpt = %lld, .wact = %lld,", v, s, c,
                  ep->have_mlp ? ep->mlp.layers[v] : 0, (long long)(z ? z->act : 0),
                  (long long)(z ? z->ckpt : 0), (long long)(z ? z->wact : 0));
        put_rows(b, "\n      ", "from", fm, ep->plan_syn->from[v], PR_PIECES + 1);
        sb_puts(b, "},\n");
    }
    sb_puts(b, "};\n\n");
}

/* The payload of message m: a hidden state F(v,m) -> F(v+1,m), a gradient
 * B(v+1,m) -> B(v,m), else a token. */
static const char *msg_payload(const CommMsg *m, const Op *po, const Op *co, int32_t pv,
                               int32_t cv)
{
    if (!m->sync && po->kind == OP_F && co->kind == OP_F && cv == pv + 1 && po->mb == co->mb)
        return "PR_PAY_ACT";
    if (!m->sync && po->kind == OP_B && co->kind == OP_B && cv + 1 == pv && po->mb == co->mb)
        return "PR_PAY_GRAD";
    return "PR_PAY_TOKEN";
}

/* main.c's message table: the comm lowering's messages. */
static void write_msgs_table(const EmitPlan *ep, StrBuf *b)
{
    const Pipeline *p = ep->p;
    uint32_t nmsgs = ep->cp ? ep->cp->nmsgs : 0;
    sb_printf(b, "static const PrMsg msgs[%u] = {\n", nmsgs ? nmsgs : 1);
    for (uint32_t k = 0; k < nmsgs; k++) {
        const CommMsg *m = &ep->cp->msgs[k];
        const Op *po = &p->stages[m->src].ops[m->src_pos];
        const Op *co = &p->stages[m->dst].ops[m->dst_pos];
        int32_t pv = ir_vstage(p, (int32_t)m->src, po->chunk);
        int32_t cv = ir_vstage(p, (int32_t)m->dst, co->chunk);
        sb_printf(b, "    [%u] = {.src = %u, .dst = %u, .from_kind = %s, .to_kind = %s, "
                     ".payload = %s,\n      .from_v = %d, .from_mb = %u, .to_v = %d, "
                     ".to_mb = %u},\n", k, m->src, m->dst, kind_enum(po->kind),
                  kind_enum(co->kind), msg_payload(m, po, co, pv, cv), pv, po->mb, cv, co->mb);
    }
    if (!nmsgs)
        sb_puts(b, "    {0},\n");
    sb_puts(b, "};\n\n");
}

/* main.c's PrProgram: shape, tables, the model workload (or why it cannot run). */
static void write_program_struct(const EmitPlan *ep, StrBuf *b)
{
    const Pipeline *p = ep->p;
    const MlpShape *mlp = &ep->mlp;
    sb_puts(b, "static const PrProgram program = {\n    .abi = PIPERUN_ABI,\n    .name = ");
    put_cstr(b, p->name ? p->name : "pipeline");
    sb_puts(b, ",\n    .source = ");
    put_cstr(b, ep->source);
    sb_printf(b, ",\n    .version = \"%s\",\n", PIPEC_VERSION);
    sb_printf(b, "    .P = %d, .M = %d, .V = %d,\n    .send_mode = PR_SEND_EAGER,\n", p->P,
              p->M, p->V);
    sb_printf(b, "    .ranks = ranks, .vstages = vstages, .msgs = msgs, .nmsgs = %u,\n",
              ep->cp ? ep->cp->nmsgs : 0);
    if (ep->have_mlp) {
        sb_printf(b, "    .mlp_vocab = %d, .mlp_C = %d, .mlp_L = %d, .mlp_T = %d, .mlp_B = %d,\n",
                  mlp->vocab, mlp->C, mlp->L, mlp->T, mlp->B);
        if (mlp->arch)
            sb_printf(b, "    .model_arch = %d, .model_heads = %d, .model_kv_heads = %d, "
                         ".model_ffn = %d,\n", mlp->arch, mlp->heads, mlp->kv_heads, mlp->ffn);
    } else {
        sb_puts(b, "    .mlp_unavailable = ");
        put_cstr(b, ep->why);
        sb_puts(b, ",\n");
        if (mlp->arch) /* the workload's name in messages */
            sb_printf(b, "    .model_arch = %d,\n", mlp->arch);
    }
    sb_puts(b, "    .synthetic_scale = ");
    put_double(b, ep->scale);
    sb_puts(b, ",\n    .sim_ms = ");
    put_double(b, ep->sim_ms);
    sb_printf(b, ",\n    .host_link_ranks = %d", ep->host_link_ranks);
    if (p->data_parallel > 1) /* docs/runtime.md "Data parallelism" */
        sb_printf(b, ",\n    .data_parallel = %d, .zero = %d", (int)p->data_parallel,
                  (int)p->zero);
    sb_puts(b, ",\n};\n\n");
}

/* main.c: the program's tables and main. */
static void write_main_c(const EmitPlan *ep, StrBuf *b)
{
    header(b, ep->source, "the program's tables and main");
    sb_puts(b, "#include \"program.h\"\n\n");
    write_ranks_table(ep, b);
    write_vstages_table(ep, b);
    sb_puts(b, "/* Messages (comm lowering): producer (v, mb) on rank src to consumer (v, mb) "
               "on rank dst. */\n");
    write_msgs_table(ep, b);
    write_program_struct(ep, b);
    sb_puts(b, "int main(int argc, char **argv)\n{\n"
               "    return pr_main(&program, argc, argv);\n}\n");
}

/* Makefile: builds the program against libpiperun. */
static void write_makefile(const EmitPlan *ep, StrBuf *mk, const char *progname)
{
    sb_puts(mk, "# Generated by pipec " PIPEC_VERSION " from ");
    put_comment(mk, ep->source);
    sb_printf(mk, ".\n# make PIPERUN_INC=<dir of piperun.h> PIPERUN_LIB=<dir of libpiperun.a>\n"
                  "CC ?= cc\nCFLAGS ?= -std=c11 -O2 -Wall -Wextra\nPIPERUN_INC ?= .\n"
                  "PIPERUN_LIB ?= .\nSRC = main.c");
    for (int32_t s = 0; s < ep->p->P; s++)
        sb_printf(mk, " rank_%d.c", s);
    sb_printf(mk, "\n\n%s: $(SRC) program.h\n\t$(CC) $(CFLAGS) -I$(PIPERUN_INC) -o $@ $(SRC) "
                  "$(PIPERUN_LIB)/libpiperun.a -lopenblas -lpthread -lm\n",
              progname);
}

int emit_c(Diag *d, const Pipeline *p, const char *source, EmitOut *out)
{
    memset(out, 0, sizeof *out);
    out->progname = safe_name(p->name);
    if (p->P < 1 || p->V < 1 || p->M < 1) {
        diag_error(d, p->loc, DIAG_VALUE, "nothing to generate: the pipeline has no ops");
        return 1;
    }
    EmitPlan ep;
    emit_plan(&ep, d, p, source);
    write_program_h(&ep, add_file(out, "program.h"));
    for (int32_t s = 0; s < p->P; s++) {
        char fname[32];
        snprintf(fname, sizeof fname, "rank_%d.c", s);
        write_rank_c(&ep, add_file(out, fname), s);
    }
    write_main_c(&ep, add_file(out, "main.c"));
    write_makefile(&ep, add_file(out, "Makefile"), out->progname);
    emit_plan_free(&ep);
    return 0;
}

void emit_out_free(EmitOut *out)
{
    for (uint32_t i = 0; i < out->n; i++) {
        free(out->files[i].name);
        sb_free(&out->files[i].text);
    }
    free(out->files);
    free(out->progname);
    memset(out, 0, sizeof *out);
}

int emit_write(const EmitOut *out, const char *dir, const char **failed)
{
    *failed = NULL;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -1;
    for (uint32_t i = 0; i < out->n; i++) {
        char *path = xasprintf("%s/%s", dir, out->files[i].name);
        const StrBuf *t = &out->files[i].text;
        int rc = write_file_atomic(path, t->s ? t->s : "", t->len);
        free(path);
        if (rc != 0) {
            *failed = out->files[i].name;
            return -1;
        }
    }
    return 0;
}
