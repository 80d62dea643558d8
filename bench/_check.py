"""Correctness before speed: a peer's output against the in-core reference (torch on the GPU, or
float64 numpy in a dry run), as a relative error that must stay below the benchmark's tolerance
before the peer is timed. An output never written shows as NaN (every output is poisoned first)."""

import math


class CheckFailed(Exception):
    """A peer's output failed its correctness check: reported as a failure, not a crash."""


def rel_error_on_device(torch, got_host, ref_dev, step=1 << 27):
    """||got - ref|| / ||ref|| in float64 on the GPU, in pieces of `step` elements; NaN (and a
    reason) when got holds a non-finite value (an output never written)."""
    got = torch.from_numpy(got_host) if not hasattr(got_host, "data_ptr") else got_host
    got, ref = got.reshape(-1), ref_dev.reshape(-1)
    num = den = 0.0
    for i in range(0, ref.numel(), step):
        a = got[i:i + step].cuda()
        if not bool(torch.isfinite(a).all()):
            return float("nan"), "non-finite output (unwritten or NaN)"
        r = ref[i:i + step].double()
        num += float(torch.sum((a.double() - r) ** 2))
        den += float(torch.sum(r ** 2))
    return (math.sqrt(num / den) if den > 0 else float("nan")), "all outputs"


class Reference:
    """The in-core output (torch on the GPU, or numpy float64 in a dry run) and the relative error
    of a host result against it."""

    def __init__(self, torch, ref):
        self.torch, self.ref = torch, ref

    def compare(self, got):
        import numpy as np
        if self.torch is not None:
            return rel_error_on_device(self.torch, got, self.ref)
        got = np.asarray(got)
        if not np.isfinite(got).all():
            return float("nan"), "non-finite output (unwritten or NaN)"
        return float(np.linalg.norm(got - self.ref) / np.linalg.norm(self.ref)), "all outputs (float64 numpy)"


def checked(result, peer, reference, out, tolerance):
    """Records the peer's error against reference.compare(out); CheckFailed unless below tolerance."""
    err, how = reference.compare(out)
    result["errors"][peer] = err
    result["checked"][peer] = how
    if not err < tolerance:
        raise CheckFailed(f"{peer}: relative error {err:.3g} ({how}) is not below {tolerance}")
