/* util.c - see util.h. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

noreturn void die_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pipec: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

static void (*fatal_cleanup)(void *);
static void *fatal_cleanup_arg;

void set_fatal_cleanup(void (*fn)(void *arg), void *arg)
{
    fatal_cleanup = fn;
    fatal_cleanup_arg = arg;
}

noreturn void out_of_memory(void)
{
    static const char msg[] = "pipec: out of memory\n";
    /* write(2), not stdio: stderr's buffer may be what could not be allocated. */
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing left to report it with */
    }
    void (*fn)(void *) = fatal_cleanup;
    fatal_cleanup = NULL;
    if (fn)
        fn(fatal_cleanup_arg);
    _exit(1);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory();
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        out_of_memory();
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        out_of_memory();
    return p;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* sb_printf with a va_list: measures, reserves, then formats (dies on a bad format). */
static void sb_vprintf(StrBuf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void sb_vprintf(StrBuf *b, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0)
        die("bad format");
    VEC_RESERVE(b->s, b->len + (size_t)n + 1, b->cap);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, again);
    va_end(again);
    b->len += (size_t)n;
}

char *xasprintf(const char *fmt, ...)
{
    StrBuf b = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&b, fmt, ap);
    va_end(ap);
    return b.s;
}

void vec_reserve(void **pp, size_t esz, size_t need, size_t *cap)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 8;
    while (c < need) {
        if (c > SIZE_MAX / 2 / esz)
            out_of_memory();
        c *= 2;
    }
    *pp = xrealloc(*pp, c * esz);
    *cap = c;
}

char *read_file(const char *path, size_t *len)
{
    bool std_in = strcmp(path, "-") == 0;
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f)
        return NULL;
    StrBuf b = {0};
    char chunk[65536];
    size_t n;
    errno = 0;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        VEC_RESERVE(b.s, b.len + n + 1, b.cap);
        memcpy(b.s + b.len, chunk, n);
        b.len += n;
    }
    int err = ferror(f) ? (errno ? errno : EIO) : 0; /* the read's reason, e.g. EISDIR */
    if (!std_in)
        fclose(f);
    if (err) {
        free(b.s);
        errno = err;
        return NULL;
    }
    VEC_RESERVE(b.s, b.len + 1, b.cap);
    b.s[b.len] = 0;
    if (len)
        *len = b.len;
    return b.s;
}

static bool stdout_reported;

static int stdout_error(int err)
{
    if (!stdout_reported)
        fprintf(stderr, "pipec: error writing standard output: %s\n", strerror(err));
    stdout_reported = true;
    return 1;
}

int write_file_atomic(const char *path, const char *data, size_t len)
{
    if (strcmp(path, "-") == 0) {
        if (fwrite(data, 1, len, stdout) != len || fflush(stdout) != 0) {
            int e = errno ? errno : EIO;
            stdout_error(e); /* reported here, once, as flush_stdout reports */
            errno = e;
            return -1;
        }
        return 0;
    }
    char *tmp = xasprintf("%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(tmp);
        return -1;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            goto fail;
        }
        off += (size_t)w;
    }
    if (fchmod(fd, 0644) != 0)
        goto fail; /* fd still open: closed there */
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        fd = -1;
        goto fail;
    }
    free(tmp);
    return 0;
fail:;
    int e = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(tmp);
    errno = e;
    return -1;
}

int flush_stdout(void)
{
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout))
        /* A failed write earlier may have left errno behind; EIO when nothing says why. */
        return stdout_error(errno ? errno : EIO);
    return stdout_reported;
}

int close_stdout(void)
{
    int st = flush_stdout();
    errno = 0;
    if (fclose(stdout) != 0 && !st)
        st = stdout_error(errno ? errno : EIO);
    return st;
}

void sb_printf(StrBuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
}

void sb_putc(StrBuf *b, char c)
{
    VEC_RESERVE(b->s, b->len + 2, b->cap);
    b->s[b->len++] = c;
    b->s[b->len] = 0;
}

void sb_puts(StrBuf *b, const char *s)
{
    size_t n = strlen(s);
    VEC_RESERVE(b->s, b->len + n + 1, b->cap);
    memcpy(b->s + b->len, s, n + 1);
    b->len += n;
}

void sb_csv_field(StrBuf *b, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        sb_puts(b, s);
        return;
    }
    sb_putc(b, '"');
    for (; *s; s++) {
        if (*s == '"')
            sb_putc(b, '"');
        sb_putc(b, *s);
    }
    sb_putc(b, '"');
}

const char *sb_str(const StrBuf *b)
{
    return b->s ? b->s : "";
}

void sb_free(StrBuf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

int write_output(const char *path, const StrBuf *b)
{
    if (!path)
        path = "-";
    if (write_file_atomic(path, sb_str(b), b->len) != 0) {
        if (strcmp(path, "-")) /* standard output's error is reported by write_file_atomic */
            fprintf(stderr, "pipec: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}
