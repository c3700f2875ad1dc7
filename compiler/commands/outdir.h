/* outdir.h - the folders generated programs go to: the output folder of `pipec emit`
 * and `pipec compile`, which a failure leaves either as it was or holding exactly the
 * new files, and the build cache of `pipec run`, one folder per program keyed by a hash
 * of its sources, the target and the runtime libraries (docs/runtime.md). */
#ifndef PIPEC_OUTDIR_H
#define PIPEC_OUTDIR_H

#include <stdbool.h>
#include <stdint.h>

#include "emit_c.h"
#include "toolchain.h"

/* Writes every file of out into the folder outdir so that, whatever fails (a full
 * disk, an I/O error, out of memory), the folder is either as it was or holds exactly
 * the new files: they go into a fresh folder beside it, which then takes its place in
 * one rename. An existing folder must hold only files pipec writes (sources, headers,
 * objects, the Makefile, executables). Returns 0, or 1 after a message that names the
 * file or folder that failed. */
int write_output_folder(const EmitOut *out, const char *outdir);

/* The cache key of program out built for t: FNV-1a 64 over the generated files, the
 * pipec version, the target and the size and modification time of the runtime
 * libraries it links (a rebuilt runtime invalidates the cache). */
uint64_t hash_out(const EmitOut *out, Target t);

/* The build cache's root folder (allocated): opt (--cache) when given, else
 * $XDG_CACHE_HOME/pipec, else $HOME/.cache/pipec, else .cache/pipec. */
char *cache_root(const char *opt);

/* Makes sure the cache folder dir holds the built program exe: writes the generated
 * files and builds them unless an earlier run did (saying so on stderr unless quiet,
 * with the rank count nranks). Returns 0, or 1 after a message. */
int build_cached(const EmitOut *eo, Target t, const char *dir, const char *exe, int nranks,
                 bool quiet);

#endif
