/* csv.h - PyTorch pipelining schedule CSVs (torch.distributed.pipelining, the files
 * written by PipelineScheduleMulti._dump_csv and read by _load_csv). docs/csv.md has
 * the full mapping.
 *
 * A CSV has one row per rank; each cell is an action `<stage><type><microbatch>`:
 *   F  forward                     -> F
 *   I  backward, input grads only  -> B (the same micro-batch and stage must have a W)
 *   W  backward, weight grads      -> W (needs an I, or a B in the older spelling)
 *   B  full backward; in PyTorch before 2.6 the input-grad half -> B
 *   BW full backward (PyTorch before 2.6) -> B (no W for that micro-batch and stage)
 *   (0F7;7B3)OVERLAP_F_B           -> OVERLAP_F_B then its two sub-actions, in order
 *   SEND_F RECV_F SEND_B RECV_B UNSHARD RESHARD REDUCE_GRAD: kept (Action of ir.h)
 *   empty cells (bubbles): skipped
 * PyTorch's stage index is pipec's virtual stage. P = rows, V = stages / P, M = the
 * largest micro-batch + 1; the placement (looped = `interleaved`, or `vshape`) is
 * inferred from which rank holds which stage. */
#ifndef PIPEC_CSV_H
#define PIPEC_CSV_H

#include <stdint.h>

#include "diag.h"
#include "ir.h"
#include "util.h"

/* Default costs of an imported schedule (ms): F, the whole backward B, and W when the
 * CSV splits backwards, so that I = b - w = W = F as in the zero-bubble papers. */
#define CSV_COST_F 1.0
#define CSV_COST_B 2.0
#define CSV_COST_W 1.0

/* Reads the CSV text of registered file `file` (diag_add_file) into a new pipeline
 * named `name` (an identifier), every op located at its cell. Returns NULL after
 * reporting diagnostics in d: `syntax` (unreadable cell or action), `placement` (a stage
 * on two ranks, stages not evenly spread, neither looped nor V-shape), `missing` (an I
 * without its W, a W without its I, a stage index with no actions, no compute action at
 * all), `value` (a W after a full backward of the same micro-batch), `limit` (more
 * stages, chunks, micro-batches or ops than ir.h allows). Completeness, order and
 * deadlocks are left to `pipec check` on the result. */
Pipeline *csv_import(Diag *d, uint32_t file, const char *name);

/* Action spellings on export. CSV_CURRENT: PyTorch 2.6 and later (I = backward input,
 * B = full backward). CSV_LEGACY: earlier releases and PyTorch's ZB1P test artifacts
 * (B = backward input, BW = full backward). Import reads both. */
typedef enum CsvFormat { CSV_CURRENT, CSV_LEGACY } CsvFormat;

/* The comment line import-csv writes after its header when the CSV was in the legacy
 * dialect; export-csv then writes that dialect back unless --current or --legacy says
 * otherwise. */
#define CSV_LEGACY_MARK "# pipec: csv dialect legacy (B = input gradients, BW = full backward)"

/* csv_import, also telling the dialect the actions were spelt in (fmt may be NULL):
 * legacy when a full backward is spelt BW, or when W splits backwards and no I appears. */
Pipeline *csv_import_dialect(Diag *d, uint32_t file, const char *name, CsvFormat *fmt);

/* Appends the CSV of p to out: one line per rank ("\n" endings), actions in listed
 * order, F -> F, W -> W, and B -> the input-gradient spelling when a W of the same
 * (virtual stage, micro-batch) exists, else the full-backward spelling of fmt; the
 * runtime actions p keeps (p->actions) at their places, an OVERLAP_F_B as the
 * composite "(a;b)OVERLAP_F_B" of the two ops after it. No bubble cells are written.
 * R, SO, SI, OG and LW ops and `dep` edges have no PyTorch action: they are left out
 * with one warning per kind. Never fails; returns the number of ops left out. */
uint64_t csv_export(Diag *d, const Pipeline *p, CsvFormat fmt, StrBuf *out);

/* The comms form of p, lowered as PyTorch's test of its ZB1P artifact lowers a compute
 * schedule (test_schedule.py test_csv): _merge_bw (an I directly followed by its W is
 * one full backward), then _add_send_recv (torch/distributed/pipelining/schedules.py:
 * after every F whose next stage is on another rank a SEND_F, after every backward
 * whose previous stage is on another rank a SEND_B, and the matching RECV appended to
 * the receiver's row at that moment; a rank's next action waits until its input was
 * received or computed on the same rank). SEND/RECV actions p keeps are replaced; its
 * other runtime actions stay. Returns the errors reported: `deadlock` when the
 * lowering cannot go on (PyTorch: "Malformed compute schedule"), `limit` when the
 * (virtual stage, micro-batch) table would exceed 2^28 entries; out is unchanged
 * then. */
int csv_export_comms(Diag *d, const Pipeline *p, CsvFormat fmt, StrBuf *out);

/* A pipeline name from a path: the file name without folders and extension, with every
 * character outside [A-Za-z0-9_] replaced by '_' and a leading '_' before a digit.
 * Returns a heap string. */
char *csv_name_from_path(const char *path);

#endif
