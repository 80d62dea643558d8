#!/usr/bin/env python3
"""The layers out of core (pooling, activation, softmax, add-tensor, batch norm, GEMM): pyooc
against the link roofline and torch, in one run.

One case per op family (bench/_layer_ops.py), working sets ~8 GB through a device budget of at most
1/8 of them (<= 1 GiB). These ops do little compute per byte, so they are link-bound; for each this
measures, on one GPU:
  - the link and the roofline max(bytes_in/H2D, bytes_out/D2H, (in+out)/both, in-core compute), with
    bytes_in / bytes_out the op's operands once (pyooc's signature: cuDNN's, e.g. y, dy and x for an
    activation gradient), except batch norm training and backward, which must read their inputs
    twice while they exceed the budget (statistics, then normalization): there the plan's bytes;
  - pyooc on the arrays users pass (bench/conv_forward.py's variants, `pyooc_<variant>_s`): pageable
    numpy arrays with out= (pageable), every array pinned (pinned: pyooc.pinned_empty; all_pinned is
    the same run under the other variants' name: this benchmark's pinned already pins the parameters), a
    fresh result from pageable inputs (fresh: no out=) and a chain (chained: the op on a previous
    call's result, where the output can be the next call's input; else skipped with the reason);
  - torch's in-core op with everything on the GPU (the roofline's compute term and the reference);
  - where slices of the leading dim are independent (element-wise, pooling / softmax / bias over N,
    linear over rows), a naive torch chunk loop and an expert one (pinned, three streams, double
    buffering; bench/_row_peers.py) held to pyooc's memory_limit; null elsewhere (batch norm, matmul).
Every output is poisoned with NaN (an in-place output: restored to its input) and checked against
the reference (relative error < 1e-4) before the peer is timed; a warm-up, then the median of
--repeats runs; FP32 only (TF32 off).

Writes OUT/layers.json and OUT/layers.md (conv_forward's schema; default OUT: bench/results) and
prints the table last. --quick: ~1 GB working sets; --dry-run: tiny cases on pyooc's host backend
against numpy float64 references, no GPU or torch (checks the peers' chunking, pyooc's numerics and
the report; pageable arrays stand in for the pinned ones). Exit 1 when a check failed or a peer
raised; the targets (pinned >= 0.8 of the roofline, and the variants': all pinned and chained >= 0.9,
fresh >= 0.6) are reported, and fail the run only with --strict."""

import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _arrays import PINNED_STAND_IN, pinned_empty  # noqa: E402
from _check import Reference, checked  # noqa: E402
from _cli import attempt_peer, bench_main  # noqa: E402
from _console import log  # noqa: E402
from _link import roofline  # noqa: E402
from _measure import memory_limit_for, plan_dict, run_fresh_variant, run_pyooc_variant, run_torch_peer  # noqa: E402
from _report import markdown_table, ratio, report_markdown, summarize, summarize_variants, variant_lines  # noqa: E402
from _timing import median, timed_runs  # noqa: E402
from _units import GiB, fmt_bytes  # noqa: E402
import _layer_ops as L  # noqa: E402
import _row_peers as R  # noqa: E402

NAME = "layers"
TOLERANCE = 1e-4
TARGETS = [("pinned_efficiency", 0.80, "pyooc pinned >= 0.80 of roofline")]
PEERS = ("incore", "pageable", "naive", "pinned", "expert", "all_pinned", "fresh", "chained")
# The variants table: (label, time key, the bound its fraction is of).
VARIANT_COLUMNS = [("all pinned", "pyooc_all_pinned_s", "roofline_s"), ("pinned", "pyooc_pinned_s", "roofline_s"),
                   ("pageable, out=", "pyooc_pageable_s", "roofline_s"),
                   ("fresh result", "pyooc_fresh_s", "roofline_s"), ("chained", "pyooc_chained_s", "roofline_s")]

VGG = "VGG-like activation 256x56x56"


def _cases(n, pool_n, mm, lin, cap):
    """The issue's cases with leading dims scaled by n (1: full size, ~8 GB each; 1/8: quick).
    name -> (description, op, cap on memory_limit)."""
    def lead(base):
        return max(2, int(base * n))
    return {
        "relu-fwd": (f"ReLU forward, out of place, {VGG}", L.Relu((lead(1344), 256, 56, 56)), cap),
        "relu-fwd-inplace": (f"ReLU forward in place (out is x), {VGG}", L.Relu((lead(2688), 256, 56, 56), True),
                             cap),
        "sigmoid-bwd": (f"sigmoid backward (y, dy, x -> dx), {VGG}", L.SigmoidBackward((lead(672), 256, 56, 56)),
                        cap),
        "maxpool-fwd": ("max-pool 2x2 stride 2 forward, VGG block-1 output 64x224x224",
                        L.MaxPool2((lead(pool_n), 64, 224, 224)), cap),
        "maxpool-bwd": ("max-pool 2x2 stride 2 backward (y, dy, x -> dx), 64x224x224",
                        L.MaxPool2Backward((lead(pool_n // 2), 64, 224, 224)), cap),
        "softmax-fwd": ("softmax over channels, segmentation logits 21x512x512",
                        L.SoftmaxChannel((lead(192), 21, 512, 512)), cap),
        "add-bias": (f"add_tensor: per-channel bias [1, 256, 1, 1] broadcast over a {VGG}",
                     L.AddBias((lead(1344), 256, 56, 56)), cap),
        "batchnorm-fwd": (f"batch norm training forward (y, saved mean / invstd), {VGG}",
                          L.BatchNormTraining((lead(1344), 256, 56, 56)), cap),
        "batchnorm-bwd": (f"batch norm backward (dx, dscale, dbias), {VGG}",
                          L.BatchNormBackward((lead(896), 256, 56, 56)), cap),
        "matmul": (f"matmul [{mm[0]}, {mm[1]}] @ [{mm[1]}, {mm[2]}] (each operand alone near or over the budget)",
                   L.Matmul(*mm), cap),
        "linear-fwd": (f"linear forward x [{lin[0]}, {lin[1]}] @ w.T [{lin[1]}, {lin[2]}] + b",
                       L.Linear(*lin), cap),
    }


CASES = {
    "full": _cases(1, 500, (36864, 8192, 36864), (262144, 4096, 4096), GiB),
    "quick": _cases(1 / 8, 500, (12288, 4096, 12288), (32768, 4096, 4096), None),
    "dry-run": {
        "relu-fwd": ("ReLU forward (tiny)", L.Relu((6, 8, 10, 10)), None),
        "relu-fwd-inplace": ("ReLU forward in place (tiny)", L.Relu((6, 8, 10, 10), True), None),
        "sigmoid-bwd": ("sigmoid backward (tiny)", L.SigmoidBackward((5, 8, 9, 7)), None),
        "maxpool-fwd": ("max-pool 2x2 forward (tiny)", L.MaxPool2((4, 8, 16, 20)), None),
        "maxpool-bwd": ("max-pool 2x2 backward (tiny)", L.MaxPool2Backward((3, 8, 16, 20)), None),
        "softmax-fwd": ("softmax over channels (tiny)", L.SoftmaxChannel((5, 7, 16, 18)), None),
        "add-bias": ("add_tensor, per-channel bias (tiny)", L.AddBias((6, 8, 15, 14)), None),
        "batchnorm-fwd": ("batch norm training forward (tiny)", L.BatchNormTraining((6, 5, 21, 18)), None),
        "batchnorm-bwd": ("batch norm backward (tiny)", L.BatchNormBackward((5, 4, 24, 20)), None),
        "matmul": ("matmul (tiny)", L.Matmul(96, 64, 80), None),
        "linear-fwd": ("linear forward (tiny)", L.Linear(120, 48, 40), None),
    },
}


# --------------------------------------------------------------------------------------------
# the torch peers' chunking, emulated with numpy (dry run)


def self_test_rows(rng):
    """For every dry-run op with a torch chunk loop, for budgets from all rows down to one: the
    slices tile the leading dim exactly once, evenly, each within the budget, and the op's float64
    chunk function applied per slice gives the whole-array result (the slices are independent);
    below one row, MemoryError. Returns the number of chunkings checked; raises AssertionError."""
    checked = 0
    for name, (_, op, _) in CASES["dry-run"].items():
        if op.rows is None:
            continue
        arrays = {n: a.astype(np.float64) for n, a in op.draw(L.NumpyDraw(rng)).items()}
        resident = [arrays[n] for n in op.resident]
        rows = [op.row_view(arrays[n]) for n in op.rows]
        whole = op.chunk_ref(*resident, *rows)
        total = whole.shape[0]
        per_row = 4 * (sum(math.prod(r.shape[1:]) for r in rows) + (0 if op.in_place else math.prod(whole.shape[1:])))
        for budget in (per_row * total * 2, per_row * total // 3, per_row * 2 - 1, per_row):
            chunks, info = R.plan_rows(total, per_row, budget)
            got = np.full(whole.shape, np.nan)
            covered = np.zeros(total, dtype=np.int64)
            for r0, r1 in chunks:
                assert 0 < (r1 - r0) * per_row <= budget, (name, budget, r0, r1)
                got[r0:r1] = op.chunk_ref(*resident, *[r[r0:r1] for r in rows])
                covered[r0:r1] += 1
            sizes = [r1 - r0 for r0, r1 in chunks]
            assert (covered == 1).all() and max(sizes) - min(sizes) <= 1, (name, info)
            assert np.allclose(got, whole, rtol=1e-12, atol=1e-12), (name, info)
            checked += 1
        try:
            R.plan_rows(total, per_row, per_row - 1)
            raise AssertionError(f"{name}: a budget below one row was accepted")
        except MemoryError:
            pass
    return checked


# --------------------------------------------------------------------------------------------
# one case


class OutputsReference:
    """The reference outputs (Reference each); the error of a set of outputs is the worst one."""

    def __init__(self, refs):
        self.refs = refs

    @classmethod
    def of(cls, torch, outputs):
        """From the reference outputs by name: torch tensors on the GPU, or float64 numpy (torch None)."""
        return cls({n: Reference(torch, r) for n, r in outputs.items()})

    def compare(self, outs):
        worst, how = 0.0, []
        for name, ref in self.refs.items():
            err, why = ref.compare(outs[name])
            if not err < math.inf:
                return err, f"{name}: {why}"
            worst = max(worst, err)
            how.append(name)
        return worst, f"all elements of {', '.join(how)}"


class Operands:
    """One case's host arrays: the inputs (pageable, and pinned on demand: pageable stand-ins in a
    dry run) and outputs for each, with the output's poisoning (NaN, or for an in-place op the
    pristine input restored)."""

    def __init__(self, op, torch, host, dev):
        self.op, self.torch, self.dev = op, torch, dev
        self.pristine = None if dev is not None or not op.in_place else host[next(iter(op.inputs))].copy()
        self.pageable = (host, self._outputs(host, lambda shape: np.empty(shape, dtype=np.float32)))
        self._pinned = None

    def _outputs(self, inputs, alloc):
        outs = {n: alloc(s) for n, s in self.op.outputs.items()}
        if self.op.in_place:
            outs[self.op.main] = inputs[next(iter(self.op.inputs))]
        return outs

    def pinned(self, pyooc):
        """Pinned copies of the inputs (from the device: at link speed) and pinned outputs, shared by
        pyooc's pinned and all_pinned variants and the expert loop."""
        if self._pinned is None:
            alloc = lambda shape: pinned_empty(pyooc, self.torch, shape)  # noqa: E731
            inputs = {}
            for n, s in self.op.inputs.items():
                inputs[n] = alloc(s)
                if self.torch is None:
                    np.copyto(inputs[n], self.pageable[0][n])
                else:
                    self.torch.from_numpy(inputs[n]).copy_(self.dev[n])
            self._pinned = (inputs, self._outputs(inputs, alloc))
        return self._pinned

    def poison(self, outs):
        """NaN into every output (numpy arrays or torch host tensors); an in-place op's output gets
        its pristine input back instead."""
        for n, a in outs.items():
            restore = self.op.in_place and n == self.op.main
            if self.torch is None:
                if restore:
                    np.copyto(a, self.pristine)
                else:
                    a.fill(np.nan)
                continue
            t = a if hasattr(a, "data_ptr") else self.torch.from_numpy(a)
            if restore:
                t.copy_(self.dev[next(iter(self.op.inputs))])
            else:
                t.fill_(float("nan"))  # all cores; numpy's fill uses one
        if self.torch is not None:
            self.torch.cuda.synchronize()


def draw_inputs(op, torch, seed):
    """(host inputs, device inputs or None): drawn on the GPU when there is one and copied to fresh
    pageable numpy arrays (a numpy draw of 8 GB takes too long), else drawn with numpy."""
    if torch is None:
        return op.draw(L.NumpyDraw(np.random.default_rng(seed))), None
    dev = {n: t.contiguous() for n, t in op.draw(L.TorchDraw(torch, seed)).items()}
    host = {}
    for n, t in dev.items():
        host[n] = np.empty(op.inputs[n], dtype=np.float32)
        torch.from_numpy(host[n]).copy_(t)
    return host, dev


def torch_view(torch, a):
    """A torch tensor on a host array; a pinned copy where torch does not see it as pinned (pyooc's
    pinned memory comes from another CUDA runtime in the process)."""
    t = torch.from_numpy(a)
    return t if t.is_pinned() else t.pin_memory()


def run_case(name, spec, ctx):
    pyooc, torch, args = ctx["pyooc"], ctx["torch"], ctx["args"]
    description, op, cap = spec
    ws = op.working_set_bytes
    limit = memory_limit_for(ws, cap)
    backend = ctx["backend"]
    plan = op.plan(pyooc, memory_limit=limit, backend=backend)
    bytes_in, bytes_out = (plan.bytes_h2d, plan.bytes_d2h) if op.two_pass else (op.bytes_in, op.bytes_out)
    result = {
        "name": name, "operation": type(op).__name__, "description": description, "inputs": op.inputs,
        "outputs": op.outputs, "in_place": op.in_place, "dtype": "float32", "bytes_in": bytes_in,
        "bytes_out": bytes_out, "roofline_bytes": "plan (two passes)" if op.two_pass else "operands once",
        "operand_bytes_in": op.bytes_in, "operand_bytes_out": op.bytes_out, "working_set_bytes": ws,
        "memory_limit": limit, "working_set_over_limit": ws / limit, "flops": op.flops,
        "roofline_s": None, "pyooc_pinned_s": None, "pyooc_pageable_s": None, "incore_torch_s": None,
        "naive_torch_s": None, "expert_torch_s": None, "pyooc_all_pinned_s": None, "pyooc_fresh_s": None,
        "pyooc_chained_s": None,
        "times": {}, "errors": {}, "checked": {}, "pyooc_stats": {}, "failures": {}, "skipped": {},
        "pyooc_plan": plan_dict(plan),
    }
    if torch is None:
        result["pinned_arrays"] = PINNED_STAND_IN
    log(f"[{name}] {description}: working set {fmt_bytes(ws)}, memory_limit {fmt_bytes(limit)}; "
        f"pyooc plan: splits {plan.splits}, {plan.num_chunks} chunks")
    started = time.perf_counter()
    host, dev = draw_inputs(op, torch, args.seed)
    arrays = Operands(op, torch, host, dev)
    result["setup_seconds"] = time.perf_counter() - started

    def attempt(peer, fn):
        return attempt_peer(result, ctx, peer, fn)

    def check(peer, outs):
        return lambda: checked(result, peer, reference, outs, TOLERANCE)

    # In-core torch: the roofline's compute term; its output (computed untimed when the in-core
    # peer is not run) is the reference.
    if torch is not None:
        holder, call_op = {}, op.incore(torch, dev)

        def call():
            holder.clear()
            holder.update(call_op())

        def incore():
            times = timed_runs(call, args.repeats, warmup=1, sync=torch.cuda.synchronize)
            result["times"]["incore"] = times
            return median(times)
        result["incore_torch_s"] = attempt("incore", incore)
        try:
            if not holder:
                call()
            reference = OutputsReference.of(torch, holder)
        except Exception as exc:  # without a reference nothing can be checked: report, keep the case
            result["failures"]["reference"] = f"{type(exc).__name__}: {exc}"
            reference = None
    else:
        result["skipped"]["incore"] = "no torch/GPU (dry run)"
        reference = OutputsReference.of(None, op.reference(host))
    rl = roofline(bytes_in, bytes_out, ctx["bandwidth"], result["incore_torch_s"])
    result["roofline"] = rl
    result["roofline_s"] = rl["seconds"]
    if reference is None:
        for peer in (p for p in PEERS if p != "incore"):
            result["skipped"][peer] = "no in-core reference"
        return finish(result, started)
    opts = dict(memory_limit=limit, backend=backend)

    def pyooc_variant(variant, ins, outs):
        return run_pyooc_variant(pyooc, result, variant, lambda: op.pyooc(pyooc, ins, outs, **opts),
                                 lambda: arrays.poison(outs), check(variant, outs), args, backend)

    def fresh_variant(variant, ins, ref):
        """The op with no out= on inputs ins: a new result each call, checked against ref."""
        return run_fresh_variant(pyooc, result, variant, lambda: op.pyooc(pyooc, ins, None, **opts),
                                 op.outputs.values(), lambda outs: checked(result, variant, ref, outs, TOLERANCE),
                                 args, backend, torch)

    def torch_loop(peer_name, peer_cls, ins, outs, repeats, **kwargs):
        peer = peer_cls(torch, lambda *a: op.chunk_op(torch, *a), [op.row_view(ins[n]) for n in op.rows],
                        [ins[n] for n in op.resident], op.row_view(outs[op.main]), op.in_place, op.unit,
                        scratch_row_bytes=op.scratch_row_bytes(), **kwargs)
        resident_bytes = sum(4 * math.prod(op.inputs[n]) for n in op.resident)
        seconds = run_torch_peer(torch, result, peer_name, peer, limit, resident_bytes, lambda: arrays.poison(outs),
                                 check(peer_name, outs), repeats, args, warm_runs=0)
        peer.release()
        return seconds

    ins, outs = arrays.pageable
    result["pyooc_pageable_s"] = attempt("pageable", lambda: pyooc_variant("pageable", ins, outs))

    loops = torch is not None and op.rows is not None
    if loops:
        def naive():
            t = {n: torch.from_numpy(a) for n, a in ins.items()}
            return torch_loop("naive", R.NaiveTorchRows, t, {op.main: torch.from_numpy(outs[op.main])},
                              args.naive_repeats)
        result["naive_torch_s"] = attempt("naive", naive)

    result["pyooc_pinned_s"] = attempt("pinned", lambda: pyooc_variant("pinned", *arrays.pinned(pyooc)))
    if result["pyooc_pinned_s"] is not None:
        # pinned already pins every array (inputs, parameters and outputs): its run is the all-pinned
        # one too, recorded under both names rather than timed twice.
        result["pyooc_all_pinned_s"] = result["pyooc_pinned_s"]
        for record in (result["times"], result["pyooc_stats"]):
            if "pinned" in record:
                record["all_pinned"] = record["pinned"]
    else:
        result["pyooc_all_pinned_s"] = attempt("all_pinned",
                                               lambda: pyooc_variant("all_pinned", *arrays.pinned(pyooc)))

    if op.in_place:
        result["skipped"]["fresh"] = "in place (out is x): no new result"
    else:
        result["pyooc_fresh_s"] = attempt("fresh", lambda: fresh_variant("fresh", ins, reference))

    chain, why = op.chain_input()
    if chain is None:
        result["skipped"]["chained"] = why
    else:
        def chained():
            y0 = op.pyooc(pyooc, ins, None, **opts)[op.main]  # the previous call's result
            chain_ins = dict(ins, **{chain: y0})
            chain_ref = OutputsReference.of(torch, op.incore(torch, dict(dev, **{chain: torch.from_numpy(y0).cuda()}))()
                                            if torch is not None else op.reference(chain_ins))
            return fresh_variant("chained", chain_ins, chain_ref)
        result["pyooc_chained_s"] = attempt("chained", chained)

    if loops:
        def expert():
            pins, pouts = arrays.pinned(pyooc)
            t = {n: torch_view(torch, a) for n, a in pins.items()}
            out = t[next(iter(op.inputs))] if op.in_place else torch_view(torch, pouts[op.main])
            result["expert_host_memory"] = ("pyooc.pinned_empty's, shared with pyooc pinned"
                                            if out.data_ptr() == pouts[op.main].ctypes.data else
                                            "torch pinned copies (torch did not see pyooc's memory as pinned)")
            return torch_loop("expert", R.ExpertTorchRows, t, {op.main: out}, args.repeats, copier=ctx["copier"])
        result["expert_torch_s"] = attempt("expert", expert)
    why = ("no torch/GPU (dry run)" if torch is None else
           "no natural torch chunk loop (batch statistics / a GEMM's reduction span whole operands)")
    for peer in ("naive", "expert"):
        if not loops:
            result["skipped"][peer] = why
    return finish(result, started)


def finish(result, started):
    summarize(result, TARGETS)
    summarize_variants(result)
    stats = result["pyooc_stats"].get("pinned") or result["pyooc_stats"].get("pageable") or {}
    moved = (stats.get("bytes_h2d") or 0) + (stats.get("bytes_d2h") or 0)
    result["pyooc_bytes_over_roofline_bytes"] = ratio(moved, result["bytes_in"] + result["bytes_out"]) if stats \
        else None
    result["case_seconds"] = time.perf_counter() - started
    return result


# --------------------------------------------------------------------------------------------
# report


def _ratio(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)


def markdown(report):
    """conv_forward's report (report_markdown), plus the ratios of every case and what pyooc moved."""
    rows = [[c["name"], _ratio(c["ratios"]["pinned_efficiency"]), _ratio(c["ratios"]["pageable_efficiency"]),
             _ratio(c["ratios"]["expert_efficiency"]), _ratio(c["ratios"]["speedup_vs_naive"], "{:.1f}x"),
             _ratio(c["ratios"]["ratio_vs_expert"]), _ratio(c["pyooc_bytes_over_roofline_bytes"], "{:.3f}")]
            for c in report["cases"]]
    sections = ["", "Ratios (roofline / time, so 1.00 is the roofline; pageable vs naive torch; expert torch time / "
                "pyooc pinned time; bytes pyooc moved / the roofline's bytes):", "",
                markdown_table(["case", "pinned", "pageable", "expert torch", "pageable vs naive",
                                "pinned vs expert", "pyooc bytes / roofline bytes"], rows)]

    def detail(c):
        shapes = "; ".join(f"{n} {list(s)}" for n, s in list(c["inputs"].items()) + list(c["outputs"].items()))
        return (f"{shapes}{' (in place)' if c['in_place'] else ''}; roofline bytes: {c['roofline_bytes']}, "
                f"{fmt_bytes(c['bytes_in'])} in, {fmt_bytes(c['bytes_out'])} out")
    return report_markdown(report, NAME, detail, sections=sections + variant_lines(report, VARIANT_COLUMNS),
                           roofline_note="; in/out: the op's operands once, batch norm: the plan's two passes")


# --------------------------------------------------------------------------------------------


def main(argv=None):
    return bench_main(argv, name=NAME, doc=__doc__, cases=CASES, peers=PEERS, run_case=run_case, markdown=markdown,
                      self_test=self_test_rows, tolerance=TOLERANCE)


if __name__ == "__main__":
    sys.exit(main())
