/* agree.c - the tools of the static-vs-real deadlock agreement test
 * (tests/t_deadlock_agree.sh).
 *
 *     agree gen SEED N DIR     writes DIR/s0.pipe .. DIR/s{N-1}.pipe: random explicit
 *                              schedules (P 2..4, M 1..4, V 1..2, F and B ops), about
 *                              half of them deadlocking
 *     agree emit FILE DIR      generates the C of FILE into DIR (new folder) whatever the
 *                              dependency check says: the structure check must pass, the
 *                              deadlock verdict is `pipec check`'s to give, and the run
 *                              of this program is what the verdict is compared with
 *
 * Every schedule keeps each rank's F of a (virtual stage, micro-batch) before its B, so
 * that a wrong schedule is a cross-rank `deadlock`, never a same-rank `order` error.
 * Three shapes, a third each: 1F1B with a random warmup per rank (deadlocks when a
 * rank warms up less than the next one needs); a random merge of a random F order and a
 * random B order; 1F1B with one random adjacent pair of one rank swapped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "costmodel.h"
#include "diag.h"
#include "emit_c.h"
#include "frontend.h"
#include "util.h"

/* xorshift64*: a reproducible stream from the seed. */
static unsigned long long rng_state;
static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (unsigned)((rng_state * 2685821657736338717ULL) >> 33) % n;
}

typedef struct GenOp {
    char kind;   /* 'F' or 'B' */
    int mb, chunk;
} GenOp;

/* 1F1B over the rank's M*V forwards in chunk-major order with `warm` forwards first. */
static int onef1b(GenOp *ops, int M, int V, int warm)
{
    int total = M * V, n = 0, f = 0, b = 0;
    if (warm > total)
        warm = total;
    /* forward i: micro-batch i % M of chunk i / M; backwards in the reverse chunk order */
    while (f < warm) {
        ops[n++] = (GenOp){'F', f % M, f / M};
        f++;
    }
    while (b < total) {
        if (f < total) {
            ops[n++] = (GenOp){'F', f % M, f / M};
            f++;
        }
        ops[n++] = (GenOp){'B', b % M, V - 1 - b / M};
        b++;
    }
    return n;
}

/* Moves every F listed after its B to just before it, so that no rank has an `order`
 * error (the warmup of a shape may leave a backward ahead of its forward). */
static void repair(GenOp *ops, int n)
{
    for (int i = 0; i < n; i++) {
        if (ops[i].kind != 'B')
            continue;
        for (int j = i + 1; j < n; j++) {
            if (ops[j].kind == 'F' && ops[j].mb == ops[i].mb && ops[j].chunk == ops[i].chunk) {
                GenOp f = ops[j];
                memmove(&ops[i + 1], &ops[i], (size_t)(j - i) * sizeof *ops);
                ops[i] = f;
                break;
            }
        }
    }
}

/* Whether op k of ops (length n) may move after op k+1: not F(m,c) past its B(m,c). */
static int swappable(const GenOp *a, const GenOp *b)
{
    return !(a->kind == 'F' && b->kind == 'B' && a->mb == b->mb && a->chunk == b->chunk);
}

static void gen_one(FILE *f, int idx)
{
    int P = 2 + (int)rnd(3), M = 1 + (int)rnd(4), V = 1 + (int)rnd(2), shape = (int)rnd(3);
    int total = M * V;
    GenOp *ops = xcalloc((size_t)(2 * total), sizeof *ops);
    fprintf(f, "pipeline s%d {\n  stages %d  microbatches %d  chunks %d\n", idx, P, M, V);
    fprintf(f, "  costs { f 0.01ms  b 0.02ms }\n");
    for (int s = 0; s < P; s++) {
        int n;
        if (shape == 0) {
            n = onef1b(ops, M, V, (int)rnd((unsigned)total + 1));
        } else if (shape == 1) {
            /* random F order and B order, merged with each F before its B */
            GenOp *fo = xcalloc((size_t)total, sizeof *fo), *bo = xcalloc((size_t)total, sizeof *bo);
            for (int i = 0; i < total; i++) {
                fo[i] = (GenOp){'F', i % M, i / M};
                bo[i] = (GenOp){'B', i % M, i / M};
            }
            for (int i = total - 1; i > 0; i--) {
                int j = (int)rnd((unsigned)i + 1);
                GenOp t = fo[i]; fo[i] = fo[j]; fo[j] = t;
                j = (int)rnd((unsigned)i + 1);
                t = bo[i]; bo[i] = bo[j]; bo[j] = t;
            }
            int *done = xcalloc((size_t)total, sizeof *done);
            int fi = 0, bi = 0;
            n = 0;
            while (bi < total) {
                int bok = done[bo[bi].chunk * M + bo[bi].mb];
                if (fi < total && (!bok || rnd(2))) {
                    done[fo[fi].chunk * M + fo[fi].mb] = 1;
                    ops[n++] = fo[fi++];
                } else if (bok) {
                    ops[n++] = bo[bi++];
                } else {
                    /* bi's F is not placed yet and every F is: cannot happen */
                    die("generator");
                }
            }
            free(fo);
            free(bo);
            free(done);
        } else {
            int warm = P - s - 1 + (V - 1) * P;
            n = onef1b(ops, M, V, warm);
            if (s == (int)rnd((unsigned)P) && n > 1) {
                int k = (int)rnd((unsigned)n - 1);
                if (swappable(&ops[k], &ops[k + 1])) {
                    GenOp t = ops[k]; ops[k] = ops[k + 1]; ops[k + 1] = t;
                }
            }
        }
        repair(ops, n);
        fprintf(f, "  stage %d {", s);
        for (int i = 0; i < n; i++) {
            if (ops[i].chunk)
                fprintf(f, " %c%d.%d", ops[i].kind, ops[i].mb, ops[i].chunk);
            else
                fprintf(f, " %c%d", ops[i].kind, ops[i].mb);
        }
        fprintf(f, " }\n");
    }
    fprintf(f, "}\n");
    free(ops);
}

static int cmd_gen(unsigned long long seed, int n, const char *dir)
{
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (int i = 0; i < n; i++) {
        char *path = xasprintf("%s/s%d.pipe", dir, i);
        FILE *f = fopen(path, "w");
        if (!f) {
            perror(path);
            free(path);
            return 1;
        }
        gen_one(f, i);
        if (fclose(f) != 0) {
            perror(path);
            free(path);
            return 1;
        }
        free(path);
    }
    return 0;
}

static int cmd_emit(const char *file, const char *dir)
{
    Diag d = {0};
    Pipeline *p = load_pipeline(&d, NULL, file);
    int rc = 1;
    EmitOut out = {0};
    if (p && !derive_costs(&d, p) && !check_pipeline(&d, p, CHECK_STRUCTURE) &&
        emit_c(&d, p, file, &out) == 0) {
        rc = 0;
        if (mkdir(dir, 0755) != 0) {
            perror(dir);
            rc = 1;
        }
        for (uint32_t i = 0; rc == 0 && i < out.n; i++) {
            char *path = xasprintf("%s/%s", dir, out.files[i].name);
            const StrBuf *t = &out.files[i].text;
            if (write_file_atomic(path, t->s ? t->s : "", t->len) != 0) {
                perror(path);
                rc = 1;
            }
            free(path);
        }
    }
    emit_out_free(&out);
    pipeline_free(p);
    diag_free(&d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "gen"))
        return cmd_gen(strtoull(argv[2], NULL, 10), atoi(argv[3]), argv[4]);
    if (argc == 4 && !strcmp(argv[1], "emit"))
        return cmd_emit(argv[2], argv[3]);
    fprintf(stderr, "usage: agree gen SEED N DIR | agree emit FILE DIR\n");
    return 2;
}
