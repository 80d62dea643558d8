"""The host arrays the benchmarks feed their peers: pageable numpy arrays of random values drawn on
the GPU (a numpy draw of 8 GB takes too long), and pinned copies of them (pyooc.pinned_empty); in a
dry run (no GPU, so no pinned memory) pageable stand-ins, so the pinned variants' code and checks
still run. torch and pyooc are passed in, never imported."""

import math

import numpy as np

# What a dry run's results say of their "pinned" arrays (pinned_empty's stand-ins).
PINNED_STAND_IN = "pageable numpy arrays stand in for pinned ones (dry run: no GPU, so no pinned memory)"


def host_randn(torch, shape, seed, scale=1.0):
    """A pageable float32 numpy array of standard normal values (times scale), drawn on the GPU in
    pieces of whole leading indices (a numpy draw of 8 GB takes too long)."""
    out = np.empty(shape, dtype=np.float32)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    host = torch.from_numpy(out)
    per = math.prod(shape[1:])
    step = max(1, (1 << 28) // per)
    for i in range(0, shape[0], step):
        j = min(i + step, shape[0])
        host[i:j].copy_(torch.randn((j - i,) + tuple(shape[1:]), generator=gen, device="cuda").mul_(scale))
    return out


def pinned_empty(pyooc, torch, shape, dtype=np.float32):
    """pyooc.pinned_empty(shape, dtype) where there is a GPU (torch given); in a dry run (torch None)
    a pageable numpy array stands in (PINNED_STAND_IN)."""
    return np.empty(shape, dtype=dtype) if torch is None else pyooc.pinned_empty(shape, dtype)


def pinned_copy(pyooc, torch, a):
    """A copy of numpy array a in pinned memory from pyooc.pinned_empty (what pyooc's pinned
    variants run on); a pageable copy in a dry run (pinned_empty's stand-in)."""
    p = pinned_empty(pyooc, torch, a.shape, a.dtype)
    if torch is None:
        np.copyto(p, a)
    else:
        torch.from_numpy(p).copy_(torch.from_numpy(a))  # torch's copy uses every core; numpy's one
    return p
