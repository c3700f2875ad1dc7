/* model_shape.c - the model workload's shape and region sizes (model_shape.h). */
#include "model_shape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "mlp_layout.h"
#include "opsem.h"
#include "tf_layout.h"
#include "util.h"

/* Limits of the CPU mlp workload (docs/runtime.md): a model whose parameters or whose
 * per-rank arena exceed these is refused. */
#define MLP_MAX_PARAM_BYTES (1ll << 30)
#define MLP_MAX_ARENA_BYTES (4ll << 30)

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
    /* The runtime's own layout (runtime/models/mlp_layout.h), in bytes. */
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
    /* The arch picks the workload: gpt and llama run runtime/models/transformer.h (the cost
     * model's default arch is gpt), mlp runtime/models/mlp.h. */
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

/* Which virtual stages recompute layer by layer (out->per_layer, allocated), and whether
 * the model workload can run them (docs/runtime.md "Layer-granular recomputation"): the
 * gpt and llama workloads only, every micro-batch of the virtual stage recomputed (one
 * layout serves its every region), and no W (the layers' weight gradients are taken
 * inside B, before the next layer's rebuild). Returns 0, or -1 with the reason in why. */
static int mlp_per_layer(const Pipeline *p, MlpShape *out, char *why, size_t why_n)
{
    int32_t PV = p->P * p->V;
    out->per_layer = xcalloc((size_t)PV, sizeof *out->per_layer);
    for (int32_t v = 0; v < PV; v++) {
        int32_t s, c;
        ir_owner(p, v, &s, &c);
        RematUse u;
        opsem_remat_use(p, s, c, &u);
        if (!u.per_layer)
            continue;
        out->per_layer[v] = true;
        const char *no = !out->arch ? "the mlp workload rebuilds a whole virtual stage"
                         : u.nw > 0 ? "its B and W are split (the workloads take a layer's "
                                      "weight gradients inside B)"
                         : u.nr != u.nf ? "it recomputes some of its micro-batches only"
                                        : NULL;
        if (no) {
            snprintf(why, why_n, "virtual stage %d recomputes layer by layer, which the CPU "
                     "model workload does not run: %s", v, no);
            return -1;
        }
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
        TfLayout a = tf_layout_remat(&d, out->layers[v], v == 0, v == PV - 1,
                                     out->per_layer[v]);
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
    if (mlp_layers(p, out, why, why_n) != 0 || mlp_per_layer(p, out, why, why_n) != 0 ||
        mlp_sizes(p, m, out, why, why_n) != 0) {
        mlp_shape_free(out);
        return -1;
    }
    return 0;
}

void mlp_shape_free(MlpShape *s)
{
    free(s->layers);
    free(s->per_layer);
    free(s->sizes);
    s->layers = NULL;
    s->per_layer = NULL;
    s->sizes = NULL;
}

void model_shape_of(const Pipeline *p, WorkloadShape *out)
{
    out->why[0] = 0;
    out->ok = mlp_shape(p, &out->s, out->why, sizeof out->why) == 0;
}

void model_shape_free(WorkloadShape *m)
{
    mlp_shape_free(&m->s);
    m->ok = false;
}

int64_t mlp_workspace(const Pipeline *p, const MlpShape *sh, int32_t s)
{
    int32_t PV = p->P * p->V;
    int64_t ws = 0;
    for (uint32_t i = 0; i < p->stages[s].n; i++) {
        const Op *o = &p->stages[s].ops[i];
        if (o->kind >= OP_NKINDS || opsem_has_bit((OpKind)o->kind) != VM_HAS_R)
            continue; /* an R or RO: the F of its (v,m) keeps only the checkpoint */
        int32_t v = ir_vstage(p, s, o->chunk);
        int64_t need = sh->arch ? sh->sizes[v].act
                                : (int64_t)(sizeof(float) *
                                            mlp_scratch_floats((size_t)sh->vocab, (size_t)sh->C,
                                                               (size_t)sh->T, (size_t)sh->B,
                                                               v == PV - 1));
        ws = need > ws ? need : ws;
    }
    return (ws + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
}
