/* faultinject.c - an LD_PRELOAD shim that makes the N-th call of one libc function
 * fail, to test how pipec survives out of memory and I/O errors (tests/fault/run.sh).
 *
 *   FAULT_FUNC=NAME   malloc calloc realloc fopen fwrite rename renameat2 fclose write
 *                     mkdtemp fchmod close fork waitpid chmod lstat opendir readdir unlink
 *                     rmdir
 *   FAULT_N=N         fail the N-th call (1-based) of NAME in this process, only that one
 *   FAULT_COUNT=PATH  fail nothing; at exit append "NAME COUNT" per function to PATH
 *   FAULT_NO_EXCHANGE=1  besides, every renameat2 fails with EINVAL, as on a file
 *                     system without RENAME_EXCHANGE (not counted as a call)
 *
 * Only processes whose program name is pipec are affected (a compiler pipec starts
 * inherits LD_PRELOAD and is left alone). Only the calls made from the start of main to
 * the end of pipec's own exit handlers are counted and may fail: before and after, the
 * C library and libgcov do their start-up and clean-up (a pipec built with --coverage
 * writes its counters at exit with malloc, fopen and fwrite, which must neither take
 * the injected fault nor count as pipec's calls).
 *
 * A failed call does what a real failure does: malloc/calloc/realloc return NULL with
 * ENOMEM; fopen returns NULL with EIO; fwrite writes nothing, sets the stream's error
 * flag and ENOSPC; write returns -1 with ENOSPC; rename/renameat2 return -1 with EIO
 * and move nothing; mkdtemp returns NULL with ENOSPC and creates nothing; fchmod
 * returns -1 with EIO and changes nothing; fclose and close close and then report an
 * error, EIO (a close error, as NFS gives); fork returns -1 with EAGAIN and starts
 * nothing; waitpid returns -1 with ECHILD (the child is left to finish on its own);
 * chmod, lstat, unlink and rmdir return -1 with EIO and change nothing; opendir returns
 * NULL with EIO, and readdir NULL with EIO (a directory that cannot be read further).
 * The
 * malloc family calls glibc's __libc_* entry points, so no dlsym happens inside an
 * allocation.
 *
 * A child that pipec forks and that then runs another program (execvp) would take the
 * counters of a pipec built with --coverage with it; where __gcov_dump is exported, the
 * child writes them first, so that its side of the fork counts. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

enum { F_MALLOC, F_CALLOC, F_REALLOC, F_FOPEN, F_FWRITE, F_RENAME, F_RENAMEAT2, F_FCLOSE,
       F_WRITE, F_MKDTEMP, F_FCHMOD, F_CLOSE, F_FORK, F_WAITPID, F_CHMOD, F_LSTAT, F_OPENDIR,
       F_UNLINK, F_RMDIR, F_READDIR, NFUNC };
static const char *const names[NFUNC] = {"malloc", "calloc", "realloc", "fopen", "fwrite",
                                         "rename", "renameat2", "fclose", "write", "mkdtemp",
                                         "fchmod", "close", "fork", "waitpid", "chmod",
                                         "lstat", "opendir", "unlink", "rmdir",
                                         "readdir"};

static int state;                /* 0 before main, 1 off, 2 failing, 3 counting */
static int target = -1;          /* the function to fail */
static unsigned long fail_at;    /* its call number to fail */
static unsigned long calls[NFUNC];
static const char *count_path;
static int no_exchange;          /* FAULT_NO_EXCHANGE: renameat2 always fails, EINVAL */

static void init(void)
{
    state = 1;
    if (strcmp(program_invocation_short_name, "pipec") != 0)
        return;
    const char *f = getenv("FAULT_FUNC"), *n = getenv("FAULT_N");
    const char *x = getenv("FAULT_NO_EXCHANGE");
    no_exchange = x && !strcmp(x, "1");
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
    if (state < 2)
        return 0;
    calls[i]++;
    return state == 2 && i == target && calls[i] == fail_at;
}

/* At exit, after pipec's own exit handlers (registered later, so run earlier): stop
 * counting and failing; when counting, append the counts to FAULT_COUNT. */
static void at_exit(void)
{
    int counting = state == 3;
    state = 1;
    if (!counting)
        return;
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

/* pipec's main, which the wrapper below calls. */
static int (*real_main)(int, char **, char **);

/* Registers at_exit first thing in main: after the C library's own exit handler (which
 * runs the destructors, libgcov's among them), so that at_exit runs before it, and
 * before pipec's (registered later, so run earlier), so that it runs after them. */
static int main_after_at_exit(int argc, char **argv, char **envp)
{
    atexit(at_exit);
    init();
    return real_main(argc, argv, envp);
}

/* glibc's start-up, which calls main: the only place to run code first in main. */
int __libc_start_main(int (*main)(int, char **, char **), int argc, char **argv,
                      void (*ctors)(void), void (*dtors)(void), void (*rtld_fini)(void),
                      void *stack_end);
int __libc_start_main(int (*main)(int, char **, char **), int argc, char **argv,
                      void (*ctors)(void), void (*dtors)(void), void (*rtld_fini)(void),
                      void *stack_end)
{
    NEXT(__libc_start_main);
    real_main = main;
    return real___libc_start_main(main_after_at_exit, argc, argv, ctors, dtors, rtld_fini,
                                  stack_end);
}

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
    if (no_exchange && state >= 2) {
        errno = EINVAL;
        return -1;
    }
    return real_renameat2(da, a, db, b, flags);
}

char *mkdtemp(char *tmpl)
{
    NEXT(mkdtemp);
    if (hit(F_MKDTEMP)) {
        errno = ENOSPC;
        return NULL;
    }
    return real_mkdtemp(tmpl);
}

/* _exit skips the exit handlers and destructors, so a pipec built with --coverage would
 * lose the counters of each run that ends on the out-of-memory path (util.c
 * out_of_memory). Where the program exports libgcov's __gcov_dump (make coverage links
 * it so), the counters are written first, with nothing counted or failed any more. */
void _exit(int status)
{
    NEXT(_exit);
    if (state >= 2) {
        state = 1;
        void (*dump)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "__gcov_dump");
        if (dump)
            dump();
    }
    real__exit(status);
}

int fchmod(int fd, mode_t mode)
{
    NEXT(fchmod);
    if (hit(F_FCHMOD)) {
        errno = EIO;
        return -1;
    }
    return real_fchmod(fd, mode);
}

int close(int fd)
{
    NEXT(close);
    int fail = hit(F_CLOSE);
    int rc = real_close(fd);
    if (fail) {
        errno = EIO;
        return -1;
    }
    return rc;
}

pid_t fork(void)
{
    NEXT(fork);
    if (hit(F_FORK)) {
        errno = EAGAIN;
        return -1;
    }
    return real_fork();
}

pid_t waitpid(pid_t pid, int *status, int options)
{
    NEXT(waitpid);
    if (hit(F_WAITPID)) {
        errno = ECHILD;
        return -1;
    }
    return real_waitpid(pid, status, options);
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

int chmod(const char *path, mode_t mode)
{
    NEXT(chmod);
    if (hit(F_CHMOD)) {
        errno = EIO;
        return -1;
    }
    return real_chmod(path, mode);
}

int lstat(const char *restrict path, struct stat *restrict st)
{
    NEXT(lstat);
    if (hit(F_LSTAT)) {
        errno = EIO;
        return -1;
    }
    return real_lstat(path, st);
}

DIR *opendir(const char *path)
{
    NEXT(opendir);
    if (hit(F_OPENDIR)) {
        errno = EIO;
        return NULL;
    }
    return real_opendir(path);
}

struct dirent *readdir(DIR *dp)
{
    NEXT(readdir);
    if (hit(F_READDIR)) {
        errno = EIO;
        return NULL;
    }
    return real_readdir(dp);
}

int unlink(const char *path)
{
    NEXT(unlink);
    if (hit(F_UNLINK)) {
        errno = EIO;
        return -1;
    }
    return real_unlink(path);
}

int rmdir(const char *path)
{
    NEXT(rmdir);
    if (hit(F_RMDIR)) {
        errno = EIO;
        return -1;
    }
    return real_rmdir(path);
}

/* Writes the counters of a pipec built with --coverage before a forked child of it runs
 * another program (nothing counted or failed meanwhile). */
int execvp(const char *file, char *const argv[])
{
    NEXT(execvp);
    if (state >= 2) {
        int was = state;
        state = 1;
        void (*dump)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "__gcov_dump");
        if (dump)
            dump();
        state = was;
    }
    return real_execvp(file, argv);
}
