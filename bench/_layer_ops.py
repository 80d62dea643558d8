"""The operations bench/layers.py measures, one class each: its operands (name -> shape, float32),
how to draw them, the pyooc call (into given outputs, or into new results) and its plan, torch's
in-core op, a float64 numpy reference, which input a chain of calls feeds the previous result to and,
where slices of the leading dim are independent, the per-chunk function the torch chunk loops run.

Inputs are drawn through a small namespace (NumpyDraw on the host for a dry run, TorchDraw on the
GPU) so one `draw` serves both; torch is imported only by TorchDraw's caller."""

import math

import numpy as np

from _measure import NO_GRADIENT_CHAIN, shape_breaks_chain

EPS = 1e-5  # batch norm's epsilon, pyooc's and torch's default


class NumpyDraw:
    """Random inputs as numpy float32 arrays (the dry run)."""

    def __init__(self, rng):
        self.rng = rng

    def randn(self, shape, scale=1.0, shift=0.0):
        return (self.rng.standard_normal(shape, dtype=np.float32) * scale + shift).astype(np.float32)

    def tie_free(self, shape):
        """Random values whose 2x2 windows (last two dims) never tie: an integer draw times 4 plus the
        position in the window, scaled by a power of two (exact in float32), so max pooling's argmax
        is unambiguous and cuDNN, torch and numpy route each gradient to the same element."""
        code = (np.arange(shape[-2]) % 2 * 2)[:, None] + np.arange(shape[-1]) % 2
        ints = self.rng.integers(0, 1 << 20, size=shape) * 4 + code
        return (ints * 2.0 ** -21 - 2.0).astype(np.float32)

    @staticmethod
    def sigmoid(x):
        return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)

    @staticmethod
    def maxpool2(x):
        return np_maxpool2(x).astype(np.float32)

    @staticmethod
    def batch_moments(x):
        """Per-channel mean and 1/sqrt(biased var + EPS) over N and space, float32."""
        axes = (0,) + tuple(range(2, x.ndim))
        x64 = x.astype(np.float64)
        return (x64.mean(axes).astype(np.float32),
                (1 / np.sqrt(x64.var(axes) + EPS)).astype(np.float32))


class TorchDraw:
    """The same draws as device tensors (fast for 8 GB; the caller copies them to the host)."""

    def __init__(self, torch, seed, device="cuda"):
        self.torch, self.device = torch, device
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)

    def randn(self, shape, scale=1.0, shift=0.0):
        return self.torch.randn(tuple(shape), generator=self.gen, device=self.device).mul_(scale).add_(shift)

    def tie_free(self, shape):
        torch, dev = self.torch, self.device
        code = (torch.arange(shape[-2], device=dev) % 2 * 2)[:, None] + torch.arange(shape[-1], device=dev) % 2
        ints = torch.randint(0, 1 << 20, tuple(shape), generator=self.gen, device=dev, dtype=torch.int32)
        return ints.mul_(4).add_(code.int()).float().mul_(2.0 ** -21).sub_(2.0)

    def sigmoid(self, x):
        return self.torch.sigmoid(x)

    def maxpool2(self, x):
        return self.torch.nn.functional.max_pool2d(x, 2)

    def batch_moments(self, x):
        axes = (0,) + tuple(range(2, x.dim()))
        var, mean = self.torch.var_mean(x.double(), dim=axes, correction=0)
        return mean.float(), var.add(EPS).rsqrt().float()


def np_maxpool2(x):
    """2x2, stride 2 max pooling over the last two dims (even sizes)."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def np_maxpool2_backward(x, dy):
    """dx of 2x2 max pooling: each dy to its window's (first) maximum."""
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    hit = np.arange(4) == win.argmax(-1)[..., None]
    dx = hit * dy[..., None]
    return dx.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(x.shape)


def _out(o, name):
    """The output array `name` of o for out=, or None (o None: pyooc allocates the result)."""
    return None if o is None else o[name]


def _with_small_outputs(op, o, got):
    """The outputs by name of a call returning (large output, small ones...): with given outputs o
    (out= takes the large one only), the small ones copied into o's."""
    if o is None:
        return dict(zip(op.outputs, got))
    for name, value in list(zip(op.outputs, got))[1:]:
        o[name][...] = value
    return o


def _channel_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(v, x):
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


class LayerOp:
    """One benchmarked operation. Subclasses set `inputs` and `outputs` (name -> shape; the first
    output is the large one) and define draw(d) (inputs from a NumpyDraw/TorchDraw), pyooc(pyooc, a,
    o, **opts) (the call on input arrays a, writing output arrays o, or with o None into the new
    results pyooc allocates, as a caller without out= gets them; returns the outputs by name),
    plan(pyooc, **opts), and either chunk_op / chunk_ref (row ops: the op on (*resident, *rows)
    slices) or incore / reference."""

    rows = None         # inputs a torch chunk loop streams in slices of the leading dim (None: no natural loop)
    resident = ()       # inputs such a loop uploads once per call
    in_place = False    # the output is the first input, overwritten
    two_pass = False    # reads its inputs twice (statistics first): the roofline takes the plan's bytes
    flatten = False     # element-wise: the loop's rows are the flattened arrays' elements
    chain = None        # the input a previous call's main output feeds in a chain of calls (y1 = op(y0))
    no_chain = None     # why there is no such input (chain None)
    flops = None

    @property
    def main(self):
        return next(iter(self.outputs))

    def nbytes(self, shapes):
        return sum(4 * math.prod(s) for s in shapes.values())

    @property
    def bytes_in(self):
        return self.nbytes(self.inputs)

    @property
    def bytes_out(self):
        return self.nbytes(self.outputs)

    @property
    def working_set_bytes(self):
        return self.bytes_in + (0 if self.in_place else self.bytes_out)

    @property
    def unit(self):
        return "elements" if self.flatten else "rows" if len(self.outputs[self.main]) == 2 else "samples"

    def row_view(self, a):
        return a.reshape(-1) if self.flatten else a

    def chain_input(self):
        """(the input a chain of calls feeds the previous call's main output to, None), or (None, why
        this op has no chain): conv_forward's chained variant, y1 = op(y0) with y0 a pyooc result."""
        if self.in_place:
            return None, "in place (out is x): no new result to feed the next call"
        if self.chain is None:
            return None, self.no_chain
        if self.inputs[self.chain] != self.outputs[self.main]:
            return None, shape_breaks_chain(self.main, self.chain)
        return self.chain, None

    def scratch_row_bytes(self):
        """Device bytes per row the chunk function allocates besides its output (the peers' budget)."""
        return 0

    def row_args(self, arrays):
        return [arrays[n] for n in self.resident] + [self.row_view(arrays[n]) for n in self.rows]

    def incore(self, torch, dev):
        """A call of torch's op on the device inputs dev, returning the outputs (name -> tensor)."""
        args = self.row_args(dev)
        shape = self.outputs[self.main]
        return lambda: {self.main: self.chunk_op(torch, *args).view(shape)}

    def reference(self, host):
        """The outputs in float64 numpy (name -> array)."""
        args = [a.astype(np.float64) for a in self.row_args(host)]
        return {self.main: self.chunk_ref(*args).reshape(self.outputs[self.main])}


class Relu(LayerOp):
    rows = ("x",)
    flatten = True
    chain = "x"

    def __init__(self, shape, in_place=False):
        self.inputs, self.outputs, self.in_place = {"x": shape}, {"y": shape}, in_place

    def draw(self, d):
        return {"x": d.randn(self.inputs["x"])}

    def pyooc(self, pyooc, a, o, **opts):
        return {"y": pyooc.activation_forward(a["x"], "relu", out=_out(o, "y"), **opts)}

    def plan(self, pyooc, **opts):
        return pyooc.plan_activation_forward(self.inputs["x"], **opts)

    def chunk_op(self, torch, x):
        return torch.relu_(x) if self.in_place else torch.relu(x)

    def chunk_ref(self, x):
        return np.maximum(x, 0)

    def incore(self, torch, dev):
        if not self.in_place:
            return super().incore(torch, dev)
        work = dev["x"].clone()  # relu is idempotent: every run moves the same bytes, keeps the answer
        return lambda: {"y": torch.relu_(work)}


class SigmoidBackward(LayerOp):
    """pyooc takes cuDNN's (y, dy, x) but, as torch's sigmoid gradient, reads only y and dy (the
    gradient follows from y): the roofline counts those two and dx."""

    rows = ("y", "dy")
    flatten = True
    no_chain = NO_GRADIENT_CHAIN

    def __init__(self, shape):
        self.inputs, self.outputs = {"y": shape, "dy": shape, "x": shape}, {"dx": shape}

    @property
    def bytes_in(self):
        return self.nbytes({n: self.inputs[n] for n in self.rows})

    def draw(self, d):
        x = d.randn(self.inputs["x"])
        return {"y": d.sigmoid(x), "dy": d.randn(self.inputs["dy"]), "x": x}

    def pyooc(self, pyooc, a, o, **opts):
        return {"dx": pyooc.activation_backward(a["y"], a["dy"], a["x"], "sigmoid", out=_out(o, "dx"), **opts)}

    def plan(self, pyooc, **opts):
        return pyooc.plan_activation_backward(self.inputs["x"], mode="sigmoid", **opts)

    def chunk_op(self, torch, y, dy):
        return torch.ops.aten.sigmoid_backward(dy, y)

    def chunk_ref(self, y, dy):
        return dy * y * (1 - y)


class MaxPool2(LayerOp):
    rows = ("x",)
    chain = "x"  # y is a quarter of x: no chain (chain_input says so)

    def __init__(self, x_shape):
        n, c, h, w = x_shape
        self.inputs, self.outputs = {"x": x_shape}, {"y": (n, c, h // 2, w // 2)}

    def draw(self, d):
        return {"x": d.randn(self.inputs["x"])}

    def pyooc(self, pyooc, a, o, **opts):
        return {"y": pyooc.pool_forward(a["x"], 2, mode="max", out=_out(o, "y"), **opts)}

    def plan(self, pyooc, **opts):
        return pyooc.plan_pool_forward(self.inputs["x"], 2, **opts)

    def chunk_op(self, torch, x):
        return torch.nn.functional.max_pool2d(x, 2)

    def chunk_ref(self, x):
        return np_maxpool2(x)


class MaxPool2Backward(LayerOp):
    """pyooc takes cuDNN's (y, dy, x); torch's chunk loops recompute the argmax from x (max_pool2d
    with indices) and move x and dy only. In-core torch times the backward from saved indices."""

    rows = ("x", "dy")
    no_chain = NO_GRADIENT_CHAIN

    def __init__(self, x_shape):
        n, c, h, w = x_shape
        y_shape = (n, c, h // 2, w // 2)
        self.inputs, self.outputs = {"y": y_shape, "dy": y_shape, "x": x_shape}, {"dx": x_shape}

    def draw(self, d):
        x = d.tie_free(self.inputs["x"])
        return {"y": d.maxpool2(x), "dy": d.randn(self.inputs["dy"]), "x": x}

    def pyooc(self, pyooc, a, o, **opts):
        return {"dx": pyooc.pool_backward(a["y"], a["dy"], a["x"], 2, mode="max", out=_out(o, "dx"), **opts)}

    def plan(self, pyooc, **opts):
        return pyooc.plan_pool_backward(self.inputs["x"], 2, **opts)

    @staticmethod
    def _backward(torch, x, dy, indices):
        return torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)

    def chunk_op(self, torch, x, dy):
        _, indices = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
        return self._backward(torch, x, dy, indices)

    def chunk_ref(self, x, dy):
        return np_maxpool2_backward(x, dy)

    def scratch_row_bytes(self):
        return 12 * math.prod(self.inputs["y"][1:])  # the recomputed maxima (float32) and indices (int64)

    def incore(self, torch, dev):
        x, dy = dev["x"], dev["dy"]
        _, indices = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
        return lambda: {"dx": self._backward(torch, x, dy, indices)}


class SoftmaxChannel(LayerOp):
    rows = ("x",)
    chain = "x"

    def __init__(self, shape):
        self.inputs, self.outputs = {"x": shape}, {"y": shape}

    def draw(self, d):
        return {"x": d.randn(self.inputs["x"], scale=3.0)}

    def pyooc(self, pyooc, a, o, **opts):
        return {"y": pyooc.softmax_forward(a["x"], mode="channel", out=_out(o, "y"), **opts)}

    def plan(self, pyooc, **opts):
        return pyooc.plan_softmax_forward(self.inputs["x"], mode="channel", **opts)

    def chunk_op(self, torch, x):
        return torch.softmax(x, 1)

    def chunk_ref(self, x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


class AddBias(LayerOp):
    """out = c + a, a one value per channel (cuDNN AddTensor broadcasting a [1, C, 1, 1])."""

    rows = ("c",)
    resident = ("a",)
    chain = "c"

    def __init__(self, shape):
        self.inputs, self.outputs = {"a": (1, shape[1], 1, 1), "c": shape}, {"out": shape}

    def draw(self, d):
        return {"a": d.randn(self.inputs["a"]), "c": d.randn(self.inputs["c"])}

    def pyooc(self, pyooc, a, o, **opts):
        return {"out": pyooc.add_tensor(a["a"], a["c"], out=_out(o, "out"), **opts)}

    def plan(self, pyooc, **opts):
        return pyooc.plan_add_tensor(self.inputs["a"], self.inputs["c"], **opts)

    def chunk_op(self, torch, a, c):
        return torch.add(c, a)

    def chunk_ref(self, a, c):
        return c + a


class BatchNormTraining(LayerOp):
    """y, saved_mean, saved_invstd with the batch's statistics: a pass over x for the statistics,
    a second to normalize (x is over the budget), so the roofline takes the plan's bytes."""

    two_pass = True
    chain = "x"

    def __init__(self, shape):
        c = (shape[1],)
        self.inputs = {"x": shape, "scale": c, "bias": c}
        self.outputs = {"y": shape, "saved_mean": c, "saved_invstd": c}

    def draw(self, d):
        return {"x": d.randn(self.inputs["x"], scale=2.0, shift=1.0), "scale": d.randn(self.inputs["scale"]),
                "bias": d.randn(self.inputs["bias"])}

    def pyooc(self, pyooc, a, o, **opts):
        got = pyooc.batchnorm_forward_training(a["x"], a["scale"], a["bias"], eps=EPS, out=_out(o, "y"), **opts)
        return _with_small_outputs(self, o, got)

    def plan(self, pyooc, **opts):
        return pyooc.plan_batchnorm_forward_training(self.inputs["x"], **opts)

    def incore(self, torch, dev):
        x, scale, bias = dev["x"], dev["scale"], dev["bias"]
        return lambda: dict(zip(self.outputs, torch.native_batch_norm(x, scale, bias, None, None, True, 0.1, EPS)))

    def reference(self, host):
        x, scale, bias = (host[n].astype(np.float64) for n in ("x", "scale", "bias"))
        axes = _channel_axes(x)
        mean, invstd = x.mean(axes), 1 / np.sqrt(x.var(axes) + EPS)
        y = (x - _per_channel(mean, x)) * _per_channel(invstd * scale, x) + _per_channel(bias, x)
        return {"y": y, "saved_mean": mean, "saved_invstd": invstd}


class BatchNormBackward(LayerOp):
    """dx, dscale, dbias: a pass over x and dy for the two per-channel sums, a second for dx."""

    two_pass = True
    no_chain = NO_GRADIENT_CHAIN

    def __init__(self, shape):
        c = (shape[1],)
        self.inputs = {"x": shape, "dy": shape, "scale": c, "saved_mean": c, "saved_invstd": c}
        self.outputs = {"dx": shape, "dscale": c, "dbias": c}

    def draw(self, d):
        x = d.randn(self.inputs["x"], scale=2.0, shift=1.0)
        mean, invstd = d.batch_moments(x)
        return {"x": x, "dy": d.randn(self.inputs["dy"]), "scale": d.randn(self.inputs["scale"]),
                "saved_mean": mean, "saved_invstd": invstd}

    def pyooc(self, pyooc, a, o, **opts):
        got = pyooc.batchnorm_backward(a["x"], a["dy"], a["scale"], a["saved_mean"], a["saved_invstd"], eps=EPS,
                                       out=_out(o, "dx"), **opts)
        return _with_small_outputs(self, o, got)

    def plan(self, pyooc, **opts):
        return pyooc.plan_batchnorm_backward(self.inputs["x"], **opts)

    def incore(self, torch, dev):
        args = [dev[n] for n in ("dy", "x", "scale")] + [None, None, dev["saved_mean"], dev["saved_invstd"]]
        return lambda: dict(zip(self.outputs, torch.ops.aten.native_batch_norm_backward(
            *args, True, EPS, [True, True, True])))

    def reference(self, host):
        x, dy, scale, mean, invstd = (host[n].astype(np.float64) for n in self.inputs)
        axes = _channel_axes(x)
        m = x.size // x.shape[1]
        xhat = (x - _per_channel(mean, x)) * _per_channel(invstd, x)
        dbias, dscale = dy.sum(axes), (dy * xhat).sum(axes)
        dx = _per_channel(scale * invstd / m, x) * (m * dy - _per_channel(dbias, x) - xhat * _per_channel(dscale, x))
        return {"dx": dx, "dscale": dscale, "dbias": dbias}


class Matmul(LayerOp):
    """c = a @ b for a [M, K], b [K, N]: no slice of it is independent of a whole operand, so no
    torch chunk loop; its roofline's compute term is the in-core SGEMM."""

    chain = "a"  # c = a @ b, then c @ b: only where b is square

    def __init__(self, m, k, n):
        self.inputs, self.outputs = {"a": (m, k), "b": (k, n)}, {"c": (m, n)}
        self.flops = 2 * m * n * k

    def draw(self, d):
        k = self.inputs["b"][0]
        return {"a": d.randn(self.inputs["a"]), "b": d.randn(self.inputs["b"], scale=1 / math.sqrt(k))}

    def pyooc(self, pyooc, a, o, **opts):
        return {"c": pyooc.matmul(a["a"], a["b"], out=_out(o, "c"), **opts)}

    def plan(self, pyooc, **opts):
        return pyooc.plan_matmul(self.inputs["a"], self.inputs["b"], **opts)

    def incore(self, torch, dev):
        a, b = dev["a"], dev["b"]
        return lambda: {"c": torch.mm(a, b)}

    def reference(self, host):
        return {"c": host["a"].astype(np.float64) @ host["b"].astype(np.float64)}


class Linear(LayerOp):
    """y = x @ w.T + b (F.linear): rows of x are independent, w and b stay on the device."""

    rows = ("x",)
    resident = ("w", "b")
    chain = "x"  # y = x @ w.T + b, then y @ w.T + b: only where w is square

    def __init__(self, m, k, n):
        self.inputs, self.outputs = {"w": (n, k), "b": (n,), "x": (m, k)}, {"y": (m, n)}
        self.flops = 2 * m * n * k

    def draw(self, d):
        k = self.inputs["x"][1]
        return {"w": d.randn(self.inputs["w"], scale=1 / math.sqrt(k)), "b": d.randn(self.inputs["b"]),
                "x": d.randn(self.inputs["x"])}

    def pyooc(self, pyooc, a, o, **opts):
        return {"y": pyooc.linear_forward(a["x"], a["w"], a["b"], out=_out(o, "y"), **opts)}

    def plan(self, pyooc, **opts):
        return pyooc.plan_linear_forward(self.inputs["x"], self.inputs["w"], bias=True, **opts)

    def chunk_op(self, torch, w, b, x):
        return torch.nn.functional.linear(x, w, b)

    def chunk_ref(self, w, b, x):
        return x @ w.T + b
