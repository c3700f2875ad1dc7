/* tune.c - `pipec tune FILE`: search schedule variants of one configuration and rank
 * the ones that pass `check` by simulated makespan (docs/tpipe.md "pipec tune").
 *
 * Legend: P = stages, M = micro-batches, V = chunks per rank. Times ms, sizes bytes.
 *
 * FILE gives the configuration (stages, micro-batches, model, device, budget, costs,
 * tensor parallelism, partition). The search, in this fixed (deterministic) order:
 *
 *   templates   the stdlib's, in templates[]'s order: each at the shape its header
 *               fixes (zbv, dualpipev, vhalf, vmin, tpipe), else at the table's chunk
 *               counts (interleaved with V = 2, 3, 4, onef1b at 1, ...)
 *   recompute   none; when that does not fit, for each policy full, selective, cmb,
 *               mlp: on-demand on ranks 0..k-1 for k = 1, 2, ... up to the first k
 *               that fits the budget (more recomputation than needed only costs time:
 *               Obscura §3.1, Observation 1); a policy per rank, each over-budget
 *               rank's fastest fitting one (search_mixed); for V >= 2
 *               trecomp_blockwise (TPipe §4.2); for onef1b, activation swapping
 *               alone, swap(lambda) for growing lambda (Obscura §6.1)
 *   passes      none, partition_balance, recompute_in_stalls (when there are R ops),
 *               both; for onef1b also the whole obscura planner; with a model, for
 *               every template, lynx_overlap and lynx on the template without
 *               recomputation (they choose each rank's policy: Lynx §4.2, §5)
 *   and the file as written (its own schedule, recompute and apply lines).
 *
 * A template is expanded by loading a small generated source that imports the stdlib
 * file defining it and names the template with the file's P and M and the template's V
 * (load_pipeline_string); its op lists replace those of a copy of the file's pipeline,
 * and the costs are derived again for the new V (so V != the file's V needs a model:
 * without one the per-chunk costs are unknown and those templates are skipped).
 * Each (template, V) is expanded once and copied per variant.
 *
 * Pruning: a variant whose static memory fails before the extra passes gets no extra
 * passes (they never lower a peak past the budget); a pass that leaves the makespan
 * of its input unchanged adds no row (counted as tried); simulation uses sim_makespan with
 * one scratch; --budget N caps the variants evaluated (default 2000).
 * Output: a ranked table on stdout (makespan, throughput in micro-batches per second,
 * the largest peak and the peak of every stage, what was applied), a progress line on
 * stderr; -o OUT writes the best variant's explicit form (print_pipeline). Exit 0 when
 * some variant fits, 1 when none does or the file has errors, 2 on usage errors. */
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "check.h"
#include "cmds.h"
#include "costmodel.h"
#include "driver.h"
#include "exact.h"
#include "frontend.h"
#include "human.h"
#include "memory.h"
#include "passes.h"
#include "print.h"
#include "sim.h"
#include "util.h"

/* One evaluated variant that passed check. */
typedef struct Variant {
    char *desc;        /* what was applied, e.g. "onef1b | recompute 0..2 full" */
    double makespan;   /* ms */
    double *peak;      /* [P] bytes, weights included */
    uint32_t order;    /* evaluation order, the tie-break */
    uint64_t hash;     /* of the op lists and per-virtual-stage costs: equal schedules */
    uint32_t nsame;    /* later variants with the same schedule, not listed */
    bool own;          /* the file's schedule (as written or with tune's steps), not a stdlib template */
} Variant;

typedef struct Tuner {
    const Pipeline *base;     /* the file's pipeline: load + costs, no passes */
    const char *path;
    const LoadOpts *lo;
    Diag quiet;               /* diagnostics of the variants, to /dev/null */
    FILE *devnull;
    void *scratch;            /* sim_makespan's */
    ArenaMemo *arena;         /* arena plans of the ranks checked so far */
    uint32_t budget, tried, fit;
    Variant *v;
    uint32_t nv;
    size_t capv;
    Pipeline *best;           /* a copy of the best variant so far */
    double best_ms;
    bool progress;            /* stderr is a terminal: update the line per variant */
    bool unreadable;          /* a template file could not be read: the search stopped */
    bool own;                 /* the variants now evaluated are of the file's own schedule */
    uint32_t pruned;          /* variants not simulated: their bound exceeded the best */
    double *busy;             /* [P] sim_busy's scratch */
    MemRank *mr;              /* [P] mem_walk's scratch */
    double *kbest;            /* [top] the smallest distinct fitting makespans, ascending;
                               * top 0 (--top above 65536): no pruning */
    uint32_t nkbest, top;
    char **skipped;           /* what the search left out, a line each with the reason */
    uint32_t nskipped;
    size_t capskipped;
    StdTemplate *std;         /* [nstd] the stdlib's templates and their header shapes */
    int nstd;
    struct Row *rows;         /* [nrows] the templates searched, in order (resolve_rows) */
    int nrows;
} Tuner;

/* The stdlib templates tune searches, in search order: fast families first, since the
 * best found early prunes more (docs/tune.md "Pruning"). A template's shape is a fact
 * of the stdlib: one whose header fixes it (`template zbv chunks 2 vshape`,
 * docs/language.md "Templates") is searched at exactly that shape, read from the
 * stdlib (std_templates), and V here is 0. For a template whose header states no shape
 * V is a chunk count tune tries: the chunks-1 templates at 1, the looped ones at 2, 3,
 * 4 (V = 1 of interleaved and interleaved_zb is onef1b and zbh1, of looped_bfs gpipe;
 * docs/tune.md "Search space"). */
typedef struct Template {
    const char *name;
    int V; /* chunks per rank tried; 0: the header's */
} Template;

static const Template templates[] = {
    {"onef1b", 1},         {"zbh1", 1},           {"zbh2", 1},           {"zbv", 0},
    {"dualpipev", 0},      {"vhalf", 0},          {"vmin", 0},           {"interleaved_zb", 2},
    {"interleaved_zb", 3}, {"interleaved_zb", 4}, {"interleaved", 2},    {"interleaved", 3},
    {"interleaved", 4},    {"tpipe", 0},          {"eager1f1b", 1},      {"gpipe", 1},
    {"looped_bfs", 2},     {"looped_bfs", 3},     {"looped_bfs", 4},
};
enum { NTEMPLATES = sizeof templates / sizeof templates[0] };

/* One template at one shape, as tune searches it: a row of templates[] with its shape
 * and file read from the stdlib (resolve_rows). */
typedef struct Row {
    const char *name;
    const char *file;  /* the stdlib file defining it, "schedules" for std/schedules.pipe */
    int V;             /* chunks per rank */
    bool vshape;       /* `chunks V vshape` */
    bool multi;        /* the name has several chunk counts: its rows say "NAME V=k" */
} Row;

/* The stdlib's template `name`, NULL when no stdlib file defines it. */
static const StdTemplate *std_template(const Tuner *t, const char *name)
{
    for (int i = 0; i < t->nstd; i++)
        if (!strcmp(t->std[i].name, name))
            return &t->std[i];
    return NULL;
}

/* Records one line of what the search left out, and why (tune --json "skipped"). */
static void skip(Tuner *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void skip(Tuner *t, const char *fmt, ...)
{
    char b[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    VEC_PUSH(t->skipped, t->nskipped, t->capskipped, xstrdup(b));
}

/* Reads the stdlib's templates and makes t->rows from templates[]: the header's shape
 * where it fixes one (one row for the name), else the row's V (interleaved placement).
 * A name the stdlib does not define, or whose header's chunks is not a number, is a
 * skipped line. False when the stdlib could not be read (reported on stderr). */
static bool resolve_rows(Tuner *t)
{
    Diag d = {.max_errors = 1};
    t->nstd = std_templates(&d, &t->std);
    diag_free(&d);
    if (t->nstd < 0) {
        t->nstd = 0;
        fprintf(stderr, "pipec tune: cannot read the stdlib's templates (the search stops: its "
                        "table would leave them out)\n");
        return false;
    }
    t->rows = xmalloc(NTEMPLATES * sizeof *t->rows);
    for (int i = 0; i < NTEMPLATES; i++) {
        const Template *tm = &templates[i];
        const StdTemplate *st = std_template(t, tm->name);
        bool seen = false;
        for (int k = 0; k < t->nrows; k++)
            seen |= !strcmp(t->rows[k].name, tm->name);
        if (!st) {
            if (!seen)
                skip(t, "%s: not searched, no stdlib file defines it", tm->name);
            continue;
        }
        if (st->V < 0) {
            if (!seen)
                skip(t, "%s: not searched, its header's chunks is not a number", tm->name);
            continue;
        }
        if (st->V > 0 && seen)
            continue; /* the header's one shape, already a row */
        Row r = {.name = st->name, .file = st->file, .V = st->V ? st->V : tm->V,
                 .vshape = st->V ? st->vshape : false};
        if (r.V == 0)
            r.V = 1; /* a row for the header's shape, and the header states none */
        t->rows[t->nrows++] = r;
    }
    for (int i = 0; i < t->nrows; i++)
        for (int k = 0; k < t->nrows; k++)
            t->rows[i].multi |= k != i && !strcmp(t->rows[k].name, t->rows[i].name);
    return true;
}

/* Expands template tm with the base's P and M; NULL when it does not apply (e.g.
 * interleaved with M not a multiple of P), the template's own message then recorded as
 * a skipped line. Op locations are cleared: they point into the generated source. */
static Pipeline *expand(Tuner *t, const Row *tm, const char *desc)
{
    StrBuf src = {0};
    const char *file = tm->file;
    sb_printf(&src, "import \"std/%s.pipe\"\npipeline tune { stages %d microbatches %d chunks %d%s "
                    "schedule %s }\n",
              file, t->base->P, t->base->M, tm->V, tm->vshape ? " vshape" : "", tm->name);
    Diag d = {0};
    FILE *msg = tmpfile(); /* the template's own reason, for the skipped line */
    d.out = msg ? msg : t->devnull;
    d.max_errors = 1;
    Pipeline *p = load_pipeline_string(&d, t->lo, "<tune>", src.s, src.len);
    sb_free(&src);
    if (p && d.nerr) {
        pipeline_free(p);
        p = NULL;
    }
    /* Every template named here is in the stdlib: a name error is its file that could
     * not be read (an I/O error), not a template that does not apply. */
    if (d.ncode[DIAG_NAME] && !t->unreadable) {
        fprintf(stderr, "pipec tune: cannot read std/%s.pipe (the search stops: its table "
                        "would leave out every variant of %s)\n",
                file, tm->name);
        t->unreadable = true;
    } else if (!p) {
        char line[512] = "", why[512] = "does not apply";
        if (msg) {
            rewind(msg);
            while (fgets(line, sizeof line, msg)) {
                const char *e = strstr(line, "error[");
                const char *c = e ? strstr(e, "]: ") : NULL;
                if (c) {
                    snprintf(why, sizeof why, "%s", c + 3);
                    why[strcspn(why, "\n")] = 0;
                    break;
                }
            }
        }
        skip(t, "%s: %s", desc, why);
    }
    if (msg)
        fclose(msg);
    diag_free(&d);
    if (!p)
        return NULL;
    for (int32_t s = 0; s < p->P; s++)
        for (uint32_t i = 0; i < p->stages[s].n; i++)
            p->stages[s].ops[i].loc = LOC_NONE;
    return p;
}

/* A copy of the base with tp's schedule (and its V), costs derived again. NULL when
 * the costs cannot be derived for that V. */
static Pipeline *instantiate(Tuner *t, const Pipeline *tp)
{
    Pipeline *q = pipeline_clone(t->base);
    if (tp->V != q->V) {
        CostBlock *sc = xmalloc((size_t)q->P * sizeof *sc);
        memcpy(sc, q->stage_costs, (size_t)q->P * sizeof *sc);
        pipeline_set_shape(q, q->P, q->M, tp->V);
        memcpy(q->stage_costs, sc, (size_t)q->P * sizeof *sc);
        free(sc);
        if (q->npartition && q->npartition != (uint32_t)q->P) {
            free(q->partition); /* one entry per virtual stage of the old V */
            q->partition = NULL;
            q->npartition = 0;
            q->partition_even = true;
        }
    } else {
        for (int32_t s = 0; s < q->P; s++)
            q->stages[s].n = 0;
    }
    q->placement = tp->placement;
    q->ndeps = 0;
    for (int32_t s = 0; s < q->P; s++) {
        StageOps *st = &q->stages[s];
        st->n = 0;
        for (uint32_t i = 0; i < tp->stages[s].n; i++)
            stage_push(st, tp->stages[s].ops[i]);
        q->stage_policy[s] = POLICY_NONE;
        q->adjusted[s] = 0;
    }
    t->quiet.nerr = 0;
    if (derive_costs(&t->quiet, q)) {
        pipeline_free(q);
        return NULL;
    }
    return q;
}

/* Runs pass name with up to two arguments (key=ident or key=lo..hi ranges). */
static int run(Tuner *t, Pipeline *q, const char *name, const char *key, int64_t lo, int64_t hi,
               const char *key2, const char *ident)
{
    Field args[2];
    uint32_t n = 0;
    memset(args, 0, sizeof args);
    if (key) {
        args[n].key = (char *)key;
        args[n].val.kind = VAL_RANGE;
        args[n].val.lo = lo;
        args[n].val.hi = hi;
        args[n].val.loc = args[n].loc = LOC_NONE;
        n++;
    }
    if (key2) {
        args[n].key = (char *)key2;
        args[n].val.kind = VAL_IDENT;
        args[n].val.str = (char *)ident;
        args[n].val.loc = args[n].loc = LOC_NONE;
        n++;
    }
    PassCall call = {.name = (char *)name, .args = args, .nargs = n, .loc = LOC_NONE};
    t->quiet.nerr = 0;
    return run_pass(&t->quiet, q, &call) || t->quiet.nerr;
}

/* FNV-1a over every rank's op list and the costs every op reads: two variants with the
 * same hash, makespan and peaks are the same schedule reached two ways (a pass that
 * changed nothing), listed once. */
static uint64_t schedule_hash(const Pipeline *q)
{
    uint64_t h = 1469598103934665603ull;
#define MIX(x) (h = (h ^ (uint64_t)(x)) * 1099511628211ull)
    MIX(q->P), MIX(q->M), MIX(q->V);
    for (int32_t s = 0; s < q->P; s++) {
        MIX(q->stages[s].n);
        for (uint32_t i = 0; i < q->stages[s].n; i++) {
            const Op *o = &q->stages[s].ops[i];
            MIX(o->kind), MIX(o->mb), MIX(o->chunk);
        }
        for (int32_t c = 0; c < q->V; c++)
            for (int f = 0; f < COST_NFIELDS; f++) {
                double v = ir_cost(q, s, c, (CostField)f);
                uint64_t bits;
                memcpy(&bits, &v, sizeof bits);
                MIX(bits);
            }
    }
#undef MIX
    return h;
}

/* Checks and simulates q; records it when it passes, unless its makespan equals
 * same_as (a pass that changed nothing: the row would repeat its parent's). Returns true
 * when it fits; *ms (may be NULL) gets the makespan (+inf when it does not fit). */
static bool evaluate(Tuner *t, const Pipeline *q, const char *desc, double same_as, double *out_ms)
{
    if (out_ms)
        *out_ms = INFINITY;
    if (t->tried >= t->budget)
        return false;
    t->tried++;
    /* Pruning (docs/tune.md): no order beats the busiest rank's compute time, so a
     * variant whose bound exceeds the best fitting makespan so far can neither be the
     * best nor change it; it is neither checked nor simulated. */
    if (t->top && t->nkbest == t->top) {
        sim_busy(q, t->busy);
        double bound = 0;
        for (int32_t s = 0; s < q->P; s++)
            bound = fmax(bound, t->busy[s]);
        if (bound > t->kbest[t->top - 1]) {
            t->pruned++;
            return false;
        }
    }
    /* The static peaks first: one walk, and over budget is check's memory error. */
    mem_walk(q, t->mr);
    bool ok = true;
    for (int32_t s = 0; s < q->P && q->has_memory && ok; s++)
        ok = t->mr[s].peak <= q->memory;
    t->quiet.nerr = 0;
    ok = ok && check_pipeline(&t->quiet, q, CHECK_STRUCTURE | CHECK_DEPS) == 0;
    double ms = ok ? sim_makespan(q, &t->scratch) : INFINITY;
    /* The arena packing (driver_check_memory) costs most of a variant: a variant that
     * cannot be among the first --top rows is not packed (pruned as by the bound). */
    if (ok && t->top && t->nkbest == t->top && ms > t->kbest[t->top - 1]) {
        t->pruned++;
        return false;
    }
    /* what `pipec check` demands; variants share most ranks, planned once each */
    ok = ok && driver_check_memory_memo(&t->quiet, q, t->arena) == 0;
    if (!ok)
        ms = INFINITY;
    if (out_ms && ok)
        *out_ms = ms;
    if (ok && isfinite(ms) && ms == same_as)
        ok = false, ms = INFINITY; /* identical to its parent: not a new row */
    else if (ok && isfinite(ms)) {
        t->fit++;
        Variant v = {.desc = xstrdup(desc), .makespan = ms, .order = t->tried,
                     .hash = schedule_hash(q), .own = t->own};
        v.peak = xmalloc((size_t)q->P * sizeof *v.peak);
        for (int32_t s = 0; s < q->P; s++)
            v.peak[s] = t->mr[s].peak;
        VEC_PUSH(t->v, t->nv, t->capv, v);
        /* the distinct top makespans: the pruning threshold is the last */
        uint32_t at = 0;
        while (at < t->nkbest && t->kbest[at] < ms)
            at++;
        if (at < t->top && (at == t->nkbest || t->kbest[at] != ms)) {
            uint32_t n = t->nkbest < t->top ? t->nkbest : t->top - 1;
            memmove(&t->kbest[at + 1], &t->kbest[at], (size_t)(n - at) * sizeof *t->kbest);
            t->kbest[at] = ms;
            t->nkbest = n + 1;
        }
        if (ms < t->best_ms) {
            t->best_ms = ms;
            pipeline_free(t->best);
            t->best = pipeline_clone(q);
        }
    }
    if (t->progress)
        fprintf(stderr, "\rtune: %u variants, %u fit, best %.1f ms   ", t->tried, t->fit,
                isfinite(t->best_ms) ? t->best_ms : 0.0);
    return ok && isfinite(ms);
}

static bool has_r(const Pipeline *q)
{
    for (int32_t s = 0; s < q->P; s++)
        for (uint32_t i = 0; i < q->stages[s].n; i++)
            if (q->stages[s].ops[i].kind == OP_R)
                return true;
    return false;
}

/* Evaluates q as is, then with the extra passes (when q fits). Consumes q. Returns
 * whether q as is fits. */
static bool with_passes(Tuner *t, Pipeline *q, const char *desc)
{
    double base_ms;
    bool fit = evaluate(t, q, desc, NAN, &base_ms);
    if (!mem_fits(q, NULL)) {
        pipeline_free(q);
        return fit;
    }
    static const char *const extra[][2] = {{"partition_balance", NULL},
                                           {"recompute_in_stalls", NULL},
                                           {"partition_balance", "recompute_in_stalls"}};
    for (int e = 0; e < 3 && t->tried < t->budget; e++) {
        if (e >= 1 && !has_r(q))
            break;
        if (e == 0 && !q->model)
            continue;
        Pipeline *r = pipeline_clone(q);
        StrBuf dd = {0};
        sb_puts(&dd, desc);
        bool ok = true;
        for (int k = 0; k < 2 && extra[e][k] && ok; k++) {
            if (!q->model && strcmp(extra[e][k], "partition_balance") == 0)
                continue;
            ok = run(t, r, extra[e][k], NULL, 0, 0, NULL, NULL) == 0;
            sb_printf(&dd, " | %s", extra[e][k]);
        }
        if (ok)
            evaluate(t, r, dd.s, base_ms, NULL);
        sb_free(&dd);
        pipeline_free(r);
    }
    pipeline_free(q);
    return fit;
}

/* Obscura's activation swapping alone (§6.1, Eq. 1) on 1F1B: swap(lambda, stages=0..=k)
 * with k the last rank over budget, for lambda = 1, 2, ... up to the first that fits
 * (more swapping only adds copy traffic). Swapping hides in the steady phase when the
 * host link keeps up, so it can fit a rank at no compute cost where recomputation
 * cannot. */
static void search_swap(Tuner *t, const Pipeline *q, const char *tdesc)
{
    MemRank *mr = xmalloc((size_t)q->P * sizeof *mr);
    mem_walk(q, mr);
    int32_t k = -1;
    for (int32_t s = 0; s < q->P; s++)
        if (q->has_memory && mr[s].peak > q->memory)
            k = s;
    free(mr);
    StrBuf d = {0};
    for (int64_t lambda = 1; k >= 0 && lambda <= q->M && t->tried < t->budget; lambda++) {
        Field args[2];
        memset(args, 0, sizeof args);
        args[0].key = "lambda";
        args[0].val.kind = VAL_NUM;
        args[0].val.num = (double)lambda;
        args[1].key = "stages";
        args[1].val.kind = VAL_RANGE;
        args[1].val.lo = 0;
        args[1].val.hi = k + 1;
        for (int i = 0; i < 2; i++)
            args[i].loc = args[i].val.loc = LOC_NONE;
        PassCall call = {.name = "swap", .args = args, .nargs = 2, .loc = LOC_NONE};
        Pipeline *r = pipeline_clone(q);
        t->quiet.nerr = 0;
        if (run_pass(&t->quiet, r, &call) || t->quiet.nerr) {
            pipeline_free(r);
            break; /* not a 1F1B-family schedule */
        }
        d.len = 0;
        sb_printf(&d, "%s | swap lambda=%lld 0..=%d", tdesc, (long long)lambda, (int)k);
        bool fit = mem_fits(r, NULL);
        with_passes(t, r, d.s);
        if (fit)
            break;
    }
    sb_free(&d);
}

/* Per-rank recomputation policies: each rank over budget without recomputation gets
 * the policy that fits it at the least makespan when applied to that rank alone, then
 * all ranks take their choices together. A rank's static peak depends on its own ops
 * only, so the choices fit together when they fit one by one. This reaches the mixed
 * plans the prefix plans of search_template cannot, e.g. full recomputation on rank 0
 * and the cheaper cmb or selective on the ranks after it (Obscura §8's CMB-Identifying,
 * generalised to every policy). Without a model every policy costs as full: skipped. */
static void search_mixed(Tuner *t, const Pipeline *q, const char *tdesc)
{
    if (!q->model || !q->has_memory)
        return;
    MemRank *mr = xmalloc((size_t)q->P * sizeof *mr);
    int *choice = xmalloc((size_t)q->P * sizeof *choice);
    mem_walk(q, mr);
    bool prefix = true, same = true; /* the plan is one of search_template's prefixes */
    int32_t nover = 0;
    for (int32_t s = 0; s < q->P; s++) {
        choice[s] = -1;
        if (mr[s].peak <= q->memory)
            continue;
        double best_ms = INFINITY;
        for (int pol = POLICY_FULL; pol < POLICY_BLOCK; pol++) {
            Pipeline *r = pipeline_clone(q);
            if (run(t, r, "recompute", "stages", s, s + 1, "policy", policy_name[pol]) == 0) {
                MemRank *m2 = xmalloc((size_t)r->P * sizeof *m2);
                mem_walk(r, m2);
                double ms = m2[s].peak <= q->memory ? sim_makespan(r, &t->scratch) : INFINITY;
                if (ms < best_ms)
                    best_ms = ms, choice[s] = pol;
                free(m2);
            }
            pipeline_free(r);
        }
        if (choice[s] < 0)
            goto out; /* recomputation alone cannot fit this rank */
        prefix = prefix && nover == s;
        same = same && (nover == 0 || choice[s] == choice[0]);
        nover++;
    }
    if (nover == 0 || (prefix && same))
        goto out;
    Pipeline *r = pipeline_clone(q);
    StrBuf d = {0};
    sb_printf(&d, "%s | recompute", tdesc);
    bool ok = true;
    for (int32_t s = 0; s < q->P && ok; s++) {
        if (choice[s] < 0)
            continue;
        int32_t e = s; /* a run of ranks with the same policy */
        while (e + 1 < q->P && choice[e + 1] == choice[s])
            e++;
        ok = run(t, r, "recompute", "stages", s, e + 1, "policy", policy_name[choice[s]]) == 0;
        sb_printf(&d, "%s %d..=%d %s", d.s[d.len - 1] == 'e' ? "" : ",", s, e, policy_name[choice[s]]);
        s = e;
    }
    if (ok)
        with_passes(t, r, d.s);
    else
        pipeline_free(r);
    sb_free(&d);
out:
    free(choice);
    free(mr);
}

/* Recomputation on exactly the ranks over budget, lo..=hi, one policy each: the plan
 * `pipec check` suggests as its remedy (driver_memory_remedy), so tune's best is never
 * slower than that remedy. Passes follow when keep_passes (a template expansion); the
 * file as written (q has its own passes) gets the recompute line alone, as check's. */
static void search_range(Tuner *t, const Pipeline *q, const char *tdesc, bool extra)
{
    if (!q->has_memory)
        return;
    MemRank *mr = xmalloc((size_t)q->P * sizeof *mr);
    mem_walk(q, mr);
    int32_t lo = -1, hi = -1;
    for (int32_t s = 0; s < q->P; s++)
        if (mr[s].peak > q->memory)
            lo = lo < 0 ? s : lo, hi = s;
    free(mr);
    StrBuf d = {0};
    for (int pol = POLICY_FULL; lo >= 0 && pol < POLICY_BLOCK && t->tried < t->budget; pol++) {
        if (!q->model && pol != POLICY_FULL)
            continue; /* without a model the other policies cost as full */
        Pipeline *r = pipeline_clone(q);
        if (run(t, r, "recompute", "stages", lo, hi + 1, "policy", policy_name[pol])) {
            pipeline_free(r);
            continue;
        }
        d.len = 0;
        sb_printf(&d, "%s | recompute %d..=%d %s", tdesc, lo, hi, policy_name[pol]);
        if (extra) {
            with_passes(t, r, d.s);
        } else {
            evaluate(t, r, d.s, NAN, NULL);
            pipeline_free(r);
        }
    }
    sb_free(&d);
}

/* The recompute plans over one template expansion. */
static void search_template(Tuner *t, const Pipeline *tp, const char *tdesc)
{
    Pipeline *q = instantiate(t, tp);
    if (!q)
        return;
    StrBuf d = {0};
    /* no recomputation; when that fits, recomputation only costs time (pruned) */
    bool none_fits = mem_fits(q, NULL);
    with_passes(t, pipeline_clone(q), tdesc);
    /* on-demand recomputation, ranks 0..k-1, per policy */
    for (int pol = POLICY_FULL; pol < POLICY_BLOCK && !none_fits && t->tried < t->budget; pol++) {
        if (!q->model && pol != POLICY_FULL)
            continue; /* without a model the other policies cost as full */
        for (int32_t k = 1; k <= q->P && t->tried < t->budget; k++) {
            Pipeline *r = pipeline_clone(q);
            if (run(t, r, "recompute", "stages", 0, k, "policy", policy_name[pol])) {
                pipeline_free(r);
                break;
            }
            d.len = 0;
            sb_printf(&d, "%s | recompute 0..=%d %s", tdesc, k - 1, policy_name[pol]);
            bool fit = mem_fits(r, NULL);
            with_passes(t, r, d.s);
            if (fit)
                break;
        }
    }
    if (!none_fits && t->tried < t->budget)
        search_range(t, q, tdesc, true);
    if (!none_fits && t->tried < t->budget)
        search_mixed(t, q, tdesc);
    if (!none_fits && q->V == 1 && strcmp(tdesc, "onef1b") == 0 && t->tried < t->budget)
        search_swap(t, q, tdesc);
    /* block-wise T-Recomp of the shallow chunk */
    if (q->V >= 2 && !none_fits && t->tried < t->budget) {
        Pipeline *r = pipeline_clone(q);
        if (run(t, r, "trecomp_blockwise", NULL, 0, 0, NULL, NULL) == 0) {
            d.len = 0;
            sb_printf(&d, "%s | trecomp_blockwise", tdesc);
            with_passes(t, r, d.s);
        } else {
            pipeline_free(r);
        }
    }
    /* Lynx: both passes choose each rank's recomputation themselves (Lynx §4.2, §5);
     * they recompute to fit the budget, so a template that fits without recomputation
     * is not given to them (pruned: docs/tune.md). */
    static const char *const lynx[] = {"lynx_overlap", "lynx"};
    for (int i = 0; i < 2 && q->model && !none_fits && t->tried < t->budget; i++) {
        Pipeline *r = pipeline_clone(q);
        if (run(t, r, lynx[i], NULL, 0, 0, NULL, NULL) == 0) {
            d.len = 0;
            sb_printf(&d, "%s | %s", tdesc, lynx[i]);
            evaluate(t, r, d.s, NAN, NULL);
        }
        pipeline_free(r);
    }
    /* the whole Obscura planner on 1F1B */
    if (q->V == 1 && strcmp(tdesc, "onef1b") == 0 && t->tried < t->budget) {
        Pipeline *r = pipeline_clone(q);
        if (run(t, r, "obscura", NULL, 0, 0, NULL, NULL) == 0) {
            d.len = 0;
            sb_printf(&d, "%s | obscura", tdesc);
            evaluate(t, r, d.s, NAN, NULL);
        }
        pipeline_free(r);
    }
    sb_free(&d);
    pipeline_free(q);
}

/* ---- the source form of a variant (tune -o) ------------------------------------- */

static void put_value(StrBuf *b, const Value *v)
{
    char x[PRINT_NUM_MAX + 8];
    switch (v->kind) {
    case VAL_NUM:
        if (v->unit == UNIT_TIME)
            sb_puts(b, print_time(x, sizeof x, v->num));
        else if (v->unit == UNIT_SIZE)
            sb_puts(b, print_size(x, sizeof x, v->num));
        else if (v->unit == UNIT_BW)
            sb_puts(b, print_bw(x, sizeof x, v->num));
        else
            sb_puts(b, print_decimal(x, sizeof x, v->num));
        break;
    case VAL_IDENT:
        sb_puts(b, v->str);
        break;
    case VAL_STRING:
        sb_printf(b, "\"%s\"", v->str);
        break;
    case VAL_RANGE:
        sb_printf(b, "%lld..%lld", (long long)v->lo, (long long)v->hi);
        break;
    case VAL_LIST:
        sb_putc(b, '[');
        for (uint32_t i = 0; i < (uint32_t)v->hi; i++)
            sb_printf(b, "%s%s", i ? ", " : "", print_decimal(x, sizeof x, v->list[i]));
        sb_putc(b, ']');
        break;
    }
}

/* `model NAME { k v ... }` / `device NAME { ... }` at the top level, every field of the
 * merged entity: the written file is self-contained and means exactly what the variant
 * was evaluated with (no stdlib models or devices import, so no name clash). */
static void put_entity(StrBuf *b, const char *what, const Entity *e)
{
    sb_printf(b, "%s %s {", what, e->name);
    for (uint32_t i = 0; i < e->nfields; i++) {
        sb_printf(b, "%s%s ", i % 6 ? "  " : "\n  ", e->fields[i].key);
        put_value(b, &e->fields[i].val);
    }
    sb_puts(b, "\n}\n");
}

/* The costs the source wrote (not derived) of one block, " f 1ms b 2ms". */
static bool put_written_costs(StrBuf *b, const CostBlock *c)
{
    char x[PRINT_NUM_MAX + 8];
    bool any = false;
    for (int f = 0; f < COST_NFIELDS; f++)
        if ((c->set & ~c->derived & (1u << f)) && isfinite(c->v[f])) {
            sb_printf(b, " %s %s", cost_field_name[f],
                      print_cost_value(x, sizeof x, (CostField)f, c->v[f]));
            any = true;
        }
    return any;
}

/* The steps tune ran, " | STEP | STEP ..." as evaluate's description lists them (rest),
 * as `recompute` and `apply` lines of base b's source. */
static void write_steps(StrBuf *out, const Pipeline *b, const char *rest)
{
    for (const char *p = rest; p; p = strstr(p + 3, " | ")) {
        const char *e = strstr(p + 3, " | ");
        char step[256];
        snprintf(step, sizeof step, "%.*s", (int)(e ? e - (p + 3) : (long)strlen(p + 3)), p + 3);
        int lo, hi, lambda, n;
        char pol[32];
        if (!strncmp(step, "recompute ", 10)) {
            for (const char *q = step + 10; sscanf(q, "%d..=%d %31[a-z]%n", &lo, &hi, pol, &n) == 3;) {
                /* the file's granularity, which tune's recompute variants keep */
                bool layer = b->stage_per_layer && lo >= 0 && lo < b->P && b->stage_per_layer[lo];
                sb_printf(out, "  recompute stages %d..=%d policy %s%s\n", lo, hi, pol,
                          layer ? " granularity layer" : "");
                q += n;
                q += strspn(q, ", ");
            }
        } else if (sscanf(step, "swap lambda=%d %d..=%d", &lambda, &lo, &hi) == 3) {
            sb_printf(out, "  apply swap(lambda=%d, stages=%d..=%d)\n", lambda, lo, hi);
        } else {
            sb_printf(out, "  apply %s\n", step);
        }
    }
}

/* Writes the variant described by desc ("TEMPLATE | STEP | STEP ...", as evaluate
 * recorded it) as a source file that `pipec check` accepts and that simulates to the
 * same makespan: the base's model, device, partition, budget and written costs, then
 * `schedule TEMPLATE`, a `recompute` line per recompute step and an `apply` line per
 * pass, in the order tune ran them. `written` is the file as written (its own schedule,
 * recompute and apply lines, for the "as written" row). Returns false when the variant
 * has no source form (an explicit file as written: the caller prints it instead). */
static bool write_source(StrBuf *out, const Tuner *t, const Pipeline *written,
                         const Variant *v, uint32_t rank, uint32_t nrows)
{
    const Pipeline *b = t->base;
    char tmpl[64] = "";
    int V = b->V;
    bool vshape = b->placement == PLACE_VSHAPE;
    if (v->own && strncmp(v->desc, "as written", 10))
        return false; /* the file's own schedule with tune's steps: the explicit form */
    const char *rest = strstr(v->desc, " | ");
    size_t head = rest ? (size_t)(rest - v->desc) : strlen(v->desc);
    bool as_written = !strncmp(v->desc, "as written", 10);
    if (as_written) {
        if (!written->schedule)
            return false;
        snprintf(tmpl, sizeof tmpl, "%s", written->schedule);
    } else {
        int k = 0;
        snprintf(tmpl, sizeof tmpl, "%.*s", (int)(head < 63 ? head : 63), v->desc);
        if (sscanf(v->desc, "%63[a-z0-9_] V=%d", tmpl, &k) != 2)
            k = 0;
        for (int i = 0; i < t->nrows; i++) /* its chunks and placement, not the file's */
            if (!strcmp(t->rows[i].name, tmpl) && (k == 0 || t->rows[i].V == k))
                V = t->rows[i].V, vshape = t->rows[i].vshape;
    }
    /* The stdlib file that defines it; a template of another file (the file's own, as
     * written) has none, and the source imports std/schedules.pipe as for onef1b. */
    const StdTemplate *st = std_template(t, tmpl);
    char ms[32], pk[32], x[PRINT_NUM_MAX + 8];
    double mx = 0;
    int32_t at = 0;
    for (int32_t s = 0; s < b->P; s++)
        if (v->peak[s] > mx)
            mx = v->peak[s], at = s;
    sb_printf(out, "# %s - variant %u of %u found by `pipec tune %s`:\n#   %s\n", b->name, rank,
              nrows, t->path, v->desc);
    sb_printf(out, "# makespan %s (%.3f micro-batches/s), peak %s on stage %d\n",
              human_ms(ms, sizeof ms, v->makespan), b->M / (v->makespan / 1000.0),
              human_size(pk, sizeof pk, mx), at);
    sb_printf(out, "import \"std/%s.pipe\"\n", st ? st->file : "schedules");
    if (b->model)
        put_entity(out, "model", b->model);
    if (b->device)
        put_entity(out, "device", b->device);
    sb_printf(out, "\npipeline %s {\n  stages %d  microbatches %d", b->name, b->P, b->M);
    if (V != 1)
        sb_printf(out, "  chunks %d%s", V, vshape ? " vshape" : "");
    sb_puts(out, "\n");
    if (b->has_memory)
        sb_printf(out, "  memory %s\n", print_size(x, sizeof x, b->memory));
    if (b->model)
        sb_printf(out, "  model %s", b->model->name);
    if (b->device)
        sb_printf(out, "%sdevice %s", b->model ? "  " : "  ", b->device->name);
    if (b->model || b->device)
        sb_puts(out, "\n");
    if (b->tensor_parallel > 1)
        sb_printf(out, "  tensor_parallel %d\n", b->tensor_parallel);
    print_dp_settings(out, b);
    if (b->partition_set && !b->partition_even &&
        (V == b->V || b->npartition == (uint32_t)b->P)) {
        sb_puts(out, "  partition [");
        for (uint32_t i = 0; i < b->npartition; i++)
            sb_printf(out, "%s%s", i ? ", " : "", print_decimal(x, sizeof x, b->partition[i]));
        sb_puts(out, "]\n");
    } else if (b->partition_set) {
        sb_puts(out, "  partition even\n");
    }
    StrBuf c = {0};
    if (put_written_costs(&c, &b->costs))
        sb_printf(out, "  costs {%s }\n", c.s);
    for (int32_t s = 0; b->stage_costs && s < b->P; s++) {
        c.len = 0;
        if (put_written_costs(&c, &b->stage_costs[s]))
            sb_printf(out, "  costs stage %d {%s }\n", s, c.s);
    }
    for (int32_t vs = 0; V == b->V && b->vstage_costs && vs < b->P * b->V; vs++) {
        c.len = 0;
        if (put_written_costs(&c, &b->vstage_costs[vs]))
            sb_printf(out, "  costs vstage %d {%s }\n", vs, c.s);
    }
    sb_free(&c);
    sb_printf(out, "  schedule %s\n", tmpl);
    if (as_written) {
        for (uint32_t i = 0; i < written->nrecompute; i++) {
            const RecomputeDir *r = &written->recompute[i];
            char pol[320];
            sb_printf(out, "  recompute stages %d..%d policy %s%s\n", r->lo, r->hi,
                      policy_format(r->policy, r->arg, pol, sizeof pol),
                      r->per_layer ? " granularity layer" : "");
        }
        for (uint32_t i = 0; i < written->npasses; i++) {
            const PassCall *pc = &written->passes[i];
            sb_printf(out, "  apply %s", pc->name);
            for (uint32_t k = 0; k < pc->nargs; k++) {
                sb_printf(out, "%s%s=", k ? ", " : "(", pc->args[k].key);
                put_value(out, &pc->args[k].val);
            }
            sb_puts(out, pc->nargs ? ")\n" : "\n");
        }
    }
    write_steps(out, b, rest);
    sb_puts(out, "}\n");
    return true;
}

/* Drops, from the sorted rows, each variant equal to an earlier one (same hash, makespan
 * and peaks), counting it in the earlier one's nsame. Returns the new count. */
static uint32_t dedupe(Variant *v, uint32_t n, int32_t P)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = k;
        for (uint32_t m = k; m-- > 0 && v[m].makespan == v[i].makespan;)
            if (v[m].hash == v[i].hash && !memcmp(v[m].peak, v[i].peak, (size_t)P * sizeof *v[i].peak)) {
                j = m;
                break;
            }
        if (j < k) {
            v[j].nsame++;
            free(v[i].desc);
            free(v[i].peak);
            continue;
        }
        v[k++] = v[i];
    }
    return k;
}

static int cmp_variant(const void *a, const void *b)
{
    const Variant *x = a, *y = b;
    if (x->makespan != y->makespan)
        return x->makespan < y->makespan ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

/* Reads tune's options into *o, *out, *budget, *top and *format (0 table, 1 --json,
 * 2 --csv). Returns -1 to go on, else the
 * exit code (0 after --help, 2 on a usage error). */
static int tune_args(int argc, char **argv, DriverOpts *o, const char **out, long *budget,
                     long *top, int *format)
{
    enum { OPT_BUDGET = 256, OPT_TOP, OPT_HELP, OPT_JSON, OPT_CSV };
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"csv", no_argument, NULL, OPT_CSV},
        {"budget", required_argument, NULL, OPT_BUDGET},
        {"top", required_argument, NULL, OPT_TOP},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, OPT_HELP},
        DRIVER_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "ho:" DRIVER_SHORTOPTS, longopts, NULL)) != -1) {
        if (driver_common_opt(o, opt, optarg))
            continue;
        char *end = NULL;
        switch (opt) {
        case 'o': *out = optarg; break;
        case OPT_JSON:
        case OPT_CSV:
            if (*format && *format != opt - OPT_JSON + 1) {
                fprintf(stderr, "pipec tune: --json and --csv exclude each other\n");
                return 2;
            }
            *format = opt - OPT_JSON + 1;
            break;
        case OPT_BUDGET:
        case OPT_TOP: {
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 1 || v > 100000000) {
                fprintf(stderr, "pipec tune: --%s wants a whole number >= 1, not '%s'\n",
                        opt == OPT_BUDGET ? "budget" : "top", optarg);
                return 2;
            }
            *(opt == OPT_BUDGET ? budget : top) = v;
            break;
        }
        case 'h':
        case OPT_HELP:
        default:
            return driver_usage_status("tune", opt == 'h' || opt == OPT_HELP);
        }
    }
    return driver_operands(argc, "tune", 1);
}

/* The search: the file as written, then every template's variants (search_template),
 * then the progress summary on stderr. */
static void tune_search(Tuner *t, Pipeline *written)
{
    const Pipeline *base = t->base;
    StrBuf desc = {0};
    sb_printf(&desc, "as written (%s%s)", base->schedule ? "schedule " : "explicit",
              base->schedule ? base->schedule : "");
    t->own = true;
    evaluate(t, written, desc.s, NAN, NULL);
    /* check's remedy: the file as written with recomputation on its ranks over budget */
    if (!mem_fits(written, NULL))
        search_range(t, written, desc.s, false);
    /* The file's own schedule with tune's steps, unless it is a row of the table below. */
    bool in_table = false;
    for (int i = 0; i < t->nrows && base->schedule; i++)
        in_table |= !strcmp(t->rows[i].name, base->schedule) && t->rows[i].V == base->V &&
                    t->rows[i].vshape == (base->placement == PLACE_VSHAPE);
    if (!in_table && t->tried < t->budget) {
        desc.len = 0;
        sb_printf(&desc, "own (%s%s)", base->schedule ? "schedule " : "explicit",
                  base->schedule ? base->schedule : "");
        search_template(t, base, desc.s);
    }
    t->own = false;
    for (int i = 0; i < t->nrows && !t->unreadable; i++) {
        const Row *tm = &t->rows[i];
        desc.len = 0;
        if (tm->multi)
            sb_printf(&desc, "%s V=%d", tm->name, tm->V);
        else
            sb_puts(&desc, tm->name);
        if (t->tried >= t->budget) {
            skip(t, "%s: not searched, --budget %u variants reached", desc.s, t->budget);
            continue;
        }
        if ((tm->V != base->V || tm->vshape != (base->placement == PLACE_VSHAPE)) &&
            !base->model) {
            skip(t, "%s: chunks %d%s differ from the file's and it names no model, so the "
                    "per-chunk costs are unknown",
                 desc.s, tm->V, tm->vshape ? " vshape" : "");
            continue;
        }
        Pipeline *tp = expand(t, tm, desc.s);
        if (!tp)
            continue;
        search_template(t, tp, desc.s);
        pipeline_free(tp);
    }
    if (!t->unreadable) {
        skip(t, "interleaved, interleaved_zb, looped_bfs with chunks above 4: not searched "
                "(more chunks per rank multiply the p2p transfers; write `chunks V` to tune one)");
        skip(t, "templates of other files than the stdlib: only the file's own schedule is searched");
    }
    sb_free(&desc);
    fprintf(stderr, "%stune: %u variants, %u fit, best %.1f ms\n", t->progress ? "\r" : "",
            t->tried, t->fit, isfinite(t->best_ms) ? t->best_ms : 0.0);
}

/* The ranked table of the first `top` variants (already sorted and deduplicated). */
static void tune_table(FILE *tab, const Tuner *t, long top)
{
    const Pipeline *base = t->base;
    char b1[64];
    fprintf(tab, "# %s: %d stages, %d micro-batches, budget %s; %u variants tried, %u pass check\n",
           t->path, base->P, base->M,
           base->has_memory ? sim_fmt_size(b1, sizeof b1, base->memory) : "none", t->tried, t->fit);
    fprintf(tab, "%4s %12s %10s %9s  %-*s  %s\n", "rank", "makespan_ms", "mb_per_s", "peak_GiB",
           base->P * 5, "peak GiB per stage", "variant");
    for (uint32_t i = 0; i < t->nv && i < (uint32_t)top; i++) {
        const Variant *v = &t->v[i];
        double mx = 0;
        StrBuf ps = {0};
        for (int32_t s = 0; s < base->P; s++) {
            mx = fmax(mx, v->peak[s]);
            sb_printf(&ps, "%s%.1f", s ? " " : "", v->peak[s] / 1073741824.0);
        }
        char same[48] = "";
        if (v->nsame)
            snprintf(same, sizeof same, "  (and %u identical variant%s)", v->nsame,
                     v->nsame == 1 ? "" : "s");
        fprintf(tab, "%4u %12.1f %10.3f %9.1f  %-*s  %s%s\n", i + 1, v->makespan,
               base->M / (v->makespan / 1000.0), mx / 1073741824.0, base->P * 5, ps.s, v->desc,
               same);
        sb_free(&ps);
    }
}

/* tune --json (docs/spec.md "JSON output"): {"variants": [{"name", "source", "makespan_ms",
 * "fits", "peak_mem_bytes": [per stage], "identical"}, ...], "searched", "skipped":
 * [lines], "fit", "pruned"}: the spec's fixed keys first, in its order, then the
 * extras; every row (not only --top's), numbers as sim --json writes them (sim_fmt_num).
 * --csv: the same rows under a header, peaks one column per stage. */
static void tune_machine(FILE *f, const Tuner *t, bool json)
{
    StrBuf b = {0};
    char x[64];
    int32_t P = t->base->P;
    if (json) {
        sb_puts(&b, "{\"variants\": [");
    } else {
        sb_puts(&b, "rank,name,source,makespan_ms,fits,identical");
        for (int32_t s = 0; s < P; s++)
            sb_printf(&b, ",peak_mem_bytes_%d", s);
        sb_putc(&b, '\n');
    }
    for (uint32_t i = 0; i < t->nv; i++) {
        const Variant *v = &t->v[i];
        const char *src = v->own ? "file" : "stdlib";
        if (json) {
            sb_puts(&b, i ? ",\n  {\"name\": " : "\n  {\"name\": ");
            sim_json_string(&b, v->desc);
            sb_printf(&b, ", \"source\": \"%s\", \"makespan_ms\": %s, \"fits\": true, "
                          "\"peak_mem_bytes\": [",
                      src, sim_fmt_num(x, sizeof x, v->makespan));
            for (int32_t s = 0; s < P; s++)
                sb_printf(&b, "%s%.0f", s ? ", " : "", v->peak[s]);
            sb_printf(&b, "], \"identical\": %u}", v->nsame);
        } else {
            sb_printf(&b, "%u,", i + 1);
            sb_csv_field(&b, v->desc);
            sb_printf(&b, ",%s,%s,true,%u", src, sim_fmt_num(x, sizeof x, v->makespan), v->nsame);
            for (int32_t s = 0; s < P; s++)
                sb_printf(&b, ",%.0f", v->peak[s]);
            sb_putc(&b, '\n');
        }
    }
    if (json) {
        sb_printf(&b, "%s], \"searched\": %u, \"skipped\": [", t->nv ? "\n" : "", t->tried);
        for (uint32_t i = 0; i < t->nskipped; i++) {
            sb_puts(&b, i ? ",\n  " : "\n  ");
            sim_json_string(&b, t->skipped[i]);
        }
        sb_printf(&b, "%s], \"fit\": %u, \"pruned\": %u}\n", t->nskipped ? "\n" : "", t->fit,
                  t->pruned);
    }
    fwrite(b.s ? b.s : "", 1, b.len, f);
    sb_free(&b);
}

/* Writes the best variant's source to out. Returns 0, or 1 when it cannot be written. */
static int tune_write_best(Tuner *t, const Pipeline *written, const char *out)
{
    StrBuf pb = {0};
    if (!write_source(&pb, t, written, &t->v[0], 1, t->nv)) {
        char ms[32];
        sb_printf(&pb, "# %s - variant 1 of %u found by `pipec tune %s`: %s\n"
                       "# makespan %s; the explicit form (the file has no schedule template)\n",
                  t->base->name, t->nv, t->path, t->v[0].desc,
                  human_ms(ms, sizeof ms, t->v[0].makespan));
        print_pipeline(&pb, t->best);
    }
    int rc = write_output(out, &pb);
    sb_free(&pb);
    return rc;
}

/* Frees what the search kept. */
static void tune_free(Tuner *t)
{
    for (uint32_t i = 0; i < t->nv; i++) {
        free(t->v[i].desc);
        free(t->v[i].peak);
    }
    free(t->v);
    for (uint32_t i = 0; i < t->nskipped; i++)
        free(t->skipped[i]);
    free(t->skipped);
    free(t->busy);
    free(t->mr);
    free(t->kbest);
    pipeline_free(t->best);
    sim_scratch_free(t->scratch);
    arena_memo_free(t->arena);
    if (t->devnull)
        fclose(t->devnull);
    diag_free(&t->quiet);
    std_templates_free(t->std, t->nstd);
    free(t->rows);
}

int cmd_tune(int argc, char **argv)
{
    DriverOpts o = {0};
    const char *out = NULL;
    long budget = 2000, top = 10;
    int format = 0;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--exact"))
            return cmd_tune_exact(argc, argv);
    int rc = tune_args(argc, argv, &o, &out, &budget, &top, &format);
    if (rc >= 0) {
        driver_opts_free(&o);
        return rc;
    }
    const char *path = argv[optind];
#ifdef __GLIBC__
    /* The search clones and frees pipelines and scratch thousands of times; glibc's
     * default gives the heap's top back to the kernel after each large free and takes
     * it again on the next clone (about a tenth of the search in brk calls,
     * docs/performance.md "pipec tune"). Keep up to 64 MiB. */
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    mallopt(M_TOP_PAD, 1 << 20);
#endif
    Diag d = {0};
    DriverOpts bare = o;
    bare.no_passes = true;
    Pipeline *base = driver_compile(&d, &bare, path);
    Pipeline *written = base ? driver_compile(&d, &o, path) : NULL;
    if (!base || !written) {
        pipeline_free(base);
        pipeline_free(written);
        driver_opts_free(&o);
        diag_free(&d);
        return 1;
    }
    LoadOpts lo = {.include_dirs = o.include_dirs, .ninclude = o.ninclude};
    Tuner t = {.base = base, .path = path, .lo = &lo, .budget = (uint32_t)budget,
               .best_ms = INFINITY, .progress = isatty(2)};
    t.busy = xmalloc((size_t)base->P * sizeof *t.busy);
    t.arena = arena_memo_new();
    t.mr = xmalloc((size_t)base->P * sizeof *t.mr);
    t.top = top <= 65536 ? (uint32_t)top : 0; /* 0: no pruning */
    t.kbest = xmalloc((size_t)(t.top ? t.top : 1) * sizeof *t.kbest);
    t.devnull = fopen("/dev/null", "w");
    t.quiet.out = t.devnull ? t.devnull : stderr;
    t.quiet.max_errors = 1;

    t.unreadable = !resolve_rows(&t);
    tune_search(&t, written);
    rc = 1; /* a template that could not be read: no table, it would be incomplete */
    if (!t.unreadable) {
        qsort(t.v, t.nv, sizeof *t.v, cmp_variant);
        t.nv = dedupe(t.v, t.nv, base->P);
        /* `-o -` makes standard output the variant's source: the table goes to stderr. */
        FILE *f = out && !strcmp(out, "-") ? stderr : stdout;
        if (format)
            tune_machine(f, &t, format == 1);
        else
            tune_table(f, &t, top);
        rc = t.nv ? 0 : 1;
        if (!t.nv)
            fprintf(stderr, "pipec tune: no variant of %s passes check\n", path);
        if (t.best && out && t.nv)
            rc = tune_write_best(&t, written, out) ? 1 : rc;
    }
    tune_free(&t);
    pipeline_free(written);
    pipeline_free(base);
    driver_opts_free(&o);
    diag_free(&d);
    return rc;
}
