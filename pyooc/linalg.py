"""Out-of-core GEMM: matmul and torch's F.linear with its gradients, over host arrays or
device-resident ones (__cuda_array_interface__, read and written in place). Arguments are
checked here with the shared checks (pyooc/_call_args.py); libooc (native/include/ooc/layers.hpp)
validates the shapes (torch's wording), plans the 2D blocking with a split K and runs it with the
GIL released. float32, float16 and bfloat16 (ml_dtypes) matrices, one dtype a call, the result in
it: half products are summed in float32 (docs/dtypes.md)."""

import numpy as np

from pyooc import _last_stats
from pyooc._arrays import CONV_DTYPES, as_input, as_shape
from pyooc._call_args import bias_input, check_dtype, conv_args, output_array, raw_bytes, same_dtype
from pyooc._device_arrays import caller_array, ready_device_arrays
from pyooc._loader import load_native
from pyooc.progress import observed
from pyooc.machine import accepts_machine
from pyooc.precision import accepts_math

_native = load_native()


def _options(alpha, beta, memory_limit, backend, device):
    """alpha, beta and "options" checked (in the order every op checks them)."""
    return conv_args(1, 1, 0, 1, 1, alpha, beta, memory_limit, backend, device)


def _matrix(array, name, first=None, first_name=None):
    """array as a 2-D zero-copy view of float32, float16 or bfloat16; of first's dtype when given
    (one call computes in one dtype)."""
    array = as_input(array, name, CONV_DTYPES, device_arrays=True)
    if first is not None:
        same_dtype(array, name, first, first_name)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a matrix (2-D), got {array.ndim}-D shape {list(array.shape)}")
    return array


def _shapes_of(a_shape, b_shape):
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ValueError(f"a_shape and b_shape must be 2-D, got {list(a_shape)} and {list(b_shape)}")


def _gemm(a, a_shape, trans_a, b, b_shape, trans_b, bias, out, o, inputs):
    """c = alpha * op(a) @ op(b) + beta * out (+ bias); a_shape, b_shape: op(a)'s and op(b)'s;
    inputs: the caller's arrays by the names the errors give them (out must not overlap them, and
    their device arrays are waited for)."""
    # Validates the shapes (torch's message) before anything is allocated.
    _native.check_matmul(a_shape, b_shape)
    c_shape = (a_shape[0], b_shape[1])
    out = output_array(out, c_shape, inputs, o["beta"], "c = alpha * a @ b + beta * out", dtype=a.dtype,
                       device_arrays=True)
    ready_device_arrays({**inputs, "out": out}, o["options"], _native)
    _last_stats.record(_native.matmul(raw_bytes(a), a_shape, trans_a, raw_bytes(b), b_shape, trans_b,
                                      raw_bytes(bias), raw_bytes(out), o["alpha"], o["beta"], o["options"],
                                      str(a.dtype)))
    return caller_array(out)


@accepts_math
@accepts_machine
def plan_matmul(a_shape, b_shape, *, bias=False, alpha=1.0, beta=0.0, dtype="float32", memory_limit=None,
                backend="auto", device=0):
    """The Plan matmul would run for a [M, K] @ b [K, N] of `dtype`, without running it: splits n (M),
    k (N) and c (K, accumulated on the device: in a float32 tile for half dtypes, Plan.slots'
    "float32 c"). Raises MemoryError when nothing fits memory_limit."""
    a_shape, b_shape = as_shape(a_shape, "a_shape"), as_shape(b_shape, "b_shape")
    dtype = check_dtype(dtype, CONV_DTYPES)
    _shapes_of(a_shape, b_shape)
    o = _options(alpha, beta, memory_limit, backend, device)
    return _native.plan_matmul(a_shape, b_shape, o["alpha"], o["beta"], bool(bias), o["options"], dtype)


@accepts_math
@observed
def matmul(a, b, *, alpha=1.0, beta=0.0, out=None, memory_limit=None, backend="auto", device=0):
    """alpha * a @ b + beta * out for matrices a [M, K], b [K, N], out of core (cuBLAS SGEMM in full
    FP32 on the GPU unless math="tf32"). float32, float16 or bfloat16, both alike; the result has
    their dtype, half products summed in float32 (cublasGemmEx, CUBLAS_COMPUTE_32F) however K is
    split. Inputs go in zero-copy and are never written; the result is a new array or `out`
    (beta != 0 needs out)."""
    a = _matrix(a, "mat1")
    b = _matrix(b, "mat2", a, "mat1")
    o = _options(alpha, beta, memory_limit, backend, device)
    return _gemm(a, a.shape, False, b, b.shape, False, None, out, o, {"mat1": a, "mat2": b})


@accepts_math
@accepts_machine
def plan_linear_forward(x_shape, w_shape, *, bias=False, dtype="float32", memory_limit=None, backend="auto",
                        device=0):
    """The Plan linear_forward would run (x [M, K], w [N, K] of `dtype`)."""
    x_shape, w_shape = as_shape(x_shape, "x_shape"), as_shape(w_shape, "w_shape")
    _shapes_of(x_shape, w_shape)
    return plan_matmul(x_shape, (w_shape[1], w_shape[0]), bias=bias, dtype=dtype, memory_limit=memory_limit,
                       backend=backend, device=device)


@accepts_math
@observed
def linear_forward(x, w, bias=None, *, out=None, memory_limit=None, backend="auto", device=0):
    """y = x @ w.T + bias (torch.nn.functional.linear) for x [M, K], w [N, K], bias [N], out of
    core; w is read in place (no transposed copy). x, w and bias share one dtype (float32, float16 or
    bfloat16, as torch's F.linear takes its bias in the input's dtype), y's."""
    x = _matrix(x, "input")
    w = _matrix(w, "weight", x, "input")
    bias = bias_input(bias, w.shape[0], "output feature", CONV_DTYPES, device_arrays=True)
    if bias is not None:
        same_dtype(bias, "bias", x, "input")
    o = _options(1.0, 0.0, memory_limit, backend, device)
    return _gemm(x, x.shape, False, w, (w.shape[1], w.shape[0]), True, bias, out, o,
                 {"input": x, "weight": w, "bias": bias})


@accepts_math
@observed
def linear_backward(x, w, dy, *, bias=True, out=None, memory_limit=None, backend="auto", device=0):
    """Gradients of y = x @ w.T + bias: (dx = dy @ w [M, K], dw = dy.T @ x [N, K], db = dy summed
    over rows [N], or None when bias=False), each out of core; dy [M, N]. db is the GEMM
    ones[1, M] @ dy, so it streams dy like the others. x, w and dy share one dtype, the gradients'
    (half ones summed in float32 however the batch is split). The results are new (host) arrays, or
    out=(dx, dw, db) (db None when bias=False), host or device arrays."""
    x = _matrix(x, "input")
    w = _matrix(w, "weight", x, "input")
    dy = _matrix(dy, "grad_output", x, "input")
    if dy.shape != (x.shape[0], w.shape[0]):
        raise ValueError(f"grad_output must have shape {[x.shape[0], w.shape[0]]} (input rows x weight rows), "
                         f"got {list(dy.shape)}")
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"mat1 and mat2 shapes cannot be multiplied ({x.shape[0]}x{x.shape[1]} and "
                         f"{w.shape[1]}x{w.shape[0]})")
    if out is None:
        out = (None, None, None)
    elif not isinstance(out, (tuple, list)) or len(out) != 3:
        raise TypeError(f"out must be a tuple (dx, dw, db), got {type(out).__name__}")
    elif (out[2] is None) != (not bias):
        raise ValueError("out's db must be an array when bias=True and None when bias=False")
    o = _options(1.0, 0.0, memory_limit, backend, device)
    inputs = {"input": x, "weight": w, "grad_output": dy}
    dx = _gemm(dy, dy.shape, False, w, w.shape, False, None, out[0], o, inputs)
    dw = _gemm(dy, (dy.shape[1], dy.shape[0]), True, x, x.shape, False, None, out[1], o, inputs)
    db = None
    if bias:
        ones = np.ones((1, dy.shape[0]), dtype=dy.dtype)
        db_out = None if out[2] is None else _row(out[2], dy.shape[1])
        db = _gemm(ones, ones.shape, False, dy, dy.shape, False, None, db_out, o, inputs)
        db = out[2] if out[2] is not None else db.reshape(-1)
    return dx, dw, db


def _row(array, n):
    """db (a vector of n elements, host or device) as the [1, n] matrix the GEMM writes."""
    view = as_input(array, "out", CONV_DTYPES, device_arrays=True)
    if view.shape != (n,):
        raise ValueError(f"out has shape {list(view.shape)}, expected {[n]}")
    return view.reshape(1, n)


__all__ = ["matmul", "plan_matmul", "linear_forward", "plan_linear_forward", "linear_backward"]
