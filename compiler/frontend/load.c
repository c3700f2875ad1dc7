/* load.c - reading a .pipe file and everything it imports, then elaborating it; see
 * frontend.h for the entry points and docs/language.md "Imports" for the search path.
 *
 * Each file is registered with diag (so diagnostics can quote it), parsed into the
 * load's arena, and its imports are followed depth first. A file reached twice (two
 * files import the same stdlib file) is loaded once; a file that imports itself,
 * directly or through others, is an import cycle (`name`, with the chain in notes). */
#define _DEFAULT_SOURCE /* realpath */
#include "frontend.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ast.h"
#include "util.h"

typedef struct Loader {
    Diag *d;
    const LoadOpts *o;
    AstCtx *ctx;
    AstFile *files;
    size_t nfiles, cap;
    char **keys;          /* [nfiles] canonical path of each loaded file */
    size_t keycap;
    /* The chain of imports being loaded: file index and the import that led to it. */
    struct Frame { size_t idx; Loc at; } *stack;
    size_t depth, stackcap;
} Loader;

static bool is_regular(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The folder of path ("." when it has none), in a fresh string. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return xstrdup(".");
    if (slash == path)
        return xstrdup("/");
    return xstrndup(path, (size_t)(slash - path));
}

const char *stdlib_dir(void)
{
    static char buf[PATH_MAX + 64];
    const char *env = getenv("PIPEC_STDLIB");
    if (env && *env) {
        snprintf(buf, sizeof buf, "%s", env);
        return buf;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(buf, sizeof buf, "stdlib");
        return buf;
    }
    exe[n] = 0;
    char *bindir = dir_of(exe);
    snprintf(buf, sizeof buf, "%s/../stdlib", bindir);
    if (!is_dir(buf))
        snprintf(buf, sizeof buf, "%s/../share/pipec/stdlib", bindir);
    if (!is_dir(buf))
        snprintf(buf, sizeof buf, "%s/../stdlib", bindir);
    free(bindir);
    return buf;
}

/* Finds an import: an absolute path as is; else the importing file's folder, each -I
 * folder, each folder of $PIPEC_PATH, then the stdlib ("std/NAME" is NAME there).
 * Returns a fresh path or NULL; *searched lists the folders tried; *std is set to the
 * name diagnostics print ("std/NAME") when the stdlib had it, else NULL. */
static char *find_import(Loader *L, const char *importer, const char *path, StrBuf *searched,
                         char **std_name)
{
    *std_name = NULL;
    if (path[0] == '/') {
        sb_printf(searched, "only %s (the path is absolute)", path);
        return is_regular(path) ? xstrdup(path) : NULL;
    }
    char *cand;
    char *dir = dir_of(importer);
    cand = strcmp(dir, ".") == 0 ? xstrdup(path) : xasprintf("%s/%s", dir, path);
    sb_puts(searched, dir);
    free(dir);
    if (is_regular(cand))
        return cand;
    free(cand);
    for (int i = 0; L->o && i < L->o->ninclude; i++) {
        cand = xasprintf("%s/%s", L->o->include_dirs[i], path);
        sb_printf(searched, ", %s", L->o->include_dirs[i]);
        if (is_regular(cand))
            return cand;
        free(cand);
    }
    const char *env = getenv("PIPEC_PATH");
    if (env) {
        for (const char *s = env; *s;) {
            const char *e = strchr(s, ':');
            size_t n = e ? (size_t)(e - s) : strlen(s);
            if (n) {
                cand = xasprintf("%.*s/%s", (int)n, s, path);
                sb_printf(searched, ", %.*s", (int)n, s);
                if (is_regular(cand))
                    return cand;
                free(cand);
            }
            s += n + (e ? 1 : 0);
        }
    }
    const char *std = stdlib_dir();
    const char *rest = strncmp(path, "std/", 4) == 0 ? path + 4 : path;
    cand = xasprintf("%s/%s", std, rest);
    sb_printf(searched, ", %s", std);
    if (is_regular(cand)) {
        *std_name = xasprintf("std/%s", rest);
        return cand;
    }
    free(cand);
    return NULL;
}

/* The identity of a file for "already loaded" and cycles: its canonical path. */
static char *file_key(const char *path)
{
    errno = 0;
    char *r = realpath(path, NULL);
    if (!r && errno == ENOMEM) /* not a file without a canonical path */
        out_of_memory();
    return r ? r : xstrdup(path);
}

static void load_file(Loader *L, uint32_t file, char *key, Loc at);

/* Reads path (found for an import at `at`, or the main file when at is LOC_NONE).
 * Returns the text (NUL-terminated) or NULL after reporting. */
static char *read_source(Loader *L, const char *path, Loc at, size_t *len)
{
    if (at.file == LOC_NONE_FILE && strcmp(path, "-") == 0) { /* the main file, from stdin */
        char *text = read_file(path, len);
        if (!text)
            diag_error(L->d, at, DIAG_NAME, "cannot read standard input: %s", strerror(errno));
        else if (*len > frontend_limits.max_file_bytes) {
            diag_error(L->d, at, DIAG_LIMIT, "standard input is larger than %zu bytes",
                       frontend_limits.max_file_bytes);
            free(text);
            text = NULL;
        }
        return text;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        diag_error(L->d, at, DIAG_NAME, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        diag_error(L->d, at, DIAG_NAME, "cannot read '%s': not a regular file", path);
        return NULL;
    }
    if ((uint64_t)st.st_size > frontend_limits.max_file_bytes) {
        diag_error(L->d, at, DIAG_LIMIT, "'%s' is larger than %zu bytes", path,
                   frontend_limits.max_file_bytes);
        return NULL;
    }
    char *text = read_file(path, len);
    if (!text) {
        diag_error(L->d, at, DIAG_NAME, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (*len > frontend_limits.max_file_bytes) {
        diag_error(L->d, at, DIAG_LIMIT, "'%s' is larger than %zu bytes", path,
                   frontend_limits.max_file_bytes);
        free(text);
        return NULL;
    }
    return text;
}

static void follow_import(Loader *L, uint32_t importer, Node *imp)
{
    StrBuf searched = {0};
    char *std_name;
    char *found = find_import(L, L->d->files[importer].path, imp->name, &searched, &std_name);
    if (!found) {
        diag_error(L->d, imp->loc, DIAG_NAME, "cannot find import \"%s\"", imp->name);
        diag_note(L->d, imp->loc, "searched: %s", searched.s);
        sb_free(&searched);
        return;
    }
    sb_free(&searched);
    char *key = file_key(found);
    for (size_t i = 0; i < L->depth; i++)
        if (strcmp(L->keys[L->stack[i].idx], key) == 0) {
            diag_error(L->d, imp->loc, DIAG_NAME, "import cycle: \"%s\" imports itself", imp->name);
            for (size_t j = L->depth; j-- > i + 1;)
                diag_note(L->d, L->stack[j].at, "through this import");
            free(key);
            free(found);
            free(std_name);
            return;
        }
    for (size_t i = 0; i < L->nfiles; i++)
        if (strcmp(L->keys[i], key) == 0) { /* loaded already through another import */
            free(key);
            free(found);
            free(std_name);
            return;
        }
    if (L->depth > (size_t)frontend_limits.max_import_depth) {
        diag_error(L->d, imp->loc, DIAG_LIMIT, "imports nested deeper than %d files",
                   frontend_limits.max_import_depth);
        free(key);
        free(found);
        free(std_name);
        return;
    }
    size_t len;
    char *text = read_source(L, found, imp->loc, &len);
    if (!text) {
        free(key);
        free(found);
        free(std_name);
        return;
    }
    uint32_t f = diag_add_file(L->d, found, text, (uint32_t)len);
    diag_set_name(L->d, f, std_name);
    free(found);
    free(std_name);
    load_file(L, f, key, imp->loc);
}

/* Parses a registered file and follows its imports. Takes ownership of key. */
static void load_file(Loader *L, uint32_t file, char *key, Loc at)
{
    size_t idx = L->nfiles;
    VEC_RESERVE(L->files, idx + 1, L->cap);
    VEC_RESERVE(L->keys, idx + 1, L->keycap);
    L->keys[idx] = key;
    L->nfiles++;
    ast_parse(L->d, L->ctx, file, &L->files[idx]);
    VEC_RESERVE(L->stack, L->depth + 1, L->stackcap);
    L->stack[L->depth].idx = idx;
    L->stack[L->depth].at = at;
    L->depth++;
    for (Node *n = L->files[idx].items; n; n = n->next)
        if (n->kind == N_IMPORT)
            follow_import(L, file, n);
    L->depth--;
}

char *settings_list(char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (int k = 0; k < N_NKINDS; k++)
        if (ast_is_setting((NodeKind)k) && at < len)
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "", node_kind_name[k]);
    return buf;
}

/* The setting kind whose keyword is the n bytes at key, or -1. */
static int setting_kind(const char *key, size_t n)
{
    for (int k = 0; k < N_NKINDS; k++)
        if (ast_is_setting((NodeKind)k) && strlen(node_kind_name[k]) == n &&
            !strncmp(node_kind_name[k], key, n))
            return k;
    return -1;
}

/* Reads override o (docs/language.md "Overriding settings") and puts it in place of the
 * lines of pipeline pl that set the same key: where the first of them was, else at the
 * end of the body. Reports `syntax` (no '=', a bad value) or `name` (an unknown key) at
 * the override, registered as a file named SET_FILE_NAME. */
static void apply_override(Diag *d, AstCtx *ctx, Node *pl, const SetOverride *o)
{
    size_t len = strlen(o->text);
    uint32_t f = diag_add_file(d, SET_FILE_NAME, xstrdup(o->text), (uint32_t)len);
    const char *eq = strchr(o->text, '=');
    if (!eq) {
        diag_error(d, (Loc){(uint32_t)len, f}, DIAG_SYNTAX,
                   "expected '=' and a value: --set KEY=VALUE, as the line `KEY VALUE` of "
                   "a pipeline");
        return;
    }
    uint32_t key_end = (uint32_t)(eq - o->text);
    int kind = setting_kind(o->text, key_end);
    if (kind < 0) {
        char list[512], key[64], hint[96];
        snprintf(key, sizeof key, "%.*s", (int)(key_end < 60 ? key_end : 60), o->text);
        const char *names[N_NKINDS];
        size_t n = 0;
        for (int k = 0; k < N_NKINDS; k++)
            if (ast_is_setting((NodeKind)k))
                names[n++] = node_kind_name[k];
        diag_error(d, (Loc){0, f}, DIAG_NAME, "unknown setting '%s'%s", key,
                   diag_suggest(hint, sizeof hint, key, names, n));
        diag_note(d, (Loc){0, f}, "the settings are %s", settings_list(list, sizeof list));
        return;
    }
    uint32_t lo = o->lo > key_end ? o->lo : key_end + 1, hi = o->hi < len ? o->hi : (uint32_t)len;
    hi = hi < lo ? lo : hi;
    if (strspn(o->text + lo, " \t") >= hi - lo) {
        diag_error(d, (Loc){lo, f}, DIAG_SYNTAX, "'%s' needs a value: --set %s=VALUE",
                   node_kind_name[kind], node_kind_name[kind]);
        return;
    }
    Node *set = ast_parse_setting(d, ctx, f, key_end, lo, hi);
    if (!set)
        return;
    Node *last = set;
    while (last->next)
        last = last->next;
    /* Unlink every top-level line of that kind; the override goes where the first was. */
    Node **at = NULL;
    for (Node **pp = &pl->body; *pp;) {
        if ((*pp)->kind == kind) {
            *pp = (*pp)->next;
            if (!at)
                at = pp;
        } else {
            pp = &(*pp)->next;
        }
    }
    if (!at)
        for (at = &pl->body; *at; at = &(*at)->next)
            ;
    last->next = *at;
    *at = set;
}

void note_overrides(Diag *d)
{
    if (!d->nerr || (d->last_error.file < d->nfiles &&
                     !strcmp(d->files[d->last_error.file].path, SET_FILE_NAME)))
        return;
    for (uint32_t f = 0; f < d->nfiles; f++) {
        if (strcmp(d->files[f].path, SET_FILE_NAME))
            continue;
        /* An override a later one of the same key replaced took no part. */
        const char *t = d->files[f].text;
        size_t key = strcspn(t, "=");
        bool replaced = false;
        for (uint32_t g = f + 1; g < d->nfiles && !replaced; g++)
            replaced = !strcmp(d->files[g].path, SET_FILE_NAME) &&
                       strcspn(d->files[g].text, "=") == key && !strncmp(d->files[g].text, t, key);
        if (!replaced)
            diag_note(d, (Loc){0, f}, "the file was read with this override");
    }
}

/* Loads the main file (registered as `file`), checks where pipelines are, elaborates. */
static Pipeline *load_main(Diag *d, const LoadOpts *o, uint32_t file, char *key)
{
    int before = d->nerr;
    diag_set_expansion(d, (Span){0, 0, 0}, LOC_NONE, NULL); /* an earlier load's template */
    AstCtx ctx;
    ast_init(&ctx);
    Loader L = {.d = d, .o = o, .ctx = &ctx};
    load_file(&L, file, key, LOC_NONE);

    Program prog = {.files = L.files, .nfiles = (uint32_t)L.nfiles, .ctx = &ctx};
    bool parsed = true;
    for (size_t i = 0; i < L.nfiles; i++) {
        parsed &= L.files[i].ok;
        for (Node *n = L.files[i].items; n; n = n->next) {
            if (n->kind != N_PIPELINE)
                continue;
            if (i > 0) {
                diag_error(d, n->loc, DIAG_SYNTAX, "an imported file cannot contain a pipeline");
            } else if (prog.pipeline) {
                diag_error(d, n->loc, DIAG_SYNTAX, "a file may contain only one pipeline");
                diag_note(d, prog.pipeline->loc, "the first pipeline is here");
            } else {
                prog.pipeline = n;
            }
        }
    }
    if (parsed && !prog.pipeline && L.files[0].ok)
        diag_error(d, (Loc){0, file}, DIAG_SYNTAX, "no pipeline in '%s'", d->files[file].path);
    for (int i = 0; o && prog.pipeline && d->nerr == before && i < o->nsets; i++)
        apply_override(d, &ctx, prog.pipeline, &o->sets[i]);

    Pipeline *p = NULL;
    if (d->nerr == before)
        p = elaborate(d, &prog);
    if (p && d->nerr != before) {
        pipeline_free(p);
        p = NULL;
    }
    for (size_t i = 0; i < L.nfiles; i++)
        free(L.keys[i]);
    free(L.keys);
    free(L.files);
    free(L.stack);
    ast_free(&ctx);
    return p;
}

Pipeline *load_pipeline(Diag *d, const LoadOpts *o, const char *path)
{
    size_t len;
    Loader L = {.d = d};
    char *text = read_source(&L, path, LOC_NONE, &len);
    if (!text)
        return NULL;
    uint32_t f = diag_add_file(d, path, text, (uint32_t)len);
    if (strcmp(path, "-") == 0)
        diag_set_name(d, f, "<stdin>");
    return load_main(d, o, f, file_key(path));
}

Pipeline *load_pipeline_string(Diag *d, const LoadOpts *o, const char *name, const char *text,
                               size_t len)
{
    if (len > frontend_limits.max_file_bytes) {
        diag_error(d, LOC_NONE, DIAG_LIMIT, "'%s' is larger than %zu bytes", name,
                   frontend_limits.max_file_bytes);
        return NULL;
    }
    char *copy = xmalloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = 0;
    uint32_t f = diag_add_file(d, name, copy, (uint32_t)len);
    return load_main(d, o, f, file_key(name));
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends the templates of one parsed stdlib file (stem `file`) to *out. */
static void push_templates(const AstFile *f, const char *file, StdTemplate **out, int *n,
                           size_t *cap)
{
    for (const Node *it = f->items; it; it = it->next) {
        if (it->kind != N_TEMPLATE)
            continue;
        StdTemplate t = {.name = xstrdup(it->name), .file = xstrdup(file)};
        const Node *h = it->a; /* the header's N_CHUNKS, NULL when it has none */
        if (h) {
            const Node *num = h->a;
            bool lit = num->kind == N_NUM && num->u.num.is_int && !num->u.num.unit &&
                       !num->u.num.range_err && num->u.num.ival >= 1 &&
                       num->u.num.ival <= IR_MAX_CHUNKS;
            t.V = lit ? (int)num->u.num.ival : -1;
            t.vshape = h->op == PLACE_VSHAPE;
        }
        VEC_PUSH(*out, *n, *cap, t);
    }
}

int std_templates(Diag *d, StdTemplate **out)
{
    *out = NULL;
    const char *dir = stdlib_dir();
    DIR *dp = opendir(dir);
    if (!dp) {
        diag_error(d, LOC_NONE, DIAG_NAME, "cannot read the stdlib folder '%s': %s", dir,
                   strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t nnames = 0, capnames = 0;
    struct dirent *de;
    while ((errno = 0, de = readdir(dp)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len > 5 && de->d_name[0] != '.' && !strcmp(de->d_name + len - 5, ".pipe"))
            VEC_PUSH(names, nnames, capnames, xstrdup(de->d_name));
    }
    int read_err = errno; /* readdir's NULL is the end only when errno stays 0 */
    closedir(dp);
    if (read_err) {
        /* a partial listing would make tune search fewer templates than it says */
        diag_error(d, LOC_NONE, DIAG_NAME, "cannot read the stdlib folder '%s': %s", dir,
                   strerror(read_err));
        for (size_t i = 0; i < nnames; i++)
            free(names[i]);
        free(names);
        return -1;
    }
    if (nnames)
        qsort(names, nnames, sizeof *names, cmp_names);
    int before = d->nerr, n = 0;
    size_t cap = 0;
    StdTemplate *t = NULL;
    for (size_t i = 0; i < nnames; i++) {
        StrBuf path = {0}, shown = {0};
        sb_printf(&path, "%s/%s", dir, names[i]);
        sb_printf(&shown, "std/%s", names[i]);
        Loader L = {.d = d};
        size_t len;
        char *text = read_source(&L, path.s, LOC_NONE, &len);
        if (text) {
            uint32_t f = diag_add_file(d, path.s, text, (uint32_t)len);
            diag_set_name(d, f, shown.s);
            AstCtx ctx;
            ast_init(&ctx);
            AstFile af = {0};
            ast_parse(d, &ctx, f, &af);
            names[i][strlen(names[i]) - 5] = 0; /* the stem */
            if (af.ok)
                push_templates(&af, names[i], &t, &n, &cap);
            ast_free(&ctx);
        }
        sb_free(&path);
        sb_free(&shown);
        free(names[i]);
    }
    free(names);
    if (d->nerr != before) {
        std_templates_free(t, n);
        return -1;
    }
    *out = t;
    return n;
}

void std_templates_free(StdTemplate *t, int n)
{
    for (int i = 0; i < n; i++) {
        free(t[i].name);
        free(t[i].file);
    }
    free(t);
}
