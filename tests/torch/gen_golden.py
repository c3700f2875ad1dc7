#!/usr/bin/env python3
"""gen_golden.py - regenerate the PyTorch reference orders in tests/torch/.

    python3 tests/torch/gen_golden.py OUTDIR

Builds PyTorch's own schedule classes (torch.distributed.pipelining.schedules) for a
grid of (P, M, V) and writes, for each, OUTDIR/<template>_<P>_<M>_<V>.csv: one line
per rank with that rank's compute actions in order, in the spelling of
`pipec export-csv` (docs/csv.md): `<stage><F|I|B|W><microbatch>`, empty (bubble)
cells dropped and `OVERLAP_F_B` pairs written as their two sub-actions. The stages
are stand-ins that carry only what the schedule generators read (group size, rank,
stage count); no process group, no model. OUTDIR/VERSION records the PyTorch version.

Needs torch; the tests that read the files do not (tests/t_schedules.sh).
"""
import os
import sys

import torch
from torch.distributed.pipelining import schedules as S
from torch.distributed.pipelining.stage import _PipelineStageBase

# pipec template -> PyTorch class; the (P, M, V) grid each is compared on.
GRID = {
    "zbv": ("ScheduleZBVZeroBubble", [(1, 1, 2), (1, 3, 2), (2, 2, 2), (2, 4, 2), (2, 7, 2),
                                      (3, 3, 2), (3, 6, 2), (3, 11, 2), (4, 4, 2), (4, 8, 2),
                                      (4, 13, 2), (5, 16, 2)]),
    "dualpipev": ("ScheduleDualPipeV", [(1, 2, 2), (1, 5, 2), (2, 4, 2), (2, 7, 2), (3, 6, 2),
                                        (3, 9, 2), (4, 8, 2), (4, 10, 2), (4, 13, 2), (5, 12, 2)]),
    "interleaved_zb": ("ScheduleInterleavedZeroBubble",
                       [(1, 4, 2), (2, 4, 1), (2, 4, 2), (2, 8, 2), (2, 3, 2), (3, 6, 2),
                        (3, 2, 3), (4, 8, 2), (4, 8, 3), (4, 4, 2), (4, 3, 2), (4, 10, 2),
                        (4, 12, 2), (5, 10, 3)]),
    "looped_bfs": ("ScheduleLoopedBFS", [(1, 3, 2), (2, 4, 1), (2, 4, 2), (3, 5, 2), (4, 8, 2),
                                         (4, 2, 3), (3, 7, 3)]),
    "interleaved": ("ScheduleInterleaved1F1B", [(2, 4, 2), (4, 8, 2), (4, 8, 3), (3, 6, 2),
                                                (4, 4, 2)]),
}


class Stage(_PipelineStageBase):
    """A stage with no module and no communicator: the generators read only these."""

    def __init__(self, index, num_stages, group_size, group_rank):
        self.stage_index = index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.group = None
        self.submod = None
        self.stage_index_to_group_rank = {}

    def _create_grad_recv_info(self, *args, **kwargs):
        return ()

    def _prepare_forward_infra(self, *args, **kwargs):
        return ()

    @property
    def is_first(self):
        return self.stage_index == 0

    @property
    def is_last(self):
        return self.stage_index == self.num_stages - 1


def build(cls, P, M, V):
    style_v = cls in (S.ScheduleZBVZeroBubble, S.ScheduleDualPipeV)
    if style_v:
        idx = [0, 2 * P - 1]          # rank 0 holds stages 0 and 2P-1
    else:
        idx = [c * P for c in range(V)]
    stages = [Stage(i, P * V, P, 0) for i in idx]
    sched = cls(stages, M, loss_fn=lambda a, b: a)
    return sched.pipeline_order


def flat(action):
    if action is None:
        return []
    if getattr(action, "sub_actions", None):
        out = []
        for a in action.sub_actions:
            out += flat(a)
        return out
    return [f"{action.stage_index}{action.computation_type.value}{action.microbatch_index}"]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    bad = 0
    for name, (clsname, grid) in GRID.items():
        cls = getattr(S, clsname)
        for P, M, V in grid:
            try:
                order = build(cls, P, M, V)
            except Exception as e:  # a point PyTorch itself rejects: recorded, not written
                print(f"{name} {P} {M} {V}: {type(e).__name__}: {e}".splitlines()[0])
                bad += 1
                continue
            with open(os.path.join(out, f"{name}_{P}_{M}_{V}.csv"), "w") as f:
                for r in range(P):
                    cells = []
                    for a in order[r]:
                        cells += flat(a)
                    f.write(",".join(cells) + "\n")
    with open(os.path.join(out, "VERSION"), "w") as f:
        f.write(f"torch {torch.__version__}\n")
    print(f"torch {torch.__version__}; {bad} points rejected")


if __name__ == "__main__":
    main()
