/* trecomp_blockwise.c - TPipe's block-wise T-Recomp (Lin et al., §4.2, Appendices B-C).
 *
 * Legend: P = ranks, M = micro-batches, V = chunks per rank (V >= 2). Chunk c of rank s
 * is virtual stage vs(s, c); with the interleaved placement chunk 0 is the shallow part
 * of the model (poor temporal locality: its activations live longest), the last chunk
 * the deep part.
 *
 *   apply trecomp_blockwise(chunks=0, delay=1, lead=0)
 *
 * chunks (a range of chunk indices, default 0): the shallow chunks recomputed in full.
 * For every B(v, m) of those chunks the pass lists an R(v, m) as its own block, `lead`
 * compute ops ahead of the B (never ahead of F(v, m)), and gives every rank the `full`
 * policy (F then keeps only the checkpoint, R re-materialises the rest; docs/cost-model.md).
 * The pass lists these R ops without the binding line `recompute` writes (passes.h,
 * docs/semantics.md section 2), so an R depends on F(v, m) only, never on B(v+1, m):
 * it is decoupled from the backward that needs it (Fig. 6(d)): the accumulated recomputation
 * of the layer-grouped scheme (Fig. 6(b)), where the recomputation runs inside the
 * backward and delays every later stage's backward, cannot arise. With lead = 0 the R
 * fills the stall before its backward; a larger lead moves it into the preceding round.
 * Default: each of lead 0, 1, 2 is simulated and the fastest kept (ties: the smaller).
 *
 * delay (rounds, default Appendix B's Eq. 3): the recomputation blocks stretch every
 * round from 6 to 7 time units and leave intervals in the forward flow, so chunk 1's
 * forward on rank 0 would wait for chunk 0's forward from rank P-1 (the inter-chunk
 * dependency conflict). The deep chunks' forwards are delayed by k rounds, k the least
 * integer >= 0 with
 *     T_fwd_interval - dT_fwd_interval + 7k >= 0,
 *     T_fwd_interval  = 3 + 6 ceil((P-3)/6) - P,
 *     dT_fwd_interval = ceil((P-1)/2) - ceil((P-3)/6) - 1     (P >= 3; else k = 0)
 * (k = 1 for 8 <= P <= 40). Relative to the deep chunks that is the same as running the
 * recomputed chunks' forwards k rounds ahead, which is what the list rewrite does: on
 * every rank the recomputed chunks' forwards are listed k forward-slots earlier (the
 * first k at the head of the list). Those forwards keep only checkpoints, so this costs
 * k checkpoints of memory. The delay needs chunks to start at chunk 0 (the forwards it
 * moves then only depend on forwards that move with them); a delay that would make the
 * schedule stuck is dropped with a warning.
 *
 * Appendix C: with chunk 0 of two recomputed, rank 0 keeps floor(P/2) + 1 blocks of
 * m_a / 2P (chunk 1's activations and one recomputation buffer), 31% of 1F1B's m_a at
 * P = 8, and the makespan is [6P + 7(M-1)] T_unit against 1F1B + 50% recomputation's
 * 7(M-1+P) (tests/t_tpipe.sh).
 *
 * Idempotent: a rank whose recomputed chunks already have an R for every B is left as
 * it is (so neither the R ops nor the delay are applied twice).
 * Requires V >= 2 and a complete schedule (every F and B once); leaves it complete and,
 * when it was deadlock-free, deadlock-free (R after F(v, m), before B(v, m)). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "opsem.h"
#include "passes.h"
#include "sim.h"
#include "util.h"

/* Appendix B, Eq. 3: the rounds the deep chunk's forward is delayed (0 for P < 3). */
static int64_t appendix_b_delay(int32_t P)
{
    if (P < 3)
        return 0;
    int64_t c3 = (P - 3 + 5) / 6, c1 = (P - 1 + 1) / 2;
    int64_t interval = 3 + 6 * c3 - P, grow = c1 - c3 - 1;
    int64_t k = 0;
    while (interval - grow + 7 * k < 0)
        k++;
    return k;
}

static bool in_chunks(int c, int64_t lo, int64_t hi)
{
    return c >= lo && c < hi;
}

/* True when every B of a recomputed chunk on rank s has an R on the rank already. */
static bool rank_done(const StageOps *st, int64_t lo, int64_t hi)
{
    uint32_t nb = 0, nr = 0;
    for (uint32_t i = 0; i < st->n; i++) {
        if (!in_chunks(st->ops[i].chunk, lo, hi))
            continue;
        nb += st->ops[i].kind == OP_B;
        nr += st->ops[i].kind == OP_R;
    }
    return nb > 0 && nr >= nb;
}

/* Makes out[0..n-1] (heap, taken over) the rank's op list. */
static void set_ops(StageOps *st, Op *out, uint32_t n)
{
    free(st->ops);
    st->ops = out;
    st->n = n;
    st->cap = n;
}

/* Lists the recomputed chunks' forwards `delay` slots earlier on one rank: per chunk,
 * the forward in the i-th slot becomes the one that was in slot i + delay, the first
 * `delay` go to the head of the list (in order), the last `delay` slots are dropped.
 * Linear in the rank's op count. */
static void shift_forwards(StageOps *st, int64_t lo, int64_t hi, int64_t delay)
{
    if (delay <= 0 || st->n == 0)
        return;
    int64_t nchunk = hi - lo;
    /* fwd[c] lists chunk lo + c's forwards in listed order */
    uint32_t *cnt = xcalloc((size_t)nchunk, sizeof *cnt), *at = xcalloc((size_t)nchunk, sizeof *at);
    for (uint32_t i = 0; i < st->n; i++)
        if (st->ops[i].kind == OP_F && in_chunks(st->ops[i].chunk, lo, hi))
            cnt[st->ops[i].chunk - lo]++;
    Op **fwd = xmalloc((size_t)nchunk * sizeof *fwd);
    for (int64_t c = 0; c < nchunk; c++)
        fwd[c] = xmalloc(((size_t)cnt[c] + 1) * sizeof **fwd);
    for (uint32_t i = 0; i < st->n; i++)
        if (st->ops[i].kind == OP_F && in_chunks(st->ops[i].chunk, lo, hi)) {
            int64_t c = st->ops[i].chunk - lo;
            fwd[c][at[c]++] = st->ops[i];
        }
    Op *out = xmalloc((size_t)st->n * sizeof *out);
    uint32_t j = 0;
    for (int64_t c = 0; c < nchunk; c++) /* the head: each chunk's first `delay` forwards */
        for (uint32_t k = 0; k < cnt[c] && k < delay; k++)
            out[j++] = fwd[c][k];
    memset(at, 0, (size_t)nchunk * sizeof *at);
    for (uint32_t i = 0; i < st->n; i++) {
        const Op *o = &st->ops[i];
        if (o->kind != OP_F || !in_chunks(o->chunk, lo, hi)) {
            out[j++] = *o;
            continue;
        }
        int64_t c = o->chunk - lo;
        uint64_t want = (uint64_t)at[c]++ + (uint64_t)delay;
        if (want < cnt[c])
            out[j++] = fwd[c][want];
    }
    for (int64_t c = 0; c < nchunk; c++)
        free(fwd[c]);
    free(fwd);
    free(cnt);
    free(at);
    set_ops(st, out, j);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Inserts R(v, m) `lead` compute ops ahead of each B(v, m) of the recomputed chunks
 * that has none on the rank, never ahead of an op of (v, m) that R waits for (F, and
 * SI when the micro-batch swaps; opsem_waits_on). O(n log n + n * lead). */
static void insert_r(StageOps *st, int64_t lo, int64_t hi, int64_t lead, Loc loc)
{
    uint32_t n = st->n, nr = 0, nb = 0;
    /* keys (chunk << 32 | mb) of the R ops already listed, sorted */
    for (uint32_t i = 0; i < n; i++)
        nr += st->ops[i].kind == OP_R;
    uint64_t *have = xmalloc(((size_t)nr + 1) * sizeof *have);
    nr = 0;
    for (uint32_t i = 0; i < n; i++)
        if (st->ops[i].kind == OP_R)
            have[nr++] = ((uint64_t)st->ops[i].chunk << 32) | st->ops[i].mb;
    qsort(have, nr, sizeof *have, cmp_u64);
    /* ins[k] = (position << 32 | index of the B): R of that B goes before op `position` */
    uint64_t *ins = xmalloc(((size_t)n + 1) * sizeof *ins);
    for (uint32_t i = 0; i < n; i++) {
        const Op *b = &st->ops[i];
        if (b->kind != OP_B || !in_chunks(b->chunk, lo, hi))
            continue;
        uint64_t key = ((uint64_t)b->chunk << 32) | b->mb;
        if (bsearch(&key, have, nr, sizeof *have, cmp_u64))
            continue;
        uint32_t at = i;
        for (int64_t left = lead; left > 0 && at > 0; at--) {
            const Op *q = &st->ops[at - 1];
            if (q->chunk == b->chunk && q->mb == b->mb && opsem_waits_on(OP_R, (OpKind)q->kind))
                break;
            if (op_stream(q->kind) == STREAM_COMPUTE && q->kind != OP_R)
                left--;
        }
        ins[nb++] = ((uint64_t)at << 32) | i;
    }
    qsort(ins, nb, sizeof *ins, cmp_u64);
    Op *out = xmalloc(((size_t)n + nb + 1) * sizeof *out);
    uint32_t j = 0, k = 0;
    for (uint32_t i = 0; i <= n; i++) {
        for (; k < nb && (uint32_t)(ins[k] >> 32) == i; k++) {
            out[j++] = recompute_op_of(&st->ops[(uint32_t)ins[k]], loc);
        }
        if (i < n)
            out[j++] = st->ops[i];
    }
    free(have);
    free(ins);
    set_ops(st, out, j);
}

/* Applies the rewrite (delay, R ops) to the ranks not done yet. */
static void rewrite(Pipeline *p, const uint8_t *todo, int64_t lo, int64_t hi, int64_t delay,
                    int64_t lead, Loc loc)
{
    for (int32_t s = 0; s < p->P; s++) {
        if (!todo[s])
            continue;
        shift_forwards(&p->stages[s], lo, hi, delay);
        insert_r(&p->stages[s], lo, hi, lead, loc);
    }
}

int pass_trecomp_blockwise(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    int64_t lo = 0, hi = 1, delay = -1, lead = -1;
    pass_arg_range(d, call, "chunks", &lo, &hi, &err);
    bool has_delay = pass_arg_int(d, call, "delay", &delay, &err);
    bool has_lead = pass_arg_int(d, call, "lead", &lead, &err);
    if (err)
        return err;
    if (p->V < 2) {
        diag_error(d, call->loc, DIAG_VALUE,
                   "trecomp_blockwise needs at least 2 chunks per stage (the pipeline has %d); "
                   "T-Recomp recomputes the shallow chunks of a multi-chunk schedule (TPipe §4.2)",
                   p->V);
        return 1;
    }
    if (!pass_chunks_in_range(d, call, p->V, &lo, &hi))
        return 1;
    if (has_delay && (delay < 0 || delay > p->M)) {
        diag_error(d, pass_arg_loc(call, "delay"), DIAG_VALUE,
                   "delay must be between 0 and the %d micro-batches", p->M);
        return 1;
    }
    if (has_lead && (lead < 0 || lead > 64)) {
        diag_error(d, pass_arg_loc(call, "lead"), DIAG_VALUE, "lead must be between 0 and 64");
        return 1;
    }
    if (!has_delay)
        delay = lo == 0 ? appendix_b_delay(p->P) : 0;
    if (delay > 0 && lo != 0) {
        diag_error(d, pass_arg_loc(call, "delay"), DIAG_VALUE,
                   "delay needs the recomputed chunks to start at chunk 0");
        return 1;
    }

    uint8_t *todo = xcalloc((size_t)p->P, 1);
    bool any = false;
    for (int32_t s = 0; s < p->P; s++) {
        todo[s] = !rank_done(&p->stages[s], lo, hi);
        any |= todo[s];
        if (todo[s] && p->stage_policy[s] == POLICY_NONE)
            p->stage_policy[s] = POLICY_FULL;
    }
    rederive_costs(p);
    if (!any) {
        free(todo);
        return 0;
    }

    /* Try the leads (or the one given) and the delay; keep the fastest runnable one. */
    void *scratch = NULL;
    int64_t best_lead = has_lead ? lead : 0, best_delay = delay;
    double best = INFINITY;
    for (int pass = 0; pass < 2 && !isfinite(best); pass++) {
        int64_t dl = pass == 0 ? delay : 0;
        if (pass == 1 && delay == 0)
            break;
        for (int64_t l = has_lead ? lead : 0; l <= (has_lead ? lead : 2); l++) {
            Pipeline *q = pipeline_clone(p);
            rewrite(q, todo, lo, hi, dl, l, call->loc);
            double t = sim_makespan(q, &scratch);
            pipeline_free(q);
            if (t < best - 1e-9) {
                best = t;
                best_lead = l;
                best_delay = dl;
            }
        }
    }
    sim_scratch_free(scratch);
    if (best_delay != delay)
        diag_warning(d, call->loc, WARN_PASS,
                     "trecomp_blockwise: a delay of %lld rounds leaves the schedule stuck; "
                     "applied without delay",
                     (long long)delay);
    rewrite(p, todo, lo, hi, best_delay, best_lead, call->loc);
    free(todo);
    return pass_rewritten(d, p, call, "trecomp_blockwise");
}
