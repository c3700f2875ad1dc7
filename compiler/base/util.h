/* util.h - allocation, growable arrays and internal-bug aborts shared by every module.
 *
 * Internal bugs are not user errors: they abort with the file and line (die /
 * unreachable). Allocation failure exits 1 with "pipec: out of memory"
 * (out_of_memory). User-facing problems go through diag.h instead. */
#ifndef PIPEC_UTIL_H
#define PIPEC_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdnoreturn.h>

#define PIPEC_VERSION "0.1.0"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Aborts with "pipec: internal error at FILE:LINE: msg". Never for bad input. */
noreturn void die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define unreachable() die_at(__FILE__, __LINE__, "unreachable")

/* Out of memory is an environment error, not a bug: prints "pipec: out of memory" to
 * stderr, runs the cleanup set by set_fatal_cleanup (a half-written output folder is
 * removed) and exits with status 1 without flushing stdout (no half report, no abort). */
noreturn void out_of_memory(void);

/* Sets (fn != NULL) or clears the one cleanup out_of_memory runs before exiting: the
 * code that owns a temporary output registers how to remove it. */
void set_fatal_cleanup(void (*fn)(void *arg), void *arg);

/* malloc/calloc/realloc/strdup that call out_of_memory on exhaustion. A size of 0
 * still gives a block of its own (never NULL): callers need no `n ? n : 1`. */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a fresh heap string. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Grows *pp (element size esz) so that it holds at least need elements; *cap is the
 * element capacity and doubles. Usage: VEC_PUSH(arr, n, cap, value); VEC_RESERVE
 * calls it only when need exceeds cap (need is evaluated twice: no side effects). */
void vec_reserve(void **pp, size_t esz, size_t need, size_t *cap);
#define VEC_RESERVE(p, need, cap)                                                        \
    ((size_t)(need) > (cap) ? vec_reserve((void **)&(p), sizeof(*(p)), (need), &(cap))  \
                            : (void)0)
#define VEC_PUSH(p, n, cap, v) (VEC_RESERVE(p, (size_t)(n) + 1, cap), (p)[(n)++] = (v))

/* Reads a whole file into a NUL-terminated heap buffer; *len gets its size in bytes.
 * Path "-" is standard input. Returns NULL (errno set) when it cannot be read. */
char *read_file(const char *path, size_t *len);

/* Writes len bytes to path atomically: a temporary file in the same folder, fsync-free
 * rename over the target. Path "-" is standard output (written and flushed; a failure
 * there is reported on stderr once, as flush_stdout reports it, so callers say nothing
 * more). Returns 0, or -1 with errno set (the target is untouched). */
int write_file_atomic(const char *path, const char *data, size_t len);

/* Flushes standard output. On a write error (a full disk, /dev/full, a closed pipe)
 * prints "pipec: error writing standard output: REASON" to stderr, once per process,
 * and returns 1; else returns 0. Commands that report on stdout call it (or leave it
 * to close_stdout) so that a lost report is never an exit status of 0. */
int flush_stdout(void);

/* flush_stdout, then closes standard output and reports a close error the same way.
 * Called once, by main, after the command ran; returns 0 or 1. */
int close_stdout(void);

/* A growable string buffer for printers. */
typedef struct StrBuf {
    char *s;       /* NUL-terminated contents */
    size_t len;    /* bytes, without the NUL */
    size_t cap;
} StrBuf;

/* Writes b to path atomically (write_file_atomic), or to standard output when path is
 * NULL or "-". Returns 0, or 1 after printing "pipec: cannot write PATH: REASON" (an
 * error on standard output is reported once by write_file_atomic). The output files of
 * print, opt, sim's writers, import-csv and export-csv all go through it. */
int write_output(const char *path, const StrBuf *b);
void sb_printf(StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_putc(StrBuf *b, char c);
void sb_puts(StrBuf *b, const char *s);
/* Appends s as one CSV field (RFC 4180): quoted when it holds a comma, a quote or a
 * line break, its quotes doubled; as it is otherwise. */
void sb_csv_field(StrBuf *b, const char *s);
void sb_free(StrBuf *b);
/* b's contents as a string: "" while nothing was written to it (b->s is NULL then). */
const char *sb_str(const StrBuf *b);

#endif
