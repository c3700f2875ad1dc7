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
#include <stdio.h>
#include <string.h>

#include "cmds.h"
#include "driver.h"
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
                 "\n`pipec help COMMAND` shows a command's options. Docs: docs/*.md.\n");
}

static int find_command(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(commands); i++)
        if (!strcmp(commands[i].name, name))
            return (int)i;
    return -1;
}

static int help(const char *name)
{
    if (!name) {
        usage(stdout);
        return 0;
    }
    if (find_command(name) < 0) {
        fprintf(stderr, "pipec: unknown command '%s'\n", name);
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
        fprintf(stderr, "pipec: %s '%s'\n", cmd[0] == '-' ? "unknown option" : "unknown command", cmd);
        usage(stderr);
        return 2;
    }
    for (int a = 2; a < argc; a++) {
        if (!strcmp(argv[a], "--"))
            break;
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            driver_usage(stdout, cmd);
            return 0;
        }
    }
    return commands[i].fn(argc - 1, argv + 1);
}

/* Every command reports on stdout: a write error there (a full disk, /dev/full) makes
 * the exit status 1 with a message, whatever the command returned. */
int main(int argc, char **argv)
{
    int status = dispatch(argc, argv);
    if (close_stdout() != 0 && status == 0)
        status = 1;
    return status;
}
