/* recompute.c - the `recompute(stages=.., policy=.., layers=.., keep=..)` pass: on-demand
 * recomputation.
 *
 * Obscura §3.1, Observation 1: recomputing only the stages that exceed memory
 * ("On-Demand Recomputation") beats recomputing all of them. For every rank in `stages`
 * (default all) the pass sets the rank's policy (default full), puts R(v,m) just before
 * each B(v,m) of the rank's virtual stages unless an R(v,m) already exists anywhere on
 * the rank, and with policy=none removes the rank's R ops instead. It then re-derives
 * the costs, so r and ckpt follow the policy (docs/cost-model.md "Recomputation
 * policies"). policy=block takes layers=N (Megatron-LM's `--recompute-method block`: full
 * recomputation of the first N layers of each virtual stage); policy=keep takes
 * keep="T ..." (the tensors of each layer it keeps; docs/cost-model.md "Keep-sets").
 * granularity=layer makes each R rebuild one layer at a time inside its backward
 * (Megatron-LM's and Lynx's activation checkpointing): the cost model then derives
 * `ract`, one layer's share (docs/cost-model.md "Layer-granular recomputation");
 * granularity=stage rebuilds the whole virtual stage. Without the argument a rank keeps
 * its granularity (stage unless an earlier recompute set layer), so the passes that
 * re-plan a rank's policy through this pass (lynx_overlap, swap_aware_recompute,
 * identify_adjusted) plan at the granularity the file chose.
 *
 * Each R it places is bound to the backward (docs/semantics.md "Dependencies"): with
 * v < PV-1 it also gets the line `dep B(v+1,m) -> R(v,m)`, so it runs after the
 * gradient from the next virtual stage arrives, as activation checkpointing in
 * Megatron-LM, DeepSpeed and PyTorch runs it (Obscura §5.1: "the backward pass of
 * micro-batch x in stage s must wait for the completion of the backward pass of the
 * same micro-batch in stage s + 1, preventing the use of preceding bubbles for
 * recomputation"). An R already listed (written by hand or by another pass) keeps its
 * dependencies. policy=none removes the rank's R ops and their binding lines.
 *
 * Requires: nothing beyond a well-formed IR (ops may be missing or duplicated: a B met
 * twice gets one R). Leaves the op set legal when it was: R(v,m) after F(v,m), which
 * precedes B(v,m), and before B(v,m). */
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "opsem.h"
#include "passes.h"
#include "util.h"

/* (chunk, micro-batch) as one sortable key */
static uint64_t op_key(const Op *o)
{
    return ((uint64_t)o->chunk << 32) | o->mb;
}

static int cmp_key(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static bool has_key(const uint64_t *keys, size_t n, uint64_t k)
{
    return bsearch(&k, keys, n, sizeof *keys, cmp_key) != NULL;
}

/* Index of the first key >= k in sorted keys[n]. */
static size_t lower_bound(const uint64_t *keys, size_t n, uint64_t k)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* An R or an overlapped R (RO): the recompute of its (v,m). */
static bool is_recompute(unsigned k)
{
    return k < OP_NKINDS && opsem_has_bit((OpKind)k) == VM_HAS_R;
}

/* The binding line of recompute r on rank s: B(v+1,m) -> r; false when v = PV-1. */
static bool binding_of(const Pipeline *p, int32_t s, const Op *r, Loc loc, Dep *out)
{
    int32_t v = ir_vstage(p, s, r->chunk), s2, c2;
    if (v + 1 >= p->P * p->V)
        return false;
    ir_owner(p, v + 1, &s2, &c2);
    *out = (Dep){{r->mb, (uint16_t)s2, OP_B, (uint8_t)c2}, {r->mb, (uint16_t)s, r->kind, r->chunk}, loc};
    return true;
}

Op recompute_op_of(const Op *b, Loc loc)
{
    Op r = *b;
    r.kind = OP_R;
    r.aux = 0;
    if (loc.file != LOC_NONE_FILE)
        r.loc = loc;
    return r;
}

bool recompute_dep_is_binding(const Pipeline *p, const Dep *e)
{
    if (e->from.kind != OP_B || !is_recompute(e->to.kind) || e->from.mb != e->to.mb ||
        e->from.stage >= p->P || e->to.stage >= p->P || e->from.chunk >= p->V ||
        e->to.chunk >= p->V)
        return false;
    return ir_vstage(p, e->from.stage, e->from.chunk) == ir_vstage(p, e->to.stage, e->to.chunk) + 1;
}

/* True when e names op r of rank s as its waiting end. */
static bool dep_to(const Dep *e, int32_t s, const Op *r)
{
    return e->to.stage == s && e->to.kind == r->kind && e->to.chunk == r->chunk &&
           e->to.mb == r->mb;
}

bool recompute_is_bound(const Pipeline *p, int32_t s, const Op *r)
{
    for (uint32_t i = 0; i < p->ndeps; i++)
        if (dep_to(&p->deps[i], s, r) && recompute_dep_is_binding(p, &p->deps[i]))
            return true;
    return false;
}

void recompute_bind(Pipeline *p, int32_t s, const Op *r, Loc loc)
{
    Dep e;
    if (!binding_of(p, s, r, loc, &e) || recompute_is_bound(p, s, r))
        return;
    size_t cap = p->depcap;
    VEC_PUSH(p->deps, p->ndeps, cap, e);
    p->depcap = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
}

void recompute_unbind(Pipeline *p, int32_t s, const Op *r)
{
    uint32_t j = 0;
    for (uint32_t i = 0; i < p->ndeps; i++)
        if (!(dep_to(&p->deps[i], s, r) && recompute_dep_is_binding(p, &p->deps[i])))
            p->deps[j++] = p->deps[i];
    p->ndeps = j;
}

void recompute_unbind_rank(Pipeline *p, int32_t s)
{
    uint32_t j = 0;
    for (uint32_t i = 0; i < p->ndeps; i++)
        if (!(p->deps[i].to.stage == s && recompute_dep_is_binding(p, &p->deps[i])))
            p->deps[j++] = p->deps[i];
    p->ndeps = j;
}

/* Rewrites rank s's list: R before each B that has none, each new R bound to the
 * backward, or every R and its binding removed. O(n log n) in the rank's op count. */
static void rewrite_rank(Pipeline *p, int32_t s, RecomputePolicy pol, Loc loc)
{
    StageOps *st = &p->stages[s];
    size_t nr = 0, nb = 0;
    for (uint32_t i = 0; i < st->n; i++) {
        nr += is_recompute(st->ops[i].kind);
        nb += st->ops[i].kind == OP_B;
    }
    if (pol == POLICY_NONE) {
        recompute_unbind_rank(p, s);
        uint32_t j = 0;
        for (uint32_t i = 0; i < st->n; i++)
            if (!is_recompute(st->ops[i].kind))
                st->ops[j++] = st->ops[i];
        st->n = j;
        return;
    }
    /* The keys that have an R, and the B keys with a flag once they got one (so a
     * duplicated B gets a single R). */
    uint64_t *have = xmalloc((nr + 1) * sizeof *have), *bkeys = xmalloc((nb + 1) * sizeof *bkeys);
    size_t nh = 0, nk = 0;
    for (uint32_t i = 0; i < st->n; i++) {
        if (is_recompute(st->ops[i].kind))
            have[nh++] = op_key(&st->ops[i]);
        else if (st->ops[i].kind == OP_B)
            bkeys[nk++] = op_key(&st->ops[i]);
    }
    qsort(have, nh, sizeof *have, cmp_key);
    qsort(bkeys, nk, sizeof *bkeys, cmp_key);
    unsigned char *done = xcalloc(nk + 1, 1);
    size_t cap = (size_t)st->n + nb + 1;
    Op *out = xmalloc(cap * sizeof *out);
    uint32_t j = 0;
    for (uint32_t i = 0; i < st->n; i++) {
        const Op *o = &st->ops[i];
        if (o->kind == OP_B) {
            uint64_t k = op_key(o);
            size_t at = lower_bound(bkeys, nk, k);
            if (!has_key(have, nh, k) && !done[at]) {
                done[at] = 1;
                Op r = recompute_op_of(o, loc);
                out[j++] = r;
                /* a new R has no line yet: a line naming a missing op fails `check` */
                Dep e;
                if (binding_of(p, s, &r, r.loc, &e)) {
                    size_t dcap = p->depcap;
                    VEC_PUSH(p->deps, p->ndeps, dcap, e);
                    p->depcap = (uint32_t)(dcap > UINT32_MAX ? UINT32_MAX : dcap);
                }
            }
        }
        out[j++] = *o;
    }
    free(have);
    free(bkeys);
    free(done);
    free(st->ops);
    st->ops = out;
    st->n = j;
    st->cap = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
}

/* The argument of policy pol from the call's `layers` (block) or `keep` (keep) into *arg;
 * returns the errors reported. */
static int policy_arg(Diag *d, const PassCall *call, RecomputePolicy pol, uint32_t *arg)
{
    int err = 0;
    int64_t layers = 0;
    bool has_layers = pass_arg_int(d, call, "layers", &layers, &err);
    const Field *kf = NULL;
    for (uint32_t i = 0; i < call->nargs; i++)
        if (!strcmp(call->args[i].key, "keep"))
            kf = &call->args[i];
    *arg = 0;
    if (err)
        return err;
    if (pol == POLICY_BLOCK) {
        if (!has_layers || layers < 1 || layers > 1000000) {
            diag_error(d, has_layers ? pass_arg_loc(call, "layers") : pass_arg_loc(call, "policy"),
                       DIAG_VALUE, "policy 'block' needs layers=N, the layers it recomputes per "
                                   "virtual stage (N >= 1)");
            return 1;
        }
        *arg = (uint32_t)layers;
    } else if (has_layers) {
        diag_error(d, pass_arg_loc(call, "layers"), DIAG_VALUE,
                   "'layers' is an argument of policy 'block' only");
        return 1;
    }
    if (pol == POLICY_KEEP && kf) {
        const char *bad = NULL;
        if (kf->val.kind != VAL_STRING && kf->val.kind != VAL_IDENT)
            bad = "";
        else
            bad = keep_parse(kf->val.str, arg);
        if (bad) {
            diag_error(d, kf->loc, DIAG_VALUE,
                       "keep takes tensor names such as keep=\"qkv fc1\"; '%.*s' is not one "
                       "(attn_norm qkv core attn_out attn_mask mlp_in mlp_norm fc1 act_fn "
                       "mlp_mask: docs/cost-model.md \"Keep-sets\")",
                       (int)strcspn(bad, ", \t"), bad);
            return 1;
        }
    } else if (kf && pol != POLICY_KEEP) {
        diag_error(d, kf->loc, DIAG_VALUE, "'keep' is an argument of policy 'keep' only");
        return 1;
    }
    return 0;
}

int pass_recompute(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    int64_t lo = 0, hi = INT32_MAX;
    const char *pname = "full";
    pass_arg_range(d, call, "stages", &lo, &hi, &err);
    pass_arg_ident(d, call, "policy", &pname, &err);
    if (err)
        return err;
    RecomputePolicy pol = POLICY_N;
    for (int i = 0; i < POLICY_N; i++)
        if (strcmp(pname, policy_name[i]) == 0)
            pol = (RecomputePolicy)i;
    if (pol == POLICY_N) {
        char hint[96];
        diag_error(d, pass_arg_loc(call, "policy"), DIAG_VALUE,
                   "unknown recomputation policy '%s'%s (none, full, selective, cmb, mlp, block, "
                   "keep)",
                   pname,
                   diag_suggest(hint, sizeof hint, pname, policy_name, POLICY_N));
        return 1;
    }
    uint32_t arg = 0;
    if (policy_arg(d, call, pol, &arg))
        return 1;
    const char *gran = NULL;
    pass_arg_ident(d, call, "granularity", &gran, &err);
    if (err)
        return err;
    if (gran && strcmp(gran, "stage") != 0 && strcmp(gran, "layer") != 0) {
        diag_error(d, pass_arg_loc(call, "granularity"), DIAG_VALUE,
                   "unknown recomputation granularity '%s' (stage, layer)", gran);
        return 1;
    }
    if (hi == INT32_MAX) /* stages=all */
        hi = p->P;
    if (lo < 0 || lo > hi || hi > p->P) {
        Loc loc = pass_arg_loc(call, "stages");
        if (hi > lo && hi - 1 >= p->P)
            diag_error(d, loc, DIAG_VALUE, "stage %lld is out of range: the pipeline has %d stages",
                       (long long)(hi - 1), p->P);
        else
            diag_error(d, loc, DIAG_VALUE, "bad stage range %lld..%lld", (long long)lo,
                       (long long)hi);
        return 1;
    }
    if (!p->model && pol != POLICY_NONE && pol != POLICY_FULL && hi > lo)
        diag_warning(d, call->loc, WARN_MODEL,
                     "policy '%s' needs a model to size its savings; without one it is costed "
                     "as full recomputation (r = f) unless the costs set r and ckpt",
                     policy_name[pol]);
    for (int64_t s = lo; s < hi; s++) {
        p->stage_policy[s] = pol;
        p->stage_policy_arg[s] = arg;
        if (gran)
            p->stage_per_layer[s] = gran[0] == 'l';
        rewrite_rank(p, (int32_t)s, pol, call->loc);
    }
    return pass_rewritten(d, p, call, "recompute");
}

int recompute_menu(const Pipeline *p, RecomputePolicy *pol, uint32_t *arg)
{
    int n = 0;
    pol[n] = POLICY_NONE;
    arg[n++] = 0;
    if (p->model) {
        pol[n] = POLICY_CMB;
        arg[n++] = 0;
        pol[n] = POLICY_SELECTIVE;
        arg[n++] = 0;
        CostModel cm;
        costmodel_get(p, &cm);
        uint32_t ladder[KEEP_N + 1];
        int nl = cm_keep_ladder(&cm, ladder);
        costmodel_free(&cm);
        for (int i = nl - 2; i >= 0; i--, n++) { /* the whole set is `none` */
            pol[n] = POLICY_KEEP;
            arg[n] = ladder[i];
        }
        pol[n] = POLICY_MLP;
        arg[n++] = 0;
    }
    pol[n] = POLICY_FULL;
    arg[n++] = 0;
    return n;
}
