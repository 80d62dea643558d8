"""Measuring one peer the same way for all of them: the device budget it gets (memory_limit_for),
pyooc's variants (the arrays users pass: pageable or pinned, out= or a fresh result, a chain) with
what pyooc reports about the run, and the torch peers sized to that budget by measurement (fit_peer)
before they are timed. Each output is poisoned before its warm-up run and checked (_check.py) after
it, before the timed repeats (_timing.py)."""

import os
import time

from _timing import median, timed_after_warmup
from _units import GB, MiB


def memory_limit_for(working_set, cap):
    """At most 1/8 of the working set, rounded down to MiB (KiB for tiny cases), at most cap."""
    eighth = working_set // 8
    unit = MiB if eighth >= 64 * MiB else 1024
    limit = eighth // unit * unit
    return min(limit, cap) if cap else limit


def plan_dict(plan):
    """A pyooc plan as JSON: the fields the reports read, and its description."""
    keys = ("backend", "splits", "tiles", "num_chunks", "loop_order", "buffers", "w_resident", "peak_device_bytes",
            "workspace_bytes", "memory_limit", "bytes_h2d", "bytes_d2h", "predicted_seconds", "passes")
    out = {k: getattr(plan, k, None) for k in keys}
    out["describe"] = str(plan)
    return out


def stats_dict(stats):
    """pyooc.last_stats() for the JSON, without its plan object (a case records its plan once, as
    pyooc_plan)."""
    return {k: v for k, v in (stats or {}).items() if k != "plan"}


def record_queue_profile(pyooc, result, variant, call, backend):
    """One more, untimed run with every queue operation timed on the device (pyooc's
    OOC_PROFILE_QUEUES): which of link-in, compute and link-out bounds this variant."""
    if backend == "host":
        return
    os.environ["OOC_PROFILE_QUEUES"] = "1"
    try:
        call()
    finally:
        del os.environ["OOC_PROFILE_QUEUES"]
    profile = pyooc.last_stats()
    result.setdefault("pyooc_queue_profile", {})[variant] = {
        k: profile.get(k) for k in ("seconds", "h2d_busy_seconds", "compute_busy_seconds", "d2h_busy_seconds")}


def run_pyooc_variant(pyooc, result, variant, call, poison, check, args, backend):
    """One pyooc variant (pageable or pinned arrays): poison() the outputs, a warm-up call whose
    output check() judges, the timed repeats, then what pyooc measured (last_stats, the link rate it
    reached, a queue profile). Returns the median seconds."""
    poison()
    start = time.perf_counter()
    call()  # warm-up: its output is the one checked
    warm = time.perf_counter() - start
    check()
    times = timed_after_warmup(call, warm, args.repeats, args.max_run_seconds)
    stats = pyooc.last_stats()
    result["times"][variant] = times
    result["pyooc_stats"][variant] = stats_dict(stats)
    moved = stats["bytes_h2d"] + stats["bytes_d2h"] if stats else None
    result["pyooc_stats"][variant]["link_GBps"] = moved / median(times) / GB if moved else None
    record_queue_profile(pyooc, result, variant, call, backend)
    return median(times)


def run_fresh_variant(pyooc, result, variant, call, shapes, check, args, backend, torch=None):
    """A pyooc variant whose call() returns new results (no out=: `y = op(x)`, as most callers write
    it; outputs of these shapes): the previous results are dropped before each call (their blocks go
    back to pyooc's pinned cache before the next are cut), the memory the warm-up's results are cut
    from is poisoned (poison_new_results), and check(results) judges them. Returns the median
    seconds, as run_pyooc_variant."""
    made = {}

    def call_fresh():
        made["out"] = None
        made["out"] = call()

    return run_pyooc_variant(pyooc, result, variant, call_fresh, lambda: poison_new_results(pyooc, shapes, torch),
                             lambda: check(made["out"]), args, backend)


def poison_new_results(pyooc, shapes, torch=None):
    """NaN into the memory the next call's new results are cut from: a fresh variant's poisoning, as
    out.fill(nan) is the others'. For each shape, results are taken from the allocator pyooc's calls
    use (pyooc.pinned_cache.new_result) until one is not a reused cache block (a new block, or a
    plain numpy array) or no block is left idle, so every block that could serve the shape is among
    them; all are filled with NaN (torch, where given, fills with every core) and given back. Without
    a GPU results are plain numpy arrays, and malloc hands the freed memory out again (as a rule)."""
    held = []
    for shape in shapes:
        while True:
            reused = pyooc.pinned_results()["reused"]
            held.append(pyooc.pinned_cache.new_result(tuple(shape)))
            after = pyooc.pinned_results()
            if after["reused"] == reused or after["idle_bytes"] == 0:
                break
    for a in held:
        if torch is not None:
            torch.from_numpy(a).fill_(float("nan"))
        else:
            a.fill(float("nan"))


# Why a case has no chained variant (conv_forward's: the input is a previous call's result).
NO_GRADIENT_CHAIN = "a gradient's output is not the next gradient's input"


def shape_breaks_chain(out_name, in_name):
    """Why an op whose output `out_name` cannot be its next call's `in_name` has no chained variant."""
    return f"{out_name}'s shape differs from {in_name}'s: no chain of this layer"


def run_torch_peer(torch, result, name, peer, limit, w_bytes, poison, check, repeats, args, warm_runs=1):
    """Fits a torch peer to the budget (fit_peer; its warm-up output is the one check() judges), then
    times it. Returns the median seconds."""
    result[name] = fit_peer(torch, peer, limit, w_bytes, poison, warm_runs=warm_runs)
    check()
    times = timed_after_warmup(peer.run, result[name]["warm_seconds"], repeats, args.max_run_seconds,
                               sync=torch.cuda.synchronize)
    result["times"][name] = times
    return median(times)


def fit_peer(torch, peer, limit, w_bytes, poison, attempts=4, warm_runs=1):
    """Sizes a torch peer's chunks to the device budget by measurement: plan with a workspace
    reserve, run warm_runs times (cuDNN picks/benchmarks its algorithms; 0 where there is nothing to
    pick), then once more with the peak reset and the output poisoned; if the peak (torch's
    allocator, relative to before the peer existed) is over the limit, grow the reserve by the
    excess and plan again. The last pass is the warm-up whose output the caller checks. Returns info
    with peak_device_bytes and whether it fit."""
    reserve = limit // 16
    info = {}
    for attempt in range(attempts):
        peer.release()  # the previous attempt's buffers must not hide in the baseline
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        peer.prepare(limit - w_bytes - reserve)
        for _ in range(warm_runs):
            peer.run()
        torch.cuda.synchronize()
        poison()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        peer.run()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() - base
        info = dict(peer.info, peak_device_bytes=peak, reserve_bytes=reserve, fit_attempts=attempt + 1,
                    within_limit=peak <= limit, warm_seconds=seconds)
        if peak <= limit:
            break
        reserve += peak - limit + limit // 64
        if reserve >= limit - w_bytes:
            break
    return info
