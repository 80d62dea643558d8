"""The host-device link and the roofline it sets.

Every benchmark measures the link in the same run as its peers (pinned H2D, D2H, both at once;
pageable for context), so the ratios to the roofline hold even where absolute rates drift between
machines or runs. The roofline: max(bytes_in/H2D, bytes_out/D2H, (in+out)/both, in-core compute)."""

import os
import statistics
import threading
import time

import numpy as np

from _timing import median, timed_runs
from _torch_env import release_host_cache
from _units import GB, GiB

# Measured on the device machine 2026-11-29 (docs/ARCHITECTURE.md, "Machine figures"); used only
# where nothing can be measured (a --dry-run without a GPU), and then marked "assumed" in the results.
ASSUMED_BANDWIDTH = {"h2d": 54.0, "d2h": 55.0, "bidir": 88.0, "pageable_h2d": 5.5, "pageable_d2h": 11.8}


def roofline(bytes_in, bytes_out, bandwidth, compute_s=None):
    """The fastest an out-of-core op can be: each byte crosses the link once, H2D and D2H overlap
    (bounded by the both-directions rate), and nothing beats the in-core compute. bandwidth in GB/s."""
    terms = {
        "h2d_s": bytes_in / (bandwidth["h2d"] * GB),
        "d2h_s": bytes_out / (bandwidth["d2h"] * GB),
        "bidir_s": (bytes_in + bytes_out) / (bandwidth["bidir"] * GB),
        "compute_s": compute_s,
    }
    bound = max((k for k, v in terms.items() if v is not None), key=lambda k: terms[k])
    return {"seconds": terms[bound], "bound": bound[:-2], **terms}


def run_bandwidth(torch, pyooc):
    """The link rates (GB/s) a run's rooflines use: measured here, with pyooc's own measurement as a
    cross-check, when there is a GPU (torch given); else ASSUMED_BANDWIDTH, marked assumed. Always
    also the host's memcpy rate with every core ("host_copy"), the bound of pageable variants."""
    if torch is None:
        return dict(ASSUMED_BANDWIDTH, assumed=True, host_copy=measure_host_copy())
    bandwidth = measure_bandwidth(torch)
    bandwidth["host_copy"] = measure_host_copy()
    if hasattr(pyooc, "measure_link_bandwidth"):  # pyooc's own measurement, as a cross-check
        try:
            bandwidth["pyooc"] = {k: v / GB for k, v in pyooc.measure_link_bandwidth().items()}
        except Exception as exc:
            bandwidth["pyooc"] = f"failed: {exc}"
    return bandwidth


def measure_host_copy(nbytes=GiB // 4, repeats=3, threads=None):
    """Host memcpy bandwidth in GB/s with every core: `threads` workers each copying its slice of a
    pageable buffer into another (numpy releases the GIL), median of `repeats` after a warm-up. A
    pageable variant gathers and scatters every byte through host memory, so it cannot beat
    (bytes in + bytes out) / this rate."""
    threads = threads or os.cpu_count() or 1
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    bounds = [nbytes * i // threads for i in range(threads + 1)]

    def copy_all():
        def part(i):
            np.copyto(dst[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]])
        workers = [threading.Thread(target=part, args=(i,)) for i in range(threads)]
        start = time.perf_counter()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        return time.perf_counter() - start

    copy_all()  # warm-up: first touch of dst
    return nbytes / statistics.median(copy_all() for _ in range(repeats)) / GB


def pageable_bound(bytes_in, bytes_out, bandwidth, roofline_s):
    """A pageable variant's own bound: the larger of the link roofline and the host copy of every
    byte with all cores."""
    host = bandwidth.get("host_copy")
    return max(roofline_s, (bytes_in + bytes_out) / (host * GB)) if host and roofline_s else roofline_s


def measure_bandwidth(torch, nbytes=GiB, repeats=5, pageable_repeats=3):
    """Link bandwidth in GB/s (1e9), median of `repeats` after a warm-up: pinned H2D, D2H, both at
    once (two streams, total bytes over the time both take), and pageable H2D/D2H for context.
    Pinned copies are timed with CUDA events, pageable ones (synchronous) with the host clock."""
    dev_a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dev_b = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    result = _pinned_bandwidth(torch, dev_a, dev_b, repeats)
    release_host_cache(torch)  # the pinned buffers are gone with the helper's frame
    result.update(_pageable_bandwidth(torch, dev_a, dev_b, pageable_repeats))
    result["bytes_per_copy"] = nbytes
    return result


def _median_of(fn, n):
    """Median of n durations that fn measures itself with CUDA events (the copy alone, without the
    host's launch and synchronization latency that _timing.timed_runs includes), after a warm-up."""
    fn()  # warm-up
    return statistics.median(fn() for _ in range(n))


def _pinned_bandwidth(torch, dev_a, dev_b, repeats):
    nbytes = dev_a.numel()
    host_a = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host_b = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host_a.fill_(7)
    host_b.fill_(3)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731

    def one_way(dst, src):
        start, end = ev(), ev()
        with torch.cuda.stream(s1):
            start.record(s1)
            dst.copy_(src, non_blocking=True)
            end.record(s1)
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def both_ways():
        cur = torch.cuda.current_stream()
        start, end, e1, e2 = ev(), ev(), ev(), ev()
        start.record(cur)
        s1.wait_event(start)
        s2.wait_event(start)
        with torch.cuda.stream(s1):
            dev_a.copy_(host_a, non_blocking=True)
            e1.record(s1)
        with torch.cuda.stream(s2):
            host_b.copy_(dev_b, non_blocking=True)
            e2.record(s2)
        cur.wait_event(e1)
        cur.wait_event(e2)
        end.record(cur)
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    torch.cuda.synchronize()
    return {
        "h2d": nbytes / _median_of(lambda: one_way(dev_a, host_a), repeats) / GB,
        "d2h": nbytes / _median_of(lambda: one_way(host_b, dev_b), repeats) / GB,
        "bidir": 2 * nbytes / _median_of(both_ways, repeats) / GB,
    }


def _pageable_bandwidth(torch, dev_a, dev_b, repeats):
    nbytes = dev_a.numel()
    page = torch.empty(nbytes, dtype=torch.uint8)
    page.fill_(5)  # touch every page before timing

    def seconds(dst, src):  # a pageable copy is synchronous: the host clock times it
        return median(timed_runs(lambda: dst.copy_(src), repeats, warmup=1, sync=torch.cuda.synchronize))

    return {
        "pageable_h2d": nbytes / seconds(dev_a, page) / GB,
        "pageable_d2h": nbytes / seconds(page, dev_b) / GB,
    }
