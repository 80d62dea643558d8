"""The host arrays the benchmarks feed their peers: pageable numpy arrays of random values drawn on
the GPU (a numpy draw of 8 GB takes too long), and pinned copies of them (pyooc.pinned_empty).
torch and pyooc are passed in, never imported."""

import math


def host_randn(torch, shape, seed, scale=1.0):
    """A pageable float32 numpy array of standard normal values (times scale), drawn on the GPU in
    pieces of whole leading indices (a numpy draw of 8 GB takes too long)."""
    import numpy as np
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


def pinned_copy(pyooc, torch, a):
    """A copy of numpy array a in pinned memory from pyooc.pinned_empty (what pyooc's pinned
    variants run on)."""
    p = pyooc.pinned_empty(a.shape)
    torch.from_numpy(p).copy_(torch.from_numpy(a))  # torch's copy uses every core; numpy's one
    return p
