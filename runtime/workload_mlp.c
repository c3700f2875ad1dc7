/* workload_mlp.c - the `mlp` workload in the runtime: each op of a rank runs the slice
 * of runtime/mlp.h that its virtual stage owns, on activations in the rank's arena.
 *
 * Data flow between ops of one micro-batch m:
 *   F(v,m) reads in_f[(v,m)] (the hidden state from F(v-1,m): a message payload, or a
 *   buffer left by a same-rank F) and writes its output either straight into
 *   in_f[(v+1,m)] of its own rank (next virtual stage on the same rank) or into
 *   out_f[(v,m)], which the send of the message to F(v+1,m) hands over. B does the
 *   same backwards with in_b/out_b. Io buffers (mlp_io_bytes each) live outside the
 *   arena, like a transport's buffers; the activations themselves live in the arena.
 *
 * Model-state offload (OG/LW, TPipe's T-Offload): a virtual stage with an OG keeps its
 * master weights in host_w. OG (device-to-host copy thread, after the chunk's last B/W)
 * copies the slice's gradients to host_g and runs the SGD step on host_w; LW (host-to-
 * device copy thread, before the chunk's first F) copies host_w into the model's
 * parameters. The end-of-iteration step skips those slices, so the arithmetic is that of
 * mlp_sgd_step and a run matches one without offload bit for bit.
 *
 * A model whose arch is gpt or llama (PrProgram.model_arch) runs the transformer
 * workloads of workload_tf.c in this slot instead: every entry point below hands over. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "piperun_internal.h"
#include "transformer.h"

/* Used when no --data file is given (pipec run passes the project's docs instead). */
static const char builtin_text[] =
    "pipec is a compiler for pipeline-parallel training schedules. A researcher writes a "
    "pipe file that says how a model is cut into pipeline stages and, for every stage, "
    "the exact order of its forward, backward, weight-gradient, recompute and swap ops "
    "over the micro-batches of one training iteration. pipec checks it, transforms it, "
    "simulates it and generates one C program per rank that really trains the model.\n";

/* Elements of v's parameter tensors (= its gradients), whatever the model
 * (pr_model_tensor). */
size_t pr_vstage_grad_floats(const PrRun *run, int v)
{
    size_t total = 0;
    for (int i = 0; i < pr_model_tensor_count(run); i++)
        if (pr_model_tensor_in_slice(run, i, v)) {
            size_t n;
            pr_model_tensor(run, i, NULL, NULL, NULL, &n);
            total += n;
        }
    return total;
}

/* Marks the virtual stages that have an OG and gives them host copies of their
 * parameters (initialised from the model) and gradients. Returns 0 or -1. */
static int offload_setup(PrRun *run)
{
    const PrProgram *g = run->prog;
    run->offloaded = calloc((size_t)run->PV, sizeof *run->offloaded);
    run->host_w = calloc((size_t)run->PV, sizeof *run->host_w);
    run->host_g = calloc((size_t)run->PV, sizeof *run->host_g);
    if (!run->offloaded || !run->host_w || !run->host_g)
        return -1;
    for (int s = 0; s < g->P; s++)
        for (uint32_t i = 0; i < g->ranks[s].nops; i++) {
            const PrOp *o = &g->ranks[s].ops[i];
            if (o->kind == PR_OG && o->vstage >= 0 && o->vstage < run->PV)
                run->offloaded[o->vstage] = true;
        }
    for (int v = 0; v < run->PV; v++) {
        if (!run->offloaded[v])
            continue;
        size_t n = pr_vstage_grad_floats(run, v), at = 0;
        run->host_w[v] = pr_host_alloc(n);   /* page-aligned: the CUDA backend pins them */
        run->host_g[v] = pr_host_alloc(n);
        if (!run->host_w[v] || !run->host_g[v])
            return -1;
        for (int i = 0; i < pr_model_tensor_count(run); i++)
            if (pr_model_tensor_in_slice(run, i, v)) {
                float *p;
                size_t k;
                pr_model_tensor(run, i, NULL, &p, NULL, &k);
                memcpy(run->host_w[v] + at, p, k * sizeof(float));
                at += k;
            }
    }
    return 0;
}

/* OG (gradients to the host, then the host optimizer step: the models' SGD) or LW (the
 * weights back) of one virtual stage, whatever the model. Returns 0 or -1. */
static int state_op(PrRank *r, const PrOp *o)
{
    PrRun *run = r->run;
    int v = o->vstage;
    if (v < 0 || v >= run->PV || !run->host_w || !run->host_w[v]) {
        pr_fail(run, r->id, -1, "%s of virtual stage %d without host model states",
                pr_kind_name(o->kind), v);
        return -1;
    }
    float *hw = run->host_w[v], *hg = run->host_g[v], lr = (float)run->opt.lr;
    size_t at = 0;
    for (int i = 0; i < pr_model_tensor_count(run); i++)
        if (pr_model_tensor_in_slice(run, i, v)) {
            float *p, *gr;
            size_t k;
            pr_model_tensor(run, i, NULL, &p, &gr, &k);
            if (o->kind == PR_OG) /* the gradients go to the host */
                memcpy(hg + at, gr, k * sizeof(float));
            else /* LW: the weights come back */
                memcpy(p, hw + at, k * sizeof(float));
            at += k;
        }
    if (o->kind == PR_OG)
        for (size_t j = 0; j < at; j++) /* the host optimizer step */
            hw[j] -= lr * hg[j];
    return 0;
}

int pr_mlp_offload(PrRank *r, const PrOp *o)
{
    return state_op(r, o);
}

int pr_mlp_load(PrRank *r, const PrOp *o)
{
    return state_op(r, o);
}

int pr_model_tensor_count(const PrRun *run)
{
    return run->tf ? run->tf->ntensors : run->model ? mlp_param_count(run->model) : 0;
}

void pr_model_tensor(const PrRun *run, int i, const char **name, float **param, float **grad,
                     size_t *n)
{
    if (!run->tf) {
        mlp_param(run->model, i, name, param, grad, n);
        return;
    }
    const TfTensor *t = &run->tf->tensors[i];
    if (name)
        *name = t->name;
    if (param)
        *param = run->tf->param_mem + t->off;
    if (grad)
        *grad = run->tf->grad_mem + t->off;
    if (n)
        *n = t->n;
}

bool pr_model_tensor_in_slice(const PrRun *run, int i, int v)
{
    return run->tf ? tf_param_in_slice(run->tf, i, &run->slice[v])
                   : mlp_param_in_slice(run->model, i, &run->slice[v]);
}

int pr_text_setup(PrRun *run)
{
    if (run->opt.data) {
        if (data_load(&run->data, run->opt.data) != 0) {
            pr_fail(run, -1, -1, "cannot read --data %s: %s", run->opt.data, strerror(errno));
            return -1;
        }
    } else if (data_from_memory(&run->data, builtin_text, sizeof builtin_text - 1) != 0) {
        pr_fail(run, -1, -1, "out of memory");
        return -1;
    }
    if (!data_fits(&run->data, run->prog->mlp_T)) {
        pr_fail(run, -1, -1, "the training text has %zu bytes, fewer than seq + 1 = %d",
                run->data.n, run->prog->mlp_T + 1);
        return -1;
    }
    return 0;
}

int pr_slices_setup(PrRun *run, int (*init)(const void *cfg, int nv, const int *layers,
                                             MlpSlice *slices),
                    const void *cfg, int L, const char *model)
{
    const PrProgram *g = run->prog;
    run->slice = calloc((size_t)run->PV, sizeof *run->slice);
    int *layers = calloc((size_t)run->PV, sizeof *layers);
    if (!run->slice || !layers) {
        free(layers);
        pr_fail(run, -1, -1, "out of memory");
        return -1;
    }
    for (int v = 0; v < run->PV; v++)
        layers[v] = g->vstages[v].layers;
    int rc = init(cfg, run->PV, layers, run->slice);
    free(layers);
    if (rc != 0) {
        pr_fail(run, -1, -1, "%s model: the partition does not sum to %d layers", model, L);
        return -1;
    }
    return 0;
}

int pr_check_region_sizes(PrRun *run,
                          void (*sizes)(const void *cfg, const MlpSlice *s, int64_t out[3],
                                        int64_t from[PR_PIECES + 1]),
                          const void *cfg)
{
    for (int v = 0; v < run->PV; v++) {
        int64_t z[3], from[PR_PIECES + 1];
        sizes(cfg, &run->slice[v], z, from);
        const PrVstage *pv = &run->prog->vstages[v];
        if (z[0] != pv->act || z[1] != pv->ckpt || z[2] != pv->wact) {
            pr_fail(run, -1, -1,
                    "virtual stage %d: the arena was planned for act/ckpt/wact = "
                    "%lld/%lld/%lld bytes but the model needs %lld/%lld/%lld; regenerate "
                    "the program with this pipec",
                    v, (long long)pv->act, (long long)pv->ckpt, (long long)pv->wact,
                    (long long)z[0], (long long)z[1], (long long)z[2]);
            return -1;
        }
        const int64_t *pf = pv->from[PR_MLP];
        if (memcmp(from, pf, sizeof from) != 0) {
            pr_fail(run, -1, -1,
                    "virtual stage %d: the arena plan cuts the region into pieces at "
                    "%lld/%lld/%lld/%lld/%lld bytes but the model's layout at "
                    "%lld/%lld/%lld/%lld/%lld; regenerate the program with this pipec",
                    v, (long long)pf[0], (long long)pf[1], (long long)pf[2],
                    (long long)pf[3], (long long)pf[4], (long long)from[0],
                    (long long)from[1], (long long)from[2], (long long)from[3],
                    (long long)from[4]);
            return -1;
        }
    }
    return 0;
}

int pr_model_ready(PrRun *run, size_t io_bytes)
{
    if (pr_text_setup(run) != 0)
        return -1;
    run->io_bytes = io_bytes;
    if (offload_setup(run) != 0) {
        pr_fail(run, -1, -1, "out of memory for the offloaded model states");
        return -1;
    }
    for (int v = 0; run->D > 1 && v < run->PV; v++)
        if (run->offloaded[v]) { /* OG would step before the replicas' reduction */
            pr_fail(run, -1, -1, "model-state offload (OG/LW) with data_parallel %d: the "
                    "runtime does not reduce offloaded gradients; use data_parallel 1",
                    run->D);
            return -1;
        }
    openblas_set_num_threads(run->opt.threads_blas > 0 ? run->opt.threads_blas : 1);
    return 0;
}

void pr_model_states_free(PrRun *run)
{
    for (int v = 0; run->host_w && v < run->PV; v++) {
        free(run->host_w[v]);
        free(run->host_g[v]);
    }
    free(run->host_w);
    free(run->host_g);
    free(run->offloaded);
    run->host_w = run->host_g = NULL;
    run->offloaded = NULL;
    free(run->slice);
    run->slice = NULL;
    data_free(&run->data);
}

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

int pr_mlp_setup(PrRun *run)
{
    const PrProgram *g = run->prog;
    if (g->model_arch != 0)
        return pr_tf_setup(run);
    MlpConfig c = {g->mlp_vocab, g->mlp_C, g->mlp_L, g->mlp_T, g->mlp_B, g->M};
    char why[160];
    if (mlp_config_check(&c, why, sizeof why) != 0) {
        pr_fail(run, -1, -1, "mlp model: %s", why);
        return -1;
    }
    if (pr_slices_setup(run, mlp_init, &c, c.L, "mlp") != 0 ||
        pr_check_region_sizes(run, mlp_sizes, &c) != 0)
        return -1;
    run->model = mlp_create(&c, run->opt.seed);
    if (!run->model) {
        pr_fail(run, -1, -1, "out of memory creating the mlp model");
        return -1;
    }
    return pr_model_ready(run, mlp_io_bytes(&c));
}

void pr_mlp_teardown(PrRun *run)
{
    if (run->tf) {
        pr_tf_teardown(run);
        return;
    }
    mlp_free(run->model);
    run->model = NULL;
    pr_model_states_free(run);
}

void pr_mlp_zero(PrRun *run)
{
    if (run->tf) {
        pr_tf_zero(run);
        return;
    }
    for (int v = 0; v < run->PV; v++)
        mlp_zero_grad(run->model, &run->slice[v]);
    for (int m = 0; m < run->M; m++)
        run->mb_loss[m] = 0;
}

void pr_mlp_step(PrRun *run)
{
    if (run->tf) {
        pr_tf_step(run);
        return;
    }
    for (int v = 0; v < run->PV; v++)
        if (!run->offloaded || !run->offloaded[v]) /* an OG stepped it on the host */
            mlp_sgd_step(run->model, &run->slice[v], (float)run->opt.lr);
}

static int batch(PrRank *r, const PrOp *o)
{
    const PrProgram *g = r->run->prog;
    /* replica d's data shard: global micro-batch d*M + m (piperun.h) */
    int gm = pr_dp_microbatch(r->run->M, r->run->replica, o->mb);
    if (data_batch(&r->run->data, r->run->opt.seed, r->iter, gm, g->mlp_B, g->mlp_T,
                   g->mlp_vocab, r->tokens, r->targets) != 0)
        return -1;
    return 0;
}

int pr_mlp_op(PrRank *r, uint32_t i, const PrOp *o)
{
    if (r->run->tf)
        return pr_tf_op(r, i, o);
    PrRun *run = r->run;
    const MlpSlice *s = &run->slice[o->vstage];
    MlpModel *m = run->model;
    size_t k = (size_t)o->vstage * (size_t)run->M + (size_t)o->mb;
    PrRegion g = pr_op_region(run, o, PR_MLP, r->arena);
    bool need_data = s->embed || s->head;
    if (need_data && batch(r, o) != 0) {
        pr_fail(run, r->id, i, "no batch from the training text");
        return -1;
    }
    switch (o->kind) {
    case PR_F: {
        float *in = NULL, *out = NULL;
        if (!s->embed) {
            in = r->in_f[k];
            if (!in) {
                pr_fail(run, r->id, i, "the input of F has not arrived");
                return -1;
            }
        }
        if (!s->head && !(out = malloc(run->io_bytes))) {
            pr_fail(run, r->id, i, "out of memory (%zu bytes)", run->io_bytes);
            return -1;
        }
        float loss = 0;
        int rc = mlp_forward_split(m, s, out, s->head ? &loss : NULL, &g, in, r->tokens,
                                   r->targets, !(o->flags & PR_HAS_R));
        free(in);
        r->in_f[k] = NULL;
        if (rc != 0) {
            free(out);
            pr_fail(run, r->id, i, "out of memory in the forward");
            return -1;
        }
        if (s->head)
            run->mb_loss[o->mb] = loss;
        if (out) {
            int nv = o->vstage + 1;
            size_t kn = (size_t)nv * (size_t)run->M + (size_t)o->mb;
            void **slot = run->prog->vstages[nv].rank == r->id ? &r->in_f[kn] : &r->out_f[k];
            free(*slot);
            *slot = out;
        }
        return 0;
    }
    case PR_R:
        mlp_recompute_split(m, s, &g, r->tokens);
        return 0;
    case PR_B: {
        float *dout = NULL, *din = NULL;
        if (!s->head) {
            dout = r->in_b[k];
            if (!dout) {
                pr_fail(run, r->id, i, "the output gradient of B has not arrived");
                return -1;
            }
        }
        if (!s->embed && !(din = malloc(run->io_bytes))) {
            pr_fail(run, r->id, i, "out of memory (%zu bytes)", run->io_bytes);
            return -1;
        }
        mlp_backward_split(m, s, din, &g, dout, r->tokens, r->targets,
                           (o->flags & PR_HAS_W) != 0);
        free(dout);
        r->in_b[k] = NULL;
        if (din) {
            int pv = o->vstage - 1;
            size_t kp = (size_t)pv * (size_t)run->M + (size_t)o->mb;
            void **slot = run->prog->vstages[pv].rank == r->id ? &r->in_b[kp] : &r->out_b[k];
            free(*slot);
            *slot = din;
        }
        return 0;
    }
    case PR_W:
        mlp_weight_grad_split(m, s, &g, r->tokens);
        return 0;
    default:
        return 0;
    }
}

/* Tokens and targets (M,B,T) of the first M global micro-batches of iteration it into
 * *tok and *tgt, allocated on the first call (the caller frees them). Returns 0, or -1
 * when out of memory or without a batch. */
static int model_batches(PrRun *run, int it, int M, int **tok, int **tgt)
{
    const PrProgram *g = run->prog;
    size_t bt = (size_t)g->mlp_B * (size_t)g->mlp_T;
    if (!*tok)
        *tok = malloc((size_t)M * bt * sizeof **tok);
    if (!*tgt)
        *tgt = malloc((size_t)M * bt * sizeof **tgt);
    if (!*tok || !*tgt)
        return -1;
    for (int mb = 0; mb < M; mb++)
        if (data_batch(&run->data, run->opt.seed, it, mb, g->mlp_B, g->mlp_T, g->mlp_vocab,
                       *tok + mb * bt, *tgt + mb * bt) != 0)
            return -1;
    return 0;
}

int pr_model_check(PrRun *run, PrResult *res, const PrRefModel *rm)
{
    /* The reference starts from the same initial weights: a fresh model with the same
     * seed (iteration 0 has not stepped yet when this runs). */
    void *ref = rm->create(run);
    /* the whole global batch: the D replicas' shards, D x M micro-batches, whose mean
     * gradient the reduction gave every replica (dp.c) */
    int *tok = NULL, *tgt = NULL, n = pr_model_tensor_count(run), rc = -1;
    int GM = pr_dp_microbatch(run->M, run->D, 0);
    res->grad_name = calloc((size_t)(n ? n : 1), sizeof *res->grad_name);
    res->grad_err = calloc((size_t)(n ? n : 1), sizeof *res->grad_err);
    if (!ref || !res->grad_name || !res->grad_err || model_batches(run, 0, GM, &tok, &tgt) != 0)
        goto out;
    rm->zero_grad(ref);
    if (isnan(rm->iteration(ref, GM, tok, tgt)))
        goto out;
    res->ngrad = n;
    res->max_grad_err = 0;
    for (int i = 0; i < n; i++) {
        const char *name;
        float *ga;
        size_t cnt;
        pr_model_tensor(run, i, &name, NULL, &ga, &cnt);
        snprintf(res->grad_name[i], sizeof res->grad_name[i], "%s", name);
        res->grad_err[i] = mlp_rel_error(ga, rm->grad(ref, i), cnt);
        if (res->grad_err[i] > res->max_grad_err || isnan(res->grad_err[i]))
            res->max_grad_err = res->grad_err[i];
    }
    rc = 0;
    if (run->be->step) { /* the host steps: keep the reference, stepped, for the weights */
        rm->sgd_step(ref, (float)run->opt.lr);
        run->check_ref = ref;
        run->check_rm = rm;
        ref = NULL;
    }
out:
    if (ref)
        rm->destroy(ref);
    free(tok);
    free(tgt);
    return rc;
}

void pr_model_check_free(PrRun *run)
{
    if (run->check_ref)
        run->check_rm->destroy(run->check_ref);
    run->check_ref = NULL;
}

void pr_model_check_weights(PrRun *run, PrResult *res)
{
    if (!run->check_ref)
        return;
    res->max_weight_err = 0;
    for (int i = 0; i < pr_model_tensor_count(run); i++) {
        /* in a slice of a rank this process runs, not offloaded (an OG steps host_w,
         * which the next iteration's LW loads) */
        bool mine = false;
        for (int v = 0; v < run->PV && !mine; v++) {
            int s = run->prog->vstages[v].rank;
            mine = pr_model_tensor_in_slice(run, i, v) &&
                   !(pr_transport && pr_transport->remote(s)) &&
                   !(run->offloaded && run->offloaded[v]);
        }
        if (!mine)
            continue;
        float *p;
        size_t n;
        pr_model_tensor(run, i, NULL, &p, NULL, &n);
        double e = mlp_rel_error(p, run->check_rm->param(run->check_ref, i), n);
        if (e > res->max_weight_err || isnan(e))
            res->max_weight_err = e;
    }
    pr_model_check_free(run);
}

double pr_model_reference_ms(PrRun *run, const PrRefModel *rm)
{
    void *ref = rm->create(run);
    int *tok = NULL, *tgt = NULL, n = 0;
    double ms = -1, total = 0;
    if (!ref)
        goto out;
    for (int it = 0; it < run->opt.iters; it++) {
        double t0 = pr_now_ms();
        /* the same work as one pipelined iteration: its batches, the step */
        if (model_batches(run, it, run->M, &tok, &tgt) != 0)
            goto out;
        rm->zero_grad(ref);
        if (isnan(rm->iteration(ref, run->M, tok, tgt)))
            goto out;
        rm->sgd_step(ref, (float)run->opt.lr);
        if (it > 0 || run->opt.iters == 1) {
            total += pr_now_ms() - t0;
            n++;
        }
    }
    ms = n ? total / n : -1;
out:
    if (ref)
        rm->destroy(ref);
    free(tok);
    free(tgt);
    return ms;
}

/* The mlp's sequential reference (PrRefModel). */
static void *mlp_ref_create(const PrRun *run)
{
    const PrProgram *g = run->prog;
    MlpConfig c = {g->mlp_vocab, g->mlp_C, g->mlp_L, g->mlp_T, g->mlp_B, g->M};
    return mlp_create(&c, run->opt.seed);
}

static void mlp_ref_zero(void *m)
{
    MlpSlice whole = mlp_whole(&((MlpModel *)m)->cfg);
    mlp_zero_grad(m, &whole);
}

static float mlp_ref_iteration(void *m, int M, const int *tok, const int *tgt)
{
    return mlp_reference_iteration(m, M, tok, tgt);
}

static void mlp_ref_step(void *m, float lr)
{
    MlpSlice whole = mlp_whole(&((MlpModel *)m)->cfg);
    mlp_sgd_step(m, &whole, lr);
}

static const float *mlp_ref_grad(const void *m, int i)
{
    float *g;
    mlp_param(m, i, NULL, NULL, &g, NULL);
    return g;
}

static void mlp_ref_destroy(void *m)
{
    mlp_free(m);
}

static const float *mlp_ref_param(const void *m, int i)
{
    float *p;
    mlp_param(m, i, NULL, &p, NULL, NULL);
    return p;
}

static const PrRefModel mlp_ref = {mlp_ref_create, mlp_ref_zero, mlp_ref_iteration,
                                   mlp_ref_step, mlp_ref_grad, mlp_ref_destroy,
                                   mlp_ref_param};

int pr_mlp_check(PrRun *run, PrResult *res)
{
    if (run->prog->model_arch != 0)
        return pr_tf_check(run, res);
    return pr_model_check(run, res, &mlp_ref);
}

double pr_mlp_reference_ms(PrRun *run)
{
    if (run->prog->model_arch != 0)
        return pr_tf_reference_ms(run);
    return pr_model_reference_ms(run, &mlp_ref);
}

size_t pr_rank_grad_floats(const PrRun *run, int s)
{
    size_t n = 0;
    for (int v = 0; v < run->PV; v++)
        if (run->prog->vstages[v].rank == s)
            n += pr_vstage_grad_floats(run, v);
    return n;
}

void pr_rank_grad_copy(PrRun *run, int s, float *buf, bool pack)
{
    for (int v = 0; v < run->PV; v++) {
        if (run->prog->vstages[v].rank != s)
            continue;
        for (int i = 0; i < pr_model_tensor_count(run); i++)
            if (pr_model_tensor_in_slice(run, i, v)) {
                float *g;
                size_t k;
                pr_model_tensor(run, i, NULL, NULL, &g, &k);
                if (pack)
                    memcpy(buf, g, k * sizeof *g);
                else
                    memcpy(g, buf, k * sizeof *g);
                buf += k;
            }
    }
}
