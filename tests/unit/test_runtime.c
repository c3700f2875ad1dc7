/* test_runtime.c - libpiperun driven in-process: a PrProgram built here from an IR (1F1B
 * on 2 ranks, with a swap pair), the comm lowering of comm.h and the arena planner, run
 * with the synthetic and the mlp workloads (and the gpt and llama ones in its place),
 * as planned and with every piece of every region moved apart (runtime/region.h); the
 * tensors of both layouts lie inside the pieces; then a dropped message must end in
 * the watchdog's error, and an injected failure must name its rank and op. The rank
 * programs interpret the same (recv, op, send) sequence that emit_c.c writes out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "arena_plan.h"
#include "opsem.h"
#include "comm.h"
#include "emit_c.h"
#include "ir.h"
#include "piperun.h"
#include "core.h"
#include "workload.h"
#include "mlp_layout.h"
#include "tf_layout.h"

#define NR 2
#define NM 3

static Pipeline *pipe_;
static CommPlan *cp_;
static PrOp *ops_[NR];
static PrRankDesc ranks_[NR];
static PrVstage vst_[NR];
static PrMsg *msgs_;
static PrProgram prog_;
static int arch_;   /* the model workload's arch: 0 mlp, TF_GPT, TF_LLAMA */

/* Rank s's straight-line program, interpreted. */
static int interp(PrRank *r, int s)
{
    uint32_t it = cp_->start[s], end = cp_->start[s + 1];
    for (uint32_t i = 0; i < pipe_->stages[s].n; i++) {
        for (; it < end && cp_->items[it].pos == i && cp_->items[it].kind == COMM_RECV; it++)
            PR_CHECK(pr_recv(r, (int32_t)cp_->items[it].peer, cp_->items[it].msg));
        PR_CHECK(pr_op(r, i));
        for (; it < end && cp_->items[it].pos == i; it++)
            PR_CHECK(pr_send(r, (int32_t)cp_->items[it].peer, cp_->items[it].msg));
    }
    return 0;
}
static int rank0(PrRank *r) { return interp(r, 0); }
static int rank1(PrRank *r) { return interp(r, 1); }

static void push(int s, int kind, int mb)
{
    Op o = {(uint32_t)mb, (uint8_t)kind, 0, 0, LOC_NONE};
    stage_push(&pipe_->stages[s], o);
}

/* 1F1B, P = 2, M = 3; rank 1 recomputes micro-batch 1, rank 0 swaps micro-batch 0. */
static int setup(void **st)
{
    (void)st;
    pipe_ = pipeline_new();
    pipe_->name = strdup("rt");
    pipeline_set_shape(pipe_, NR, NM, 1);
    push(0, OP_F, 0); push(0, OP_SO, 0); push(0, OP_F, 1); push(0, OP_SI, 0);
    push(0, OP_B, 0); push(0, OP_F, 2); push(0, OP_B, 1); push(0, OP_B, 2);
    push(1, OP_F, 0); push(1, OP_B, 0); push(1, OP_F, 1); push(1, OP_R, 1);
    push(1, OP_B, 1); push(1, OP_F, 2); push(1, OP_B, 2);
    pipe_->costs.v[COST_F] = 0.2; pipe_->costs.v[COST_B] = 0.4;
    pipe_->costs.v[COST_R] = 0.2; pipe_->costs.v[COST_ACT] = 4096;
    pipe_->costs.v[COST_CKPT] = 1024; pipe_->costs.v[COST_HOST_BW] = 1e9;
    pipe_->costs.set = (1u << COST_F) | (1u << COST_B) | (1u << COST_R) | (1u << COST_ACT) |
                       (1u << COST_CKPT) | (1u << COST_HOST_BW);
    cp_ = comm_plan(pipe_);
    /* mlp: 2 layers, one per virtual stage */
    int vocab = 256, C = 8, T = 8, B = 2;
    ArenaSizes mz[NR];
    /* gpt/llama: 2 heads (llama: 1 key/value head), ffn 3C, tf_layout's regions */
    TfDims td = {arch_, vocab, C, 2, arch_ == TF_LLAMA ? 1 : 2, 3 * C, T, B};
    for (int v = 0; v < NR; v++) {
        TfLayout a = tf_layout(&td, 1, v == 0, v == NR - 1);
        /* the slice input is the whole checkpoint (tf_region_whole) */
        mz[v] = arch_ ? (ArenaSizes){.act = (int64_t)a.act * 4, .ckpt = (int64_t)a.ckpt * 4,
                                     .wact = (int64_t)a.wact * 4, .ckpt_layers = (int64_t)a.ckpt * 4}
                      : mlp_region_sizes(vocab, C, T, B, 1, v == 0, v == NR - 1);
    }
    ArenaSizes *cz = arena_sizes_from_costs(pipe_);
    ArenaPlan *am = arena_plan(pipe_, mz, 1), *as = arena_plan(pipe_, cz, 1);
    for (int s = 0; s < NR; s++) {
        const StageOps *so = &pipe_->stages[s];
        ops_[s] = calloc(so->n, sizeof(PrOp));
        int nso = 0;
        for (uint32_t i = 0; i < so->n; i++) {
            const Op *o = &so->ops[i];
            PrOp *q = &ops_[s][i];
            q->kind = o->kind;
            q->vstage = s;
            q->mb = (int32_t)o->mb;
            q->flags = (s == 1 && o->mb == 1 ? PR_HAS_R : 0) |
                       (s == 0 && o->mb == 0 ? PR_HAS_SI : 0);
            /* the waits, as the code generator writes them from the op table */
            if ((q->flags & PR_HAS_SI) && opsem_waits_on((OpKind)o->kind, OP_SI))
                q->flags |= PR_WAIT_SI;
            q->nso_before = op_sem[o->kind].mem == MEM_ALLOC ? (uint32_t)nso : 0;
            memcpy(q->at[PR_MLP], am->rank[s].at[i], sizeof q->at[PR_MLP]);
            memcpy(q->at[PR_SYNTHETIC], as->rank[s].at[i], sizeof q->at[PR_SYNTHETIC]);
            q->held[PR_MLP] = am->rank[s].held[i];
            q->held[PR_SYNTHETIC] = as->rank[s].held[i];
            q->mem_alloc[PR_MLP] = am->rank[s].alloc[i];
            q->mem_alloc[PR_SYNTHETIC] = as->rank[s].alloc[i];
            q->mem_free[PR_MLP] = am->rank[s].freed[i];
            q->mem_free[PR_SYNTHETIC] = as->rank[s].freed[i];
            q->cost_ms = o->kind == OP_F || o->kind == OP_R ? 0.2 : o->kind == OP_B ? 0.4 : 0;
            q->cost_bytes = (double)as->rank[s].held[i];
            nso += o->kind == OP_SO;
        }
        ranks_[s] = (PrRankDesc){s ? rank1 : rank0, ops_[s], so->n,
                                 {am->rank[s].size, as->rank[s].size},
                                 {am->rank[s].peak_live, as->rank[s].peak_live}, 1e9, 0,
                                 {0, 0}, NULL, NULL, 0, NULL};
        vst_[s] = (PrVstage){.rank = s, .chunk = 0, .layers = 1, .act = mz[s].act,
                             .ckpt = mz[s].ckpt, .wact = mz[s].wact};
        arena_region_cuts(&mz[s], vst_[s].from[PR_MLP]);
        arena_region_cuts(&cz[s], vst_[s].from[PR_SYNTHETIC]);
    }
    msgs_ = calloc(cp_->nmsgs, sizeof *msgs_);
    for (uint32_t k = 0; k < cp_->nmsgs; k++) {
        const CommMsg *m = &cp_->msgs[k];
        const Op *po = &pipe_->stages[m->src].ops[m->src_pos];
        const Op *co = &pipe_->stages[m->dst].ops[m->dst_pos];
        msgs_[k] = (PrMsg){(int32_t)m->src, (int32_t)m->dst, po->kind, co->kind,
                           po->kind == OP_F ? PR_PAY_ACT : PR_PAY_GRAD, (int32_t)m->src,
                           (int32_t)po->mb, (int32_t)m->dst, (int32_t)co->mb};
    }
    prog_ = (PrProgram){.abi = PIPERUN_ABI, .name = "rt", .source = "test", .version = "t",
                        .P = NR, .M = NM, .V = 1, .send_mode = PR_SEND_EAGER, .ranks = ranks_,
                        .vstages = vst_, .msgs = msgs_, .nmsgs = cp_->nmsgs,
                        .model_vocab = vocab, .model_hidden = C, .model_layers = 2, .model_seq = T, .model_batch = B,
                        .synthetic_scale = 1, .sim_ms = -1, .model_arch = arch_,
                        .model_heads = td.NH, .model_kv_heads = td.NKV, .model_ffn = td.F};
    arena_plan_free(am);
    arena_plan_free(as);
    free(cz);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    for (int s = 0; s < NR; s++)
        free(ops_[s]);
    free(msgs_);
    comm_plan_free(cp_);
    pipeline_free(pipe_);
    return 0;
}

static void test_synthetic(void **st)
{
    (void)st;
    unsetenv("PIPERUN_FAULT");
    PrOptions o;
    pr_options_default(&o, &prog_);
    o.workload = PR_SYNTHETIC;
    o.iters = 2;
    o.quiet = true;
    PrResult res;
    assert_int_equal(pr_run(&prog_, &o, &res), 0);
    assert_string_equal(res.error, "");
    for (int s = 0; s < NR; s++) {
        /* F, B and R of each rank busy-wait their cost: rank 0 has 3 F + 3 B = 1.8 ms
         * per iteration, rank 1 adds one R: 2.0 ms; two iterations. */
        assert_true(res.busy_ms[s] >= (s ? 4.0 : 3.6));
        assert_int_equal(res.peak_arena[s], ranks_[s].peak_live_bytes[PR_SYNTHETIC]);
    }
    pr_result_free(&res);
}

/* Three iterations of the model workload with --check: the gradients of iteration 1
 * match the sequential reference (PrRefModel), and the measured peak of live arena
 * bytes is the plan's. */
static void run_check(PrResult *res)
{
    unsetenv("PIPERUN_FAULT");
    PrOptions o;
    pr_options_default(&o, &prog_);
    assert_int_equal(o.workload, PR_MLP);
    o.iters = 3;
    o.check = true;
    o.quiet = true;
    assert_int_equal(pr_run(&prog_, &o, res), 0);
    assert_true(res->ngrad > 0);
    assert_true(res->max_grad_err >= 0 && res->max_grad_err < 1e-5);
    assert_true(res->loss[0] > 0);
    for (int s = 0; s < NR; s++)
        assert_int_equal(res->peak_arena[s], ranks_[s].peak_live_bytes[PR_MLP]);
}

static void test_mlp_check(void **st)
{
    (void)st;
    PrResult res;
    run_check(&res);
    pr_result_free(&res);
}

/* A program whose piece boundaries are not the model layout's is refused at start-up,
 * with both sets named (as one planned for other region sizes is). */
static void test_cuts_checked(void **st)
{
    (void)st;
    unsetenv("PIPERUN_FAULT");
    int64_t keep = vst_[1].from[PR_MLP][1];
    vst_[1].from[PR_MLP][1] = keep + 64;
    PrOptions o;
    pr_options_default(&o, &prog_);
    o.quiet = true;
    PrResult res;
    int rc = pr_run(&prog_, &o, &res);
    vst_[1].from[PR_MLP][1] = keep;
    char want[160];
    snprintf(want, sizeof want, "virtual stage 1: the arena plan cuts the region into pieces "
             "at 0/%lld/", (long long)keep + 64);
    bool named = strstr(res.error, want) && strstr(res.error, "regenerate the program");
    if (!named)
        fprintf(stderr, "error: %s\n", res.error);
    pr_result_free(&res);
    assert_int_equal(rc, 1);
    assert_true(named);
}

/* Moves every placed piece of every region of workload w to a place of its own: each
 * distinct (region, piece, planned offset) gets fresh bytes in a larger arena, the last
 * op's last piece lowest, so the pieces of a region lie apart and in reversed order,
 * with a 64-byte gap after each. No two places overlap, so any valid plan stays valid.
 * Returns the number of pieces placed apart. */
static int scatter(int w)
{
    int moved = 0;
    for (int s = 0; s < NR; s++) {
        uint32_t n = ranks_[s].nops;
        int64_t (*key)[3] = calloc((size_t)n * PR_PIECES, sizeof *key), *to;
        to = calloc((size_t)n * PR_PIECES, sizeof *to);
        int nk = 0;
        int64_t next = 0;
        for (uint32_t i = n; i-- > 0;) {
            PrOp *q = &ops_[s][i];
            for (int k = PR_PIECES - 1; k >= 0; k--) {
                if (q->at[w][k] < 0)
                    continue;
                int64_t vm = (int64_t)q->vstage * NM + q->mb, old = q->at[w][k];
                int j = 0;
                while (j < nk && !(key[j][0] == vm && key[j][1] == k && key[j][2] == old))
                    j++;
                if (j == nk) {
                    const int64_t *from = vst_[q->vstage].from[w];
                    key[nk][0] = vm;
                    key[nk][1] = k;
                    key[nk][2] = old;
                    to[nk++] = next;
                    next += from[k + 1] - from[k] + 64;
                    moved++;
                }
                q->at[w][k] = to[j];
            }
        }
        ranks_[s].arena_bytes[w] = next;
        free(key);
        free(to);
    }
    return moved;
}

/* The op tables and rank descriptions as setup made them, while a test changes them. */
typedef struct SavedPlan {
    PrOp *ops[NR];
    PrRankDesc ranks[NR];
} SavedPlan;

static SavedPlan save_plan(void)
{
    SavedPlan k;
    memcpy(k.ranks, ranks_, sizeof k.ranks);
    for (int s = 0; s < NR; s++) {
        k.ops[s] = malloc(ranks_[s].nops * sizeof(PrOp));
        memcpy(k.ops[s], ops_[s], ranks_[s].nops * sizeof(PrOp));
    }
    return k;
}

static void restore_plan(SavedPlan *k)
{
    for (int s = 0; s < NR; s++) {
        memcpy(ops_[s], k->ops[s], ranks_[s].nops * sizeof(PrOp));
        free(k->ops[s]);
    }
    memcpy(ranks_, k->ranks, sizeof k->ranks);
}

/* The same training with every piece of every region apart (scatter): the swap pair of
 * rank 0 gathers and scatters its region piece by piece, the R of rank 1 rebuilds into
 * pieces away from the checkpoint, and the gradients, losses and peaks are those of the
 * packed plan, to the bit. */
static void test_mlp_check_scattered(void **st)
{
    (void)st;
    PrResult packed, apart;
    run_check(&packed);
    SavedPlan keep = save_plan();
    assert_true(scatter(PR_MLP) > 2 * NM);
    run_check(&apart);
    restore_plan(&keep);
    assert_int_equal(apart.ngrad, packed.ngrad);
    for (int i = 0; i < packed.ngrad; i++)
        assert_true(apart.grad_err[i] == packed.grad_err[i]);
    for (int it = 0; it < packed.iters; it++)
        assert_true(apart.loss[it] == packed.loss[it]);
    pr_result_free(&packed);
    pr_result_free(&apart);
}

/* The synthetic workload on scattered pieces: F and R touch, SO and SI move, every
 * piece where it now lies; the measured peak is the plan's. */
static void test_synthetic_scattered(void **st)
{
    (void)st;
    unsetenv("PIPERUN_FAULT");
    SavedPlan keep = save_plan();
    assert_true(scatter(PR_SYNTHETIC) > 2 * NM);
    PrOptions o;
    pr_options_default(&o, &prog_);
    o.workload = PR_SYNTHETIC;
    o.quiet = true;
    PrResult res;
    int rc = pr_run(&prog_, &o, &res);
    restore_plan(&keep);
    assert_int_equal(rc, 0);
    for (int s = 0; s < NR; s++)
        assert_int_equal(res.peak_arena[s], ranks_[s].peak_live_bytes[PR_SYNTHETIC]);
    pr_result_free(&res);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The defaults with the synthetic workload, quiet. */
static PrOptions quiet_synthetic(void)
{
    PrOptions o;
    pr_options_default(&o, &prog_);
    o.workload = PR_SYNTHETIC;
    o.quiet = true;
    return o;
}

static void test_faults(void **st)
{
    (void)st;
    PrOptions o = quiet_synthetic();
    o.timeout_s = 0.3;
    PrResult res;
    /* rank 0 drops its sends after op 0 (F0): rank 1 waits for F0 before its op 0 */
    setenv("PIPERUN_FAULT", "0:0:drop", 1);
    double t0 = now_s();
    assert_int_equal(pr_run(&prog_, &o, &res), 1);
    assert_true(now_s() - t0 < 5);
    /* rank 1 waits first (for F0, before its op 0); rank 0 itself gets stuck soon
     * after, waiting for B0's gradient: the earliest deadline fires, usually rank 1's,
     * but on a loaded machine rank 1's thread may start its wait later than rank 0 */
    bool named = strstr(res.error, "rank 1, op F0 (#0): watchdog: stuck 0.3 s in the receive") ||
                 (strstr(res.error, "rank 0, op ") &&
                  strstr(res.error, "watchdog: stuck 0.3 s in the receive"));
    if (!named)
        fprintf(stderr, "error: %s\n", res.error);
    pr_result_free(&res);
    assert_true(named);
    /* an op that fails stops every rank */
    setenv("PIPERUN_FAULT", "1:2:fail", 1);
    assert_int_equal(pr_run(&prog_, &o, &res), 1);
    bool same = !strcmp(res.error, "rank 1, op F1 (#2): injected failure (PIPERUN_FAULT)");
    pr_result_free(&res);
    assert_true(same);
    unsetenv("PIPERUN_FAULT");
    /* options that do not fit the program */
    o.check = true;
    assert_int_equal(pr_run(&prog_, &o, &res), 1);
    same = !strcmp(res.error, "--check needs the mlp workload");
    pr_result_free(&res);
    assert_true(same);
}

/* Tensors of a layout as spans [off, off + n) of floats, in layout order. */
typedef struct Spans {
    size_t off[256], n[256];
    int count;
} Spans;

static void span(Spans *t, size_t off, size_t n)
{
    assert_true(t->count < 256);
    if (n == 0)
        return;
    t->off[t->count] = off;
    t->n[t->count++] = n;
}

/* The tensors (offset in the layer, floats) of each of L layers at base + i * stride. */
static void layer_spans(Spans *t, size_t base, size_t stride, size_t L, const size_t (*x)[2],
                        size_t n)
{
    for (size_t i = 0; i < L; i++)
        for (size_t j = 0; j < n; j++)
            span(t, base + i * stride + x[j][0], x[j][1]);
}

/* The spans tile [0, act) in order, and each lies wholly inside one piece of from. */
static void spans_in_pieces(const Spans *t, const int64_t from[PR_PIECES + 1], size_t act)
{
    size_t end = 0;
    for (int i = 0; i < t->count; i++) {
        assert_int_equal(t->off[i], end);
        end = t->off[i] + t->n[i];
        int k = pr_region_piece(from, (int64_t)t->off[i]);
        if (!((int64_t)end <= from[k + 1]))
            fail_msg("tensor %d [%zu, %zu) crosses the cut at %lld", i, t->off[i], end,
                     (long long)from[k + 1]);
    }
    assert_int_equal(end, act);
    assert_int_equal(from[PR_PIECES], (int64_t)act);
}

/* Every tensor (per-layer arrays as MlpActs addresses them) of the mlp layout and every
 * tensor of the gpt/llama layout lies wholly inside one piece of its layout's cuts
 * (runtime/region.h), for every kind of slice; and the code generator cuts the mlp
 * region where the runtime does. */
static void test_layout_pieces(void **st)
{
    (void)st;
    size_t V = 50, C = 8, T = 4, B = 3;
    for (int nl = 0; nl <= 3; nl++)
        for (int kind = 0; kind < 4; kind++) {
            bool embed = kind & 1, head = kind & 2;
            MlpLayout a = mlp_layout(V, C, T, B, (size_t)nl, embed, head);
            PrRegion cut = mlp_region_whole(NULL, &a);
            const int64_t *from = cut.from;
            size_t nres = (size_t)nl + head, L = (size_t)nl;
            Spans t = {.count = 0};
            span(&t, a.xs, nres ? a.sbtc : 0);                       /* xs[0] */
            span(&t, a.xs + a.sbtc, nres > 1 ? (nres - 1) * a.sbtc : 0);
            span(&t, a.mean, L * a.sbt);
            span(&t, a.rstd, L * a.sbt);
            span(&t, a.ln_out, L * a.sbtc);
            span(&t, a.fch, L * a.sbth);
            span(&t, a.gelu, L * a.sbth);
            if (head) {
                span(&t, a.lnf_mean, a.sbt);
                span(&t, a.lnf_rstd, a.sbt);
                span(&t, a.lnf_out, a.sbtc);
                span(&t, a.probs, mlp_pad16(B * T * V));
            }
            span(&t, a.dxs, (L + embed) * a.sbtc);
            span(&t, a.dln, L * a.sbtc);
            if (head)
                span(&t, a.dlnf, a.sbtc);
            span(&t, a.dgelu, L ? a.sbth : 0);
            spans_in_pieces(&t, from, a.act);
            /* emit plans with the same cuts (bytes) */
            ArenaSizes z = mlp_region_sizes((int)V, (int)C, (int)T, (int)B, nl, embed, head);
            int64_t planned[PR_PIECES + 1];
            arena_region_cuts(&z, planned);
            for (int k = 0; k <= PR_PIECES; k++)
                assert_int_equal(planned[k], from[k] * (int64_t)sizeof(float));
        }
    for (int arch = TF_GPT; arch <= TF_LLAMA; arch++)
        for (int nl = 0; nl <= 2; nl++)
            for (int kind = 0; kind < 4; kind++) {
                bool embed = kind & 1, head = kind & 2;
                TfDims d = {arch, 50, 8, 2, arch == TF_LLAMA ? 1 : 2, 24, 4, 3};
                TfLayout a = tf_layout(&d, nl, embed, head);
                PrRegion cut = tf_region_whole(NULL, &a);
                const int64_t *from = cut.from;
                size_t N = 12, K = 8 * (size_t)d.NKV / 2, L = (size_t)nl, h = head;
                size_t nc = tf_pad16(N * 8), nqkv = tf_pad16(N * (8 + 2 * K));
                size_t nf = tf_pad16(N * 24), natt = tf_pad16(3 * 2 * 4 * 4);
                size_t nv = tf_pad16(N * 50), any = L > 0, llama = arch == TF_LLAMA;
                Spans t = {.count = 0};
                span(&t, a.xs, L + h ? nc : 0);
                span(&t, a.xs + nc, L + h > 1 ? (L + h - 1) * nc : 0);
                const size_t fwd[][2] = {{a.l_ln1, nc}, {a.l_qkv, nqkv}, {a.l_att, natt},
                                         {a.l_atty, nc}, {a.l_xmid, nc}, {a.l_ln2, nc},
                                         {a.l_fa, nf}, {a.l_fb, nf}, {a.l_fc, llama * nf},
                                         {a.l_fd, llama * nf}};
                const size_t grad[][2] = {{a.g_ln1, nc}, {a.g_qkv, nqkv}, {a.g_xmid, nc},
                                          {a.g_ln2, nc}, {a.g_fa, nf}, {a.g_fc, llama * nf}};
                layer_spans(&t, a.lbase, a.lstride, L, fwd, ARRAY_LEN(fwd));
                span(&t, a.lnf, h * nc);
                span(&t, a.logits, h * nv);
                span(&t, a.probs, h * nv);
                layer_spans(&t, a.gbase, a.gstride, L, grad, ARRAY_LEN(grad));
                span(&t, a.dxs, (L + embed) * nc);
                span(&t, a.dlnf, h * nc);
                span(&t, a.t_datt, any * natt);
                span(&t, a.t_datty, any * nc);
                span(&t, a.t_dfb, any * nf);
                spans_in_pieces(&t, from, a.act);
            }
}

/* A rank program that sends message 0 to a rank that is not its receiver. */
static int bad_send(PrRank *r)
{
    return pr_send(r, 5, 0);
}

/* The runtime core's checks of the calls generated code makes, and what the MPI
 * transports share: the process count and the options of processes other than 0. */
static void test_core_checks(void **st)
{
    (void)st;
    PrOptions o = quiet_synthetic();
    PrRankDesc bad[NR];
    memcpy(bad, ranks_, sizeof bad);
    bad[msgs_[0].src].run = bad_send;
    PrProgram g = prog_;
    g.ranks = bad;
    PrResult res;
    assert_int_equal(pr_run(&g, &o, &res), 1);
    char want[120];
    snprintf(want, sizeof want, "rank %d: send of message 0 to rank 5 does not match the program",
             msgs_[0].src);
    bool same = !strcmp(res.error, want);
    if (!same)
        fprintf(stderr, "error: %s\n", res.error);
    pr_result_free(&res);
    assert_true(same);

    assert_int_equal(pr_process_count_check(&prog_, 1, &res), 0);
    assert_int_equal(pr_process_count_check(&prog_, NR, &res), 0);
    assert_int_equal(pr_process_count_check(&prog_, NR + 1, &res), -1);
    assert_non_null(strstr(res.error, "started with 3 MPI processes but the program has 2 ranks"));
    char trace[64];
    o.trace = "t.json";
    o.reference = o.profile = true;
    pr_process_options(&o, 0, trace, sizeof trace);
    assert_string_equal(o.trace, "t.json");
    assert_true(o.reference && o.profile);
    pr_process_options(&o, 1, trace, sizeof trace);
    assert_string_equal(o.trace, "t.json.rank1");
    assert_false(o.reference || o.profile);
}

/* OG/LW host copies (pr_host_alloc): page-aligned and whole pages, so two buffers
 * allocated one after the other never share the page that cudaHostRegister pins (the
 * second registration used to fail with "already registered" on every small model). */
static void test_host_buffers_own_pages(void **state)
{
    (void)state;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t ns[] = {0, 1, 3, 1023, 1024, 1025, 100000};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        size_t b = pr_host_bytes(ns[i]);
        assert_true(b >= ns[i] * sizeof(float) && b >= pg);
        assert_int_equal(b % pg, 0);
        assert_true(b < ns[i] * sizeof(float) + pg + (ns[i] ? 0 : pg));
        float *w = pr_host_alloc(ns[i]), *g = pr_host_alloc(ns[i]);
        assert_non_null(w);
        assert_non_null(g);
        assert_int_equal((uintptr_t)w % pg, 0);
        assert_int_equal((uintptr_t)g % pg, 0);
        uintptr_t wa = (uintptr_t)w, ga = (uintptr_t)g;   /* [a, a+b) do not overlap */
        assert_true(wa + b <= ga || ga + b <= wa);
        for (size_t k = 0; k < b / sizeof(float); k++)
            assert_true(w[k] == 0.0f);
        free(w);
        free(g);
    }
}

/* The router (router.c), by hand: 2 ranks, 2 chunks each, virtual stages 0..3 on ranks
 * 0, 1, 1, 0 (a V shape: v1 -> v2 stays on rank 1), M = 2. Forward,
 * the output of (v,m) goes into the input of (v+1,m) when rank-local, else to out of
 * (v,m); backward the same towards v-1. A message's payload leaves from out of its
 * producer's (v,m) and arrives in the input of its consumer's (v,m), by direction. */
static void test_router(void **st)
{
    (void)st;
    PrVstage vs[4] = {{.rank = 0}, {.rank = 1}, {.rank = 1}, {.rank = 0}};
    PrProgram g = {.P = 2, .M = 2, .V = 2, .vstages = vs};
    PrRun run = {.prog = &g, .P = 2, .PV = 4, .M = 2};
    PrIo io;
    assert_int_equal(pr_io_init(&io, 8), 0);
    /* (v,m) is slot v*M + m */
    assert_ptr_equal(pr_io_in(&io, &run, PR_FWD, 2, 1), &io.in[PR_FWD][5]);
    assert_ptr_equal(pr_io_next(&io, &run, 1, PR_FWD, 1, 1), &io.in[PR_FWD][5]); /* 1->2 local */
    assert_ptr_equal(pr_io_next(&io, &run, 1, PR_FWD, 2, 0), &io.out[PR_FWD][4]); /* 2->3 sent */
    assert_ptr_equal(pr_io_next(&io, &run, 0, PR_FWD, 0, 1), &io.out[PR_FWD][1]);
    assert_ptr_equal(pr_io_next(&io, &run, 1, PR_BWD, 2, 0), &io.in[PR_BWD][2]); /* 2->1 local */
    assert_ptr_equal(pr_io_next(&io, &run, 0, PR_BWD, 3, 1), &io.out[PR_BWD][7]); /* 3->2 sent */
    PrMsg act = {.src = 1, .dst = 0, .payload = PR_PAY_ACT, .from_v = 2, .from_mb = 1,
                 .to_v = 3, .to_mb = 1};
    PrMsg grad = {.src = 0, .dst = 1, .payload = PR_PAY_GRAD, .from_v = 3, .from_mb = 0,
                  .to_v = 2, .to_mb = 0};
    PrMsg tok = {.payload = PR_PAY_TOKEN};
    assert_ptr_equal(pr_io_msg(&io, &run, &act, true), &io.out[PR_FWD][5]);
    assert_ptr_equal(pr_io_msg(&io, &run, &act, false), &io.in[PR_FWD][7]);
    assert_ptr_equal(pr_io_msg(&io, &run, &grad, true), &io.out[PR_BWD][6]);
    assert_ptr_equal(pr_io_msg(&io, &run, &grad, false), &io.in[PR_BWD][4]);
    assert_null(pr_io_msg(&io, &run, &tok, true));
    /* host buffers move: what F of (1,1) on rank 1 hands on is what (2,1) takes */
    PrRank r = {.run = &run, .id = 1, .io = io};
    void *buf = malloc(4);
    pr_io_route(&r, PR_FWD, 1, 1, buf);
    assert_ptr_equal(pr_io_take(&r, PR_FWD, 2, 1), buf);
    assert_null(pr_io_take(&r, PR_FWD, 2, 1));
    pr_io_route(&r, PR_FWD, 2, 1, buf); /* to the send of message act */
    assert_ptr_equal(pr_io_send(&r, &act), buf);
    assert_null(pr_io_send(&r, &act));
    pr_io_recv(&r, &grad, buf);
    assert_ptr_equal(r.io.in[PR_BWD][4], buf);
    pr_io_free(&r.io, free); /* frees buf */
}

/* pr_run's choice of workload: by --workload, then by the model's arch. */
static void test_workload_for(void **st)
{
    (void)st;
    PrProgram g = {.model_arch = 0};
    PrOptions o = {.workload = PR_SYNTHETIC};
    assert_ptr_equal(pr_workload_for(&g, &o), &pr_workload_synthetic);
    o.workload = PR_MLP;
    assert_ptr_equal(pr_workload_for(&g, &o), &pr_workload_mlp);
    g.model_arch = TF_LLAMA;
    assert_ptr_equal(pr_workload_for(&g, &o), &pr_workload_tf);
    o.workload = 7;
    assert_null(pr_workload_for(&g, &o));
    assert_true(pr_workload_mlp.model && !pr_workload_mlp.replay);
    assert_true(pr_workload_synthetic.replay && !pr_workload_synthetic.model);
    assert_int_equal(pr_workload_synthetic.plan, PR_SYNTHETIC);
    assert_int_equal(pr_workload_tf.plan, PR_MLP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_buffers_own_pages),
        cmocka_unit_test(test_layout_pieces),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_mlp_check),
        cmocka_unit_test(test_mlp_check_scattered),
        cmocka_unit_test(test_synthetic_scattered),
        cmocka_unit_test(test_cuts_checked),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_core_checks),
        cmocka_unit_test(test_router),
        cmocka_unit_test(test_workload_for),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    /* the same program training the gpt and llama workloads (runtime/models/transformer.h),
     * recompute and swap included */
    const struct CMUnitTest model_tests[] = {cmocka_unit_test(test_mlp_check),
                                             cmocka_unit_test(test_mlp_check_scattered),
                                             cmocka_unit_test(test_cuts_checked)};
    arch_ = TF_GPT;
    failed += cmocka_run_group_tests_name("gpt", model_tests, setup, teardown);
    arch_ = TF_LLAMA;
    failed += cmocka_run_group_tests_name("llama", model_tests, setup, teardown);
    return failed;
}
