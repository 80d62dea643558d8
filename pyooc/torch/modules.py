"""Drop-ins for torch.nn's layers: each subclasses torch's module (same constructor arguments,
Parameters, buffers and state_dict keys) and overrides only forward, which calls pyooc's functional
form (functional.py) with the module's `memory_limit`, `backend` and `devices` (three extra keyword
arguments, also plain attributes: set them after construction or through convert() and
set_options(); devices None: pyooc's process default when the layer runs).

What a module is configured for and pyooc does not compute (momentum=None, ceil_mode=True, ...)
raises NotImplementedError at construction, naming the argument. Conv1d/2d/3d take every
padding_mode torch does, computed in the chunks' halo (no padded copy of the input).
"""

from torch import nn

from pyooc.devices import call_devices
from pyooc.torch import functional as F


def _checked_devices(devices):
    """devices as a module keeps it: None (the process default when the layer runs), else the
    ordinals (pyooc's devices=, checked and "all" resolved now, naming the argument)."""
    return None if devices is None else list(call_devices(devices))

_DEFAULTS = {"memory_limit": None, "backend": "auto", "devices": None}


class _PyoocModule:
    """What every drop-in adds to its torch class: the three options, the check of the
    configuration (run at construction and by convert(), before a module is swapped), and the
    placement policy that may run the layer instead (pyooc/torch/policy.py; None: always pyooc)."""

    pyooc_policy = None

    def _init_options(self, memory_limit, backend, devices):
        self.memory_limit = memory_limit
        self.backend = backend
        self.devices = _checked_devices(devices)
        self._pyooc_check()

    def _pyooc_check(self):
        pass

    def _kw(self):
        return {"memory_limit": self.memory_limit, "backend": self.backend, "devices": self.devices}

    def extra_repr(self):
        text = super().extra_repr()
        return text + (", " if text else "") + f"memory_limit={self.memory_limit!r}, backend={self.backend!r}" + \
            (f", devices={self.devices!r}" if self.devices is not None else "")


def _drop_in(torch_cls, forward, check=None):
    """A subclass of torch_cls whose forward is pyooc's: forward(module, input) -> output."""

    def __init__(self, *args, memory_limit=None, backend="auto", devices=None, **kwargs):
        torch_cls.__init__(self, *args, **kwargs)
        self._init_options(memory_limit, backend, devices)

    def dispatch(self, *args, **kwargs):
        if self.pyooc_policy is not None:
            return self.pyooc_policy.run(self, forward, args, kwargs)
        return forward(self, *args, **kwargs)

    body = {"__init__": __init__, "forward": dispatch, "pyooc_forward": forward, "__doc__": f"pyooc's drop-in for torch.nn.{torch_cls.__name__}"
            " (same arguments, Parameters and state_dict; plus memory_limit=, backend= and devices=)."}
    if check is not None:
        body["_pyooc_check"] = check
    cls = type(torch_cls.__name__, (_PyoocModule, torch_cls), body)
    cls.__module__ = __name__
    cls.torch_class = torch_cls
    return cls


def _conv_forward(fn):
    def forward(self, input):
        return fn(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
                  padding_mode=self.padding_mode, **self._kw())
    return forward


def _conv_transpose_forward(fn, spatial):
    def forward(self, input, output_size=None):
        output_padding = self._output_padding(input, output_size, self.stride, self.padding, self.kernel_size,
                                              spatial, self.dilation)
        return fn(input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups,
                  self.dilation, **self._kw())
    return forward


def _check_conv_transpose(self):
    # torch's own constructor refuses other modes; this guards a module changed after it (convert()).
    if self.padding_mode != "zeros":
        raise NotImplementedError(f"padding_mode={self.padding_mode!r} is not supported by pyooc's transposed "
                                  "convolutions (only 'zeros', as torch's)")


Conv1d = _drop_in(nn.Conv1d, _conv_forward(F.conv1d))
Conv2d = _drop_in(nn.Conv2d, _conv_forward(F.conv2d))
Conv3d = _drop_in(nn.Conv3d, _conv_forward(F.conv3d))
ConvTranspose1d = _drop_in(nn.ConvTranspose1d, _conv_transpose_forward(F.conv_transpose1d, 1),
                           _check_conv_transpose)
ConvTranspose2d = _drop_in(nn.ConvTranspose2d, _conv_transpose_forward(F.conv_transpose2d, 2),
                           _check_conv_transpose)
ConvTranspose3d = _drop_in(nn.ConvTranspose3d, _conv_transpose_forward(F.conv_transpose3d, 3),
                           _check_conv_transpose)


def _check_batch_norm(self):
    if self.momentum is None:
        raise NotImplementedError("momentum=None (the cumulative moving average) is not supported by pyooc")


def _batch_norm_forward(self, input):
    # torch's _BatchNorm.forward, with pyooc's batch_norm.
    self._check_input_dim(input)
    if self.training and self.track_running_stats and self.num_batches_tracked is not None:
        self.num_batches_tracked.add_(1)
    bn_training = self.training or (self.running_mean is None and self.running_var is None)
    use_running = not self.training or self.track_running_stats
    return F.batch_norm(input, self.running_mean if use_running else None,
                        self.running_var if use_running else None, self.weight, self.bias, bn_training,
                        self.momentum, self.eps, **self._kw())


BatchNorm1d = _drop_in(nn.BatchNorm1d, _batch_norm_forward, _check_batch_norm)
BatchNorm2d = _drop_in(nn.BatchNorm2d, _batch_norm_forward, _check_batch_norm)
BatchNorm3d = _drop_in(nn.BatchNorm3d, _batch_norm_forward, _check_batch_norm)


def _check_max_pool(self):
    dilation = self.dilation if isinstance(self.dilation, (tuple, list)) else (self.dilation,)
    for name, bad in (("dilation", any(d != 1 for d in dilation)), ("ceil_mode", self.ceil_mode),
                      ("return_indices", self.return_indices)):
        if bad:
            raise NotImplementedError(f"{name}={getattr(self, name)!r} is not supported by pyooc's max pooling")


def _max_pool_forward(fn):
    def forward(self, input):
        return fn(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                  self.return_indices, **self._kw())
    return forward


def _check_avg_pool(self):
    if self.ceil_mode:
        raise NotImplementedError("ceil_mode=True is not supported by pyooc's average pooling")
    if getattr(self, "divisor_override", None) is not None:
        raise NotImplementedError(f"divisor_override={self.divisor_override!r} is not supported by pyooc")


def _avg_pool_forward(fn, has_divisor):
    def forward(self, input):
        extra = (self.divisor_override,) if has_divisor else ()
        return fn(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad, *extra,
                  **self._kw())
    return forward


MaxPool1d = _drop_in(nn.MaxPool1d, _max_pool_forward(F.max_pool1d), _check_max_pool)
MaxPool2d = _drop_in(nn.MaxPool2d, _max_pool_forward(F.max_pool2d), _check_max_pool)
MaxPool3d = _drop_in(nn.MaxPool3d, _max_pool_forward(F.max_pool3d), _check_max_pool)
AvgPool1d = _drop_in(nn.AvgPool1d, _avg_pool_forward(F.avg_pool1d, False), _check_avg_pool)
AvgPool2d = _drop_in(nn.AvgPool2d, _avg_pool_forward(F.avg_pool2d, True), _check_avg_pool)
AvgPool3d = _drop_in(nn.AvgPool3d, _avg_pool_forward(F.avg_pool3d, True), _check_avg_pool)

ReLU = _drop_in(nn.ReLU, lambda self, input: F.relu(input, **self._kw()))
ReLU6 = _drop_in(nn.ReLU6, lambda self, input: F.relu6(input, **self._kw()))
Sigmoid = _drop_in(nn.Sigmoid, lambda self, input: F.sigmoid(input, **self._kw()))
Tanh = _drop_in(nn.Tanh, lambda self, input: F.tanh(input, **self._kw()))
ELU = _drop_in(nn.ELU, lambda self, input: F.elu(input, self.alpha, **self._kw()))
LeakyReLU = _drop_in(nn.LeakyReLU, lambda self, input: F.leaky_relu(input, self.negative_slope, **self._kw()))
SiLU = _drop_in(nn.SiLU, lambda self, input: F.silu(input, **self._kw()))


def _check_gelu(self):
    if self.approximate != "none":
        raise NotImplementedError(f"approximate={self.approximate!r} is not supported by pyooc (the exact GELU only)")


GELU = _drop_in(nn.GELU, lambda self, input: F.gelu(input, self.approximate, **self._kw()), _check_gelu)
Linear = _drop_in(nn.Linear, lambda self, input: F.linear(input, self.weight, self.bias, **self._kw()))
Softmax = _drop_in(nn.Softmax, lambda self, input: F.softmax(input, self.dim, **self._kw()))
LogSoftmax = _drop_in(nn.LogSoftmax, lambda self, input: F.log_softmax(input, self.dim, **self._kw()))

# torch's class -> pyooc's drop-in, for convert().
DROP_INS = {cls.torch_class: cls for cls in (
    Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, BatchNorm1d, BatchNorm2d,
    BatchNorm3d, MaxPool1d, MaxPool2d, MaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, ReLU, ReLU6, Sigmoid, Tanh, ELU,
    LeakyReLU, SiLU, GELU, Linear, Softmax, LogSoftmax)}


def convert(model, memory_limit=None, backend="auto", devices=None):
    """Swaps the supported modules of `model` (itself included) for pyooc's drop-ins in place and
    returns model. Nothing is copied: each module keeps its identity, Parameters, buffers, hooks
    and state_dict; only its class changes (to the drop-in subclass of its own class) and it gains
    memory_limit, backend and devices. Modules of exactly a supported torch class are swapped (a subclass
    of one may have its own forward, so it is left alone), as are configurations pyooc computes;
    the others (grouped convolutions, ceil_mode pooling, ...) stay torch's. Returns the model; the
    names left as they were are in model.pyooc_skipped (name -> reason)."""
    devices = _checked_devices(devices)
    skipped = {}
    for name, module in model.named_modules():
        cls = DROP_INS.get(type(module))
        if cls is None:
            continue
        try:
            cls._pyooc_check(module)
        except NotImplementedError as exc:
            skipped[name] = str(exc)
            continue
        module.__class__ = cls
        module.memory_limit, module.backend, module.devices = memory_limit, backend, devices
    model.pyooc_skipped = skipped
    return model


def set_options(model, **options):
    """Sets memory_limit, backend and/or devices on every pyooc module of model."""
    unknown = set(options) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown options {sorted(unknown)} (known: {sorted(_DEFAULTS)})")
    if "devices" in options:
        options["devices"] = _checked_devices(options["devices"])
    for module in model.modules():
        if isinstance(module, _PyoocModule):
            for key, value in options.items():
                setattr(module, key, value)
    return model


__all__ = [cls.__name__ for cls in DROP_INS.values()] + ["convert", "set_options"]
