/* test_opsem.c - the op table (compiler/ir/opsem.c op_sem[]) is the one place of every op
 * fact, and what lists kinds elsewhere agrees with it:
 *   - each kind runs as a runtime kind (plan/opkinds.h) on its own stream and with its
 *     own spelling, and the runtime kinds are OP_KINDS' first kinds;
 *   - the pairs (SO/SI, OG/LW) are mutual and chunk-wide together, each with its words;
 *   - glyphs, colours and labels are distinct and well formed (a timeline tells every
 *     kind apart); the VM_HAS_* bits are distinct, none for a chunk-wide kind;
 *   - the lexer reads the table (every spelling lexes as its kind; grammar/pipe.l lists
 *     none) and the editor grammar's op class is generated from it;
 *   - a timeline reads the table: `sim --html`'s script arrays hold every kind's
 *     spelling, stream, colour and label in table order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "opsem.h"
#include "sim_html.h"
#include "testutil.h"
#include "util.h"

static void test_runtime_kinds(void **state)
{
    (void)state;
    assert_true((int)PLAN_NKINDS <= (int)OP_NKINDS);
    for (int k = 0; k < OP_NKINDS; k++) {
        int rt = op_sem[k].runs_as;
        assert_true(rt < PLAN_NKINDS);
        assert_int_equal(plan_kind_stream(rt), op_sem[k].stream);
        assert_string_equal(plan_kind_name(rt), op_kind_name[rt]);
        assert_int_equal(op_sem[rt].runs_as, rt); /* a runtime kind runs as itself */
        if (k < PLAN_NKINDS)
            assert_int_equal(rt, k);
        assert_int_equal(op_stream((OpKind)k), op_sem[k].stream);
    }
    assert_string_equal(plan_kind_name(PLAN_NKINDS), "?");
}

static void test_pairs(void **state)
{
    (void)state;
    int npairs = 0;
    for (int k = 0; k < OP_NKINDS; k++) {
        int q = op_sem[k].pair;
        if (q == OP_NKINDS) {
            assert_null(op_sem[k].why_pair);
            continue;
        }
        npairs++;
        assert_true(q < OP_NKINDS && q != k);
        assert_int_equal(op_sem[q].pair, k);
        assert_int_equal(op_sem[q].chunkwide, op_sem[k].chunkwide);
        assert_non_null(op_sem[k].why_pair);
        /* a pair moves bytes one way and back */
        assert_int_not_equal(op_sem[k].stream, STREAM_COMPUTE);
        assert_int_not_equal(op_sem[k].stream, op_sem[q].stream);
    }
    assert_int_equal(npairs, 4); /* SO SI OG LW */
    assert_int_equal(op_sem[OP_SO].pair, OP_SI);
    assert_int_equal(op_sem[OP_OG].pair, OP_LW);
}

static void test_looks(void **state)
{
    (void)state;
    unsigned bits = 0;
    for (int k = 0; k < OP_NKINDS; k++) {
        const OpSem *s = &op_sem[k];
        assert_true(s->glyph > ' ' && s->glyph < 127);
        assert_false(s->glyph >= '0' && s->glyph <= '9'); /* never read as a number */
        assert_non_null(s->colour);
        assert_int_equal(strlen(s->colour), 7);
        assert_int_equal(s->colour[0], '#');
        assert_non_null(s->label);
        size_t n = strlen(op_kind_name[k]);
        assert_memory_equal(s->label, op_kind_name[k], n);
        assert_int_equal(s->label[n], ' ');
        for (int j = 0; j < k; j++) {
            assert_int_not_equal(s->glyph, op_sem[j].glyph);
            assert_string_not_equal(s->colour, op_sem[j].colour);
        }
        if (s->chunkwide)
            assert_int_equal(s->has, 0);
        if (s->has && s->runs_as == k) { /* one bit per kind of its own */
            assert_int_equal(bits & s->has, 0);
            bits |= s->has;
        }
        assert_int_equal(opsem_has_bit((OpKind)k), s->has);
        assert_int_equal(op_chunkwide((unsigned)k), s->chunkwide);
    }
    assert_int_equal(bits, VM_HAS_R | VM_HAS_W | VM_HAS_SO | VM_HAS_SI);
    assert_false(op_chunkwide(OP_NKINDS));
    assert_true(op_backward(OP_B) && op_backward(OP_W) && !op_backward(OP_F));
}

/* The text of a repository file (the tests run from the repository's root). */
static char *repo_file(const char *path)
{
    size_t n = 0;
    char *s = read_file(path, &n);
    assert_non_null(s);
    return s;
}

/* The kind of the one op of "stage 0 { word }", or -1 when the word is no op. */
static int lexed_kind(const char *word)
{
    char src[160];
    snprintf(src, sizeof src, "pipeline p { stages 1 microbatches 4 stage 0 { %s } }\n", word);
    Diag d = {0};
    char *msg = NULL;
    size_t len = 0;
    d.out = open_memstream(&msg, &len);
    assert_non_null(d.out);
    Pipeline *p = load_pipeline_string(&d, NULL, "t.pipe", src, strlen(src));
    int k = p && p->stages[0].n == 1 && p->stages[0].ops[0].mb == 3 ? p->stages[0].ops[0].kind : -1;
    pipeline_free(p);
    fclose(d.out);
    free(msg);
    diag_free(&d);
    return k;
}

static void test_lexer_and_editors(void **state)
{
    (void)state;
    /* the lexer reads the op table: every spelling lexes as its kind, and the scanner
     * keeps no list of spellings of its own */
    for (int k = 0; k < OP_NKINDS; k++) {
        char w[16];
        snprintf(w, sizeof w, "%s3", op_kind_name[k]);
        assert_int_equal(lexed_kind(w), k);
    }
    assert_int_equal(lexed_kind("XY3"), -1); /* the check can fail */
    char *l = repo_file("grammar/pipe.l");
    assert_null(strstr(l, "\n(F|"));
    assert_null(strstr(l, "|RO|"));
    free(l);
    /* the editor grammar leaves the spellings to the generator (tools/mksyntax.sh reads
     * OP_KINDS); t_editors.sh checks the generated grammars */
    char *e = repo_file("editors/pipe-syntax.txt");
    const char *op = strstr(e, "\nop\t");
    assert_non_null(op);
    assert_non_null(strstr(op, "\\<(@OPKINDS)"));
    free(e);
}

static void test_html_reads_table(void **state)
{
    (void)state;
    Pipeline *p = one(1, 1, "F0 B0");
    set_cost(&p->costs, COST_F, 1);
    set_cost(&p->costs, COST_B, 2);
    SimResult *r = simulate(p);
    assert_non_null(r);
    StrBuf b = {0};
    HtmlVariant v = {"p", p, r};
    html_write(&b, &v, 1);
    StrBuf want = {0};
    sb_puts(&want, "const COLORS=[");
    for (int k = 0; k < OP_NKINDS; k++)
        sb_printf(&want, "%s\"%s\"", k ? "," : "", op_sem[k].colour);
    assert_non_null(strstr(b.s, want.s));
    sb_free(&want);
    sb_puts(&want, "KINDS=[");
    for (int k = 0; k < OP_NKINDS; k++)
        sb_printf(&want, "%s\"%s\"", k ? "," : "", op_kind_name[k]);
    sb_puts(&want, "],STREAM=[");
    for (int k = 0; k < OP_NKINDS; k++)
        sb_printf(&want, "%s%d", k ? "," : "", (int)op_sem[k].stream);
    assert_non_null(strstr(b.s, want.s));
    for (int k = 0; k < OP_NKINDS; k++)
        assert_non_null(strstr(b.s, op_sem[k].label));
    sb_free(&want);
    sb_free(&b);
    sim_free(r);
    pipeline_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runtime_kinds),
        cmocka_unit_test(test_pairs),
        cmocka_unit_test(test_looks),
        cmocka_unit_test(test_lexer_and_editors),
        cmocka_unit_test(test_html_reads_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
