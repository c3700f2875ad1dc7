/* prtable.h - the number code of packed op tables (docs/runtime.md "Packed op tables"),
 * shared by the code generator that writes them (compiler/generation/emit_table.c) and the runtime
 * that reads them (runtime/program_table.c).
 *
 * A table is a C string of printable characters: a sequence of unsigned numbers, each
 * written in 5-bit digits, most significant first; every digit but the last is a
 * character of PR_DIGITS_MORE, the last one a character of PR_DIGITS_LAST (so 0..31
 * take one character, up to 1023 two, up to 32767 three). Neither alphabet holds a
 * quote, a backslash or a question mark, so a table needs no escapes in a C string
 * literal and can hold no trigraph. Signed numbers are zigzag-coded (0, -1, 1, -2 ->
 * 0, 1, 2, 3); doubles are their IEEE-754 bit patterns. */
#ifndef PIPERUN_PRTABLE_H
#define PIPERUN_PRTABLE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define PR_TABLE_VERSION 1
#define PR_DIGITS_LAST "0123456789ABCDEFGHIJKLMNOPQRSTUV"
#define PR_DIGITS_MORE "abcdefghijklmnopqrstuvwxyzWXYZ+-"
#define PR_NUM_MAX_CHARS 13   /* 64 bits in 5-bit digits */
/* A table's op flags: PrOp.flags, and this bit when the op waits for every SO listed
 * before it on its rank (PrOp.nso_before is then their count, else 0). */
#define PR_PACK_WAIT_SO 32u

/* Writes v in the number code at buf (PR_NUM_MAX_CHARS free); returns the characters
 * written. */
static inline int pr_num_put(char *buf, uint64_t v)
{
    char tmp[PR_NUM_MAX_CHARS];
    int n = 0;
    do {
        tmp[n++] = (char)(v & 31);
        v >>= 5;
    } while (v);
    for (int k = 0; k < n; k++) {
        int d = tmp[n - 1 - k];
        buf[k] = k == n - 1 ? PR_DIGITS_LAST[d] : PR_DIGITS_MORE[d];
    }
    return n;
}

/* Reads one number at *s into *v and moves *s past it. Returns 0, or -1 at a character
 * outside both alphabets (the end of the string included) or past 64 bits. */
static inline int pr_num_get(const char **s, uint64_t *v)
{
    uint64_t x = 0;
    for (int k = 0; k < PR_NUM_MAX_CHARS; k++) {
        char c = (*s)[k];
        const char *at = c ? strchr(PR_DIGITS_LAST, c) : NULL;
        const char *more = c && !at ? strchr(PR_DIGITS_MORE, c) : NULL;
        if (!at && !more)
            return -1;
        if (x >> 59)
            return -1;
        x = x << 5 | (uint64_t)(at ? at - PR_DIGITS_LAST : more - PR_DIGITS_MORE);
        if (at) {
            *s += k + 1;
            *v = x;
            return 0;
        }
    }
    return -1;
}

static inline uint64_t pr_zigzag(int64_t x)
{
    return x >= 0 ? (uint64_t)x << 1 : (((uint64_t)-(x + 1)) << 1) | 1;
}

static inline int64_t pr_unzigzag(uint64_t z)
{
    return z & 1 ? -(int64_t)(z >> 1) - 1 : (int64_t)(z >> 1);
}

static inline uint64_t pr_double_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double pr_bits_double(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* A packed table being read, by the runtime (program_table.c: a rank's op table;
 * cuda/cu_host.c: its stream plan): where, and the first error, written to why (why_n
 * bytes) as "the WHAT of rank R is corrupt at character N: ...". */
typedef struct PrTableReader {
    const char *s, *start;
    const char *what;        /* the table's name in errors: "op table", "stream plan" */
    int rank;
    char *why;
    size_t why_n;
    bool bad;                /* an error was recorded: later reads give 0 */
} PrTableReader;

/* Records the first error of rd (printf-style); later ones are dropped. */
static inline void pr_table_fail(PrTableReader *rd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void pr_table_fail(PrTableReader *rd, const char *fmt, ...)
{
    if (rd->bad)
        return;
    rd->bad = true;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(rd->why, rd->why_n, "the %s of rank %d is corrupt at character %ld: %s",
             rd->what, rd->rank, (long)(rd->s - rd->start), what);
}

/* The next number, at most max (0 after an error, or when it is not one or over max:
 * then the error is recorded). */
static inline uint64_t pr_table_num(PrTableReader *rd, uint64_t max)
{
    uint64_t v = 0;
    if (rd->bad)
        return 0;
    if (pr_num_get(&rd->s, &v) != 0) {
        pr_table_fail(rd, "not a number");
        return 0;
    }
    if (v > max) {
        pr_table_fail(rd, "%llu is over %llu", (unsigned long long)v, (unsigned long long)max);
        return 0;
    }
    return v;
}

#endif
