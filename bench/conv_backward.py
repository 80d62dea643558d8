#!/usr/bin/env python3
"""The convolution's gradients out of core: pyooc against the link roofline and torch, in one run.

Cases `data-*` time the input gradient (dx from dy and w, cuDNN BackwardData), cases `filter-*` the
weight gradient (dw from x and dy, BackwardFilter). For each (working set >= 8 GB, device budget
<= 1/8 of it) this measures, on one GPU, as bench/conv_forward.py does for the forward:
  - the link and the roofline max(bytes_in/H2D, bytes_out/D2H, (in+out)/both, in-core compute), with
    bytes_in = dy + w, bytes_out = dx (data) and bytes_in = x + dy, bytes_out = dw (filter);
  - pyooc on pageable numpy arrays and on pinned ones;
  - in-core torch (torch.nn.grad.conv2d_input / conv2d_weight and the 3D twins, TF32 off, data
    already on the GPU): the roofline's compute term and the reference output;
  - a naive torch chunk loop and an expert one (pinned, three streams, double buffering), both held
    to pyooc's memory_limit.
The weight gradient is a reduction over N and space: its rows report the dw traffic (D2H: dw once)
and H2D over x + dy, to show that streaming x and dy costs nothing beyond moving them once.

Writes OUT/conv_backward.json and OUT/conv_backward.md (same schema as conv_forward's) and prints
the table last. --quick: ~1 GB working sets; --dry-run: tiny cases on pyooc's host backend without
a GPU or torch (checks this script's peer geometry, pyooc's numerics and the report)."""

import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _arrays import host_randn, pinned_copy  # noqa: E402
from _check import Reference, checked  # noqa: E402
from _cli import attempt_peer, bench_main  # noqa: E402
from _console import log  # noqa: E402
from _conv_geometry import (  # noqa: E402
    SELF_TEST_GEOMETRIES, ConvGeometry, chunk_conv_padding, plan_chunks, plan_data_grad_chunks, self_test_budgets)
from _conv_peers import ExpertTorchGrad, NaiveTorchGrad, torch_grad_fns  # noqa: E402
from _link import pageable_bound, roofline  # noqa: E402
from _measure import (  # noqa: E402
    NO_GRADIENT_CHAIN, memory_limit_for, plan_dict, run_fresh_variant, run_pyooc_variant, run_torch_peer)
from _report import markdown_table, ratio, summarize  # noqa: E402
from _timing import median, timed_runs  # noqa: E402
from _torch_env import release_host_cache  # noqa: E402
from _units import GiB, fmt_bytes  # noqa: E402
import conv_forward as fwd  # noqa: E402  (peers, targets, tolerance and report shared with the forward)

NAME = "conv_backward"
PEERS = fwd.PEERS

# name -> (operation, description, x shape, w shape, padding, cap on memory_limit)
VGG, VOL = "2D VGG-like: 3x3, 256->256, 56x56, padding 1", "3D volume: 3x3x3, 32->32, {}^3, padding 1"
CASES = {
    "full": {
        "data-vgg2d": ("data", VGG, (1344, 256, 56, 56), (256, 256, 3, 3), 1, GiB),
        "data-vol3d": ("data", VOL.format(256), (2, 32, 256, 256, 256), (32, 32, 3, 3, 3), 1, GiB),
        "filter-vgg2d": ("filter", VGG, (1344, 256, 56, 56), (256, 256, 3, 3), 1, GiB),
        "filter-vol3d": ("filter", VOL.format(256), (2, 32, 256, 256, 256), (32, 32, 3, 3, 3), 1, GiB),
        "data-dw3d": ("data", fwd.DW.format(256, 128), (2, 64, 256, 256, 128), (64, 1, 3, 3, 3), 1, GiB),
        "filter-dw3d": ("filter", fwd.DW.format(256, 128), (2, 64, 256, 256, 128), (64, 1, 3, 3, 3), 1, GiB),
    },
    "quick": {
        "data-vgg2d": ("data", VGG, (168, 256, 56, 56), (256, 256, 3, 3), 1, None),
        "data-vol3d": ("data", VOL.format(128), (2, 32, 128, 128, 128), (32, 32, 3, 3, 3), 1, None),
        "filter-vgg2d": ("filter", VGG, (168, 256, 56, 56), (256, 256, 3, 3), 1, None),
        "filter-vol3d": ("filter", VOL.format(128), (2, 32, 128, 128, 128), (32, 32, 3, 3, 3), 1, None),
        "data-dw3d": ("data", fwd.DW.format(128, 64), (2, 64, 128, 128, 64), (64, 1, 3, 3, 3), 1, None),
        "filter-dw3d": ("filter", fwd.DW.format(128, 64), (2, 64, 128, 128, 64), (64, 1, 3, 3, 3), 1, None),
    },
    "dry-run": {
        "data-vgg2d": ("data", "2D (tiny): 3x3, 16->16, 14x14", (8, 16, 14, 14), (16, 16, 3, 3), 1, None),
        "data-vol3d": ("data", "3D (tiny): 3x3x3, 8->8, 24^3", (1, 8, 24, 24, 24), (8, 8, 3, 3, 3), 1, None),
        "filter-vgg2d": ("filter", "2D (tiny): 3x3, 16->16, 14x14", (8, 16, 14, 14), (16, 16, 3, 3), 1, None),
        "filter-vol3d": ("filter", "3D (tiny): 3x3x3, 8->8, 24^3", (1, 8, 24, 24, 24), (8, 8, 3, 3, 3), 1, None),
        "data-dw3d": ("data", "3D depthwise (tiny): 3x3x3, 8 groups, 24^3", (1, 8, 24, 24, 24), (8, 1, 3, 3, 3), 1, None),
        "filter-dw3d": ("filter", "3D depthwise (tiny): 3x3x3, 8 groups, 24^3", (1, 8, 24, 24, 24), (8, 1, 3, 3, 3), 1,
                        None),
    },
}


# --------------------------------------------------------------------------------------------
# numpy references (dry run and the peers' geometry self-test)


def _windows(x_padded_shape, w_shape, y_shape, stride, dilation):
    """(kernel offset, slab of the padded input that offset reads) for every offset."""
    for offs in np.ndindex(*w_shape[2:]):
        yield offs, (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offs, dilation, y_shape[2:], stride))


def np_grad_input(x_shape, w, dy, stride, padding, dilation, groups=1):
    """float64 dx of the cross-correlation (torch semantics), any spatial rank, per-dim padding and groups."""
    if groups > 1:
        x_group = (x_shape[0], x_shape[1] // groups) + tuple(x_shape[2:])
        return fwd.per_group(lambda wg, dyg: np_grad_input(x_group, wg, dyg, stride, padding, dilation), groups,
                             [(w, 0), (dy, 1)], 1)
    dxp = np.zeros(tuple(x_shape[:2]) + tuple(n + 2 * p for n, p in zip(x_shape[2:], padding)))
    for offs, win in _windows(dxp.shape, w.shape, dy.shape, stride, dilation):
        dxp[win] += np.einsum("kc,nk...->nc...", w[(slice(None), slice(None)) + offs].astype(np.float64), dy)
    return dxp[(slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(padding, x_shape[2:]))]


def np_grad_weight(x, w_shape, dy, stride, padding, dilation, groups=1):
    """float64 dw of the cross-correlation (any groups)."""
    if groups > 1:
        w_group = (w_shape[0] // groups,) + tuple(w_shape[1:])
        return fwd.per_group(lambda xg, dyg: np_grad_weight(xg, w_group, dyg, stride, padding, dilation), groups,
                             [(x, 1), (dy, 1)], 0)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in padding])
    dw = np.zeros(w_shape)
    axes = "xyz"[:x.ndim - 2]
    for offs, win in _windows(xp.shape, w_shape, dy.shape, stride, dilation):
        dw[(slice(None), slice(None)) + offs] = np.einsum(f"nk{axes},nc{axes}->kc", dy.astype(np.float64), xp[win])
    return dw


def self_test_geometry(rng):
    """The torch peers' gradient chunks emulated with numpy against the float64 gradients: N chunks
    and slabs (halos, uneven edges, strides up to the kernel span, dilations). Raises AssertionError."""
    checked = 0
    for x_shape, w_shape, stride, padding, dilation in SELF_TEST_GEOMETRIES:
        geom = ConvGeometry(x_shape, w_shape, stride, padding, dilation)
        x = rng.standard_normal(x_shape)
        w = rng.standard_normal(w_shape)
        dy = rng.standard_normal(geom.y_shape)
        dx_ref = np_grad_input(x_shape, w, dy, stride, padding, dilation)
        dw_ref = np_grad_weight(x, w_shape, dy, stride, padding, dilation)
        per_sample = 2 * 4 * (math.prod(x_shape[1:]) + math.prod(geom.y_shape[1:]))
        for budget in self_test_budgets(per_sample):
            try:
                data_chunks, _ = plan_data_grad_chunks(geom, budget, 2, 2)
                filter_chunks, _ = plan_chunks(geom, budget, 2, 2)
            except MemoryError:
                continue
            dx = np.full(x_shape, np.nan)
            for ch in data_chunks:
                pads = chunk_conv_padding(geom, ch)
                part = np_grad_input(geom.x_slab_shape(ch), w, dy[ch.n0:ch.n1, :, ch.o0:ch.o1], stride, pads, dilation)
                keep = part[:, :, ch.t0 - ch.lo:ch.t1 - ch.lo] if ch.split else part
                assert np.isnan(dx[ch.n0:ch.n1, :, ch.t0:ch.t1]).all(), "dx rows written twice"
                dx[ch.n0:ch.n1, :, ch.t0:ch.t1] = keep
            assert not np.isnan(dx).any() and np.allclose(dx, dx_ref, rtol=1e-10, atol=1e-10), (x_shape, budget)
            dw = np.zeros(w_shape)
            for ch in filter_chunks:
                if ch.split:  # the halo'd slab, zero rows outside x
                    slab = np.zeros(geom.x_slab_shape(ch))
                    slab[:, :, ch.pad_lo:ch.in_rows - ch.pad_hi] = x[ch.n0:ch.n1, :, ch.clip_lo:ch.clip_hi]
                else:
                    slab = x[ch.n0:ch.n1]
                dw += np_grad_weight(slab, w_shape, dy[ch.n0:ch.n1, :, ch.o0:ch.o1], stride,
                                     chunk_conv_padding(geom, ch), dilation)
            assert np.allclose(dw, dw_ref, rtol=1e-10, atol=1e-10), (x_shape, budget)
            checked += 2
    return checked


# --------------------------------------------------------------------------------------------
# one case


def operands(op, geom):
    """(bytes in, bytes out) of an operation that moves each byte once."""
    if op == "data":
        return geom.y_bytes + geom.w_bytes, geom.x_bytes
    return geom.x_bytes + geom.y_bytes, geom.w_bytes


def call_pyooc(pyooc, op, geom, x, w, dy, out, limit, backend):
    opts = dict(**geom.call_args, out=out, memory_limit=limit, backend=backend)
    if op == "data":
        return pyooc.conv_backward_data(dy, w, geom.x_shape, **opts)
    return pyooc.conv_backward_filter(x, dy, geom.w_shape, **opts)


def make_inputs(torch, op, geom, seed):
    """Pageable numpy x (filter only), w (scaled by 1/sqrt(fan_in)) and dy; drawn on the GPU when there
    is one."""
    scale = 1.0 / math.sqrt(math.prod(geom.w_shape[1:]))
    rng = np.random.default_rng(seed)

    def draw(shape, salt, s=1.0):
        if torch is None:
            return (rng.standard_normal(shape) * s).astype(np.float32)
        return host_randn(torch, shape, 3 * seed + salt, s)

    x = draw(geom.x_shape, 0) if op == "filter" else None
    return x, draw(geom.w_shape, 1, scale), draw(geom.y_shape, 2)


def check_output(result, peer, reference, out):
    checked(result, peer, reference, out, fwd.TOLERANCE)


def incore_torch(torch, op, geom, x, w, dy, repeats):
    """Median seconds of torch.nn.grad with everything on the GPU (cuDNN benchmark mode), and the
    output, kept on the GPU as the reference."""
    grad_input, grad_weight = torch_grad_fns(torch, geom.spatial)
    g = geom
    torch.backends.cudnn.benchmark = True
    wd, dyd = torch.from_numpy(w).cuda(), torch.from_numpy(dy).cuda()
    xd = torch.from_numpy(x).cuda() if x is not None else None
    holder = {}

    def call():
        holder.pop("out", None)
        if op == "data":
            holder["out"] = grad_input(g.x_shape, wd, dyd, g.stride, g.padding, g.dilation, g.groups)
        else:
            holder["out"] = grad_weight(xd, g.w_shape, dyd, g.stride, g.padding, g.dilation, g.groups)

    times = timed_runs(call, repeats, warmup=1, sync=torch.cuda.synchronize)
    del xd, wd, dyd
    return {"seconds": median(times), "times": times, "estimated": False}, holder["out"]


def run_pyooc(pyooc, result, variant, op, geom, x, w, dy, out, limit, backend, reference, args):
    def call():
        call_pyooc(pyooc, op, geom, x, w, dy, out, limit, backend)

    return run_pyooc_variant(pyooc, result, variant, call, lambda: out.fill(np.nan),
                             lambda: check_output(result, variant, reference, out), args, backend)


def run_pyooc_fresh(pyooc, torch, result, op, geom, x, w, dy, limit, backend, reference, args):
    """The gradient as most callers write it, a new result each call (out= not given)."""
    def call():
        return call_pyooc(pyooc, op, geom, x, w, dy, None, limit, backend)

    return run_fresh_variant(pyooc, result, "fresh", call, [geom.x_shape if op == "data" else geom.w_shape],
                             lambda out: check_output(result, "fresh", reference, out), args, backend, torch)


def run_bf16(pyooc, torch, result, op, geom, x, w, dy, limit, backend, bandwidth, args):
    """The all-pinned variant in bfloat16 (conv_forward.py's, for a gradient): the operands pinned in
    bf16, half the bytes each way; checked against the float32 gradient of the bf16-rounded
    operands (in core on the GPU; numpy in a dry run, whose arrays are not pinned) within bf16's
    tolerance."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    empty = (lambda shape: pyooc.pinned_empty(shape, bf16)) if torch is not None else (lambda s: np.empty(s, bf16))

    def in_bf16(a):
        if a is None:
            return None
        b = empty(a.shape)
        for n in range(a.shape[0]):  # a sample at a time: no float32-sized temporary
            b[n] = a[n]
        return b

    xb, wb, dyb = in_bf16(x), in_bf16(w), in_bf16(dy)
    out = empty(geom.x_shape if op == "data" else geom.w_shape)
    bytes_in, bytes_out = operands(op, geom)
    result["bf16_roofline_s"] = roofline(bytes_in / 2, bytes_out / 2, bandwidth)["seconds"]
    up = lambda a: None if a is None else a.astype(np.float32)  # noqa: E731
    reference = reference_gradient(torch, op, geom, up(xb), up(wb), up(dyb))

    def call():
        call_pyooc(pyooc, op, geom, xb, wb, dyb, out, limit, backend)

    return run_pyooc_variant(pyooc, result, "bf16", call, lambda: out.fill(np.nan),
                             lambda: checked(result, "bf16", reference, out.astype(np.float32), 2e-2), args, backend)


def reference_gradient(torch, op, geom, x, w, dy):
    """The gradient to check against: in-core torch on the GPU (one run), else numpy in float64."""
    if torch is not None:
        return Reference(torch, incore_torch(torch, op, geom, x, w, dy, 1)[1])
    g = geom
    return Reference(None, np_grad_input(g.x_shape, w, dy, g.stride, g.padding, g.dilation, g.groups) if op == "data"
                     else np_grad_weight(x, g.w_shape, dy, g.stride, g.padding, g.dilation, g.groups))


def run_grad_peer(torch, result, name, peer, limit, w_bytes, out, reference, repeats, args):
    """Fits a torch peer to the budget (its warm-up output is the one checked), then times it."""
    return run_torch_peer(torch, result, name, peer, limit, w_bytes, lambda: out.fill_(float("nan")),
                          lambda: check_output(result, name, reference, out), repeats, args)


def run_case(name, spec, ctx):
    pyooc, torch, args = ctx["pyooc"], ctx["torch"], ctx["args"]
    op, description, x_shape, w_shape, padding, cap = spec
    geom = ConvGeometry.padded(x_shape, w_shape, padding)
    ws = geom.working_set_bytes
    limit = memory_limit_for(ws, cap)
    backend = ctx["backend"]
    bytes_in, bytes_out = operands(op, geom)
    result = {
        "name": name, "operation": f"conv_backward_{op}", "description": description, "x_shape": geom.x_shape,
        "w_shape": geom.w_shape, "y_shape": geom.y_shape, "stride": geom.stride, "padding": geom.padding,
        "dilation": geom.dilation, "groups": geom.groups, "dtype": "float32", "x_bytes": geom.x_bytes,
        "w_bytes": geom.w_bytes, "y_bytes": geom.y_bytes, "bytes_in": bytes_in, "bytes_out": bytes_out,
        "working_set_bytes": ws,
        "memory_limit": limit, "working_set_over_limit": ws / limit, "flops": geom.flops,
        "roofline_s": None, "pyooc_pinned_s": None, "pyooc_pageable_s": None, "incore_torch_s": None,
        "naive_torch_s": None, "expert_torch_s": None,
        "times": {}, "errors": {}, "checked": {}, "pyooc_stats": {}, "failures": {}, "skipped": {},
    }
    opts = dict(**geom.call_args, memory_limit=limit, backend=backend)
    plan = (pyooc.plan_conv_backward_data(geom.y_shape, geom.w_shape, geom.x_shape, **opts) if op == "data" else
            pyooc.plan_conv_backward_filter(geom.x_shape, geom.y_shape, geom.w_shape, **opts))
    result["pyooc_plan"] = plan_dict(plan)
    log(f"[{name}] {description}: working set {fmt_bytes(ws)}, memory_limit {fmt_bytes(limit)}; "
        f"pyooc plan: splits {plan.splits}, {plan.num_chunks} chunks")
    started = time.perf_counter()
    x, w, dy = make_inputs(torch, op, geom, args.seed)
    out_shape = geom.x_shape if op == "data" else geom.w_shape
    out = np.empty(out_shape, dtype=np.float32)
    result["setup_seconds"] = time.perf_counter() - started

    def attempt(peer, fn):
        return attempt_peer(result, ctx, peer, fn)

    # In-core torch: the roofline's compute term and the reference output.
    if torch is not None:
        def incore():
            info, ref = incore_torch(torch, op, geom, x, w, dy, args.repeats)
            ctx["reference"] = Reference(torch, ref)
            result["times"]["incore"] = info["times"]
            result["incore"] = {"estimated": False}
            return info["seconds"]
        result["incore_torch_s"] = attempt("incore", incore)
        reference = ctx.pop("reference", None) or Reference(torch, None)
    else:
        result["skipped"]["incore"] = "no torch/GPU (dry run)"
        reference = reference_gradient(None, op, geom, x, w, dy)
    rl = roofline(bytes_in, bytes_out, ctx["bandwidth"], result["incore_torch_s"])
    result["roofline"] = rl
    result["roofline_s"] = rl["seconds"]
    result["pageable_bound_s"] = pageable_bound(bytes_in, bytes_out, ctx["bandwidth"], rl["seconds"])

    result["pyooc_pageable_s"] = attempt("pageable", lambda: run_pyooc(
        pyooc, result, "pageable", op, geom, x, w, dy, out, limit, backend, reference, args))

    if torch is not None and reference.ref is not None:
        def naive():
            torch.backends.cudnn.benchmark = False  # torch's default: what a naive loop gets
            t = lambda a: None if a is None else torch.from_numpy(a)  # noqa: E731
            peer = NaiveTorchGrad(torch, op, geom, t(x), t(w), t(dy), t(out))
            return run_grad_peer(torch, result, "naive", peer, limit, geom.w_bytes, t(out), reference,
                                 args.naive_repeats, args)
        result["naive_torch_s"] = attempt("naive", naive)

        def pinned():
            pin = lambda a: None if a is None else pinned_copy(pyooc, torch, a)  # noqa: E731
            xp, dyp, outp = pin(x), pin(dy), pyooc.pinned_empty(out_shape)
            return run_pyooc(pyooc, result, "pinned", op, geom, xp, w, dyp, outp, limit, backend, reference, args)
        result["pyooc_pinned_s"] = attempt("pinned", pinned)

        def all_pinned():
            pin = lambda a: None if a is None else pinned_copy(pyooc, torch, a)  # noqa: E731
            xp, wp, dyp, outp = pin(x), pin(w), pin(dy), pyooc.pinned_empty(out_shape)
            return run_pyooc(pyooc, result, "all_pinned", op, geom, xp, wp, dyp, outp, limit, backend, reference,
                             args)
        result["pyooc_all_pinned_s"] = attempt("all_pinned", all_pinned)

        def expert():
            torch.backends.cudnn.benchmark = True
            pin = lambda a: None if a is None else torch.from_numpy(a).pin_memory()  # noqa: E731
            xt, wt, dyt = pin(x), pin(w), pin(dy)
            outt = torch.empty(out_shape, dtype=torch.float32, pin_memory=True)
            try:
                peer = ExpertTorchGrad(torch, op, geom, xt, wt, dyt, outt, ctx["copier"])
                seconds = run_grad_peer(torch, result, "expert", peer, limit, geom.w_bytes, outt, reference,
                                        args.repeats, args)
                result["expert"]["cudnn_benchmark"] = True
                peer.release()
                return seconds
            finally:
                del xt, dyt, outt
                release_host_cache(torch)
        result["expert_torch_s"] = attempt("expert", expert)
    else:
        for peer in ("naive", "pinned", "all_pinned", "expert"):
            result["skipped"][peer] = "no torch/GPU (dry run)" if torch is None else "no in-core reference"

    result["pyooc_fresh_s"] = attempt("fresh", lambda: run_pyooc_fresh(pyooc, torch, result, op, geom, x, w, dy, limit,
                                                                       backend, reference, args))
    result["skipped"]["chained"] = NO_GRADIENT_CHAIN
    result["pyooc_bf16_s"] = attempt("bf16", lambda: run_bf16(pyooc, torch, result, op, geom, x, w, dy, limit,
                                                               backend, ctx["bandwidth"], args))
    summarize(result, fwd.TARGETS)
    fwd.summarize_variants(result)
    if op == "filter":  # a reduction: dw crosses the link once, x and dy (about) once
        stats = result["pyooc_stats"].get("pinned") or result["pyooc_stats"].get("pageable") or {}
        result["dw_traffic"] = {"dw_bytes": geom.w_bytes, "bytes_d2h": stats.get("bytes_d2h"),
                                "bytes_h2d": stats.get("bytes_h2d"),
                                "h2d_over_x_plus_dy": ratio(stats.get("bytes_h2d"), bytes_in)}
    result["case_seconds"] = time.perf_counter() - started
    return result


# --------------------------------------------------------------------------------------------
# report


def markdown(report):
    """conv_forward's report, plus the weight gradient's traffic."""
    traffic = [[c["name"], fmt_bytes(c["dw_traffic"]["dw_bytes"]), fmt_bytes(c["dw_traffic"]["bytes_d2h"]),
                fmt_bytes(c["bytes_in"]), fmt_bytes(c["dw_traffic"]["bytes_h2d"]),
                "-" if c["dw_traffic"]["h2d_over_x_plus_dy"] is None else f"{c['dw_traffic']['h2d_over_x_plus_dy']:.3f}"]
               for c in report["cases"] if "dw_traffic" in c]
    sections = ["", "Weight gradient traffic (pyooc, one call): dw is reduced on the device and crosses the link once:",
                "", markdown_table(["case", "dw", "D2H", "x + dy", "H2D", "H2D / (x + dy)"], traffic)] if traffic else []
    return fwd.markdown(report, name=NAME, roofline_note="; data: in = dy + w, out = dx; filter: in = x + dy, out = dw",
                        sections=sections)


# --------------------------------------------------------------------------------------------


def main(argv=None):
    return bench_main(argv, name=NAME, doc=__doc__, cases=CASES, peers=PEERS, run_case=run_case, markdown=markdown,
                      self_test=self_test_geometry, tolerance=fwd.TOLERANCE)


if __name__ == "__main__":
    sys.exit(main())
