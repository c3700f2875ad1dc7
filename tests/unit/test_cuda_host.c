/* test_cuda_host.c - the CUDA backend's host-side decisions (runtime/cuda/cu_host.h),
 * without a GPU: which GPU a rank uses (one visible GPU per MPI process accepted), the
 * teardown order (rank threads joined before the communicators are aborted and freed,
 * with a fake communicator layer that real threads poll; a failed run's aborts all in
 * flight at once; a teardown past its deadline given up), and the stream plan the runtime
 * reads from a generated program's tables equal to the compiler's plan object (the one
 * streams.json is written from) for every example, bad tables refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>

#include "comm.h"
#include "driver.h"
#include "emit_c.h"
#include "emit_table.h"
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

/* ---- the runtime's plan is the one the program carries ------------------------------ */

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

/* The string literal `const char NAME[] = "..." "...";` of generated C text, its pieces
 * joined (malloc'd), or NULL when text has none. */
static char *literal(const char *text, const char *name)
{
    char key[80];
    snprintf(key, sizeof key, "const char %s[] =\n", name);
    const char *a = strstr(text, key);
    if (!a)
        return NULL;
    StrBuf b = {0};
    sb_puts(&b, "");
    for (a += strlen(key); *a == ' ';) {
        const char *q = strchr(a, '"') + 1, *e = strchr(q, '"');
        for (; q < e; q++)
            sb_putc(&b, *q);
        a = e + 1;
        if (*a == '\n')
            a++;
    }
    return b.s;
}

/* The generated program of p as the runtime gets it: emit_c_site with the CUDA
 * backend's plans, each rank's op table and stream plan table taken from its rank_K.c
 * and unpacked (pr_program_unpack) as pr_main does. *tables gets the 2P strings. */
static PrProgram *emitted(const Pipeline *p, const EmitPlans *pl, char ***tables)
{
    Diag d = {0};
    EmitOut out;
    assert_int_equal(emit_c_site(&d, p, "t.pipe", NULL, pl, &out), 0);
    PrRankDesc *rd = calloc((size_t)p->P, sizeof *rd);
    *tables = calloc(2 * (size_t)p->P, sizeof **tables);
    for (int32_t s = 0; s < p->P; s++) {
        char file[32], name[48];
        snprintf(file, sizeof file, "rank_%d.c", s);
        const char *text = NULL;
        for (uint32_t f = 0; f < out.n; f++)
            if (!strcmp(out.files[f].name, file))
                text = sb_str(&out.files[f].text);
        assert_non_null(text);
        snprintf(name, sizeof name, "pr_rank_%d_table", s);
        rd[s].table = (*tables)[2 * s] = literal(text, name);
        snprintf(name, sizeof name, "pr_rank_%d_streams", s);
        rd[s].streams = (*tables)[2 * s + 1] = literal(text, name);
        assert_non_null(rd[s].table);
        assert_non_null(rd[s].streams);
        rd[s].nops = p->stages[s].n;
    }
    PrProgram g = {.abi = PIPERUN_ABI, .P = p->P, .M = p->M, .V = p->V, .ranks = rd,
                   .nmsgs = pl->cp ? pl->cp->nmsgs : 0};
    PrProgram *u = NULL;
    char why[300];
    if (pr_program_unpack(&g, &u, why, sizeof why) != 0)
        fail_msg("%s", why);
    free(rd);
    emit_out_free(&out);
    diag_free(&d);
    return u;
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

/* The table rank 0's plan packs to (emit_pack_streams: rank 0's sends from the
 * messages' ends), unquoted. */
static char *pack0(const PrProgram *g, const StreamPlan *sp)
{
    uint32_t *sends = calloc(g->nmsgs + 1, sizeof *sends), n = 0;
    for (uint32_t m = 0; m < g->nmsgs; m++)
        if (g->msgs[m].src == 0)
            sends[n++] = m;
    PackStreams ps = {&sp->rank[0], sends, n, sp->send_after};
    StrBuf b = {0};
    emit_pack_streams(&b, &ps, NULL);
    b.s[b.len - 1] = 0;
    char *src = xasprintf("const char t[] =\n%s", sb_str(&b));
    char *x = literal(src, "t");
    free(src);
    sb_free(&b);
    free(sends);
    return x;
}

/* Rank 0's table packed from sp (mutated by the caller) must be refused with a reason
 * holding `want`. */
static void refused(PrProgram *g, const StreamPlan *sp, const char *want)
{
    PrRankDesc *rd = (PrRankDesc *)g->ranks;
    const char *keep = rd[0].streams;
    char *t = pack0(g, sp), why[320] = "";
    rd[0].streams = t;
    assert_null(cu_stream_plan(g, why, sizeof why));
    if (!strstr(why, want))
        fail_msg("'%s' lacks '%s'", why, want);
    rd[0].streams = keep;
    free(t);
}

/* For every example: the plan cu_stream_plan reads from the program emit_c_site writes
 * for the CUDA backend is the compiler's plan object (the one streams.json is written
 * from and the verifier checked); and tables that are missing, truncated, of another
 * version, or whose waits, streams or messages are wrong are refused with a reason. */
static void test_runtime_plan_is_the_programs(void **state)
{
    (void)state;
    DIR *dir = opendir("examples");
    assert_non_null(dir);
    struct dirent *e;
    int n = 0, nrefused = 0;
    while ((e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".pipe") || !example_checked(e->d_name))
            continue;
        char path[512];
        snprintf(path, sizeof path, "examples/%s", e->d_name);
        Pipeline *p = load(path);
        assert_non_null(p);
        WorkloadShape shape;
        model_shape_of(p, &shape);
        EmitPlans pl;
        emit_plans_build(&pl, p, &shape, true);
        assert_non_null(pl.streams);
        char **tables;
        PrProgram *g = emitted(p, &pl, &tables);
        char why[320] = "";
        StreamPlan *got = cu_stream_plan(g, why, sizeof why);
        if (!got)
            fail_msg("%s: %s", path, why);
        same_plan(got, pl.streams);
        /* refusals */
        PrRankDesc *rd = (PrRankDesc *)g->ranks;
        const char *keep = rd[0].streams;
        rd[0].streams = NULL;
        assert_null(cu_stream_plan(g, why, sizeof why));
        assert_non_null(strstr(why, "rank 0 has no stream plan"));
        char *t = strdup(keep);
        t[0] = '2';
        rd[0].streams = t;
        assert_null(cu_stream_plan(g, why, sizeof why));
        assert_non_null(strstr(why, "stream plan format 1 expected"));
        strcpy(t, keep);
        t[strlen(t) - 1] = 0;
        assert_null(cu_stream_plan(g, why, sizeof why));
        assert_non_null(strstr(why, "the stream plan of rank 0 is corrupt"));
        rd[0].streams = keep;
        free(t);
        StreamRank *k = &got->rank[0];
        for (uint32_t i = 0; i < k->nops; i++)
            if (k->wstart[i + 1] > k->wstart[i]) { /* a wait for the op itself */
                uint32_t w = k->waits[k->wstart[i]];
                k->waits[k->wstart[i]] = i;
                refused(g, got, "waits for itself");
                k->waits[k->wstart[i]] = w;
                nrefused++;
                break;
            }
        uint8_t s0 = k->stream[0];
        k->stream[0] = (uint8_t)((s0 + 1) % STREAM_N);
        refused(g, got, "op 0 is on another stream than its kind's");
        k->stream[0] = s0;
        uint32_t nr = k->rstart[k->nops];
        for (uint32_t m = 0; nr && m < got->nmsgs; m++)
            if (g->msgs[m].dst != 0) { /* a receive of another rank's message */
                uint32_t r0 = k->recvs[0];
                k->recvs[0] = m;
                refused(g, got, "is received by rank");
                k->recvs[0] = r0;
                nrefused++;
                break;
            }
        if (nr > 1) { /* a message received twice */
            uint32_t r1 = k->recvs[1];
            k->recvs[1] = k->recvs[0];
            refused(g, got, "is listed twice");
            k->recvs[1] = r1;
            nrefused++;
        }
        for (uint32_t m = 0; m < got->nmsgs; m++)
            if (g->msgs[m].src == 0) { /* a send of rank 0 after an op past its ops */
                got->send_after[m] = k->nops;
                refused(g, got, "is never sent");
                nrefused++;
                break;
            }
        stream_plan_free(got);
        for (int32_t s = 0; s < 2 * p->P; s++)
            free(tables[s]);
        free(tables);
        pr_program_free(g);
        emit_plans_free(&pl);
        model_shape_free(&shape);
        pipeline_free(p);
        n++;
    }
    closedir(dir);
    assert_true(n >= (plain_complement() ? 5 : 10));
    assert_true(nrefused >= 4 * n / 2); /* most examples have waits and messages on rank 0 */
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
        cmocka_unit_test(test_runtime_plan_is_the_programs),
    };
    if (plain_complement()) /* only the examples the sanitizer build leaves out */
        cmocka_set_test_filter("test_runtime_plan_is_the_programs");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
