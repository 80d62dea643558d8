"""Torch chunk loops over the leading dim, for the layers whose slices along it are independent
(element-wise ops over the flattened arrays, pooling / softmax / bias over N, F.linear over rows):
the naive loop and the expert pipeline of bench/_conv_peers.py's conv peers, with the conv geometry
replaced by even slices [r0, r1). fn(*resident, *row slices) computes one slice's output on the
device. Both peers follow _measure.fit_peer's protocol (prepare(data_budget), run(), release(),
info); torch is only touched through the tensors they are given."""

import math

from _conv_geometry import even_size
from _streamed_peer import StreamedPeer
from _units import fmt_bytes


def plan_rows(total, row_bytes, data_budget, unit="rows"):
    """Slices [r0, r1) of `total` rows, each row taking row_bytes of the device, at most
    data_budget bytes per slice and as even as possible (the last is at most one row smaller).
    Returns (chunks, info); raises MemoryError when not even one row fits."""
    rows = data_budget // row_bytes if data_budget > 0 else 0
    if rows < 1:
        raise MemoryError(f"one of the {unit} needs {fmt_bytes(row_bytes)} on the device, the budget is "
                          f"{fmt_bytes(max(data_budget, 0))}")
    rows = even_size(total, rows)
    chunks = [(r0, min(r0 + rows, total)) for r0 in range(0, total, rows)]
    return chunks, {"mode": "rows", "unit": unit, "rows_per_chunk": rows, "chunks": len(chunks)}


def row_bytes(t):
    """Bytes of one slice of the leading dim of a tensor."""
    return t.element_size() * math.prod(t.shape[1:])


class _RowPeer:
    """What both loops share: host tensors `rows` (sliced), `resident` (whole) and `out` (sliced like
    rows; with in_place it is rows[0] itself, written back from the input's device copy)."""

    def __init__(self, torch, fn, rows, resident, out, in_place, unit, scratch_row_bytes=0):
        self.torch, self.fn = torch, fn
        self.rows, self.resident, self.out = list(rows), list(resident), out
        self.in_place, self.unit, self.scratch = in_place, unit, scratch_row_bytes
        self.in_row = sum(row_bytes(t) for t in self.rows)
        self.out_row = 0 if in_place else row_bytes(out)
        self.chunks, self.info = [], {}

    def plan(self, data_budget, copies):
        """copies of each slice's inputs and output alive at once, plus fn's temporaries for one."""
        per_row = copies * (self.in_row + self.out_row) + self.scratch
        return plan_rows(self.out.shape[0], per_row, data_budget, self.unit)

    def release(self):
        pass


class NaiveTorchRows(_RowPeer):
    """What most people write: pageable tensors, per slice .cuda() -> fn -> .cpu() into the host
    output, everything on the default stream."""

    name = "naive_torch"

    def prepare(self, data_budget):
        self.chunks, self.info = self.plan(data_budget, 1)

    def run(self):
        resident = [t.cuda() for t in self.resident]
        for r0, r1 in self.chunks:
            y = self.fn(*resident, *[t[r0:r1].cuda() for t in self.rows])
            self.out[r0:r1] = y.cpu()
            del y


class ExpertTorchRows(StreamedPeer, _RowPeer):
    """The fair peer, as _conv_peers.ExpertTorchConv: pinned host tensors; H2D, compute and D2H streams
    chained by events; `buffers` preallocated input slots, so slice i+1 loads while slice i computes
    and slice i-1 goes back; at most `buffers` outputs alive. An in-place op writes back from its
    input slot, so that slot is reused only once its D2H is done."""

    name = "expert_torch"

    def __init__(self, torch, fn, rows, resident, out, in_place, unit, copier, scratch_row_bytes=0, buffers=2):
        super().__init__(torch, fn, rows, resident, out, in_place, unit, scratch_row_bytes)
        self.init_streams(torch, copier, buffers)

    def prepare(self, data_budget):
        torch = self.torch
        self.release()
        self.chunks, self.info = self.plan(data_budget, self.buffers)
        n = max(r1 - r0 for r0, r1 in self.chunks)
        self.slots = [[torch.empty((n,) + tuple(t.shape[1:]), dtype=t.dtype, device="cuda") for t in self.rows]
                      for _ in range(self.buffers)]
        self.info.update(buffers=self.buffers, slot_bytes=n * self.in_row, copy_method=self.copier.method)

    def _load(self, ch, b):
        r0, r1 = ch
        args = [slot[:r1 - r0] for slot in self.slots[b]]
        for d, t in zip(args, self.rows):
            self.copier.copy(d, t[r0:r1], self.h2d)
        return args

    def run(self):
        self.start_streams()
        resident = self.upload(self.resident)
        self.stream_chunks(self._load, lambda ch, args: self.fn(*resident, *args),
                           lambda ch, y: self.copier.copy(self.out[ch[0]:ch[1]], y, self.d2h),
                           # an in-place result is its input slot: reuse that only once it is back
                           slot_free=self.out_done if self.in_place else None)
