"""pyooc's PyTorch front end (`pip install pyooc[torch]`; `import pyooc` never imports torch).

- pyooc.torch.functional: torch.nn.functional's signatures (conv1d/2d/3d, conv_transpose*,
  batch_norm, max/avg pooling, activations, linear, softmax/log_softmax) plus memory_limit= and
  backend=, over the `pyooc::` custom ops (torch.ops.pyooc.*; fake kernels, autograd through pyooc's
  backward ops, opaque under torch.compile).
- Drop-in modules (Conv2d, BatchNorm3d, MaxPool2d, ReLU, Linear, ...): torch.nn's classes with
  pyooc's forward; convert(model, memory_limit=...) swaps them into an existing model in place.
- pyooc.torch.policy: a whole network under one device budget (in-core layers where they fit,
  pyooc where they do not, saved activations offloaded to pinned host memory).

Tensors: CPU contiguous tensors go in zero-copy and results come back as CPU tensors; CUDA tensors
are read in place and the results are CUDA tensors on their device (pyooc/torch/_tensors.py). See
docs/torch.md.
"""

try:
    import torch as _torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("pyooc.torch needs PyTorch: pip install 'pyooc[torch]' (or install torch yourself)") from exc

from pyooc.torch import functional  # noqa: E402
from pyooc.torch._ops import OPS  # noqa: E402
from pyooc.torch.modules import *  # noqa: E402,F401,F403
from pyooc.torch.modules import DROP_INS, convert, set_options  # noqa: E402,F401

__all__ = ["functional", "OPS", "convert", "set_options"] + [cls.__name__ for cls in DROP_INS.values()]
