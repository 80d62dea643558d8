"""The torch peers of the convolutions: what pyooc is measured against, held to the same device
budget. For the forward (NaiveTorchConv, ExpertTorchConv) and the input and weight gradients
(NaiveTorchGrad, ExpertTorchGrad): a naive chunk loop, what most people write, and an expert
pipeline, what a careful torch programmer writes by hand. Each follows _measure.fit_peer's protocol
(prepare(data_budget), run(), release(), info); chunks come from _conv_geometry.py. torch is passed
in, never imported."""

import math

from _conv_geometry import chunk_conv_padding, plan_chunks, plan_data_grad_chunks
from _streamed_peer import StreamedPeer


def torch_conv_fn(torch, spatial):
    F = torch.nn.functional
    return {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]


def torch_grad_fns(torch, spatial):
    """torch.nn.grad's (input gradient, weight gradient) for 1, 2 or 3 spatial dims."""
    g = torch.nn.grad
    return {1: (g.conv1d_input, g.conv1d_weight), 2: (g.conv2d_input, g.conv2d_weight),
            3: (g.conv3d_input, g.conv3d_weight)}[spatial]


# --------------------------------------------------------------------------------------------
# a chunk's x slab on the device, as each kind of peer gets it


def naive_x_slab(torch, geom, x_host, ch):
    """The naive way: the chunk's rows of x (clipped to the tensor) .cuda(), then F.pad's copy with
    the halo's zero rows where they leave x (the slab is alive twice)."""
    if ch.split:
        xd = x_host[ch.n0:ch.n1, :, ch.clip_lo:ch.clip_hi].cuda()
        if ch.pad_lo or ch.pad_hi:
            xd = torch.nn.functional.pad(xd, [0, 0] * (geom.spatial - 1) + [ch.pad_lo, ch.pad_hi])
        return xd
    return x_host[ch.n0:ch.n1].cuda()


def load_x_slab(copier, stream, x_host, ch, xd):
    """The expert way: enqueues the chunk's rows of x into the preallocated device slab xd on
    `stream` with one strided copy (RegionCopier), and zeroes on the device the halo rows that
    leave x, so no padded copy is ever made."""
    if ch.split:
        if ch.pad_lo:
            xd[:, :, :ch.pad_lo].zero_()
        if ch.pad_hi:
            xd[:, :, ch.in_rows - ch.pad_hi:].zero_()
        copier.copy(xd[:, :, ch.pad_lo:ch.in_rows - ch.pad_hi], x_host[ch.n0:ch.n1, :, ch.clip_lo:ch.clip_hi], stream)
    else:
        copier.copy(xd, x_host[ch.n0:ch.n1], stream)


def slot_view(flat, shape):
    """A chunk's tensor in the front of a flat preallocated slot sized for the largest chunk."""
    return flat[:math.prod(shape)].view(shape)


# --------------------------------------------------------------------------------------------
# the forward


class NaiveTorchConv:
    """What most people write: pageable torch tensors (from numpy), per chunk .cuda() -> conv ->
    .cpu() into the host output, everything on the default stream. Chunks are sized for the same
    device budget as pyooc (a slab chunk with halos holds its input twice: the slice and F.pad's
    copy)."""

    name = "naive_torch"

    def __init__(self, torch, geom, x_host, w_host, y_host):
        self.torch, self.geom = torch, geom
        self.x, self.w, self.y = x_host, w_host, y_host
        self.conv = torch_conv_fn(torch, geom.spatial)
        self.chunks = []
        self.info = {}

    def prepare(self, data_budget):
        chunks, info = plan_chunks(self.geom, data_budget, x_copies=1, y_copies=1)
        if info["mode"] == "slab":  # the sliced input and its padded copy are both alive
            chunks, info = plan_chunks(self.geom, data_budget, x_copies=2, y_copies=1)
        self.chunks, self.info = chunks, info

    def release(self):
        pass

    def run(self):
        torch, g = self.torch, self.geom
        w = self.w.cuda()
        for ch in self.chunks:
            xd = naive_x_slab(torch, g, self.x, ch)
            out = self.conv(xd, w, None, g.stride, chunk_conv_padding(g, ch), g.dilation, g.groups)
            del xd
            self.y[ch.n0:ch.n1, :, ch.o0:ch.o1] = out.cpu()
            del out


class ExpertTorchConv(StreamedPeer):
    """The fair peer: what a careful torch programmer writes by hand. Pinned host tensors; an H2D
    stream, a compute stream and a D2H stream chained by events; double buffering (two preallocated
    input slots, at most two chunk outputs alive), so chunk i+1 loads while chunk i computes and
    chunk i-1 is written back; strided slabs move with one cudaMemcpy2DAsync each (RegionCopier);
    halo rows outside the tensor are zero-filled on the device. w is uploaded once per call. Sized
    for the same device budget as pyooc (chunks of whole samples, else slabs of the first spatial
    dim with halos)."""

    name = "expert_torch"

    def __init__(self, torch, geom, x_host, w_host, y_host, copier, buffers=2):
        self.init_streams(torch, copier, buffers)
        self.geom = geom
        self.x, self.w, self.y = x_host, w_host, y_host
        self.conv = torch_conv_fn(torch, geom.spatial)
        self.w_ready = torch.cuda.Event()
        self.chunks = []
        self.info = {}

    def prepare(self, data_budget):
        torch, g = self.torch, self.geom
        self.release()
        self.chunks, self.info = plan_chunks(g, data_budget, x_copies=self.buffers, y_copies=self.buffers)
        numel = max(math.prod(g.x_slab_shape(ch)) for ch in self.chunks)
        self.slots = [torch.empty(numel, dtype=torch.float32, device="cuda") for _ in range(self.buffers)]
        self.info.update(buffers=self.buffers, slot_bytes=numel * 4, copy_method=self.copier.method)

    def _load(self, ch, b):
        """Enqueues chunk ch's input slab into slot b (zero rows where a halo leaves x)."""
        xd = slot_view(self.slots[b], self.geom.x_slab_shape(ch))
        load_x_slab(self.copier, self.h2d, self.x, ch, xd)
        return xd

    def run(self):
        g = self.geom
        self.start_streams()
        w, = self.upload([self.w])
        self.stream_chunks(
            self._load,
            lambda ch, xd: self.conv(xd, w, None, g.stride, chunk_conv_padding(g, ch), g.dilation, g.groups),
            lambda ch, out: self.copier.copy(self.y[ch.n0:ch.n1, :, ch.o0:ch.o1], out, self.d2h))


# --------------------------------------------------------------------------------------------
# the gradients (conv_backward.py): the same chunking, roles swapped


class _GradPeer:
    """What the gradient peers share: the operation ("data": dx from dy and w; "filter": dw from x
    and dy), torch.nn.grad's function for it, and the chunking for a device budget (copies: how many
    of each chunk buffer are alive at once)."""

    def __init__(self, torch, op, geom, x_host, w_host, dy_host, out_host):
        self.torch, self.op, self.geom = torch, op, geom
        self.x, self.w, self.dy, self.out = x_host, w_host, dy_host, out_host
        grad_input, grad_weight = torch_grad_fns(torch, geom.spatial)
        self.grad = grad_input if op == "data" else grad_weight
        self.chunks, self.info = [], {}

    def plan(self, data_budget, copies):
        if self.op == "data":
            return plan_data_grad_chunks(self.geom, data_budget, copies, copies)
        return plan_chunks(self.geom, data_budget, copies, copies)  # x slab and dy tile, as the forward's x and y

    def compute(self, ch, a, b):
        """The chunk's gradient on the device: a, b are (w, dy slab) or (x slab, dy slab)."""
        g = self.geom
        padding = chunk_conv_padding(g, ch)
        if self.op == "data":
            return self.grad(g.x_slab_shape(ch), a, b, g.stride, padding, g.dilation, g.groups)
        return self.grad(a, tuple(g.w_shape), b, g.stride, padding, g.dilation, g.groups)

    def kept(self, ch, dx):
        """The part of a computed dx region that is the chunk's target."""
        return dx[:, :, ch.t0 - ch.lo:ch.t1 - ch.lo] if ch.split else dx

    def release(self):
        pass


class NaiveTorchGrad(_GradPeer):
    """What most people write: pageable tensors, per chunk .cuda() -> torch.nn.grad -> .cpu(), all on
    the default stream; dw accumulated on the device. Sized for the same budget as pyooc."""

    name = "naive_torch"

    def prepare(self, data_budget):
        self.chunks, self.info = self.plan(data_budget, 2)  # a slab and its padded copy / a result and its slice

    def run(self):
        torch, g = self.torch, self.geom
        if self.op == "data":
            w = self.w.cuda()
            for ch in self.chunks:
                dy = self.dy[ch.n0:ch.n1, :, ch.o0:ch.o1].cuda()
                self.out[ch.n0:ch.n1, :, ch.t0:ch.t1] = self.kept(ch, self.compute(ch, w, dy)).cpu()
            return
        dw = torch.zeros(tuple(g.w_shape), device="cuda")
        for ch in self.chunks:
            x = naive_x_slab(torch, g, self.x, ch)
            dw += self.compute(ch, x, self.dy[ch.n0:ch.n1, :, ch.o0:ch.o1].cuda())
        self.out.copy_(dw.cpu())


class ExpertTorchGrad(StreamedPeer, _GradPeer):
    """The fair peer, as ExpertTorchConv is for the forward: pinned host tensors, H2D / compute / D2H
    streams chained by events, double buffering of the input slabs, strided slabs moved with one
    cudaMemcpy2DAsync each (RegionCopier), halo rows zeroed on the device; the input gradient's
    target slices go back with strided D2H, the weight gradient accumulates on the device and goes
    back once. Sized for the same budget as pyooc."""

    name = "expert_torch"

    def __init__(self, torch, op, geom, x_host, w_host, dy_host, out_host, copier, buffers=2):
        super().__init__(torch, op, geom, x_host, w_host, dy_host, out_host)
        self.init_streams(torch, copier, buffers)

    def _dy_shape(self, ch):
        g = self.geom
        return (ch.n1 - ch.n0, g.y_shape[1], ch.o1 - ch.o0) + tuple(g.y_shape[3:])

    def prepare(self, data_budget):
        torch, g = self.torch, self.geom
        self.release()
        self.chunks, self.info = self.plan(data_budget, self.buffers)
        # Per slot: the dy slab (data), or the x slab and the dy slab (filter), as flat buffers.
        dy_numel = max(math.prod(self._dy_shape(ch)) for ch in self.chunks)
        x_numel = 0 if self.op == "data" else max(math.prod(g.x_slab_shape(ch)) for ch in self.chunks)
        self.slots = [(torch.empty(x_numel, device="cuda"), torch.empty(dy_numel, device="cuda"))
                      for _ in range(self.buffers)]
        self.info.update(buffers=self.buffers, slot_bytes=4 * (x_numel + dy_numel), copy_method=self.copier.method)

    def _load(self, ch, b):
        """Enqueues the chunk's input slabs into slot b on the H2D stream; returns the device views."""
        dy = slot_view(self.slots[b][1], self._dy_shape(ch))
        self.copier.copy(dy, self.dy[ch.n0:ch.n1, :, ch.o0:ch.o1], self.h2d)
        if self.op == "data":
            return dy, None
        x = slot_view(self.slots[b][0], self.geom.x_slab_shape(ch))
        load_x_slab(self.copier, self.h2d, self.x, ch, x)
        return dy, x

    def run(self):
        torch, g = self.torch, self.geom
        self.start_streams()
        if self.op == "data":
            w, = self.upload([self.w])
            self.stream_chunks(
                lambda ch, b: self._load(ch, b)[0], lambda ch, dy: self.compute(ch, w, dy),
                lambda ch, dx: self.copier.copy(self.out[ch.n0:ch.n1, :, ch.t0:ch.t1], self.kept(ch, dx), self.d2h))
            return
        with torch.cuda.stream(self.compute_stream):
            dw = torch.zeros(tuple(g.w_shape), device="cuda")
        self.stream_chunks(self._load, lambda ch, loaded: dw.add_(self.compute(ch, loaded[1], loaded[0])))
        with torch.cuda.stream(self.d2h):
            self.d2h.wait_stream(self.compute_stream)
            self.copier.copy(self.out, dw, self.d2h)
        torch.cuda.synchronize()
