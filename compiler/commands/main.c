/* main.c - `pipec COMMAND [options] FILE...`: dispatches to cmd_NAME of cmds.h.
 *
 *     pipec --help | -h            the commands
 *     pipec --version | -V         the version
 *     pipec help [COMMAND]         a command's usage
 *     pipec COMMAND --help         the same
 *
 * Each command parses its own options (getopt_long) with argv[0] = the command name and
 * returns the exit status: 0 ok, 1 errors in the input, 2 usage. main then closes
 * standard output (util.h close_stdout): a write error there is exit status 1. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cmds.h"
#include "diag.h"
#include "driver.h"
#include "heap.h"
#include "util.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"check", cmd_check, "diagnostics: completeness, dependencies, deadlock, memory"},
    {"print", cmd_print, "the canonical explicit form (templates expanded, costs derived)"},
    {"sim", cmd_sim, "simulate one iteration: makespan, bubbles, peak memory, timelines"},
    {"opt", cmd_opt, "run transformation passes and print the result"},
    {"diff", cmd_diff, "two schedules side by side: metrics and per-stage op order"},
    {"emit", cmd_emit, "write per-rank C sources and build files"},
    {"compile", cmd_compile, "emit and compile the per-rank programs (alias: build)"},
    {"build", cmd_compile, NULL},
    {"run", cmd_run, "build into a cache folder and run the schedule"},
    {"import-csv", cmd_import_csv, "PyTorch pipelining schedule CSV -> .pipe"},
    {"export-csv", cmd_export_csv, ".pipe -> PyTorch pipelining schedule CSV"},
    {"tune", cmd_tune, "search schedule variants under the cost model"},
    {"compare", cmd_compare, "a table of figures per file and per --set sweep point"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: pipec COMMAND [options] FILE...\n"
                 "       pipec help COMMAND | --help | --version\n\n"
                 "pipec compiles pipeline-parallel training schedules (.pipe files).\n\n"
                 "Commands:\n");
    for (size_t i = 0; i < ARRAY_LEN(commands); i++)
        if (commands[i].summary)
            fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nOptions every command takes:\n"
                 "  -I, --include DIR   search DIR for imports (repeatable; also $PIPEC_PATH)\n"
                 "  --set KEY=VALUE     override a pipeline setting (repeatable)\n"
                 "  -Werror             treat warnings as errors\n"
                 "\n`pipec help COMMAND` shows a command's options. Docs: docs/*.md.\n");
}

static int find_command(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(commands); i++)
        if (!strcmp(commands[i].name, name))
            return (int)i;
    return -1;
}

/* ", did you mean 'sim'?" for an unknown command, or "". */
static char *suggest_command(char *buf, size_t len, const char *name)
{
    const char *names[ARRAY_LEN(commands)];
    for (size_t i = 0; i < ARRAY_LEN(commands); i++)
        names[i] = commands[i].name;
    return diag_suggest(buf, len, name, names, ARRAY_LEN(commands));
}

/* The long options cmd documents: every "--NAME" in its usage text, plus --help. */
static size_t documented_options(const char *cmd, char names[][24], size_t max)
{
    size_t n = 0;
    snprintf(names[n++], 24, "help");
    const char *t = driver_usage_text(cmd);
    for (const char *s = t ? strstr(t, "--") : NULL; s && n < max; s = strstr(s, "--")) {
        s += 2;
        size_t k = strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-");
        if (k && k < 24) {
            bool dup = false;
            for (size_t i = 0; i < n; i++)
                dup |= strlen(names[i]) == k && !strncmp(names[i], s, k);
            if (!dup)
                snprintf(names[n++], 24, "%.*s", (int)k, s);
        }
        s += k;
    }
    return n;
}

/* Every "--NAME" argument of cmd (before "--") must be an option its usage text
 * documents, or a prefix of one (getopt_long's abbreviations); else a usage error with
 * the closest documented option. Returns 0 or 2. */
static int check_options(const char *cmd, int argc, char **argv)
{
    char names[64][24];
    size_t n = documented_options(cmd, names, 64);
    const char *ptr[64];
    for (size_t i = 0; i < n; i++)
        ptr[i] = names[i];
    for (int a = 0; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "--"))
            break;
        if (strncmp(arg, "--", 2)) /* "--" itself ended the loop above */
            continue;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = !strncmp(names[i], name, strlen(name));
        if (known)
            continue;
        const char *c = diag_closest(name, ptr, n);
        fprintf(stderr, "pipec %s: unknown option '--%s'", cmd, name);
        if (c)
            fprintf(stderr, ", did you mean '--%s'?", c);
        fputc('\n', stderr);
        driver_usage(stderr, cmd);
        return 2;
    }
    return 0;
}

/* True when arg is --help or an abbreviation of it that no other option of cmd shares
 * (--he, --hel; --h too where cmd has no other --h... option): getopt_long's rule for
 * abbreviations, applied to the --help every command takes. */
static bool asks_help(const char *cmd, const char *arg)
{
    size_t k = strlen(arg);
    if (k < 3 || strncmp(arg, "--help", k))
        return false;
    char names[64][24];
    size_t n = documented_options(cmd, names, 64);
    for (size_t i = 1; i < n; i++) /* names[0] is help */
        if (!strncmp(names[i], arg + 2, k - 2))
            return false;
    return true;
}

static int help(const char *name)
{
    if (!name) {
        usage(stdout);
        return 0;
    }
    if (find_command(name) < 0) {
        char hint[64];
        fprintf(stderr, "pipec: unknown command '%s'%s\n", name,
                suggest_command(hint, sizeof hint, name));
        usage(stderr);
        return 2;
    }
    driver_usage(stdout, name);
    return 0;
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h"))
        return help(NULL);
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("pipec %s\n", PIPEC_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help")) {
        if (argc > 3) {
            usage(stderr);
            return 2;
        }
        return help(argc == 3 ? argv[2] : NULL);
    }
    int i = find_command(cmd);
    if (i < 0) {
        char hint[64] = "";
        if (cmd[0] != '-')
            suggest_command(hint, sizeof hint, cmd);
        fprintf(stderr, "pipec: %s '%s'%s\n", cmd[0] == '-' ? "unknown option" : "unknown command",
                cmd, hint);
        usage(stderr);
        return 2;
    }
    for (int a = 2; a < argc; a++) {
        if (!strcmp(argv[a], "--"))
            break;
        if (asks_help(cmd, argv[a]) || !strcmp(argv[a], "-h")) {
            driver_usage(stdout, cmd);
            return 0;
        }
    }
    if (check_options(cmd, argc - 2, argv + 2))
        return 2;
    return commands[i].fn(argc - 1, argv + 1);
}

/* Every command reports on stdout: a write error there (a full disk, /dev/full) makes
 * the exit status 1 with a message, whatever the command returned. */
int main(int argc, char **argv)
{
    heap_tune();
    int status = dispatch(argc, argv);
    if (close_stdout() != 0 && status == 0)
        status = 1;
    return status;
}
