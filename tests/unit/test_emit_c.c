/* test_emit_c.c - what the code generator writes (compiler/generation/emit_c.c): the packed rank
 * tables (compiler/generation/emit_table.c), read back by the runtime's own unpacker
 * (runtime/program_table.c), give each op the PR_HAS_* / PR_WAIT_SI flags of
 * runtime/piperun.h that its (v,m) calls for (docs/spec.md "Dependencies": B and R wait
 * for the SI of their (v,m); F keeps only the checkpoint when an R exists; B computes
 * input gradients only when a W exists) and the arena plan's places; main.c's rows are
 * designated initialisers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver.h"
#include "emit_c.h"
#include "piperun.h"
#include "prtable.h"
#include "testutil.h"
#include "tf_layout.h"

/* Two ranks, two micro-batches: rank 0 swaps (v0,m0) out and back and splits its
 * backwards with W; rank 1 recomputes (v1,m0). */
static Pipeline *sample(void)
{
    Pipeline *p = mk(2, 2, 1);
    ops(p, 0, "F0 F1 SO0 SI0 B0 W0 B1 W1");
    ops(p, 1, "F0 F1 R0 B0 B1");
    CostBlock *c = &p->costs;
    set_cost(c, COST_F, 1);
    set_cost(c, COST_B, 2);
    set_cost(c, COST_W, 1);
    set_cost(c, COST_R, 1);
    set_cost(c, COST_ACT, 1 << 20);
    set_cost(c, COST_CKPT, 1 << 18);
    set_cost(c, COST_HOST_BW, 1e9);
    return p;
}

/* The sample and what emit_c made of it, for every test (cmocka setup/teardown). */
typedef struct Emitted {
    Pipeline *p;
    Diag d;
    EmitOut out;
} Emitted;

static int emit_sample(void **state)
{
    Emitted *e = xcalloc(1, sizeof *e);
    e->p = sample();
    *state = e;
    return emit_c(&e->d, e->p, "t.pipe", &e->out) == 0 ? 0 : -1;
}

static void emitted_free(Emitted *e)
{
    emit_out_free(&e->out);
    pipeline_free(e->p);
    diag_free(&e->d);
}

static int free_sample(void **state)
{
    emitted_free(*state);
    free(*state);
    return 0;
}

static const char *file_text(const EmitOut *o, const char *name)
{
    for (uint32_t i = 0; i < o->n; i++)
        if (!strcmp(o->files[i].name, name))
            return o->files[i].text.s;
    fail_msg("no generated file %s", name);
    return NULL;
}

/* The generated rank_S.c of rank s. */
static const char *rank_text(const EmitOut *o, int s)
{
    char name[32];
    snprintf(name, sizeof name, "rank_%d.c", s);
    return file_text(o, name);
}

/* A generated program unpacked as its main() would (pr_program_unpack): the rank
 * tables read back from the rank_S.c texts, the message count from main.c. */
typedef struct Unpacked {
    int P;
    PrRankDesc *ranks;     /* [P] the tables as written */
    char **tables;         /* [P] each table's characters */
    PrProgram *g;          /* NULL when unpacking failed (why says why) */
    char why[256];
} Unpacked;

/* The characters of the string literal that follows "pr_rank_S_table[] =" in text. */
static char *read_table(const char *text, int s)
{
    char key[64];
    snprintf(key, sizeof key, "const char pr_rank_%d_table[] =\n", s);
    const char *at = strstr(text, key);
    if (!at)
        fail_msg("rank %d: no \"%s\"", s, key);
    StrBuf b = {0};
    for (at += strlen(key); *at != ';';) {
        assert_true(!strncmp(at, "    \"", 5));
        const char *end = strchr(at + 5, '"');
        assert_non_null(end);
        assert_true(end - at + 1 <= 100);   /* lines of at most 100 characters */
        for (const char *c = at + 5; c < end; c++)
            if (!strchr(PR_DIGITS_LAST PR_DIGITS_MORE, *c))
                fail_msg("rank %d: '%c' is not a digit of the table code", s, *c);
            else
                sb_putc(&b, *c);
        at = end + 1;
        if (*at == '\n')
            at++;
    }
    return b.s ? b.s : xstrdup("");
}

static Unpacked *unpack_out(const EmitOut *o, const Pipeline *p)
{
    Unpacked *u = xcalloc(1, sizeof *u);
    u->P = p->P;
    u->ranks = xcalloc((size_t)p->P, sizeof *u->ranks);
    u->tables = xcalloc((size_t)p->P, sizeof *u->tables);
    for (int s = 0; s < p->P; s++) {
        u->tables[s] = read_table(rank_text(o, s), s);
        u->ranks[s] = (PrRankDesc){.table = u->tables[s], .nops = p->stages[s].n};
    }
    const char *nm = strstr(file_text(o, "main.c"), ".nmsgs = ");
    assert_non_null(nm);
    PrProgram g = {.abi = PIPERUN_ABI, .P = p->P, .M = p->M, .V = p->V, .ranks = u->ranks,
                   .nmsgs = (uint32_t)strtoul(nm + strlen(".nmsgs = "), NULL, 10)};
    if (pr_program_unpack(&g, &u->g, u->why, sizeof u->why) != 0)
        u->g = NULL;
    return u;
}

static void unpacked_free(Unpacked *u)
{
    pr_program_free(u->g);
    for (int s = 0; s < u->P; s++)
        free(u->tables[s]);
    free(u->tables);
    free(u->ranks);
    free(u);
}

/* Unpacks o and fails the test when that fails. */
static Unpacked *unpack_ok(const EmitOut *o, const Pipeline *p)
{
    Unpacked *u = unpack_out(o, p);
    if (!u->g)
        fail_msg("the generated tables do not unpack: %s", u->why);
    return u;
}

/* Whether stage list s holds op (kind, mb) (V = 1: the rank is the virtual stage). */
static bool has_op(const Pipeline *p, int s, OpKind k, uint32_t mb)
{
    for (uint32_t i = 0; i < p->stages[s].n; i++)
        if (p->stages[s].ops[i].kind == k && p->stages[s].ops[i].mb == mb)
            return true;
    return false;
}

/* The flags op o of rank s calls for, from the op list itself. */
static unsigned want_flags(const Pipeline *p, int s, const Op *o)
{
    bool si = has_op(p, s, OP_SO, o->mb) && has_op(p, s, OP_SI, o->mb);
    return (has_op(p, s, OP_R, o->mb) ? PR_HAS_R : 0) |
           (has_op(p, s, OP_W, o->mb) ? PR_HAS_W : 0) | (si ? PR_HAS_SI : 0) |
           (si && (o->kind == OP_B || o->kind == OP_R) ? PR_WAIT_SI : 0);
}

/* The generated tables, unpacked as the program does, give every op its kind, (v,m) and
 * the flags its (v,m) calls for; an allocating op listed after an SO waits for it
 * (nso_before); the steps run every op once, in order. */
static void test_op_table_flags(void **state)
{
    const Emitted *e = *state;
    const Pipeline *p = e->p;
    static const int kind[] = {PR_F, PR_B, PR_W, PR_R, PR_SO, PR_SI};
    Unpacked *u = unpack_ok(&e->out, p);
    int nwait_si = 0;
    for (int s = 0; s < p->P; s++) {
        const PrRankDesc *d = &u->g->ranks[s];
        assert_int_equal(d->nops, p->stages[s].n);
        assert_true(d->run == pr_run_steps);
        uint32_t next = 0;
        for (uint32_t k = 0; k < d->nsteps; k++)
            if (d->steps[k].what == PR_STEP_OP)
                assert_int_equal(d->steps[k].idx, next++);
        assert_int_equal(next, d->nops);
        for (uint32_t i = 0; i < p->stages[s].n; i++) {
            const Op *o = &p->stages[s].ops[i];
            const PrOp *x = &d->ops[i];
            assert_int_equal(x->kind, kind[o->kind]);
            assert_int_equal(x->chunk, 0);
            assert_int_equal(x->vstage, s);
            assert_int_equal(x->mb, o->mb);
            assert_int_equal(x->flags, want_flags(p, s, o));
            nwait_si += (x->flags & PR_WAIT_SI) != 0;
            /* SI0 of rank 0 allocates after SO0: it waits for that one SO */
            assert_int_equal(x->nso_before, s == 0 && o->kind == OP_SI ? 1 : 0);
        }
    }
    assert_int_equal(nwait_si, 1);  /* B0 of rank 0 waits for SI0 */
    unpacked_free(u);
}

/* main.c's rank and virtual-stage rows are designated initialisers naming the rank
 * tables; the messages the tables carry run F0 -> F0 (a hidden state) and B0 -> B0 (a
 * gradient) between the ranks. */
static void test_main_tables_designated(void **state)
{
    const Emitted *e = *state;
    const Pipeline *p = e->p;
    const char *t = file_text(&e->out, "main.c");
    char want[128];
    for (int s = 0; s < p->P; s++) {
        snprintf(want, sizeof want, "    [%d] = {.table = pr_rank_%d_table, .nops = %u,", s, s,
                 p->stages[s].n);
        assert_non_null(strstr(t, want));
        snprintf(want, sizeof want, "    [%d] = {.rank = %d, .chunk = 0, .layers = 0,", s, s);
        assert_non_null(strstr(t, want));
    }
    Unpacked *u = unpack_ok(&e->out, p);
    bool act = false, grad = false;
    for (uint32_t m = 0; m < u->g->nmsgs; m++) {
        const PrMsg *g = &u->g->msgs[m];
        act |= g->src == 0 && g->dst == 1 && g->from_kind == PR_F && g->to_kind == PR_F &&
               g->payload == PR_PAY_ACT;
        grad |= g->src == 1 && g->dst == 0 && g->from_kind == PR_B && g->to_kind == PR_B &&
                g->payload == PR_PAY_GRAD;
    }
    assert_true(act && grad);
    unpacked_free(u);
}
/* The n numbers of the row "{a, b, ...}" that follows `key` in s (after `from`). */
static void read_row(const char *s, const char *key, int64_t *x, int n)
{
    const char *at = strstr(s, key);
    if (!at)
        fail_msg("no \"%s\" in %.80s", key, s);
    at += strlen(key);
    for (int k = 0; k < n; k++) {
        char *end;
        x[k] = strtoll(at, &end, 10);
        assert_true(end != at);
        at = end;
        assert_int_equal(*at, k + 1 < n ? ',' : '}');
        at += k + 1 < n ? 2 : 1;
    }
}

/* Every op row places each piece of its region where the synthetic workload's arena
 * plan puts it (.at, runtime/region.h), and every virtual stage's row cuts its region
 * where that plan does (.from: arena_region_cuts over the cost-model sizes); without a
 * model the mlp rows place nothing. */
static void test_piece_rows_follow_the_plan(void **state)
{
    const Emitted *e = *state;
    const Pipeline *p = e->p;
    ArenaSizes *sz = arena_sizes_from_costs(p);
    ArenaPlan *a = arena_plan(p, sz, 1);
    int nplaced = 0;
    Unpacked *u = unpack_ok(&e->out, p);
    for (int s = 0; s < p->P; s++)
        for (uint32_t i = 0; i < p->stages[s].n; i++) {
            const PrOp *x = &u->g->ranks[s].ops[i];
            for (int k = 0; k < PR_PIECES; k++) {
                assert_int_equal(x->at[PR_MLP][k], -1);
                assert_int_equal(x->at[PR_SYNTHETIC][k], a->rank[s].at[i][k]);
                nplaced += x->at[PR_SYNTHETIC][k] >= 0;
            }
            assert_int_equal(x->held[PR_SYNTHETIC], a->rank[s].held[i]);
            assert_int_equal(x->mem_alloc[PR_SYNTHETIC], a->rank[s].alloc[i]);
            assert_int_equal(x->mem_free[PR_SYNTHETIC], a->rank[s].freed[i]);
        }
    unpacked_free(u);
    assert_true(nplaced > 0);
    const char *t = file_text(&e->out, "main.c");
    for (int v = 0; v < p->P * p->V; v++) {
        char row[64];
        snprintf(row, sizeof row, "    [%d] = {.rank = ", v);
        const char *at = strstr(t, row);
        assert_non_null(at);
        int64_t mlp[PR_PIECES + 1], syn[PR_PIECES + 1], want[PR_PIECES + 1];
        read_row(at, ".from = {[PR_MLP] = {", mlp, PR_PIECES + 1);
        read_row(at, "[PR_SYNTHETIC] = {", syn, PR_PIECES + 1);
        arena_region_cuts(&sz[v], want);
        for (int k = 0; k <= PR_PIECES; k++) {
            assert_int_equal(mlp[k], 0);
            assert_int_equal(syn[k], want[k]);
        }
        assert_int_equal(syn[PR_PIECES], 1 << 20);
    }
    arena_plan_free(a);
    free(sz);
}

/* The shape of `model` a pipeline declares, through the CLI's pipeline (driver_compile_
 * string): mlp_shape accepts the workloads' models and otherwise names what is wrong,
 * which `pipec run` and `pipec check` print as the reason the model cannot run. Each
 * case is the whole pipeline text after the model block and the stages. */
static void test_mlp_shape_reasons(void **st)
{
    (void)st;
    static const struct {
        const char *model;     /* the model block's fields */
        const char *extra;     /* pipeline lines besides stages 2, microbatches 2 */
        const char *why;       /* NULL: accepted */
    } cases[] = {
        {"arch gpt layers 4 hidden 64 heads 4 vocab 256 seq 16 mbs 2", "", NULL},
        {"arch llama layers 2 hidden 64 heads 4 kv_heads 2 ffn 96 vocab 256 seq 16 mbs 2",
         "", NULL},
        {"arch mlp layers 2 hidden 32 vocab 64 seq 8 mbs 2", "partition [1, 1]", NULL},
        /* no arch: the cost model's default, gpt */
        {"layers 2 hidden 64 heads 4 vocab 256 seq 16 mbs 2", "", NULL},
        {"arch gpt layers 4 hidden 64 heads 4 vocab 20000000 seq 16 mbs 2", "",
         "model m: `vocab` must be a whole number in 1..16777216"},
        {"arch gpt layers 4 hidden 64 heads 4 vocab 256 seq 16 mbs 20000000", "",
         "model m: `mbs` must be a whole number in 1..16777216"},
        {"arch gpt layers 4 hidden 64 heads 4 ffn 20000000 vocab 256 seq 16 mbs 2", "",
         "model m: `ffn` must be a whole number"},
        {"arch llama layers 4 hidden 12 heads 4 vocab 256 seq 16 mbs 2", "",
         "model m: heads must divide hidden, kv_heads heads, and a llama head size must be even"},
        {"arch mlp layers 3 hidden 32 vocab 64 seq 8 mbs 2", "partition [1.5, 1.5]",
         "the mlp workload runs whole layers only (partition entry 0 is 1.5)"},
        {"arch gpt layers 40 hidden 5120 heads 40 vocab 50304 seq 16 mbs 1", "",
         "model m is too large for the CPU gpt workload (1.73e+10 parameters)"},
        {"arch mlp layers 40 hidden 5120 vocab 50304 seq 16 mbs 1", "",
         "model m is too large for the CPU mlp workload (8.91e+09 parameters)"},
        {"arch mlp layers 2 hidden 64 vocab 256 seq 65536 mbs 64", "",
         "model m: activations of one micro-batch are too large for the CPU mlp workload"},
        {"arch gpt layers 2 hidden 64 heads 4 vocab 256 seq 65536 mbs 64", "",
         "model m: activations of one micro-batch are too large for the CPU gpt workload"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char *src = xasprintf("model m { %s dtype fp32 }\n"
                              "pipeline t {\n  stages 2  microbatches 2  model m\n  %s\n"
                              "  stage 0 { F0 F1 B0 B1 }\n  stage 1 { F0 B0 F1 B1 }\n}\n",
                              cases[i].model, cases[i].extra);
        Diag d = {0};
        char *text = NULL;
        size_t len = 0;
        d.out = open_memstream(&text, &len);
        Pipeline *p = driver_compile_string(&d, NULL, "t.pipe", src, strlen(src));
        fflush(d.out);
        if (!p)
            fail_msg("case %zu does not compile: %s", i, text);
        MlpShape sh;
        char why[200] = "";
        int rc = mlp_shape(p, &sh, why, sizeof why);
        if (cases[i].why) {
            assert_int_equal(rc, -1);
            assert_string_equal(why, cases[i].why);
        } else {
            if (rc != 0)
                fail_msg("case %zu: %s", i, why);
            /* the layers and the workload as the model block writes them */
            int L = atoi(strstr(cases[i].model, "layers ") + strlen("layers "));
            int arch = strstr(cases[i].model, "arch llama") ? TF_LLAMA
                       : strstr(cases[i].model, "arch mlp") ? 0 : TF_GPT;
            assert_int_equal(sh.L, L);
            assert_int_equal(sh.layers[0] + sh.layers[1], sh.L);    /* whole layers */
            assert_int_equal(sh.arch, arch);
            assert_true(sh.sizes[0].act > 0 && sh.sizes[1].act > 0);
            mlp_shape_free(&sh);
        }
        pipeline_free(p);
        fclose(d.out);
        free(text);
        diag_free(&d);
        free(src);
    }
}

/* mlp_shape on partitions the front end and the cost model refuse (changed in the IR
 * after compiling): an entry count that is neither P nor P*V, and whole layers that do
 * not add up to the model's. */
static void test_mlp_shape_bad_partition(void **st)
{
    (void)st;
    const char *src = "model m { arch mlp layers 2 hidden 32 vocab 64 seq 8 mbs 2 dtype fp32 }\n"
                      "pipeline t {\n  stages 2  microbatches 2  model m  partition [1, 1]\n"
                      "  stage 0 { F0 F1 B0 B1 }\n  stage 1 { F0 B0 F1 B1 }\n}\n";
    Diag d = {0};
    Pipeline *p = driver_compile_string(&d, NULL, "t.pipe", src, strlen(src));
    assert_non_null(p);
    MlpShape sh;
    char why[200] = "";
    p->npartition = 1;
    assert_int_equal(mlp_shape(p, &sh, why, sizeof why), -1);
    assert_string_equal(why, "the partition lists 1 entries; the pipeline has 2 stages and 2 "
                             "virtual stages");
    mlp_shape_free(&sh);
    p->npartition = 2;
    p->partition[1] = 2;
    assert_int_equal(mlp_shape(p, &sh, why, sizeof why), -1);
    assert_string_equal(why, "the partition sums to 3 layers, the model has 2");
    mlp_shape_free(&sh);
    pipeline_free(p);
    diag_free(&d);
}

/* A pipeline without a name (built by hand: the front end always names one) is the
 * program "pipeline"; one rank sends no messages; with no model the program says why
 * the model workload cannot run. */
static void test_nameless_one_rank(void **st)
{
    (void)st;
    Pipeline *p = mk(1, 2, 1);
    free(p->name);
    p->name = NULL;
    ops(p, 0, "F0 F1 B0 B1");
    set_cost(&p->costs, COST_F, 1);
    set_cost(&p->costs, COST_B, 2);
    set_cost(&p->costs, COST_ACT, 1 << 20);
    Diag d = {0};
    EmitOut out;
    assert_int_equal(emit_c(&d, p, "t.pipe", &out), 0);
    assert_string_equal(out.progname, "pipeline");
    const char *main_c = file_text(&out, "main.c");
    assert_non_null(strstr(main_c, ".name = \"pipeline\""));
    assert_non_null(strstr(main_c, ".nmsgs = 0,"));
    assert_non_null(strstr(main_c, ".sim_ms = 6,"));   /* F F B B: 1 + 1 + 2 + 2 */
    /* the reason as a C literal, its backquotes octal escapes (put_cstr) */
    assert_non_null(strstr(main_c, ".model_unavailable = \"the pipeline has no \\140model\\140\","));
    assert_non_null(strstr(file_text(&out, "Makefile"), "pipeline"));
    emit_out_free(&out);
    diag_free(&d);
    pipeline_free(p);
}

/* One rank, F0 B0, named `name`, emitted from `source`. */
static void emit_one_rank(Emitted *e, const char *name, const char *source)
{
    memset(e, 0, sizeof *e);
    e->p = mk(1, 1, 1);
    free(e->p->name);
    e->p->name = xstrdup(name);
    ops(e->p, 0, "F0 B0");
    set_cost(&e->p->costs, COST_F, 1);
    assert_int_equal(emit_c(&e->d, e->p, source, &e->out), 0);
}

/* The program's file name keeps [A-Za-z0-9_] of the pipeline name, at most 64 of them;
 * the source name in comments loses what could end or open a comment or make a
 * trigraph; no source at all is an empty one. */
static void test_odd_names(void **st)
{
    (void)st;
    char name[80] = "Pipe~line[1]_-x";
    memset(name + strlen(name), 'y', 60);
    name[75] = 0;
    Emitted e;
    emit_one_rank(&e, name, "dir/x*/y??z/*w\\.pipe");
    assert_int_equal(strlen(e.out.progname), 64);
    assert_true(strncmp(e.out.progname, "Pipeline1_xyyy", 14) == 0);
    assert_non_null(strstr(file_text(&e.out, "Makefile"), " from dir/x*_y?_z/_w_.pipe.\n"));
    emitted_free(&e);
    emit_one_rank(&e, name, NULL);
    assert_non_null(strstr(file_text(&e.out, "main.c"), ".source = \"\","));
    assert_non_null(strstr(file_text(&e.out, "Makefile"), " from .\n"));
    emitted_free(&e);
}

/* emit_write: -1 with errno set when the folder cannot be made (its parent is
 * missing; no file named) or a file cannot be written (a folder is in its place; that
 * file named); the files it did write are whole. */
static void test_emit_write_failures(void **st)
{
    (void)st;
    Emitted e;
    emit_one_rank(&e, "t", "t.pipe");
    const EmitOut *out = &e.out;
    char dir[] = "/tmp/pipec_emit_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *missing = xasprintf("%s/no/such", dir);
    const char *failed = "";
    errno = 0;
    assert_int_equal(emit_write(out, missing, &failed), -1);
    assert_int_equal(errno, ENOENT);
    assert_null(failed);
    char *blocked = xasprintf("%s/%s", dir, out->files[out->n - 1].name);
    assert_int_equal(mkdir(blocked, 0755), 0);
    errno = 0;
    assert_int_equal(emit_write(out, dir, &failed), -1);
    assert_int_not_equal(errno, 0);
    assert_string_equal(failed, out->files[out->n - 1].name);
    char *first = xasprintf("%s/%s", dir, out->files[0].name);
    struct stat sb;
    assert_int_equal(stat(first, &sb), 0);
    assert_int_equal((size_t)sb.st_size, out->files[0].text.len);
    for (uint32_t i = 0; i + 1 < out->n; i++) {
        char *f = xasprintf("%s/%s", dir, out->files[i].name);
        unlink(f);
        free(f);
    }
    rmdir(blocked);
    rmdir(dir);
    free(first);
    free(blocked);
    free(missing);
    emitted_free(&e);
}

/* A schedule the simulator cannot finish (rank 1 runs B0 before the F0 it needs) is
 * still generated, its simulated makespan written as -1 (unknown); the runtime's own
 * deadlock detection is what reports it when run. */
static void test_stuck_schedule(void **st)
{
    (void)st;
    Pipeline *p = mk(2, 1, 1);
    ops(p, 0, "F0 B0");
    ops(p, 1, "B0 F0");
    set_cost(&p->costs, COST_F, 1);
    set_cost(&p->costs, COST_B, 2);
    Diag d = {0};
    EmitOut out;
    assert_int_equal(emit_c(&d, p, "t.pipe", &out), 0);
    assert_non_null(strstr(file_text(&out, "main.c"), ".sim_ms = -1,"));
    emit_out_free(&out);
    diag_free(&d);
    pipeline_free(p);
}

/* A pipeline with no stages, chunks or micro-batches: a value error, and no files. */
static void test_nothing_to_generate(void **st)
{
    (void)st;
    for (int k = 0; k < 3; k++) {
        Pipeline *p = mk(1, 1, 1);
        ops(p, 0, "F0 B0");
        *(k == 0 ? &p->P : k == 1 ? &p->V : &p->M) = 0;
        Diag d = {0};
        char *text = NULL;
        size_t len = 0;
        d.out = open_memstream(&text, &len);
        EmitOut out;
        assert_int_equal(emit_c(&d, p, "t.pipe", &out), 1);
        fflush(d.out);
        assert_int_equal(out.n, 0);
        assert_int_equal(d.ncode[DIAG_VALUE], 1);
        assert_non_null(strstr(text, "nothing to generate: the pipeline has no ops"));
        *(k == 0 ? &p->P : k == 1 ? &p->V : &p->M) = 1;
        emit_out_free(&out);
        fclose(d.out);
        free(text);
        diag_free(&d);
        pipeline_free(p);
    }
}

/* Every message of the unpacked tables carries the payload docs/spec.md "Dependencies"
 * gives its ops: a hidden state for F(v,m) -> F(v+1,m), a gradient for B(v+1,m) ->
 * B(v,m), a token for a `dep` line (here B0 of stage 1 -> F1 of stage 0) and anything
 * else. Checked message by message from its own fields, on interleaved 1F1B (P = 2, V =
 * 2, M = 2), whose messages also run from the last stage back to the first. */
static void test_message_payloads(void **st)
{
    (void)st;
    Pipeline *p = mk(2, 2, 2);
    gen_interleaved(p);
    add_dep(p, 1, OP_B, 0, 0, OP_F, 1);
    set_cost(&p->costs, COST_F, 1);
    set_cost(&p->costs, COST_B, 2);
    Diag d = {0};
    EmitOut out;
    assert_int_equal(emit_c(&d, p, "t.pipe", &out), 0);
    Unpacked *u = unpack_ok(&out, p);
    unsigned n = 0, nact = 0, ngrad = 0, ntoken = 0;
    for (uint32_t m = 0; m < u->g->nmsgs; m++) {
        const PrMsg *g = &u->g->msgs[m];
        bool same = g->from_mb == g->to_mb;
        int want = g->from_kind == PR_F && g->to_kind == PR_F && g->to_v == g->from_v + 1 &&
                           same ? PR_PAY_ACT
                   : g->from_kind == PR_B && g->to_kind == PR_B && g->to_v + 1 == g->from_v &&
                           same ? PR_PAY_GRAD
                                : PR_PAY_TOKEN;
        if (g->payload != want)
            fail_msg("message %u (kind %d v%d mb %d) -> (kind %d v%d mb %d): payload %d, "
                     "want %d", m, g->from_kind, g->from_v, g->from_mb, g->to_kind, g->to_v,
                     g->to_mb, g->payload, want);
        nact += g->payload == PR_PAY_ACT;
        ngrad += g->payload == PR_PAY_GRAD;
        ntoken += g->payload == PR_PAY_TOKEN;
        n++;
    }
    /* 3 boundaries (v0-v1, v1-v2, v2-v3) x 2 micro-batches each way, and the dep */
    assert_int_equal(nact, 6);
    assert_int_equal(ngrad, 6);
    assert_int_equal(ntoken, 1);
    assert_non_null(strstr(file_text(&out, "main.c"), ".nmsgs = 13,"));
    assert_int_equal(n, 13);
    unpacked_free(u);
    emit_out_free(&out);
    diag_free(&d);
    pipeline_free(p);
}

/* A rank with no ops gets a table of no ops, no steps and zero ops in the rank
 * table. */
static void test_empty_rank(void **st)
{
    (void)st;
    Pipeline *p = mk(2, 1, 1);
    ops(p, 0, "F0 B0");
    ops(p, 1, "");
    set_cost(&p->costs, COST_F, 1);
    set_cost(&p->costs, COST_B, 2);
    Diag d = {0};
    EmitOut out;
    assert_int_equal(emit_c(&d, p, "t.pipe", &out), 0);
    const char *t = file_text(&out, "main.c");
    assert_non_null(strstr(t, "[1] = {.table = pr_rank_1_table, .nops = 0,"));
    assert_non_null(strstr(t, "[0] = {.table = pr_rank_0_table, .nops = 2,"));
    Unpacked *u = unpack_ok(&out, p);
    assert_int_equal(u->g->ranks[1].nsteps, 0);
    assert_int_equal(u->g->ranks[0].nsteps, 2);
    unpacked_free(u);
    emit_out_free(&out);
    diag_free(&d);
    pipeline_free(p);
}

/* The comment above a small program's tables lists each rank's program: each op with
 * the messages around it; a program over EMIT_LISTED_OPS (4096) ops is summarised
 * only. */
static void test_rank_summary(void **state)
{
    const Emitted *e = *state;
    const char *t0 = rank_text(&e->out, 0), *t1 = rank_text(&e->out, 1);
    assert_non_null(strstr(t0, "/* Rank 0: 8 ops (F 2, B 2, W 2, SO 1, SI 1), 2 messages "
                               "received, 2 sent.\n"));
    /* F0 sends its message to rank 1's F0, which receives it */
    const char *l0 = strstr(t0, " *      0 F0      -> "), *l1 = strstr(t1, " *      0 F0      <- ");
    assert_non_null(l0);
    assert_non_null(l1);
    unsigned m0, m1;
    assert_int_equal(sscanf(l0, " *      0 F0      -> %u (rank 1 F0)\n", &m0), 1);
    assert_int_equal(sscanf(l1, " *      0 F0      <- %u (rank 0 F0)\n", &m1), 1);
    assert_int_equal(m0, m1);
    Pipeline *p = mk(1, 2049, 1);
    StrBuf list = {0};
    for (int m = 0; m < 2049; m++)
        sb_printf(&list, "F%d B%d ", m, m);
    ops(p, 0, list.s);
    set_cost(&p->costs, COST_F, 1);
    Diag d = {0};
    EmitOut out;
    assert_int_equal(emit_c(&d, p, "t.pipe", &out), 0);
    const char *big = rank_text(&out, 0);
    assert_non_null(strstr(big, "/* Rank 0: 4098 ops (F 2049, B 2049), 0 messages received"));
    assert_non_null(strstr(big, "Its program is not listed here (the program has over 4096 "
                                "ops)"));
    assert_null(strstr(big, " *      0 F0"));
    sb_free(&list);
    emit_out_free(&out);
    diag_free(&d);
    pipeline_free(p);
}

/* A table that is cut short, holds a character outside the code, lists a message
 * twice, or leaves one unreceived, does not unpack: the reason names the rank. */
static void test_corrupt_tables(void **state)
{
    const Emitted *e = *state;
    const Pipeline *p = e->p;
    for (int k = 0; k < 4; k++) {
        Unpacked *u = unpack_ok(&e->out, p);
        pr_program_free(u->g);
        u->g = NULL;
        char *t = u->tables[k == 3 ? 1 : 0];
        size_t n = strlen(t);
        if (k == 0)
            t[n - 3] = 0;            /* cut short */
        else if (k == 1)
            t[n / 2] = '"';          /* not a digit */
        PrProgram g = {.abi = PIPERUN_ABI, .P = p->P, .M = p->M, .V = p->V,
                       .ranks = u->ranks, .nmsgs = k == 2 ? 5 : 4};
        if (k == 3)
            g.nmsgs = 4, u->ranks[1].table = u->tables[0]; /* rank 0's table for rank 1 */
        char why[256] = "";
        PrProgram *out = NULL;
        assert_int_equal(pr_program_unpack(&g, &out, why, sizeof why), -1);
        assert_null(out);
        if (k < 2)
            assert_non_null(strstr(why, "the op table of rank 0 is corrupt at character "));
        else if (k == 2)
            assert_string_equal(why, "message 4 of the op tables is never sent");
        else
            assert_non_null(strstr(why, "rank 1"));
        unpacked_free(u);
    }
}
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_op_table_flags, emit_sample, free_sample),
        cmocka_unit_test_setup_teardown(test_rank_summary, emit_sample, free_sample),
        cmocka_unit_test_setup_teardown(test_corrupt_tables, emit_sample, free_sample),
        cmocka_unit_test_setup_teardown(test_main_tables_designated, emit_sample, free_sample),
        cmocka_unit_test_setup_teardown(test_piece_rows_follow_the_plan, emit_sample,
                                        free_sample),
        cmocka_unit_test(test_mlp_shape_reasons),
        cmocka_unit_test(test_mlp_shape_bad_partition),
        cmocka_unit_test(test_nameless_one_rank),
        cmocka_unit_test(test_stuck_schedule), cmocka_unit_test(test_odd_names),
        cmocka_unit_test(test_emit_write_failures),
        cmocka_unit_test(test_nothing_to_generate),
        cmocka_unit_test(test_message_payloads),
        cmocka_unit_test(test_empty_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
