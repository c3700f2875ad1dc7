/* workload_mlp.c - the `mlp` workload (workload.h): the model of runtime/mlp.h, its
 * arch table for the model workloads' shared part (workload_model.c, which runs the
 * ops, the offload, the step and --check over it) and its set-up. */
#include "workload.h"

static int mlp_init(const void *cfg, int nv, const int *layers, MlpSlice *slices)
{
    return mlp_slices_init(cfg, nv, layers, slices);
}

static void mlp_sizes(const void *cfg, const MlpSlice *s, int64_t out[3],
                      int64_t from[PR_PIECES + 1])
{
    out[0] = (int64_t)mlp_act_bytes(cfg, s);
    out[1] = (int64_t)mlp_ckpt_bytes(cfg, s);
    out[2] = (int64_t)mlp_wact_bytes(cfg, s);
    mlp_region_cuts(cfg, s, from);
}

static MlpConfig config_of(const PrProgram *g)
{
    return (MlpConfig){g->model_vocab, g->model_hidden, g->model_layers, g->model_seq,
                       g->model_batch, g->M};
}

static void *mlp_new(const void *cfg, uint64_t seed)
{
    return mlp_create(cfg, seed);
}

/* ---- the arch table (PrArch) ----------------------------------------------------------- */

static int a_forward(void *net, const MlpSlice *s, float *out, float *loss, const PrRegion *rg,
                     const float *in, const int *tok, const int *tgt, bool keep_all)
{
    return mlp_forward_split(net, s, out, loss, rg, in, tok, tgt, keep_all);
}

static void a_recompute(void *net, const MlpSlice *s, const PrRegion *rg, const int *tok)
{
    mlp_recompute_split(net, s, rg, tok);
}

static void a_backward(void *net, const MlpSlice *s, float *din, const PrRegion *rg,
                       const float *dout, const int *tok, const int *tgt, bool split)
{
    mlp_backward_split(net, s, din, rg, dout, tok, tgt, split);
}

static void a_weight_grad(void *net, const MlpSlice *s, const PrRegion *rg, const int *tok)
{
    mlp_weight_grad_split(net, s, rg, tok);
}

static void a_zero_grad(void *net, const MlpSlice *s)
{
    mlp_zero_grad(net, s);
}

static void a_sgd(void *net, const MlpSlice *s, float lr)
{
    mlp_sgd_step(net, s, lr);
}

static int a_tensor_count(const void *net)
{
    return mlp_param_count(net);
}

static void a_tensor(const void *net, int i, const char **name, float **param, float **grad,
                     size_t *n)
{
    mlp_param(net, i, name, param, grad, n);
}

static bool a_in_slice(const void *net, int i, const MlpSlice *s)
{
    return mlp_param_in_slice(net, i, s);
}

static void *a_create(const PrRun *run)
{
    MlpConfig c = config_of(run->prog);
    return mlp_create(&c, run->opt.seed);
}

static MlpSlice a_whole(const void *net)
{
    return mlp_whole(&((const MlpModel *)net)->cfg);
}

static float a_iteration(void *net, int M, const int *tok, const int *tgt)
{
    return mlp_reference_iteration(net, M, tok, tgt);
}

static void a_destroy(void *net)
{
    mlp_free(net);
}

static const PrArch mlp_arch = {
    a_forward, a_recompute, a_backward, a_weight_grad, a_zero_grad, a_sgd,
    a_tensor_count, a_tensor, a_in_slice, a_create, a_whole, a_iteration, a_destroy,
};

/* ---- the workload ------------------------------------------------------------------------ */

static int mlp_setup(PrRun *run)
{
    MlpConfig c = config_of(run->prog);
    char why[160];
    if (mlp_config_check(&c, why, sizeof why) != 0) {
        pr_fail(run, -1, -1, "mlp model: %s", why);
        return -1;
    }
    PrModelSetup ms = {&mlp_arch, &c,       "mlp",   c.L, mlp_init,
                       mlp_sizes, mlp_new, mlp_io_bytes(&c)};
    return pr_model_setup(run, &ms);
}

const PrWorkload pr_workload_mlp = PR_MODEL_WORKLOAD("mlp", mlp_setup);
