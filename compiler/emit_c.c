/* emit_c.c - C code generation for the CPU backend (see emit_c.h). */
#define _POSIX_C_SOURCE 200809L
#include "emit_c.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm.h"
#include "memory.h"
#include "mlp_layout.h"
#include "opindex.h"
#include "opsem.h"
#include "sim.h"
#include "tf_layout.h"

/* Limits of the CPU mlp workload (docs/runtime.md): a model whose parameters or whose
 * per-rank arena exceed these is refused. */
#define MLP_MAX_PARAM_BYTES (1ll << 30)
#define MLP_MAX_ARENA_BYTES (4ll << 30)
/* The synthetic workload's arenas are scaled down to at most this many bytes. */
#define SYNTH_MAX_ARENA (64ll << 20)

ArenaSizes mlp_region_sizes(int vocab, int C, int T, int B, int nl, bool embed, bool head)
{
    /* The runtime's own layout (runtime/mlp_layout.h), in bytes. */
    MlpLayout a = mlp_layout((size_t)vocab, (size_t)C, (size_t)T, (size_t)B, (size_t)nl, embed,
                             head);
    return (ArenaSizes){(int64_t)(a.act * sizeof(float)), (int64_t)(a.ckpt * sizeof(float)),
                        (int64_t)(a.wact * sizeof(float))};
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

int mlp_shape(const Pipeline *p, MlpShape *out, char *why, size_t why_n)
{
    memset(out, 0, sizeof *out);
    const Entity *m = p->model;
    if (!m) {
        snprintf(why, why_n, "the pipeline has no `model`");
        return -1;
    }
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
    const Field *af = field_find(m->fields, m->nfields, "arch");
    const char *arch = af && af->val.kind == VAL_IDENT ? af->val.str : "gpt";
    out->arch = !strcmp(arch, "gpt") ? TF_GPT : !strcmp(arch, "llama") ? TF_LLAMA : 0;
    if (out->arch) {
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
        out->ffn = out->arch == TF_LLAMA ? 256 * (int)ceil(8.0 * out->C / 3.0 / 256.0)
                                         : 4 * out->C;
        if (field_find(m->fields, m->nfields, "ffn") &&
            !model_int(m, "ffn", 1, 1 << 24, &out->ffn)) {
            snprintf(why, why_n, "model %s: `ffn` must be a whole number", m->name);
            return -1;
        }
        if (out->C % out->heads || out->heads % out->kv_heads ||
            (out->arch == TF_LLAMA && (out->C / out->heads) % 2)) {
            snprintf(why, why_n, "model %s: heads must divide hidden, kv_heads heads, and a "
                     "llama head size must be even", m->name);
            return -1;
        }
    }
    int32_t PV = p->P * p->V;
    out->layers = xcalloc((size_t)PV, sizeof *out->layers);
    if (p->partition_set && !p->partition_even) {
        if ((int32_t)p->npartition != PV) {
            snprintf(why, why_n, "the partition lists %u entries, the mlp workload needs one "
                     "per virtual stage (%d)", p->npartition, PV);
            goto fail;
        }
        long long sum = 0;
        for (int32_t v = 0; v < PV; v++) {
            double x = p->partition[v];
            if (!(x >= 0) || x != floor(x) || x > 1 << 24) {
                snprintf(why, why_n, "the mlp workload runs whole layers only (partition entry "
                         "%d is %g)", v, x);
                goto fail;
            }
            out->layers[v] = (int)x;
            sum += (long long)x;
        }
        if (sum != out->L) {
            snprintf(why, why_n, "the partition sums to %lld layers, the model has %d", sum,
                     out->L);
            goto fail;
        }
    } else {
        for (int32_t v = 0; v < PV; v++)
            out->layers[v] = (int)((long long)(v + 1) * out->L / PV - (long long)v * out->L / PV);
    }
    /* Size limits: parameters and activations. */
    double C = out->C, V = out->vocab;
    double params = out->L * (2 * C + 8 * C * C + 5 * C) + 2 * V * C + V + 2 * C;
    if (out->arch) /* qkv, proj, the MLP, norms and biases per layer; wte, wpe, head */
        params = out->L * (C * (C + 2.0 * C * out->kv_heads / out->heads) + C * C +
                           3.0 * C * out->ffn + 8 * C + 3.0 * out->ffn) +
                 2 * V * C + (double)out->T * C + 2 * C;
    if (params * 8 > (double)MLP_MAX_PARAM_BYTES) {
        snprintf(why, why_n, "model %s is too large for the CPU %s workload (%.3g parameters)",
                 m->name, out->arch ? arch : "mlp", params);
        goto fail;
    }
    out->sizes = xcalloc((size_t)PV, sizeof *out->sizes);
    for (int32_t v = 0; v < PV; v++) {
        double per = (double)out->B * out->T * (out->layers[v] * 20.0 * C + 8 * V + 8 * C);
        if (!out->arch && per * 4 > (double)MLP_MAX_ARENA_BYTES) {
            snprintf(why, why_n, "model %s: activations of one micro-batch are too large for "
                     "the CPU mlp workload", m->name);
            goto fail;
        }
        if (out->arch) {
            TfDims d = {out->arch, out->vocab, out->C, out->heads, out->kv_heads, out->ffn,
                        out->T, out->B};
            TfLayout a = tf_layout(&d, out->layers[v], v == 0, v == PV - 1);
            if ((double)a.act * 4 > (double)MLP_MAX_ARENA_BYTES) {
                snprintf(why, why_n, "model %s: activations of one micro-batch are too large "
                         "for the CPU %s workload", m->name, arch);
                goto fail;
            }
            out->sizes[v] = (ArenaSizes){(int64_t)(a.act * sizeof(float)),
                                         (int64_t)(a.ckpt * sizeof(float)),
                                         (int64_t)(a.wact * sizeof(float))};
            continue;
        }
        out->sizes[v] = mlp_region_sizes(out->vocab, out->C, out->T, out->B, out->layers[v],
                                         v == 0, v == PV - 1);
    }
    return 0;
fail:
    mlp_shape_free(out);
    return -1;
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

static const char *kind_enum(int k)
{
    static const char *const n[OP_NKINDS] = {"PR_F",  "PR_B",  "PR_W",  "PR_R",
                                             "PR_SO", "PR_SI", "PR_OG", "PR_LW",
                                             "PR_R" /* RO: an R at its list position */};
    return (unsigned)k < OP_NKINDS ? n[k] : "PR_F";
}

/* %.17g, but always a valid C double constant. */
static void put_double(StrBuf *b, double x)
{
    if (!isfinite(x))
        x = 0;
    sb_printf(b, "%.17g", x);
}

/* ---- the generator ------------------------------------------------------------------ */

typedef struct VmFacts {
    uint8_t has[OP_NKINDS];
} VmFacts;

int emit_c(Diag *d, const Pipeline *p, const char *source, EmitOut *out)
{
    memset(out, 0, sizeof *out);
    int32_t P = p->P, V = p->V, M = p->M, PV = P * V;
    out->progname = safe_name(p->name);
    if (P < 1 || V < 1 || M < 1) {
        diag_error(d, p->loc, DIAG_VALUE, "nothing to generate: the pipeline has no ops");
        return 1;
    }
    OpIndex *idx = opindex_build(p);
    /* Which kinds exist for each (v,m). */
    VmFacts *vmf = xcalloc((size_t)PV * (size_t)M, sizeof *vmf);
    for (int32_t s = 0; s < P; s++)
        for (uint32_t i = 0; i < p->stages[s].n; i++) {
            const Op *o = &p->stages[s].ops[i];
            if (o->chunk >= V || o->mb >= (uint32_t)M)
                continue;
            vmf[(size_t)ir_vstage(p, s, o->chunk) * M + o->mb].has[o->kind] = 1;
        }

    /* The mlp plan (when the model is runnable) and the synthetic plan. */
    char why[200] = "";
    MlpShape mlp;
    bool have_mlp = mlp_shape(p, &mlp, why, sizeof why) == 0;
    ArenaPlan *plan_mlp = have_mlp ? arena_plan(p, mlp.sizes, 1) : NULL;
    ArenaSizes *cost = arena_sizes_from_costs(p);
    ArenaPlan *plan_cost = arena_plan(p, cost, 1);
    int64_t maxa = 0;
    for (int32_t s = 0; s < P; s++)
        if (plan_cost->rank[s].size > maxa)
            maxa = plan_cost->rank[s].size;
    double scale = maxa > SYNTH_MAX_ARENA ? (double)maxa / (double)SYNTH_MAX_ARENA : 1.0;
    ArenaPlan *plan_syn = plan_cost;
    ArenaSizes *scaled = NULL;
    if (scale > 1.0) {
        scaled = xcalloc((size_t)PV, sizeof *scaled);
        for (int32_t v = 0; v < PV; v++) {
            scaled[v].act = (int64_t)ceil((double)cost[v].act / scale);
            scaled[v].ckpt = (int64_t)ceil((double)cost[v].ckpt / scale);
            scaled[v].wact = (int64_t)ceil((double)cost[v].wact / scale);
        }
        plan_syn = arena_plan(p, scaled, 1);
    }
    CommPlan *cp = comm_plan(p);
    SimResult *sr = simulate(p);
    double sim_ms = sr && !sr->stuck ? sr->makespan_ms : -1;
    sim_free(sr);

    /* program.h: the declarations the files share. */
    StrBuf *h = add_file(out, "program.h");
    header(h, source, "declarations shared by the rank files and main.c");
    sb_puts(h, "#ifndef PIPEC_PROGRAM_H\n#define PIPEC_PROGRAM_H\n\n#include \"piperun.h\"\n\n");
    for (int32_t s = 0; s < P; s++)
        sb_printf(h, "extern const PrOp pr_rank_%d_ops[%u];\nint pr_rank_%d(PrRank *r);\n", s,
                  p->stages[s].n ? p->stages[s].n : 1, s);
    sb_puts(h, "\n#endif\n");

    /* One file per rank. */
    for (int32_t s = 0; s < P; s++) {
        const StageOps *so = &p->stages[s];
        char fname[32];
        snprintf(fname, sizeof fname, "rank_%d.c", s);
        StrBuf *b = add_file(out, fname);
        char what[64];
        snprintf(what, sizeof what, "the program of rank %d", s);
        header(b, source, what);
        sb_puts(b, "#include \"program.h\"\n\n");
        sb_printf(b, "/* Ops of rank %d in program order: kind, chunk, flags, vstage, mb, SOs "
                     "before,\n * arena offset {mlp, synthetic}, bytes {mlp, synthetic}, cost ms, "
                     "cost bytes, line,\n * offset of the part after the split {mlp, "
                     "synthetic}, split bytes {mlp, synthetic},\n * bytes allocated at the "
                     "start {mlp, synthetic}, bytes freed at the end {mlp, synthetic}. */\n",
                  s);
        sb_printf(b, "const PrOp pr_rank_%d_ops[%u] = {\n", s, so->n ? so->n : 1);
        uint32_t nso = 0;
        double *walk_alloc = xmalloc((so->n ? so->n : 1) * sizeof *walk_alloc);
        double *walk_freed = xmalloc((so->n ? so->n : 1) * sizeof *walk_freed);
        mem_walk_ops(p, idx, s, walk_alloc, walk_freed);
        OpCosts *occ = xmalloc((size_t)V * sizeof *occ);
        for (int32_t c = 0; c < V; c++)
            opsem_costs(p, s, c, &occ[c]);
        for (uint32_t i = 0; i < so->n; i++) {
            const Op *o = &so->ops[i];
            int32_t v = ir_vstage(p, s, o->chunk);
            const VmFacts *f = &vmf[(size_t)v * M + o->mb];
            /* The waits the runtime obeys, from the op semantics table: its SI, its
             * chunk's LW, and (allocating ops) every SO listed before it. */
            OpKind ok = (OpKind)o->kind;
            bool has_si = f->has[OP_SO] && f->has[OP_SI];
            unsigned flags = (f->has[OP_R] || f->has[OP_RO] ? 1u : 0) | (f->has[OP_W] ? 2u : 0) |
                             (has_si ? 4u : 0) |
                             (opsem_waits_on(ok, OP_LW) && vmf[(size_t)v * M].has[OP_LW] ? 8u : 0) |
                             (opsem_waits_on(ok, OP_SI) && has_si ? 16u : 0);
            uint32_t so_wait = op_sem[ok].mem == MEM_ALLOC ? nso : 0;
            /* Duration and cost-model bytes: the op semantics table (opsem.h) over the
             * walk's amounts (memory.h), as the simulator computes them. */
            unsigned has = OP_IS_CHUNKWIDE(o->kind) ? 0 : mem_vm_has(idx, v, o->mb);
            const OpCosts *oc = &occ[o->chunk];
            double moved = opsem_moved((OpKind)o->kind, oc, walk_alloc[i], walk_freed[i]);
            double ms = opsem_duration((OpKind)o->kind, oc, has, moved);
            double bytes = moved > 0 ? moved : walk_alloc[i];
            uint32_t line = 0, col = 0;
            diag_linecol(d, o->loc, &line, &col);
            int64_t om = plan_mlp ? plan_mlp->rank[s].off[i] : -1;
            int64_t hm = plan_mlp ? plan_mlp->rank[s].held[i] : 0;
            int64_t hs = plan_syn->rank[s].held[i];
            int64_t rm = plan_mlp ? plan_mlp->rank[s].rest[i] : -1;
            int64_t sm = plan_mlp ? plan_mlp->rank[s].split[i] : 0;
            char nm[32];
            sb_printf(b, "    {%s, %u, %u, %d, %u, %u, {%lld, %lld}, {%lld, %lld}, ",
                      kind_enum(o->kind), o->chunk, flags, v, o->mb, so_wait, (long long)om,
                      (long long)plan_syn->rank[s].off[i], (long long)hm, (long long)hs);
            put_double(b, ms);
            sb_puts(b, ", ");
            put_double(b, bytes);
            sb_printf(b, ", %u, {%lld, %lld}, {%lld, %lld}, {%lld, %lld}, {%lld, %lld}}, "
                         "/* %u: %s */\n", line,
                      (long long)rm, (long long)plan_syn->rank[s].rest[i], (long long)sm,
                      (long long)plan_syn->rank[s].split[i],
                      (long long)(plan_mlp ? plan_mlp->rank[s].alloc[i] : 0),
                      (long long)plan_syn->rank[s].alloc[i],
                      (long long)(plan_mlp ? plan_mlp->rank[s].freed[i] : 0),
                      (long long)plan_syn->rank[s].freed[i], i,
                      op_name(nm, sizeof nm, o->kind, o->mb, o->chunk));
            if (o->kind == OP_SO)
                nso++;
        }
        free(walk_alloc);
        free(walk_freed);
        free(occ);
        if (!so->n)
            sb_puts(b, "    {0},\n");
        sb_puts(b, "};\n\n");
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
                sb_printf(b, "    PR_CHECK(pr_recv(r, %u, %u)); /* from rank %u: %s */\n",
                          m->src, cp->items[it].msg, m->src,
                          op_name(nm, sizeof nm, po->kind, po->mb, po->chunk));
            }
            sb_printf(b, "    PR_CHECK(pr_op(r, %u)); /* %s */\n", i,
                      op_name(nm, sizeof nm, so->ops[i].kind, so->ops[i].mb, so->ops[i].chunk));
            for (; it < end && cp->items[it].pos == i; it++) {
                const CommMsg *m = &cp->msgs[cp->items[it].msg];
                const Op *co = &p->stages[m->dst].ops[m->dst_pos];
                sb_printf(b, "    PR_CHECK(pr_send(r, %u, %u)); /* to rank %u: %s */\n",
                          m->dst, cp->items[it].msg, m->dst,
                          op_name(nm, sizeof nm, co->kind, co->mb, co->chunk));
            }
        }
        sb_puts(b, "    return 0;\n}\n");
    }

    /* main.c: the program's tables and main. */
    StrBuf *b = add_file(out, "main.c");
    header(b, source, "the program's tables and main");
    sb_puts(b, "#include \"program.h\"\n\n");
    sb_puts(b, "/* Ranks: program, ops, arena bytes {mlp, synthetic}, planned peak live bytes "
               "{mlp, synthetic},\n * host_bw bytes/s, p2p ms. */\n");
    sb_printf(b, "static const PrRankDesc ranks[%d] = {\n", P);
    for (int32_t s = 0; s < P; s++) {
        double bw = ir_cost(p, s, 0, COST_HOST_BW), p2p = ir_cost(p, s, 0, COST_P2P);
        sb_printf(b, "    {pr_rank_%d, pr_rank_%d_ops, %u, {%lld, %lld}, {%lld, %lld}, ", s, s,
                  p->stages[s].n, (long long)(plan_mlp ? plan_mlp->rank[s].size : 0),
                  (long long)plan_syn->rank[s].size,
                  (long long)(plan_mlp ? plan_mlp->rank[s].peak_live : 0),
                  (long long)plan_syn->rank[s].peak_live);
        put_double(b, isfinite(bw) ? bw : 0);
        sb_puts(b, ", ");
        put_double(b, p2p);
        sb_puts(b, "},\n");
    }
    sb_puts(b, "};\n\n");
    sb_puts(b, "/* Virtual stages: rank, chunk, mlp blocks, mlp region bytes act/ckpt/wact. */\n");
    sb_printf(b, "static const PrVstage vstages[%d] = {\n", PV);
    for (int32_t v = 0; v < PV; v++) {
        int32_t s, c;
        ir_owner(p, v, &s, &c);
        sb_printf(b, "    {%d, %d, %d, %lld, %lld, %lld},\n", s, c, have_mlp ? mlp.layers[v] : 0,
                  (long long)(have_mlp ? mlp.sizes[v].act : 0),
                  (long long)(have_mlp ? mlp.sizes[v].ckpt : 0),
                  (long long)(have_mlp ? mlp.sizes[v].wact : 0));
    }
    sb_puts(b, "};\n\n");
    uint32_t nmsgs = cp ? cp->nmsgs : 0;
    sb_puts(b, "/* Messages (comm lowering): src, dst, producer kind, consumer kind, payload,\n"
               " * producer (v, mb), consumer (v, mb). */\n");
    sb_printf(b, "static const PrMsg msgs[%u] = {\n", nmsgs ? nmsgs : 1);
    for (uint32_t k = 0; k < nmsgs; k++) {
        const CommMsg *m = &cp->msgs[k];
        const Op *po = &p->stages[m->src].ops[m->src_pos];
        const Op *co = &p->stages[m->dst].ops[m->dst_pos];
        int32_t pv = ir_vstage(p, (int32_t)m->src, po->chunk);
        int32_t cv = ir_vstage(p, (int32_t)m->dst, co->chunk);
        const char *pay = "PR_PAY_TOKEN";
        if (!m->sync && po->kind == OP_F && co->kind == OP_F && cv == pv + 1 && po->mb == co->mb)
            pay = "PR_PAY_ACT";
        else if (!m->sync && po->kind == OP_B && co->kind == OP_B && cv + 1 == pv &&
                 po->mb == co->mb)
            pay = "PR_PAY_GRAD";
        sb_printf(b, "    {%u, %u, %s, %s, %s, %d, %u, %d, %u},\n", m->src, m->dst,
                  kind_enum(po->kind), kind_enum(co->kind), pay, pv, po->mb, cv, co->mb);
    }
    if (!nmsgs)
        sb_puts(b, "    {0},\n");
    sb_puts(b, "};\n\n");
    sb_puts(b, "static const PrProgram program = {\n    .abi = PIPERUN_ABI,\n    .name = ");
    put_cstr(b, p->name ? p->name : "pipeline");
    sb_puts(b, ",\n    .source = ");
    put_cstr(b, source);
    sb_printf(b, ",\n    .version = \"%s\",\n", PIPEC_VERSION);
    sb_printf(b, "    .P = %d, .M = %d, .V = %d,\n    .send_mode = PR_SEND_EAGER,\n", P, M, V);
    sb_printf(b, "    .ranks = ranks, .vstages = vstages, .msgs = msgs, .nmsgs = %u,\n", nmsgs);
    if (have_mlp) {
        sb_printf(b, "    .mlp_vocab = %d, .mlp_C = %d, .mlp_L = %d, .mlp_T = %d, .mlp_B = %d,\n",
                  mlp.vocab, mlp.C, mlp.L, mlp.T, mlp.B);
        if (mlp.arch)
            sb_printf(b, "    .model_arch = %d, .model_heads = %d, .model_kv_heads = %d, "
                         ".model_ffn = %d,\n", mlp.arch, mlp.heads, mlp.kv_heads, mlp.ffn);
    } else {
        sb_puts(b, "    .mlp_unavailable = ");
        put_cstr(b, why);
        sb_puts(b, ",\n");
        if (mlp.arch) /* the workload's name in messages */
            sb_printf(b, "    .model_arch = %d,\n", mlp.arch);
    }
    sb_puts(b, "    .synthetic_scale = ");
    put_double(b, scale);
    sb_puts(b, ",\n    .sim_ms = ");
    put_double(b, sim_ms);
    sb_puts(b, ",\n};\n\nint main(int argc, char **argv)\n{\n"
               "    return pr_main(&program, argc, argv);\n}\n");

    /* Build files. */
    StrBuf *mk = add_file(out, "Makefile");
    sb_puts(mk, "# Generated by pipec " PIPEC_VERSION " from ");
    put_comment(mk, source);
    sb_printf(mk, ".\n# make PIPERUN_INC=<dir of piperun.h> PIPERUN_LIB=<dir of libpiperun.a>\n"
                  "CC ?= cc\nCFLAGS ?= -std=c11 -O2 -Wall -Wextra\nPIPERUN_INC ?= .\n"
                  "PIPERUN_LIB ?= .\nSRC = main.c");
    for (int32_t s = 0; s < P; s++)
        sb_printf(mk, " rank_%d.c", s);
    sb_printf(mk, "\n\n%s: $(SRC) program.h\n\t$(CC) $(CFLAGS) -I$(PIPERUN_INC) -o $@ $(SRC) "
                  "$(PIPERUN_LIB)/libpiperun.a -lopenblas -lpthread -lm\n",
              out->progname);

    free(vmf);
    opindex_free(idx);
    free(cost);
    free(scaled);
    if (plan_syn != plan_cost)
        arena_plan_free(plan_syn);
    arena_plan_free(plan_cost);
    arena_plan_free(plan_mlp);
    comm_plan_free(cp);
    if (have_mlp)
        mlp_shape_free(&mlp);
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

int emit_write(const EmitOut *out, const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -1;
    for (uint32_t i = 0; i < out->n; i++) {
        char *path = xasprintf("%s/%s", dir, out->files[i].name);
        const StrBuf *t = &out->files[i].text;
        int rc = write_file_atomic(path, t->s ? t->s : "", t->len);
        free(path);
        if (rc != 0)
            return -1;
    }
    return 0;
}
