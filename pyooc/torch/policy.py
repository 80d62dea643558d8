"""A whole network under one device budget (vDNN's and ooc_cuDNN's idea): the user states one
budget, and the model does not change.

    runner = pyooc.torch.policy.OutOfCore(model.cuda(), budget="8GiB")
    loss = loss_fn(runner(x), target); loss.backward(); optimizer.step()

Per layer, at every call (shapes may change between calls):
- **Placement.** A supported layer (the drop-in classes, modules.py) whose device working set fits
  what torch's share of the budget has free (below) runs in core: torch's own forward on the
  device, its input moved there if it is not. A layer that does not fit runs chunked through pyooc
  (memory_limit = the compute share) on host tensors: its input moved to the host if it is not,
  its output left there.
  Parameters stay where the user put them (on the device); a pyooc layer reads host copies, made
  with autograd-tracked .to("cpu"), so their gradients reach the device Parameters. Other modules
  (torch.cat, losses, user code) run where their inputs are; where those are on both the device and
  the host (a U-Net's skip connection joining a pyooc layer's output and an in-core one's), the
  device ones move to the host (_OneDevice), where the larger tensors already are.
- **Saved activations.** During the forward, every tensor autograd saves on the device is kept
  there while this step's keep budget (below) has room; past it, it is copied to pinned host memory
  on a side stream (the forward does not wait for the copy) and the device copy is released. In the
  backward, the tensors come back in the reverse order of their saving: unpacking one starts the
  copies of the next `prefetch` offloaded ones on the side stream, so they arrive ahead of their
  backward, overlapped with compute, as far as torch's share has room for them (a prefetch that
  would take it past its budget waits until its backward asks for the tensor). A tensor saved
  twice (a layer's output is the next layer's input) is packed once.

The budget splits in two (compute_fraction, default 0.5). The compute share is pyooc's: each
pyooc call's memory_limit, kept free of torch's allocations so that a call always finds it. Torch's
allocator holds the rest (torch_budget): the parameters, their gradients and the optimizer's state,
the activations alive in the forward (a U-Net's skip connections), the saved activations kept on the
device, and the working sets of the layers that run in core. The runner counts what torch holds at
the moment it decides (torch.cuda.memory_allocated), not by its own estimates:
- at each step's start, the room torch's share has left (less the gradients the backward will
  allocate) sets how many saved bytes stay on the device this step (keep_fraction of it);
- a layer runs in core only when its working set fits what torch's share has free at that moment
  (less the same gradient reserve and a margin for cuDNN's workspace and the allocator's rounding);
- a layer whose in-core forward still runs out of memory runs through pyooc instead.
The device then never holds more than the budget: torch's share (which the caller may enforce with
torch.cuda.set_per_process_memory_fraction(torch_budget / total), as bench/train_network.py does)
plus pyooc's share.
"""

import weakref
from collections import Counter

import torch

from pyooc.memory import parse_memory_limit
from pyooc.torch import modules as _modules
from pyooc.torch._shapes import conv_output_shape, conv_transpose_output_shape, pool_output_shape

nn = torch.nn


# ------------------------------------------------------------------------------------------------
# placement: which layers fit


def _ntuple(value, n):
    return list(value) * (n if len(value) == 1 else 1) if isinstance(value, (tuple, list)) else [value] * n


def output_shape(module, x_shape):
    """The output shape of a supported layer for an input of x_shape, without running it."""
    n = len(x_shape) - 2
    if isinstance(module, nn.modules.conv._ConvTransposeNd):
        return conv_transpose_output_shape(x_shape, module.weight.shape, module.stride, module.padding,
                                           module.output_padding, module.dilation, module.groups)
    if isinstance(module, nn.modules.conv._ConvNd):
        if module.padding == "same":  # torch's "same" keeps the spatial size (stride 1)
            return [x_shape[0], module.out_channels, *x_shape[2:]]
        padding = [0] * n if module.padding == "valid" else module.padding
        return conv_output_shape(x_shape, module.weight.shape, module.stride, padding, module.dilation)
    if isinstance(module, (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd)):
        kernel = _ntuple(module.kernel_size, n)
        stride = kernel if module.stride in (None, ()) else _ntuple(module.stride, n)
        return pool_output_shape(x_shape, kernel, stride, _ntuple(module.padding, n))
    if isinstance(module, nn.Linear):
        return [*x_shape[:-1], module.out_features]
    return list(x_shape)  # element-wise, batch norm, softmax


def _numel(shape):
    count = 1
    for d in shape:
        count *= int(d)
    return count


def device_bytes(module, x_shape, element_size=4):
    """What the layer needs on the device to run in core, forward and backward: its input and
    output twice (x and y, then dy and dx) and its parameters twice (w and dw)."""
    params = sum(p.numel() for p in module.parameters(recurse=False))
    return element_size * (2 * (_numel(x_shape) + _numel(output_shape(module, x_shape))) + 2 * params)


def decide(module, x_shape, free_bytes, element_size=4):
    """"device" (in core, torch's forward) or "pyooc" (chunked, host tensors) for this layer and
    input, given the device bytes torch may still take."""
    return "device" if device_bytes(module, x_shape, element_size) <= free_bytes else "pyooc"


def bytes_in_use(device):
    """Device bytes torch's allocator holds for tensors now (0 on the CPU: nothing is on a device)."""
    device = torch.device(device)
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def gradient_reserve(model, device):
    """Bytes the backward will allocate for the gradients of `model`'s device Parameters that have
    none yet (zero_grad(set_to_none=True) freed them)."""
    device = torch.device(device)
    return sum(p.numel() * p.element_size() for p in model.parameters()
               if p.requires_grad and p.grad is None and p.device.type == device.type)


# ------------------------------------------------------------------------------------------------
# saved activations: kept, or offloaded to pinned host memory and prefetched for the backward


class _Kept:
    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor


class _Offloaded:
    __slots__ = ("index", "host", "device_copy", "ready")

    def __init__(self, index, host):
        self.index, self.host, self.device_copy, self.ready = index, host, None, None


class SavedTensorOffloader:
    """The pack/unpack pair of torch.autograd.graph.saved_tensors_hooks: saved tensors on `device`
    stay there up to `budget` bytes per step, the rest go to (pinned, on CUDA) host memory and come
    back `prefetch` ahead of the backward's order. On a CPU `device` (the tests') the host copy is
    a plain clone and the copies run in line: the logic is the same, without streams.

    stats (per step): kept / offloaded / deduplicated tensors, offloaded bytes, prefetched and
    fetched_on_demand copies back."""

    def __init__(self, budget, device, *, prefetch=2, pin_memory=None, device_limit=None):
        self.budget = budget if isinstance(budget, int) and budget >= 0 else parse_memory_limit(budget)
        # Prefetched copies never take the device's allocated bytes past this (None: no bound): a
        # copy that would is fetched when its backward asks for it instead.
        self.device_limit = device_limit
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:  # tensors say cuda:N, never cuda
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.prefetch = int(prefetch)
        self.cuda = self.device.type == "cuda"
        self.pin_memory = self.cuda if pin_memory is None else bool(pin_memory)
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.new_step()

    def new_step(self, budget=None):
        """Forgets the last step's handles: the budget is per forward/backward pass (budget: this
        step's, else the one given before)."""
        if budget is not None:
            self.budget = max(0, int(budget))
        self.resident = 0
        self.offloaded = []  # in packing order: the backward unpacks them about in reverse
        self.seen = {}
        self.stats = Counter()

    def pack(self, t):
        if t.device != self.device:
            return _Kept(t)  # host tensors (pyooc layers' own) stay where they are
        # The same tensor again (alive: a freed tensor's memory may hold a new one of the same shape).
        key = (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t._version)
        earlier = self.seen.get(key)
        if earlier is not None and earlier[0]() is t:
            self.stats["deduplicated"] += 1
            return earlier[1]
        nbytes = t.numel() * t.element_size()
        if self.resident + nbytes <= self.budget:
            self.resident += nbytes
            handle = _Kept(t)
            self.stats["kept"] += 1
        else:
            handle = _Offloaded(len(self.offloaded), self._to_host(t))
            self.offloaded.append(handle)
            self.stats["offloaded"] += 1
            self.stats["offloaded_bytes"] += nbytes
        self.seen[key] = (weakref.ref(t), handle)
        return handle

    def unpack(self, handle):
        if isinstance(handle, _Kept):
            return handle.tensor
        if handle.device_copy is None:
            self._fetch(handle)
            self.stats["fetched_on_demand"] += 1
        # The backward needs the tensors packed before this one next: start their copies now.
        started, j = 0, handle.index - 1
        while started < self.prefetch and j >= 0:
            ahead = self.offloaded[j]
            if ahead.device_copy is None:
                if not self._room_for(ahead.host):
                    break
                self._fetch(ahead)
                self.stats["prefetched"] += 1
                started += 1
            j -= 1
        t = handle.device_copy
        if self.cuda:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(handle.ready)
            t.record_stream(current)  # allocated on the side stream, used on this one
        handle.device_copy = None  # handed over; a second unpack fetches again from the host copy
        return t

    def _room_for(self, host):
        if self.device_limit is None or not self.cuda:
            return True
        return bytes_in_use(self.device) + host.numel() * host.element_size() <= self.device_limit

    def _to_host(self, t):
        if not self.cuda:
            return t.detach().clone()
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=self.pin_memory)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))  # t is complete on the stream
        with torch.cuda.stream(self.stream):
            host.copy_(t.detach(), non_blocking=True)
        t.record_stream(self.stream)  # t's memory is not reused before the copy has read it
        return host

    def _fetch(self, handle):
        if not self.cuda:
            handle.device_copy = handle.host.clone()
            return
        with torch.cuda.stream(self.stream):
            handle.device_copy = handle.host.to(self.device, non_blocking=True)
            handle.ready = torch.cuda.Event()
            handle.ready.record(self.stream)

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


# ------------------------------------------------------------------------------------------------
# the runner


class _OneDevice(torch.overrides.TorchFunctionMode):
    """During the runner's forward: a torch function given tensors on the device and (non-scalar)
    tensors on the host gets them all on the host (autograd-tracked moves), instead of failing."""

    def __init__(self, device):
        super().__init__()
        self.device = device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, spec = torch.utils._pytree.tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        on_host = any(t.device.type == "cpu" and t.dim() > 0 for t in tensors)
        on_device = any(t.device.type == self.device.type != "cpu" for t in tensors)
        name = getattr(func, "__name__", "")
        # Copies between devices are meant; an in-place op's target must not be replaced by a copy.
        if on_host and on_device and name not in _MOVES and not name.endswith("_"):
            flat = [t.to("cpu") if isinstance(t, torch.Tensor) and t.device.type != "cpu" else t for t in flat]
            args, kwargs = torch.utils._pytree.tree_unflatten(flat, spec)
        return func(*args, **kwargs)


_MOVES = {"to", "cpu", "cuda", "pin_memory", "_to_copy", "copy", "__setitem__"}


class OutOfCore:
    """Runs `model` under one device `budget` (bytes or "8GiB"): see the module's docstring.

    The model's supported layers become pyooc's drop-ins in place (modules.convert: same objects,
    Parameters and state_dict) with this policy attached; release() gives them their torch classes
    back. decisions: layer name -> "device" or "pyooc" at the last call; offloader.stats: what the
    last step's saved activations did."""

    def __init__(self, model, budget, *, device="cuda", compute_fraction=0.5, keep_fraction=0.5, prefetch=2,
                 backend="auto"):
        try:
            total = parse_memory_limit(budget)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"budget must be a positive number of bytes or a string like '8GiB', got {budget!r}") \
                from exc
        if not total:
            raise ValueError(f"budget must be a positive number of bytes or a string like '8GiB', got {budget!r}")
        if not 0.0 < compute_fraction < 1.0:
            raise ValueError(f"compute_fraction must be in (0, 1), got {compute_fraction}")
        if not 0.0 <= keep_fraction < 1.0:  # 0: every saved activation offloaded
            raise ValueError(f"keep_fraction must be in [0, 1), got {keep_fraction}")
        self.model = model
        self.device = torch.device(device)
        self.budget = total
        self.compute_budget = int(total * compute_fraction)  # pyooc's calls: their memory_limit
        self.torch_budget = total - self.compute_budget      # torch's allocator: everything else
        # cuDNN's workspace of an in-core layer and the allocator's rounding, outside device_bytes.
        self.margin = self.torch_budget // 16
        self.keep_fraction = keep_fraction
        self.backend = backend
        self.offloader = SavedTensorOffloader(0, self.device, prefetch=prefetch,
                                              device_limit=self.torch_budget - self.margin)
        self.decisions = {}
        self._names = {}
        self._gradient_reserve = 0
        _modules.convert(model, memory_limit=self.compute_budget, backend=backend)
        for name, module in model.named_modules():
            if isinstance(module, _modules._PyoocModule):
                module.pyooc_policy = self
                self._names[module] = name

    def __call__(self, *args, **kwargs):
        self._gradient_reserve = gradient_reserve(self.model, self.device)
        self.offloader.new_step(budget=int(max(0, self.free_bytes()) * self.keep_fraction))
        with self.offloader.hooks(), _OneDevice(self.device):
            return self.model(*args, **kwargs)

    def free_bytes(self):
        """What torch's share has free now for an in-core layer's working set."""
        return self.torch_budget - bytes_in_use(self.device) - self._gradient_reserve - self.margin

    def release(self):
        """Detaches the policy and gives every swapped module its torch class back."""
        for module in self._names:
            module.pyooc_policy = None
            module.__class__ = module.torch_class
        self._names = {}

    def run(self, module, pyooc_forward, args, kwargs):
        """A drop-in's forward under the policy (modules._PyoocModule.forward calls this)."""
        x = args[0]
        name = self._names.get(module, "?")
        decision = decide(module, x.shape, self.free_bytes(), x.element_size())
        self.decisions[name] = decision
        if decision == "device":
            try:
                return module.torch_class.forward(module, x.to(self.device), *args[1:], **kwargs)
            except torch.cuda.OutOfMemoryError:
                # What the counts did not foresee (the allocator's fragmentation, a workspace): the
                # forward allocated nothing that outlives the exception, so pyooc runs the layer.
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                self.decisions[name] = "pyooc (in core ran out of memory)"
        return self._run_pyooc(module, pyooc_forward, x.to("cpu"), args[1:], kwargs)

    def _run_pyooc(self, module, pyooc_forward, x, rest, kwargs):
        """pyooc's forward on host copies of the module's Parameters and buffers (autograd-tracked:
        the gradients flow back to the device Parameters); updated buffers (batch norm's running
        statistics) are copied back."""
        tensors = dict(module.named_parameters(recurse=False))
        buffers = {name: b for name, b in module.named_buffers(recurse=False) if b is not None}
        if all(t.device.type == "cpu" for t in [*tensors.values(), *buffers.values()]):
            return pyooc_forward(module, x, *rest, **kwargs)
        host = {name: t.to("cpu") for name, t in tensors.items()}
        host_buffers = {name: b.to("cpu") for name, b in buffers.items()}
        saved = {name: module._parameters[name] for name in host}
        saved_buffers = {name: module._buffers[name] for name in host_buffers}
        try:
            for name, t in host.items():
                del module._parameters[name]
                setattr(module, name, t)
            for name, b in host_buffers.items():
                module._buffers[name] = b
            out = pyooc_forward(module, x, *rest, **kwargs)
        finally:
            for name, p in saved.items():
                delattr(module, name)
                module._parameters[name] = p
            with torch.no_grad():
                for name, b in saved_buffers.items():
                    if host_buffers[name] is not b:
                        b.copy_(host_buffers[name])
                    module._buffers[name] = b
        return out


__all__ = ["OutOfCore", "SavedTensorOffloader", "bytes_in_use", "decide", "device_bytes", "gradient_reserve",
           "output_shape"]
