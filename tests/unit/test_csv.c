/* test_csv.c - PyTorch pipelining CSV import and export (csv.h): PyTorch's own test
 * artifacts import with the shape and placement read off the files by hand and pass
 * the structural and dependency checks; export gives back every rank's action order;
 * bad CSVs give their exact diagnostics.
 *
 * The expected action sequences come from a normaliser written here, independent of
 * csv.c: split the row at commas and drop empty cells (bubbles); communication and
 * sharding actions and (a;b)OVERLAP_F_B composites are kept, as import keeps them. Runs
 * from the repository root (tests/run.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "check.h"
#include "csv.h"
#include "diag.h"
#include "ir.h"
#include "util.h"
#include "testutil.h"

#define ART "tests/csv/"

/* Registers text as file `path` and imports it. */
static Pipeline *import_text(Cap *c, const char *path, const char *text)
{
    size_t n = strlen(text);
    char *t = xmalloc(n + 1);
    memcpy(t, text, n + 1);
    uint32_t f = diag_add_file(&c->d, path, t, (uint32_t)n);
    return csv_import(&c->d, f, "t");
}

static Pipeline *import_path(Cap *c, const char *path)
{
    size_t n;
    char *t = read_file(path, &n);
    assert_non_null(t);
    uint32_t f = diag_add_file(&c->d, path, t, (uint32_t)n);
    return csv_import(&c->d, f, "t");
}

/* The normaliser: appends row's actions, comma-separated, one line per row. */
static void normalise(StrBuf *out, const char *text)
{
    const char *s = text;
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n && s[n - 1] == '\r')
            n--;
        bool first = true;
        size_t i = 0;
        while (i <= n) {
            size_t j = i;
            while (j < n && s[j] != ',')
                j++;
            char cell[128];
            size_t cn = j - i < sizeof cell - 1 ? j - i : sizeof cell - 1;
            memcpy(cell, s + i, cn);
            cell[cn] = 0;
            if (cn) {
                if (!first)
                    sb_putc(out, ',');
                sb_puts(out, cell);
                first = false;
            }
            i = j + 1;
        }
        sb_putc(out, '\n');
        s = e ? e + 1 : s + strlen(s);
    }
}

static char *normalise_file(const char *path)
{
    size_t n;
    char *t = read_file(path, &n);
    assert_non_null(t);
    StrBuf b = {0};
    normalise(&b, t);
    free(t);
    return b.s;
}

static void assert_op(const Pipeline *p, int s, uint32_t i, OpKind k, uint32_t mb,
                      uint32_t chunk)
{
    assert_true(i < p->stages[s].n);
    const Op *o = &p->stages[s].ops[i];
    assert_int_equal(o->kind, k);
    assert_int_equal(o->mb, mb);
    assert_int_equal(o->chunk, chunk);
}

static uint32_t count_kind(const Pipeline *p, int s, OpKind k)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->stages[s].n; i++)
        n += p->stages[s].ops[i].kind == k;
    return n;
}

/* zb1p_2rank_2stagep_compute.csv: 2 rows, stages 0..3, rank 0 holds 0 and 2 (looped),
 * micro-batches 0..7, every backward split (B + W in the older spelling), so each rank
 * has 2 stages x 8 micro-batches x {F, B, W} = 48 ops; rank 0's row has one empty cell
 * (49 cells), rank 1's a leading one. */
static void test_import_zb1p(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = import_path(&c, ART "zb1p_2rank_2stagep_compute.csv");
    assert_non_null(p);
    assert_int_equal(p->P, 2);
    assert_int_equal(p->V, 2);
    assert_int_equal(p->M, 8);
    assert_int_equal(p->placement, PLACE_INTERLEAVED);
    for (int s = 0; s < 2; s++) {
        assert_int_equal(p->stages[s].n, 48);
        assert_int_equal(count_kind(p, s, OP_F), 16);
        assert_int_equal(count_kind(p, s, OP_B), 16);
        assert_int_equal(count_kind(p, s, OP_W), 16);
    }
    /* Row 0 starts 0F0,0F1,2F0,,2F1,2B0,2W0: stage 2 is chunk 1 of rank 0. */
    assert_op(p, 0, 0, OP_F, 0, 0);
    assert_op(p, 0, 1, OP_F, 1, 0);
    assert_op(p, 0, 2, OP_F, 0, 1);
    assert_op(p, 0, 3, OP_F, 1, 1);
    assert_op(p, 0, 4, OP_B, 0, 1);
    assert_op(p, 0, 5, OP_W, 0, 1);
    /* Row 1 starts ,1F0,1F1,3F0,3B0. */
    assert_op(p, 1, 0, OP_F, 0, 0);
    assert_op(p, 1, 2, OP_F, 0, 1);
    assert_op(p, 1, 3, OP_B, 0, 1);
    /* Ops point at their cells: 2F1 is the fifth cell of line 1, at byte 13, column 14. */
    uint32_t line, col;
    diag_linecol(&c.d, p->stages[0].ops[3].loc, &line, &col);
    assert_int_equal(line, 1);
    assert_int_equal(col, 14);
    assert_int_equal(p->costs.v[COST_F], 1.0);
    assert_int_equal(p->costs.v[COST_B], 2.0);
    assert_int_equal(p->costs.v[COST_W], 1.0);
    assert_int_equal(check_pipeline(&c.d, p, CHECK_STRUCTURE | CHECK_DEPS), 0);
    assert_int_equal(c.d.nerr, 0);
    pipeline_free(p);
    cap_close(&c);
}

/* dualpipev_4rank_10mb.csv: 4 rows, stages 0..7, rank 0 holds 0 and 7 (V-shape),
 * micro-batches 0..9. Row 0: cells 1-17 are 0F0..0F6, 7F0,7I0,7W0, 7F1,7I1,7W1,
 * 7F2,7I2,7W2, 7F3, then (0F7;7B3)OVERLAP_F_B becomes ops 17 and 18. */
static void test_import_dualpipev(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = import_path(&c, ART "dualpipev_4rank_10mb.csv");
    assert_non_null(p);
    assert_int_equal(p->P, 4);
    assert_int_equal(p->V, 2);
    assert_int_equal(p->M, 10);
    assert_int_equal(p->placement, PLACE_VSHAPE);
    assert_op(p, 0, 7, OP_F, 0, 1);
    assert_op(p, 0, 8, OP_B, 0, 1);
    assert_op(p, 0, 9, OP_W, 0, 1);
    assert_op(p, 0, 16, OP_F, 3, 1);
    assert_op(p, 0, 17, OP_F, 7, 0);
    assert_op(p, 0, 18, OP_B, 3, 1);
    assert_op(p, 0, 19, OP_F, 4, 1);
    assert_op(p, 0, 20, OP_B, 0, 0);
    /* Rank 3 holds stages 3 and 4: 3F0 is chunk 0, 4F0 chunk 1. */
    assert_op(p, 3, 0, OP_F, 0, 0);
    assert_op(p, 3, 1, OP_F, 0, 1);
    /* Row 0 splits the backwards of 7/0..2 and 0/6..9: 7 W ops; every rank has 20 F
     * and 20 B. */
    assert_int_equal(count_kind(p, 0, OP_W), 7);
    for (int s = 0; s < 4; s++) {
        assert_int_equal(count_kind(p, s, OP_F), 20);
        assert_int_equal(count_kind(p, s, OP_B), 20);
    }
    assert_int_equal(check_pipeline(&c.d, p, CHECK_STRUCTURE | CHECK_DEPS), 0);
    pipeline_free(p);
    cap_close(&c);
}

/* The comms variant: SEND/RECV kept as actions; 2BW0 is a full backward (no W), 3B0 ...
 * 3W0 a split one. Rank 0 has only full backwards: 16 F + 16 B; rank 1 16 F + 16 B +
 * 16 W. Looped over 2 ranks every neighbour is on the other rank: stages 0-2 send F and
 * 1-3 receive it, 1-3 send B and 0-2 receive it, 8 micro-batches each: 96 actions, 48
 * a rank (rank 0 holds stages 0 and 2: 16 SEND_F, 8 RECV_F, 8 SEND_B, 16 RECV_B). */
static void test_import_comms(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = import_path(&c, ART "zb1p_2rank_2stagep_comms.csv");
    assert_non_null(p);
    assert_int_equal(p->P, 2);
    assert_int_equal(p->V, 2);
    assert_int_equal(p->M, 8);
    assert_int_equal(p->stages[0].n, 32);
    assert_int_equal(p->stages[1].n, 48);
    assert_op(p, 0, 4, OP_B, 0, 1); /* 2BW0 */
    assert_int_equal(p->nactions, 96);
    uint32_t per_rank[2] = {0, 0}, kinds[ACTION_N] = {0};
    for (uint32_t i = 0; i < p->nactions; i++) {
        per_rank[p->actions[i].rank]++;
        if (p->actions[i].rank == 0)
            kinds[p->actions[i].kind]++;
    }
    assert_int_equal(per_rank[0], 48);
    assert_int_equal(kinds[ACTION_SEND_F], 16);
    assert_int_equal(kinds[ACTION_RECV_F], 8);
    assert_int_equal(kinds[ACTION_SEND_B], 8);
    assert_int_equal(kinds[ACTION_RECV_B], 16);
    /* 0F0,0SEND_F0,2RECV_F0: SEND_F0 and then RECV_F0.1 sit before op 1 of rank 0. */
    assert_int_equal(p->actions[0].kind, ACTION_SEND_F);
    assert_int_equal(p->actions[0].pos, 1);
    assert_int_equal(p->actions[1].kind, ACTION_RECV_F);
    assert_int_equal(p->actions[1].chunk, 1);
    assert_int_equal(p->actions[1].pos, 1);
    assert_int_equal(check_pipeline(&c.d, p, CHECK_STRUCTURE | CHECK_DEPS), 0);
    pipeline_free(p);
    cap_close(&c);
}

/* export-csv --comms of PyTorch's ZB1P compute artifact is PyTorch's own lowering of
 * it, its comms artifact (test_schedule.py test_csv), action for action. */
static void test_export_comms(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = import_path(&c, ART "zb1p_2rank_2stagep_compute.csv");
    assert_non_null(p);
    StrBuf out = {0};
    assert_int_equal(csv_export_comms(&c.d, p, CSV_LEGACY, &out), 0);
    size_t n;
    char *want = read_file(ART "zb1p_2rank_2stagep_comms.csv", &n);
    assert_non_null(want);
    assert_string_equal(out.s, want);
    free(want);
    sb_free(&out);
    pipeline_free(p);
    cap_close(&c);
}

/* A rank whose F waits for an input no rank sends cannot be lowered: rank 0 runs the
 * backward of stage 0 first, which waits for stage 1's backward, which waits for its
 * F, which waits for stage 0's F that rank 0 lists after the backward. */
static void test_export_comms_stuck(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = import_text(&c, "stuck.csv", "0B0,0F0\n1F0,1B0\n");
    assert_non_null(p);
    StrBuf out = {0};
    assert_int_equal(csv_export_comms(&c.d, p, CSV_CURRENT, &out), 1);
    assert_null(out.s);
    assert_non_null(strstr(cap_text(&c), "stuck.csv:1:1: error[deadlock]: PyTorch's lowering "
                                         "cannot place SEND/RECV: stage 0 waits in 0B0"));
    pipeline_free(p);
    cap_close(&c);
}

/* CSV -> IR -> CSV gives every rank's compute actions in the same order. */
static void round_trip(const char *path, CsvFormat fmt)
{
    Cap c;
    cap_open(&c);
    Pipeline *p = import_path(&c, path);
    assert_non_null(p);
    StrBuf out = {0};
    assert_int_equal(csv_export(&c.d, p, fmt, &out), 0);
    char *want = normalise_file(path);
    assert_string_equal(out.s, want);
    /* And the export is a fixed point: importing and exporting it again. */
    Cap c2;
    cap_open(&c2);
    Pipeline *q = import_text(&c2, "again.csv", out.s);
    assert_non_null(q);
    StrBuf out2 = {0};
    csv_export(&c2.d, q, fmt, &out2);
    assert_string_equal(out2.s, out.s);
    free(want);
    sb_free(&out);
    sb_free(&out2);
    pipeline_free(p);
    pipeline_free(q);
    cap_close(&c);
    cap_close(&c2);
}

static void test_round_trip_artifacts(void **state)
{
    (void)state;
    /* The ZB1P artifact spells the split backward B (older PyTorch). */
    round_trip(ART "zb1p_2rank_2stagep_compute.csv", CSV_LEGACY);
    round_trip(ART "dualpipev_4rank_10mb.csv", CSV_CURRENT);
}

/* The comms artifact mixes BW (full) and B (split): legacy export writes BW/B back. */
static void test_round_trip_comms(void **state)
{
    (void)state;
    round_trip(ART "zb1p_2rank_2stagep_comms.csv", CSV_LEGACY);
}

/* Current spelling of the same split: B + W exports as I + W, a lone B stays B. */
static void test_export_spelling(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = import_text(&c, "s.csv", "0F0,0F1,0B0,0W0,0B1\n");
    assert_non_null(p);
    StrBuf a = {0}, b = {0};
    csv_export(&c.d, p, CSV_CURRENT, &a);
    csv_export(&c.d, p, CSV_LEGACY, &b);
    assert_string_equal(a.s, "0F0,0F1,0I0,0W0,0B1\n");
    assert_string_equal(b.s, "0F0,0F1,0B0,0W0,0BW1\n");
    sb_free(&a);
    sb_free(&b);
    pipeline_free(p);
    cap_close(&c);
}

/* Hand-built IR with R/SO/SI and a dep: they are left out with one warning per kind. */
static void test_export_drops(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = pipeline_new();
    p->name = xstrdup("d");
    pipeline_set_shape(p, 1, 2, 1);
    const OpKind ks[] = {OP_F, OP_SO, OP_F, OP_SI, OP_R, OP_B, OP_R, OP_B};
    const uint32_t mbs[] = {0, 0, 1, 0, 0, 0, 1, 1};
    for (int i = 0; i < 8; i++)
        stage_push(&p->stages[0], (Op){mbs[i], (uint8_t)ks[i], 0, 0, LOC_NONE});
    StrBuf out = {0};
    assert_int_equal(csv_export(&c.d, p, CSV_CURRENT, &out), 4);
    assert_string_equal(out.s, "0F0,0F1,0B0,0B1\n");
    assert_string_equal(cap_text(&c),
                        "pipec: warning[csv]: SO ops have no PyTorch pipelining action; SO0 and "
                        "the other SO ops are left out of the CSV\n"
                        "pipec: warning[csv]: SI ops have no PyTorch pipelining action; SI0 and "
                        "the other SI ops are left out of the CSV\n"
                        "pipec: warning[csv]: R ops have no PyTorch pipelining action; R0 and the "
                        "other R ops are left out of the CSV\n");
    sb_free(&out);
    pipeline_free(p);
    cap_close(&c);
}

/* Quoting, CRLF, blanks around cells, comm actions (paired, checked, not ops) and
 * sharding actions (skipped), a batched pair of older releases, an empty cell, no final
 * newline. */
static void test_import_forms_ok(void **state)
{
    (void)state;
    Cap c;
    cap_open(&c);
    Pipeline *p = import_text(&c, "f.csv",
                              " 0F0 ,\"0F1\",0UNSHARD,0SEND_F0_1RECV_B0,0RESHARD,0REDUCE_GRAD,0SEND_F0,"
                              "0RECV_B0\r\n"
                              "1RECV_F0,1F0,( 1F1 ; 1B0 )OVERLAP_F_B,,1B1,1SEND_B0");
    assert_non_null(p);
    assert_int_equal(p->P, 2);
    assert_int_equal(p->V, 1);
    assert_int_equal(p->M, 2);
    assert_int_equal(p->stages[0].n, 2);
    assert_int_equal(p->stages[1].n, 4);
    assert_op(p, 1, 1, OP_F, 1, 0);
    assert_op(p, 1, 2, OP_B, 0, 0);
    /* "0F1" is quoted: its op points inside the quotes, column 8 (" 0F0 ," is 6 bytes,
     * the quote the 7th). */
    uint32_t line, col;
    diag_linecol(&c.d, p->stages[0].ops[1].loc, &line, &col);
    assert_int_equal(line, 1);
    assert_int_equal(col, 8);
    /* "1RECV_F0,1F0," is 13 bytes, "( 1F1 ; " 8 more: 1B0 is at column 22 of line 2. */
    diag_linecol(&c.d, p->stages[1].ops[2].loc, &line, &col);
    assert_int_equal(line, 2);
    assert_int_equal(col, 22);
    pipeline_free(p);
    cap_close(&c);
}

/* Bad CSVs: one case per diagnostic, the exact text (file:line:col, code, message,
 * quoted line, caret). */
static void expect_error(const char *text, const char *want)
{
    Cap c;
    cap_open(&c);
    Pipeline *p = import_text(&c, "bad.csv", text);
    assert_null(p);
    assert_true(c.d.nerr > 0);
    assert_string_equal(cap_text(&c), want);
    cap_close(&c);
}

static void test_bad(void **state)
{
    (void)state;
    expect_error("0F0,0X1\n",
                 "bad.csv:1:6: error[syntax]: bad action '0X1': unknown action type; expected "
                 "F, I, B, W, BW, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD or "
                 "REDUCE_GRAD\n"
                 "    0F0,0X1\n"
                 "         ^\n");
    expect_error("F0\n",
                 "bad.csv:1:1: error[syntax]: bad action 'F0': an action starts with its "
                 "stage index, as in 2F0\n"
                 "    F0\n"
                 "    ^\n");
    expect_error("0F0,0F\n",
                 "bad.csv:1:7: error[syntax]: bad action '0F': a compute action needs a "
                 "micro-batch index, as in 2F0\n"
                 "    0F0,0F\n"
                 "          ^\n");
    expect_error("0F0x\n",
                 "bad.csv:1:4: error[syntax]: bad action '0F0x': unexpected 'x' after the "
                 "micro-batch index\n"
                 "    0F0x\n"
                 "       ^\n");
    expect_error("(0F0;0B0)OVERLAP\n",
                 "bad.csv:1:10: error[syntax]: bad action '(0F0;0B0)OVERLAP': unknown "
                 "composite action type 'OVERLAP'; expected OVERLAP_F_B\n"
                 "    (0F0;0B0)OVERLAP\n"
                 "             ^\n");
    expect_error("(0F0;0SEND_F0)OVERLAP_F_B\n",
                 "bad.csv:1:6: error[syntax]: bad action '(0F0;0SEND_F0)OVERLAP_F_B': only "
                 "compute actions (F, I, B, W) can overlap\n"
                 "    (0F0;0SEND_F0)OVERLAP_F_B\n"
                 "         ^\n");
    expect_error("0F0,\"0B0\n",
                 "bad.csv:1:5: error[syntax]: unterminated quoted cell: a '\"' opens it and "
                 "the line ends\n"
                 "    0F0,\"0B0\n"
                 "        ^\n");
    expect_error("0F99999999999\n",
                 "bad.csv:1:3: error[limit]: micro-batch index in '0F99999999999' is beyond "
                 "the limit of 2147483647 micro-batches\n"
                 "    0F99999999999\n"
                 "      ^\n");
    expect_error("",
                 "bad.csv:1:1: error[missing]: empty schedule CSV: expected one row per "
                 "rank\n"
                 "    \n"
                 "    ^\n");
    expect_error("0SEND_F0\n",
                 "bad.csv:1:1: error[missing]: no compute action (F, I, B, W) in the CSV\n"
                 "    0SEND_F0\n"
                 "    ^\n");
    /* A stage on two ranks, with a note at its first place. */
    expect_error("0F0\n0B0\n",
                 "bad.csv:2:1: error[placement]: stage 0 is on rank 0 and on rank 1 (0B0); a "
                 "stage belongs to one rank\n"
                 "    0B0\n"
                 "    ^\n"
                 "bad.csv:1:1: note: stage 0 is first on rank 0 here\n"
                 "    0F0\n"
                 "    ^\n");
    /* Stage 2 on rank 0 makes the placement looped; stages 4 and 5 then break it. */
    expect_error("0F0,2F0,5F0\n1F0,3F0,4F0\n",
                 "bad.csv:2:9: error[placement]: stage 4 is on rank 1; the looped "
                 "(interleaved) placement of 6 stages over 2 ranks puts it on rank 0\n"
                 "    1F0,3F0,4F0\n"
                 "            ^\n"
                 "bad.csv:1:9: error[placement]: stage 5 is on rank 0; the looped "
                 "(interleaved) placement of 6 stages over 2 ranks puts it on rank 1\n"
                 "    0F0,2F0,5F0\n"
                 "            ^\n");
    /* Stage 3 on rank 2 (the last) makes it a V-shape; chunk 2 runs forwards again, so
     * stage 7 belongs on rank 1 and stage 8 on rank 2. */
    expect_error("0F0,5F0,6F0\n1F0,4F0,8F0\n2F0,3F0,7F0\n",
                 "bad.csv:3:9: error[placement]: stage 7 is on rank 2; the V-shape "
                 "placement of 9 stages over 3 ranks puts it on rank 1\n"
                 "    2F0,3F0,7F0\n"
                 "            ^\n"
                 "bad.csv:2:9: error[placement]: stage 8 is on rank 1; the V-shape "
                 "placement of 9 stages over 3 ranks puts it on rank 2\n"
                 "    1F0,4F0,8F0\n"
                 "            ^\n");
    /* A blank row is a rank with no actions: 3 stages over 4 rows. */
    expect_error("0F0\n1F0\n2F0\n\n",
                 "bad.csv:3:1: error[placement]: 3 stages (0..2) cannot be spread evenly "
                 "over 4 ranks (rows); every rank holds the same number of stages\n"
                 "    2F0\n"
                 "    ^\n");
    expect_error("0F0,2F0\n",
                 "bad.csv:1:5: error[missing]: stage 2 has actions but stage 1 has none; "
                 "stages are numbered 0, 1, ... without gaps\n"
                 "    0F0,2F0\n"
                 "        ^\n");
    expect_error("0F0,0I0,0B0\n",
                 "bad.csv:1:5: error[missing]: backward-input action 0I0 has no "
                 "weight-gradient action 0W0\n"
                 "    0F0,0I0,0B0\n"
                 "        ^\n");
    expect_error("0F0,0W0\n",
                 "bad.csv:1:5: error[missing]: weight-gradient action 0W0 has no "
                 "backward-input action 0I0\n"
                 "    0F0,0W0\n"
                 "        ^\n");
    expect_error("99999999999F0\n",
                 "bad.csv:1:1: error[limit]: stage index in '99999999999F0' is beyond the "
                 "limit of 16711425 stages\n"
                 "    99999999999F0\n"
                 "    ^\n");
    expect_error("\"0F0\"x\n",
                 "bad.csv:1:6: error[syntax]: unexpected 'x' after a quoted cell; expected ',' "
                 "or the end of the line\n"
                 "    \"0F0\"x\n"
                 "         ^\n");
    /* A doubled quote inside a quoted cell is one '"', which no action contains. */
    expect_error("\"0\"\"F0\"\n",
                 "bad.csv:1:3: error[syntax]: bad action '0\"F0': unknown action type; expected "
                 "F, I, B, W, BW, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD or "
                 "REDUCE_GRAD\n"
                 "    \"0\"\"F0\"\n"
                 "      ^\n");
    /* A batched send/receive needs a receive of F or B with its micro-batch. */
    expect_error("0F0,0SEND_F0_1RECV_X0\n",
                 "bad.csv:1:13: error[syntax]: bad action '0SEND_F0_1RECV_X0': unexpected '_' "
                 "after the micro-batch index\n"
                 "    0F0,0SEND_F0_1RECV_X0\n"
                 "                ^\n");
    expect_error("0F0,0SEND_F0_1RECV_B\n",
                 "bad.csv:1:13: error[syntax]: bad action '0SEND_F0_1RECV_B': unexpected '_' "
                 "after the micro-batch index\n"
                 "    0F0,0SEND_F0_1RECV_B\n"
                 "                ^\n");
    expect_error("0F0,0BW0,0W0\n",
                 "bad.csv:1:10: error[value]: weight-gradient action 0W0 after the full "
                 "backward 0BW0, which already computed the weight gradients\n"
                 "    0F0,0BW0,0W0\n"
                 "             ^\n"
                 "bad.csv:1:5: note: the full backward is here\n"
                 "    0F0,0BW0,0W0\n"
                 "        ^\n");
}

/* A one-rank CSV of micro-batch 0 imports without a diagnostic into rank 0's ops of
 * the kinds want[0..n), in order. */
static void expect_rank0(const char *text, const OpKind *want, uint32_t n)
{
    Cap c;
    cap_open(&c);
    Pipeline *p = import_text(&c, "ok.csv", text);
    assert_non_null(p);
    assert_int_equal(c.d.nerr + c.d.nwarn, 0);
    assert_int_equal(p->stages[0].n, n);
    for (uint32_t i = 0; i < n; i++)
        assert_op(p, 0, i, want[i], 0, 0);
    pipeline_free(p);
    cap_close(&c);
}

/* The edges of a cell: a batched send/receive whose second half is not one (all digits,
 * a trailing character), a communication action with a stray character, messages that
 * quote a long cell (60 bytes) or composite type (30 bytes) cut short, and a file whose
 * last line has no newline (a quoted cell at the very end, unterminated or followed by
 * a stray character). */
static void test_bad_edges(void **state)
{
    (void)state;
    expect_error("0F0,0SEND_F0_2\n",
                 "bad.csv:1:13: error[syntax]: bad action '0SEND_F0_2': unexpected '_' after "
                 "the micro-batch index\n"
                 "    0F0,0SEND_F0_2\n"
                 "                ^\n");
    expect_error("0F0,0SEND_F0_2RECV_F0x\n",
                 "bad.csv:1:13: error[syntax]: bad action '0SEND_F0_2RECV_F0x': unexpected '_' "
                 "after the micro-batch index\n"
                 "    0F0,0SEND_F0_2RECV_F0x\n"
                 "                ^\n");
    expect_error("0F0,0SEND_F0x\n",
                 "bad.csv:1:13: error[syntax]: bad action '0SEND_F0x': unexpected 'x' after "
                 "the micro-batch index\n"
                 "    0F0,0SEND_F0x\n"
                 "                ^\n");
    char cell[80] = "0", want[600];
    memset(cell + 1, 'X', 70);
    cell[71] = 0;
    snprintf(want, sizeof want,
             "bad.csv:1:6: error[syntax]: bad action '%.60s': unknown action type; expected "
             "F, I, B, W, BW, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD or "
             "REDUCE_GRAD\n"
             "    0F0,%s\n"
             "         ^\n",
             cell, cell);
    char text[100];
    snprintf(text, sizeof text, "0F0,%s\n", cell);
    expect_error(text, want);
    expect_error("(0F0;0B0)OVERLAP_WITH_A_VERY_LONG_NAME_INDEED_YES_REALLY_LONG\n",
                 "bad.csv:1:10: error[syntax]: bad action "
                 "'(0F0;0B0)OVERLAP_WITH_A_VERY_LONG_NAME_INDEED_YES_REALLY_LON': unknown "
                 "composite action type 'OVERLAP_WITH_A_VERY_LONG_NAME_'; expected "
                 "OVERLAP_F_B\n"
                 "    (0F0;0B0)OVERLAP_WITH_A_VERY_LONG_NAME_INDEED_YES_REALLY_LONG\n"
                 "             ^\n");
    expect_error("0F0,\"0B0",
                 "bad.csv:1:5: error[syntax]: unterminated quoted cell: a '\"' opens it and "
                 "the line ends\n"
                 "    0F0,\"0B0\n"
                 "        ^\n");
    expect_error("\"0F0\"x",
                 "bad.csv:1:6: error[syntax]: unexpected 'x' after a quoted cell; expected ',' "
                 "or the end of the line\n"
                 "    \"0F0\"x\n"
                 "         ^\n");
    /* A quoted cell that ends the file, after "\r" or nothing, is read. */
    static const OpKind fb[] = {OP_F, OP_B};
    expect_rank0("0F0,\"0B0\"", fb, ARRAY_LEN(fb));
    expect_rank0("\"0F0\",\"0B0\"\r", fb, ARRAY_LEN(fb));
}

/* The importer leaves completeness to `pipec check` (docs/csv.md): a W twice is imported
 * as two W ops, after the I that both pair with. */
static void test_import_leaves_duplicates(void **state)
{
    (void)state;
    static const OpKind fbww[] = {OP_F, OP_B, OP_W, OP_W};
    expect_rank0("0F0,0I0,0W0,0W0\n", fbww, ARRAY_LEN(fbww));
}

/* Every prefix of a real artifact, and every single-byte corruption of a small one,
 * imports or fails cleanly (ASan/UBSan watch). */
static void test_no_crash(void **state)
{
    (void)state;
    size_t n;
    char *t = read_file(ART "dualpipev_4rank_10mb.csv", &n);
    assert_non_null(t);
    for (size_t k = 0; k <= n; k += 7) {
        Cap c;
        cap_open(&c);
        char *x = xstrndup(t, k);
        Pipeline *p = import_text(&c, "p.csv", x);
        free(x);
        pipeline_free(p);
        cap_close(&c);
    }
    free(t);
    const char *base = "0F0,(0F1;1B0)OVERLAP_F_B,\"0B0\"\n1F0,1F1,1B1,0B1\n";
    const char subst[] = {'\0', ',', ';', '(', ')', '"', '\n', '\r', '9', 'W', 'I', ' '};
    for (size_t i = 0; i < strlen(base); i++)
        for (size_t k = 0; k < sizeof subst; k++) {
            Cap c;
            cap_open(&c);
            char *x = xstrdup(base);
            x[i] = subst[k];
            size_t len = strlen(base);
            char *t2 = xmalloc(len + 1);
            memcpy(t2, x, len + 1);
            uint32_t f = diag_add_file(&c.d, "m.csv", t2, (uint32_t)len);
            pipeline_free(csv_import(&c.d, f, "m"));
            free(x);
            cap_close(&c);
        }
}

static void test_name_from_path(void **state)
{
    (void)state;
    char *s;
    assert_string_equal(s = csv_name_from_path("a/b/zb1p_2rank.csv"), "zb1p_2rank");
    free(s);
    assert_string_equal(s = csv_name_from_path("dual-pipe.v2.csv"), "dual_pipe_v2");
    free(s);
    assert_string_equal(s = csv_name_from_path("4rank.csv"), "_4rank");
    free(s);
    assert_string_equal(s = csv_name_from_path(".csv"), "_csv");
    free(s);
    /* Characters just outside the letters ('~' after z, '^' between Z and a) become
     * '_'; a path that names a folder gives "_". */
    assert_string_equal(s = csv_name_from_path("a~b^c.csv"), "a_b_c");
    free(s);
    assert_string_equal(s = csv_name_from_path("runs/"), "_");
    free(s);
}

/* The IR's limits: more rows (ranks) than IR_MAX_STAGES, more chunks per rank than
 * IR_MAX_CHUNKS; each a located error[limit], nothing imported. */
static void test_limits(void **state)
{
    (void)state;
    StrBuf b = {0};
    for (int s = 0; s < IR_MAX_CHUNKS + 45; s++)
        sb_printf(&b, "%s%dF0", s ? "," : "", s);
    sb_putc(&b, '\n');
    Cap c;
    cap_open(&c);
    assert_null(import_text(&c, "v.csv", b.s));
    assert_non_null(strstr(cap_text(&c), "error[limit]: 300 stages over 1 ranks make 300 chunks "
                                         "per rank; the limit is 255"));
    cap_close(&c);
    b.len = 0;
    for (int r = 0; r < IR_MAX_STAGES + 2; r++)
        sb_printf(&b, "%dF0\n", r);
    cap_open(&c);
    assert_null(import_text(&c, "r.csv", b.s));
    assert_non_null(strstr(cap_text(&c), "r.csv:65536:1: error[limit]: 65537 rows (ranks); the "
                                         "limit is 65535"));
    cap_close(&c);
    sb_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_import_zb1p),
        cmocka_unit_test(test_import_dualpipev),
        cmocka_unit_test(test_import_comms),
        cmocka_unit_test(test_round_trip_artifacts),
        cmocka_unit_test(test_round_trip_comms),
        cmocka_unit_test(test_export_comms),
        cmocka_unit_test(test_export_comms_stuck),
        cmocka_unit_test(test_export_spelling),
        cmocka_unit_test(test_export_drops),
        cmocka_unit_test(test_import_forms_ok),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_bad_edges),
        cmocka_unit_test(test_import_leaves_duplicates),
        cmocka_unit_test(test_no_crash),
        cmocka_unit_test(test_name_from_path),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
