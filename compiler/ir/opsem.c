/* opsem.c - the one table of op semantics (see opsem.h). */
#include "opsem.h"

#include <math.h>

#include "util.h"

/* docs/spec.md "Dependencies", one row per kind; the OG/LW rows are docs/semantics.md
 * "Model-state offload" (TPipe's T-Offload, §5), the RO row "Overlapped
 * recomputation" (Lynx §4). Colours: a colour-blind-safe "deep" palette. */
const OpSem op_sem[OP_NKINDS] = {
    [OP_F] = {.stream = STREAM_COMPUTE, .mem = MEM_ALLOC, .nwait = 2,
              .wait = {{OP_F, -1, "a forward needs the forward of the previous virtual stage"},
                       {OP_LW, 0, "a forward of an offloaded chunk needs its weights loaded"}},
              .reads_params = true, .works = true, .runs_as = OP_F, .pair = OP_NKINDS,
              .glyph = '-', .colour = "#4C72B0", .label = "F forward"},
    [OP_B] = {.stream = STREAM_COMPUTE, .mem = MEM_FREE, .nwait = 5,
              .wait = {{OP_B, +1, "a backward needs the backward of the next virtual stage"},
                       {OP_F, 0, "a backward needs its forward"},
                       {OP_R, 0, "a recompute must come before its backward"},
                       {OP_SI, 0, "a swap-in must come before its backward"},
                       {OP_RO, 0, "an overlapped recompute must come before its backward"}},
              .reads_params = true, .works = true, .backward = true, .runs_as = OP_B,
              .pair = OP_NKINDS, .glyph = '=', .colour = "#55A868", .label = "B backward"},
    [OP_W] = {.stream = STREAM_COMPUTE, .mem = MEM_FREE, .nwait = 1,
              .wait = {{OP_B, 0, "a weight-gradient op must come after its backward"}},
              .backward = true, .has = VM_HAS_W, .runs_as = OP_W, .pair = OP_NKINDS,
              .glyph = '~', .colour = "#8172B3", .label = "W weight grad"},
    [OP_R] = {.stream = STREAM_COMPUTE, .mem = MEM_ALLOC, .nwait = 2,
              .wait = {{OP_F, 0, "a recompute must come after its forward"},
                       {OP_SI, 0, "a swap-in must come before its recompute"}},
              .reads_params = true, .works = true, .has = VM_HAS_R, .runs_as = OP_R,
              .pair = OP_NKINDS, .glyph = '+', .colour = "#C44E52", .label = "R recompute"},
    [OP_SO] = {.stream = STREAM_D2H, .mem = MEM_FREE, .nwait = 1,
               .wait = {{OP_F, 0, "a swap-out must come after its forward"}},
               .has = VM_HAS_SO, .runs_as = OP_SO, .pair = OP_SI,
               .why_pair = "swapped-out activations must come back", .glyph = '>',
               .colour = "#DD8452", .label = "SO swap out"},
    [OP_SI] = {.stream = STREAM_H2D, .mem = MEM_ALLOC, .nwait = 1,
               .wait = {{OP_SO, 0, "a swap-in must come after its swap-out"}},
               .has = VM_HAS_SI, .runs_as = OP_SI, .pair = OP_SO,
               .why_pair = "there is nothing to swap in", .glyph = '<', .colour = "#937860",
               .label = "SI swap in"},
    [OP_OG] = {.stream = STREAM_D2H, .mem = MEM_NONE, .waits_last_bw = true,
               .why_last_bw = "a gradient offload must come after every backward of its chunk",
               .chunkwide = true, .runs_as = OP_OG, .pair = OP_LW,
               .why_pair = "an offloaded chunk's weights must be loaded back", .glyph = '}',
               .colour = "#DA8BC3", .label = "OG grad offload + host step"},
    [OP_LW] = {.stream = STREAM_H2D, .mem = MEM_ALLOC, .chunkwide = true, .runs_as = OP_LW,
               .pair = OP_OG,
               .why_pair = "only a chunk whose gradients go to the host has weights to load",
               .glyph = '{', .colour = "#8C8C8C", .label = "LW weight load"},
    /* docs/semantics.md "Overlapped recomputation": an R that runs inside its host's
     * all-reduces (Lynx §4); the same waits and memory as R, run as an R */
    [OP_RO] = {.stream = STREAM_COMPUTE, .mem = MEM_ALLOC, .overlaps_host = true, .nwait = 2,
               .wait = {{OP_F, 0, "an overlapped recompute must come after its forward"},
                        {OP_SI, 0, "a swap-in must come before its overlapped recompute"}},
               .reads_params = true, .works = true, .has = VM_HAS_R, .runs_as = OP_R,
               .pair = OP_NKINDS, .glyph = '*', .colour = "#E6A0A3",
               .label = "RO overlapped recompute"},
};

/* The runtime's kinds (plan/opkinds.h) are OP_KINDS' first kinds, in the same order,
 * so a runs_as value is a PR_* kind. */
#define X(e, s, st) _Static_assert(OP_##e == (int)PLAN_K_##e, "plan/opkinds.h follows OP_KINDS");
PLAN_KINDS(X)
#undef X

const char *opsem_why(OpKind u, OpKind w)
{
    if ((unsigned)u >= OP_NKINDS)
        return "it depends on it";
    const OpSem *s = &op_sem[u];
    for (int i = 0; i < s->nwait; i++)
        if (s->wait[i].kind == w)
            return s->wait[i].why;
    if (s->waits_last_bw && op_backward(w))
        return s->why_last_bw;
    return "it depends on it";
}

Stream op_stream(OpKind k)
{
    return (unsigned)k < OP_NKINDS ? op_sem[k].stream : STREAM_COMPUTE;
}

bool opsem_waits_on(OpKind k, OpKind w)
{
    if ((unsigned)k >= OP_NKINDS)
        return false;
    for (int i = 0; i < op_sem[k].nwait; i++)
        if (op_sem[k].wait[i].kind == w && op_sem[k].wait[i].dv == 0)
            return true;
    return false;
}

unsigned opsem_has_bit(OpKind k)
{
    return (unsigned)k < OP_NKINDS ? op_sem[k].has : 0;
}

void opsem_costs(const Pipeline *p, int32_t s, int32_t chunk, OpCosts *c)
{
    c->f = ir_cost(p, s, chunk, COST_F);
    c->b = ir_cost(p, s, chunk, COST_B);
    c->w = ir_cost(p, s, chunk, COST_W);
    c->r = ir_cost(p, s, chunk, COST_R);
    c->act = ir_cost(p, s, chunk, COST_ACT);
    c->ckpt = ir_cost(p, s, chunk, COST_CKPT);
    c->wact = ir_cost(p, s, chunk, COST_WACT);
    c->ract = ir_cost(p, s, chunk, COST_RACT);
    c->grads = ir_cost(p, s, chunk, COST_GRADS);
    c->wload = ir_cost(p, s, chunk, COST_WLOAD);
    c->opt_host = ir_cost(p, s, chunk, COST_OPT_HOST);
    c->fcomm = ir_cost(p, s, chunk, COST_FCOMM);
    c->bcomm = ir_cost(p, s, chunk, COST_BCOMM);
    c->rcomm = ir_cost(p, s, chunk, COST_RCOMM);
    c->work = ir_cost(p, s, chunk, COST_WORK);
    c->frac = ir_cost(p, s, chunk, COST_SWAP_FRACTION);
    double bw = ir_cost(p, s, chunk, COST_HOST_BW);
    c->ms_per_byte = (bw > 0 && isfinite(bw)) ? 1000.0 / bw : 0;
}

void opsem_remat_use(const Pipeline *p, int32_t s, int32_t c, RematUse *u)
{
    *u = (RematUse){0, 0, 0, false};
    const StageOps *st = &p->stages[s];
    for (uint32_t i = 0; i < st->n; i++) {
        const Op *o = &st->ops[i];
        if (o->chunk != c || o->kind >= OP_NKINDS)
            continue;
        OpKind k = (OpKind)o->kind;
        u->nf += k == OP_F;
        u->nw += k == OP_W;
        u->nr += opsem_has_bit(k) == VM_HAS_R;
    }
    if (u->nr == 0)
        return;
    OpCosts k;
    opsem_costs(p, s, c, &k);
    u->per_layer = k.ract < k.act - k.ckpt - 0.5;
}

void opsem_mem_step(OpKind k, const OpCosts *c, unsigned has, VmMem *st, double *alloc,
                    double *freed)
{
    static VmMem none;
    double a = 0, f = 0;
    if (!st) {
        none = (VmMem){0, 0};
        st = &none;
    }
    switch (k) {
    case OP_F:
        a = (has & VM_HAS_R) ? c->ckpt : c->act;
        break;
    case OP_R:
    case OP_RO:
        a = fmin(c->ract, c->act - c->ckpt);
        break;
    case OP_B: {
        double keep = (has & VM_HAS_W) ? fmin(c->wact, st->held) : 0;
        f = st->held - keep;
        break;
    }
    case OP_W:
        f = st->held;
        break;
    case OP_SO:
        f = c->frac * st->held;
        st->host += f;
        break;
    case OP_SI:
        a = st->host;
        st->host = 0;
        break;
    case OP_LW:
        a = c->grads + c->wload;
        break;
    case OP_OG:
        break;
    default:
        unreachable();
    }
    if (a < 0)
        a = 0;
    if (f < 0)
        f = 0;
    st->held += a - f;
    *alloc = a;
    *freed = f;
}

double opsem_work(OpKind k, const OpCosts *c)
{
    return (unsigned)k < OP_NKINDS && op_sem[k].works && c->work > 0 ? c->work : 0;
}

double opsem_moved(OpKind k, const OpCosts *c, double alloc, double freed)
{
    switch (k) {
    case OP_SO: return freed;
    case OP_SI: return alloc;
    case OP_OG: return c->grads;
    case OP_LW: return c->wload;
    default: return 0;
    }
}

double opsem_link_ms(OpKind k, const OpCosts *c, double moved)
{
    double d = op_sem[k].stream == STREAM_COMPUTE ? 0 : moved * c->ms_per_byte;
    return d > 0 ? d : 0;
}

double opsem_duration(OpKind k, const OpCosts *c, unsigned has, double moved)
{
    double d = 0;
    switch (k) {
    case OP_F: d = c->f; break;
    case OP_B: d = (has & VM_HAS_W) ? c->b - c->w : c->b; break;
    case OP_W: d = c->w; break;
    case OP_R:
    case OP_RO: d = c->r; break;
    case OP_SO:
    case OP_SI:
    case OP_LW: d = opsem_link_ms(k, c, moved); break;
    case OP_OG: d = opsem_link_ms(k, c, moved) + c->opt_host; break;
    default: unreachable();
    }
    return d > 0 ? d : 0;
}

int64_t opsem_host(const StageOps *so, uint32_t i)
{
    for (uint32_t j = i + 1; j < so->n; j++) {
        OpKind k = (OpKind)so->ops[j].kind;
        if ((unsigned)k < OP_NKINDS && op_sem[k].stream == STREAM_COMPUTE && !op_sem[k].overlaps_host)
            return j;
    }
    return -1;
}

double opsem_comm(OpKind k, const OpCosts *c)
{
    switch (k) {
    case OP_F: return c->fcomm;
    case OP_B: return c->bcomm;
    case OP_R: return c->rcomm;
    default: return 0;
    }
}

double opsem_layer_share(const OpCosts *c)
{
    double whole = c->act - c->ckpt;
    if (!(whole > 0) || !(c->ract < whole))
        return 1.0;
    return c->ract > 0 ? c->ract / whole : 0.0;
}

bool opsem_self_host_ok(const OpCosts *c)
{
    return opsem_layer_share(c) < 1.0;
}

double opsem_self_budget(const OpCosts *c)
{
    return fmax(0, c->bcomm) * (1.0 - opsem_layer_share(c));
}

double opsem_exposed_self(const OpCosts *c, double *budget)
{
    double g = opsem_layer_share(c);
    double comm = fmax(0, fmin(c->rcomm, c->r)), work = fmax(0, c->r - comm);
    double rest = (1.0 - g) * work, hid = fmin(rest, fmax(0, *budget));
    *budget -= hid;
    return comm + g * work + rest - hid;
}

double opsem_exposed(const OpCosts *c, double *budget)
{
    double comm = fmax(0, fmin(c->rcomm, c->r)), work = fmax(0, c->r - comm);
    double hid = fmin(work, fmax(0, *budget));
    *budget -= hid;
    return comm + work - hid;
}

/* The block that gives field f its value for chunk c of rank s (docs/spec.md "Cost
 * lookup"), or NULL when none sets it. */
static const CostBlock *setter(const Pipeline *p, int32_t s, int32_t c, CostField f)
{
    const CostBlock *vb = &p->vstage_costs[ir_vstage(p, s, c)];
    if (vb->set & (1u << f))
        return vb;
    if (p->stage_costs[s].set & (1u << f))
        return &p->stage_costs[s];
    if (p->costs.set & (1u << f))
        return &p->costs;
    return NULL;
}

int opsem_check_costs(Diag *d, const Pipeline *p)
{
    if (!p->vstage_costs || !p->stage_costs)
        return 0;
    int n = 0;
    const CostBlock *last = NULL;
    for (int32_t s = 0; s < p->P; s++)
        for (int32_t c = 0; c < p->V; c++) {
            double b = ir_cost(p, s, c, COST_B), w = ir_cost(p, s, c, COST_W);
            if (!(w > b))
                continue;
            const CostBlock *bw = setter(p, s, c, COST_W), *bb = setter(p, s, c, COST_B);
            const CostBlock *at = bw && bw->loc.file != LOC_NONE_FILE ? bw : bb;
            if (at && at == last)
                continue; /* one error per block, not per virtual stage it covers */
            last = at;
            diag_error(d, at ? at->loc : p->loc, DIAG_VALUE,
                       "weight-gradient time w (%g ms) exceeds the whole backward b (%g ms) "
                       "of stage %d chunk %d: b includes w",
                       w, b, s, c);
            n++;
        }
    return n;
}

bool opsem_lists(const Pipeline *p, bool (*has)(unsigned k))
{
    for (int32_t s = 0; s < p->P; s++)
        for (uint32_t i = 0; i < p->stages[s].n; i++)
            if (has(p->stages[s].ops[i].kind))
                return true;
    return false;
}
