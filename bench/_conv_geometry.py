"""Conv shapes and the chunks the torch peers cut them into for a device budget: whole samples
along N when one fits, else slabs of the first spatial dim (one sample each) with halo rows, for
the forward (and the weight gradient, whose x and dy slabs are the forward's x and y) and for the
input gradient. Pure arithmetic, no torch: the --dry-run self-tests check it with numpy."""

import math
from dataclasses import dataclass

from _units import fmt_bytes


def conv_out_len(length, k, s, p, d):
    return (length + 2 * p - d * (k - 1) - 1) // s + 1


@dataclass(frozen=True)
class ConvGeometry:
    """Forward conv x[N, C, *L] * w[K, C/groups, *k] -> y[N, K, *Lo] (torch semantics)."""
    x_shape: tuple
    w_shape: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    groups: int = 1
    itemsize: int = 4

    @classmethod
    def padded(cls, x_shape, w_shape, padding):
        """Unit stride and dilation, `padding` along every spatial dim (the benchmarks' cases). The
        groups follow from the shapes, as in torch: w holds C / groups input channels (a depthwise
        case's w is [C * multiplier, 1, *k])."""
        sp = len(x_shape) - 2
        return cls(tuple(x_shape), tuple(w_shape), (1,) * sp, (padding,) * sp, (1,) * sp,
                   groups=x_shape[1] // w_shape[1])

    @property
    def call_args(self):
        """The geometry as keyword arguments of pyooc's convolutions (and torch's)."""
        return dict(stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)

    @property
    def spatial(self):
        return len(self.x_shape) - 2

    @property
    def y_shape(self):
        lo = tuple(conv_out_len(L, k, s, p, d) for L, k, s, p, d in
                   zip(self.x_shape[2:], self.w_shape[2:], self.stride, self.padding, self.dilation))
        return (self.x_shape[0], self.w_shape[0]) + lo

    def nbytes(self, shape):
        return math.prod(shape) * self.itemsize

    @property
    def x_bytes(self):
        return self.nbytes(self.x_shape)

    @property
    def w_bytes(self):
        return self.nbytes(self.w_shape)

    @property
    def y_bytes(self):
        return self.nbytes(self.y_shape)

    @property
    def working_set_bytes(self):
        return self.x_bytes + self.w_bytes + self.y_bytes

    @property
    def flops(self):
        return 2 * math.prod(self.y_shape) * math.prod(self.w_shape[1:])

    def input_rows(self, o0, o1):
        """Input rows [lo, hi) of the first spatial dim that output rows [o0, o1) read; may leave
        [0, L) (those rows are padding zeros)."""
        k, s, p, d = self.w_shape[2], self.stride[0], self.padding[0], self.dilation[0]
        return o0 * s - p, (o1 - 1) * s - p + (k - 1) * d + 1

    def x_slab_shape(self, chunk):
        """The shape of a chunk's x-sized region: its samples and input rows (halos included; the
        whole first spatial dim when the chunk does not split it), all channels and other dims. The
        forward's input slab, the weight gradient's x slab, the input gradient's computed dx."""
        rows = chunk.in_rows if chunk.split else self.x_shape[2]
        return (chunk.n1 - chunk.n0, self.x_shape[1], rows) + tuple(self.x_shape[3:])


@dataclass(frozen=True)
class SlabChunk:
    """Samples [n0, n1) and output rows [o0, o1) of the first spatial dim. split=False: the whole
    dim, and the conv pads it itself; split=True: input rows [lo, hi) with explicit zero rows where
    they leave the tensor, and the conv pads only the other dims."""
    n0: int
    n1: int
    o0: int
    o1: int
    lo: int
    hi: int
    split: bool
    length: int  # input extent of the first spatial dim

    @property
    def clip_lo(self):
        return max(self.lo, 0)

    @property
    def clip_hi(self):
        return min(self.hi, self.length)

    @property
    def pad_lo(self):
        return self.clip_lo - self.lo

    @property
    def pad_hi(self):
        return self.hi - self.clip_hi

    @property
    def in_rows(self):
        return self.hi - self.lo


def even_size(total, most):
    """The size of the fewest pieces of at most `most` that cover `total`, made as even as possible
    (the last piece is at most one smaller). Also sizes _row_peers.py's slices of a leading dim."""
    count = -(-total // min(most, total))
    return -(-total // count)


def plan_chunks(geom, data_budget, x_copies, y_copies):
    """Chunks whose device buffers (x_copies input slabs + y_copies outputs alive at once) fit
    data_budget bytes: whole samples when one fits, else slabs of the first spatial dim (one sample
    each) with halos. Even sizes (the edge chunk is at most one row/sample smaller). Returns
    (chunks, info); raises MemoryError when not even one output row fits."""
    N, C = geom.x_shape[:2]
    K = geom.w_shape[0]
    L = geom.x_shape[2]
    Lo = geom.y_shape[2]
    inner_in = math.prod(geom.x_shape[3:])
    inner_out = math.prod(geom.y_shape[3:])
    b = geom.itemsize
    per_sample = b * (x_copies * C * L * inner_in + y_copies * K * Lo * inner_out)
    nb = data_budget // per_sample if data_budget > 0 else 0
    if nb >= 1:
        nb = even_size(N, nb)
        chunks = [SlabChunk(n0, min(n0 + nb, N), 0, Lo, -geom.padding[0], -geom.padding[0] + L, False, L)
                  for n0 in range(0, N, nb)]
        return chunks, {"mode": "n", "samples_per_chunk": nb, "chunks": len(chunks)}
    # rows_in = (rows - 1) * s + (k - 1) * d + 1, so bytes are affine in rows.
    k, s, d = geom.w_shape[2], geom.stride[0], geom.dilation[0]
    fixed = b * x_copies * C * inner_in * ((k - 1) * d + 1 - s)
    per_row = b * (x_copies * C * inner_in * s + y_copies * K * inner_out)
    rows = (data_budget - fixed) // per_row if data_budget > fixed else 0
    if rows < 1:
        raise MemoryError(f"one output row of the first spatial dim needs {fmt_bytes(fixed + per_row)}, "
                          f"the budget is {fmt_bytes(data_budget)} (a second spatial split would be needed)")
    rows = even_size(Lo, rows)
    count = -(-Lo // rows)
    chunks = []
    for n in range(N):
        for o0 in range(0, Lo, rows):
            o1 = min(o0 + rows, Lo)
            lo, hi = geom.input_rows(o0, o1)
            chunks.append(SlabChunk(n, n + 1, o0, o1, lo, hi, True, L))
    return chunks, {"mode": "slab", "rows_per_chunk": rows, "slabs_per_sample": count, "chunks": len(chunks)}


def chunk_conv_padding(geom, chunk):
    """The padding the conv applies itself for this chunk (none along a split dim)."""
    return ((0,) if chunk.split else (geom.padding[0],)) + tuple(geom.padding[1:])


# --------------------------------------------------------------------------------------------
# the input gradient (conv_backward.py): the same slabs, roles swapped


@dataclass(frozen=True)
class DataGradChunk(SlabChunk):
    """A chunk of the input gradient: dx rows [t0, t1) of the first spatial dim, from dy rows
    [o0, o1); conv_input with no padding along that dim computes dx rows [lo, hi), of which the
    target [t0, t1) is kept (neighbouring chunks own the rest)."""
    t0: int = 0
    t1: int = 0


def data_grad_rows(geom, t0, t1):
    """(o0, o1, lo, hi) for dx target rows [t0, t1): the dy rows contributing to them and the dx rows
    a padding-0 conv_input over those produces. The peers handle strides up to the dilated kernel
    span, where [lo, hi) always holds the target (the benchmark cases have stride 1)."""
    k, s, p, d = geom.w_shape[2], geom.stride[0], geom.padding[0], geom.dilation[0]
    span = (k - 1) * d + 1
    o0 = max(0, -(-(t0 + p - span + 1) // s))
    o1 = min(geom.y_shape[2], (t1 - 1 + p) // s + 1)
    lo = o0 * s - p
    hi = lo + (o1 - o0 - 1) * s + span
    if not (o0 < o1 and lo <= t0 and hi >= t1):
        raise NotImplementedError(f"torch peers: dx rows [{t0}, {t1}) are not covered by a slab (stride {s} "
                                  f"beyond the kernel span {span}?)")
    return o0, o1, lo, hi


def plan_data_grad_chunks(geom, data_budget, dy_copies, dx_copies):
    """Chunks of the input gradient whose device buffers (dy_copies dy slabs + dx_copies computed dx
    regions alive at once) fit data_budget bytes: whole samples when one fits, else slabs of the
    first spatial dim (one sample each), as even as possible. Returns (chunks, info); raises
    MemoryError when not even one dx row fits."""
    N, C, L = geom.x_shape[:3]
    K, Lo = geom.y_shape[1], geom.y_shape[2]
    inner_in, inner_out = math.prod(geom.x_shape[3:]), math.prod(geom.y_shape[3:])
    b = geom.itemsize
    per_sample = b * (dy_copies * K * Lo * inner_out + dx_copies * C * L * inner_in)
    if data_budget >= per_sample:
        nb = even_size(N, data_budget // per_sample)
        chunks = [DataGradChunk(n0, min(n0 + nb, N), 0, Lo, 0, L, False, L, 0, L) for n0 in range(0, N, nb)]
        return chunks, {"mode": "n", "samples_per_chunk": nb, "chunks": len(chunks)}

    def slab_bytes(rows):  # the largest chunk of this many target rows
        worst = 0
        for t0 in range(0, L, rows):
            o0, o1, lo, hi = data_grad_rows(geom, t0, min(t0 + rows, L))
            worst = max(worst, dy_copies * K * (o1 - o0) * inner_out + dx_copies * C * (hi - lo) * inner_in)
        return b * worst

    for count in range(1, L + 1):
        rows = -(-L // count)
        if slab_bytes(rows) <= data_budget:
            break
    else:
        raise MemoryError(f"one dx row of the first spatial dim needs {fmt_bytes(slab_bytes(1))}, the budget is "
                          f"{fmt_bytes(data_budget)} (a second spatial split would be needed)")
    chunks = []
    for n in range(N):
        for t0 in range(0, L, rows):
            t1 = min(t0 + rows, L)
            o0, o1, lo, hi = data_grad_rows(geom, t0, t1)
            chunks.append(DataGradChunk(n, n + 1, o0, o1, lo, hi, True, L, t0, t1))
    return chunks, {"mode": "slab", "rows_per_chunk": rows, "slabs_per_sample": -(-L // rows), "chunks": len(chunks)}


# --------------------------------------------------------------------------------------------
# what the --dry-run self-tests (conv_forward.py, conv_backward.py) chunk


# Geometries (x shape, w shape, stride, padding, dilation) the benchmarks' --dry-run self-tests
# emulate their torch peers' chunking on: N chunks and halo slabs, strides, dilations, uneven edges.
SELF_TEST_GEOMETRIES = [
    ((5, 3, 9, 7), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 2, 11, 6, 5), (3, 2, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ((2, 3, 13, 8), (2, 3, 3, 3), (2, 1), (2, 0), (1, 2)),
    ((1, 2, 17, 5, 4), (2, 2, 5, 1, 3), (2, 1, 1), (2, 0, 1), (2, 1, 1)),
    ((3, 4, 10), (5, 4, 4), (1,), (0,), (3,)),
]


def self_test_budgets(per_sample):
    """Data budgets around one sample's bytes: whole samples, then ever thinner slabs."""
    return (per_sample * 3, per_sample - 1, per_sample // 3, per_sample // 5)
