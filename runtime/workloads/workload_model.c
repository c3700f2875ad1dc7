/* workload_model.c - what the model workloads (mlp: workload_mlp.c; gpt, llama:
 * workload_tf.c) share, over the PrArch table of their arch (workload.h): each op of a
 * rank runs the slice of the model that its virtual stage owns, on activations in the
 * rank's arena.
 *
 * Data flow between ops of one micro-batch m: F(v,m) takes its input (the hidden state
 * from F(v-1,m)) from the rank's io buffers and hands its output to the message router
 * (router.c), which puts it straight into the input of F(v+1,m) when that runs on the
 * same rank, else where the send of the message to F(v+1,m) takes it. B does the same
 * backwards. Io buffers (run->io_bytes each) live outside the arena, like a transport's
 * buffers; the activations themselves live in the arena.
 *
 * Model-state offload (OG/LW, TPipe's T-Offload): a virtual stage with an OG keeps its
 * master weights in host_w. OG (device-to-host copy thread, after the chunk's last B/W)
 * copies the slice's gradients to host_g and runs the SGD step on host_w; LW (host-to-
 * device copy thread, before the chunk's first F) copies host_w into the model's
 * parameters. The end-of-iteration step skips those slices, so the arithmetic is that of
 * the arch's SGD and a run matches one without offload bit for bit. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

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
        size_t n = pr_vstage_grad_floats(run, v);
        run->host_w[v] = pr_host_alloc(n);   /* page-aligned: the CUDA backend pins them */
        run->host_g[v] = pr_host_alloc(n);
        if (!run->host_w[v] || !run->host_g[v])
            return -1;
        for (PrStageTensor t = pr_stage_tensors(v, 0); pr_stage_tensor_next(run, &t);)
            memcpy(run->host_w[v] + t.at, t.param, t.n * sizeof(float));
    }
    return 0;
}

/* OG (gradients to the host, then the host optimizer step: the models' SGD) or LW (the
 * weights back) of one virtual stage, whatever the model. Runs on the copy threads. */
int pr_model_state(PrRank *r, const PrOp *o)
{
    PrRun *run = r->run;
    int v = o->vstage;
    if (v < 0 || v >= run->PV || !run->host_w || !run->host_w[v]) {
        pr_fail(run, r->id, -1, "%s of virtual stage %d without host model states",
                pr_kind_name(o->kind), v);
        return -1;
    }
    float *hw = run->host_w[v], *hg = run->host_g[v], lr = (float)run->opt.lr;
    PrStageTensor t = pr_stage_tensors(v, 0);
    while (pr_stage_tensor_next(run, &t))
        if (o->kind == PR_OG) /* the gradients go to the host */
            memcpy(hg + t.at, t.grad, t.n * sizeof(float));
        else /* LW: the weights come back */
            memcpy(t.param, hw + t.at, t.n * sizeof(float));
    if (o->kind == PR_OG)
        for (size_t j = 0; j < t.at; j++) /* the host optimizer step */
            hw[j] -= lr * hg[j];
    return 0;
}

/* Loads the training text (--data, else the default text: runtime/models/data.h
 * data_load_default) into run->data, says which once at start, and checks it holds
 * seq + 1 bytes. Returns 0 or -1 (pr_fail called). */
static int text_setup(PrRun *run)
{
    char said[4200];
    if (run->opt.data) {
        if (data_load(&run->data, run->opt.data) != 0) {
            pr_fail(run, -1, -1, "cannot read --data %s: %s", run->opt.data, strerror(errno));
            return -1;
        }
        snprintf(said, sizeof said, "%.4000s, %zu bytes", run->opt.data, run->data.n);
    } else if (data_load_default(&run->data, run->prog->data_dir, said, sizeof said) != 0) {
        pr_fail(run, -1, -1, "out of memory");
        return -1;
    }
    /* said once at start, by the process and replica that run rank 0 (docs/runtime.md
     * "Training text") */
    if (!run->opt.quiet && !run->opt.json && (!pr_transport || !pr_transport->remote(0)) &&
        (!pr_dp || pr_dp->replica == 0))
        fprintf(stderr, "piperun: training text%s: %s\n",
                run->opt.data ? "" : " (--data FILE for another)", said);
    if (!data_fits(&run->data, run->prog->model_seq)) {
        pr_fail(run, -1, -1, "the training text has %zu bytes, fewer than seq + 1 = %d",
                run->data.n, run->prog->model_seq + 1);
        return -1;
    }
    return 0;
}

static int slices_setup(PrRun *run, int (*init)(const void *cfg, int nv, const int *layers,
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
    for (int v = 0; v < run->PV; v++) {
        run->slice[v].per_layer = g->vstages[v].per_layer != 0;
        if (run->slice[v].per_layer && !strcmp(model, "mlp")) {
            pr_fail(run, -1, -1, "virtual stage %d: the mlp workload rebuilds a whole virtual "
                    "stage; layer-granular recomputation runs in gpt and llama", v);
            return -1;
        }
    }
    return 0;
}

static int check_region_sizes(PrRun *run,
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

static int model_ready(PrRun *run, size_t io_bytes)
{
    if (text_setup(run) != 0)
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

static void model_states_free(PrRun *run)
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

/* Frees the reference --check kept for the weights (pr_model_check_weights). */
static void check_free(PrRun *run)
{
    if (run->check_ref)
        run->arch->destroy(run->check_ref);
    run->check_ref = NULL;
}

static void *batch_alloc(const PrProgram *g)
{
    size_t bt = (size_t)g->model_batch * (size_t)g->model_seq;
    return calloc(bt ? bt : 1, sizeof(int));
}

int pr_model_setup(PrRun *run, const PrModelSetup *ms)
{
    run->arch = ms->arch;
    if (slices_setup(run, ms->init, ms->cfg, ms->L, ms->name) != 0 ||
        check_region_sizes(run, ms->sizes, ms->cfg) != 0)
        return -1;
    run->net = ms->create(ms->cfg, run->opt.seed);
    run->tokens = calloc((size_t)run->P, sizeof *run->tokens);
    run->targets = calloc((size_t)run->P, sizeof *run->targets);
    bool ok = run->net && run->tokens && run->targets;
    for (int s = 0; ok && s < run->P; s++) {
        run->tokens[s] = batch_alloc(run->prog);
        run->targets[s] = batch_alloc(run->prog);
        ok = run->tokens[s] && run->targets[s];
    }
    if (!ok) {
        pr_fail(run, -1, -1, "out of memory creating the %s model", ms->name);
        return -1;
    }
    return model_ready(run, ms->io_bytes);
}

void pr_model_teardown(PrRun *run)
{
    check_free(run);
    if (run->net)
        run->arch->destroy(run->net);
    run->net = NULL;
    for (int s = 0; s < run->P; s++) {
        free(run->tokens ? run->tokens[s] : NULL);
        free(run->targets ? run->targets[s] : NULL);
    }
    free(run->tokens);
    free(run->targets);
    run->tokens = run->targets = NULL;
    model_states_free(run);
}

void pr_model_zero(PrRun *run)
{
    for (int v = 0; v < run->PV; v++)
        run->arch->zero_grad(run->net, &run->slice[v]);
    for (int m = 0; m < run->M; m++)
        run->mb_loss[m] = 0;
}

void pr_model_step(PrRun *run)
{
    for (int v = 0; v < run->PV; v++)
        if (!run->offloaded || !run->offloaded[v]) /* an OG stepped it on the host */
            run->arch->sgd(run->net, &run->slice[v], (float)run->opt.lr);
}

/* F (dir PR_FWD) or B (PR_BWD) of op o on region rg: its input from the router (none
 * where the data feeds it: F of the embedding, B of the head), its output to the
 * router (none after the head's F and the embedding's B). */
static int pass(PrRank *r, uint32_t i, const PrOp *o, const PrRegion *rg, int dir)
{
    PrRun *run = r->run;
    const MlpSlice *s = &run->slice[o->vstage];
    bool fwd = dir == PR_FWD, from_data = fwd ? s->embed : s->head;
    bool to_none = fwd ? s->head : s->embed;
    int *tok = run->tokens[r->id], *tgt = run->targets[r->id];
    float *in = NULL, *out = NULL;
    if (!from_data && !(in = pr_io_take(r, dir, o->vstage, o->mb))) {
        pr_fail(run, r->id, i, fwd ? "the input of F has not arrived"
                                   : "the output gradient of B has not arrived");
        return -1;
    }
    if (!to_none && !(out = malloc(run->io_bytes))) {
        free(in);
        pr_fail(run, r->id, i, "out of memory (%zu bytes)", run->io_bytes);
        return -1;
    }
    float loss = 0;
    int rc = 0;
    if (fwd)
        rc = run->arch->forward(run->net, s, out, s->head ? &loss : NULL, rg, in, tok, tgt,
                                !(o->flags & PR_HAS_R), r->work, (size_t)r->work_bytes);
    else
        run->arch->backward(run->net, s, out, rg, in, tok, tgt, (o->flags & PR_HAS_W) != 0);
    free(in);
    if (rc != 0) {
        free(out);
        if (rc == -2)
            pr_fail(run, r->id, i, "the plan's workspace (%lld bytes) is smaller than "
                    "the forward's temporaries", (long long)r->work_bytes);
        else
            pr_fail(run, r->id, i, "out of memory in the forward");
        return -1;
    }
    if (fwd && s->head)
        run->mb_loss[o->mb] = loss;
    if (out)
        pr_io_route(r, dir, o->vstage, o->mb, out);
    return 0;
}

int pr_model_op(PrRank *r, uint32_t i, const PrOp *o)
{
    PrRun *run = r->run;
    const PrProgram *g = run->prog;
    const MlpSlice *s = &run->slice[o->vstage];
    int *tok = run->tokens[r->id], *tgt = run->targets[r->id];
    /* the region: its pieces wherever the plan put them */
    PrRegion rg = pr_op_region(run, o, PR_MLP, r->arena);
    /* replica d's data shard: global micro-batch d*M + m (piperun.h) */
    int gm = pr_dp_microbatch(run->M, run->replica, o->mb);
    if ((s->embed || s->head) &&
        data_batch(&run->data, run->opt.seed, r->iter, gm, g->model_batch, g->model_seq,
                   g->model_vocab, tok, tgt) != 0) {
        pr_fail(run, r->id, i, "no batch from the training text");
        return -1;
    }
    switch (o->kind) {
    case PR_F:
        return pass(r, i, o, &rg, PR_FWD);
    case PR_B:
        return pass(r, i, o, &rg, PR_BWD);
    case PR_R:
        run->arch->recompute(run->net, s, &rg, tok);
        return 0;
    case PR_W:
        run->arch->weight_grad(run->net, s, &rg, tok);
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
    size_t bt = (size_t)g->model_batch * (size_t)g->model_seq;
    if (!*tok)
        *tok = malloc((size_t)M * bt * sizeof **tok);
    if (!*tgt)
        *tgt = malloc((size_t)M * bt * sizeof **tgt);
    if (!*tok || !*tgt)
        return -1;
    for (int mb = 0; mb < M; mb++)
        if (data_batch(&run->data, run->opt.seed, it, mb, g->model_batch, g->model_seq,
                       g->model_vocab, *tok + mb * bt, *tgt + mb * bt) != 0)
            return -1;
    return 0;
}

/* The reference's slice of the whole model: zero its gradients (lr 0) or step it. */
static void ref_whole(const PrArch *a, void *ref, bool zero, float lr)
{
    MlpSlice whole = a->whole(ref);
    if (zero)
        a->zero_grad(ref, &whole);
    else
        a->sgd(ref, &whole, lr);
}

static const float *ref_tensor(const PrArch *a, const void *ref, int i, bool grad)
{
    float *p, *g;
    a->tensor(ref, i, NULL, &p, &g, NULL);
    return grad ? g : p;
}

int pr_model_check(PrRun *run, PrResult *res)
{
    const PrArch *a = run->arch;
    /* The reference starts from the same initial weights: a fresh model with the same
     * seed (iteration 0 has not stepped yet when this runs). */
    void *ref = a->create(run);
    /* the whole global batch: the D replicas' shards, D x M micro-batches, whose mean
     * gradient the reduction gave every replica (dp.c) */
    int *tok = NULL, *tgt = NULL, n = pr_model_tensor_count(run), rc = -1;
    int GM = pr_dp_microbatch(run->M, run->D, 0);
    res->grad_name = calloc((size_t)(n ? n : 1), sizeof *res->grad_name);
    res->grad_err = calloc((size_t)(n ? n : 1), sizeof *res->grad_err);
    if (!ref || !res->grad_name || !res->grad_err || model_batches(run, 0, GM, &tok, &tgt) != 0)
        goto out;
    ref_whole(a, ref, true, 0);
    if (isnan(a->iteration(ref, GM, tok, tgt)))
        goto out;
    res->ngrad = n;
    res->max_grad_err = 0;
    for (int i = 0; i < n; i++) {
        const char *name;
        float *ga;
        size_t cnt;
        pr_model_tensor(run, i, &name, NULL, &ga, &cnt);
        snprintf(res->grad_name[i], sizeof res->grad_name[i], "%s", name);
        res->grad_err[i] = mlp_rel_error(ga, ref_tensor(a, ref, i, true), cnt);
        if (res->grad_err[i] > res->max_grad_err || isnan(res->grad_err[i]))
            res->max_grad_err = res->grad_err[i];
    }
    rc = 0;
    if (run->be->step) { /* the host steps: keep the reference, stepped, for the weights */
        ref_whole(a, ref, false, (float)run->opt.lr);
        run->check_ref = ref;
        ref = NULL;
    }
out:
    if (ref)
        a->destroy(ref);
    free(tok);
    free(tgt);
    return rc;
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
        double e = mlp_rel_error(p, ref_tensor(run->arch, run->check_ref, i, false), n);
        if (e > res->max_weight_err || isnan(e))
            res->max_weight_err = e;
    }
    check_free(run);
}

double pr_model_reference_ms(PrRun *run)
{
    const PrArch *a = run->arch;
    void *ref = a->create(run);
    int *tok = NULL, *tgt = NULL, n = 0;
    double ms = -1, total = 0;
    if (!ref)
        goto out;
    for (int it = 0; it < run->opt.iters; it++) {
        double t0 = pr_now_ms();
        /* the same work as one pipelined iteration: its batches, the step */
        if (model_batches(run, it, run->M, &tok, &tgt) != 0)
            goto out;
        ref_whole(a, ref, true, 0);
        if (isnan(a->iteration(ref, run->M, tok, tgt)))
            goto out;
        ref_whole(a, ref, false, (float)run->opt.lr);
        if (it > 0 || run->opt.iters == 1) {
            total += pr_now_ms() - t0;
            n++;
        }
    }
    ms = n ? total / n : -1;
out:
    if (ref)
        a->destroy(ref);
    free(tok);
    free(tgt);
    return ms;
}
