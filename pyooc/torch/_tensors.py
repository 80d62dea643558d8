"""torch tensors to and from the zero-copy float32 arrays pyooc's numpy-level API takes.

A CPU tensor (pageable or pinned) is viewed with Tensor.numpy(): no copy, and pyooc's pinned rule
sees pinned memory as pinned. A result array comes back through torch.from_numpy: no copy either.

CUDA tensors are refused (ValueError naming the argument): pyooc's Python bindings take
buffer-protocol host memory only. libooc itself serves device pointers (the C API,
native/src/api/memory_kind.hpp), but a numpy view of device memory would crash on any host access,
and a silent device-to-host copy would hide a whole-tensor transfer; pyooc.torch.policy moves tensors
between the device and the host explicitly, where it decides to.
"""

import torch

SUPPORTED_DTYPE = torch.float32


def check_tensor(t, name):
    """t as pyooc takes it, or an exception naming the argument: float32 (NotImplementedError for
    other dtypes: pyooc computes in float32 only), CPU, dense, C-contiguous."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != SUPPORTED_DTYPE:
        raise NotImplementedError(f"{name}: pyooc supports dtype torch.float32 only, got {t.dtype} "
                                  f"(cast with .float(); pyooc does not fall back to torch's op)")
    if t.device.type != "cpu":
        raise ValueError(f"{name} is on {t.device}: pyooc.torch takes CPU tensors (pageable or pinned), which it "
                         f"streams through the GPU itself; move it with .cpu(), or let pyooc.torch.policy place "
                         f"the layers of a model")
    if t.layout != torch.strided:
        raise NotImplementedError(f"{name}: pyooc supports dense (strided) tensors only, got {t.layout}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (.contiguous() makes a copy that is): pyooc reads tensors in "
                         f"place and does not copy them silently")
    return t


def as_array(t, name):
    """A numpy view of the CPU float32 contiguous tensor t (no copy; autograd's view of it detached)."""
    return check_tensor(t, name).detach().numpy()


def as_array_or_none(t, name):
    return None if t is None else as_array(t, name)


def as_tensor(array):
    """The result array as a CPU tensor sharing its memory."""
    return torch.from_numpy(array)


def contiguous_grad(g):
    """A gradient as pyooc reads it: autograd hands some gradients over as expanded or strided views
    (sum().backward() gives a stride-0 one), which are copied into a dense tensor here, and only here."""
    return g if g.is_contiguous() else g.contiguous()
