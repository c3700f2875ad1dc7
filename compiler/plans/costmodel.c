/* costmodel.c - costs derived from a model shape and a device; see costmodel.h.
 *
 * Every formula below is stated, with its source, in docs/cost-model.md; the section
 * names there match the comments here. Per-token quantities are written with T = s*b
 * tokens per micro-batch: a unit's activation bytes are T times its bytes per token. */
#include "costmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "units.h"
#include "util.h"

/* ---- reading model and device blocks ------------------------------------------------ */

#define MAX_SHAPE 2147483647.0

/* A plain positive integer in [1, 2^31). */
static int read_int(Diag *d, const Field *f, const char *what, double *out)
{
    const Value *v = &f->val;
    if (v->kind != VAL_NUM || v->unit != UNIT_NONE || !(v->num >= 1) || v->num >= MAX_SHAPE ||
        v->num != floor(v->num)) {
        diag_error(d, f->loc, DIAG_VALUE, "%s field '%s' must be a positive integer", what, f->key);
        return 1;
    }
    *out = v->num;
    return 0;
}

/* A number in the unit class `unit` (a bare number counts as ms, bytes or bytes/s, as
 * docs/spec.md "Units" says), >= lo (or > lo when strict). */
static int read_num(Diag *d, const Field *f, UnitClass unit, double lo, bool strict, double *out)
{
    const Value *v = &f->val;
    if (v->kind != VAL_NUM || (v->unit != UNIT_NONE && v->unit != unit) || !isfinite(v->num)) {
        diag_error(d, f->loc, DIAG_VALUE, "device field '%s' must be %s", f->key,
                   unit_class_name(unit));
        return 1;
    }
    if (strict ? !(v->num > lo) : !(v->num >= lo)) {
        diag_error(d, f->loc, DIAG_VALUE, "device field '%s' must be %s %g", f->key,
                   strict ? "greater than" : "at least", lo);
        return 1;
    }
    *out = v->num;
    return 0;
}

/* Reports field f unknown to a `what` entity ("model", "device"): the error with a
 * suggestion among keys[n], then a note listing them all. Returns 1 (an error). */
static int unknown_field(Diag *d, const Field *f, const char *what, const char *const *keys,
                         size_t n)
{
    char hint[96];
    diag_error(d, f->loc, DIAG_NAME, "unknown %s field '%s'%s", what, f->key,
               diag_suggest(hint, sizeof hint, f->key, keys, n));
    StrBuf all = {0};
    for (size_t i = 0; i < n; i++)
        sb_printf(&all, "%s%s", i ? " " : "", keys[i]);
    diag_note(d, f->loc, "%s fields: %s", what, sb_str(&all));
    sb_free(&all);
    return 1;
}

/* An identifier among names[n]; *out gets its index. */
static int read_choice(Diag *d, const Field *f, const char *const *names, int n, int *out)
{
    if (f->val.kind == VAL_IDENT)
        for (int i = 0; i < n; i++)
            if (strcmp(f->val.str, names[i]) == 0) {
                *out = i;
                return 0;
            }
    StrBuf b = {0};
    for (int i = 0; i < n; i++)
        sb_printf(&b, "%s%s", i ? ", " : "", names[i]);
    diag_error(d, f->loc, DIAG_VALUE, "model field '%s' must be one of: %s", f->key, b.s);
    sb_free(&b);
    return 1;
}

/* True when key is the last field with that key (earlier ones were overridden). */
static bool field_live(const Entity *e, uint32_t i)
{
    return field_find(e->fields, e->nfields, e->fields[i].key) == &e->fields[i];
}

/* The names of ModelArch, in its order (ARCH_GPT, the default, first). */
static const char *const archs[] = {"gpt", "llama", "mlp"};

const char *model_arch_name(const Entity *m)
{
    const Field *f = field_find(m->fields, m->nfields, "arch");
    return f && f->val.kind == VAL_IDENT ? f->val.str : archs[ARCH_GPT];
}

/* What model_read's field loop saw: which required fields (layers hidden heads vocab
 * seq), which optional ones, and where (into e->fields) the fields a later message
 * points at are. */
typedef struct ModelSeen {
    bool seen[5], has_ffn, has_kv, has_effn;
    const Field *topk_f, *heads_f, *kv_f, *hidden_f;
} ModelSeen;

/* model_read's second half, after the field loop found err errors: the required
 * fields, then (when there is no error) the defaults (kv_heads, ffn, expert_ffn) and the
 * checks between fields. Returns the number of errors, err included. */
static int model_finish(Diag *d, const Entity *e, ModelShape *m, const ModelSeen *sn, int err)
{
    static const char *const req[] = {"layers", "hidden", "heads", "vocab", "seq"};
    for (int i = 0; i < 5; i++) {
        if (sn->seen[i])
            continue;
        if (i == 2 && m->arch == ARCH_MLP) { /* no attention: heads unused */
            m->heads = 1;
            continue;
        }
        diag_error(d, e->loc, DIAG_VALUE, "model '%s' has no '%s'", e->name, req[i]);
        err++;
    }
    if (err)
        return err;
    if (!sn->has_kv)
        m->kv_heads = m->heads;
    if (!sn->has_ffn) {
        if (m->arch == ARCH_LLAMA) /* Llama: 2/3 of 4h, rounded up to a multiple of 256 */
            m->ffn = 256.0 * ceil(8.0 * m->hidden / 3.0 / 256.0);
        else
            m->ffn = 4.0 * m->hidden;
    }
    if (!sn->has_effn)
        m->expert_ffn = m->ffn;
    if (m->topk > m->experts) {
        diag_error(d, sn->topk_f ? sn->topk_f->loc : e->loc, DIAG_VALUE,
                   "model '%s': topk %g exceeds its %g experts", e->name, m->topk, m->experts);
        err++;
    }
    if (m->arch != ARCH_MLP) {
        if (fmod(m->hidden, m->heads) != 0) {
            /* point at whichever of the two was written last (an override block) */
            const Field *at = sn->hidden_f > sn->heads_f ? sn->hidden_f : sn->heads_f;
            diag_error(d, at ? at->loc : e->loc, DIAG_VALUE,
                       "model '%s': %g heads do not divide hidden size %g", e->name, m->heads,
                       m->hidden);
            err++;
        }
        if (fmod(m->heads, m->kv_heads) != 0) {
            diag_error(d, sn->kv_f ? sn->kv_f->loc : e->loc, DIAG_VALUE,
                       "model '%s': %g key/value heads do not divide %g heads", e->name,
                       m->kv_heads, m->heads);
            err++;
        }
    }
    return err;
}

int model_read(Diag *d, const Entity *e, ModelShape *m)
{
    static const char *const attns[] = {"flash", "eager"};
    static const char *const dtypes[] = {"bf16", "fp16", "fp32"};
    static const double dtype_bytes[] = {2, 2, 4};
    memset(m, 0, sizeof *m);
    m->arch = ARCH_GPT;
    m->attention = ATTN_FLASH;
    m->mbs = 1;
    m->elem = 2;
    m->experts = m->topk = 1;
    int err = 0, k;
    ModelSeen sn = {0};
    for (uint32_t i = 0; i < e->nfields; i++) {
        const Field *f = &e->fields[i];
        if (!field_live(e, i))
            continue;
        const char *key = f->key;
        if (!strcmp(key, "arch")) {
            if (!(err += read_choice(d, f, archs, 3, &k)))
                m->arch = (ModelArch)k;
        } else if (!strcmp(key, "attention")) {
            if (!(err += read_choice(d, f, attns, 2, &k)))
                m->attention = (AttnImpl)k;
        } else if (!strcmp(key, "dtype")) {
            if (!(err += read_choice(d, f, dtypes, 3, &k)))
                m->elem = dtype_bytes[k];
        } else if (!strcmp(key, "layers")) {
            err += read_int(d, f, "model", &m->layers);
            sn.seen[0] = true;
        } else if (!strcmp(key, "hidden")) {
            err += read_int(d, f, "model", &m->hidden);
            sn.seen[1] = true;
            sn.hidden_f = f;
        } else if (!strcmp(key, "heads")) {
            err += read_int(d, f, "model", &m->heads);
            sn.seen[2] = true;
            sn.heads_f = f;
        } else if (!strcmp(key, "vocab")) {
            err += read_int(d, f, "model", &m->vocab);
            sn.seen[3] = true;
        } else if (!strcmp(key, "seq")) {
            err += read_int(d, f, "model", &m->seq);
            sn.seen[4] = true;
        } else if (!strcmp(key, "kv_heads")) {
            err += read_int(d, f, "model", &m->kv_heads);
            sn.has_kv = true;
            sn.kv_f = f;
        } else if (!strcmp(key, "ffn")) {
            err += read_int(d, f, "model", &m->ffn);
            sn.has_ffn = true;
        } else if (!strcmp(key, "mbs")) {
            err += read_int(d, f, "model", &m->mbs);
        } else if (!strcmp(key, "experts")) {
            err += read_int(d, f, "model", &m->experts);
        } else if (!strcmp(key, "topk")) {
            err += read_int(d, f, "model", &m->topk);
            sn.topk_f = f;
        } else if (!strcmp(key, "expert_ffn")) {
            err += read_int(d, f, "model", &m->expert_ffn);
            sn.has_effn = true;
        } else if (!strcmp(key, "sequence_parallel")) {
            const Value *v = &f->val;
            bool ok = (v->kind == VAL_NUM && v->unit == UNIT_NONE && (v->num == 0 || v->num == 1)) ||
                      (v->kind == VAL_IDENT && (!strcmp(v->str, "true") || !strcmp(v->str, "false")));
            if (!ok) {
                diag_error(d, f->loc, DIAG_VALUE, "model field 'sequence_parallel' must be 0 or 1");
                err++;
            } else {
                m->seqpar = v->kind == VAL_NUM ? v->num == 1 : v->str[0] == 't';
            }
        } else {
            static const char *const keys[] = {"arch", "layers", "hidden", "heads", "kv_heads",
                                               "ffn", "vocab", "seq", "mbs", "dtype",
                                               "attention", "sequence_parallel", "experts",
                                               "topk", "expert_ffn"};
            err += unknown_field(d, f, "model", keys, ARRAY_LEN(keys));
        }
    }
    return model_finish(d, e, m, &sn, err);
}

int device_read(Diag *d, const Entity *e, DeviceSpec *dv)
{
    memset(dv, 0, sizeof *dv);
    dv->efficiency = 1.0;
    dv->mem_bw = dv->host_bw = dv->peer_bw = dv->dp_bw = INFINITY;
    dv->host_link_ranks = 1;
    int err = 0;
    bool has_peak = false;
    for (uint32_t i = 0; i < e->nfields; i++) {
        const Field *f = &e->fields[i];
        if (!field_live(e, i))
            continue;
        const char *key = f->key;
        if (!strcmp(key, "memory")) {
            err += read_num(d, f, UNIT_SIZE, 0, true, &dv->memory);
            dv->has_memory = true;
        } else if (!strcmp(key, "reserved")) {
            err += read_num(d, f, UNIT_SIZE, 0, false, &dv->reserved);
        } else if (!strcmp(key, "peak_tflops")) {
            double tf = 0;
            if (f->val.kind != VAL_NUM || f->val.unit != UNIT_NONE || !(f->val.num > 0) ||
                !isfinite(f->val.num)) {
                diag_error(d, f->loc, DIAG_VALUE, "device field 'peak_tflops' must be a positive "
                                                  "number (dense TFLOP/s)");
                err++;
            } else {
                tf = f->val.num;
                dv->peak_flops = tf * 1e12;
                has_peak = true;
            }
        } else if (!strcmp(key, "efficiency")) {
            const Value *v = &f->val;
            if (v->kind != VAL_NUM || (v->unit != UNIT_NONE && v->unit != UNIT_FRACTION) ||
                !(v->num > 0 && v->num <= 1)) {
                diag_error(d, f->loc, DIAG_VALUE, "device field 'efficiency' must be in (0, 1]");
                err++;
            } else {
                dv->efficiency = v->num;
            }
        } else if (!strcmp(key, "mem_bw")) {
            err += read_num(d, f, UNIT_BW, 0, true, &dv->mem_bw);
        } else if (!strcmp(key, "host_bw")) {
            err += read_num(d, f, UNIT_BW, 0, true, &dv->host_bw);
        } else if (!strcmp(key, "peer_bw")) {
            err += read_num(d, f, UNIT_BW, 0, true, &dv->peer_bw);
        } else if (!strcmp(key, "host_link_ranks")) {
            err += read_int(d, f, "device", &dv->host_link_ranks);
        } else if (!strcmp(key, "host_latency")) {
            err += read_num(d, f, UNIT_TIME, 0, false, &dv->host_latency);
        } else if (!strcmp(key, "peer_latency")) {
            err += read_num(d, f, UNIT_TIME, 0, false, &dv->peer_latency);
        } else if (!strcmp(key, "dp_bw")) {
            err += read_num(d, f, UNIT_BW, 0, true, &dv->dp_bw);
        } else if (!strcmp(key, "dp_latency")) {
            err += read_num(d, f, UNIT_TIME, 0, false, &dv->dp_latency);
        } else {
            static const char *const keys[] = {"memory", "reserved", "peak_tflops",
                                               "efficiency", "mem_bw", "host_bw",
                                               "host_latency", "host_link_ranks", "peer_bw",
                                               "peer_latency", "dp_bw", "dp_latency"};
            err += unknown_field(d, f, "device", keys, ARRAY_LEN(keys));
        }
    }
    if (!err && !has_peak) {
        diag_error(d, e->loc, DIAG_VALUE, "device '%s' has no 'peak_tflops'", e->name);
        err++;
    }
    if (!err && dv->has_memory && !(dv->reserved < dv->memory)) {
        const Field *f = field_find(e->fields, e->nfields, "reserved");
        diag_error(d, f ? f->loc : e->loc, DIAG_VALUE,
                   "device '%s' reserves all of its memory", e->name);
        err++;
    }
    return err;
}

/* ---- the cost model --------------------------------------------------------------- */

/* Ring collectives, Patarasuk and Yuan 2009 (bandwidth-optimal all-reduce: a
 * reduce-scatter then an all-gather, D-1 steps each, every rank sending (D-1)/D of the
 * buffer in each half); NCCL's ring algorithm moves the same volumes (nccl-tests
 * PERFORMANCE.md: bus bandwidth = algorithm bandwidth x 2(D-1)/D for all-reduce,
 * (D-1)/D for reduce-scatter and all-gather). */
double cm_ring_allreduce_ms(double bytes, double D, double bw, double latency)
{
    return 2 * cm_ring_gather_ms(bytes, D, bw, latency);
}

double cm_ring_gather_ms(double bytes, double D, double bw, double latency)
{
    if (!(D > 1) || !(bytes > 0))
        return 0;
    double t = (D - 1) * latency;
    if (isfinite(bw) && bw > 0)
        t += (D - 1) / D * bytes / bw * 1e3;
    return t;
}

/* Adam's update (Kingma and Ba 2015, Algorithm 1) is elementwise: per parameter it reads
 * the gradient and the fp32 master weight, momentum and variance (ZeRO §3.1's K = 12) and
 * writes the three back plus the 16-bit copy of the parameter. A handful of FLOPs per
 * 26 + g bytes: memory-bound, so its time is bytes / memory bandwidth (the roofline of
 * Williams, Waterman and Patterson 2009). */
double cm_opt_bytes_per_param(const CmDp *dp)
{
    return 12 + dp->grad_bytes + 12 + 2;
}

/* ZeRO §7.2 (communication analysis): plain data parallelism all-reduces the gradients
 * (2Ψ per rank); P_os and P_os+g reduce-scatter them and all-gather the updated
 * parameters (Ψ + Ψ: Megatron-LM's distributed optimizer, `--use-distributed-optimizer`,
 * does the same for zero 1); P_os+g+p all-gathers the parameters before the forward and
 * again before the backward and reduce-scatters the gradients (3Ψ). Ψ counts elements:
 * gradients travel in grad_dtype (g bytes), parameters in 16 bits. */
void cm_dp_time(double params, const CmDp *dp, double dp_bw, double dp_latency,
                double mem_bw, CmDpTime *out)
{
    memset(out, 0, sizeof *out);
    double D = dp->D;
    if (!(D > 1) || !(params > 0))
        return;
    double grads = params * dp->grad_bytes, weights = params * 2;
    double updated = dp->zero >= 1 ? params / D : params;
    out->reduce = dp->zero == 0 ? cm_ring_allreduce_ms(grads, D, dp_bw, dp_latency)
                                : cm_ring_gather_ms(grads, D, dp_bw, dp_latency);
    if (isfinite(mem_bw) && mem_bw > 0)
        out->opt = updated * cm_opt_bytes_per_param(dp) / mem_bw * 1e3;
    if (dp->zero == 1 || dp->zero == 2)
        out->gather_after = cm_ring_gather_ms(weights, D, dp_bw, dp_latency);
    if (dp->zero == 3)
        out->gather_op = cm_ring_gather_ms(weights, D, dp_bw, dp_latency);
}

void cm_dp_time_moe(double params, double eparams, int32_t E, const CmDp *dp, double dp_bw,
                    double dp_latency, double mem_bw, CmDpTime *out)
{
    eparams = fmin(fmax(eparams, 0), fmax(params, 0));
    if (!(eparams > 0) || E <= 1) { /* the experts are on every replica: one collective */
        cm_dp_time(params, dp, dp_bw, dp_latency, mem_bw, out);
        return;
    }
    cm_dp_time(params - eparams, dp, dp_bw, dp_latency, mem_bw, out);
    CmDp edp = *dp;
    edp.D = dp->D / E > 1 ? dp->D / E : 1;
    CmDpTime e;
    cm_dp_time(eparams, &edp, dp_bw, dp_latency, mem_bw, &e);
    if (!(edp.D > 1) && dp->D > 1 && isfinite(mem_bw) && mem_bw > 0) /* no replica to share with: a whole step */
        e.opt = eparams * cm_opt_bytes_per_param(dp) / mem_bw * 1e3;
    out->reduce += e.reduce;
    out->opt += e.opt;
    out->gather_after += e.gather_after;
    out->gather_op += e.gather_op;
}

CmDp cm_dp(const Pipeline *p)
{
    GradDtype g = (unsigned)p->grad_dtype < GRAD_NDTYPES ? p->grad_dtype : GRAD_BF16;
    return (CmDp){p->data_parallel > 1 ? p->data_parallel : 1, p->zero,
                  (double)grad_dtype_bytes[g]};
}

/* Model states, Rajbhandari et al. 2020 (ZeRO) §5 (Fig. 1): a 16-bit parameter (2), a
 * gradient (g: 2, or 4 with fp32 main gradients, Megatron-LM) and K = 12 bytes of fp32
 * master copy, momentum and variance; ZeRO stage 1 shards the K bytes over the D
 * replicas, stage 2 the gradients too, stage 3 the parameters too. */
double cm_weight_bytes(double params, const CmDp *dp)
{
    const double param_b = 2, opt_b = 12;
    double D = dp->D > 1 ? dp->D : 1, g = dp->grad_bytes;
    switch (dp->zero) {
    case 1: return (param_b + g) * params + opt_b * params / D;
    case 2: return param_b * params + (g + opt_b) * params / D;
    case 3: return (param_b + g + opt_b) * params / D;
    default: return (param_b + g + opt_b) * params;
    }
}

/* ZeRO-3 (Rajbhandari et al. 2020 §5.3) all-gathers each layer's parameters before its
 * forward and backward and frees them after: the largest layer's 16-bit copy is held
 * on top of the shards. */
double cm_zero3_gather_bytes(double layer_params, const CmDp *dp)
{
    return dp->zero == 3 && dp->D > 1 ? 2.0 * layer_params : 0;
}

/* ms for a number of GEMM FLOPs on one rank: FLOPs / (peak * efficiency)
 * (Narayanan et al. 2021 §5.1 count FLOPs; the efficiency is the achieved fraction). */
static double gemm_ms(const CostModel *cm, double flops)
{
    if (!cm->has_device)
        return 0;
    return flops / (cm->device.peak_flops * cm->device.efficiency) * 1e3;
}

/* ms for memory-bound elementwise work moving `bytes` through device memory. */
static double traffic_ms(const CostModel *cm, double bytes)
{
    if (!cm->has_device || !isfinite(cm->device.mem_bw))
        return 0;
    return bytes / cm->device.mem_bw * 1e3;
}

/* What a unit is made of, per micro-batch, before the policy is applied. */
typedef struct UnitParts {
    double lin;       /* GEMM forward FLOPs on this rank (after /t) */
    double core;      /* attention-core forward FLOPs on this rank (QK^T and AV) */
    double act;       /* bytes kept by F without recomputation */
    double core_act;  /* bytes of the attention core (dropped by selective) */
    double cmb_drop;  /* bytes dropped by cmb (norm + activation function + multiply) */
    double cmb_bytes; /* memory traffic of recomputing the cmb operators */
    double mlp_keep;  /* bytes kept by the mlp policy (the MLP input), MLP units only */
    double wio;       /* bytes of linear inputs + output gradients (for wact) */
    double params;    /* parameters on this rank */
    double eparams;   /* of which in experts (N/E experts, after /t) */
    double expert;    /* one expert's parameters (after /t) */
    double a2a_bytes; /* bytes each expert-parallel all-to-all sends from this rank */
    bool transformer; /* an attention or MLP unit (the policies act on these only) */
    /* The keep policy's tensors of this unit (docs/cost-model.md "Keep-sets"): bytes kept
     * when kept, and what rebuilding each costs when it is not: GEMM FLOPs (on this rank)
     * and memory traffic (bytes); 0 for the other unit's tensors. core and attn_out are
     * rebuilt by one operator (the attention core), charged once. */
    double kbytes[KEEP_N], kflops[KEEP_N], ktraffic[KEEP_N];
    double keep_base; /* bytes kept whatever the set: the layer input (attention unit) */
    double work;      /* transient working memory while an F, B or R of it runs, bytes */
} UnitParts;

/* A mixture-of-experts MLP half-unit (docs/cost-model.md "Mixture of experts"): norm,
 * router (N logits per token), dispatch of every token to K of the N experts, the
 * experts' MLPs of width F (SwiGLU for llama, GELU for gpt), combine. Per token:
 * FLOPs 2hN (router) + K x the dense MLP's with f = F (only the K routed experts run:
 * Fedus et al. 2022 §2; Lepikhin et al. 2021, GShard §2); activations the norm's as in
 * the dense MLP, the router's fp32 softmax (4N) and the fp32 weights and int64 indices of
 * its K choices (12K), and for each of the K routed copies the expert's input (e h), its
 * MLP tensors as in the dense MLP and its output (e h, which the combine's weighting
 * needs for the router's gradient). Experts are tensor-parallel like the dense MLP
 * (Megatron-core's default expert tensor parallelism = t) and split over the E
 * expert-parallel ranks, N/E each. */
static void moe_parts(const CostModel *cm, UnitParts *o)
{
    const ModelShape *m = &cm->model;
    double T = m->seq * m->mbs, e = m->elem, h = m->hidden, t = cm->tp, N = m->experts,
           K = m->topk, F = m->expert_ffn, E = cm->ep;
    double hr = m->seqpar ? h / t : h;
    bool llama = m->arch == ARCH_LLAMA;
    double router = 4 * N + 12 * K; /* bytes per token */
    double copy;                    /* bytes per token per routed copy */
    o->lin = T * (2 * h * N + K * (llama ? 6 : 4) * h * F / t);
    o->mlp_keep = T * e * hr;
    o->a2a_bytes = e * T * hr * K;
    if (llama) {
        copy = 2 * e * h + 4 * e * F / t;
        o->act = T * ((4 + e) * hr + router + K * copy);
        o->cmb_drop = T * (4 * hr + K * 2 * e * F / t);
        o->cmb_bytes = T * ((4 + 2 * e) * hr + K * 5 * e * F / t);
        o->wio = e * T * K * (3 * h + 3 * F) / t;
        o->expert = 3 * h * F / t;
        o->params = (h + h * N) / t;
    } else {
        double mask = m->arch == ARCH_GPT ? hr : 0;
        copy = 2 * e * h + 2 * e * F / t;
        o->act = T * (2 * e * hr + mask + router + K * copy);
        o->cmb_drop = T * (e * hr + K * e * F / t);
        o->cmb_bytes = T * (2 * e * hr + K * 2 * e * F / t);
        o->wio = e * T * K * (2 * h + 2 * F) / t;
        o->expert = (2 * h * F + F + h) / t;
        o->params = (2 * h + h * N) / t;
    }
    o->eparams = N / E * o->expert;
    o->params += o->eparams;
    /* working memory: the gradient of the K routed copies' F-wide intermediates, as the
     * dense MLP's for one copy (docs/cost-model.md "Working memory") */
    o->work = T * K * (llama ? 2 : 1) * e * F / t;
}

/* unit_parts of CM_ATTN, the attention half of a transformer layer (o cleared). */
static void attn_parts(const CostModel *cm, UnitParts *o)
{
    const ModelShape *m = &cm->model;
    double T = m->seq * m->mbs, e = m->elem, h = m->hidden, a = m->heads, s = m->seq,
           t = cm->tp;
    double kv = h * m->kv_heads / a; /* width of K and of V */
    /* activations outside the tensor-parallel regions are replicated on every rank,
     * or split over the ranks with sequence parallelism (Korthikanti §4.2.2) */
    double hr = m->seqpar ? h / t : h;
    o->transformer = true;
    if (m->arch == ARCH_MLP)
        return; /* no attention: an empty half-unit */
    double core_tok; /* attention-core bytes per token on this rank */
    if (m->attention == ATTN_FLASH)
        core_tok = 4 * a / t; /* fp32 log-sum-exp per row and head */
    else if (m->arch == ARCH_LLAMA)
        core_tok = e * a * s / t; /* softmax output */
    else
        core_tok = (2 * e + 1) * a * s / t; /* softmax, dropout mask, dropout output */
    o->lin = T * (2 * h * (h + 2 * kv) + 2 * h * h) / t; /* QKV and output projections */
    o->core = T * 4 * s * h / t;                          /* QK^T and attention x V */
    o->core_act = T * core_tok;
    o->wio = e * T * (4 * h + 2 * kv) / t;
    /* keep-sets: the layer input (e h) is always kept; the rest per tensor */
    o->keep_base = T * e * hr;
    o->kbytes[KEEP_ATTN_NORM] = T * (m->arch == ARCH_LLAMA ? 4 * hr : e * hr);
    o->ktraffic[KEEP_ATTN_NORM] = T * (m->arch == ARCH_LLAMA ? (4 + 2 * e) * hr : 2 * e * hr);
    o->kbytes[KEEP_QKV] = T * e * (h + 2 * kv) / t;
    o->kflops[KEEP_QKV] = T * 2 * h * (h + 2 * kv) / t;
    o->kbytes[KEEP_CORE] = o->core_act;
    o->kflops[KEEP_CORE] = o->core;
    o->kbytes[KEEP_ATTN_OUT] = T * e * h / t;
    o->kflops[KEEP_ATTN_OUT] = o->core;
    o->kbytes[KEEP_ATTN_MASK] = m->arch == ARCH_GPT ? T * hr : 0;
    o->ktraffic[KEEP_ATTN_MASK] = o->kbytes[KEEP_ATTN_MASK];
    /* working memory: the Q, K, V gradients the backward produces together, and
     * without flash attention the a*s*s scores before the softmax */
    o->work = T * e * (h + 2 * kv) / t + (m->attention == ATTN_EAGER ? T * e * a * s / t : 0);
    if (m->arch == ARCH_LLAMA) {
        /* RMSNorm: fp32 upcast of its input + normalized output (= QKV input);
         * Q, K, V; attention output (= output-projection input). */
        o->act = T * ((4 + e) * hr + e * (2 * h + 2 * kv) / t) + o->core_act;
        o->cmb_drop = T * 4 * hr;            /* norm recomputed from its e*h input */
        o->cmb_bytes = T * (4 + 2 * e) * hr; /* read e*h, write (4+e)*h */
        o->params = (h * (h + 2 * kv) + h * h + h) / t;
    } else {
        /* Korthikanti §4.1: LayerNorm input, QKV input, Q K V, projection input,
         * dropout mask (1 byte): 11sbh + 2sbh (LN) for e = 2, t = 1. */
        o->act = T * (2 * e * hr + hr + e * (2 * h + 2 * kv) / t) + o->core_act;
        o->cmb_drop = T * e * hr;        /* LayerNorm output */
        o->cmb_bytes = T * 2 * e * hr;   /* read and write e*h */
        o->params = (h * (h + 2 * kv) + (h + 2 * kv) + h * h + h + 2 * h) / t;
    }
}

/* unit_parts of CM_MLP, the MLP half of a transformer layer (o cleared). */
static void mlp_parts(const CostModel *cm, UnitParts *o)
{
    const ModelShape *m = &cm->model;
    double T = m->seq * m->mbs, e = m->elem, h = m->hidden, f = m->ffn, t = cm->tp;
    /* activations outside the tensor-parallel regions are replicated on every rank,
     * or split over the ranks with sequence parallelism (Korthikanti §4.2.2) */
    double hr = m->seqpar ? h / t : h;
    o->transformer = true;
    if (m->experts > 1) {
        moe_parts(cm, o);
        return;
    }
    o->lin = T * (m->arch == ARCH_LLAMA ? 6 : 4) * h * f / t;
    o->mlp_keep = T * e * hr;
    /* keep-sets: the MLP's input is the attention block's all-reduced output plus
     * the residual, rebuilt by the output projection and its all-reduce (the mlp arch
     * has no attention: its MLP input is the layer input, kept); the norm, fc1's
     * output(s) and the activation function's output(s), the dropout mask */
    if (m->arch != ARCH_MLP) {
        o->kbytes[KEEP_MLP_IN] = T * e * hr;
        o->kflops[KEEP_MLP_IN] = T * 2 * h * h / t;
    }
    o->kbytes[KEEP_MLP_NORM] = T * (m->arch == ARCH_LLAMA ? 4 * hr : e * hr);
    o->ktraffic[KEEP_MLP_NORM] = T * (m->arch == ARCH_LLAMA ? (4 + 2 * e) * hr : 2 * e * hr);
    o->kbytes[KEEP_FC1] = T * (m->arch == ARCH_LLAMA ? 2 : 1) * e * f / t;
    o->kflops[KEEP_FC1] = T * (m->arch == ARCH_LLAMA ? 4 : 2) * h * f / t;
    o->kbytes[KEEP_ACT_FN] = o->kbytes[KEEP_FC1];
    o->ktraffic[KEEP_ACT_FN] = T * (m->arch == ARCH_LLAMA ? 5 : 2) * e * f / t;
    o->kbytes[KEEP_MLP_MASK] = m->arch == ARCH_GPT ? T * hr : 0;
    o->ktraffic[KEEP_MLP_MASK] = o->kbytes[KEEP_MLP_MASK];
    if (m->arch == ARCH_MLP)
        o->keep_base = T * e * hr; /* counted on the (empty) attention unit */
    /* working memory: the gradient of the f-wide intermediate (llama: of the gate
     * and the up projection) */
    o->work = T * (m->arch == ARCH_LLAMA ? 2 : 1) * e * f / t;
    if (m->arch == ARCH_LLAMA) {
        /* RMSNorm (4+e)h; SwiGLU: gate output (SiLU input), SiLU output, up output,
         * product (down input): 4 tensors of f. */
        o->act = T * ((4 + e) * hr + 4 * e * f / t);
        o->cmb_drop = T * (4 * hr + 2 * e * f / t); /* norm; SiLU output and product */
        o->cmb_bytes = T * ((4 + 2 * e) * hr + 5 * e * f / t);
        o->wio = e * T * (3 * h + 3 * f) / t;
        o->params = (3 * h * f + h) / t;
    } else {
        /* Korthikanti §4.1: LayerNorm input, fc1 input, GELU input and output, dropout
         * mask: 19sbh + 2sbh (LN) for e = 2, f = 4h, t = 1. The mlp arch has no
         * dropout. */
        double mask = m->arch == ARCH_GPT ? hr : 0;
        o->act = T * (2 * e * hr + mask + 2 * e * f / t);
        o->cmb_drop = T * (e * hr + e * f / t);    /* LayerNorm output, GELU output */
        o->cmb_bytes = T * (2 * e * hr + 2 * e * f / t);
        o->wio = e * T * (2 * h + 2 * f) / t;
        o->params = (2 * h * f + f + h + 2 * h) / t;
    }
}

/* The parts of one unit; docs/cost-model.md "Activation bytes per unit" and "FLOPs". */
static void unit_parts(const CostModel *cm, CmUnit u, UnitParts *o)
{
    const ModelShape *m = &cm->model;
    double T = m->seq * m->mbs, e = m->elem, h = m->hidden, Vv = m->vocab, s = m->seq,
           t = cm->tp;
    /* activations outside the tensor-parallel regions are replicated on every rank,
     * or split over the ranks with sequence parallelism (Korthikanti §4.2.2) */
    double hr = m->seqpar ? h / t : h;
    memset(o, 0, sizeof *o);
    switch (u) {
    case CM_EMBED:
        /* token ids (int64) kept for the embedding's gradient; gpt adds the embedding
         * dropout mask (1 byte per element). No GEMM. */
        o->act = T * (8 + (m->arch == ARCH_GPT ? hr : 0));
        o->wio = o->act;
        o->params = (Vv * h + (m->arch == ARCH_GPT ? s * h : 0)) / t;
        return;
    case CM_HEAD: {
        /* final norm, then logits: the head's output (e bytes) and the fp32 log-softmax the
         * loss keeps (4 bytes), vocabulary-parallel over t. */
        double norm = m->arch == ARCH_LLAMA ? (4 + e) * hr : 2 * e * hr;
        o->act = T * (norm + (e + 4) * Vv / t);
        o->work = T * 4 * Vv / t; /* the loss's fp32 softmax (and its gradient) of the logits */
        o->lin = 2 * T * h * Vv / t;
        o->wio = e * T * (h + Vv) / t;
        o->params = (Vv * h + (m->arch == ARCH_LLAMA ? h : 2 * h)) / t;
        return;
    }
    case CM_ATTN:
        attn_parts(cm, o);
        return;
    case CM_MLP:
        mlp_parts(cm, o);
        return;
    }
    unreachable();
}

double cm_iteration_flops(const Pipeline *p)
{
    if (!p->cost_inputs)
        return NAN;
    CostModel cm;
    memset(&cm, 0, sizeof cm);
    cm.model = p->cost_inputs->model;
    cm.tp = p->cost_inputs->tp;
    cm.ep = 1; /* FLOPs do not depend on where the experts are */
    /* the embedding (no FLOPs), L attention and L MLP half-units, the head; each unit's
     * FLOPs are one tensor-parallel rank's share */
    static const CmUnit kinds[] = {CM_EMBED, CM_ATTN, CM_MLP, CM_HEAD};
    double fwd = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        UnitParts q;
        unit_parts(&cm, kinds[i], &q);
        double n = kinds[i] == CM_ATTN || kinds[i] == CM_MLP ? cm.model.layers : 1;
        fwd += n * (q.lin + q.core);
    }
    return 3.0 * p->M * fwd * cm.tp;
}

double cm_allreduce_ms(const CostModel *cm, double bytes)
{
    double t = cm->tp;
    if (!cm->has_device || t <= 1)
        return 0;
    double ms = 2 * (t - 1) * cm->device.peer_latency;
    if (isfinite(cm->device.peer_bw))
        ms += 2 * (t - 1) / t * bytes / cm->device.peer_bw * 1e3;
    return ms;
}

double cm_alltoall_ms(const CostModel *cm, double bytes)
{
    double E = cm->ep;
    if (!cm->has_device || E <= 1)
        return 0;
    double ms = (E - 1) * cm->device.peer_latency;
    if (isfinite(cm->device.peer_bw))
        ms += (E - 1) / E * bytes / cm->device.peer_bw * 1e3;
    return ms;
}

void cm_model_params(const CostModel *cm, double *total, double *active)
{
    CostModel one = *cm;
    one.tp = one.ep = 1;
    one.ubeg = NULL;
    UnitParts q;
    double sum = 0, idle = 0; /* idle: the experts a token does not use */
    static const CmUnit kinds[] = {CM_EMBED, CM_ATTN, CM_MLP, CM_HEAD};
    for (size_t i = 0; i < ARRAY_LEN(kinds); i++) {
        unit_parts(&one, kinds[i], &q);
        double n = kinds[i] == CM_ATTN || kinds[i] == CM_MLP ? cm->model.layers : 1;
        sum += n * q.params;
        if (kinds[i] == CM_MLP)
            idle = n * (cm->model.experts - cm->model.topk) * q.expert;
    }
    *total = sum;
    *active = sum - idle;
}

/* The keep policy on one unit (docs/cost-model.md "Keep-sets"): F keeps the layer input
 * and the tensors in `keep`; R rebuilds the others, each by its operator (the attention
 * core once for core and attn_out), and repeats the attention block's all-reduce when
 * mlp_in is rebuilt. first: an MLP unit that starts its stage keeps its input. */
static void keep_cost(const CostModel *cm, const UnitParts *q, CmUnit u, bool first,
                      uint32_t keep, CmCost *out)
{
    if (u == CM_MLP && cm->model.experts > 1) {
        /* a mixture-of-experts MLP has no per-tensor split yet (docs/cost-model.md
         * "Keep-sets"): a keep-set keeps it whole, which never understates memory */
        out->ckpt = q->act;
        return;
    }
    if (u == CM_MLP && first)
        keep |= 1u << KEEP_MLP_IN;
    double ckpt = u == CM_ATTN ? q->keep_base : 0, flops = 0, traffic = 0;
    for (int k = 0; k < KEEP_N; k++) {
        if (keep & (1u << k)) {
            ckpt += q->kbytes[k];
        } else if (q->kbytes[k] > 0 || q->kflops[k] > 0) {
            if (!(k == KEEP_ATTN_OUT && !(keep & (1u << KEEP_CORE))))
                flops += q->kflops[k];
            traffic += q->ktraffic[k];
        }
    }
    out->ckpt = fmin(ckpt, q->act);
    out->rcomm = u == CM_MLP && q->kbytes[KEEP_MLP_IN] > 0 && !(keep & (1u << KEEP_MLP_IN))
                     ? out->fcomm : 0;
    out->r = gemm_ms(cm, flops) + traffic_ms(cm, traffic) + out->rcomm;
}

/* One unit under policy pol with its argument (RecomputeDir.arg). block acts on whole
 * slices (slice_cost); a unit inside its recomputed block is a full unit. */
static void unit_cost(const CostModel *cm, CmUnit u, bool first, RecomputePolicy pol,
                      uint32_t arg, CmCost *out)
{
    UnitParts q;
    unit_parts(cm, u, &q);
    double e = cm->model.elem, T = cm->model.seq * cm->model.mbs,
           h = cm->model.seqpar ? cm->model.hidden / cm->tp : cm->model.hidden;
    memset(out, 0, sizeof *out);
    double fc = gemm_ms(cm, q.lin + q.core);
    /* Megatron (Shoeybi et al. 2019 §3, Fig. 3): an attention or MLP block ends its
     * forward with one all-reduce of its e*T*h output (g) and starts its backward with
     * one of the input gradient (f's conjugate); Lynx Fig. 1 phases 1-4. With sequence
     * parallelism they become a reduce-scatter plus an all-gather of the same volume
     * (Korthikanti §4.2.2). The compute stream idles during them. */
    if (q.transformer && q.lin > 0)
        out->fcomm = out->bcomm = cm_allreduce_ms(cm, e * T * cm->model.hidden);
    /* Mixture of experts: a dispatch and a combine all-to-all in the forward, their
     * transposes in the backward, serial in the op (docs/cost-model.md "Mixture of
     * experts"; Lepikhin et al. 2021, GShard §3.2). */
    out->a2a = q.a2a_bytes > 0 ? 2 * cm_alltoall_ms(cm, q.a2a_bytes) : 0;
    out->f = fc + out->fcomm + out->a2a;
    out->b = 2 * fc + out->bcomm + out->a2a; /* Narayanan et al. 2021 §5.1: backward = 2x forward */
    out->w = gemm_ms(cm, q.lin);
    out->act = q.act;
    out->wact = fmin(q.act, q.wio);
    out->params = q.params;
    out->eparams = q.eparams;
    out->work = q.work;
    out->ckpt = q.act;
    if (!q.transformer)
        return; /* embedding and head are never recomputed */
    switch (pol) {
    case POLICY_NONE:
        break;
    case POLICY_KEEP:
        keep_cost(cm, &q, u, first, arg, out);
        break;
    case POLICY_BLOCK:
    case POLICY_FULL:
        /* keep the layer input (Chen et al. 2016; Megatron full recomputation); an MLP
         * half-unit that starts its stage keeps its own input. */
        out->ckpt = (u == CM_ATTN || first) ? e * T * h : 0;
        out->r = out->f;
        out->rcomm = out->fcomm; /* the re-run forward repeats its all-reduce */
        break;
    case POLICY_SELECTIVE: /* Korthikanti §4.2: recompute the attention core only */
        out->ckpt = q.act - q.core_act;
        out->r = gemm_ms(cm, q.core);
        break;
    case POLICY_CMB: /* Obscura §8 / Yuan et al. 2024: norm, activation function, mul */
        out->ckpt = q.act - q.cmb_drop;
        out->r = traffic_ms(cm, q.cmb_bytes);
        break;
    case POLICY_MLP: /* Obscura §3.2: discard the MLP activations, keep its input */
        if (u == CM_MLP) {
            out->ckpt = q.mlp_keep;
            out->r = out->f;
            out->rcomm = out->fcomm;
        }
        break;
    default:
        unreachable();
    }
}

void cm_unit(const CostModel *cm, CmUnit u, bool first, RecomputePolicy pol, CmCost *out)
{
    unit_cost(cm, u, first, pol, 0, out);
}

int cm_keep_ladder(const CostModel *cm, uint32_t out[KEEP_N + 1])
{
    UnitParts a, m;
    unit_parts(cm, CM_ATTN, &a);
    unit_parts(cm, CM_MLP, &m);
    double ratio[KEEP_N];
    int idx[KEEP_N], n = 0;
    for (int k = 0; k < KEEP_N; k++) {
        double bytes = a.kbytes[k] + m.kbytes[k];
        if (!(bytes > 0))
            continue;
        double ms = gemm_ms(cm, a.kflops[k] + m.kflops[k]) +
                    traffic_ms(cm, a.ktraffic[k] + m.ktraffic[k]);
        if (k == KEEP_MLP_IN)
            ms += cm_allreduce_ms(cm, cm->model.elem * cm->model.seq * cm->model.mbs * cm->model.hidden);
        ratio[k] = ms / bytes;
        int j = n++;
        for (; j > 0 && ratio[idx[j - 1]] < ratio[k]; j--) /* stable: ties in table order */
            idx[j] = idx[j - 1];
        idx[j] = k;
    }
    out[0] = 0;
    for (int i = 0; i < n; i++)
        out[i + 1] = out[i] | 1u << idx[i];
    return n + 1;
}

static void cost_add(CmCost *acc, const CmCost *c, double k)
{
    acc->f += k * c->f;
    acc->b += k * c->b;
    acc->w += k * c->w;
    acc->r += k * c->r;
    acc->fcomm += k * c->fcomm;
    acc->bcomm += k * c->bcomm;
    acc->rcomm += k * c->rcomm;
    acc->a2a += k * c->a2a;
    acc->act += k * c->act;
    acc->ckpt += k * c->ckpt;
    acc->wact += k * c->wact;
    acc->params += k * c->params;
    acc->eparams += k * c->eparams;
    if (k > 0)
        acc->work = fmax(acc->work, c->work); /* one op runs at a time: the largest */
}

/* cm_slice with the policy's argument. block(n): the first n layers (2n half-units) of
 * the slice are fully recomputed, the rest keep everything (Megatron-LM's
 * `--recompute-method block`, docs/cost-model.md "Recomputation policies"). */
static void slice_cost(const CostModel *cm, int64_t u0, int64_t u1, bool embed, bool head,
                       RecomputePolicy pol, uint32_t arg, CmCost *out)
{
    memset(out, 0, sizeof *out);
    CmCost c;
    if (pol == POLICY_BLOCK) {
        int64_t k = u1 - u0 < 2 * (int64_t)arg ? u1 : u0 + 2 * (int64_t)arg;
        slice_cost(cm, u0, k, embed, false, POLICY_FULL, 0, out);
        slice_cost(cm, k, u1, false, head, POLICY_NONE, 0, &c);
        cost_add(out, &c, 1);
        return;
    }
    if (embed) {
        unit_cost(cm, CM_EMBED, false, pol, arg, &c);
        cost_add(out, &c, 1);
    }
    if (u1 > u0) {
        /* attention units are the even ones, MLP units the odd ones */
        int64_t na = (u1 + 1) / 2 - (u0 + 1) / 2, nm = u1 / 2 - u0 / 2;
        unit_cost(cm, CM_ATTN, false, pol, arg, &c);
        cost_add(out, &c, (double)na);
        if (u0 & 1) { /* the slice starts with an MLP half-unit */
            unit_cost(cm, CM_MLP, true, pol, arg, &c);
            cost_add(out, &c, 1);
            nm--;
        }
        unit_cost(cm, CM_MLP, false, pol, arg, &c);
        cost_add(out, &c, (double)nm);
    }
    if (head) {
        unit_cost(cm, CM_HEAD, false, pol, arg, &c);
        cost_add(out, &c, 1);
    }
}

/* Layer-granular recomputation (docs/cost-model.md "Layer-granular recomputation"): the
 * most one layer of the slice [u0, u1) rebuilds, act - ckpt over the layer's half-units
 * in the slice under the policy each has (block(n): full on the slice's first 2n
 * half-units, none after). A layer the slice cuts counts only its half in the slice;
 * the embedding and the head are never recomputed. O(layers of the slice). */
static double slice_layer_ract(const CostModel *cm, int64_t u0, int64_t u1, RecomputePolicy pol,
                               uint32_t arg)
{
    int64_t k = u1; /* block: the end of the recomputed units */
    if (pol == POLICY_BLOCK) {
        k = u1 - u0 < 2 * (int64_t)arg ? u1 : u0 + 2 * (int64_t)arg;
        pol = POLICY_FULL;
    }
    double most = 0;
    for (int64_t x0 = u0; x0 < k;) {
        int64_t x1 = (x0 / 2 + 1) * 2; /* the end of layer x0 / 2 */
        if (x1 > k)
            x1 = k;
        /* slice_cost reads an odd start as the slice's first MLP half-unit, which keeps
         * its input: right for u0; a piece starting at an odd x0 > u0 is cut at k only,
         * whose MLP half is past the recomputed units */
        CmCost c;
        slice_cost(cm, x0, x1, false, false, pol, arg, &c);
        most = fmax(most, c.act - c.ckpt);
        x0 = x1;
    }
    return most;
}

void cm_slice(const CostModel *cm, int64_t u0, int64_t u1, bool embed, bool head,
              RecomputePolicy pol, CmCost *out)
{
    slice_cost(cm, u0, u1, embed, head, pol, 0, out);
}

void cm_vstage(const CostModel *cm, int32_t v, RecomputePolicy pol, CmCost *out)
{
    cm_vstage_arg(cm, v, pol, 0, out);
}

void cm_vstage_arg(const CostModel *cm, int32_t v, RecomputePolicy pol, uint32_t arg,
                   CmCost *out)
{
    slice_cost(cm, cm->ubeg[v], cm->ubeg[v + 1], v == 0, v == cm->nv - 1, pol, arg, out);
}

double cm_p2p_ms(const CostModel *cm)
{
    if (!cm->has_device)
        return 0;
    const ModelShape *m = &cm->model;
    double bytes = m->elem * m->seq * m->mbs * m->hidden / cm->tp;
    double t = cm->device.peer_latency;
    if (isfinite(cm->device.peer_bw))
        t += bytes / cm->device.peer_bw * 1e3;
    return t;
}

void cm_set_partition(Pipeline *p, const int64_t *units, int32_t nv)
{
    free(p->partition);
    p->partition = xmalloc((size_t)(nv > 0 ? nv : 1) * sizeof *p->partition);
    for (int32_t v = 0; v < nv; v++)
        p->partition[v] = (double)units[v] / 2.0;
    p->npartition = (uint32_t)nv;
    p->partition_set = true;
    p->partition_even = false;
}

void costmodel_free(CostModel *cm)
{
    free(cm->ubeg);
    cm->ubeg = NULL;
}

/* Fills cm->ubeg from `partition`; docs/cost-model.md "Partition". Reports through d,
 * or counts the errors silently when d is NULL. */
static int read_partition(Diag *d, const Pipeline *p, CostModel *cm)
{
    int32_t nv = cm->nv;
    int64_t U = 2 * (int64_t)cm->model.layers;
    cm->ubeg = xcalloc((size_t)nv + 1, sizeof *cm->ubeg);
    if (!p->partition_set || p->partition_even) {
        int64_t q = U / nv, rem = U % nv;
        for (int32_t v = 0; v < nv; v++)
            cm->ubeg[v + 1] = cm->ubeg[v] + q + (v >= nv - rem ? 1 : 0);
        return 0;
    }
    Loc loc = p->partition_loc;
    int64_t *units = xcalloc((size_t)nv, sizeof *units);
    int bad = ir_partition_units(p, 2 * MAX_SHAPE, units);
    if (bad) {
        free(units);
        if (!d)
            return 1;
        if (bad < 0) {
            diag_error(d, loc, DIAG_VALUE, "partition has %u entries; the pipeline has %d stages",
                       p->npartition, p->P);
            if (p->V > 1)
                diag_note(d, loc, "with chunks %d, give one entry per stage or one per virtual "
                                  "stage (%d), in model order", p->V, nv);
        } else {
            diag_error(d, loc, DIAG_VALUE,
                       "partition entry %d (%g) must be a number of layers >= 0 in steps of 0.5",
                       bad - 1, p->partition[bad - 1]);
        }
        return 1;
    }
    for (int32_t v = 0; v < nv; v++)
        cm->ubeg[v + 1] = cm->ubeg[v] + units[v];
    free(units);
    if (cm->ubeg[nv] == U)
        return 0;
    if (d)
        diag_error(d, loc, DIAG_VALUE, "partition sums to %g layers; model '%s' has %g",
                   (double)cm->ubeg[nv] / 2, p->model->name, cm->model.layers);
    return 1;
}

/* Where a tensor_parallel diagnostic points: the setting, else the pipeline. */
static Loc tp_at(const Pipeline *p)
{
    return p->tp_loc.file != LOC_NONE_FILE ? p->tp_loc : p->loc;
}

/* Each tensor-parallel rank holds whole attention heads and whole key/value heads
 * (docs/cost-model.md "Notation"; Shoeybi et al. 2019 §3): t must divide a and g. Reports the
 * constraint that fails (at the setting) and, in a note at the model's field, the
 * degrees that divide both. Returns the number of errors. */
static int check_tp_heads(Diag *d, const Pipeline *p, const ModelShape *m, int32_t t)
{
    bool on_heads = fmod(m->heads, t) != 0;
    if (!on_heads && fmod(m->kv_heads, t) == 0)
        return 0;
    const Entity *e = p->model;
    if (on_heads)
        diag_error(d, tp_at(p), DIAG_VALUE,
                   "tensor_parallel %d does not divide the %g attention heads of model '%s'",
                   t, m->heads, e->name);
    else
        diag_error(d, tp_at(p), DIAG_VALUE,
                   "tensor_parallel %d divides the %g attention heads of model '%s' but not "
                   "its %g key/value heads",
                   t, m->heads, e->name, m->kv_heads);
    StrBuf ok = {0};
    int n = 0;
    for (double k = 1; k <= m->kv_heads; k++)
        if (fmod(m->heads, k) == 0 && fmod(m->kv_heads, k) == 0)
            n++;
    for (double k = 1, i = 0; k <= m->kv_heads; k++)
        if (fmod(m->heads, k) == 0 && fmod(m->kv_heads, k) == 0)
            sb_printf(&ok, "%s%g", ++i == 1 ? "" : i == n ? " or " : ", ", k);
    const Field *f = field_find(e->fields, e->nfields, on_heads ? "heads" : "kv_heads");
    if (m->kv_heads != m->heads)
        diag_note(d, f ? f->loc : e->loc,
                  "each tensor-parallel rank holds whole heads, so tensor_parallel must divide "
                  "both the %g attention heads and the %g key/value heads: %s",
                  m->heads, m->kv_heads, ok.s);
    else
        diag_note(d, f ? f->loc : e->loc,
                  "each tensor-parallel rank holds whole heads, so tensor_parallel must divide "
                  "the %g attention heads: %s",
                  m->heads, ok.s);
    sb_free(&ok);
    return 1;
}

/* `expert_parallel` E splits the model's experts over E ranks (docs/cost-model.md
 * "Mixture of experts"): E must divide the N experts, and a dense model takes only
 * E = 1. A `value` error at the setting, with a note at the model's `experts` field.
 * Returns the number of errors. */
static int check_ep_experts(Diag *d, const Pipeline *p, const ModelShape *m, int32_t E)
{
    if (E <= 1 || fmod(m->experts, E) == 0)
        return 0;
    const Entity *e = p->model;
    Loc at = p->ep_loc.file != LOC_NONE_FILE ? p->ep_loc : p->loc;
    const Field *f = field_find(e->fields, e->nfields, "experts");
    if (m->experts <= 1) {
        diag_error(d, at, DIAG_VALUE,
                   "expert_parallel %d needs a mixture-of-experts model; model '%s' has no "
                   "'experts'", E, e->name);
        return 1;
    }
    diag_error(d, at, DIAG_VALUE,
               "expert_parallel %d does not divide the %g experts of model '%s'", E,
               m->experts, e->name);
    diag_note(d, f ? f->loc : e->loc, "each expert-parallel rank holds experts / "
                                      "expert_parallel whole experts");
    return 1;
}

int costmodel_init(Diag *d, const Pipeline *p, CostModel *cm)
{
    memset(cm, 0, sizeof *cm);
    if (!p->model)
        die("costmodel_init without a model");
    int err = model_read(d, p->model, &cm->model);
    if (p->device) {
        err += device_read(d, p->device, &cm->device);
        cm->has_device = true;
    }
    cm->tp = p->tensor_parallel;
    if (cm->tp < 1) {
        diag_error(d, tp_at(p), DIAG_VALUE, "tensor_parallel must be at least 1");
        err++;
    } else if (!err && cm->model.arch != ARCH_MLP) {
        err += check_tp_heads(d, p, &cm->model, cm->tp);
    }
    cm->ep = p->expert_parallel > 1 ? p->expert_parallel : 1;
    if (!err)
        err += check_ep_experts(d, p, &cm->model, cm->ep);
    if (err)
        return err;
    cm->nv = p->P * p->V;
    if (cm->nv < 1)
        return 0;
    return read_partition(d, p, cm);
}

void costmodel_get(const Pipeline *p, CostModel *cm)
{
    memset(cm, 0, sizeof *cm);
    const CostInputs *in = p->cost_inputs;
    if (!p->model || !in)
        die("costmodel_get on a pipeline derive_costs has not costed");
    cm->model = in->model;
    cm->device = in->device;
    cm->has_device = in->has_device;
    cm->tp = in->tp;
    cm->ep = in->ep;
    cm->nv = p->P * p->V;
    if (cm->nv >= 1 && read_partition(NULL, p, cm))
        die("costmodel_get: a pass left an invalid partition");
}

/* The policy rank s's costs are derived with: its `recompute` policy; a rank with
 * policy none has no R ops, and if one is written by hand it is a full recomputation
 * (r and ckpt only matter where an R exists). */
static RecomputePolicy costed_policy(const Pipeline *p, int32_t s, uint32_t *arg)
{
    RecomputePolicy pol = p->stage_policy ? p->stage_policy[s] : POLICY_NONE;
    *arg = p->stage_policy_arg && pol != POLICY_NONE ? p->stage_policy_arg[s] : 0;
    return pol == POLICY_NONE ? POLICY_FULL : pol;
}

/* True when the user set field f in a block that applies to (rank s, virtual stage v);
 * v < 0 for rank fields. A value derive_costs put there earlier in the same run does
 * not count (act is derived before wact is asked about). */
static bool user_set(const Pipeline *p, int32_t s, int32_t v, CostField f)
{
    uint32_t bit = 1u << f;
    const CostBlock *vb = v >= 0 ? &p->vstage_costs[v] : NULL;
    return (vb && (vb->set & ~vb->derived & bit)) ||
           (p->stage_costs[s].set & ~p->stage_costs[s].derived & bit) ||
           (p->costs.set & ~p->costs.derived & bit);
}

void cm_ckpt_layers(const Pipeline *p, double *out)
{
    int32_t nv = p->P * p->V;
    for (int32_t v = 0; v < nv; v++)
        out[v] = -1;
    if (!p->model || !p->cost_inputs || nv < 1)
        return;
    CostModel cm;
    costmodel_get(p, &cm);
    for (int32_t v = 0; v < nv; v++) {
        int32_t s, c;
        ir_owner(p, v, &s, &c);
        if (user_set(p, s, v, COST_ACT) || user_set(p, s, v, COST_CKPT))
            continue;
        CmCost k;
        uint32_t arg;
        RecomputePolicy pol = costed_policy(p, s, &arg);
        slice_cost(&cm, cm.ubeg[v], cm.ubeg[v + 1], false, false, pol, arg, &k);
        out[v] = cost_quantise(COST_CKPT, k.ckpt); /* <= the ckpt put() stores */
    }
    costmodel_free(&cm);
}

/* Keeps what costmodel_init validated in the pipeline, for costmodel_get. */
static void keep_inputs(Pipeline *p, const CostModel *cm)
{
    if (!p->cost_inputs) {
        p->cost_inputs = xmalloc(sizeof *p->cost_inputs);
        p->cost_inputs_size = sizeof *p->cost_inputs;
    }
    *p->cost_inputs = (CostInputs){cm->model, cm->device, cm->has_device, cm->tp, cm->ep};
}

/* ---- derive_costs ----------------------------------------------------------------- */

/* Forgets every value derive_costs wrote, so what remains in `set` is the user's. */
static void drop_derived(CostBlock *b)
{
    for (int f = 0; f < COST_NFIELDS; f++)
        if (b->derived & (1u << f))
            b->v[f] = 0;
    b->set &= ~b->derived;
    b->derived = 0;
}

/* Stores a derived value at the resolution print writes (cost_quantise), so that what
 * `print` shows is what the simulator and the checker use. */
static void put(CostBlock *b, CostField f, double x)
{
    b->v[f] = cost_quantise(f, x);
    b->set |= 1u << f;
    b->derived |= 1u << f;
}

/* The derived per-virtual-stage fields of virtual stage v (rank s) from its cost k under
 * policy pol (arg), where the user set none: times only with a device, the all-reduce
 * fields only with tensor parallelism, and `ract` only on a layer-granular rank. */
static void put_vstage(Pipeline *p, const CostModel *cm, int32_t s, int32_t v, const CmCost *k,
                       RecomputePolicy pol, uint32_t arg)
{
    static const CostField vfields[] = {COST_F, COST_B, COST_W, COST_R,
                                        COST_ACT, COST_CKPT, COST_WACT, COST_WORK,
                                        COST_FCOMM, COST_BCOMM, COST_RCOMM};
    double val[] = {k->f, k->b, k->w, k->r, k->act, k->ckpt, k->wact, k->work, k->fcomm, k->bcomm, k->rcomm};
    for (size_t i = 0; i < ARRAY_LEN(vfields); i++) {
        CostField f = vfields[i];
        if (cost_field_unit[f] == UNIT_TIME && !cm->has_device)
            continue;
        if (i >= 8 && cm->tp <= 1)
            continue; /* no tensor parallelism: no all-reduce fields */
        if (user_set(p, s, v, f))
            continue;
        /* a user's act without wact keeps the default wact = act of docs/spec.md "Cost lookup" */
        if (f == COST_WACT && user_set(p, s, v, COST_ACT))
            continue;
        put(&p->vstage_costs[v], f, val[i]);
    }
    /* layer-granular recomputation: R holds one layer's rebuilt activations */
    if (p->stage_per_layer && p->stage_per_layer[s] && p->stage_policy[s] != POLICY_NONE &&
        !user_set(p, s, v, COST_RACT) && !user_set(p, s, v, COST_ACT) &&
        !user_set(p, s, v, COST_CKPT))
        put(&p->vstage_costs[v], COST_RACT,
            slice_layer_ract(cm, cm->ubeg[v], cm->ubeg[v + 1], pol, arg));
}

/* derive_costs with d (validating the model and device, keeping them), rederive_costs
 * without (from what was kept). */
static int derive(Diag *d, Pipeline *p)
{
    int32_t nv = p->P * p->V;
    if (p->P < 1 || p->V < 1 || !p->stage_costs || !p->vstage_costs)
        return 0;
    drop_derived(&p->costs);
    for (int32_t s = 0; s < p->P; s++)
        drop_derived(&p->stage_costs[s]);
    for (int32_t v = 0; v < nv; v++)
        drop_derived(&p->vstage_costs[v]);

    if (!p->model) {
        /* Without a model: full recomputation re-runs the forward, r = f. */
        for (int32_t v = 0; v < nv; v++) {
            int32_t s, c;
            ir_owner(p, v, &s, &c);
            if (p->stage_policy && p->stage_policy[s] != POLICY_NONE && !user_set(p, s, v, COST_R))
                put(&p->vstage_costs[v], COST_R, ir_cost(p, s, c, COST_F));
        }
        return 0;
    }

    CostModel cm;
    if (d) {
        int err = costmodel_init(d, p, &cm);
        if (err) {
            costmodel_free(&cm);
            return err;
        }
        keep_inputs(p, &cm);
    } else {
        costmodel_get(p, &cm);
    }
    double *params = xcalloc((size_t)p->P, sizeof *params);
    double *eparams = xcalloc((size_t)p->P, sizeof *eparams); /* of which in experts */
    double *gather = xcalloc((size_t)p->P, sizeof *gather); /* largest gather unit */
    CmCost ua, um, ue, uh;
    cm_unit(&cm, CM_ATTN, false, POLICY_NONE, &ua);
    cm_unit(&cm, CM_MLP, false, POLICY_NONE, &um);
    cm_unit(&cm, CM_EMBED, false, POLICY_NONE, &ue);
    cm_unit(&cm, CM_HEAD, false, POLICY_NONE, &uh);
    for (int32_t v = 0; v < nv; v++) {
        int32_t s, c;
        ir_owner(p, v, &s, &c);
        CmCost k;
        uint32_t arg;
        RecomputePolicy pol = costed_policy(p, s, &arg);
        cm_vstage_arg(&cm, v, pol, arg, &k);
        params[s] += k.params;
        eparams[s] += k.eparams;
        if (cm.ubeg[v + 1] > cm.ubeg[v])
            gather[s] = fmax(gather[s], ua.params + um.params);
        if (v == 0)
            gather[s] = fmax(gather[s], ue.params);
        if (v == nv - 1)
            gather[s] = fmax(gather[s], uh.params);
        /* the data-parallel stream's volume, only with replicas: D = 1 prints as before */
        if (p->data_parallel > 1 && !user_set(p, s, v, COST_PARAMS))
            put(&p->vstage_costs[v], COST_PARAMS, k.params);
        if (p->data_parallel > 1 && k.eparams > 0 && !user_set(p, s, v, COST_EXPERT_PARAMS))
            put(&p->vstage_costs[v], COST_EXPERT_PARAMS, k.eparams);
        put_vstage(p, &cm, s, v, &k, pol, arg);
    }
    /* the experts' model states are sharded over the D/E replicas that hold the same
     * experts (docs/cost-model.md "Mixture of experts") */
    CmDp dp = cm_dp(p), edp = dp;
    edp.D = dp.D / cm.ep > 1 ? dp.D / cm.ep : 1;
    for (int32_t s = 0; s < p->P; s++) {
        CostBlock *b = &p->stage_costs[s];
        if (!user_set(p, s, -1, COST_WEIGHTS))
            put(b, COST_WEIGHTS,
                cm_weight_bytes(params[s] - eparams[s], &dp) + cm_weight_bytes(eparams[s], &edp) +
                    cm_zero3_gather_bytes(gather[s], &dp));
        if (cm.has_device && !user_set(p, s, -1, COST_P2P))
            put(b, COST_P2P, cm_p2p_ms(&cm));
        if (cm.has_device && isfinite(cm.device.host_bw) && !user_set(p, s, -1, COST_HOST_BW))
            put(b, COST_HOST_BW, cm.device.host_bw);
        if (cm.has_device && p->data_parallel > 1) { /* the data-parallel stream's links */
            const DeviceSpec *dv = &cm.device;
            if (isfinite(dv->dp_bw) && !user_set(p, s, -1, COST_DP_BW))
                put(b, COST_DP_BW, dv->dp_bw);
            if (dv->dp_latency > 0 && !user_set(p, s, -1, COST_DP_LATENCY))
                put(b, COST_DP_LATENCY, dv->dp_latency);
            if (isfinite(dv->mem_bw) && !user_set(p, s, -1, COST_MEM_BW))
                put(b, COST_MEM_BW, dv->mem_bw);
        }
    }
    /* the device's host-link sharing, unless the pipeline's `costs` sets it */
    if (cm.has_device && cm.device.host_link_ranks > 1 &&
        !(p->costs.set & ~p->costs.derived & (1u << COST_HOST_LINK_RANKS)))
        put(&p->costs, COST_HOST_LINK_RANKS, cm.device.host_link_ranks);
    if (!p->has_memory && cm.has_device && cm.device.has_memory) {
        const Field *mf = field_find(p->device->fields, p->device->nfields, "memory");
        p->has_memory = true;
        p->memory = cm.device.memory - cm.device.reserved;
        if (p->shape_loc[3].file == LOC_NONE_FILE && mf)
            p->shape_loc[3] = mf->loc;
    }
    free(params);
    free(eparams);
    free(gather);
    costmodel_free(&cm);
    return 0;
}

int derive_costs(Diag *d, Pipeline *p)
{
    return derive(d, p);
}

void rederive_costs(Pipeline *p)
{
    derive(NULL, p);
}
