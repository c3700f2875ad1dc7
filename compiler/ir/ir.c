/* ir.c - see ir.h. */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

const char *const op_kind_name[OP_NKINDS] = {
#define X(e, s) s,
    OP_KINDS(X)
#undef X
};

const char *const action_kind_name[ACTION_N] = {
#define X(e, s) s,
    ACTION_KINDS(X)
#undef X
};

const char *const cost_field_name[COST_NFIELDS] = {
#define X(e, n, u, s) n,
    COST_FIELDS(X)
#undef X
};

const UnitClass cost_field_unit[COST_NFIELDS] = {
#define X(e, n, u, s) u,
    COST_FIELDS(X)
#undef X
};

const CostScope cost_field_scope[COST_NFIELDS] = {
#define X(e, n, u, s) s,
    COST_FIELDS(X)
#undef X
};

double cost_quantise(CostField f, double v)
{
    if (!isfinite(v))
        return v;
    switch (cost_field_unit[f]) {
    case UNIT_TIME:
        v = round(v * COST_TIME_RESOLUTION) / COST_TIME_RESOLUTION;
        break;
    case UNIT_SIZE:
    case UNIT_BW:
        v = round(v);
        break;
    case UNIT_FRACTION:
    case UNIT_NONE:
        break;
    }
    return v == 0 ? 0 : v;
}

const char *const policy_name[POLICY_N] = {
#define X(e, s) s,
    RECOMPUTE_POLICIES(X)
#undef X
};

const char *const keep_tensor_name[KEEP_N] = {
#define X(e, s) s,
    KEEP_TENSORS(X)
#undef X
};

const char *keep_parse(const char *s, uint32_t *mask)
{
    *mask = 0;
    for (;;) {
        s += strspn(s, ", \t");
        if (!*s)
            return NULL;
        size_t n = strcspn(s, ", \t");
        int k = KEEP_N;
        for (int i = 0; i < KEEP_N; i++)
            if (strlen(keep_tensor_name[i]) == n && strncmp(s, keep_tensor_name[i], n) == 0)
                k = i;
        if (k == KEEP_N)
            return s;
        *mask |= 1u << k;
        s += n;
    }
}

const char *keep_format(uint32_t mask, char *buf, size_t n)
{
    size_t at = 0;
    if (n)
        buf[0] = 0;
    for (int i = 0; i < KEEP_N && at < n; i++)
        if (mask & (1u << i))
            at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? " " : "", keep_tensor_name[i]);
    return buf;
}

const char *policy_format(RecomputePolicy pol, uint32_t arg, char *buf, size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "%s", (unsigned)pol < POLICY_N ? policy_name[pol] : "?");
    if (pol == POLICY_BLOCK && at < n) {
        snprintf(buf + at, n - at, "(%u)", arg);
    } else if (pol == POLICY_KEEP && at < n) {
        const char *sep = "(";
        for (int i = 0; i < KEEP_N && at < n; i++)
            if (arg & (1u << i)) {
                at += (size_t)snprintf(buf + at, n - at, "%s%s", sep, keep_tensor_name[i]);
                sep = ", ";
            }
        if (at < n)
            snprintf(buf + at, n - at, "%s)", *sep == '(' ? "(" : "");
    }
    return buf;
}

const char *const grad_dtype_name[GRAD_NDTYPES] = {
#define X(e, s, b) s,
    GRAD_DTYPES(X)
#undef X
};

const int grad_dtype_bytes[GRAD_NDTYPES] = {
#define X(e, s, b) b,
    GRAD_DTYPES(X)
#undef X
};

Pipeline *pipeline_new(void)
{
    Pipeline *p = xcalloc(1, sizeof *p);
    p->loc = LOC_NONE;
    p->costs.loc = LOC_NONE;
    p->tensor_parallel = 1;
    for (int i = 0; i < 4; i++)
        p->shape_loc[i] = LOC_NONE;
    p->partition_loc = LOC_NONE;
    p->schedule_loc = LOC_NONE;
    p->tp_loc = LOC_NONE;
    p->data_parallel = 1;
    p->expert_parallel = 1;
    p->ep_loc = LOC_NONE;
    p->dp_loc = p->zero_loc = p->grad_dtype_loc = LOC_NONE;
    return p;
}

static void free_stages(Pipeline *p)
{
    if (p->stages)
        for (int32_t s = 0; s < p->P; s++)
            free(p->stages[s].ops);
    free(p->stages);
    free(p->stage_costs);
    free(p->vstage_costs);
    free(p->stage_policy);
    free(p->stage_policy_arg);
    free(p->stage_per_layer);
    free(p->adjusted);
    p->stages = NULL;
    p->stage_costs = p->vstage_costs = NULL;
    p->stage_policy = NULL;
    p->stage_policy_arg = NULL;
    p->stage_per_layer = NULL;
    p->adjusted = NULL;
}

void pipeline_set_shape(Pipeline *p, int32_t P, int32_t M, int32_t V)
{
    free_stages(p);
    p->P = P;
    p->M = M;
    p->V = V;
    size_t np = P > 0 ? (size_t)P : 0, nv = np * (V > 0 ? (size_t)V : 0);
    p->stages = xcalloc(np, sizeof *p->stages);
    p->stage_costs = xcalloc(np, sizeof *p->stage_costs);
    p->vstage_costs = xcalloc(nv, sizeof *p->vstage_costs);
    p->stage_policy = xcalloc(np, sizeof *p->stage_policy);
    p->stage_policy_arg = xcalloc(np, sizeof *p->stage_policy_arg);
    p->stage_per_layer = xcalloc(np, sizeof *p->stage_per_layer);
    p->adjusted = xcalloc(np, sizeof *p->adjusted);
    for (size_t s = 0; s < np; s++) {
        p->stages[s].loc = LOC_NONE;
        p->stage_costs[s].loc = LOC_NONE;
    }
    for (size_t v = 0; v < nv; v++)
        p->vstage_costs[v].loc = LOC_NONE;
}

static Field *clone_fields(const Field *f, uint32_t n)
{
    if (!n)
        return NULL;
    Field *r = xmalloc(n * sizeof *r);
    for (uint32_t i = 0; i < n; i++) {
        r[i].key = xstrdup(f[i].key);
        r[i].val = value_clone(&f[i].val);
        r[i].loc = f[i].loc;
    }
    return r;
}

static void free_fields(Field *f, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        free(f[i].key);
        value_free(&f[i].val);
    }
    free(f);
}

static Entity *clone_entity(const Entity *e)
{
    if (!e)
        return NULL;
    Entity *r = xmalloc(sizeof *r);
    r->name = xstrdup(e->name);
    r->fields = clone_fields(e->fields, e->nfields);
    r->nfields = e->nfields;
    r->loc = e->loc;
    return r;
}

static void free_entity(Entity *e)
{
    if (!e)
        return;
    free(e->name);
    free_fields(e->fields, e->nfields);
    free(e);
}

static void *dup_mem(const void *src, size_t n)
{
    if (!src || !n)
        return NULL;
    void *d = xmalloc(n);
    memcpy(d, src, n);
    return d;
}

Pipeline *pipeline_clone(const Pipeline *p)
{
    Pipeline *q = xmalloc(sizeof *q);
    *q = *p;
    q->name = p->name ? xstrdup(p->name) : NULL;
    size_t np = (size_t)p->P, nv = np * (size_t)p->V;
    q->stages = xcalloc(np, sizeof *q->stages);
    for (size_t s = 0; s < np; s++) {
        q->stages[s] = p->stages[s];
        q->stages[s].cap = p->stages[s].n;
        q->stages[s].ops = dup_mem(p->stages[s].ops, p->stages[s].n * sizeof(Op));
    }
    q->stage_costs = dup_mem(p->stage_costs, np * sizeof *p->stage_costs);
    q->vstage_costs = dup_mem(p->vstage_costs, nv * sizeof *p->vstage_costs);
    q->stage_policy = dup_mem(p->stage_policy, np * sizeof *p->stage_policy);
    q->stage_policy_arg = dup_mem(p->stage_policy_arg, np * sizeof *p->stage_policy_arg);
    q->stage_per_layer = dup_mem(p->stage_per_layer, np * sizeof *p->stage_per_layer);
    q->adjusted = dup_mem(p->adjusted, np * sizeof *p->adjusted);
    q->deps = dup_mem(p->deps, p->ndeps * sizeof *p->deps);
    q->depcap = p->ndeps;
    q->actions = dup_mem(p->actions, p->nactions * sizeof *p->actions);
    q->actioncap = p->nactions;
    q->model = clone_entity(p->model);
    q->device = clone_entity(p->device);
    q->partition = dup_mem(p->partition, p->npartition * sizeof *p->partition);
    q->cost_inputs = dup_mem(p->cost_inputs, p->cost_inputs_size);
    q->schedule = p->schedule ? xstrdup(p->schedule) : NULL;
    q->recompute = dup_mem(p->recompute, p->nrecompute * sizeof *p->recompute);
    q->passes = p->npasses ? xmalloc(p->npasses * sizeof *q->passes) : NULL;
    for (uint32_t i = 0; i < p->npasses; i++) {
        q->passes[i].name = xstrdup(p->passes[i].name);
        q->passes[i].args = clone_fields(p->passes[i].args, p->passes[i].nargs);
        q->passes[i].nargs = p->passes[i].nargs;
        q->passes[i].loc = p->passes[i].loc;
    }
    return q;
}

void pipeline_free(Pipeline *p)
{
    if (!p)
        return;
    free_stages(p);
    free(p->name);
    free(p->deps);
    free(p->actions);
    free_entity(p->model);
    free_entity(p->device);
    free(p->partition);
    free(p->cost_inputs);
    free(p->schedule);
    free(p->recompute);
    for (uint32_t i = 0; i < p->npasses; i++) {
        free(p->passes[i].name);
        free_fields(p->passes[i].args, p->passes[i].nargs);
    }
    free(p->passes);
    free(p);
}

void pipeline_push_action(Pipeline *p, Action a)
{
    size_t cap = p->actioncap;
    VEC_PUSH(p->actions, p->nactions, cap, a);
    p->actioncap = (uint32_t)cap;
}

void pipeline_sort_actions(Pipeline *p)
{
    /* Insertion sort: stable, and linear on the usual already-sorted list. */
    for (uint32_t i = 1; i < p->nactions; i++) {
        Action a = p->actions[i];
        uint32_t j = i;
        while (j > 0 && (p->actions[j - 1].rank > a.rank ||
                         (p->actions[j - 1].rank == a.rank && p->actions[j - 1].pos > a.pos))) {
            p->actions[j] = p->actions[j - 1];
            j--;
        }
        p->actions[j] = a;
    }
}

char *action_name(char *buf, size_t n, const Action *a)
{
    if (a->kind == ACTION_OVERLAP_F_B)
        snprintf(buf, n, "%s", action_kind_name[a->kind]);
    else if (a->chunk)
        snprintf(buf, n, "%s%u.%u", action_kind_name[a->kind], a->mb, (unsigned)a->chunk);
    else
        snprintf(buf, n, "%s%u", action_kind_name[a->kind], a->mb);
    return buf;
}

void stage_push(StageOps *s, Op op)
{
    size_t cap = s->cap;
    VEC_RESERVE(s->ops, (size_t)s->n + 1, cap);
    s->cap = (uint32_t)cap;
    s->ops[s->n++] = op;
}

uint64_t pipeline_nops(const Pipeline *p)
{
    uint64_t n = 0;
    for (int32_t s = 0; s < p->P; s++)
        n += p->stages[s].n;
    return n;
}

int32_t ir_vstage(const Pipeline *p, int32_t s, int32_t c)
{
    if (p->placement == PLACE_VSHAPE && (c & 1))
        return c * p->P + (p->P - 1 - s);
    return c * p->P + s;
}

bool ir_partition_count_ok(const Pipeline *p, uint32_t n)
{
    return n == (uint32_t)p->P || n == (uint32_t)p->P * (uint32_t)p->V;
}

int ir_partition_units(const Pipeline *p, double max_units, int64_t *units)
{
    if (!ir_partition_count_ok(p, p->npartition))
        return -1;
    bool per_stage = p->npartition != (uint32_t)p->P * (uint32_t)p->V;
    for (uint32_t i = 0; i < p->npartition; i++) {
        double u2 = 2 * p->partition[i];
        if (!(u2 >= 0) || u2 != floor(u2) || u2 > max_units)
            return 1 + (int)i;
        int64_t n = (int64_t)u2;
        if (!per_stage) {
            units[i] = n;
            continue;
        }
        for (int32_t c = 0; c < p->V; c++)
            units[ir_vstage(p, (int32_t)i, c)] = n / p->V + (c >= p->V - n % p->V ? 1 : 0);
    }
    return 0;
}

void ir_owner(const Pipeline *p, int32_t v, int32_t *s, int32_t *c)
{
    int32_t cc = v / p->P, r = v % p->P;
    *c = cc;
    *s = (p->placement == PLACE_VSHAPE && (cc & 1)) ? p->P - 1 - r : r;
}

static double field_default(const Pipeline *p, int32_t s, int32_t c, CostField f)
{
    switch (f) {
    case COST_HOST_BW:
    case COST_DP_BW:
    case COST_MEM_BW:
        return INFINITY;
    case COST_SWAP_FRACTION:
    case COST_HOST_LINK_RANKS:
        return 1.0;
    case COST_WACT:
        return ir_cost(p, s, c, COST_ACT);
    case COST_RACT:
        return fmax(0.0, ir_cost(p, s, c, COST_ACT) - ir_cost(p, s, c, COST_CKPT));
    default:
        return 0.0;
    }
}

double ir_cost(const Pipeline *p, int32_t s, int32_t c, CostField f)
{
    uint32_t bit = 1u << f;
    if (cost_field_scope[f] == SCOPE_VSTAGE && p->vstage_costs && c >= 0 && c < p->V) {
        const CostBlock *b = &p->vstage_costs[ir_vstage(p, s, c)];
        if (b->set & bit)
            return b->v[f];
    }
    if (cost_field_scope[f] != SCOPE_PIPELINE && p->stage_costs && s >= 0 && s < p->P &&
        (p->stage_costs[s].set & bit))
        return p->stage_costs[s].v[f];
    if (p->costs.set & bit)
        return p->costs.v[f];
    return field_default(p, s, c, f);
}

char *op_name(char *buf, size_t n, OpKind kind, uint32_t mb, uint32_t chunk)
{
    const char *k = (unsigned)kind < OP_NKINDS ? op_kind_name[kind] : "?";
    if (chunk)
        snprintf(buf, n, "%s%u.%u", k, mb, chunk);
    else
        snprintf(buf, n, "%s%u", k, mb);
    return buf;
}

const Field *field_find(const Field *fields, uint32_t n, const char *key)
{
    for (uint32_t i = n; i-- > 0;)
        if (strcmp(fields[i].key, key) == 0)
            return &fields[i];
    return NULL;
}

void value_free(Value *v)
{
    free(v->str);
    free(v->list);
    v->str = NULL;
    v->list = NULL;
}

Value value_clone(const Value *v)
{
    Value r = *v;
    r.str = v->str ? xstrdup(v->str) : NULL;
    r.list = dup_mem(v->list, v->nlist * sizeof *v->list);
    return r;
}
