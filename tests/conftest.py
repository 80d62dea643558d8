"""Shared fixtures and helpers for the pyooc test suite.

- Imports the *installed* pyooc (with its compiled extension); run pytest from outside the source
  tree, or through the `pytest` entry point, so the checkout's pyooc/ does not shadow it.
- `gpu` marker: tests that need a CUDA device; skipped when pyooc.device_count() == 0.
- `rng`: a numpy Generator seeded from os.urandom; the seed is printed and attached to a failure
  report. Set PYOOC_TEST_SEED=<seed> to replay one.
- `reference_conv`: float64 numpy convolution (torch conv1d/2d/3d semantics).
- `find_budget`: the memory_limit at which the planner chooses a given split (scans plans).
"""

import contextlib
import itertools
import math
import os
import re

import numpy as np
import pytest

try:
    import pyooc
    import pyooc._native  # noqa: F401  (the compiled extension must be importable)
except ImportError as exc:  # pragma: no cover - a setup error, not a test result
    raise pytest.UsageError(
        "could not import the installed pyooc with its compiled extension "
        f"({exc}). Install it (pip install --no-build-isolation .) and run pytest from outside the "
        "source tree (or via the `pytest` entry point) so the checkout's pyooc/ does not shadow it."
    ) from exc

if not hasattr(pyooc, "_native") or not hasattr(pyooc._native, "conv_forward"):  # pragma: no cover
    raise pytest.UsageError(f"imported pyooc from {pyooc.__file__} has no compiled _native extension")

HAS_GPU = pyooc.device_count() > 0
# The .status of an injected fault (pyooc._native.inject_fault; native/src/backend/cuda/fault_injection.cpp):
# a copy fails as cudaErrorLaunchFailure, a cuDNN call as CUDNN_STATUS_EXECUTION_FAILED.
INJECTED_FAULT_STATUS = {"copy": 719, "conv": 5000}
SPATIAL_NAMES = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}


# --------------------------------------------------------------------------------------------
# pytest hooks: the gpu marker and seed reporting


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped when pyooc.device_count() == 0)")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="no CUDA device (pyooc.device_count() == 0)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not item.keywords: a param id "gpu" is a keyword
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item, "_pyooc_seed", None)
    if seed is not None and report.failed:
        report.sections.append(("rng seed", f"rng seed {seed} (replay: PYOOC_TEST_SEED={seed})"))


@pytest.fixture
def rng(request):
    """numpy Generator with a fresh random seed (or PYOOC_TEST_SEED), reported on failure."""
    env = os.environ.get("PYOOC_TEST_SEED")
    seed = int(env) if env else int.from_bytes(os.urandom(8), "little")
    request.node._pyooc_seed = seed
    request.node.user_properties.append(("rng_seed", seed))
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------------------------
# numerics helpers


def expand(value, spatial):
    """An int or a sequence of `spatial` ints, as a tuple (torch's convention)."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * spatial
    value = tuple(int(v) for v in value)
    assert len(value) == spatial
    return value


def output_shape(x_shape, w_shape, stride=1, padding=0, dilation=1):
    spatial = len(w_shape) - 2
    st, pa, di = expand(stride, spatial), expand(padding, spatial), expand(dilation, spatial)
    out = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, s, p, d in zip(x_shape[2:], w_shape[2:], st, pa, di)]
    return (x_shape[0], w_shape[0], *out)


def reference_conv(x, w, bias=None, stride=1, padding=0, dilation=1, alpha=1.0, beta=0.0, out=None):
    """alpha * conv(x, w) + beta * out + bias in float64 (cross-correlation, N-d, groups=1).

    Loops over kernel offsets: each adds w[:, :, offset] contracted with a strided slab of the
    zero-padded input, so memory stays ~ one output's worth."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    spatial = w.ndim - 2
    st, pa, di = expand(stride, spatial), expand(padding, spatial), expand(dilation, spatial)
    y_shape = output_shape(x.shape, w.shape, st, pa, di)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pa])
    y = np.zeros(y_shape, dtype=np.float64)
    for offset in itertools.product(*(range(k) for k in w.shape[2:])):
        slab = xp[(slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offset, di, y_shape[2:], st))]
        y += np.einsum("kc,nc...->nk...", w[(slice(None), slice(None)) + offset], slab, optimize=True)
    y *= alpha
    if beta != 0.0:
        y += beta * np.asarray(out, dtype=np.float64)
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64).reshape((1, -1) + (1,) * spatial)
    return y


def reference_at(x, w, index, bias=None, stride=1, padding=0, dilation=1, alpha=1.0):
    """One output element y[index] in float64, without computing the rest (for huge problems)."""
    spatial = w.ndim - 2
    st, pa, di = expand(stride, spatial), expand(padding, spatial), expand(dilation, spatial)
    n, k, pos = index[0], index[1], index[2:]
    total = 0.0
    ranges = []
    for p, s, pad, d, kern, extent in zip(pos, st, pa, di, w.shape[2:], x.shape[2:]):
        taps = [(t, p * s - pad + t * d) for t in range(kern)]
        ranges.append([(t, i) for t, i in taps if 0 <= i < extent])
    for combo in itertools.product(*ranges):
        taps = tuple(t for t, _ in combo)
        idx = tuple(i for _, i in combo)
        total += float(np.dot(w[(k, slice(None)) + taps].astype(np.float64),
                              x[(n, slice(None)) + idx].astype(np.float64)))
    total *= alpha
    if bias is not None:
        total += float(bias[k])
    return total


def rel_err(a, ref):
    """||a - ref|| / ||ref|| in float64 (Frobenius norm)."""
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert a.shape == ref.shape, (a.shape, ref.shape)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(a - ref) / (denom if denom > 0 else 1.0))


def random_problem(rng, x_shape, w_shape, bias=False):
    """float32 x, w (scaled so y is O(1)) and optionally bias."""
    x = rng.standard_normal(x_shape, dtype=np.float32)
    fan_in = int(np.prod(w_shape[1:]))
    w = (rng.standard_normal(w_shape, dtype=np.float32) / np.float32(np.sqrt(fan_in))).astype(np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32) if bias else None
    return x, w, b


TOL = 1e-5


def cancellation_floor(x, w, b, z, alpha1, alpha2, **geometry):
    """The norm a random-sign sum of each output's terms has: ||conv(|x|, |w|) + ...|| / sqrt(terms).
    A C split carries fp32 partial sums between chunks, which round at the scale of the terms; an
    output that cancels far below it by chance (a lone element of a 1863-term reduction) is judged
    at this scale. For outputs that do not cancel unusually it is below ||pre|| (about 0.64 of it),
    so they are judged as before."""
    summands = reference_conv(np.abs(x), np.abs(w), None if b is None else np.abs(b), alpha=abs(alpha1),
                              beta=abs(alpha2), out=None if z is None else np.abs(z), **geometry)
    return float(np.linalg.norm(summands) / math.sqrt(np.prod(w.shape[1:])))


def run_checked(x, w, *, bias=None, memory_limit=None, alpha=1.0, beta=0.0, out=None, backend="host", direct=False,
                **geometry):
    """conv_forward into a NaN-poisoned (or the given) out; checks numerics (rel_err < TOL vs the
    float64 reference), that inputs were not written, that every output was written, and that
    last_stats agrees with its plan and chunk list. `direct`: True when every tensor goes by direct
    DMA (pinned memory, or the host backend's testing hook), "x" when only x does. Returns the plan."""
    x_before, w_before = x.copy(), w.copy()
    b_before = None if bias is None else bias.copy()
    if out is None:
        out = np.full(output_shape(x.shape, w.shape, **geometry), np.nan, dtype=np.float32)
    out_before = out.copy()
    ref = reference_conv(x, w, bias, alpha=alpha, beta=beta, out=out_before, **geometry)

    y = pyooc.conv_forward(x, w, bias=bias, out=out, alpha=alpha, beta=beta, memory_limit=memory_limit,
                           backend=backend, **geometry)

    assert y is out
    assert not np.isnan(y).any(), f"{int(np.isnan(y).sum())} of {y.size} outputs were never written"
    # Judged at the larger of ||ref|| and the scale its terms round at (cancellation_floor): a lone
    # output of a long reduction split over C may cancel far below its terms by chance.
    floor = cancellation_floor(x, w, bias, out_before if beta != 0.0 else None, alpha, beta, **geometry)
    scale = max(float(np.linalg.norm(ref)), floor)
    diff = float(np.linalg.norm(np.asarray(y, np.float64) - ref))
    err = diff / scale if scale > 0 else diff  # an all-zero result (all padding) is judged absolutely
    assert err < TOL, f"relative error {err:.3e} >= {TOL}"
    assert np.array_equal(x, x_before) and np.array_equal(w, w_before), "conv_forward wrote to an input"
    if bias is not None:
        assert np.array_equal(bias, b_before), "conv_forward wrote to bias"

    stats = pyooc.last_stats()
    plan = stats["plan"]
    assert plan.backend == backend
    h2d, d2h = expected_traffic(plan, direct=bool(direct), bias=bias is not None, beta=beta)
    assert (stats["bytes_h2d"], stats["bytes_d2h"]) == (h2d, d2h), "traffic disagrees with the chunk list"
    assert stats["bytes_d2h"] == plan.bytes_d2h
    if direct:  # halo outside the tensor is zeroed on the device, not sent; no host gather/scatter
        assert stats["bytes_h2d"] <= plan.bytes_h2d
        if direct is True:
            assert stats["gather_seconds"] == 0.0 and stats["scatter_seconds"] == 0.0, "direct path not taken"
    else:
        assert stats["bytes_h2d"] == plan.bytes_h2d
    assert stats["chunks"] == plan.num_chunks
    assert stats["device_bytes_reserved"] == plan.peak_device_bytes
    assert plan.peak_device_bytes <= plan.memory_limit
    if memory_limit is not None:
        assert plan.memory_limit == pyooc.parse_memory_limit(memory_limit)
    for key in ("seconds", "gather_seconds", "scatter_seconds", "host_wait_seconds", "pace_wait_seconds"):
        assert stats[key] >= 0.0
    assert stats["pace_wait_seconds"] <= stats["seconds"]
    return plan


# --------------------------------------------------------------------------------------------
# planner helpers


def split_set(plan):
    """The dimensions a plan splits (those with more than one piece)."""
    return frozenset(d for d, pieces in plan.splits.items() if pieces > 1)


def extents(plan):
    """Extent of every plan dimension: n, k, c and the output spatial dims."""
    spatial = len(plan.x_shape) - 2
    out = {"n": plan.x_shape[0], "k": plan.w_shape[0], "c": plan.x_shape[1]}
    for i, name in enumerate(SPATIAL_NAMES[spatial]):
        out[name] = plan.y_shape[2 + i]
    return out


def uneven_dims(plan):
    """Split dimensions whose extent is not a multiple of the tile (the last tile is smaller)."""
    ext = extents(plan)
    return frozenset(d for d in split_set(plan) if ext[d] % plan.tiles[d] != 0)


def needed_budget(plan_at):
    """The smallest memory_limit any plan needs, as the MemoryError of plan_at(1) (a 1-byte budget) says."""
    with pytest.raises(MemoryError) as info:
        plan_at(1)
    match = re.search(r"\((\d+) bytes", str(info.value))
    assert match, f"MemoryError does not say how many bytes are needed: {info.value}"
    return int(match.group(1))


def smallest_budget(x_shape, w_shape, backend="host", **geometry):
    """The smallest memory_limit any forward plan needs."""
    return needed_budget(lambda limit: pyooc.plan_conv_forward(x_shape, w_shape, memory_limit=limit, backend=backend,
                                                               **geometry))


def find_budget(x_shape, w_shape, want, *, uneven=False, at_least=False, backend="host", growth=1.04, **geometry):
    """(memory_limit, plan): the first budget, scanning upward from the smallest that fits, whose
    plan splits exactly the dimensions in `want` (or, with at_least, those and maybe more; and, if
    `uneven`, with a ragged last tile in a split dimension). Fails the test if no budget up to ~4x
    the working set gives that split."""
    want = frozenset(want)
    es = 4
    working = es * (int(np.prod(x_shape)) + int(np.prod(w_shape)) + int(np.prod(output_shape(
        x_shape, w_shape, geometry.get("stride", 1), geometry.get("padding", 0), geometry.get("dilation", 1)))))
    return scan_budget(
        lambda limit: pyooc.plan_conv_forward(x_shape, w_shape, memory_limit=limit, backend=backend, **geometry),
        smallest_budget(x_shape, w_shape, backend=backend, **geometry), 4 * working + 65536,
        lambda plan: (want <= split_set(plan) if at_least else split_set(plan) == want) and (
            not uneven or uneven_dims(plan)),
        f"the planner split {'at least' if at_least else 'exactly'} {sorted(want)}"
        f"{' with an uneven edge' if uneven else ''} for x{list(x_shape)} w{list(w_shape)} {geometry}", growth)


def scan_budget(plan_at, start, ceiling, accept, what, growth=1.04):
    """(memory_limit, plan): the first budget from `start` up (by `growth`) whose plan_at(limit)
    accept()s. Fails the test, saying `what` was wanted and which splits were seen, if none up to
    `ceiling` does."""
    limit, seen = start, set()
    while limit <= ceiling:
        plan = plan_at(limit)
        seen.add(tuple(sorted(d for d, pieces in plan.splits.items() if pieces > 1)))
        if accept(plan):
            return limit, plan
        limit = int(limit * growth) + 1
    pytest.fail(f"no memory_limit makes {what}; splits seen: {sorted(seen)}")


@contextlib.contextmanager
def host_direct_access(enabled=True):
    """The host backend treats all caller memory as pinned (libooc's testing hook), so the
    pipeline's direct-DMA path runs: strided copies, halo zeroed on the device, no staging."""
    pyooc._native.set_host_direct_access(bool(enabled))
    try:
        yield
    finally:
        pyooc._native.set_host_direct_access(False)


def expected_traffic(plan, *, direct, bias=False, beta=0.0):
    """(bytes_h2d, bytes_d2h) a run of `plan` moves, from its chunk list. Staged loads copy whole
    boxes (halo zeros included); direct loads copy only the part inside the tensor."""
    x_shape, w_shape = plan.x_shape, plan.w_shape
    spatial = len(x_shape) - 2

    def size(r, extent=None):
        lo, hi = r
        if extent is not None and direct:
            lo, hi = max(lo, 0), min(hi, extent)
        return max(hi - lo, 0)

    h2d = 4 * w_shape[0] if bias else 0
    d2h = 0
    for ch in plan.chunks:
        y_box = size(ch["n"]) * size(ch["k"]) * math.prod(size(r) for r in ch["out"])
        if ch["load_x"]:
            h2d += 4 * size(ch["n"]) * size(ch["c"]) * math.prod(
                size(r, x_shape[2 + d]) for d, r in enumerate(ch["in"][:spatial]))
        if ch["load_w"]:
            h2d += 4 * size(ch["k"]) * size(ch["c"]) * math.prod(w_shape[2:])
        if ch["first_c"] and beta != 0.0:
            h2d += 4 * y_box
        if ch["last_c"]:
            d2h += 4 * y_box
    return h2d, d2h


def check_tiling(plan):
    """Every output element is produced by exactly one chunk with last_c, and each (n, k, out)
    block is covered once per c-tile, c-tiles covering [0, C) exactly."""
    y_shape = plan.y_shape
    final = np.zeros(y_shape, dtype=np.int32)
    partial = np.zeros(y_shape, dtype=np.int32)
    for ch in plan.chunks:
        region = (slice(*ch["n"]), slice(*ch["k"])) + tuple(slice(*r) for r in ch["out"])
        partial[region] += ch["c"][1] - ch["c"][0]
        if ch["last_c"]:
            final[region] += 1
    assert (final == 1).all(), "some outputs are written back never or more than once"
    assert (partial == plan.x_shape[1]).all(), "some outputs do not accumulate every input channel exactly once"


# devices= arguments every front end refuses, with the exception and the message naming them
# (pyooc/devices.py's checks; the native range check comes on top where a call runs).
BAD_DEVICE_LISTS = [
    ("some", ValueError, r"devices must be None, 'all' or a list of device ordinals"),
    ([], ValueError, r"devices must list at least one device"),
    ([0, -1], ValueError, r"devices"),
    ([0, 1.5], TypeError, r"devices must be an int"),
    (3, TypeError, r"devices must be None, 'all' or a list"),
]
