#!/usr/bin/env python3
"""Forward convolution out of core: pyooc against the link roofline and torch, in one run.

For each case (working set >= 8 GB, device budget <= 1/8 of it) this measures, on one GPU:
  - the link (pinned H2D, D2H, both at once) and the roofline
    max(bytes_in/H2D, bytes_out/D2H, (in+out)/both, in-core compute), bytes_in = x + w, bytes_out = y;
  - pyooc.conv_forward on pageable numpy arrays and on pinned ones (pyooc.pinned_empty);
  - in-core cuDNN through torch (data already on the GPU; its time is the roofline's compute term);
  - a naive torch chunk loop and an expert one (pinned, three streams, double buffering), both held
    to the same memory_limit as pyooc.
Every peer's output is checked against torch in-core (relative error < 1e-4) before it is timed.
Timings: a warm-up, then the median of --repeats runs. FP32 everywhere (TF32 off in torch).

With --devices 0,1 (a multi-GPU machine) the `devices` variant runs the pinned call on the first
device alone and spread over all the listed ones (pyooc's devices=), in the same run, and records
both times and their ratio (devices_speedup; the issue's 2-GPU figure).

Writes OUT/conv_forward.json and OUT/conv_forward.md (default OUT: bench/results) and prints the
markdown table last. `--quick` runs ~1 GB working sets; `--dry-run` runs tiny cases on pyooc's host
backend without a GPU or torch (it checks this script's geometry, pyooc's numerics and the report).
Exit status 1 when a correctness check failed or a peer raised; missed speed targets are reported,
not failed (unless --strict)."""

import gc
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _arrays import host_randn, pinned_copy, pinned_empty  # noqa: E402
from _check import Reference, checked  # noqa: E402
from _cli import attempt_peer, bench_main  # noqa: E402
from _console import log, progress  # noqa: E402
from _conv_geometry import (  # noqa: E402
    SELF_TEST_GEOMETRIES, ConvGeometry, chunk_conv_padding, conv_out_len, plan_chunks, self_test_budgets)
from _conv_peers import ExpertTorchConv, NaiveTorchConv, torch_conv_fn  # noqa: E402
from _link import pageable_bound, roofline  # noqa: E402
from _measure import (  # noqa: E402
    memory_limit_for, plan_dict, run_fresh_variant, run_pyooc_variant, run_torch_peer, shape_breaks_chain)
from _region_copy import copy_segments  # noqa: E402
import _report  # noqa: E402
from _report import report_markdown, summarize  # noqa: E402
from _timing import median, timed_runs  # noqa: E402
from _torch_env import release_host_cache  # noqa: E402
from _units import GiB, fmt_bytes  # noqa: E402

NAME = "conv_forward"
TOLERANCE = 1e-4
# Each target: (result key, goal, label). Ratios > 1 are good.
TARGETS = [
    ("pinned_efficiency", 0.80, "pyooc pinned >= 0.80 of roofline"),
    ("pageable_efficiency", 0.70, "pyooc pageable >= 0.70 of roofline"),
    ("speedup_vs_naive", 5.0, "pyooc pageable >= 5x naive torch"),
    ("ratio_vs_expert", 0.90, "pyooc pinned >= 0.9x expert torch"),
]
# The variants of the arrays users pass (issue: "benchmarks that measure what users run"):
#   pinned      x and y pinned, w pageable (the weights a model holds)   pyooc_pinned_s
#   all_pinned  x, w and y pinned                                         pyooc_all_pinned_s
#   pageable    pageable x and w, out= a reused pageable y               pyooc_pageable_s
#   fresh       pageable x and w, y = conv_forward(x, w): a new result   pyooc_fresh_s
#   chained     the input is a previous pyooc result (y1 = conv(y0, w))  pyooc_chained_s
#   bf16        x, w and y in bfloat16, pinned (half the link bytes)     pyooc_bf16_s, against its own roofline
#   devices     x and y pinned, devices=[first] then devices=--devices   pyooc_one_device_s, pyooc_devices_s
#               (pageable on the host backend's virtual devices in a dry run)
PEERS = ("incore", "pageable", "naive", "pinned", "expert", "all_pinned", "fresh", "chained", "bf16", "devices")
# Every benchmark's variant targets (_report.VARIANT_TARGETS: all pinned, chained, fresh), then the conv's own.
VARIANT_TARGETS = _report.VARIANT_TARGETS + [
    ("pageable_own_efficiency", 0.90, "pageable, out= >= 0.90 of its own bound (link or host copy)"),
    ("pageable_link_floor", 0.50, "pageable, out= >= 0.50 of the link roofline"),
    ("bf16_efficiency", 0.90, "bf16 >= 0.90 of its own roofline"),
    ("bf16_speedup", 1.8, "bf16 >= 1.8x the float32 all-pinned run"),
]

# name -> (description, x shape, w shape, padding, cap on memory_limit); groups = C / w's second dim
# (dw3d: depthwise, the 3D form of ConvNeXt's and MobileNet's layers, pytorch#37406's slow case).
DW = "3D depthwise: 3x3x3, 64 channels (groups 64), {}^2x{}, padding 1"
CASES = {
    "full": {
        "vgg2d": ("2D VGG-like: 3x3, 256->256, 56x56, padding 1", (1344, 256, 56, 56), (256, 256, 3, 3), 1, GiB),
        "vol3d": ("3D volume: 3x3x3, 32->32, 256^3, padding 1", (2, 32, 256, 256, 256), (32, 32, 3, 3, 3), 1, GiB),
        "dw3d": (DW.format(256, 128), (2, 64, 256, 256, 128), (64, 1, 3, 3, 3), 1, GiB),
    },
    "quick": {
        "vgg2d": ("2D VGG-like: 3x3, 256->256, 56x56, padding 1", (168, 256, 56, 56), (256, 256, 3, 3), 1, None),
        "vol3d": ("3D volume: 3x3x3, 32->32, 128^3, padding 1", (2, 32, 128, 128, 128), (32, 32, 3, 3, 3), 1, None),
        "dw3d": (DW.format(128, 64), (2, 64, 128, 128, 64), (64, 1, 3, 3, 3), 1, None),
    },
    "dry-run": {
        "vgg2d": ("2D VGG-like (tiny): 3x3, 16->16, 14x14, padding 1", (8, 16, 14, 14), (16, 16, 3, 3), 1, None),
        "vol3d": ("3D volume (tiny): 3x3x3, 8->8, 24^3, padding 1", (1, 8, 24, 24, 24), (8, 8, 3, 3, 3), 1, None),
        "dw3d": ("3D depthwise (tiny): 3x3x3, 8 groups, 24^3, padding 1", (1, 8, 24, 24, 24), (8, 1, 3, 3, 3), 1, None),
    },
}


# --------------------------------------------------------------------------------------------
# numpy reference (dry run and self-test)


def per_group(fn, groups, operands, out_axis):
    """fn over each group's share of `operands` ((array, axis) pairs, each split in `groups` along
    its axis), the results joined along out_axis: a grouped convolution from ungrouped ones."""
    if groups == 1:
        return fn(*(a for a, _ in operands))
    parts = zip(*(np.split(a, groups, axis=axis) for a, axis in operands))
    return np.concatenate([fn(*p) for p in parts], axis=out_axis)


def np_conv(x, w, stride, padding, dilation, groups=1):
    """float64 cross-correlation (torch semantics), any number of spatial dims and groups."""
    if groups > 1:
        return per_group(lambda xg, wg: np_conv(xg, wg, stride, padding, dilation), groups, [(x, 1), (w, 0)], 1)
    sp = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in padding])
    out = tuple(conv_out_len(L, k, s, p, d) for L, k, s, p, d in
                zip(x.shape[2:], w.shape[2:], stride, padding, dilation))
    y = np.zeros((x.shape[0], w.shape[0]) + out)
    w64 = w.astype(np.float64)
    for offs in np.ndindex(*w.shape[2:]):
        window = xp[(slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offs, dilation, out, stride))]
        y += np.einsum("nc...,kc->nk...", window, w64[(slice(None), slice(None)) + offs])
    assert y.shape[2:] == out and sp == len(out)
    return y


def _np_region_copy(dst_view, dst_base, src_view, src_base):
    """Applies copy_segments to numpy views of flat base arrays: emulates RegionCopier byte for byte."""
    item = dst_view.itemsize
    dbytes, sbytes = dst_base.reshape(-1).view(np.uint8), src_base.reshape(-1).view(np.uint8)
    assert np.shares_memory(dbytes, dst_base)
    d0 = dst_view.__array_interface__["data"][0] - dst_base.__array_interface__["data"][0]
    s0 = src_view.__array_interface__["data"][0] - src_base.__array_interface__["data"][0]
    segs = copy_segments(dst_view.shape, [s // item for s in dst_view.strides],
                         [s // item for s in src_view.strides], item)
    for doff, soff, width, height, dpitch, spitch in segs:
        for r in range(height):
            a, b = d0 + doff + r * dpitch, s0 + soff + r * spitch
            dbytes[a:a + width] = sbytes[b:b + width]


def self_test_geometry(rng):
    """The torch peers' chunk geometry and strided copies, emulated with numpy against a float64
    conv: N chunks and halo slabs, strides, dilations, uneven edges. Raises AssertionError."""
    checked = 0
    for x_shape, w_shape, stride, padding, dilation in SELF_TEST_GEOMETRIES:
        geom = ConvGeometry(x_shape, w_shape, stride, padding, dilation)
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        ref = np_conv(x, w, stride, padding, dilation)
        per_sample = 2 * 4 * (math.prod(x_shape[1:]) + math.prod(geom.y_shape[1:]))
        for budget in self_test_budgets(per_sample):
            try:
                chunks, info = plan_chunks(geom, budget, x_copies=2, y_copies=2)
            except MemoryError:
                continue
            y = np.full(geom.y_shape, np.nan, dtype=np.float32)
            covered = np.zeros(geom.y_shape[:1] + geom.y_shape[2:3], dtype=np.int64)
            for ch in chunks:
                shape = geom.x_slab_shape(ch)
                slot = np.full(math.prod(shape) + 7, np.nan, dtype=np.float32)  # slack: views never overrun
                xd = slot[:math.prod(shape)].reshape(shape)
                if ch.split:
                    xd[:, :, :ch.pad_lo] = 0
                    xd[:, :, ch.in_rows - ch.pad_hi:] = 0
                    _np_region_copy(xd[:, :, ch.pad_lo:ch.in_rows - ch.pad_hi], slot,
                                    x[ch.n0:ch.n1, :, ch.clip_lo:ch.clip_hi], x)
                else:
                    _np_region_copy(xd, slot, x[ch.n0:ch.n1], x)
                assert not np.isnan(xd).any(), "device input slot not fully written"
                out = np_conv(xd, w, stride, chunk_conv_padding(geom, ch), dilation).astype(np.float32)
                assert out.shape[2] == ch.o1 - ch.o0, (out.shape, ch)
                _np_region_copy(y[ch.n0:ch.n1, :, ch.o0:ch.o1], y, np.ascontiguousarray(out), out)
                covered[ch.n0:ch.n1, ch.o0:ch.o1] += 1
            assert (covered == 1).all(), f"chunks do not tile the output exactly once: {info}"
            err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
            assert err < 1e-5, f"geometry self-test: error {err} for {x_shape} * {w_shape}, {info}"
            checked += 1
    # copy_segments against numpy assignment on random strided views
    for _ in range(20):
        shape = tuple(int(v) for v in rng.integers(1, 5, size=int(rng.integers(1, 5))))
        big_s = tuple(n + int(rng.integers(0, 3)) for n in shape)
        big_d = tuple(n + int(rng.integers(0, 3)) for n in shape)
        src_base = rng.standard_normal(math.prod(big_s)).astype(np.float32)
        dst_base = np.zeros(math.prod(big_d), dtype=np.float32)
        so = tuple(int(rng.integers(0, b - n + 1)) for b, n in zip(big_s, shape))
        do = tuple(int(rng.integers(0, b - n + 1)) for b, n in zip(big_d, shape))
        src = src_base.reshape(big_s)[tuple(slice(o, o + n) for o, n in zip(so, shape))]
        dst = dst_base.reshape(big_d)[tuple(slice(o, o + n) for o, n in zip(do, shape))]
        expect = dst_base.copy().reshape(big_d)
        expect[tuple(slice(o, o + n) for o, n in zip(do, shape))] = src
        _np_region_copy(dst, dst_base, src, src_base)
        assert np.array_equal(dst_base.reshape(big_d), expect), (shape, big_s, big_d)
    return checked


# --------------------------------------------------------------------------------------------
# references


class TorchReference:
    """torch in-core output on the GPU (or, where it did not fit, recomputed per sample) and the
    relative error ||y - ref|| / ||ref|| of a host result against it, in float64, NaN-aware."""

    def __init__(self, torch, geom, x_np, w_np, y_dev):
        self.torch, self.geom, self.x, self.w, self.y_dev = torch, geom, x_np, w_np, y_dev

    def _ref(self, n0, n1):
        if self.y_dev is not None:
            return self.y_dev[n0:n1]
        torch, g = self.torch, self.geom
        conv = torch_conv_fn(torch, g.spatial)
        x = torch.from_numpy(self.x[n0:n1]).cuda()
        return conv(x, torch.from_numpy(self.w).cuda(), None, g.stride, g.padding, g.dilation, g.groups)

    def compare(self, y_host):
        torch = self.torch
        y = torch.from_numpy(y_host) if isinstance(y_host, np.ndarray) else y_host
        N = self.geom.y_shape[0]
        if self.y_dev is not None:
            pairs = [(lambda: y.reshape(-1), lambda: self.y_dev.reshape(-1))]
            how = "all outputs"
        else:
            samples = sorted({0, N // 2, N - 1})
            pairs = [(lambda n=n: y[n].reshape(-1), lambda n=n: self._ref(n, n + 1).reshape(-1)) for n in samples]
            how = f"samples {samples}"
        num = den = 0.0
        step = 1 << 27  # elements per device round trip
        for got_fn, ref_fn in pairs:
            got, ref = got_fn(), ref_fn()
            for i in range(0, ref.numel(), step):
                a = got[i:i + step].cuda()
                r = ref[i:i + step]
                if not bool(torch.isfinite(a).all()):
                    return float("nan"), "non-finite output (unwritten or NaN)"
                num += float(torch.sum((a.double() - r.double()) ** 2))
                den += float(torch.sum(r.double() ** 2))
                del a
        return math.sqrt(num / den) if den > 0 else float("nan"), how


def check_output(result, peer, reference, y):
    checked(result, peer, reference, y, TOLERANCE)


# --------------------------------------------------------------------------------------------
# one case


def make_inputs(torch, geom, seed):
    """Random x (standard normal) and w (scaled by 1/sqrt(fan_in)), as pageable numpy arrays; x is
    drawn on the GPU chunk by chunk where there is one (a numpy draw of 8 GB takes too long)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(geom.w_shape, dtype=np.float32) / math.sqrt(math.prod(geom.w_shape[1:])))
    w = w.astype(np.float32)
    if torch is None:
        return rng.standard_normal(geom.x_shape, dtype=np.float32), w
    return host_randn(torch, geom.x_shape, seed), w


def incore_torch(torch, geom, x_np, w_np, repeats):
    """Median seconds of torch's conv with x, w already on the GPU (cuDNN benchmark mode: its fastest
    FP32 algorithm), and the output (kept on the GPU as the reference). Where the whole problem does
    not fit, times one chunk and scales by output volume (estimated=True) and returns no output."""
    conv = torch_conv_fn(torch, geom.spatial)
    g = geom
    torch.backends.cudnn.benchmark = True
    w = torch.from_numpy(w_np).cuda()
    try:
        x = torch.from_numpy(x_np).cuda()
        holder = {}

        def call():
            holder.pop("y", None)
            holder["y"] = conv(x, w, None, g.stride, g.padding, g.dilation, g.groups)

        times = timed_runs(call, repeats, warmup=1, sync=torch.cuda.synchronize)
        del x
        return {"seconds": median(times), "times": times, "estimated": False}, holder["y"]
    except torch.cuda.OutOfMemoryError:
        holder = x = None
        gc.collect()
        torch.cuda.empty_cache()
    budget = torch.cuda.mem_get_info()[0] // 4
    while True:  # the largest chunk whose conv (with its workspace) runs
        chunks, info = plan_chunks(g, budget, x_copies=1, y_copies=1)
        ch = chunks[0]
        try:
            xc = torch.randn(g.x_slab_shape(ch), device="cuda")
            times = timed_runs(
                lambda: conv(xc, w, None, g.stride, chunk_conv_padding(g, ch), g.dilation, g.groups),
                repeats, warmup=1, sync=torch.cuda.synchronize)
            break
        except torch.cuda.OutOfMemoryError:
            xc = None
            torch.cuda.empty_cache()
            budget //= 2
    scale = g.y_shape[0] * g.y_shape[2] / ((ch.n1 - ch.n0) * (ch.o1 - ch.o0))
    return {"seconds": median(times) * scale, "times": [t * scale for t in times], "estimated": True,
            "estimate_from": dict(info, scale=scale)}, None


def run_pyooc(pyooc, result, variant, x, w, y, geom, limit, backend, reference, args, devices=None):
    def call():
        pyooc.conv_forward(x, w, **geom.call_args, out=y, memory_limit=limit, backend=backend, devices=devices)

    return run_pyooc_variant(pyooc, result, variant, call, lambda: y.fill(np.nan),
                             lambda: check_output(result, variant, reference, y), args, backend)


def run_pyooc_fresh(pyooc, torch, result, variant, x, w, geom, limit, backend, reference, args):
    """y = conv_forward(x, w) as most callers write it: a new result each call (where a GPU is, cut
    from pyooc's pinned result cache), checked after the warm-up (_measure.run_fresh_variant)."""
    def call():
        return pyooc.conv_forward(x, w, **geom.call_args, memory_limit=limit, backend=backend)

    return run_fresh_variant(pyooc, result, variant, call, [geom.y_shape],
                             lambda y: check_output(result, variant, reference, y), args, backend, torch)


def run_devices(pyooc, torch, result, x, w, geom, limit, backend, reference, args):
    """The devices variant: the same pinned arrays (pageable on the host backend) on the first of
    --devices alone, then spread over all of them, each checked and timed as run_pyooc does.
    Returns the spread run's median seconds; the one-device run's is pyooc_one_device_s."""
    devices = args.devices
    xp, yp = pinned_copy(pyooc, torch, x), pinned_empty(pyooc, torch, geom.y_shape, np.float32)
    result["devices"] = {"listed": devices, "pinned": backend == "cuda"}
    result["pyooc_one_device_s"] = run_pyooc(pyooc, result, "one_device", xp, w, yp, geom, limit, backend, reference,
                                             args, devices=devices[:1])
    return run_pyooc(pyooc, result, "devices", xp, w, yp, geom, limit, backend, reference, args, devices=devices)


def run_bf16(pyooc, torch, result, x, w, geom, limit, ctx, args):
    """The all-pinned variant in bfloat16: x, w and y pinned, half the bytes; checked against the
    float32 reference of the bf16-rounded inputs within bf16's tolerance."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    xb, wb = pyooc.pinned_empty(geom.x_shape, bf16), pyooc.pinned_empty(geom.w_shape, bf16)
    for n in range(geom.x_shape[0]):
        xb[n] = x[n]
    wb[...] = w
    yb = pyooc.pinned_empty(geom.y_shape, bf16)
    result["bf16_roofline_s"] = roofline((geom.x_bytes + geom.w_bytes) / 2, geom.y_bytes / 2, ctx["bandwidth"])["seconds"]
    reference = TorchReference(torch, geom, xb.astype(np.float32), wb.astype(np.float32), None)

    def call():
        pyooc.conv_forward(xb, wb, **geom.call_args, out=yb, memory_limit=limit, backend=ctx["backend"])

    return run_pyooc_variant(pyooc, result, "bf16", call, lambda: yb.fill(np.nan),
                             lambda: checked(result, "bf16", reference, yb.astype(np.float32), 2e-2), args,
                             ctx["backend"])


def run_case(name, spec, ctx):
    pyooc, torch, args = ctx["pyooc"], ctx["torch"], ctx["args"]
    description, x_shape, w_shape, padding, cap = spec
    geom = ConvGeometry.padded(x_shape, w_shape, padding)
    ws = geom.working_set_bytes
    limit = memory_limit_for(ws, cap)
    backend = ctx["backend"]
    result = {
        "name": name, "description": description, "x_shape": geom.x_shape, "w_shape": geom.w_shape,
        "y_shape": geom.y_shape, "stride": geom.stride, "padding": geom.padding, "dilation": geom.dilation,
        "groups": geom.groups, "dtype": "float32", "x_bytes": geom.x_bytes, "w_bytes": geom.w_bytes, "y_bytes": geom.y_bytes,
        "working_set_bytes": ws, "memory_limit": limit, "working_set_over_limit": ws / limit, "flops": geom.flops,
        "roofline_s": None, "pyooc_pinned_s": None, "pyooc_pageable_s": None, "incore_torch_s": None,
        "naive_torch_s": None, "expert_torch_s": None,
        "times": {}, "errors": {}, "checked": {}, "pyooc_stats": {}, "failures": {}, "skipped": {},
    }
    plan = pyooc.plan_conv_forward(geom.x_shape, geom.w_shape, **geom.call_args, memory_limit=limit, backend=backend)
    result["pyooc_plan"] = plan_dict(plan)
    log(f"[{name}] {description}: working set {fmt_bytes(ws)}, memory_limit {fmt_bytes(limit)}; "
        f"pyooc plan: splits {plan.splits}, {plan.num_chunks} chunks")
    started = time.perf_counter()
    x, w = make_inputs(torch, geom, args.seed)
    y = np.empty(geom.y_shape, dtype=np.float32)
    result["setup_seconds"] = time.perf_counter() - started

    def attempt(peer, fn):
        return attempt_peer(result, ctx, peer, fn)

    bar = progress(total=len(PEERS), desc=name)

    def step(label):
        if bar is not None:
            bar.set_postfix_str(label)
            bar.update(1)

    # In-core torch: the roofline's compute term and the reference output.
    y_ref = None
    if torch is not None:
        def incore():
            nonlocal y_ref
            info, y_ref = incore_torch(torch, geom, x, w, args.repeats)
            result["times"]["incore"] = info["times"]
            result["incore"] = {k: v for k, v in info.items() if k not in ("times", "seconds")}
            return info["seconds"]
        result["incore_torch_s"] = attempt("incore", incore)
        reference = TorchReference(torch, geom, x, w, y_ref)
    else:
        result["skipped"]["incore"] = "no torch/GPU (dry run)"
        reference = Reference(None, np_conv(x, w, geom.stride, geom.padding, geom.dilation, geom.groups))
    step("in-core")
    compute_s = result["incore_torch_s"]
    rl = roofline(geom.x_bytes + geom.w_bytes, geom.y_bytes, ctx["bandwidth"], compute_s)
    result["roofline"] = rl
    result["roofline_s"] = rl["seconds"]
    result["pageable_bound_s"] = pageable_bound(geom.x_bytes + geom.w_bytes, geom.y_bytes, ctx["bandwidth"],
                                                rl["seconds"])

    result["pyooc_pageable_s"] = attempt(
        "pageable", lambda: run_pyooc(pyooc, result, "pageable", x, w, y, geom, limit, backend, reference, args))
    step("pyooc pageable")

    if torch is not None:
        def naive():
            torch.backends.cudnn.benchmark = False  # torch's default: what a naive loop gets
            yt = torch.from_numpy(y)
            peer = NaiveTorchConv(torch, geom, torch.from_numpy(x), torch.from_numpy(w), yt)
            return run_torch_peer(torch, result, "naive", peer, limit, geom.w_bytes, lambda: yt.fill_(float("nan")),
                                  lambda: check_output(result, "naive", reference, y), args.naive_repeats, args)
        result["naive_torch_s"] = attempt("naive", naive)
    else:
        result["skipped"]["naive"] = "no torch/GPU (dry run)"
    step("naive torch")

    if backend == "cuda":
        def pinned():
            xp = pinned_copy(pyooc, torch, x)
            yp = pyooc.pinned_empty(geom.y_shape)
            return run_pyooc(pyooc, result, "pinned", xp, w, yp, geom, limit, backend, reference, args)
        result["pyooc_pinned_s"] = attempt("pinned", pinned)
    else:
        result["skipped"]["pinned"] = "no GPU: pinned memory needs CUDA (dry run)"
    step("pyooc pinned")

    if backend == "cuda":
        def all_pinned():
            xp, wp = pinned_copy(pyooc, torch, x), pinned_copy(pyooc, torch, w)
            yp = pyooc.pinned_empty(geom.y_shape)
            return run_pyooc(pyooc, result, "all_pinned", xp, wp, yp, geom, limit, backend, reference, args)
        result["pyooc_all_pinned_s"] = attempt("all_pinned", all_pinned)
    else:
        result["skipped"]["all_pinned"] = "no GPU: pinned memory needs CUDA (dry run)"

    result["pyooc_fresh_s"] = attempt(
        "fresh", lambda: run_pyooc_fresh(pyooc, torch, result, "fresh", x, w, geom, limit, backend, reference, args))

    if geom.y_shape == geom.x_shape:  # the result can be the next call's input
        def chained():
            y0 = pyooc.conv_forward(x, w, **geom.call_args, memory_limit=limit, backend=backend)
            chain_ref = (TorchReference(torch, geom, y0, w, None) if torch is not None
                         else Reference(None, np_conv(y0, w, geom.stride, geom.padding, geom.dilation, geom.groups)))
            return run_pyooc_fresh(pyooc, torch, result, "chained", y0, w, geom, limit, backend, chain_ref, args)
        result["pyooc_chained_s"] = attempt("chained", chained)
    else:
        result["skipped"]["chained"] = shape_breaks_chain("y", "x")

    if backend == "cuda":
        result["pyooc_bf16_s"] = attempt("bf16", lambda: run_bf16(pyooc, torch, result, x, w, geom, limit, ctx, args))
    else:
        result["skipped"]["bf16"] = "no GPU: the bf16 variant runs pinned (dry run)"

    if args.devices is None:
        result["skipped"]["devices"] = "no --devices given"
    else:
        result["pyooc_devices_s"] = attempt(
            "devices", lambda: run_devices(pyooc, torch, result, x, w, geom, limit, backend, reference, args))

    if torch is not None:
        def expert():
            torch.backends.cudnn.benchmark = True
            xt = torch.empty(geom.x_shape, dtype=torch.float32, pin_memory=True)
            yt = torch.empty(geom.y_shape, dtype=torch.float32, pin_memory=True)
            try:
                xt.copy_(torch.from_numpy(x))
                wt = torch.from_numpy(w).pin_memory()
                peer = ExpertTorchConv(torch, geom, xt, wt, yt, ctx["copier"])
                seconds = run_torch_peer(torch, result, "expert", peer, limit, geom.w_bytes,
                                         lambda: yt.fill_(float("nan")),
                                         lambda: check_output(result, "expert", reference, yt), args.repeats, args)
                result["expert"]["cudnn_benchmark"] = True
                peer.release()
                return seconds
            finally:
                del xt, yt
                release_host_cache(torch)
        result["expert_torch_s"] = attempt("expert", expert)
    else:
        result["skipped"]["expert"] = "no torch/GPU (dry run)"
    step("expert torch")
    if bar is not None:
        bar.close()

    summarize(result, TARGETS)
    summarize_variants(result)
    result["case_seconds"] = time.perf_counter() - started
    return result


def summarize_variants(r):
    """The variants' ratios against the roofline (_report.summarize_variants), the pageable one
    against its own bound too, bf16 against its own roofline and against float32's all-pinned run,
    with their targets, beside summarize's."""
    ratio = _report.ratio
    rl = r["roofline_s"]
    r["ratios"].update({
        "pageable_own_efficiency": ratio(r.get("pageable_bound_s"), r.get("pyooc_pageable_s")),
        "pageable_link_floor": ratio(rl, r.get("pyooc_pageable_s")),
        "bf16_efficiency": ratio(r.get("bf16_roofline_s"), r.get("pyooc_bf16_s")),
        "bf16_speedup": ratio(r.get("pyooc_all_pinned_s"), r.get("pyooc_bf16_s")),
        "ratio_vs_expert_all_pinned": ratio(r.get("expert_torch_s"), r.get("pyooc_all_pinned_s")),
        # --devices: the first device's time over all of them together (2 GPUs: ideally 2).
        "devices_speedup": ratio(r.get("pyooc_one_device_s"), r.get("pyooc_devices_s")),
    })
    _report.summarize_variants(r, VARIANT_TARGETS)


# --------------------------------------------------------------------------------------------
# report


VARIANT_COLUMNS = [("all pinned", "pyooc_all_pinned_s", "roofline_s"), ("pinned x, y", "pyooc_pinned_s", "roofline_s"),
                   ("pageable, out=", "pyooc_pageable_s", "roofline_s"),
                   ("pageable, out= (own bound)", "pyooc_pageable_s", "pageable_bound_s"),
                   ("fresh result", "pyooc_fresh_s", "roofline_s"),
                   ("chained", "pyooc_chained_s", "roofline_s"), ("bf16 all pinned", "pyooc_bf16_s", "bf16_roofline_s"),
                   ("first of --devices", "pyooc_one_device_s", "roofline_s"),
                   ("all of --devices (speedup)", "pyooc_devices_s", "pyooc_one_device_s")]


def markdown(report, name=NAME, roofline_note="", sections=()):
    """The report as markdown (report_markdown), each case's note naming x and w, and the variants
    (every one's median seconds and fraction of the roofline; bf16: of its own, half the bytes)."""
    return report_markdown(report, name, lambda c: f"x {list(c['x_shape'])}, w {list(c['w_shape'])}",
                           roofline_note=roofline_note,
                           sections=list(sections) + _report.variant_lines(report, VARIANT_COLUMNS))


# --------------------------------------------------------------------------------------------


def main(argv=None):
    return bench_main(argv, name=NAME, doc=__doc__, cases=CASES, peers=PEERS, run_case=run_case, markdown=markdown,
                      self_test=self_test_geometry, tolerance=TOLERANCE)


if __name__ == "__main__":
    sys.exit(main())
