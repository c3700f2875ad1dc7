/* testutil.h - IR built by hand, shared by the unit tests and the benchmarks.
 *
 * Every function is static inline: each tests/unit/test_*.c is its own binary (see the
 * Makefile), so a header is the whole library. Two parts:
 *   - IR builders (no cmocka): ops pushed one by one or parsed from "F0 SO1 B3.1",
 *     cost fields, and the textbook schedules generated in C (1F1B, GPipe, Megatron's
 *     interleaved 1F1B) rather than taken from the stdlib;
 *   - cmocka helpers (left out where TESTUTIL_NO_CMOCKA is defined, as the benchmarks
 *     do): diagnostics captured in memory, op lookup, op lists compared as text.
 * Ops are written as in the language: kind letter(s), micro-batch, ".chunk" when not 0. */
#ifndef PIPEC_TESTUTIL_H
#define PIPEC_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "ir.h"
#include "util.h"

/* ---- IR builders -------------------------------------------------------------------- */

/* Appends op k of micro-batch mb, chunk `chunk` to stage s and marks the stage declared. */
static inline void push(Pipeline *p, int s, OpKind k, uint32_t mb, uint32_t chunk)
{
    Op op = {mb, (uint8_t)k, (uint8_t)chunk, 0, LOC_NONE};
    stage_push(&p->stages[s], op);
    p->stages[s].declared = true;
}

/* Parses "F0 F1 B0 SO2 B3.1" (kinds F B W R SO SI) onto the end of stage s; the stage
 * is marked declared even when text is empty. The text must be well formed. */
static inline void ops(Pipeline *p, int s, const char *text)
{
    p->stages[s].declared = true;
    const char *c = text;
    while (*c) {
        while (*c == ' ')
            c++;
        if (!*c)
            break;
        OpKind k;
        if (strncmp(c, "SO", 2) == 0)
            k = OP_SO, c += 2;
        else if (strncmp(c, "SI", 2) == 0)
            k = OP_SI, c += 2;
        else {
            const char *kinds = "FBWR";
            k = (OpKind)(strchr(kinds, *c) - kinds);
            c++;
        }
        char *e;
        unsigned long mb = strtoul(c, &e, 10), ch = 0;
        c = e;
        if (*c == '.') {
            ch = strtoul(c + 1, &e, 10);
            c = e;
        }
        push(p, s, k, (uint32_t)mb, (uint32_t)ch);
    }
}

/* Sets cost field f of block b to v (the field's unit: ms, bytes, bytes/s) and marks it set. */
static inline void set_cost(CostBlock *b, CostField f, double v)
{
    b->v[f] = v;
    b->set |= 1u << f;
}

/* An empty pipeline named `t` with P stages, M micro-batches, V chunks per rank. */
static inline Pipeline *mk(int P, int M, int V)
{
    Pipeline *p = pipeline_new();
    p->name = xstrdup("t");
    pipeline_set_shape(p, P, M, V);
    return p;
}

/* A 1-stage pipeline (M micro-batches, V chunks) holding the ops of `list`. */
static inline Pipeline *one(int M, int V, const char *list)
{
    Pipeline *p = mk(1, M, V);
    ops(p, 0, list);
    return p;
}

/* 1F1B (DAPPLE; the stdlib `onef1b` template written out in C) onto p's P stages and
 * M micro-batches: min(P-s-1, M) warm-up forwards, then F/B pairs, then the last Bs. */
static inline void gen_1f1b(Pipeline *p)
{
    for (int s = 0; s < p->P; s++) {
        int warm = p->P - s - 1 < p->M ? p->P - s - 1 : p->M;
        for (int i = 0; i < warm; i++)
            push(p, s, OP_F, (uint32_t)i, 0);
        for (int i = 0; i < p->M - warm; i++) {
            push(p, s, OP_F, (uint32_t)(i + warm), 0);
            push(p, s, OP_B, (uint32_t)i, 0);
        }
        for (int i = p->M - warm; i < p->M; i++)
            push(p, s, OP_B, (uint32_t)i, 0);
    }
}

/* GPipe: every stage runs all M forwards, then all M backwards. */
static inline void gen_gpipe(Pipeline *p)
{
    for (int s = 0; s < p->P; s++) {
        for (int i = 0; i < p->M; i++)
            push(p, s, OP_F, (uint32_t)i, 0);
        for (int i = 0; i < p->M; i++)
            push(p, s, OP_B, (uint32_t)i, 0);
    }
}

/* Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, §2.2): M*V virtual
 * micro-batches per rank; the k-th forward is micro-batch (k / PV) * P + k % P of chunk
 * (k / P) % V, the k-th backward the same with the chunk reversed; warm-up
 * min(2(P-s-1) + (V-1)P, MV) forwards. Needs M % P == 0. (With V = 1 this rule warms up
 * 2(P-s-1) forwards, not 1F1B's P-s-1: use gen_1f1b for plain 1F1B.) */
static inline void gen_interleaved(Pipeline *p)
{
    int P = p->P, M = p->M, V = p->V, total = M * V;
    for (int s = 0; s < P; s++) {
        int warm = 2 * (P - s - 1) + (V - 1) * P;
        if (warm > total)
            warm = total;
#define TU_MB(k) (uint32_t)(((k) / (P * V)) * P + (k) % P)
#define TU_CH(k) (uint32_t)(((k) % (P * V)) / P)
        for (int k = 0; k < warm; k++)
            push(p, s, OP_F, TU_MB(k), TU_CH(k));
        for (int i = 0; i < total - warm; i++) {
            push(p, s, OP_F, TU_MB(warm + i), TU_CH(warm + i));
            push(p, s, OP_B, TU_MB(i), (uint32_t)(V - 1) - TU_CH(i));
        }
        for (int i = total - warm; i < total; i++)
            push(p, s, OP_B, TU_MB(i), (uint32_t)(V - 1) - TU_CH(i));
#undef TU_MB
#undef TU_CH
    }
}

/* Removes op i of stage s. */
static inline void del(Pipeline *p, int s, uint32_t i)
{
    StageOps *st = &p->stages[s];
    memmove(&st->ops[i], &st->ops[i + 1], (st->n - i - 1) * sizeof *st->ops);
    st->n--;
}

/* Adds the extra dependency fk(fm) on stage fs -> tk(tm) on stage ts (chunk 0). */
static inline void add_dep(Pipeline *p, int fs, OpKind fk, uint32_t fm, int ts, OpKind tk,
                           uint32_t tm)
{
    size_t cap = p->depcap;
    Dep dp = {{fm, (uint16_t)fs, (uint8_t)fk, 0}, {tm, (uint16_t)ts, (uint8_t)tk, 0}, LOC_NONE};
    VEC_PUSH(p->deps, p->ndeps, cap, dp);
    p->depcap = (uint32_t)cap;
}

/* The ops of stage s as "F0 F1 B0 F0.1" (caller frees; "" for an empty stage). */
static inline char *ops_text(const Pipeline *p, int s)
{
    StrBuf b = {0};
    sb_puts(&b, "");
    for (uint32_t i = 0; i < p->stages[s].n; i++) {
        char name[32];
        const Op *o = &p->stages[s].ops[i];
        sb_printf(&b, "%s%s", i ? " " : "",
                  op_name(name, sizeof name, (OpKind)o->kind, o->mb, o->chunk));
    }
    return b.s;
}

/* True when the long sweeps run whole: PIPEC_TEST_FULL=1, as `make test-full` sets it
 * (tests/lib.sh test_full; unset, empty or 0: `make test`'s sample). */
static inline bool test_full(void)
{
    const char *v = getenv("PIPEC_TEST_FULL");
    return v && strcmp(v, "1") == 0;
}

/* True in a build with the address sanitizer (build/tests/; build/tests/plain/ has none). */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif

/* The examples whose compile (their Obscura passes) takes 2 to 6 CPU s each under the
 * sanitizers against about 0.2 s without (docs/performance.md "The test suite"): in
 * `make test` the sanitizer build checks the first of them only and the plain build
 * (build/tests/plain/) checks the others; `make test-full` checks all of them under the
 * sanitizers. */
static const char *const heavy_examples[] = {
    "obscura_llama2_28b_gb16.pipe", /* kept under the sanitizers: the cheapest, 2.3 s */
    "obscura_llama2_23b_gb16.pipe", "obscura_llama2_23b_gb32.pipe",
    "obscura_llama2_23b_gb64.pipe", "obscura_llama2_28b_gb32.pipe",
    "obscura_llama2_28b_gb64.pipe",
};

/* True when the plain build runs as `make test`'s complement of the sanitizer build:
 * only the examples the sanitizer build leaves out (example_checked). */
static inline bool plain_complement(void)
{
    return !TEST_SANITIZED && !test_full();
}

/* Whether a test that loops over examples/ checks the example NAME ("x.pipe") in this
 * build: every example in `make test-full` (PIPEC_TEST_FULL=1); in `make test` the
 * sanitizer build leaves out heavy_examples[1..] and the plain build checks only those. */
static inline bool example_checked(const char *name)
{
    if (test_full())
        return true;
    bool left_out = false;
    for (size_t i = 1; i < sizeof heavy_examples / sizeof *heavy_examples; i++)
        if (strcmp(name, heavy_examples[i]) == 0)
            left_out = true;
    return TEST_SANITIZED ? !left_out : left_out;
}

#ifndef TESTUTIL_NO_CMOCKA
/* ---- cmocka helpers (include <cmocka.h> first) --------------------------------------- */

/* A Diag whose output goes to memory. */
typedef struct Cap {
    Diag d;
    char *out;
    size_t outlen;
} Cap;

static inline void cap_open(Cap *c)
{
    memset(c, 0, sizeof *c);
    c->d.out = open_memstream(&c->out, &c->outlen);
    assert_non_null(c->d.out);
}

/* What was reported so far ("" when nothing). */
static inline const char *cap_text(Cap *c)
{
    fflush(c->d.out);
    return c->out ? c->out : "";
}

static inline void cap_close(Cap *c)
{
    fclose(c->d.out);
    free(c->out);
    diag_free(&c->d);
}

/* The index of the first op of kind k and micro-batch mb in stage s; fails the test
 * when there is none. */
static inline uint32_t find(const Pipeline *p, int s, OpKind k, uint32_t mb)
{
    for (uint32_t i = 0; i < p->stages[s].n; i++)
        if (p->stages[s].ops[i].kind == k && p->stages[s].ops[i].mb == mb)
            return i;
    fail_msg("op not found");
    return 0;
}

/* Stage s holds exactly the ops `want` (ops_text's form). */
static inline void assert_ops(const Pipeline *p, int s, const char *want)
{
    char *got = ops_text(p, s);
    assert_string_equal(got, want);
    free(got);
}
#endif

#endif
