"""torch tensors to and from the zero-copy float32 arrays pyooc's numpy-level API takes.

A CPU tensor (pageable or pinned) is viewed with Tensor.numpy(): no copy, and pyooc's pinned rule
sees pinned memory as pinned. A result array comes back through torch.from_numpy: no copy either.

CUDA tensors: every op reads and writes them in place (device_view: a pyooc DeviceArray of the
tensor's memory, waited for on torch's current stream), and its results are CUDA tensors on the
input's device, as torch's are: the op allocates them and pyooc writes them as out= (device_result),
since a fresh pyooc result is a host array. The few results pyooc only returns on the host (batch
norm's per-channel statistics and gradients, C floats each) are copied to the input's device
(host_result). The call runs on its CUDA tensors' device (call_device); CPU tensors may join
them in one call, which pyooc reads chunk by chunk as it reads device memory.
"""

import ml_dtypes
import numpy as np
import torch

from pyooc._device_arrays import DeviceArray

FLOAT32 = (torch.float32,)
# What pyooc's convolutions and their gradients compute in (pyooc/_arrays.py's CONV_DTYPES).
CONV_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def memory_format_of(t):
    """torch.channels_last (4-D) or torch.channels_last_3d (5-D) for a tensor stored channels-last
    and not also contiguous (C == 1 or one position make both alike), else torch.contiguous_format."""
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    fmt = formats.get(t.dim())
    if fmt is not None and not t.is_contiguous() and t.is_contiguous(memory_format=fmt):
        return fmt
    return torch.contiguous_format


def in_format(t, fmt):
    """t in memory format fmt: itself when it is, else a copy (for the few tensors pyooc.torch
    converts: a weight to its input's layout, a gradient autograd hands over strided)."""
    if t is None or t.is_contiguous(memory_format=fmt):
        return t
    return t.contiguous(memory_format=fmt)


def check_tensor(t, name, dtypes=FLOAT32, channels_last=False):
    """t as pyooc takes it, or an exception naming the argument: one of `dtypes` (NotImplementedError
    for the others: what pyooc does not compute in), on the CPU or a CUDA device, dense, C-contiguous
    or, where `channels_last`, in torch.channels_last(_3d) (NotImplementedError elsewhere)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = ", ".join(str(d) for d in dtypes)
        raise NotImplementedError(f"{name}: pyooc supports dtype {names} only here, got {t.dtype} "
                                  f"(cast with .float(); pyooc does not fall back to torch's op)")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} is on {t.device}: pyooc.torch takes CPU tensors (pageable or pinned) and CUDA "
                         f"tensors; move it with .cpu() or .cuda()")
    if t.layout != torch.strided:
        raise NotImplementedError(f"{name}: pyooc supports dense (strided) tensors only, got {t.layout}")
    if not t.is_contiguous():
        channels_last_tensor = memory_format_of(t) != torch.contiguous_format
        if channels_last_tensor and channels_last:
            return t
        if channels_last_tensor:
            raise NotImplementedError(f"{name} is in memory_format=torch.channels_last: this op takes contiguous "
                                      "tensors only so far (.contiguous() makes a copy that is; docs/layouts.md)")
        raise ValueError(f"{name} must be contiguous (.contiguous() makes a copy that is): pyooc reads tensors in "
                         f"place and does not copy them silently")
    return t


_NUMPY_DTYPES = {torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
                 torch.bfloat16: np.dtype(ml_dtypes.bfloat16)}


def as_array(t, name, dtypes=FLOAT32, channels_last=False):
    """A numpy view of the CPU contiguous tensor t of one of `dtypes` (no copy; autograd's view of
    it detached), or for a CUDA t device_view's DeviceArray, which pyooc reads in place. bfloat16,
    which numpy lacks, is viewed as ml_dtypes' bfloat16. channels_last: t may be in
    torch.channels_last(_3d), viewed with its strides (the convolutions take it so)."""
    t = check_tensor(t, name, dtypes, channels_last).detach()
    if t.device.type == "cuda":
        return device_view(t)
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def as_array_or_none(t, name, dtypes=FLOAT32, channels_last=False):
    return None if t is None else as_array(t, name, dtypes, channels_last)


def call_device(**tensors):
    """The CUDA device ordinal a call runs on (pyooc's device=): its CUDA tensors', read in place;
    None where it has none. CPU tensors may join CUDA ones (the convolutions took such mixes first:
    a CPU bias of a CUDA convolution); CUDA tensors on two devices are refused in torch's words,
    naming the arguments. tensors: name -> tensor, None or anything else (left to as_array)."""
    first = None
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            continue
        if first is None:
            first = name, t.device
        elif t.device != first[1]:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{first[1]} and {t.device}! ({first[0]} is on {first[1]}, {name} on {t.device})")
    return None if first is None else first[1].index


def device_view(t):
    """The CUDA tensor t as pyooc's DeviceArray (pyooc/_device_arrays.py): its address, and torch's
    current stream on its device, whose queued work pyooc waits for before reading it."""
    stream = torch.cuda.current_stream(t.device).cuda_stream
    dtype = _NUMPY_DTYPES[t.dtype]
    strides = None if t.is_contiguous() else tuple(st * dtype.itemsize for st in t.stride())
    return DeviceArray(t, t.data_ptr(), tuple(t.shape), dtype, False, stream, strides)


def device_result(like, shape):
    """(tensor, out=) for an op's result: on a CUDA `like`, a new tensor on its device and its
    DeviceArray, which pyooc writes in place, in like's memory format where the result has like's
    rank; on the CPU (None, None): pyooc allocates the array (in its inputs' layout). A shape with
    an extent below 1 (a geometry pyooc refuses) gets (None, None) too, so that pyooc's check names
    the argument rather than torch.empty failing on it."""
    if like.device.type != "cuda" or any(d < 1 for d in shape):
        return None, None
    fmt = memory_format_of(like) if len(shape) == like.dim() else torch.contiguous_format
    t = torch.empty(list(shape), dtype=like.dtype, device=like.device, memory_format=fmt)
    return t, device_view(t)


def device_results(like, *shapes):
    """(tensors, out=) for an op's several results, as device_result makes each: a tuple of CUDA
    tensors and one of their DeviceArrays (pyooc's out=(dx, dw, db)), or (None, None) on the CPU."""
    made = [device_result(like, shape) for shape in shapes]
    if any(t is None for t, _ in made):
        return None, None
    return tuple(t for t, _ in made), tuple(a for _, a in made)


def result_tensor(tensor, array):
    """What an op returns: the CUDA tensor device_result made, or the CPU tensor sharing `array`."""
    return tensor if tensor is not None else as_tensor(array)


def result_tensors(tensors, arrays):
    """result_tensor of each of an op's several results (device_results' tensors, or None)."""
    return tensors if tensors is not None else tuple(as_tensor(a) for a in arrays)


def host_result(like, array):
    """A result pyooc returns on the host whatever its inputs (it takes no out= for it) as a tensor
    on like's device: a copy there for a CUDA like, a tensor sharing the array for a CPU one."""
    return as_tensor(array).to(like.device)


def as_tensor(array):
    """The result array as a CPU tensor sharing its memory."""
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def same_dtype(t, name, first, first_name):
    """t, when it has first's dtype: one call computes in one dtype, as torch's convolutions."""
    if t is not None and t.dtype != first.dtype:
        raise TypeError(f"{name} ({t.dtype}) must have the dtype of {first_name} ({first.dtype}): mixed dtypes in "
                        "one call are not supported")
    return t


def contiguous_grad(g):
    """A gradient as pyooc reads it: autograd hands some gradients over as expanded or strided views
    (sum().backward() gives a stride-0 one), which are copied into a dense tensor here, and only here."""
    return g if g.is_contiguous() else g.contiguous()
