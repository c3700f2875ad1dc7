/* workload.h - the workloads behind the run core (docs/runtime.md "Workloads"): what a
 * rank's ops compute. A backend (cpu.c, cuda/piperun_cuda.c) runs the ops' order,
 * memory, copies and messages; a workload says what one op does on the host and what
 * an iteration starts and ends with, through PrWorkload, as a backend plugs into the
 * core through PrBackend. pr_run picks one workload once, before the run is set up
 * (pr_workload_for); the core and the backends call it only through the table.
 *
 * The workloads: synthetic (synthetic.c: replays the cost model's times), mlp
 * (workload_mlp.c: runtime/models/mlp.h) and gpt/llama (workload_tf.c:
 * runtime/models/transformer.h).
 * The two model workloads share one implementation of everything but their arch
 * (workload_model.c, over the PrArch table each supplies). The tables themselves
 * (PrWorkload, PrArch) and the model's tensors as the core and the backends walk them
 * are the core's (core/core.h): it calls the workloads only through them. */
#ifndef PIPERUN_WORKLOAD_H
#define PIPERUN_WORKLOAD_H

#include "core.h"

/* The workloads (synthetic.c, workload_mlp.c, workload_tf.c). */
extern const PrWorkload pr_workload_synthetic, pr_workload_mlp, pr_workload_tf;

/* The workload that runs program g with options o (run.c): synthetic, mlp or
 * gpt/llama; NULL when o->workload is none of PR_MLP, PR_SYNTHETIC. */
const PrWorkload *pr_workload_for(const PrProgram *g, const PrOptions *o);

/* ---- the model workloads' shared part (workload_model.c) ----------------------------- */

/* Defines `static const PrArch NAME` for an arch whose model type is T, from its
 * functions over T *: FWD, REC, BWD, WGRAD (mlp_forward_split & co), ZERO, SGD (one
 * slice), IN_SLICE, WHOLE (the whole model's slice, from its config), ITER (one
 * reference iteration), FREE; and the three the arch writes itself as static
 * functions of the including file: a_tensor_count, a_tensor, a_create. */
#define PR_ARCH_DEFINE(NAME, T, FWD, REC, BWD, WGRAD, ZERO, SGD, IN_SLICE, WHOLE, ITER, FREE)   \
    static int a_forward(void *net, const MlpSlice *s, float *out, float *loss,               \
                         const PrRegion *rg, const float *in, const int *tok, const int *tgt, \
                         bool keep_all, void *ws, size_t ws_bytes)                            \
    {                                                                                         \
        return FWD((T *)net, s, out, loss, rg, in, tok, tgt, keep_all, ws, ws_bytes);         \
    }                                                                                         \
    static void a_recompute(void *net, const MlpSlice *s, const PrRegion *rg, const int *tok) \
    {                                                                                         \
        REC((T *)net, s, rg, tok);                                                            \
    }                                                                                         \
    static void a_backward(void *net, const MlpSlice *s, float *din, const PrRegion *rg,      \
                           const float *dout, const int *tok, const int *tgt, bool split)     \
    {                                                                                         \
        BWD((T *)net, s, din, rg, dout, tok, tgt, split);                                     \
    }                                                                                         \
    static void a_weight_grad(void *net, const MlpSlice *s, const PrRegion *rg,               \
                              const int *tok)                                                 \
    {                                                                                         \
        WGRAD((T *)net, s, rg, tok);                                                          \
    }                                                                                         \
    static void a_zero_grad(void *net, const MlpSlice *s)                                     \
    {                                                                                         \
        ZERO((T *)net, s);                                                                    \
    }                                                                                         \
    static void a_sgd(void *net, const MlpSlice *s, float lr)                                 \
    {                                                                                         \
        SGD((T *)net, s, lr);                                                                 \
    }                                                                                         \
    static bool a_in_slice(const void *net, int i, const MlpSlice *s)                         \
    {                                                                                         \
        return IN_SLICE((const T *)net, i, s);                                                \
    }                                                                                         \
    static MlpSlice a_whole(const void *net)                                                  \
    {                                                                                         \
        return WHOLE(&((const T *)net)->cfg);                                                 \
    }                                                                                         \
    static float a_iteration(void *net, int M, const int *tok, const int *tgt)                \
    {                                                                                         \
        return ITER((T *)net, M, tok, tgt);                                                   \
    }                                                                                         \
    static void a_destroy(void *net)                                                          \
    {                                                                                         \
        FREE((T *)net);                                                                       \
    }                                                                                         \
    static const PrArch NAME = {                                                              \
        a_forward,      a_recompute, a_backward, a_weight_grad, a_zero_grad,                  \
        a_sgd,          a_tensor_count, a_tensor, a_in_slice, a_create,                       \
        a_whole,        a_iteration, a_destroy,                                               \
    }

/* Defines the layout functions of PrModelSetup for an arch whose config type is C:
 * a_init (INIT: mlp_slices_init), a_sizes (ACT, CKPT, WACT: the region's bytes, CUTS:
 * its piece boundaries) and a_new (NEW: the model, as mlp_create). */
#define PR_MODEL_LAYOUT(C, INIT, ACT, CKPT, WACT, CUTS, NEW)                                 \
    static int a_init(const void *cfg, int nv, const int *layers, MlpSlice *slices)           \
    {                                                                                         \
        return INIT((const C *)cfg, nv, layers, slices);                                      \
    }                                                                                         \
    static void a_sizes(const void *cfg, const MlpSlice *s, int64_t out[3],                   \
                        int64_t from[PR_PIECES + 1])                                          \
    {                                                                                         \
        out[0] = (int64_t)ACT((const C *)cfg, s);                                             \
        out[1] = (int64_t)CKPT((const C *)cfg, s);                                            \
        out[2] = (int64_t)WACT((const C *)cfg, s);                                            \
        CUTS((const C *)cfg, s, from);                                                        \
    }                                                                                         \
    static void *a_new(const void *cfg, uint64_t seed)                                        \
    {                                                                                         \
        return NEW((const C *)cfg, seed);                                                     \
    }

/* A model workload's set-up, given its arch, its config cfg (MlpConfig, TfConfig), its
 * name for messages and what the arch says of it: init fills the slices from the
 * program's layers per virtual stage (0, or -1 when they do not sum to L), sizes gives
 * a slice's act/ckpt/wact bytes and piece boundaries (checked against the arena plan:
 * PrVstage act/ckpt/wact and from[PR_MLP]), net is the model (NULL: out of memory),
 * io_bytes the size of one message's hidden state. Loads the text, gives the
 * offloaded virtual stages their host states, allocates the ranks' batches and sets
 * OpenBLAS's threads. Returns 0 or -1 (pr_fail called). */
typedef struct PrModelSetup {
    const PrArch *arch;
    const void *cfg;
    const char *name;
    int L;
    int (*init)(const void *cfg, int nv, const int *layers, MlpSlice *slices);
    void (*sizes)(const void *cfg, const MlpSlice *s, int64_t out[3],
                  int64_t from[PR_PIECES + 1]);
    void *(*create)(const void *cfg, uint64_t seed);
    size_t io_bytes;
} PrModelSetup;
int pr_model_setup(PrRun *run, const PrModelSetup *ms);
/* The PrWorkload hooks every model workload shares. */
void pr_model_teardown(PrRun *run);
int pr_model_op(PrRank *r, uint32_t i, const PrOp *o);
int pr_model_state(PrRank *r, const PrOp *o);
void pr_model_zero(PrRun *run);
void pr_model_step(PrRun *run);
int pr_model_check(PrRun *run, PrResult *res);
double pr_model_reference_ms(PrRun *run);
void pr_model_check_weights(PrRun *run, PrResult *res);
/* A model workload: those hooks, its name and its set-up. */
#define PR_MODEL_WORKLOAD(nm, setup_fn)                                                   \
    {                                                                                     \
        .name = (nm), .plan = PR_MLP, .model = true, .setup = (setup_fn),                 \
        .teardown = pr_model_teardown, .op = pr_model_op, .state = pr_model_state,        \
        .zero = pr_model_zero, .step = pr_model_step, .check = pr_model_check,            \
        .reference_ms = pr_model_reference_ms, .check_weights = pr_model_check_weights,   \
    }

#endif
