"""torch.nn.functional's signatures over pyooc's custom ops (pyooc/torch/_ops.py): the same
positional and keyword arguments, plus `memory_limit=` (bytes or "512MiB"; default: pyooc's
process default, pyooc.set_memory_limit), `backend=` ("auto", "cuda", "host") and `devices=` (the
devices the call's chunks spread over, as pyooc's numpy functions take it: "all" or a list of
ordinals; default None: pyooc's process default, pyooc.set_devices). The gradients an op's
autograd formula computes spread over the same devices as its forward. Every form takes CPU and
CUDA tensors (read in place; a CUDA input gets CUDA results on its device: pyooc/torch/_tensors.py).

What pyooc does not compute raises NotImplementedError naming the argument (dtypes other than
float32, except float16 and bfloat16 for the convolutions, activations, pooling, softmax and batch
norm; ceil_mode, pooling
dilation, ...): pyooc.torch never falls back to torch's own op
silently, since that op would need the whole tensor on one device. `inplace=True` is accepted for
torch's signatures but computes out of place: the result is a new tensor, the input is unchanged
(pyooc's custom ops are functional, so torch.compile and autograd see no mutation).
"""

import functools
import inspect
import math

import torch

from pyooc._call_args import check_padding_mode
from pyooc.memory import parse_memory_limit
from pyooc.torch import _ops
from pyooc.torch._tensors import CONV_DTYPES, check_tensor, same_dtype

_BACKENDS = ("auto", "cuda", "host")


def _options(memory_limit, backend):
    """(memory_limit in bytes, 0 for the process default; backend) as the ops take them (backend
    with its devices, as _with_devices folded them in)."""
    name = _ops.split_backend(backend)[0]
    if name not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {name!r}")
    return parse_memory_limit(memory_limit) or 0, backend


def _with_devices(fn):
    """fn with a keyword-only `devices=` (None: pyooc's process default at the time the op runs),
    checked at once and folded into the backend string every op carries (_ops.with_devices)."""
    @functools.wraps(fn)
    def call(*args, devices=None, **kwargs):
        if devices is not None:
            kwargs["backend"] = _ops.with_devices(kwargs.get("backend", "auto"), devices)
        return fn(*args, **kwargs)

    signature = inspect.signature(fn)
    call.__signature__ = signature.replace(parameters=[
        *signature.parameters.values(), inspect.Parameter("devices", inspect.Parameter.KEYWORD_ONLY, default=None)])
    return call


def _tuple(value, n, name):
    """An int or a sequence of n ints (torch's _single/_pair/_triple) as a list."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * n
    items = list(value)
    if len(items) == 1:
        return items * n
    if len(items) != n:
        raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {items}")
    return [int(v) for v in items]


def _not_implemented(name, value, supported):
    raise NotImplementedError(f"{name}={value!r} is not supported by pyooc (supported: {supported})")


def _int(value, name):
    """An int argument as torch takes it (bools refused): pyooc's own check names it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return value


def _rank(input, spatial, what, dtypes=None, channels_last=False):
    check_tensor(input, "input", dtypes or (torch.float32,), channels_last)
    if input.dim() != spatial + 2:
        raise ValueError(f"{what}: expected {spatial + 2}D (batched) input of shape [N, C, {'...' if spatial > 1 else 'L'}],"
                         f" got {input.dim()}D input of size {list(input.shape)} (pyooc takes batched input only)")


def _conv_padding(padding, weight, dilation, stride, spatial):
    """torch's padding: ints, or "valid" / "same". "same" pads dilation * (kernel - 1) in all, half
    (rounded down) before, as torch; where that is uneven the op gets every dimension's before and
    then every dimension's after (2 * spatial ints, pyooc/torch/_shapes.py's padding_ends)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [0] * spatial
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
            if all(t % 2 == 0 for t in total):
                return [t // 2 for t in total]
            return [t // 2 for t in total] + [t - t // 2 for t in total]
        raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    return _tuple(padding, spatial, "padding")


def _conv(spatial, input, weight, bias, stride, padding, dilation, groups, memory_limit, backend, padding_mode):
    # channels_last(_3d) tensors too, zero-copy (the other forms take contiguous ones): _ops
    _rank(input, spatial, f"conv{spatial}d", CONV_DTYPES, channels_last=True)
    same_dtype(check_tensor(weight, "weight", CONV_DTYPES, channels_last=True), "weight", input, "input")
    same_dtype(bias, "bias", input, "input")
    stride, dilation = _tuple(stride, spatial, "stride"), _tuple(dilation, spatial, "dilation")
    padding = _conv_padding(padding, weight, dilation, stride, spatial)
    return _ops.conv_forward(input, weight, bias, stride, padding, dilation, _int(groups, "groups"),
                             *_options(memory_limit, backend), check_padding_mode(padding_mode))


# padding_mode (pyooc's keyword; torch's functional convolutions pad with zeros and its modules run
# F.pad first): "zeros", "reflect", "replicate" or "circular", what the Conv modules' padding_mode
# does, computed in the chunks' halo without a padded copy of the input.
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, memory_limit=None,
           backend="auto", padding_mode="zeros"):
    return _conv(1, input, weight, bias, stride, padding, dilation, groups, memory_limit, backend, padding_mode)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, memory_limit=None,
           backend="auto", padding_mode="zeros"):
    return _conv(2, input, weight, bias, stride, padding, dilation, groups, memory_limit, backend, padding_mode)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, memory_limit=None,
           backend="auto", padding_mode="zeros"):
    return _conv(3, input, weight, bias, stride, padding, dilation, groups, memory_limit, backend, padding_mode)


def _conv_transpose(spatial, input, weight, bias, stride, padding, output_padding, groups, dilation, memory_limit,
                    backend):
    _rank(input, spatial, f"conv_transpose{spatial}d", CONV_DTYPES)  # half: pyooc's deconv takes it too
    same_dtype(check_tensor(weight, "weight", CONV_DTYPES), "weight", input, "input")
    same_dtype(bias, "bias", input, "input")
    args = [_tuple(v, spatial, name) for v, name in ((stride, "stride"), (padding, "padding"),
                                                    (output_padding, "output_padding"), (dilation, "dilation"))]
    return _ops.conv_transpose_forward(input, weight, bias, *args, _int(groups, "groups"),
                                       *_options(memory_limit, backend))


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     memory_limit=None, backend="auto"):
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation, memory_limit,
                           backend)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     memory_limit=None, backend="auto"):
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation, memory_limit,
                           backend)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     memory_limit=None, backend="auto"):
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation, memory_limit,
                           backend)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5, *,
               memory_limit=None, backend="auto"):
    """torch.nn.functional.batch_norm: in training, the batch's statistics (running_mean/var, when
    given, updated in place with momentum, as torch: CUDA ones on their device); otherwise the
    running statistics. A float16 or bfloat16 input takes float32 weight, bias and running
    statistics (as cuDNN does). A channels-last input gives a channels-last result."""
    check_tensor(input, "input", CONV_DTYPES, channels_last=True)
    if momentum is None:
        _not_implemented("momentum", None, "a float (the cumulative moving average is not implemented)")
    c = input.shape[1] if input.dim() > 1 else 0
    # affine=False: unit scale and zero shift, which no gradient reaches, float32 as the statistics
    # are and on input's device (where a CUDA input's call runs).
    weight = torch.ones(c, dtype=torch.float32, device=input.device) if weight is None else weight
    bias = torch.zeros(c, dtype=torch.float32, device=input.device) if bias is None else bias
    options = _options(memory_limit, backend)
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("running_mean and running_var must be defined in evaluation mode")
        return _ops.batchnorm_forward_inference(input, weight, bias, running_mean, running_var, float(eps), *options)
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var go together: pass both or neither")
    y, _, _, new_mean, new_var = _ops.batchnorm_forward_training(input, weight, bias, running_mean, running_var,
                                                               float(momentum), float(eps), *options)
    if running_mean is not None:
        with torch.no_grad():
            running_mean.copy_(new_mean)
            running_var.copy_(new_var)
    return y


def _pool_geometry(spatial, kernel_size, stride, padding):
    kernel = _tuple(kernel_size, spatial, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else _tuple(stride, spatial, "stride")
    return kernel, stride, _tuple(padding, spatial, "padding")


def _max_pool(spatial, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, memory_limit,
              backend):
    _rank(input, spatial, f"max_pool{spatial}d", CONV_DTYPES, channels_last=True)
    if any(d != 1 for d in _tuple(dilation, spatial, "dilation")):
        _not_implemented("dilation", dilation, "1")
    if ceil_mode:
        _not_implemented("ceil_mode", ceil_mode, "False")
    if return_indices:
        _not_implemented("return_indices", return_indices, "False")
    return _ops.pool_forward(input, *_pool_geometry(spatial, kernel_size, stride, padding), "max",
                             *_options(memory_limit, backend))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False, *,
               memory_limit=None, backend="auto"):
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, memory_limit,
                     backend)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False, *,
               memory_limit=None, backend="auto"):
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, memory_limit,
                     backend)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False, *,
               memory_limit=None, backend="auto"):
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, memory_limit,
                     backend)


def _avg_pool(spatial, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
              memory_limit, backend):
    _rank(input, spatial, f"avg_pool{spatial}d", CONV_DTYPES, channels_last=True)
    if ceil_mode:
        _not_implemented("ceil_mode", ceil_mode, "False")
    if divisor_override is not None:
        _not_implemented("divisor_override", divisor_override, "None")
    mode = "avg" if count_include_pad else "avg_exclude_pad"
    return _ops.pool_forward(input, *_pool_geometry(spatial, kernel_size, stride, padding), mode,
                             *_options(memory_limit, backend))


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, *,
               memory_limit=None, backend="auto"):
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, memory_limit,
                     backend)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None, *, memory_limit=None, backend="auto"):
    return _avg_pool(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     memory_limit, backend)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None, *, memory_limit=None, backend="auto"):
    return _avg_pool(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     memory_limit, backend)


def _activation(input, mode, coef, memory_limit, backend):
    check_tensor(input, "input", CONV_DTYPES, channels_last=True)  # element-wise: either format
    return _ops.activation_forward(input, mode, float(coef), *_options(memory_limit, backend))


def relu(input, inplace=False, *, memory_limit=None, backend="auto"):
    return _activation(input, "relu", 0.0, memory_limit, backend)


def relu6(input, inplace=False, *, memory_limit=None, backend="auto"):
    return _activation(input, "clipped_relu", 6.0, memory_limit, backend)


def sigmoid(input, *, memory_limit=None, backend="auto"):
    return _activation(input, "sigmoid", 0.0, memory_limit, backend)


def tanh(input, *, memory_limit=None, backend="auto"):
    return _activation(input, "tanh", 0.0, memory_limit, backend)


def elu(input, alpha=1.0, inplace=False, *, memory_limit=None, backend="auto"):
    return _activation(input, "elu", alpha, memory_limit, backend)


def gelu(input, approximate="none", *, memory_limit=None, backend="auto"):
    if approximate != "none":
        _not_implemented("approximate", approximate, "'none' (the exact GELU)")
    return _activation(input, "gelu", 0.0, memory_limit, backend)


def leaky_relu(input, negative_slope=0.01, inplace=False, *, memory_limit=None, backend="auto"):
    return _activation(input, "leaky_relu", negative_slope, memory_limit, backend)


def silu(input, inplace=False, *, memory_limit=None, backend="auto"):
    return _activation(input, "swish", 1.0, memory_limit, backend)


def linear(input, weight, bias=None, *, memory_limit=None, backend="auto"):
    """torch.nn.functional.linear: input [*, in_features] is viewed as a matrix (no copy). float32,
    float16 or bfloat16, weight and bias in input's dtype (as torch's); half products summed in float32."""
    check_tensor(input, "input", CONV_DTYPES)
    same_dtype(check_tensor(weight, "weight", CONV_DTYPES), "weight", input, "input")
    same_dtype(bias, "bias", input, "input")
    if input.dim() == 0:
        raise ValueError("input must have at least 1 dimension, got a 0-d tensor")
    rows = input.reshape(-1, input.shape[-1])
    y = _ops.linear_forward(rows, weight, bias, *_options(memory_limit, backend))
    return y.reshape(*input.shape[:-1], weight.shape[0])


def _softmax_view(input, dim, dtype, name):
    """(view, restore): input viewed as [before, C, after] around the reduced dim in its memory
    order, for pyooc's channel softmax, and the function that turns the op's result back into
    input's shape and memory format; views both ways, no copy (a channels-last input is permuted to
    its memory order, N, spatial..., C, which is contiguous). torch's implicit dim when dim is None."""
    check_tensor(input, "input", CONV_DTYPES, channels_last=True)
    if dtype is not None and dtype != input.dtype:  # torch would cast input to dtype first: a copy
        _not_implemented("dtype", dtype, f"None or the input's dtype, {input.dtype}")
    if dim is None:  # torch's legacy choice (it warns; the explicit dim is better)
        dim = 0 if input.dim() in (0, 1, 3) else 1
    if input.dim() == 0:
        raise ValueError(f"{name}: input must have at least 1 dimension")
    dim = dim + input.dim() if dim < 0 else dim
    if not 0 <= dim < input.dim():
        raise IndexError(f"Dimension out of range (expected to be in range of [{-input.dim()}, {input.dim() - 1}], "
                         f"but got {dim})")
    order = list(range(input.dim()))
    if not input.is_contiguous():  # channels-last (check_tensor let nothing else through)
        order = [0] + list(range(2, input.dim())) + [1]
    dense = input.permute(order)
    at = order.index(dim)
    shape = dense.shape
    view = dense.reshape(math.prod(shape[:at]), shape[at], math.prod(shape[at + 1:]))
    back = [order.index(d) for d in range(input.dim())]
    return view, lambda result: result.reshape(shape).permute(back)


def softmax(input, dim=None, _stacklevel=3, dtype=None, *, memory_limit=None, backend="auto"):
    view, restore = _softmax_view(input, dim, dtype, "softmax")
    return restore(_ops.softmax_forward(view, False, *_options(memory_limit, backend)))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None, *, memory_limit=None, backend="auto"):
    view, restore = _softmax_view(input, dim, dtype, "log_softmax")
    return restore(_ops.softmax_forward(view, True, *_options(memory_limit, backend)))


__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "batch_norm",
           "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "relu", "relu6",
           "sigmoid", "tanh", "elu", "gelu", "leaky_relu", "silu", "linear", "softmax", "log_softmax"]

for _name in __all__:
    globals()[_name] = _with_devices(globals()[_name])
del _name
