#!/usr/bin/env python3
"""Fused out-of-core functions against the unfused sequences they replace, in one run.

On a link-bound layer the fastest byte is the one never moved. For each case this measures, on
one GPU and under one memory_limit:
  - forward cases (`fwd-*`): pyooc.conv_bias_activation_forward (y = relu(conv(x, w) + bias)) against
    conv_forward -> add_tensor(bias) -> activation_forward("relu"): x + y against x + 5y moved;
  - backward cases (`bwd-*`): pyooc.conv_backward_data_filter_bias against conv_backward_data ->
    conv_backward_filter -> conv_backward_bias: dy once against three times;
each on pageable numpy arrays and on pinned ones (x and dy pinned, w and the bias pageable). Bytes
moved come from the plans (the plan_* twins: bytes_h2d + bytes_d2h, summed over the unfused
sequence) and are cross-checked against what the runs counted (last_stats: equal for pageable
arrays; pinned ones skip halo zeros, so at most the plan's). The fused call also runs on the other
arrays users pass (bench/conv_forward.py's variants, `pyooc_<variant>_s` against the fused
roofline): all_pinned (w and the bias pinned too), fresh (pageable inputs, no out=: new results)
and chained (forward: the fused call on its previous result; the backward has no chain). Every
output is checked (relative error < 1e-4) against torch in-core on the GPU (relu(conv + bias);
torch.nn.grad's conv{2,3}d_input / _weight and dy's sum), or against float64 numpy in a dry run,
before it is timed; fused and unfused outputs must also agree. Timings: a
warm-up, then the median of --repeats runs. FP32 everywhere (TF32 off in torch).

Target (the issue's): conv + bias + relu fused <= 0.6x the time of the unfused sequence on a
link-bound layer (3x3, 64 -> 64 channels at 224x224: moving a sample's x and y takes ~4x longer than
its convolution on an H200); and the variants' (issue 14's): all pinned and chained >= 0.9 of the
roofline, fresh >= 0.6.

Writes OUT/fused.json and OUT/fused.md (default OUT: bench/results) and prints the markdown table
last. --quick runs smaller cases; --dry-run runs tiny cases on pyooc's host backend without a GPU or
torch (it checks this script, the byte accounting and the numerics; pageable arrays stand in for the
pinned ones)."""

import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _arrays import PINNED_STAND_IN, pinned_copy, pinned_empty  # noqa: E402
from _check import CheckFailed, checked, rel_error_on_device  # noqa: E402
from _cli import attempt_peer, bench_main  # noqa: E402
from _console import log  # noqa: E402
from _conv_geometry import ConvGeometry  # noqa: E402
from _conv_peers import torch_conv_fn, torch_grad_fns  # noqa: E402
from _link import roofline  # noqa: E402
from _measure import (  # noqa: E402
    NO_GRADIENT_CHAIN, memory_limit_for, plan_dict, run_fresh_variant, run_pyooc_variant, shape_breaks_chain)
from _report import (  # noqa: E402
    VARIANT_TARGETS, add_targets, markdown_table, ratio, summarize_variants, target_rows, variant_lines)
from _timing import median, timed_after_warmup, timed_runs  # noqa: E402
from _units import GB, GiB, fmt_bytes, fmt_s  # noqa: E402
import conv_backward as bwd  # noqa: E402  (float64 gradient references, input drawing)
import conv_forward as fwd  # noqa: E402  (float64 conv reference, tolerance)

NAME = "fused"
TOLERANCE = fwd.TOLERANCE
PEERS = ("incore", "fused_pageable", "unfused_pageable", "fused_pinned", "unfused_pinned", "all_pinned", "fresh",
         "chained")
# The fused call's array variants table: (label, time key, the bound its fraction is of).
VARIANT_COLUMNS = [("fused, all pinned", "pyooc_all_pinned_s", "roofline_s"),
                   ("fused, fresh result", "pyooc_fresh_s", "roofline_s"),
                   ("fused, chained", "pyooc_chained_s", "roofline_s")]
# Each target: (result key, goal, label); lower is better.
FORWARD_TARGETS = [
    ("fused_over_unfused_pageable", 0.6, "conv+bias+relu fused <= 0.6x unfused time (pageable)"),
    ("fused_over_unfused_pinned", 0.6, "conv+bias+relu fused <= 0.6x unfused time (pinned)"),
]

LINK_BOUND = "3x3, 64->64, 224x224, padding 1 (link-bound)"
# name -> (kind, description, x shape, w shape, padding, cap on memory_limit)
CASES = {
    "full": {
        "fwd-link-bound": ("forward", f"conv+bias+relu, {LINK_BOUND}", (256, 64, 224, 224), (64, 64, 3, 3), 1,
                           GiB),
        "bwd-link-bound": ("backward", f"(dx, dw, db), {LINK_BOUND}", (256, 64, 224, 224), (64, 64, 3, 3), 1,
                           GiB),
    },
    "quick": {
        "fwd-link-bound": ("forward", f"conv+bias+relu, {LINK_BOUND}", (32, 64, 224, 224), (64, 64, 3, 3), 1, None),
        "bwd-link-bound": ("backward", f"(dx, dw, db), {LINK_BOUND}", (32, 64, 224, 224), (64, 64, 3, 3), 1, None),
    },
    "dry-run": {
        "fwd-link-bound": ("forward", "conv+bias+relu (tiny): 3x3, 8->8, 20x20", (4, 8, 20, 20), (8, 8, 3, 3), 1,
                           None),
        "bwd-link-bound": ("backward", "(dx, dw, db) (tiny): 3x3, 8->8, 20x20", (4, 8, 20, 20), (8, 8, 3, 3), 1,
                           None),
    },
}


# --------------------------------------------------------------------------------------------
# the two ways to compute each case, with the bytes they move


class Sequence:
    """Runs pyooc calls one after another and adds up what each moved (last_stats) and what its
    plan said it would (the plan that ran: stats["plan"]); `out`: what the last call returned."""

    def __init__(self, pyooc):
        self.pyooc = pyooc
        self.counted = self.planned = 0
        self.calls = []
        self.out = None

    def __call__(self, fn, *args, **kwargs):
        out = self.out = fn(*args, **kwargs)
        stats = self.pyooc.last_stats()
        plan = stats["plan"]
        self.counted += stats["bytes_h2d"] + stats["bytes_d2h"]
        self.planned += plan.bytes_h2d + plan.bytes_d2h
        self.calls.append({"operation": plan.operation, "splits": plan.splits, "chunks": plan.num_chunks,
                           "bytes_h2d": stats["bytes_h2d"], "bytes_d2h": stats["bytes_d2h"],
                           "plan_bytes_h2d": plan.bytes_h2d, "plan_bytes_d2h": plan.bytes_d2h})
        return out


def forward_fused(pyooc, geom, x, w, b, y, limit, backend):
    seq = Sequence(pyooc)
    seq(pyooc.conv_bias_activation_forward, x, w, b, activation="relu", stride=geom.stride, padding=geom.padding,
        dilation=geom.dilation, out=y, memory_limit=limit, backend=backend)
    return seq


def forward_unfused(pyooc, geom, x, w, b, y, limit, backend):
    seq = Sequence(pyooc)
    seq(pyooc.conv_forward, x, w, stride=geom.stride, padding=geom.padding, dilation=geom.dilation, out=y,
        memory_limit=limit, backend=backend)
    bias = b.reshape((1, -1) + (1,) * geom.spatial)
    seq(pyooc.add_tensor, bias, y, out=y, memory_limit=limit, backend=backend)
    seq(pyooc.activation_forward, y, "relu", out=y, memory_limit=limit, backend=backend)
    return seq


def backward_fused(pyooc, geom, x, w, dy, outs, limit, backend):
    seq = Sequence(pyooc)
    seq(pyooc.conv_backward_data_filter_bias, x, dy, w, stride=geom.stride, padding=geom.padding,
        dilation=geom.dilation, out=outs, memory_limit=limit, backend=backend)
    return seq


def backward_unfused(pyooc, geom, x, w, dy, outs, limit, backend):
    seq = Sequence(pyooc)
    opts = dict(stride=geom.stride, padding=geom.padding, dilation=geom.dilation, memory_limit=limit, backend=backend)
    seq(pyooc.conv_backward_data, dy, w, geom.x_shape, out=outs[0], **opts)
    seq(pyooc.conv_backward_filter, x, dy, geom.w_shape, out=outs[1], **opts)
    seq(pyooc.conv_backward_bias, dy, out=outs[2], memory_limit=limit, backend=backend)
    return seq


def planned_bytes(pyooc, kind, geom, limit, backend):
    """Bytes over the link (H2D + D2H) the plan_* twins promise: the fused call and the sequence."""
    g = dict(stride=geom.stride, padding=geom.padding, dilation=geom.dilation, memory_limit=limit, backend=backend)
    total = lambda *plans: sum(p.bytes_h2d + p.bytes_d2h for p in plans)  # noqa: E731
    if kind == "forward":
        k_shape = (1, geom.w_shape[0]) + (1,) * geom.spatial
        fused = pyooc.plan_conv_bias_activation_forward(geom.x_shape, geom.w_shape, **g)
        unfused = (pyooc.plan_conv_forward(geom.x_shape, geom.w_shape, **g),
                   pyooc.plan_add_tensor(k_shape, geom.y_shape, in_place=True, memory_limit=limit, backend=backend),
                   pyooc.plan_activation_forward(geom.y_shape, memory_limit=limit, backend=backend))
    else:
        fused = pyooc.plan_conv_backward_data_filter_bias(geom.x_shape, geom.y_shape, geom.w_shape, **g)
        unfused = (pyooc.plan_conv_backward_data(geom.y_shape, geom.w_shape, geom.x_shape, **g),
                   pyooc.plan_conv_backward_filter(geom.x_shape, geom.y_shape, geom.w_shape, **g),
                   pyooc.plan_conv_backward_bias(geom.y_shape, memory_limit=limit, backend=backend))
    return fused, total(fused), total(*unfused)


# --------------------------------------------------------------------------------------------
# references


class References:
    """The in-core outputs (torch on the GPU, or float64 numpy in a dry run), one per output name,
    and the relative error of host results against them."""

    def __init__(self, torch, refs):
        self.torch, self.refs = torch, refs

    def compare(self, outputs):
        worst, hows = 0.0, []
        for name, got in outputs.items():
            if self.torch is not None:
                err, how = rel_error_on_device(self.torch, got, self.refs[name])
            else:
                got = np.asarray(got)
                if not np.isfinite(got).all():
                    return float("nan"), f"{name}: non-finite output (unwritten or NaN)"
                err, how = float(np.linalg.norm(got - self.refs[name]) / np.linalg.norm(self.refs[name])), "float64"
            if not err <= worst:  # NaN wins
                worst = err
            hows.append(f"{name}: {how}")
        return worst, "; ".join(hows)


def numpy_references(kind, geom, x, w, b, dy):
    if kind == "forward":
        y = fwd.np_conv(x, w, geom.stride, geom.padding, geom.dilation)
        return {"y": np.maximum(y + b.astype(np.float64).reshape((1, -1) + (1,) * geom.spatial), 0.0)}
    axes = (0,) + tuple(range(2, dy.ndim))
    return {"dx": bwd.np_grad_input(geom.x_shape, w, dy, geom.stride, geom.padding, geom.dilation),
            "dw": bwd.np_grad_weight(x, geom.w_shape, dy, geom.stride, geom.padding, geom.dilation),
            "db": dy.astype(np.float64).sum(axis=axes)}


def incore_torch(torch, kind, geom, x, w, b, dy, repeats):
    """Median seconds of the whole computation in core (cuDNN benchmark mode, data on the GPU) and
    its outputs, kept on the GPU as the references."""
    g = geom
    torch.backends.cudnn.benchmark = True
    wd, xd = torch.from_numpy(w).cuda(), torch.from_numpy(x).cuda()
    holder = {}
    if kind == "forward":
        conv = torch_conv_fn(torch, g.spatial)
        bd = torch.from_numpy(b).cuda()

        def call():
            holder.clear()
            holder["y"] = torch.relu_(conv(xd, wd, bd, g.stride, g.padding, g.dilation, g.groups))
    else:
        grad_input, grad_weight = torch_grad_fns(torch, g.spatial)
        dyd = torch.from_numpy(dy).cuda()

        def call():
            holder.clear()
            holder["dx"] = grad_input(g.x_shape, wd, dyd, g.stride, g.padding, g.dilation, g.groups)
            holder["dw"] = grad_weight(xd, g.w_shape, dyd, g.stride, g.padding, g.dilation, g.groups)
            holder["db"] = dyd.sum(dim=(0,) + tuple(range(2, dyd.dim())))
    times = timed_runs(call, repeats, warmup=1, sync=torch.cuda.synchronize)
    return {"seconds": median(times), "times": times}, dict(holder)


# --------------------------------------------------------------------------------------------
# one case


def make_inputs(torch, kind, geom, seed):
    """Pageable numpy x, w (scaled by 1/sqrt(fan_in)), bias (forward) and dy (backward)."""
    x, w, dy = bwd.make_inputs(torch, "filter", geom, seed)  # x, w and dy, drawn on the GPU when there is one
    if kind == "forward":
        dy = None
    b = np.random.default_rng(seed + 1).standard_normal(geom.w_shape[0]).astype(np.float32)
    return x, w, b, dy


def outputs_for(kind, geom, alloc):
    if kind == "forward":
        return {"y": alloc(geom.y_shape)}
    return {"dx": alloc(geom.x_shape), "dw": alloc(geom.w_shape), "db": alloc((geom.w_shape[0],))}


def out_arg(kind, outs):
    """The fused and unfused calls' out=: y, or the tuple (dx, dw, db); None (new results) for None."""
    if outs is None:
        return None
    return outs["y"] if kind == "forward" else (outs["dx"], outs["dw"], outs["db"])


def named(kind, out):
    """A fused call's returned outputs by name, as outputs_for names them."""
    return {"y": out} if kind == "forward" else dict(zip(("dx", "dw", "db"), out))


def poison(outputs):
    for a in outputs.values():
        a.fill(np.nan)


def run_variant(result, variant, run, outputs, reference, ctx, pinned):
    """Warm-up (its output is checked), then the timed repeats; bytes counted against planned."""
    args = ctx["args"]
    poison(outputs)
    start = time.perf_counter()
    seq = run()
    warm = time.perf_counter() - start
    checked(result, variant, reference, outputs, TOLERANCE)
    # The cross-check: what the run moved against what its plans said (pinned: halo zeros not sent).
    if (seq.counted > seq.planned) if pinned else (seq.counted != seq.planned):
        raise CheckFailed(f"{variant}: counted {seq.counted} bytes over the link, the plans say {seq.planned}")
    times = timed_after_warmup(run, warm, args.repeats, args.max_run_seconds)
    result["times"][variant] = times
    result["bytes"][variant] = {"counted": seq.counted, "planned": seq.planned, "calls": seq.calls,
                                "link_GBps": seq.counted / median(times) / GB}
    return median(times)


def run_case(name, spec, ctx):
    pyooc, torch, args = ctx["pyooc"], ctx["torch"], ctx["args"]
    kind, description, x_shape, w_shape, padding, cap = spec
    geom = ConvGeometry.padded(x_shape, w_shape, padding)
    ws = geom.working_set_bytes + (geom.x_bytes if kind == "backward" else 0)  # backward: x, dy and dx
    limit = memory_limit_for(ws, cap)
    backend = ctx["backend"]
    fused_plan, fused_bytes, unfused_bytes = planned_bytes(pyooc, kind, geom, limit, backend)
    result = {
        "name": name, "kind": kind, "description": description, "x_shape": geom.x_shape, "w_shape": geom.w_shape,
        "y_shape": geom.y_shape, "stride": geom.stride, "padding": geom.padding, "dilation": geom.dilation,
        "dtype": "float32", "working_set_bytes": ws, "memory_limit": limit, "flops": geom.flops,
        "planned_bytes": {"fused": fused_bytes, "unfused": unfused_bytes, "fused_over_unfused":
                          ratio(fused_bytes, unfused_bytes)},
        "pyooc_plan": plan_dict(fused_plan), "incore_torch_s": None, "pyooc_all_pinned_s": None,
        "pyooc_fresh_s": None, "pyooc_chained_s": None,
        "times": {}, "errors": {}, "checked": {}, "bytes": {}, "seconds": {}, "pyooc_stats": {}, "failures": {},
        "skipped": {},
    }
    if torch is None:
        result["pinned_arrays"] = PINNED_STAND_IN
    log(f"[{name}] {description}: working set {fmt_bytes(ws)}, memory_limit {fmt_bytes(limit)}; planned "
        f"{fmt_bytes(fused_bytes)} fused vs {fmt_bytes(unfused_bytes)} unfused over the link")
    started = time.perf_counter()
    x, w, b, dy = make_inputs(torch, kind, geom, args.seed)
    result["setup_seconds"] = time.perf_counter() - started

    def attempt(peer, fn):
        return attempt_peer(result, ctx, peer, fn)

    if torch is not None:
        def incore():
            info, refs = incore_torch(torch, kind, geom, x, w, b, dy, args.repeats)
            ctx["references"] = References(torch, refs)
            result["times"]["incore"] = info["times"]
            return info["seconds"]
        result["incore_torch_s"] = attempt("incore", incore)
        reference = ctx.pop("references", None)
    else:
        result["skipped"]["incore"] = "no torch/GPU (dry run)"
        reference = References(None, numpy_references(kind, geom, x, w, b, dy))
    bytes_in = geom.x_bytes + geom.w_bytes + (geom.y_bytes if kind == "backward" else 0)
    bytes_out = geom.y_bytes if kind == "forward" else geom.x_bytes + geom.w_bytes
    result["roofline"] = roofline(bytes_in, bytes_out, ctx["bandwidth"], result["incore_torch_s"])
    result["roofline_s"] = result["roofline"]["seconds"]

    fused_fn, unfused_fn = (forward_fused, forward_unfused) if kind == "forward" else (backward_fused, backward_unfused)
    pinned_alloc = lambda shape: pinned_empty(pyooc, torch, shape)  # noqa: E731
    pinned_in = {}  # pinned copies of the inputs, made once for the pinned variants and all_pinned

    def pin(name, a):
        if name not in pinned_in:
            pinned_in[name] = None if a is None else pinned_copy(pyooc, torch, a)
        return pinned_in[name]

    last = {}
    for memory in ("pageable", "pinned"):
        if reference is None:
            for way in ("fused", "unfused"):
                result["skipped"][f"{way}_{memory}"] = "no in-core reference"
            continue
        if memory == "pinned":
            xs, dys, alloc = pin("x", x), pin("dy", dy), pinned_alloc
        else:
            xs, dys, alloc = x, dy, lambda shape: np.empty(shape, dtype=np.float32)
        for way, fn in (("fused", fused_fn), ("unfused", unfused_fn)):
            variant = f"{way}_{memory}"
            outs = outputs_for(kind, geom, alloc)
            data = (xs, w, b) if kind == "forward" else (xs, w, dys)

            def run(fn=fn, data=data, out=out_arg(kind, outs)):
                return fn(pyooc, geom, *data, out, limit, backend)
            result["seconds"][variant] = attempt(
                variant, lambda variant=variant, run=run, outs=outs: run_variant(
                    result, variant, run, outs, reference, ctx, memory == "pinned"))
            last[way] = outs
        if "fused" in last and "unfused" in last and result["seconds"].get(f"fused_{memory}") is not None \
                and result["seconds"].get(f"unfused_{memory}") is not None:
            agree, _ = References(None, {k: np.asarray(v, dtype=np.float64) for k, v in last["unfused"].items()}
                                  ).compare(last["fused"])
            result["errors"][f"fused_vs_unfused_{memory}"] = agree
            if not agree < TOLERANCE:
                result["failures"][f"fused_{memory}"] = f"fused and unfused outputs differ: {agree:.3g}"
        last.clear()

    # The fused call on the other arrays users pass (conv_forward's variants), against the same references.
    def fused(data, outs):
        return fused_fn(pyooc, geom, *data, out_arg(kind, outs), limit, backend)

    def fresh_variant(variant, data, ref):
        return run_fresh_variant(pyooc, result, variant, lambda: named(kind, fused(data, None).out),
                                 outputs_for(kind, geom, lambda shape: shape).values(),
                                 lambda outs: checked(result, variant, ref, outs, TOLERANCE), ctx["args"], backend,
                                 torch)

    def all_pinned():
        data = (pin("x", x), pin("w", w), pin("b", b) if kind == "forward" else pin("dy", dy))
        outs = outputs_for(kind, geom, pinned_alloc)
        return run_pyooc_variant(pyooc, result, "all_pinned", lambda: fused(data, outs), lambda: poison(outs),
                                 lambda: checked(result, "all_pinned", reference, outs, TOLERANCE), ctx["args"],
                                 backend)

    def chained():
        y0 = fused((x, w, b), None).out  # the previous call's result
        chain_ref = References(torch, incore_torch(torch, kind, geom, y0, w, b, None, 1)[1]) if torch is not None \
            else References(None, numpy_references(kind, geom, y0, w, b, None))
        return fresh_variant("chained", (y0, w, b), chain_ref)

    data = (x, w, b if kind == "forward" else dy)
    variants = {"all_pinned": all_pinned, "fresh": lambda: fresh_variant("fresh", data, reference), "chained": chained}
    if kind == "backward":
        result["skipped"]["chained"] = NO_GRADIENT_CHAIN
    elif geom.y_shape != geom.x_shape:
        result["skipped"]["chained"] = shape_breaks_chain("y", "x")
    for variant, fn in variants.items():
        if reference is None:
            result["skipped"][variant] = "no in-core reference"
        elif variant not in result["skipped"]:
            result[f"pyooc_{variant}_s"] = attempt(variant, fn)
    summarize(result)
    result["case_seconds"] = time.perf_counter() - started
    return result


def summarize(r):
    s = r["seconds"]
    r["ratios"] = {
        "fused_over_unfused_pageable": ratio(s.get("fused_pageable"), s.get("unfused_pageable")),
        "fused_over_unfused_pinned": ratio(s.get("fused_pinned"), s.get("unfused_pinned")),
        "fused_pinned_efficiency": ratio(r["roofline"]["seconds"], s.get("fused_pinned")),
        "fused_pageable_efficiency": ratio(r["roofline"]["seconds"], s.get("fused_pageable")),
    }
    r["targets"] = {}
    add_targets(r, FORWARD_TARGETS if r["kind"] == "forward" else (), lower_is_better=True)
    summarize_variants(r)


# --------------------------------------------------------------------------------------------
# self-test (dry run) and report


def self_test(rng):
    """The byte accounting on tiny problems through pyooc's host backend: each way's counted bytes
    equal its plans', the fused ways move strictly less, and fused and unfused agree with float64
    numpy. Returns the number of (case, budget) pairs checked."""
    import pyooc
    checked = 0
    for kind, x_shape, w_shape in (("forward", (3, 4, 11, 9), (5, 4, 3, 3)), ("backward", (3, 4, 11, 9), (5, 4, 3, 3)),
                                   ("forward", (2, 3, 6, 7, 5), (4, 3, 3, 3, 3)),
                                   ("backward", (2, 3, 6, 7, 5), (4, 3, 3, 3, 3))):
        geom = ConvGeometry.padded(x_shape, w_shape, 1)
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = (rng.standard_normal(w_shape) / math.sqrt(math.prod(w_shape[1:]))).astype(np.float32)
        b = rng.standard_normal(w_shape[0]).astype(np.float32)
        dy = rng.standard_normal(geom.y_shape).astype(np.float32)
        refs = References(None, numpy_references(kind, geom, x, w, b, dy))
        fns = (forward_fused, forward_unfused) if kind == "forward" else (backward_fused, backward_unfused)
        for limit in (None, 8192, 16384):
            _, fused_bytes, unfused_bytes = planned_bytes(pyooc, kind, geom, limit, "host")
            moved = []
            for fn in fns:
                outs = outputs_for(kind, geom, lambda s: np.full(s, np.nan, dtype=np.float32))
                seq = fn(pyooc, geom, x, w, b if kind == "forward" else dy, out_arg(kind, outs), limit, "host")
                assert seq.counted == seq.planned, (kind, fn.__name__, seq.counted, seq.planned)
                err, how = refs.compare(outs)
                assert err < 1e-5, (kind, fn.__name__, limit, err, how)
                moved.append(seq.planned)
            assert moved == [fused_bytes, unfused_bytes], (moved, fused_bytes, unfused_bytes)
            assert fused_bytes < unfused_bytes
            checked += 1
    return checked


def markdown(report):
    bw = report["bandwidth"]
    lines = [f"# {NAME} benchmark", "",
             f"commit `{report['commit']}`, {report['date']}, {report['device']}" +
             ("" if report["mode"] == "full" else f", {report['mode']} mode (not the full sizes)"), "",
             f"Link ({'assumed, not measured' if bw.get('assumed') else 'measured in this run'}): pinned H2D "
             f"{bw['h2d']:.1f} GB/s, D2H {bw['d2h']:.1f} GB/s, both directions {bw['bidir']:.1f} GB/s.", "",
             "Bytes over the link (H2D + D2H) from the plans, and median seconds; fused / unfused < 1 is the "
             "saving:", ""]
    rows = []
    for c in report["cases"]:
        pb, s = c["planned_bytes"], c["seconds"]
        rl = c.get("roofline", {})
        rows.append([c["name"], fmt_bytes(c["working_set_bytes"]), fmt_bytes(c["memory_limit"]),
                     fmt_bytes(pb["fused"]), fmt_bytes(pb["unfused"]), f"{pb['fused_over_unfused']:.2f}",
                     f"{fmt_s(rl.get('seconds'))} ({rl.get('bound', '?')})", fmt_s(s.get("fused_pinned")),
                     fmt_s(s.get("unfused_pinned")), fmt_s(s.get("fused_pageable")),
                     fmt_s(s.get("unfused_pageable")), fmt_s(c["incore_torch_s"])])
    lines.append(markdown_table(["case", "working set", "memory_limit", "bytes fused", "bytes unfused",
                                 "bytes ratio", "fused roofline", "fused pinned", "unfused pinned",
                                 "fused pageable", "unfused pageable", "in-core torch"], rows))
    lines += ["", "Time ratios (fused / unfused), the fused call's array variants against its roofline, and targets:",
              ""]
    rows = []
    for c in report["cases"]:
        for key in ("fused_over_unfused_pinned", "fused_over_unfused_pageable"):
            value = c["ratios"][key]
            if key in c["targets"]:
                rows += target_rows(c, (key,))
            else:
                rows.append([c["name"], key.replace("_", " "), "-" if value is None else f"{value:.2f}", "(no target)"])
        rows += target_rows(c, [key for key, _, _ in VARIANT_TARGETS])
    lines.append(markdown_table(["case", "target", "value", "verdict"], rows))
    lines += variant_lines(report, VARIANT_COLUMNS)
    notes = []
    for c in report["cases"]:
        plan = c.get("pyooc_plan", {})
        errs = [e for e in c["errors"].values() if e is not None]
        counted = {v: b["counted"] for v, b in c["bytes"].items()}
        notes.append(f"- {c['name']}: {c['description']}; x {list(c['x_shape'])}, w {list(c['w_shape'])}; fused "
                     f"splits {plan.get('splits')}, {plan.get('num_chunks')} chunks; bytes counted {counted}; max "
                     f"rel. error {max(errs):.2e}" if errs else f"- {c['name']}: {c['description']}")
        for peer, why in c["failures"].items():
            notes.append(f"  - FAILED {peer}: {why}")
        for peer, why in c["skipped"].items():
            notes.append(f"  - skipped {peer}: {why}")
    lines += ["", *notes, ""]
    return "\n".join(lines)


def main(argv=None):
    return bench_main(argv, name=NAME, doc=__doc__, cases=CASES, peers=PEERS, run_case=run_case, markdown=markdown,
                      self_test=self_test, tolerance=TOLERANCE)


if __name__ == "__main__":
    sys.exit(main())
