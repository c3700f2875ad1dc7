/* test_runtime.c - libpiperun driven in-process: a PrProgram built here from an IR (1F1B
 * on 2 ranks, with a swap pair), the comm lowering of comm.h and the arena planner, run
 * with the synthetic and the mlp workloads (and the gpt and llama ones in its place); then a dropped message must end in the
 * watchdog's error, and an injected failure must name its rank and op. The rank
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

#include <cmocka.h>

#include "arena_plan.h"
#include "opsem.h"
#include "comm.h"
#include "emit_c.h"
#include "ir.h"
#include "piperun.h"
#include "piperun_internal.h"
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
        /* the slice input is the whole checkpoint (tf_layout_cuts) */
        mz[v] = arch_ ? (ArenaSizes){.act = (int64_t)a.act * 4, .ckpt = (int64_t)a.ckpt * 4,
                                     .wact = (int64_t)a.wact * 4, .input = (int64_t)a.ckpt * 4}
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
                                 {am->rank[s].peak_live, as->rank[s].peak_live}, 1e9, 0};
        vst_[s] = (PrVstage){s, 0, 1, mz[s].act, mz[s].ckpt, mz[s].wact, {{0}}};
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
                        .mlp_vocab = vocab, .mlp_C = C, .mlp_L = 2, .mlp_T = T, .mlp_B = B,
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

static void test_mlp_check(void **st)
{
    (void)st;
    unsetenv("PIPERUN_FAULT");
    PrOptions o;
    pr_options_default(&o, &prog_);
    assert_int_equal(o.workload, PR_MLP);
    o.iters = 3;
    o.check = true;
    o.quiet = true;
    PrResult res;
    assert_int_equal(pr_run(&prog_, &o, &res), 0);
    assert_true(res.ngrad > 0);
    assert_true(res.max_grad_err >= 0 && res.max_grad_err < 1e-5);
    assert_true(res.loss[0] > 0);
    for (int s = 0; s < NR; s++)
        assert_int_equal(res.peak_arena[s], ranks_[s].peak_live_bytes[PR_MLP]);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_mlp_check),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_core_checks),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    /* the same program training the gpt and llama workloads (runtime/transformer.h),
     * recompute and swap included */
    const struct CMUnitTest model_tests[] = {cmocka_unit_test(test_mlp_check)};
    arch_ = TF_GPT;
    failed += cmocka_run_group_tests_name("gpt", model_tests, setup, teardown);
    arch_ = TF_LLAMA;
    failed += cmocka_run_group_tests_name("llama", model_tests, setup, teardown);
    return failed;
}
