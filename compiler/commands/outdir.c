/* outdir.c - the folders generated programs go to (outdir.h): the output folder of
 * `emit` and `compile`, replaced all at once, and the build cache of `run`. */
#define _GNU_SOURCE /* renameat2 (Linux): swap the output folder in one step */
#include "outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- the output folder: all old or all new ------------------------------------------- */

/* Whether an entry of an existing output folder is one pipec may replace: a regular
 * file that an emit or a compile writes (sources, headers, objects, the Makefile, the
 * program). Anything else (a subfolder, a link, notes.txt) keeps the folder as it is. */
static bool replaceable(const char *dir, const char *name)
{
    char *path = xasprintf("%s/%s", dir, name);
    struct stat st;
    bool ok = lstat(path, &st) == 0 && S_ISREG(st.st_mode);
    free(path);
    if (!ok)
        return false;
    size_t l = strlen(name);
    bool generated = !strcmp(name, "Makefile") ||
                     (l > 2 && name[l - 2] == '.' && strchr("cho", name[l - 1]));
    return generated || (st.st_mode & S_IXUSR);
}

/* A folder being written or replaced, and the names of the files in it: everything
 * needed to remove it again without allocating (so out_of_memory can). */
typedef struct Folder {
    char *path;
    const char **names;   /* [n] file names in it */
    uint32_t n;
} Folder;

/* Removes the files named in f and then the folder. Returns 0 or -1. Allocates
 * nothing: it runs on the out-of-memory path too. */
static int folder_remove(const Folder *f)
{
    char path[PATH_MAX];
    int rc = 0;
    for (uint32_t i = 0; i < f->n; i++) {
        int k = snprintf(path, sizeof path, "%s/%s", f->path, f->names[i]);
        if (k < 0 || (size_t)k >= sizeof path || (unlink(path) != 0 && errno != ENOENT))
            rc = -1;
    }
    return rmdir(f->path) != 0 ? -1 : rc;
}

static void folder_remove_cb(void *f)
{
    folder_remove(f);
}

/* Lists an existing folder dir into *f, checking that it holds only files pipec
 * writes. Returns 0, or 1 after a message naming the first entry that is not. */
static int folder_list(const char *dir, Folder *f, size_t *cap)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        fprintf(stderr, "pipec: cannot read %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (errno = 0, e = readdir(dp)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!replaceable(dir, e->d_name)) {
            fprintf(stderr, "pipec: %s/%s is not a file pipec writes: leaving %s as it is "
                            "(give -o a new folder or one pipec wrote)\n", dir, e->d_name, dir);
            rc = 1;
        } else {
            VEC_PUSH(f->names, f->n, *cap, xstrdup(e->d_name));
        }
    }
    if (rc == 0 && errno) { /* readdir failed: the listing is not the whole folder */
        fprintf(stderr, "pipec: cannot read %s: %s\n", dir, strerror(errno));
        rc = 1;
    }
    closedir(dp);
    return rc;
}

/* Writes every file of out into the folder outdir so that, whatever fails (a full
 * disk, an I/O error, out of memory), the folder is either as it was or holds exactly
 * the new files: they go into a fresh folder beside it (DIR.tmpXXXXXX), which then
 * takes its place in one rename (renameat2 RENAME_EXCHANGE; where the file system
 * lacks it, two renames that put the old folder back on failure). An existing folder
 * must hold only files pipec writes (replaceable). Returns 0, or 1 after a message
 * that names the file or folder that failed. */
int write_output_folder(const EmitOut *out, const char *outdir)
{
    char *dir = xstrdup(outdir);
    for (size_t l = strlen(dir); l > 1 && dir[l - 1] == '/'; l--)
        dir[l - 1] = 0;
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    Folder fresh = {0}, old = {0};
    size_t oldcap = 0;
    const char **names = xcalloc(out->n + 1, sizeof *names);
    for (uint32_t i = 0; i < out->n; i++)
        names[i] = out->files[i].name;
    int rc = 1;
    struct stat st;
    bool exists_before = lstat(dir, &st) == 0;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        fprintf(stderr, "pipec: -o %s: name the output folder itself (not '.' or '..')\n", outdir);
        goto done;
    }
    if (exists_before && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "pipec: cannot write %s: it exists and is not a folder\n", dir);
        goto done;
    }
    if (exists_before && folder_list(dir, &old, &oldcap) != 0)
        goto done;
    char *tmp = xasprintf("%s.tmpXXXXXX", dir);
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "pipec: cannot create a folder beside %s: %s\n", dir, strerror(errno));
        free(tmp);
        goto done;
    }
    fresh = (Folder){tmp, names, out->n};
    set_fatal_cleanup(folder_remove_cb, &fresh);
    if (chmod(tmp, 0755) != 0) {
        fprintf(stderr, "pipec: cannot write %s: %s\n", dir, strerror(errno));
        goto done;
    }
    for (uint32_t i = 0; i < out->n; i++) {
        char *path = xasprintf("%s/%s", tmp, out->files[i].name);
        const StrBuf *t = &out->files[i].text;
        int w = write_file_atomic(path, sb_str(t), t->len);
        free(path);
        if (w != 0) {
            fprintf(stderr, "pipec: cannot write %s/%s: %s\n", dir, out->files[i].name,
                    strerror(errno));
            goto done;
        }
    }
    char *aside = exists_before ? xasprintf("%s.oldXXXXXX", dir) : NULL;
    if (!exists_before) {
        if (rename(tmp, dir) != 0) {
            fprintf(stderr, "pipec: cannot create %s: %s\n", dir, strerror(errno));
            goto done;
        }
    } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        old.path = tmp; /* tmp now holds the old files */
        if (folder_remove(&old) != 0)
            fprintf(stderr, "pipec: warning: cannot remove the old files in %s\n", tmp);
    } else if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
        fprintf(stderr, "pipec: cannot replace %s: %s\n", dir, strerror(errno));
        free(aside);
        goto done;
    } else {
        /* No exchange here: move the old folder aside (onto an empty one), the new in. */
        bool made = mkdtemp(aside) != NULL;
        if (!made || rename(dir, aside) != 0) {
            fprintf(stderr, "pipec: cannot replace %s: %s\n", dir, strerror(errno));
            if (made)
                rmdir(aside);
            free(aside);
            goto done;
        }
        if (rename(tmp, dir) != 0) {
            fprintf(stderr, "pipec: cannot replace %s: %s\n", dir, strerror(errno));
            if (rename(aside, dir) != 0)
                fprintf(stderr, "pipec: the old files of %s are in %s\n", dir, aside);
            free(aside);
            goto done;
        }
        old.path = aside;
        if (folder_remove(&old) != 0)
            fprintf(stderr, "pipec: warning: cannot remove the old files in %s\n", aside);
    }
    free(aside);
    fresh.n = 0; /* committed: nothing of it to remove */
    rc = 0;
done:
    set_fatal_cleanup(NULL, NULL);
    if (fresh.path && fresh.n && folder_remove(&fresh) != 0)
        fprintf(stderr, "pipec: warning: cannot remove %s\n", fresh.path);
    free(fresh.path);
    for (uint32_t i = 0; i < old.n; i++)
        free((char *)old.names[i]);
    free(old.names);
    free(names);
    free(dir);
    return rc;
}

/* --- the build cache ------------------------------------------------------------------ */

/* FNV-1a 64 over the generated files, the version, the target and the size and
 * modification time of the runtime libraries it links (a rebuilt runtime invalidates
 * the cache). */
uint64_t hash_out(const EmitOut *out, Target t)
{
    uint64_t h = 1469598103934665603ull;
#define MIX(ptr, len)                                            \
    for (size_t _i = 0; _i < (len); _i++) {                      \
        h ^= ((const unsigned char *)(ptr))[_i];                 \
        h *= 1099511628211ull;                                   \
    }
    MIX(PIPEC_VERSION, strlen(PIPEC_VERSION));
    const char *tag = t.cuda ? (t.mpi ? "cuda+mpi" : "cuda") : (t.mpi ? "cpu+mpi" : "cpu");
    MIX(tag, strlen(tag) + 1);
    for (uint32_t i = 0; i < out->n; i++) {
        MIX(out->files[i].name, strlen(out->files[i].name) + 1);
        MIX(sb_str(&out->files[i].text), out->files[i].text.len);
    }
    char *inc, *lib;
    if (find_runtime(t, &inc, &lib) == 0) {
        for (const char *const *n = target_libs(t); *n; n++) {
            char *lp = xasprintf("%s/%s", lib, *n);
            struct stat st;
            if (stat(lp, &st) == 0) {
                MIX(&st.st_size, sizeof st.st_size);
                MIX(&st.st_mtime, sizeof st.st_mtime);
            }
            free(lp);
        }
        free(inc);
        free(lib);
    }
#undef MIX
    return h;
}

/* mkdir -p. */
static int mkdirs(const char *path)
{
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                free(p);
                return -1;
            }
            *s = '/';
        }
    int rc = mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
    free(p);
    return rc;
}

char *cache_root(const char *opt)
{
    if (opt)
        return xstrdup(opt);
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && *x == '/')
        return xasprintf("%s/pipec", x);
    const char *home = getenv("HOME");
    if (home && *home == '/')
        return xasprintf("%s/.cache/pipec", home);
    return xstrdup(".cache/pipec");
}

/* Makes sure the cache folder dir holds the built program exe: writes the generated
 * files and builds them unless an earlier run did. Returns 0, or 1 after a message. */
int build_cached(const EmitOut *eo, Target t, const char *dir, const char *exe, int nranks,
                 bool quiet)
{
    if (mkdirs(dir) != 0) {
        fprintf(stderr, "pipec: cannot create the cache folder %s: %s\n", dir, strerror(errno));
        return 1;
    }
    if (path_exists(exe))
        return 0;
    if (!quiet)
        fprintf(stderr, "pipec run: building %s (%d rank%s) in %s\n", eo->progname, nranks,
                nranks == 1 ? "" : "s", dir);
    const char *failed;
    if (emit_write(eo, dir, &failed) != 0) {
        fprintf(stderr, "pipec: cannot write %s%s%s: %s\n", dir, failed ? "/" : "",
                failed ? failed : "", strerror(errno));
        return 1;
    }
    return build_program(eo, dir, t);
}
