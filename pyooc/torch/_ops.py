"""pyooc's operations as torch custom ops (namespace `pyooc::`), each with a fake kernel (shapes
only: torch.compile and opcheck trace through it) and, where the op has a gradient, an autograd
formula built from pyooc's own backward ops, so a backward pass streams out of core too.

Every op takes CPU contiguous tensors (pyooc/torch/_tensors.py) zero-copy and returns new CPU tensors
sharing the result arrays; it takes CUDA tensors too, read in place, and returns CUDA tensors on
the input's device (allocated here, written by pyooc as out=), the call running on that device.
CPU and CUDA tensors may be mixed in one call: the results are on the device of the op's x (where
it has none: dy for conv_backward_data/_bias, y for softmax_backward, a for matmul, c for
add_tensor), and each gradient an autograd formula returns is moved to its input's device
(_register_autograd). `memory_limit` (bytes; 0: pyooc's process default) and
`backend` ("auto", "cuda", "host") are the numpy API's; `backend` may also carry the devices the call
spreads over ("host@0,1,2": with_devices), so that the one string every op's autograd formula saves
gives its backward the forward's devices too. The ops are opaque to torch.compile: it
calls them as they are, and never traces into pyooc.

Argument checking beyond the tensors (geometry, modes) is pyooc's (ValueError naming the argument);
the functional forms (functional.py) turn torch.nn.functional's arguments into these ops'.
"""

from typing import Optional

import torch

import pyooc
from pyooc.devices import call_devices, devices_for_this_thread
from pyooc.torch._shapes import conv_output_shape, conv_transpose_output_shape, padding_ends, pool_output_shape
from pyooc.torch._tensors import (CONV_DTYPES, FLOAT32, as_array_or_none, call_device, check_tensor, contiguous_grad,
                                  device_result, device_results, host_result, in_format, memory_format_of,
                                  result_tensor, result_tensors)

Tensor = torch.Tensor


def _limit(memory_limit):
    return None if memory_limit == 0 else memory_limit


# torch's TF32 switches, read when an op runs, as torch reads them: convolutions follow
# torch.backends.cudnn.allow_tf32 (on by default in torch), GEMMs torch.backends.cuda.matmul.allow_tf32
# (off by default). A switch that is on passes math="tf32"; one that is off leaves pyooc's own
# default (pyooc.set_math, full FP32 unless set). docs/torch.md says so.
_CONVOLUTIONS = (pyooc.conv_forward, pyooc.conv_backward_data, pyooc.conv_backward_filter,
                 pyooc.conv_backward_data_filter_bias, pyooc.deconv_bias_activation_forward,
                 pyooc.conv_bias_activation_forward, pyooc.activation_conv_backward_data_filter_bias,
                 pyooc.conv_bias_activation_pooling_forward, pyooc.pooling_activation_conv_backward_data_filter_bias)
_GEMMS = (pyooc.linear_forward, pyooc.linear_backward, pyooc.matmul)


def _torch_math(fn):
    """The math= torch's switches ask of `fn`, or {} where they ask nothing (or fn multiplies nothing)."""
    if fn in _CONVOLUTIONS:
        allowed = torch.backends.cudnn.allow_tf32
    elif fn in _GEMMS:
        allowed = torch.backends.cuda.matmul.allow_tf32
    else:
        return {}
    return {"math": "tf32"} if allowed else {}


def with_devices(backend, devices):
    """backend carrying `devices` (pyooc's devices=: "all" or ordinals, checked and resolved now)."""
    name = split_backend(backend)[0]
    return f"{name}@{','.join(str(d) for d in call_devices(devices))}"


def split_backend(backend):
    """(backend name, devices or None) of a backend string with_devices may have made; anything
    else is (backend, None), for the caller's check of the name."""
    if not isinstance(backend, str) or "@" not in backend:
        return backend, None
    name, _, listed = backend.partition("@")
    try:
        return name, tuple(int(d) for d in listed.split(","))
    except ValueError:
        raise ValueError(f"backend must be one of ('auto', 'cuda', 'host'), got {backend!r}") from None


def _run(fn, *args, memory_limit, backend, device, **kwargs):
    """fn run as the op's arguments say; device: call_device's, the CUDA device its tensors are on
    (None: pyooc's default, for host tensors)."""
    name, devices = split_backend(backend)
    on = {} if device is None else {"device": device}
    with devices_for_this_thread(devices):
        return fn(*args, memory_limit=_limit(memory_limit), backend=name, **_torch_math(fn), **on, **kwargs)


def _needs(ctx, i):
    return ctx.needs_input_grad[i]


def _register_autograd(op, backward, setup_context):
    """op.register_autograd, each gradient moved to its input's device: an op's results are on its
    x's device, and a call may mix CPU and CUDA tensors (a CPU bias of a CUDA convolution), where
    autograd takes each gradient on its own input's device only."""
    def setup(ctx, inputs, output):
        ctx.input_devices = [t.device if isinstance(t, Tensor) else None for t in inputs]
        setup_context(ctx, inputs, output)

    def placed(ctx, *grads):
        return tuple(g if g is None or g.device == d else g.to(d)
                     for g, d in zip(backward(ctx, *grads), ctx.input_devices, strict=True))

    op.register_autograd(placed, setup_context=setup)


def _padding(padding, w):
    """An op's padding as pyooc takes it: ints, or (before, after) pairs where the op got both ends."""
    ends = padding_ends(padding, w.dim() - 2)
    return [b for b, _ in ends] if all(b == a for b, a in ends) else ends


def _array(t, name, dtypes=CONV_DTYPES):
    """An op's tensor (or None) as pyooc takes it: CPU tensors viewed, CUDA tensors read in place
    (their results are CUDA tensors on the input's device: _tensors.device_result), contiguous."""
    return as_array_or_none(t, name, dtypes)


def _any_format(t, name):
    """An op's tensor (or None) as _array, contiguous or channels-last alike (the convolutions, and
    the layers that keep the format: pooling, activations, batch norm, add; the result takes the
    first input's format)."""
    return as_array_or_none(t, name, CONV_DTYPES, channels_last=True)


def _like(t, first):
    """t (a weight, or a gradient autograd hands over) in first's memory format: pyooc runs one
    call in one layout, and torch's convolution takes mixed formats. The weights are small; the
    gradients come from autograd, whose strided ones are copied here anyway (contiguous_grad)."""
    return in_format(t, memory_format_of(first))


def _fake_like(first, shape):
    """The fake kernels' result: shape in first's memory format, as the real op's is."""
    fmt = memory_format_of(first) if len(shape) == first.dim() else torch.contiguous_format
    return torch.empty(shape, dtype=first.dtype, device=first.device, memory_format=fmt)


def _symmetric(padding, w):
    return len(padding) == w.dim() - 2


# ------------------------------------------------------------------------------------------------
# convolution and its gradients. Each op checks and views its tensors before it allocates a CUDA
# result (device_result), so that a tensor pyooc does not take is refused by name first.


@torch.library.custom_op("pyooc::conv_forward", mutates_args=())
def conv_forward(x: Tensor, w: Tensor, bias: Optional[Tensor], stride: list[int], padding: list[int],
                 dilation: list[int], groups: int, memory_limit: int, backend: str,
                 padding_mode: str = "zeros") -> Tensor:
    device = call_device(input=x, weight=w, bias=bias)
    arrays = _any_format(x, "input"), _any_format(_like(w, x), "weight"), _any_format(bias, "bias")
    y, out = device_result(x, conv_output_shape(x.shape, w.shape, stride, padding, dilation))
    return result_tensor(y, _run(pyooc.conv_forward, *arrays, stride=stride, padding=_padding(padding, w),
                                 dilation=dilation, groups=groups, out=out, memory_limit=memory_limit,
                                 backend=backend, device=device, padding_mode=padding_mode))


@conv_forward.register_fake
def _(x, w, bias, stride, padding, dilation, groups, memory_limit, backend, padding_mode="zeros"):
    return _fake_like(x, conv_output_shape(x.shape, w.shape, stride, padding, dilation))


@torch.library.custom_op("pyooc::conv_backward_data", mutates_args=())
def conv_backward_data(dy: Tensor, w: Tensor, x_shape: list[int], stride: list[int], padding: list[int],
                       dilation: list[int], groups: int, memory_limit: int, backend: str,
                       padding_mode: str = "zeros") -> Tensor:
    device = call_device(grad_output=dy, weight=w)
    arrays = _any_format(dy, "grad_output"), _any_format(_like(w, dy), "weight")
    dx, out = device_result(dy, x_shape)
    return result_tensor(dx, _run(pyooc.conv_backward_data, *arrays, x_shape, stride=stride,
                                  padding=_padding(padding, w), dilation=dilation, groups=groups, out=out,
                                  memory_limit=memory_limit, backend=backend, device=device,
                                  padding_mode=padding_mode))


@conv_backward_data.register_fake
def _(dy, w, x_shape, stride, padding, dilation, groups, memory_limit, backend, padding_mode="zeros"):
    return _fake_like(dy, x_shape)


@torch.library.custom_op("pyooc::conv_backward_filter", mutates_args=())
def conv_backward_filter(x: Tensor, dy: Tensor, w_shape: list[int], stride: list[int], padding: list[int],
                         dilation: list[int], groups: int, memory_limit: int, backend: str,
                         padding_mode: str = "zeros") -> Tensor:
    device = call_device(input=x, grad_output=dy)
    arrays = _any_format(x, "input"), _any_format(_like(dy, x), "grad_output")
    dw, out = device_result(x, w_shape)
    return result_tensor(dw, _run(pyooc.conv_backward_filter, *arrays, w_shape, stride=stride,
                                  padding=_padding(padding, x), dilation=dilation, groups=groups, out=out,
                                  memory_limit=memory_limit, backend=backend, device=device,
                                  padding_mode=padding_mode))


@conv_backward_filter.register_fake
def _(x, dy, w_shape, stride, padding, dilation, groups, memory_limit, backend, padding_mode="zeros"):
    return _fake_like(x, w_shape)


@torch.library.custom_op("pyooc::conv_backward_bias", mutates_args=())
def conv_backward_bias(dy: Tensor, memory_limit: int, backend: str) -> Tensor:
    device, dy_array = call_device(grad_output=dy), _any_format(dy, "grad_output")
    db, out = device_result(dy, [dy.shape[1]])
    return result_tensor(db, _run(pyooc.conv_backward_bias, dy_array, out=out, memory_limit=memory_limit,
                                  backend=backend, device=device))


@conv_backward_bias.register_fake
def _(dy, memory_limit, backend):
    return dy.new_empty([dy.shape[1]])


def _backward_results(x, w):
    """(tensors, out=) for a fused backward's (dx, dw, db), all on x's device (device_results)."""
    return device_results(x, x.shape, w.shape, [w.shape[0]])


def _fake_backward_results(x, w):
    return x.new_empty(x.shape), x.new_empty(w.shape), x.new_empty([w.shape[0]])


@torch.library.custom_op("pyooc::conv_backward_data_filter_bias", mutates_args=())
def conv_backward_data_filter_bias(x: Tensor, dy: Tensor, w: Tensor, stride: list[int], padding: list[int],
                                   dilation: list[int], groups: int, memory_limit: int,
                                   backend: str) -> tuple[Tensor, Tensor, Tensor]:
    device = call_device(input=x, grad_output=dy, weight=w)
    arrays = _array(x, "input"), _array(dy, "grad_output"), _array(w, "weight")
    grads, out = _backward_results(x, w)
    return result_tensors(grads, _run(pyooc.conv_backward_data_filter_bias, *arrays, stride=stride, padding=padding,
                                      dilation=dilation, groups=groups, out=out, memory_limit=memory_limit,
                                      backend=backend, device=device))


@conv_backward_data_filter_bias.register_fake
def _(x, dy, w, stride, padding, dilation, groups, memory_limit, backend):
    return _fake_backward_results(x, w)


def _conv_setup(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, groups, memory_limit, backend, padding_mode = inputs
    ctx.save_for_backward(x, w)
    ctx.has_bias = bias is not None
    ctx.geometry = (stride, padding, dilation, groups, memory_limit, backend, padding_mode)


def _conv_backward(ctx, dy):
    x, w = ctx.saved_tensors
    channels_last = memory_format_of(x) != torch.contiguous_format
    dy = _like(dy, x) if channels_last else contiguous_grad(dy)  # y had x's format
    stride, padding, dilation, groups, memory_limit, backend, padding_mode = ctx.geometry
    want_dx, want_dw, want_db = _needs(ctx, 0), _needs(ctx, 1), ctx.has_bias and _needs(ctx, 2)
    # One pass over dy serves all three (the fused backward: ungrouped, cuDNN's symmetric zero
    # padding, channels-first so far: w too, in x's format as the forward read it).
    if (want_dx and want_dw and groups == 1 and _symmetric(padding, w) and padding_mode == "zeros"
            and not channels_last):
        dx, dw, db = conv_backward_data_filter_bias(x, dy, _like(w, x), stride, padding, dilation, groups,
                                                    memory_limit, backend)
        return dx, dw, db if want_db else None, None, None, None, None, None, None, None
    dx = conv_backward_data(dy, w, list(x.shape), stride, padding, dilation, groups, memory_limit,
                            backend, padding_mode) if want_dx else None
    dw = conv_backward_filter(x, dy, list(w.shape), stride, padding, dilation, groups, memory_limit,
                              backend, padding_mode) if want_dw else None
    db = conv_backward_bias(dy, memory_limit, backend) if want_db else None
    return dx, dw, db, None, None, None, None, None, None, None


_register_autograd(conv_forward, _conv_backward, _conv_setup)


def _conv_data_setup(ctx, inputs, output):
    dy, w, x_shape, stride, padding, dilation, groups, memory_limit, backend, padding_mode = inputs
    ctx.save_for_backward(dy, w)
    ctx.geometry = (stride, padding, dilation, groups, memory_limit, backend, padding_mode)


def _conv_data_backward(ctx, g):
    # dx = fold(conv_transpose(dy, w)) is linear in dy and w: d dy = conv(pad(g), w), d w =
    # dconv(pad(g), dy), pad being the padding_mode's (fold is its adjoint).
    dy, w = ctx.saved_tensors
    g = contiguous_grad(g)
    geometry = ctx.geometry
    ddy = conv_forward(g, w, None, *geometry) if _needs(ctx, 0) else None
    dw = conv_backward_filter(g, dy, list(w.shape), *geometry) if _needs(ctx, 1) else None
    return ddy, dw, None, None, None, None, None, None, None, None


_register_autograd(conv_backward_data, _conv_data_backward, _conv_data_setup)


# ------------------------------------------------------------------------------------------------
# transposed convolution: backward data run as a forward op (pyooc's deconv_bias_activation_forward)


@torch.library.custom_op("pyooc::conv_transpose_forward", mutates_args=())
def conv_transpose_forward(x: Tensor, w: Tensor, bias: Optional[Tensor], stride: list[int], padding: list[int],
                           output_padding: list[int], dilation: list[int], groups: int, memory_limit: int,
                           backend: str) -> Tensor:
    device = call_device(input=x, weight=w, bias=bias)
    arrays = _array(x, "input"), _array(w, "weight"), _array(bias, "bias")
    y, out = device_result(x, conv_transpose_output_shape(x.shape, w.shape, stride, padding, output_padding,
                                                          dilation, groups))
    return result_tensor(y, _run(pyooc.deconv_bias_activation_forward, *arrays, activation="identity",
                                 stride=stride, padding=padding, output_padding=output_padding, dilation=dilation,
                                 groups=groups, out=out, memory_limit=memory_limit, backend=backend,
                                 device=device))


@conv_transpose_forward.register_fake
def _(x, w, bias, stride, padding, output_padding, dilation, groups, memory_limit, backend):
    return x.new_empty(conv_transpose_output_shape(x.shape, w.shape, stride, padding, output_padding, dilation,
                                                   groups))


def _conv_transpose_setup(ctx, inputs, output):
    x, w, bias, stride, padding, output_padding, dilation, groups, memory_limit, backend = inputs
    ctx.save_for_backward(x, w)
    ctx.has_bias = bias is not None
    ctx.geometry = (stride, padding, dilation, groups, memory_limit, backend)


def _conv_transpose_backward(ctx, dy):
    # y = conv_transpose(x, w) is the input gradient of conv(y, w): dx = conv(dy, w) and dw is the
    # filter gradient with dy as the convolution's input and x as its output gradient.
    x, w = ctx.saved_tensors
    dy = contiguous_grad(dy)
    stride, padding, dilation, groups, memory_limit, backend = ctx.geometry
    dx = conv_forward(dy, w, None, stride, padding, dilation, groups, memory_limit, backend) \
        if _needs(ctx, 0) else None
    dw = conv_backward_filter(dy, x, list(w.shape), stride, padding, dilation, groups, memory_limit, backend) \
        if _needs(ctx, 1) else None
    db = conv_backward_bias(dy, memory_limit, backend) if ctx.has_bias and _needs(ctx, 2) else None
    return dx, dw, db, None, None, None, None, None, None, None


_register_autograd(conv_transpose_forward, _conv_transpose_backward, _conv_transpose_setup)


# ------------------------------------------------------------------------------------------------
# conv + bias + activation in one pass, and its fused gradient


@torch.library.custom_op("pyooc::conv_bias_activation_forward", mutates_args=())
def conv_bias_activation_forward(x: Tensor, w: Tensor, bias: Optional[Tensor], activation: str, coef: float,
                                 stride: list[int], padding: list[int], dilation: list[int], groups: int,
                                 memory_limit: int, backend: str) -> Tensor:
    device = call_device(input=x, weight=w, bias=bias)
    arrays = _array(x, "input"), _array(w, "weight"), _array(bias, "bias")
    y, out = device_result(x, conv_output_shape(x.shape, w.shape, stride, padding, dilation))
    return result_tensor(y, _run(pyooc.conv_bias_activation_forward, *arrays, activation=activation,
                                 coef=None if activation == "identity" else coef, stride=stride, padding=padding,
                                 dilation=dilation, groups=groups, out=out, memory_limit=memory_limit,
                                 backend=backend, device=device))


@conv_bias_activation_forward.register_fake
def _(x, w, bias, activation, coef, stride, padding, dilation, groups, memory_limit, backend):
    return x.new_empty(conv_output_shape(x.shape, w.shape, stride, padding, dilation))


def _cba_setup(ctx, inputs, output):
    x, w, bias, activation, coef, stride, padding, dilation, groups, memory_limit, backend = inputs
    ctx.save_for_backward(x, w, bias, output)
    ctx.has_bias = bias is not None
    ctx.activation = (activation, coef)
    ctx.geometry = (stride, padding, dilation, groups, memory_limit, backend)


def _unfused_activation_conv_grads(ctx, x, w, y, pre, dy, activation, coef, geometry):
    """(dx, dw, db) of y = act(conv(x, w) + bias) for dy through the unfused ops (the activation's
    gradient, then the convolution's three), those ctx needs; the fused gradient's fallback for
    what it does not take (groups)."""
    memory_limit, backend = geometry[-2:]
    dz = dy if activation == "identity" else activation_backward(y, dy, y if pre is None else pre, activation, coef,
                                                                 memory_limit, backend)
    return (conv_backward_data(dz, w, list(x.shape), *geometry) if _needs(ctx, 0) else None,
            conv_backward_filter(x, dz, list(w.shape), *geometry) if _needs(ctx, 1) else None,
            conv_backward_bias(dz, memory_limit, backend) if ctx.has_bias and _needs(ctx, 2) else None)


def _cba_backward(ctx, dy):
    x, w, bias, y = ctx.saved_tensors
    dy = contiguous_grad(dy)
    activation, coef = ctx.activation
    stride, padding, dilation, groups, memory_limit, backend = ctx.geometry
    pre = None
    if activation != "identity" and not pyooc._native.activation_traits(activation)[2]:
        # The gradient needs the activation's input, which the fused forward never wrote: recompute it.
        pre = conv_forward(x, w, bias, stride, padding, dilation, groups, memory_limit, backend)
    # The fused gradient has no group dimension: the activation's gradient, then the convolution's.
    if groups != 1:
        return _unfused_activation_conv_grads(ctx, x, w, y, pre, dy, activation, coef,
                                              (stride, padding, dilation, groups, memory_limit, backend)) + (None,) * 8
    dx, dw, db = activation_conv_backward_data_filter_bias(x, dy, w, y, pre, activation, coef, stride, padding,
                                                           dilation, groups, memory_limit, backend)
    return (dx if _needs(ctx, 0) else None, dw if _needs(ctx, 1) else None,
            db if ctx.has_bias and _needs(ctx, 2) else None) + (None,) * 8


_register_autograd(conv_bias_activation_forward, _cba_backward, _cba_setup)


@torch.library.custom_op("pyooc::activation_conv_backward_data_filter_bias", mutates_args=())
def activation_conv_backward_data_filter_bias(x: Tensor, dy: Tensor, w: Tensor, y: Tensor, pre: Optional[Tensor],
                                              activation: str, coef: float, stride: list[int], padding: list[int],
                                              dilation: list[int], groups: int, memory_limit: int,
                                              backend: str) -> tuple[Tensor, Tensor, Tensor]:
    device = call_device(input=x, grad_output=dy, weight=w, y=y, pre=pre)
    arrays = _array(x, "input"), _array(dy, "grad_output"), _array(w, "weight"), _array(y, "y")
    pre_array = _array(pre, "pre")
    grads, out = _backward_results(x, w)
    return result_tensors(grads, _run(pyooc.activation_conv_backward_data_filter_bias, *arrays,
                                      activation=activation, coef=None if activation == "identity" else coef,
                                      pre=pre_array, stride=stride, padding=padding, dilation=dilation,
                                      groups=groups, out=out, memory_limit=memory_limit, backend=backend,
                                      device=device))


@activation_conv_backward_data_filter_bias.register_fake
def _(x, dy, w, y, pre, activation, coef, stride, padding, dilation, groups, memory_limit, backend):
    return _fake_backward_results(x, w)


@torch.library.custom_op("pyooc::conv_bias_activation_pooling_forward", mutates_args=())
def conv_bias_activation_pooling_forward(x: Tensor, w: Tensor, bias: Optional[Tensor], activation: str, coef: float,
                                         stride: list[int], padding: list[int], dilation: list[int], groups: int,
                                         pool_kernel: list[int], pool_stride: list[int], pool_padding: list[int],
                                         pool_mode: str, memory_limit: int, backend: str) -> Tensor:
    device = call_device(input=x, weight=w, bias=bias)
    arrays = _array(x, "input"), _array(w, "weight"), _array(bias, "bias")
    y_shape = conv_output_shape(x.shape, w.shape, stride, padding, dilation)
    q, out = device_result(x, pool_output_shape(y_shape, pool_kernel, pool_stride, pool_padding))
    return result_tensor(q, _run(pyooc.conv_bias_activation_pooling_forward, *arrays, pool_kernel=pool_kernel,
                                 pool_stride=pool_stride, pool_padding=pool_padding, pool_mode=pool_mode,
                                 activation=activation, coef=None if activation == "identity" else coef,
                                 stride=stride, padding=padding, dilation=dilation, groups=groups, out=out,
                                 memory_limit=memory_limit, backend=backend, device=device))


@conv_bias_activation_pooling_forward.register_fake
def _(x, w, bias, activation, coef, stride, padding, dilation, groups, pool_kernel, pool_stride, pool_padding,
      pool_mode, memory_limit, backend):
    y_shape = conv_output_shape(x.shape, w.shape, stride, padding, dilation)
    return x.new_empty(pool_output_shape(y_shape, pool_kernel, pool_stride, pool_padding))


def _cbap_setup(ctx, inputs, output):
    x, w, bias, activation, coef, stride, padding, dilation, groups, pk, ps, pp, pm, memory_limit, backend = inputs
    ctx.save_for_backward(x, w, bias, output)
    ctx.has_bias = bias is not None
    ctx.args = (activation, coef, stride, padding, dilation, groups, pk, ps, pp, pm, memory_limit, backend)


def _cbap_backward(ctx, dq):
    # The fused forward never wrote y = act(pre) (that is its point): the backward recomputes it in
    # one fused pass, as activation checkpointing would, then runs the fused gradient over dq.
    x, w, bias, q = ctx.saved_tensors
    activation, coef, stride, padding, dilation, groups, pk, ps, pp, pm, memory_limit, backend = ctx.args
    geometry = (stride, padding, dilation, groups, memory_limit, backend)
    y = conv_bias_activation_forward(x, w, bias, activation, coef, *geometry)
    pre = None
    if activation != "identity" and not pyooc._native.activation_traits(activation)[2]:
        pre = conv_forward(x, w, bias, *geometry)
    dx, dw, db = pooling_activation_conv_backward_data_filter_bias(
        x, contiguous_grad(dq), w, q, y, pre, pk, ps, pp, pm, activation, coef, *geometry)
    return (dx if _needs(ctx, 0) else None, dw if _needs(ctx, 1) else None,
            db if ctx.has_bias and _needs(ctx, 2) else None) + (None,) * 12


_register_autograd(conv_bias_activation_pooling_forward, _cbap_backward, _cbap_setup)


@torch.library.custom_op("pyooc::pooling_activation_conv_backward_data_filter_bias", mutates_args=())
def pooling_activation_conv_backward_data_filter_bias(
        x: Tensor, dq: Tensor, w: Tensor, q: Tensor, y: Tensor, pre: Optional[Tensor], pool_kernel: list[int],
        pool_stride: list[int], pool_padding: list[int], pool_mode: str, activation: str, coef: float,
        stride: list[int], padding: list[int], dilation: list[int], groups: int, memory_limit: int,
        backend: str) -> tuple[Tensor, Tensor, Tensor]:
    device = call_device(input=x, grad_output=dq, weight=w, output=q, y=y, pre=pre)
    arrays = (_array(x, "input"), _array(dq, "grad_output"), _array(w, "weight"), _array(q, "output"),
              _array(y, "y"))
    pre_array = _array(pre, "pre")
    grads, out = _backward_results(x, w)
    return result_tensors(grads, _run(pyooc.pooling_activation_conv_backward_data_filter_bias, *arrays,
                                      pool_kernel=pool_kernel, pool_stride=pool_stride, pool_padding=pool_padding,
                                      pool_mode=pool_mode, activation=activation,
                                      coef=None if activation == "identity" else coef, pre=pre_array, stride=stride,
                                      padding=padding, dilation=dilation, groups=groups, out=out,
                                      memory_limit=memory_limit, backend=backend, device=device))


@pooling_activation_conv_backward_data_filter_bias.register_fake
def _(x, dq, w, q, y, pre, pool_kernel, pool_stride, pool_padding, pool_mode, activation, coef, stride, padding,
      dilation, groups, memory_limit, backend):
    return _fake_backward_results(x, w)


# ------------------------------------------------------------------------------------------------
# pooling


@torch.library.custom_op("pyooc::pool_forward", mutates_args=())
def pool_forward(x: Tensor, kernel: list[int], stride: list[int], padding: list[int], mode: str,
                 memory_limit: int, backend: str) -> Tensor:
    device, x_array = call_device(input=x), _any_format(x, "input")
    y, out = device_result(x, pool_output_shape(x.shape, kernel, stride, padding))
    return result_tensor(y, _run(pyooc.pool_forward, x_array, kernel, stride=stride, padding=padding, mode=mode,
                                 out=out, memory_limit=memory_limit, backend=backend, device=device))


@pool_forward.register_fake
def _(x, kernel, stride, padding, mode, memory_limit, backend):
    return _fake_like(x, pool_output_shape(x.shape, kernel, stride, padding))


@torch.library.custom_op("pyooc::pool_backward", mutates_args=())
def pool_backward(y: Tensor, dy: Tensor, x: Tensor, kernel: list[int], stride: list[int], padding: list[int],
                  mode: str, memory_limit: int, backend: str) -> Tensor:
    device = call_device(output=y, grad_output=dy, input=x)
    arrays = _any_format(y, "output"), _any_format(_like(dy, x), "grad_output"), _any_format(x, "input")
    dx, out = device_result(x, x.shape)
    return result_tensor(dx, _run(pyooc.pool_backward, *arrays, kernel, stride=stride, padding=padding, mode=mode,
                                  out=out, memory_limit=memory_limit, backend=backend, device=device))


@pool_backward.register_fake
def _(y, dy, x, kernel, stride, padding, mode, memory_limit, backend):
    return _fake_like(x, x.shape)


def _pool_setup(ctx, inputs, output):
    x, kernel, stride, padding, mode, memory_limit, backend = inputs
    ctx.save_for_backward(x, output)
    ctx.args = (kernel, stride, padding, mode, memory_limit, backend)


def _pool_backward(ctx, dy):
    x, y = ctx.saved_tensors
    return (pool_backward(y, dy, x, *ctx.args),) + (None,) * 6  # the op makes dy dense in x's format


_register_autograd(pool_forward, _pool_backward, _pool_setup)


# ------------------------------------------------------------------------------------------------
# activations (element-wise) and softmax


@torch.library.custom_op("pyooc::activation_forward", mutates_args=())
def activation_forward(x: Tensor, mode: str, coef: float, memory_limit: int, backend: str) -> Tensor:
    device, x_array = call_device(input=x), _any_format(x, "input")
    y, out = device_result(x, x.shape)
    return result_tensor(y, _run(pyooc.activation_forward, x_array, mode, coef=coef, out=out,
                                 memory_limit=memory_limit, backend=backend, device=device))


@activation_forward.register_fake
def _(x, mode, coef, memory_limit, backend):
    return torch.empty_like(x)


@torch.library.custom_op("pyooc::activation_backward", mutates_args=())
def activation_backward(y: Tensor, dy: Tensor, x: Tensor, mode: str, coef: float, memory_limit: int,
                        backend: str) -> Tensor:
    device = call_device(output=y, grad_output=dy, input=x)
    arrays = _any_format(y, "output"), _any_format(_like(dy, x), "grad_output"), _any_format(x, "input")
    dx, out = device_result(x, x.shape)
    return result_tensor(dx, _run(pyooc.activation_backward, *arrays, mode, coef=coef, out=out,
                                  memory_limit=memory_limit, backend=backend, device=device))


@activation_backward.register_fake
def _(y, dy, x, mode, coef, memory_limit, backend):
    return torch.empty_like(x)


def _activation_setup(ctx, inputs, output):
    x, mode, coef, memory_limit, backend = inputs
    ctx.save_for_backward(x, output)
    ctx.args = (mode, coef, memory_limit, backend)


def _activation_backward(ctx, dy):
    x, y = ctx.saved_tensors
    return (activation_backward(y, dy, x, *ctx.args),) + (None,) * 4  # the op makes dy dense in x's format


_register_autograd(activation_forward, _activation_backward, _activation_setup)


@torch.library.custom_op("pyooc::softmax_forward", mutates_args=())
def softmax_forward(x: Tensor, log: bool, memory_limit: int, backend: str) -> Tensor:
    device, x_array = call_device(input=x), _array(x, "input")
    y, out = device_result(x, x.shape)
    return result_tensor(y, _run(pyooc.softmax_forward, x_array, mode="channel", log=log, out=out,
                                 memory_limit=memory_limit, backend=backend, device=device))


@softmax_forward.register_fake
def _(x, log, memory_limit, backend):
    return torch.empty_like(x)


@torch.library.custom_op("pyooc::softmax_backward", mutates_args=())
def softmax_backward(y: Tensor, dy: Tensor, log: bool, memory_limit: int, backend: str) -> Tensor:
    device = call_device(output=y, grad_output=dy)
    arrays = _array(y, "output"), _array(dy, "grad_output")
    dx, out = device_result(y, y.shape)
    return result_tensor(dx, _run(pyooc.softmax_backward, *arrays, mode="channel", log=log, out=out,
                                  memory_limit=memory_limit, backend=backend, device=device))


@softmax_backward.register_fake
def _(y, dy, log, memory_limit, backend):
    return torch.empty_like(y)


def _softmax_setup(ctx, inputs, output):
    x, log, memory_limit, backend = inputs
    ctx.save_for_backward(output)
    ctx.args = (log, memory_limit, backend)


def _softmax_backward(ctx, dy):
    (y,) = ctx.saved_tensors
    return (softmax_backward(y, contiguous_grad(dy), *ctx.args),) + (None,) * 3


_register_autograd(softmax_forward, _softmax_backward, _softmax_setup)


# ------------------------------------------------------------------------------------------------
# batch normalization. The training op is functional (custom ops with a gradient must not mutate
# their inputs): it returns the updated running statistics, which functional.batch_norm copies
# into the module's buffers, as torch's batch_norm updates them in place. pyooc returns the
# per-channel statistics and gradients on the host (it takes no out= for them): they are copied
# to x's device (host_result), C floats each.


@torch.library.custom_op("pyooc::batchnorm_forward_training", mutates_args=())
def batchnorm_forward_training(x: Tensor, weight: Tensor, bias: Tensor, running_mean: Optional[Tensor],
                               running_var: Optional[Tensor], momentum: float, eps: float, memory_limit: int,
                               backend: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    device = call_device(input=x, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var)
    new_mean = new_var = None
    if running_mean is not None:  # updated copies on the statistics' device; the caller's stay as they are
        new_mean = check_tensor(running_mean, "running_mean").detach().clone()
        new_var = check_tensor(running_var, "running_var").detach().clone()
    arrays = _any_format(x, "input"), _array(weight, "weight", FLOAT32), _array(bias, "bias", FLOAT32)
    stats = _array(new_mean, "running_mean", FLOAT32), _array(new_var, "running_var", FLOAT32)
    y, out = device_result(x, x.shape)
    y_array, saved_mean, saved_invstd = _run(pyooc.batchnorm_forward_training, *arrays, eps=eps, momentum=momentum,
                                             running_mean=stats[0], running_var=stats[1], out=out,
                                             memory_limit=memory_limit, backend=backend, device=device)
    empty = x.new_empty([0], dtype=torch.float32)
    return (result_tensor(y, y_array), host_result(x, saved_mean), host_result(x, saved_invstd),
            empty if new_mean is None else new_mean, empty.clone() if new_var is None else new_var)


@batchnorm_forward_training.register_fake
def _(x, weight, bias, running_mean, running_var, momentum, eps, memory_limit, backend):
    c = x.shape[1]
    f32 = torch.float32  # the statistics are float32 whatever x is (pyooc/batchnorm.py)
    if running_mean is None:
        new_mean = new_var = x.new_empty([0], dtype=f32)
    else:  # on the running statistics' own device, as the real op's updated copies
        new_mean, new_var = running_mean.new_empty([c], dtype=f32), running_var.new_empty([c], dtype=f32)
    return _fake_like(x, x.shape), x.new_empty([c], dtype=f32), x.new_empty([c], dtype=f32), new_mean, new_var.clone()


@torch.library.custom_op("pyooc::batchnorm_backward", mutates_args=())
def batchnorm_backward(x: Tensor, dy: Tensor, weight: Tensor, saved_mean: Tensor, saved_invstd: Tensor, eps: float,
                       memory_limit: int, backend: str) -> tuple[Tensor, Tensor, Tensor]:
    device = call_device(input=x, grad_output=dy, weight=weight, save_mean=saved_mean, save_invstd=saved_invstd)
    arrays = (_any_format(x, "input"), _any_format(_like(dy, x), "grad_output"), _array(weight, "weight", FLOAT32),
              _array(saved_mean, "save_mean", FLOAT32), _array(saved_invstd, "save_invstd", FLOAT32))
    dx, out = device_result(x, x.shape)
    dx_array, dw, db = _run(pyooc.batchnorm_backward, *arrays, eps=eps, out=out, memory_limit=memory_limit,
                            backend=backend, device=device)
    return result_tensor(dx, dx_array), host_result(x, dw), host_result(x, db)


@batchnorm_backward.register_fake
def _(x, dy, weight, saved_mean, saved_invstd, eps, memory_limit, backend):
    c = x.shape[1]
    return _fake_like(x, x.shape), x.new_empty([c], dtype=torch.float32), x.new_empty([c], dtype=torch.float32)


def _bn_training_setup(ctx, inputs, output):
    x, weight, bias, running_mean, running_var, momentum, eps, memory_limit, backend = inputs
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.args = (eps, memory_limit, backend)


def _bn_training_backward(ctx, dy, *_unused_stat_grads):
    x, weight, saved_mean, saved_invstd = ctx.saved_tensors
    # The op makes dy dense in x's format.
    dx, dw, db = batchnorm_backward(x, dy, weight, saved_mean, saved_invstd, *ctx.args)
    return (dx if _needs(ctx, 0) else None, dw if _needs(ctx, 1) else None, db if _needs(ctx, 2) else None,
            None, None, None, None, None, None)


_register_autograd(batchnorm_forward_training, _bn_training_backward, _bn_training_setup)


@torch.library.custom_op("pyooc::batchnorm_forward_inference", mutates_args=())
def batchnorm_forward_inference(x: Tensor, weight: Tensor, bias: Tensor, mean: Tensor, var: Tensor, eps: float,
                                memory_limit: int, backend: str) -> Tensor:
    device = call_device(input=x, weight=weight, bias=bias, running_mean=mean, running_var=var)
    arrays = (_any_format(x, "input"), _array(weight, "weight", FLOAT32), _array(bias, "bias", FLOAT32),
              _array(mean, "running_mean", FLOAT32), _array(var, "running_var", FLOAT32))
    y, out = device_result(x, x.shape)
    return result_tensor(y, _run(pyooc.batchnorm_forward_inference, *arrays, eps=eps, out=out,
                                 memory_limit=memory_limit, backend=backend, device=device))


@batchnorm_forward_inference.register_fake
def _(x, weight, bias, mean, var, eps, memory_limit, backend):
    return _fake_like(x, x.shape)


def _bn_inference_setup(ctx, inputs, output):
    x, weight, bias, mean, var, eps, memory_limit, backend = inputs
    ctx.save_for_backward(x, weight, mean, var)
    ctx.args = (eps, memory_limit, backend)


def _bn_inference_backward(ctx, dy):
    # With fixed statistics, y = weight * (x - mean) * invstd + bias: dx = dy * weight * invstd is the
    # same op on dy with a zero mean and bias (pyooc streams it). dweight = sum(dy * xhat) and
    # dbias = sum(dy) are the training backward's parameter gradients with the running statistics in
    # place of the batch's: that op reduces them in float32 from x and dy as given, where forming
    # dy * xhat in a half input's dtype first would round every term (torch keeps them float32 too).
    x, weight, mean, var = ctx.saved_tensors
    eps, memory_limit, backend = ctx.args
    dy = _like(dy, x)  # dense in x's format: one call takes one layout
    zeros = torch.zeros_like(mean)
    dx = batchnorm_forward_inference(dy, weight, zeros, zeros, var, eps, memory_limit, backend) \
        if _needs(ctx, 0) else None
    dw = db = None
    if _needs(ctx, 1) or _needs(ctx, 2):
        invstd = torch.rsqrt(var.double() + eps).to(var.dtype)
        _, dw, db = batchnorm_backward(x, dy, weight, mean, invstd, eps, memory_limit, backend)
    return dx, dw if _needs(ctx, 1) else None, db if _needs(ctx, 2) else None, None, None, None, None, None


_register_autograd(batchnorm_forward_inference, _bn_inference_backward, _bn_inference_setup)


# ------------------------------------------------------------------------------------------------
# GEMM: linear (torch's F.linear on 2-D input) and matmul


@torch.library.custom_op("pyooc::linear_forward", mutates_args=())
def linear_forward(x: Tensor, w: Tensor, bias: Optional[Tensor], memory_limit: int, backend: str) -> Tensor:
    device = call_device(input=x, weight=w, bias=bias)
    arrays = _array(x, "input"), _array(w, "weight"), _array(bias, "bias")
    y, out = device_result(x, [x.shape[0], w.shape[0]])
    return result_tensor(y, _run(pyooc.linear_forward, *arrays, out=out, memory_limit=memory_limit, backend=backend,
                                 device=device))


@linear_forward.register_fake
def _(x, w, bias, memory_limit, backend):
    return x.new_empty([x.shape[0], w.shape[0]])


@torch.library.custom_op("pyooc::linear_backward", mutates_args=())
def linear_backward(x: Tensor, w: Tensor, dy: Tensor, bias: bool, memory_limit: int,
                    backend: str) -> tuple[Tensor, Tensor, Tensor]:
    device = call_device(input=x, weight=w, grad_output=dy)
    arrays = _array(x, "input"), _array(w, "weight"), _array(dy, "grad_output")
    shapes = [x.shape, w.shape] + ([[w.shape[0]]] if bias else [])
    made, out = device_results(x, *shapes)  # CUDA x: CUDA gradients, written in place by pyooc
    if out is not None and not bias:
        out = (*out, None)  # no db
    dx, dw, db = _run(pyooc.linear_backward, *arrays, bias=bias, out=out, memory_limit=memory_limit, backend=backend,
                      device=device)
    dx, dw = result_tensors(None if made is None else made[:2], (dx, dw))
    if not bias:
        return dx, dw, x.new_empty([0])
    return dx, dw, result_tensor(None if made is None else made[2], db)


@linear_backward.register_fake
def _(x, w, dy, bias, memory_limit, backend):
    return x.new_empty(x.shape), x.new_empty(w.shape), x.new_empty([w.shape[0] if bias else 0])


def _linear_setup(ctx, inputs, output):
    x, w, bias, memory_limit, backend = inputs
    ctx.save_for_backward(x, w)
    ctx.has_bias = bias is not None
    ctx.args = (memory_limit, backend)


def _linear_backward(ctx, dy):
    x, w = ctx.saved_tensors
    want_db = ctx.has_bias and _needs(ctx, 2)
    dx, dw, db = linear_backward(x, w, contiguous_grad(dy), want_db, *ctx.args)
    return dx if _needs(ctx, 0) else None, dw if _needs(ctx, 1) else None, db if want_db else None, None, None


_register_autograd(linear_forward, _linear_backward, _linear_setup)


@torch.library.custom_op("pyooc::matmul", mutates_args=())
def matmul(a: Tensor, b: Tensor, memory_limit: int, backend: str) -> Tensor:
    device = call_device(input=a, mat2=b)
    arrays = _array(a, "input"), _array(b, "mat2")
    c, out = device_result(a, [a.shape[0], b.shape[1]])
    return result_tensor(c, _run(pyooc.matmul, *arrays, out=out, memory_limit=memory_limit, backend=backend,
                                 device=device))


@matmul.register_fake
def _(a, b, memory_limit, backend):
    return a.new_empty([a.shape[0], b.shape[1]])


def _matmul_setup(ctx, inputs, output):
    a, b, memory_limit, backend = inputs
    ctx.save_for_backward(a, b)
    ctx.args = (memory_limit, backend)


def _matmul_backward(ctx, g):
    # da = g @ b.T is linear(g, b) (b read in place); db = a.T @ g needs a transposed copy of a.
    a, b = ctx.saved_tensors
    g = contiguous_grad(g)
    da = linear_forward(g, b, None, *ctx.args) if _needs(ctx, 0) else None
    db = matmul(a.t().contiguous(), g, *ctx.args) if _needs(ctx, 1) else None
    return da, db, None, None


_register_autograd(matmul, _matmul_backward, _matmul_setup)


# ------------------------------------------------------------------------------------------------
# add_tensor: alpha * a + beta * c, a broadcast over c (cuDNN AddTensor)


@torch.library.custom_op("pyooc::add_tensor", mutates_args=())
def add_tensor(a: Tensor, c: Tensor, alpha: float, beta: float, memory_limit: int, backend: str) -> Tensor:
    device = call_device(a=a, c=c)
    arrays = _any_format(a, "a"), _any_format(c, "c")
    y, out = device_result(c, c.shape)  # the result has c's shape, on c's device
    return result_tensor(y, _run(pyooc.add_tensor, *arrays, alpha=alpha, beta=beta, out=out,
                                 memory_limit=memory_limit, backend=backend, device=device))


@add_tensor.register_fake
def _(a, c, alpha, beta, memory_limit, backend):
    return _fake_like(c, c.shape)


def _add_setup(ctx, inputs, output):
    a, c, alpha, beta, memory_limit, backend = inputs
    ctx.a_shape = a.shape
    ctx.scales = (alpha, beta)


def _add_backward(ctx, g):
    # The broadcast's reduction (sum over a's size-1 dims) is torch's own, on g's device.
    alpha, beta = ctx.scales
    da = (g * alpha).sum_to_size(ctx.a_shape) if _needs(ctx, 0) else None
    dc = g * beta if _needs(ctx, 1) else None
    return da, dc, None, None, None, None


_register_autograd(add_tensor, _add_backward, _add_setup)


# Every op above, by name: the tests opcheck each one.
OPS = {name: obj for name, obj in dict(globals()).items()
       if isinstance(obj, torch._library.custom_ops.CustomOpDef)}
