/* zz_pending.c - weak stand-ins for entry points whose modules are not built yet, so
 * that bin/pipec links while the tree grows. A strong definition in another object
 * replaces each one.
 *
 * The name sorts last among the compiler sources on purpose: the linker takes objects out of
 * build/libpipec.a in member order, and a weak definition met first would satisfy the
 * reference and leave the real module in the archive. Delete an entry once its module
 * exists; delete the file once it is empty. */
#include <stdio.h>

#include "cmds.h"
#include "frontend.h"
#include "ir.h"

#define PENDING(name, cmd)                                              \
    __attribute__((weak)) int cmd_##name(int argc, char **argv)         \
    {                                                                   \
        (void)argc;                                                     \
        (void)argv;                                                     \
        fprintf(stderr, "pipec: '%s' is not built yet\n", cmd);         \
        return 2;                                                       \
    }

PENDING(tune, "tune")

__attribute__((weak)) Pipeline *load_pipeline(Diag *d, const LoadOpts *o, const char *path)
{
    (void)o;
    diag_error(d, LOC_NONE, DIAG_SYNTAX, "%s: the front end is not built yet", path);
    return NULL;
}

__attribute__((weak)) Pipeline *load_pipeline_string(Diag *d, const LoadOpts *o, const char *name,
                                                    const char *text, size_t len)
{
    (void)o;
    (void)text;
    (void)len;
    diag_error(d, LOC_NONE, DIAG_SYNTAX, "%s: the front end is not built yet", name);
    return NULL;
}
