/* faultinject.c - an LD_PRELOAD shim that makes the N-th call of one libc function
 * fail, to test how pipec survives out of memory and I/O errors (tests/fault/run.sh).
 *
 *   FAULT_FUNC=NAME   malloc calloc realloc fopen fwrite rename renameat2 fclose write
 *   FAULT_N=N         fail the N-th call (1-based) of NAME in this process, only that one
 *   FAULT_COUNT=PATH  fail nothing; at exit append "NAME COUNT" per function to PATH
 *
 * Only processes whose program name is pipec are affected (a compiler pipec starts
 * inherits LD_PRELOAD and is left alone). A failed call does what a real failure does:
 * malloc/calloc/realloc return NULL with ENOMEM; fopen returns NULL with EIO; fwrite
 * writes nothing, sets the stream's error flag and ENOSPC; write returns -1 with
 * ENOSPC; rename/renameat2 return -1 with EIO and move nothing; fclose closes the
 * stream and then reports EOF with EIO (a close error, as NFS gives). The malloc family
 * calls glibc's __libc_* entry points, so no dlsym happens inside an allocation. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

enum { F_MALLOC, F_CALLOC, F_REALLOC, F_FOPEN, F_FWRITE, F_RENAME, F_RENAMEAT2, F_FCLOSE,
       F_WRITE, NFUNC };
static const char *const names[NFUNC] = {"malloc", "calloc", "realloc", "fopen", "fwrite",
                                         "rename", "renameat2", "fclose", "write"};

static int state;                /* 0 not read yet, 1 off, 2 failing, 3 counting */
static int target = -1;          /* the function to fail */
static unsigned long fail_at;    /* its call number to fail */
static unsigned long calls[NFUNC];
static const char *count_path;

static void init(void)
{
    state = 1;
    if (strcmp(program_invocation_short_name, "pipec") != 0)
        return;
    const char *f = getenv("FAULT_FUNC"), *n = getenv("FAULT_N");
    count_path = getenv("FAULT_COUNT");
    if (count_path && *count_path) {
        state = 3;
        return;
    }
    if (!f || !n)
        return;
    for (int i = 0; i < NFUNC; i++)
        if (!strcmp(f, names[i]))
            target = i;
    fail_at = strtoul(n, NULL, 10);
    if (target >= 0 && fail_at > 0)
        state = 2;
}

/* Counts a call of function i; true when this call must fail. */
static int hit(int i)
{
    if (state == 0)
        init();
    if (state < 2)
        return 0;
    calls[i]++;
    return state == 2 && i == target && calls[i] == fail_at;
}

__attribute__((destructor)) static void report(void)
{
    if (state != 3)
        return;
    state = 1;
    FILE *f = fopen(count_path, "a");
    if (!f)
        return;
    for (int i = 0; i < NFUNC; i++)
        fprintf(f, "%s %lu\n", names[i], calls[i]);
    fclose(f);
}

/* real_NAME: the next definition of NAME (libc's), looked up once. */
#define NEXT(name)                                                  \
    static __typeof__(&name) real_##name;                           \
    if (!real_##name)                                               \
        real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

void *malloc(size_t n)
{
    if (hit(F_MALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_malloc(n);
}

void *calloc(size_t c, size_t n)
{
    if (hit(F_CALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_calloc(c, n);
}

void *realloc(void *p, size_t n)
{
    if (hit(F_REALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_realloc(p, n);
}

FILE *fopen(const char *path, const char *mode)
{
    NEXT(fopen);
    if (hit(F_FOPEN)) {
        errno = EIO;
        return NULL;
    }
    return real_fopen(path, mode);
}

size_t fwrite(const void *p, size_t size, size_t n, FILE *f)
{
    NEXT(fwrite);
    if (hit(F_FWRITE)) {
        f->_flags |= _IO_ERR_SEEN;
        errno = ENOSPC;
        return 0;
    }
    return real_fwrite(p, size, n, f);
}

ssize_t write(int fd, const void *p, size_t n)
{
    NEXT(write);
    if (hit(F_WRITE)) {
        errno = ENOSPC;
        return -1;
    }
    return real_write(fd, p, n);
}

int rename(const char *a, const char *b)
{
    NEXT(rename);
    if (hit(F_RENAME)) {
        errno = EIO;
        return -1;
    }
    return real_rename(a, b);
}

int renameat2(int da, const char *a, int db, const char *b, unsigned flags)
{
    NEXT(renameat2);
    if (hit(F_RENAMEAT2)) {
        errno = EIO;
        return -1;
    }
    return real_renameat2(da, a, db, b, flags);
}

int fclose(FILE *f)
{
    NEXT(fclose);
    int fail = hit(F_FCLOSE);
    int rc = real_fclose(f);
    if (fail) {
        errno = EIO;
        return EOF;
    }
    return rc;
}
