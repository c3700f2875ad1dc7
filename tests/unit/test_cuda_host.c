/* test_cuda_host.c - the CUDA backend's host-side decisions (runtime/cuda/cu_host.h),
 * without a GPU: which GPU a rank uses (one visible GPU per MPI process accepted), the
 * teardown order (rank threads joined before the communicators are aborted and freed,
 * with a fake communicator layer that real threads poll; a failed run's aborts all in
 * flight at once; a teardown past its deadline given up), and the runtime's stream plan
 * built from a generated program's tables equal to the compiler's (streams.json) for
 * every example. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>

#include "comm.h"
#include "driver.h"
#include "stream_check.h"
#include "testutil.h"

#include "cuda/cu_host.c"

static void test_pick_device(void **state)
{
    (void)state;
    char why[200];
    int dev = -1;
    /* one process drives every rank: rank s on GPU s % ngpu */
    assert_int_equal(cu_pick_device(1, 0, 1, 4, 6, &dev, why, sizeof why), 0);
    assert_int_equal(dev, 2);
    assert_int_equal(cu_pick_device(1, 0, 1, 1, 3, &dev, why, sizeof why), 0);
    assert_int_equal(dev, 0);
    /* one process per rank, every process sees the node's GPUs: GPU = local index */
    assert_int_equal(cu_pick_device(4, 3, 4, 4, 7, &dev, why, sizeof why), 0);
    assert_int_equal(dev, 3);
    assert_int_equal(cu_pick_device(2, 1, 2, 8, 1, &dev, why, sizeof why), 0);
    assert_int_equal(dev, 1);
    /* one visible GPU per process (CUDA_VISIBLE_DEVICES): accepted, GPU 0 */
    dev = -1;
    assert_int_equal(cu_pick_device(8, 5, 8, 1, 5, &dev, why, sizeof why), 0);
    assert_int_equal(dev, 0);
    /* more processes than the several GPUs they all see: refused, saying why */
    assert_int_equal(cu_pick_device(4, 2, 4, 2, 2, &dev, why, sizeof why), -1);
    assert_non_null(strstr(why, "4 processes on this node but 2 GPUs"));
    assert_non_null(strstr(why, "CUDA_VISIBLE_DEVICES"));
    assert_int_equal(cu_pick_device(1, 0, 1, 0, 0, &dev, why, sizeof why), -1);
    assert_non_null(strstr(why, "no GPU"));
}

/* ---- teardown with a fake communicator layer -------------------------------------------- */

typedef struct FakeComm {
    atomic_int polls;        /* what a rank thread's ncclCommGetAsyncError touches */
    int aborted, destroyed;
} FakeComm;

typedef struct Fake {
    pthread_t th[3];
    FakeComm **comm;         /* [2]; freed by free_comms */
    atomic_int failed;
    atomic_int joined;
    pthread_mutex_t mu;      /* order[] is written by the concurrent aborts too */
    char order[64];
    size_t n;
} Fake;

static void fake_log(Fake *f, char c)
{
    pthread_mutex_lock(&f->mu);
    f->order[f->n++] = c;
    pthread_mutex_unlock(&f->mu);
}

/* A rank thread: polls its communicator until the run fails, then once more, as
 * drain() does before it returns (freed memory here is an ASan error). */
static void *fake_rank(void *arg)
{
    Fake *f = arg;
    while (!atomic_load(&f->failed))
        for (int k = 0; k < 2; k++)
            atomic_fetch_add(&f->comm[k]->polls, 1);
    for (int k = 0; k < 2; k++)
        atomic_fetch_add(&f->comm[k]->polls, 1);
    return NULL;
}

static void fake_join(void *ctx, int t)
{
    Fake *f = ctx;
    pthread_join(f->th[t], NULL);
    atomic_fetch_add(&f->joined, 1);
    fake_log(f, 'j');
}

static void fake_abort(void *ctx, int k)
{
    Fake *f = ctx;
    assert_int_equal(atomic_load(&f->joined), 3);   /* no thread is inside a call */
    f->comm[k]->aborted = 1;
    fake_log(f, 'a');
}

static void fake_destroy(void *ctx, int k)
{
    Fake *f = ctx;
    assert_int_equal(atomic_load(&f->joined), 3);
    f->comm[k]->destroyed = 1;
    fake_log(f, 'd');
}

static void fake_free(void *ctx)
{
    Fake *f = ctx;
    for (int k = 0; k < 2; k++) {
        assert_true(f->comm[k]->aborted || f->comm[k]->destroyed);
        free(f->comm[k]);
    }
    free(f->comm);
    f->comm = NULL;
    fake_log(f, 'f');
}

static void run_teardown(bool failed, const char *want)
{
    Fake *f = calloc(1, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->comm = calloc(2, sizeof *f->comm);
    for (int k = 0; k < 2; k++)
        f->comm[k] = calloc(1, sizeof **f->comm);
    for (int t = 0; t < 3; t++)
        assert_int_equal(pthread_create(&f->th[t], NULL, fake_rank, f), 0);
    while (atomic_load(&f->comm[0]->polls) < 100)
        ;
    atomic_store(&f->failed, 1);   /* a failed run, or the end of a clean one */
    CuTeardown td = {f, 3, fake_join, 2, fake_abort, fake_destroy, fake_free, 5.0, NULL};
    assert_int_equal(cu_teardown(&td, failed), 0);
    f->order[f->n] = 0;
    assert_string_equal(f->order, want);
    assert_null(f->comm);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* ---- a failed run's aborts: all at once, and a deadline -------------------------------- */

/* NCCL's abort waits for the communicator's last kernel, which may wait on another
 * communicator: here each fake abort returns only once every abort has begun (or after
 * 3 s, counted as a hang). Aborted one after another, the first would hang. */
typedef struct Chain {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, entered, hung, released;
    bool block;              /* aborts wait for `released` instead (the deadline test) */
    int gave_up;
} Chain;

static Chain chain;

static void chain_abort(void *ctx, int k)
{
    (void)ctx;
    (void)k;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 3;
    pthread_mutex_lock(&chain.mu);
    chain.entered++;
    pthread_cond_broadcast(&chain.cv);
    while (chain.block ? !chain.released : chain.entered < chain.n)
        if (pthread_cond_timedwait(&chain.cv, &chain.mu, &until) != 0) {
            chain.hung++;
            break;
        }
    pthread_mutex_unlock(&chain.mu);
}

static void chain_join(void *ctx, int t)
{
    (void)ctx;
    (void)t;
}

static void chain_give_up(void *ctx, double s)
{
    (void)ctx;
    assert_true(s > 0);
    pthread_mutex_lock(&chain.mu);
    chain.gave_up++;
    pthread_mutex_unlock(&chain.mu);
}

static void chain_reset(int n, bool block)
{
    pthread_mutex_init(&chain.mu, NULL);
    pthread_cond_init(&chain.cv, NULL);
    chain.n = n;
    chain.entered = chain.hung = chain.released = chain.gave_up = 0;
    chain.block = block;
}

static void test_teardown_aborts_at_once(void **state)
{
    (void)state;
    chain_reset(16, false);
    CuTeardown td = {NULL, 2, chain_join, 16, chain_abort, NULL, NULL, 30.0, chain_give_up};
    assert_int_equal(cu_teardown(&td, true), 0);
    assert_int_equal(chain.entered, 16);
    assert_int_equal(chain.hung, 0);       /* every abort saw all the others begin */
    assert_int_equal(chain.gave_up, 0);
    /* without a deadline (give_up NULL) the aborts are concurrent too */
    chain_reset(8, false);
    td = (CuTeardown){NULL, 0, chain_join, 8, chain_abort, NULL, NULL, 0, NULL};
    assert_int_equal(cu_teardown(&td, true), 0);
    assert_int_equal(chain.hung, 0);
}

static void test_teardown_deadline(void **state)
{
    (void)state;
    chain_reset(3, true);                  /* the aborts never end by themselves */
    CuTeardown td = {NULL, 0, chain_join, 3, chain_abort, NULL, NULL, 0.2, chain_give_up};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(cu_teardown(&td, true), -1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    assert_int_equal(chain.gave_up, 1);
    assert_true(s >= 0.19 && s < 2.5);     /* at the deadline, not after the aborts */
    /* release the abandoned aborts and let the reaper finish (it frees its record) */
    pthread_mutex_lock(&chain.mu);
    chain.released = 1;
    pthread_cond_broadcast(&chain.cv);
    pthread_mutex_unlock(&chain.mu);
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&chain.mu);
        int e = chain.entered;
        pthread_mutex_unlock(&chain.mu);
        if (e == 3)
            break;
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
    assert_int_equal(chain.hung, 0);
}

static void test_teardown_order(void **state)
{
    (void)state;
    run_teardown(true, "jjjaaf");
    run_teardown(false, "jjjddf");
}

/* ---- the runtime's plan is the compiler's -------------------------------------------- */

static Pipeline *load(const char *path)
{
    setenv("PIPEC_STDLIB", "stdlib", 0);
    DriverOpts o = {0};
    Diag d = {0};
    d.out = fopen("/dev/null", "w");
    Pipeline *p = driver_compile(&d, &o, path);
    fclose(d.out);
    diag_free(&d);
    return p;
}

/* The tables emit_c writes that the plan reads: ops and messages. */
static void fill_program(const Pipeline *p, const CommPlan *cp, PrProgram *g)
{
    memset(g, 0, sizeof *g);
    g->abi = PIPERUN_ABI;
    g->P = p->P;
    g->M = p->M;
    g->V = p->V;
    PrRankDesc *rd = calloc((size_t)p->P, sizeof *rd);
    for (int32_t s = 0; s < p->P; s++) {
        PrOp *ops = calloc(p->stages[s].n + 1, sizeof *ops);
        for (uint32_t i = 0; i < p->stages[s].n; i++) {
            const Op *o = &p->stages[s].ops[i];
            ops[i].kind = o->kind;
            ops[i].chunk = o->chunk;
            ops[i].vstage = ir_vstage(p, s, o->chunk);
            ops[i].mb = (int32_t)o->mb;
        }
        rd[s].ops = ops;
        rd[s].nops = p->stages[s].n;
    }
    PrMsg *msgs = calloc(cp->nmsgs + 1, sizeof *msgs);
    for (uint32_t j = 0; j < cp->nmsgs; j++) {
        const CommMsg *m = &cp->msgs[j];
        const Op *a = &p->stages[m->src].ops[m->src_pos], *b = &p->stages[m->dst].ops[m->dst_pos];
        msgs[j] = (PrMsg){(int32_t)m->src, (int32_t)m->dst, a->kind, b->kind, PR_PAY_TOKEN,
                          ir_vstage(p, (int32_t)m->src, a->chunk), (int32_t)a->mb,
                          ir_vstage(p, (int32_t)m->dst, b->chunk), (int32_t)b->mb};
    }
    g->ranks = rd;
    g->msgs = msgs;
    g->nmsgs = cp->nmsgs;
}

static void free_program(PrProgram *g)
{
    for (int32_t s = 0; s < g->P; s++)
        free((void *)g->ranks[s].ops);
    free((void *)g->ranks);
    free((void *)g->msgs);
}

static void same_plan(const StreamPlan *a, const StreamPlan *b)
{
    assert_int_equal(a->P, b->P);
    assert_int_equal(a->nmsgs, b->nmsgs);
    assert_memory_equal(a->send_after, b->send_after, a->nmsgs * sizeof *a->send_after);
    for (uint32_t r = 0; r < a->P; r++) {
        const StreamRank *x = &a->rank[r], *y = &b->rank[r];
        assert_int_equal(x->nops, y->nops);
        assert_memory_equal(x->stream, y->stream, x->nops);
        assert_memory_equal(x->wstart, y->wstart, (x->nops + 1) * sizeof *x->wstart);
        assert_memory_equal(x->waits, y->waits, x->wstart[x->nops] * sizeof *x->waits);
        assert_memory_equal(x->rstart, y->rstart, (x->nops + 1) * sizeof *x->rstart);
        assert_memory_equal(x->recvs, y->recvs, x->rstart[x->nops] * sizeof *x->recvs);
    }
}

static void test_runtime_plan_is_compilers(void **state)
{
    (void)state;
    DIR *dir = opendir("examples");
    assert_non_null(dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".pipe"))
            continue;
        char path[512];
        snprintf(path, sizeof path, "examples/%s", e->d_name);
        Pipeline *p = load(path);
        assert_non_null(p);
        CommPlan *cp = comm_plan(p);
        StreamInBuf b;
        stream_in_build(&b, p, cp);
        StreamPlan *want = stream_plan(&b.in);
        PrProgram g;
        fill_program(p, cp, &g);
        uint32_t bad_msg = 0;
        StreamPlan *got = cu_stream_plan(&g, &bad_msg);
        assert_non_null(got);
        assert_int_equal(bad_msg, UINT32_MAX);
        same_plan(got, want);
        /* a message naming an op that is not there is refused, by index */
        if (g.nmsgs) {
            PrMsg *m = (PrMsg *)&g.msgs[g.nmsgs - 1];
            m->to_mb = g.M;
            assert_null(cu_stream_plan(&g, &bad_msg));
            assert_int_equal(bad_msg, g.nmsgs - 1);
        }
        stream_plan_free(got);
        stream_plan_free(want);
        free_program(&g);
        stream_in_free(&b);
        comm_plan_free(cp);
        pipeline_free(p);
        n++;
    }
    closedir(dir);
    assert_true(n >= 10);
}

/* CUDA_MODULE_LOADING=EAGER unless the user chose; NCCL's CTA cap leaves room for every
 * waiting NCCL kernel and one compute kernel. */
static void test_env_and_ctas(void **state)
{
    (void)state;
    unsetenv("CUDA_MODULE_LOADING");
    cu_env_defaults();
    assert_string_equal(getenv("CUDA_MODULE_LOADING"), "EAGER");
    setenv("CUDA_MODULE_LOADING", "LAZY", 1);
    cu_env_defaults();
    assert_string_equal(getenv("CUDA_MODULE_LOADING"), "LAZY");
    unsetenv("CUDA_MODULE_LOADING");
    assert_int_equal(cu_nccl_max_ctas(132, 4), 26);   /* H100: 132 SMs, 1F1B middle rank */
    assert_int_equal(cu_nccl_max_ctas(132, 0), 32);   /* at most NCCL's default */
    assert_int_equal(cu_nccl_max_ctas(8, 16), 1);     /* at least one */
    assert_int_equal(cu_nccl_max_ctas(108, 8), 12);   /* A100, 8 pair streams */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick_device),
        cmocka_unit_test(test_teardown_order),
        cmocka_unit_test(test_teardown_aborts_at_once),
        cmocka_unit_test(test_teardown_deadline),
        cmocka_unit_test(test_env_and_ctas),
        cmocka_unit_test(test_runtime_plan_is_compilers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
