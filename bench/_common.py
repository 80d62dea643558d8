"""Shared helpers for pyooc's benchmarks (bench/*.py).

- run metadata (commit, date, device), timing (median of repeats after a warm-up), progress bars;
- link bandwidth measured in the same run (pinned H2D, D2H, both at once; pageable too);
- the roofline: max(bytes_in/H2D, bytes_out/D2H, (in+out)/both, in-core compute);
- conv chunk geometry (N chunks, or slabs of the first spatial dim with halos) that the torch
  peers use, and a region copier that moves strided slabs with one cudaMemcpy2DAsync each;
- the torch peers: a naive chunk loop and an expert pipeline (pinned memory, three streams,
  events, double buffering) under the same device-memory budget as pyooc, for the forward and
  (NaiveTorchGrad, ExpertTorchGrad) for the input and weight gradients; fit_peer sizes any
  peer (these, bench/_row_peers.py's) to the budget by measuring its peak;
- one peer's run: the budget (memory_limit_for), the correctness check against a reference,
  pyooc's variants and the torch peers timed the same way (run_pyooc_variant, run_torch_peer),
  the ratios and targets (summarize);
- the command line and main loop every benchmark shares (bench_main: cases skipped once
  --time-budget is spent), JSON + markdown results (report_markdown).

torch is imported only by the functions that need it, so the geometry and report code runs (and is
self-tested by `conv_forward.py --dry-run`) on machines without torch or a GPU."""

import ctypes
import datetime
import glob
import itertools
import json
import math
import os
import site
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

GB = 1e9
MiB = 1 << 20
GiB = 1 << 30

# Measured on the device machine 2026-11-29 (DESIGN.md §4); used only where nothing can be measured
# (a --dry-run without a GPU), and then marked "assumed" in the results.
ASSUMED_BANDWIDTH = {"h2d": 54.0, "d2h": 55.0, "bidir": 88.0, "pageable_h2d": 5.5, "pageable_d2h": 11.8}

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------------------------
# run metadata, timing, progress


def git_commit(root=REPO_ROOT):
    """$OOC_COMMIT when set (gpu-check runs an export of a commit, inside a copy whose .git may be
    stale), else HEAD of the checkout, else "unknown"."""
    if os.environ.get("OOC_COMMIT"):
        return os.environ["OOC_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def progress(iterable=None, **kwargs):
    """tqdm on stderr (stdout stays for the results table); a plain iterator without tqdm."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a pyooc dependency
        return iterable
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)


def log(message):
    print(message, file=sys.stderr, flush=True)


def timed_runs(fn, repeats, warmup=1, sync=None):
    """Wall-clock seconds of `repeats` calls of fn after `warmup` untimed ones; sync() (e.g.
    torch.cuda.synchronize) runs before and after each call so device work is inside the timing."""
    sync = sync or (lambda: None)
    times = []
    for i in range(warmup + repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def fmt_bytes(n):
    if n is None:
        return "-"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def fmt_s(s):
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"


# --------------------------------------------------------------------------------------------
# roofline


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


# --------------------------------------------------------------------------------------------
# conv geometry for the torch peers: chunks along N, else slabs of the first spatial dim


def conv_out_len(length, k, s, p, d):
    return (length + 2 * p - d * (k - 1) - 1) // s + 1


@dataclass(frozen=True)
class ConvGeometry:
    """Forward conv x[N, C, *L] * w[K, C/groups, *k] -> y[N, K, *Lo] (torch semantics)."""
    x_shape: tuple
    w_shape: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    groups: int = 1
    itemsize: int = 4

    @classmethod
    def padded(cls, x_shape, w_shape, padding):
        """Unit stride and dilation, `padding` along every spatial dim (the benchmarks' cases)."""
        sp = len(x_shape) - 2
        return cls(tuple(x_shape), tuple(w_shape), (1,) * sp, (padding,) * sp, (1,) * sp)

    @property
    def spatial(self):
        return len(self.x_shape) - 2

    @property
    def y_shape(self):
        lo = tuple(conv_out_len(L, k, s, p, d) for L, k, s, p, d in
                   zip(self.x_shape[2:], self.w_shape[2:], self.stride, self.padding, self.dilation))
        return (self.x_shape[0], self.w_shape[0]) + lo

    def nbytes(self, shape):
        return math.prod(shape) * self.itemsize

    @property
    def x_bytes(self):
        return self.nbytes(self.x_shape)

    @property
    def w_bytes(self):
        return self.nbytes(self.w_shape)

    @property
    def y_bytes(self):
        return self.nbytes(self.y_shape)

    @property
    def working_set_bytes(self):
        return self.x_bytes + self.w_bytes + self.y_bytes

    @property
    def flops(self):
        return 2 * math.prod(self.y_shape) * math.prod(self.w_shape[1:])

    def input_rows(self, o0, o1):
        """Input rows [lo, hi) of the first spatial dim that output rows [o0, o1) read; may leave
        [0, L) (those rows are padding zeros)."""
        k, s, p, d = self.w_shape[2], self.stride[0], self.padding[0], self.dilation[0]
        return o0 * s - p, (o1 - 1) * s - p + (k - 1) * d + 1


@dataclass(frozen=True)
class SlabChunk:
    """Samples [n0, n1) and output rows [o0, o1) of the first spatial dim. split=False: the whole
    dim, and the conv pads it itself; split=True: input rows [lo, hi) with explicit zero rows where
    they leave the tensor, and the conv pads only the other dims."""
    n0: int
    n1: int
    o0: int
    o1: int
    lo: int
    hi: int
    split: bool
    length: int  # input extent of the first spatial dim

    @property
    def clip_lo(self):
        return max(self.lo, 0)

    @property
    def clip_hi(self):
        return min(self.hi, self.length)

    @property
    def pad_lo(self):
        return self.clip_lo - self.lo

    @property
    def pad_hi(self):
        return self.hi - self.clip_hi

    @property
    def in_rows(self):
        return self.hi - self.lo


def even_size(total, most):
    """The size of the fewest pieces of at most `most` that cover `total`, made as even as possible
    (the last piece is at most one smaller)."""
    count = -(-total // min(most, total))
    return -(-total // count)


def plan_chunks(geom, data_budget, x_copies, y_copies):
    """Chunks whose device buffers (x_copies input slabs + y_copies outputs alive at once) fit
    data_budget bytes: whole samples when one fits, else slabs of the first spatial dim (one sample
    each) with halos. Even sizes (the edge chunk is at most one row/sample smaller). Returns
    (chunks, info); raises MemoryError when not even one output row fits."""
    N, C = geom.x_shape[:2]
    K = geom.w_shape[0]
    L = geom.x_shape[2]
    Lo = geom.y_shape[2]
    inner_in = math.prod(geom.x_shape[3:])
    inner_out = math.prod(geom.y_shape[3:])
    b = geom.itemsize
    per_sample = b * (x_copies * C * L * inner_in + y_copies * K * Lo * inner_out)
    nb = data_budget // per_sample if data_budget > 0 else 0
    if nb >= 1:
        nb = even_size(N, nb)
        chunks = [SlabChunk(n0, min(n0 + nb, N), 0, Lo, -geom.padding[0], -geom.padding[0] + L, False, L)
                  for n0 in range(0, N, nb)]
        return chunks, {"mode": "n", "samples_per_chunk": nb, "chunks": len(chunks)}
    # rows_in = (rows - 1) * s + (k - 1) * d + 1, so bytes are affine in rows.
    k, s, d = geom.w_shape[2], geom.stride[0], geom.dilation[0]
    fixed = b * x_copies * C * inner_in * ((k - 1) * d + 1 - s)
    per_row = b * (x_copies * C * inner_in * s + y_copies * K * inner_out)
    rows = (data_budget - fixed) // per_row if data_budget > fixed else 0
    if rows < 1:
        raise MemoryError(f"one output row of the first spatial dim needs {fmt_bytes(fixed + per_row)}, "
                          f"the budget is {fmt_bytes(data_budget)} (a second spatial split would be needed)")
    rows = even_size(Lo, rows)
    count = -(-Lo // rows)
    chunks = []
    for n in range(N):
        for o0 in range(0, Lo, rows):
            o1 = min(o0 + rows, Lo)
            lo, hi = geom.input_rows(o0, o1)
            chunks.append(SlabChunk(n, n + 1, o0, o1, lo, hi, True, L))
    return chunks, {"mode": "slab", "rows_per_chunk": rows, "slabs_per_sample": count, "chunks": len(chunks)}


# Geometries (x shape, w shape, stride, padding, dilation) the benchmarks' --dry-run self-tests
# emulate their torch peers' chunking on: N chunks and halo slabs, strides, dilations, uneven edges.
SELF_TEST_GEOMETRIES = [
    ((5, 3, 9, 7), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 2, 11, 6, 5), (3, 2, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ((2, 3, 13, 8), (2, 3, 3, 3), (2, 1), (2, 0), (1, 2)),
    ((1, 2, 17, 5, 4), (2, 2, 5, 1, 3), (2, 1, 1), (2, 0, 1), (2, 1, 1)),
    ((3, 4, 10), (5, 4, 4), (1,), (0,), (3,)),
]


def self_test_budgets(per_sample):
    """Data budgets around one sample's bytes: whole samples, then ever thinner slabs."""
    return (per_sample * 3, per_sample - 1, per_sample // 3, per_sample // 5)


def chunk_conv_padding(geom, chunk):
    """The padding the conv applies itself for this chunk (none along a split dim)."""
    return ((0,) if chunk.split else (geom.padding[0],)) + tuple(geom.padding[1:])


# --------------------------------------------------------------------------------------------
# strided region copies


def copy_segments(shape, dst_strides, src_strides, itemsize):
    """Byte-level 2D copies that move a region of `shape` between two strided layouts (strides in
    elements): the longest suffix of dims contiguous in both is one row; the dim before it is the
    height (a pitch per side); any dims further out are enumerated. Returns a list of
    (dst_offset, src_offset, width, height, dst_pitch, src_pitch), all in bytes."""
    dims = [(n, ds, ss) for n, ds, ss in zip(shape, dst_strides, src_strides) if n != 1]
    if any(n == 0 for n in shape):
        return []
    row = 1
    cut = len(dims)
    while cut > 0 and dims[cut - 1][1] == row and dims[cut - 1][2] == row:
        row *= dims[cut - 1][0]
        cut -= 1
    width = row * itemsize
    if cut == 0:
        return [(0, 0, width, 1, width, width)]
    height, dpitch, spitch = dims[cut - 1]
    outer = dims[:cut - 1]
    segments = []
    for index in itertools.product(*(range(n) for n, _, _ in outer)):
        doff = sum(i * ds for i, (_, ds, _) in zip(index, outer)) * itemsize
        soff = sum(i * ss for i, (_, _, ss) in zip(index, outer)) * itemsize
        segments.append((doff, soff, width, height, dpitch * itemsize, spitch * itemsize))
    return segments


def _find_cudart():
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    paths = []
    try:
        import torch
        paths += glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcudart*.so*"))
    except ImportError:
        pass
    for base in site.getsitepackages() + [site.getusersitepackages()]:
        paths += glob.glob(os.path.join(base, "nvidia", "cu13", "lib", "libcudart.so*"))
        paths += glob.glob(os.path.join(base, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
    for name in names + paths:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class RegionCopier:
    """Async copies between equally shaped tensors whose layouts may be strided (a slab of a host
    tensor, a halo-padded device buffer). torch's own copy_ stages a non-contiguous host side through
    a pageable temporary, which would throw the pinned bandwidth away, so this issues one
    cudaMemcpy2DAsync per segment (copy_segments) on the given stream, through the CUDA runtime torch
    has loaded. Falls back to one copy_ per contiguous row when that runtime cannot be used (method
    says which)."""

    def __init__(self, torch):
        self.torch = torch
        self.method = "copy_"
        torch.cuda.init()
        lib = _find_cudart()
        if lib is None:
            return
        try:
            lib.cudaMemcpy2DAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                              ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
            lib.cudaMemcpy2DAsync.restype = ctypes.c_int
            lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                            ctypes.c_void_p]
            lib.cudaMemcpyAsync.restype = ctypes.c_int
            lib.cudaGetErrorString.argtypes = [ctypes.c_int]
            lib.cudaGetErrorString.restype = ctypes.c_char_p
        except AttributeError:
            return
        self._lib = lib
        self.method = "cudaMemcpy2DAsync"
        try:
            self._self_test()
        except Exception as exc:  # any failure: use torch's copies, slower but right
            log(f"RegionCopier: cudaMemcpy2DAsync unusable ({exc}); falling back to per-row copy_")
            self.method = "copy_"

    def _self_test(self):
        torch = self.torch
        host = torch.arange(2 * 5 * 7 * 3, dtype=torch.float32).reshape(2, 5, 7, 3).pin_memory()
        dev = torch.full((2, 5, 4, 3), -1.0, device="cuda")
        back = torch.full((2, 5, 4, 3), -2.0).pin_memory()
        stream = torch.cuda.Stream()
        torch.cuda.synchronize()  # the fills above ran on the default stream
        with torch.cuda.stream(stream):
            self.copy(dev[:, :, 1:3], host[:, :, 2:4], stream)
            self.copy(back[:, :, 1:3], dev[:, :, 1:3], stream)
        stream.synchronize()
        if not torch.equal(back[:, :, 1:3], host[:, :, 2:4]) or not bool((back[:, :, 0] == -2).all()):
            raise RuntimeError("self-test copy came back wrong")

    def _check(self, status):
        if status != 0:
            raise RuntimeError(f"CUDA error {status}: {self._lib.cudaGetErrorString(status).decode()}")

    def copy(self, dst, src, stream):
        """dst <- src (same shape and dtype; one side host, the other device, or both device),
        enqueued on `stream`. The caller keeps both alive until the stream has passed this point."""
        if tuple(dst.shape) != tuple(src.shape):
            raise ValueError(f"shape mismatch {tuple(dst.shape)} vs {tuple(src.shape)}")
        itemsize = dst.element_size()
        segments = copy_segments(tuple(dst.shape), dst.stride(), src.stride(), itemsize)
        if self.method == "cudaMemcpy2DAsync":
            handle = ctypes.c_void_p(stream.cuda_stream)
            d, s = dst.data_ptr(), src.data_ptr()
            for doff, soff, width, height, dpitch, spitch in segments:
                if height == 1:
                    self._check(self._lib.cudaMemcpyAsync(d + doff, s + soff, width, 4, handle))
                else:
                    self._check(self._lib.cudaMemcpy2DAsync(d + doff, dpitch, s + soff, spitch, width, height, 4,
                                                            handle))
            return
        torch = self.torch
        with torch.cuda.stream(stream):
            for doff, soff, width, height, dpitch, spitch in segments:
                n = width // itemsize
                for r in range(height):
                    dv = dst.as_strided((n,), (1,), dst.storage_offset() + (doff + r * dpitch) // itemsize)
                    sv = src.as_strided((n,), (1,), src.storage_offset() + (soff + r * spitch) // itemsize)
                    dv.copy_(sv, non_blocking=True)


# --------------------------------------------------------------------------------------------
# torch: setup, device, bandwidth


def torch_fp32(torch):
    """Full FP32 math in torch (pyooc never uses TF32): a fair in-core reference and peers."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def release_host_cache(torch):
    """Hands torch's cached pinned blocks back to the system (pinned memory is precious)."""
    import gc
    gc.collect()
    empty = getattr(torch._C, "_host_emptyCache", None)
    if empty is not None:
        empty()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def nvidia_driver_version():
    try:
        import pynvml
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def device_info(torch=None):
    """(one-line description, dict of details) of the GPU, torch and pyooc in this run."""
    details = {"python": sys.version.split()[0]}
    try:
        import pyooc
        details["pyooc"] = pyooc.info()
    except Exception as exc:  # report, never fail the run over metadata
        details["pyooc"] = f"unavailable: {exc}"
    if torch is None or not torch.cuda.is_available():
        details["gpu"] = None
        return "no GPU (host backend)", details
    name = torch.cuda.get_device_name()
    driver = nvidia_driver_version()
    props = torch.cuda.get_device_properties(0)
    details.update(gpu=name, driver=driver, torch=torch.__version__, torch_cuda=torch.version.cuda,
                   torch_cudnn=torch.backends.cudnn.version(), gpu_memory_bytes=props.total_memory,
                   multiprocessors=props.multi_processor_count, cpu_count=os.cpu_count())
    return f"{name} (driver {driver})", details


def _median_of(fn, n):
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

    def timed(dst, src):
        torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    return {
        "pageable_h2d": nbytes / _median_of(lambda: timed(dev_a, page), repeats) / GB,
        "pageable_d2h": nbytes / _median_of(lambda: timed(page, dev_b), repeats) / GB,
    }


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


# --------------------------------------------------------------------------------------------
# torch peers


def torch_conv_fn(torch, spatial):
    F = torch.nn.functional
    return {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]


class NaiveTorchConv:
    """What most people write: pageable torch tensors (from numpy), per chunk .cuda() -> conv ->
    .cpu() into the host output, everything on the default stream. Chunks are sized for the same
    device budget as pyooc (a slab chunk with halos holds its input twice: the slice and F.pad's
    copy)."""

    name = "naive_torch"

    def __init__(self, torch, geom, x_host, w_host, y_host):
        self.torch, self.geom = torch, geom
        self.x, self.w, self.y = x_host, w_host, y_host
        self.conv = torch_conv_fn(torch, geom.spatial)
        self.chunks = []
        self.info = {}

    def prepare(self, data_budget):
        chunks, info = plan_chunks(self.geom, data_budget, x_copies=1, y_copies=1)
        if info["mode"] == "slab":  # the sliced input and its padded copy are both alive
            chunks, info = plan_chunks(self.geom, data_budget, x_copies=2, y_copies=1)
        self.chunks, self.info = chunks, info

    def release(self):
        pass

    def run(self):
        torch, g = self.torch, self.geom
        F = torch.nn.functional
        w = self.w.cuda()
        for ch in self.chunks:
            if ch.split:
                xd = self.x[ch.n0:ch.n1, :, ch.clip_lo:ch.clip_hi].cuda()
                if ch.pad_lo or ch.pad_hi:
                    xd = F.pad(xd, [0, 0] * (g.spatial - 1) + [ch.pad_lo, ch.pad_hi])
            else:
                xd = self.x[ch.n0:ch.n1].cuda()
            out = self.conv(xd, w, None, g.stride, chunk_conv_padding(g, ch), g.dilation, g.groups)
            del xd
            self.y[ch.n0:ch.n1, :, ch.o0:ch.o1] = out.cpu()
            del out


class StreamedPeer:
    """What the expert peers share: an H2D, a compute and a D2H stream, per-buffer events that chain
    them (in_ready, in_free, out_ready, out_done) and preallocated device slots."""

    def init_streams(self, torch, copier, buffers):
        self.torch, self.copier, self.buffers = torch, copier, buffers
        self.h2d, self.compute_stream, self.d2h = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
        E = torch.cuda.Event
        self.in_ready = [E() for _ in range(buffers)]
        self.in_free = [E() for _ in range(buffers)]
        self.out_ready = [E() for _ in range(buffers)]
        self.out_done = [E() for _ in range(buffers)]
        self.slots = []

    def start_streams(self):
        """Everything the previous call (or the caller) queued on the current stream comes first."""
        start = self.torch.cuda.Event()
        start.record(self.torch.cuda.current_stream())
        for s in (self.h2d, self.compute_stream, self.d2h):
            s.wait_event(start)

    def release(self):
        self.slots = []
        self.torch.cuda.synchronize()

    def upload(self, host_tensors):
        """Device copies of whole host tensors (w, a bias), enqueued on the H2D stream; the compute
        stream waits for them."""
        torch = self.torch
        with torch.cuda.stream(self.h2d):
            dev = [torch.empty(tuple(t.shape), dtype=t.dtype, device="cuda") for t in host_tensors]
            for d, t in zip(dev, host_tensors):
                self.copier.copy(d, t, self.h2d)
            ready = torch.cuda.Event()
            ready.record(self.h2d)
        self.compute_stream.wait_event(ready)
        return dev

    def stream_chunks(self, load, compute, store=None, slot_free=None):
        """The pipeline over self.chunks: chunk i uses slot b = i % buffers; load(ch, b) enqueues its
        inputs on the H2D stream once chunk i-B is done with the slot (slot_free[b]; by default
        in_free, recorded after its compute), compute(ch, loaded) runs on the compute stream, and
        store(ch, out) enqueues the result's D2H. At most `buffers` results are alive: the host
        thread stays at most that many chunks ahead. Without store the results stay on the device
        (a reduction). Returns when the device is done."""
        torch, B = self.torch, self.buffers
        free = self.in_free if slot_free is None else slot_free
        outs = [None] * B
        for i, ch in enumerate(self.chunks):
            b = i % B
            with torch.cuda.stream(self.h2d):
                if i >= B:
                    self.h2d.wait_event(free[b])  # chunk i-B is done with this slot
                loaded = load(ch, b)
                self.in_ready[b].record(self.h2d)
            if i >= B and store is not None:
                # Chunk i-B's result has reached the host: free it before computing chunk i's.
                self.out_done[b].synchronize()
                outs[b] = None
            with torch.cuda.stream(self.compute_stream):
                self.compute_stream.wait_event(self.in_ready[b])
                out = compute(ch, loaded)
                self.in_free[b].record(self.compute_stream)
                self.out_ready[b].record(self.compute_stream)
            if store is not None:
                outs[b] = out
                with torch.cuda.stream(self.d2h):
                    self.d2h.wait_event(self.out_ready[b])
                    store(ch, out)
                    self.out_done[b].record(self.d2h)
        torch.cuda.synchronize()


class ExpertTorchConv(StreamedPeer):
    """The fair peer: what a careful torch programmer writes by hand. Pinned host tensors; an H2D
    stream, a compute stream and a D2H stream chained by events; double buffering (two preallocated
    input slots, at most two chunk outputs alive), so chunk i+1 loads while chunk i computes and
    chunk i-1 is written back; strided slabs move with one cudaMemcpy2DAsync each (RegionCopier);
    halo rows outside the tensor are zero-filled on the device. w is uploaded once per call. Sized
    for the same device budget as pyooc (chunks of whole samples, else slabs of the first spatial
    dim with halos)."""

    name = "expert_torch"

    def __init__(self, torch, geom, x_host, w_host, y_host, copier, buffers=2):
        self.init_streams(torch, copier, buffers)
        self.geom = geom
        self.x, self.w, self.y = x_host, w_host, y_host
        self.conv = torch_conv_fn(torch, geom.spatial)
        self.w_ready = torch.cuda.Event()
        self.chunks = []
        self.info = {}

    def prepare(self, data_budget):
        torch, g = self.torch, self.geom
        self.release()
        self.chunks, self.info = plan_chunks(g, data_budget, x_copies=self.buffers, y_copies=self.buffers)
        C, rest = g.x_shape[1], math.prod(g.x_shape[3:])
        numel = max((ch.n1 - ch.n0) * C * ch.in_rows * rest if ch.split else (ch.n1 - ch.n0) * C * g.x_shape[2] * rest
                    for ch in self.chunks)
        self.slots = [torch.empty(numel, dtype=torch.float32, device="cuda") for _ in range(self.buffers)]
        self.info.update(buffers=self.buffers, slot_bytes=numel * 4, copy_method=self.copier.method)

    def _device_input(self, ch, b):
        g = self.geom
        rows = ch.in_rows if ch.split else g.x_shape[2]
        shape = (ch.n1 - ch.n0, g.x_shape[1], rows) + tuple(g.x_shape[3:])
        return self.slots[b][:math.prod(shape)].view(shape)

    def _load(self, ch, b):
        """Enqueues chunk ch's input slab into slot b (zero rows where a halo leaves x)."""
        cp, xd = self.copier, self._device_input(ch, b)
        if ch.split:
            if ch.pad_lo:
                xd[:, :, :ch.pad_lo].zero_()
            if ch.pad_hi:
                xd[:, :, ch.in_rows - ch.pad_hi:].zero_()
            cp.copy(xd[:, :, ch.pad_lo:ch.in_rows - ch.pad_hi], self.x[ch.n0:ch.n1, :, ch.clip_lo:ch.clip_hi], self.h2d)
        else:
            cp.copy(xd, self.x[ch.n0:ch.n1], self.h2d)
        return xd

    def run(self):
        g = self.geom
        self.start_streams()
        w, = self.upload([self.w])
        self.stream_chunks(
            self._load,
            lambda ch, xd: self.conv(xd, w, None, g.stride, chunk_conv_padding(g, ch), g.dilation, g.groups),
            lambda ch, out: self.copier.copy(self.y[ch.n0:ch.n1, :, ch.o0:ch.o1], out, self.d2h))


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


# --------------------------------------------------------------------------------------------
# conv gradients for the torch peers (conv_backward.py): the same chunking, roles swapped


def torch_grad_fns(torch, spatial):
    """torch.nn.grad's (input gradient, weight gradient) for 1, 2 or 3 spatial dims."""
    g = torch.nn.grad
    return {1: (g.conv1d_input, g.conv1d_weight), 2: (g.conv2d_input, g.conv2d_weight),
            3: (g.conv3d_input, g.conv3d_weight)}[spatial]


@dataclass(frozen=True)
class DataGradChunk(SlabChunk):
    """A chunk of the input gradient: dx rows [t0, t1) of the first spatial dim, from dy rows
    [o0, o1); conv_input with no padding along that dim computes dx rows [lo, hi), of which the
    target [t0, t1) is kept (neighbouring chunks own the rest)."""
    t0: int = 0
    t1: int = 0


def data_grad_rows(geom, t0, t1):
    """(o0, o1, lo, hi) for dx target rows [t0, t1): the dy rows contributing to them and the dx rows
    a padding-0 conv_input over those produces. The peers handle strides up to the dilated kernel
    span, where [lo, hi) always holds the target (the benchmark cases have stride 1)."""
    k, s, p, d = geom.w_shape[2], geom.stride[0], geom.padding[0], geom.dilation[0]
    span = (k - 1) * d + 1
    o0 = max(0, -(-(t0 + p - span + 1) // s))
    o1 = min(geom.y_shape[2], (t1 - 1 + p) // s + 1)
    lo = o0 * s - p
    hi = lo + (o1 - o0 - 1) * s + span
    if not (o0 < o1 and lo <= t0 and hi >= t1):
        raise NotImplementedError(f"torch peers: dx rows [{t0}, {t1}) are not covered by a slab (stride {s} "
                                  f"beyond the kernel span {span}?)")
    return o0, o1, lo, hi


def plan_data_grad_chunks(geom, data_budget, dy_copies, dx_copies):
    """Chunks of the input gradient whose device buffers (dy_copies dy slabs + dx_copies computed dx
    regions alive at once) fit data_budget bytes: whole samples when one fits, else slabs of the
    first spatial dim (one sample each), as even as possible. Returns (chunks, info); raises
    MemoryError when not even one dx row fits."""
    N, C, L = geom.x_shape[:3]
    K, Lo = geom.y_shape[1], geom.y_shape[2]
    inner_in, inner_out = math.prod(geom.x_shape[3:]), math.prod(geom.y_shape[3:])
    b = geom.itemsize
    per_sample = b * (dy_copies * K * Lo * inner_out + dx_copies * C * L * inner_in)
    if data_budget >= per_sample:
        nb = min(N, data_budget // per_sample)
        nb = -(-N // -(-N // nb))
        chunks = [DataGradChunk(n0, min(n0 + nb, N), 0, Lo, 0, L, False, L, 0, L) for n0 in range(0, N, nb)]
        return chunks, {"mode": "n", "samples_per_chunk": nb, "chunks": len(chunks)}

    def slab_bytes(rows):  # the largest chunk of this many target rows
        worst = 0
        for t0 in range(0, L, rows):
            o0, o1, lo, hi = data_grad_rows(geom, t0, min(t0 + rows, L))
            worst = max(worst, dy_copies * K * (o1 - o0) * inner_out + dx_copies * C * (hi - lo) * inner_in)
        return b * worst

    for count in range(1, L + 1):
        rows = -(-L // count)
        if slab_bytes(rows) <= data_budget:
            break
    else:
        raise MemoryError(f"one dx row of the first spatial dim needs {fmt_bytes(slab_bytes(1))}, the budget is "
                          f"{fmt_bytes(data_budget)} (a second spatial split would be needed)")
    chunks = []
    for n in range(N):
        for t0 in range(0, L, rows):
            t1 = min(t0 + rows, L)
            o0, o1, lo, hi = data_grad_rows(geom, t0, t1)
            chunks.append(DataGradChunk(n, n + 1, o0, o1, lo, hi, True, L, t0, t1))
    return chunks, {"mode": "slab", "rows_per_chunk": rows, "slabs_per_sample": -(-L // rows), "chunks": len(chunks)}


class _GradPeer:
    """What the gradient peers share: the operation ("data": dx from dy and w; "filter": dw from x
    and dy), torch.nn.grad's function for it, and the chunking for a device budget (copies: how many
    of each chunk buffer are alive at once)."""

    def __init__(self, torch, op, geom, x_host, w_host, dy_host, out_host):
        self.torch, self.op, self.geom = torch, op, geom
        self.x, self.w, self.dy, self.out = x_host, w_host, dy_host, out_host
        grad_input, grad_weight = torch_grad_fns(torch, geom.spatial)
        self.grad = grad_input if op == "data" else grad_weight
        self.chunks, self.info = [], {}

    def plan(self, data_budget, copies):
        if self.op == "data":
            return plan_data_grad_chunks(self.geom, data_budget, copies, copies)
        return plan_chunks(self.geom, data_budget, copies, copies)  # x slab and dy tile, as the forward's x and y

    def compute(self, ch, a, b):
        """The chunk's gradient on the device: a, b are (w, dy slab) or (x slab, dy slab)."""
        g = self.geom
        padding = chunk_conv_padding(g, ch)
        if self.op == "data":
            rows = ch.hi - ch.lo if ch.split else g.x_shape[2]
            size = (ch.n1 - ch.n0, g.x_shape[1], rows) + tuple(g.x_shape[3:])
            return self.grad(size, a, b, g.stride, padding, g.dilation, g.groups)
        return self.grad(a, tuple(g.w_shape), b, g.stride, padding, g.dilation, g.groups)

    def kept(self, ch, dx):
        """The part of a computed dx region that is the chunk's target."""
        return dx[:, :, ch.t0 - ch.lo:ch.t1 - ch.lo] if ch.split else dx

    def release(self):
        pass


class NaiveTorchGrad(_GradPeer):
    """What most people write: pageable tensors, per chunk .cuda() -> torch.nn.grad -> .cpu(), all on
    the default stream; dw accumulated on the device. Sized for the same budget as pyooc."""

    name = "naive_torch"

    def prepare(self, data_budget):
        self.chunks, self.info = self.plan(data_budget, 2)  # a slab and its padded copy / a result and its slice

    def run(self):
        torch, g = self.torch, self.geom
        F = torch.nn.functional
        if self.op == "data":
            w = self.w.cuda()
            for ch in self.chunks:
                dy = self.dy[ch.n0:ch.n1, :, ch.o0:ch.o1].cuda()
                self.out[ch.n0:ch.n1, :, ch.t0:ch.t1] = self.kept(ch, self.compute(ch, w, dy)).cpu()
            return
        dw = torch.zeros(tuple(g.w_shape), device="cuda")
        for ch in self.chunks:
            if ch.split:  # the halo'd slab, zero rows outside x
                x = self.x[ch.n0:ch.n1, :, ch.clip_lo:ch.clip_hi].cuda()
                if ch.pad_lo or ch.pad_hi:
                    x = F.pad(x, [0, 0] * (g.spatial - 1) + [ch.pad_lo, ch.pad_hi])
            else:
                x = self.x[ch.n0:ch.n1].cuda()
            dw += self.compute(ch, x, self.dy[ch.n0:ch.n1, :, ch.o0:ch.o1].cuda())
        self.out.copy_(dw.cpu())


class ExpertTorchGrad(StreamedPeer, _GradPeer):
    """The fair peer, as ExpertTorchConv is for the forward: pinned host tensors, H2D / compute / D2H
    streams chained by events, double buffering of the input slabs, strided slabs moved with one
    cudaMemcpy2DAsync each (RegionCopier), halo rows zeroed on the device; the input gradient's
    target slices go back with strided D2H, the weight gradient accumulates on the device and goes
    back once. Sized for the same budget as pyooc."""

    name = "expert_torch"

    def __init__(self, torch, op, geom, x_host, w_host, dy_host, out_host, copier, buffers=2):
        super().__init__(torch, op, geom, x_host, w_host, dy_host, out_host)
        self.init_streams(torch, copier, buffers)

    def prepare(self, data_budget):
        torch, g = self.torch, self.geom
        self.release()
        self.chunks, self.info = self.plan(data_budget, self.buffers)
        # Per slot: the dy slab (data), or the x slab and the dy slab (filter), as flat buffers.
        rest_x, rest_y = math.prod(g.x_shape[3:]), math.prod(g.y_shape[3:])
        dy_numel = max((ch.n1 - ch.n0) * g.y_shape[1] * (ch.o1 - ch.o0) * rest_y for ch in self.chunks)
        x_numel = 0 if self.op == "data" else max(
            (ch.n1 - ch.n0) * g.x_shape[1] * (ch.in_rows if ch.split else g.x_shape[2]) * rest_x for ch in self.chunks)
        self.slots = [(torch.empty(x_numel, device="cuda"), torch.empty(dy_numel, device="cuda"))
                      for _ in range(self.buffers)]
        self.info.update(buffers=self.buffers, slot_bytes=4 * (x_numel + dy_numel), copy_method=self.copier.method)

    def _view(self, flat, shape):
        return flat[:math.prod(shape)].view(shape)

    def _load(self, ch, b):
        """Enqueues the chunk's input slabs into slot b on the H2D stream; returns the device views."""
        g, cp = self.geom, self.copier
        dy = self._view(self.slots[b][1], (ch.n1 - ch.n0, g.y_shape[1], ch.o1 - ch.o0) + tuple(g.y_shape[3:]))
        cp.copy(dy, self.dy[ch.n0:ch.n1, :, ch.o0:ch.o1], self.h2d)
        if self.op == "data":
            return dy, None
        rows = ch.in_rows if ch.split else g.x_shape[2]
        x = self._view(self.slots[b][0], (ch.n1 - ch.n0, g.x_shape[1], rows) + tuple(g.x_shape[3:]))
        if ch.split:
            if ch.pad_lo:
                x[:, :, :ch.pad_lo].zero_()
            if ch.pad_hi:
                x[:, :, rows - ch.pad_hi:].zero_()
            cp.copy(x[:, :, ch.pad_lo:rows - ch.pad_hi], self.x[ch.n0:ch.n1, :, ch.clip_lo:ch.clip_hi], self.h2d)
        else:
            cp.copy(x, self.x[ch.n0:ch.n1], self.h2d)
        return dy, x

    def run(self):
        torch, g = self.torch, self.geom
        self.start_streams()
        if self.op == "data":
            w, = self.upload([self.w])
            self.stream_chunks(
                lambda ch, b: self._load(ch, b)[0], lambda ch, dy: self.compute(ch, w, dy),
                lambda ch, dx: self.copier.copy(self.out[ch.n0:ch.n1, :, ch.t0:ch.t1], self.kept(ch, dx), self.d2h))
            return
        with torch.cuda.stream(self.compute_stream):
            dw = torch.zeros(tuple(g.w_shape), device="cuda")
        self.stream_chunks(self._load, lambda ch, loaded: dw.add_(self.compute(ch, loaded[1], loaded[0])))
        with torch.cuda.stream(self.d2h):
            self.d2h.wait_stream(self.compute_stream)
            self.copier.copy(self.out, dw, self.d2h)
        torch.cuda.synchronize()


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


# --------------------------------------------------------------------------------------------
# one peer: budget, correctness check, timing


def memory_limit_for(working_set, cap):
    """At most 1/8 of the working set, rounded down to MiB (KiB for tiny cases), at most cap."""
    eighth = working_set // 8
    unit = MiB if eighth >= 64 * MiB else 1024
    limit = eighth // unit * unit
    return min(limit, cap) if cap else limit


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


def timed_after_warmup(fn, warm_seconds, repeats, max_run_seconds, sync=None):
    """The timed repeats; where one warm-up run already took longer than max_run_seconds, that run
    stands alone (the device machine kills a command at 10 minutes)."""
    if warm_seconds > max_run_seconds:
        log(f"  one run took {warm_seconds:.1f} s > --max-run-seconds {max_run_seconds}: not repeated")
        return [warm_seconds]
    return timed_runs(fn, repeats, warmup=0, sync=sync)


def plan_dict(plan):
    keys = ("backend", "splits", "tiles", "num_chunks", "loop_order", "buffers", "w_resident", "peak_device_bytes",
            "workspace_bytes", "memory_limit", "bytes_h2d", "bytes_d2h", "predicted_seconds", "passes")
    out = {k: getattr(plan, k, None) for k in keys}
    out["describe"] = str(plan)
    return out


def stats_dict(stats):
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


def run_torch_peer(torch, result, name, peer, limit, w_bytes, poison, check, repeats, args, warm_runs=1):
    """Fits a torch peer to the budget (fit_peer; its warm-up output is the one check() judges), then
    times it. Returns the median seconds."""
    result[name] = fit_peer(torch, peer, limit, w_bytes, poison, warm_runs=warm_runs)
    check()
    times = timed_after_warmup(peer.run, result[name]["warm_seconds"], repeats, args.max_run_seconds,
                               sync=torch.cuda.synchronize)
    result["times"][name] = times
    return median(times)


def summarize(r, targets):
    """The ratios of a case's timings (> 1 is good) and each target (key, goal, label) met or not."""
    rl = r["roofline_s"]
    r["ratios"] = {
        "pinned_efficiency": ratio(rl, r["pyooc_pinned_s"]),
        "pageable_efficiency": ratio(rl, r["pyooc_pageable_s"]),
        "speedup_vs_naive": ratio(r["naive_torch_s"], r["pyooc_pageable_s"]),
        "speedup_vs_naive_pinned": ratio(r["naive_torch_s"], r["pyooc_pinned_s"]),
        "ratio_vs_expert": ratio(r["expert_torch_s"], r["pyooc_pinned_s"]),
        "ratio_vs_expert_pageable": ratio(r["expert_torch_s"], r["pyooc_pageable_s"]),
        "pinned_over_incore": ratio(r["pyooc_pinned_s"], r["incore_torch_s"]),
        "expert_efficiency": ratio(rl, r["expert_torch_s"]),
    }
    r["targets"] = {}
    for key, goal, label in targets:
        value = r["ratios"][key]
        r["targets"][key] = {"goal": goal, "label": label, "value": value,
                             "met": None if value is None else value >= goal}


# --------------------------------------------------------------------------------------------
# running a benchmark: peers one by one, the command line and the main loop


class CheckFailed(Exception):
    """A peer's output failed its correctness check: reported as a failure, not a crash."""


def attempt_peer(result, ctx, peer, fn):
    """fn() (one peer's measurement) unless the peer is not selected (--peers) or the time budget is
    spent; a failure goes to result["failures"] (with a traceback unless it is a CheckFailed), so
    one peer failing does not hide the others' numbers. Returns fn()'s value, else None."""
    import gc
    import traceback
    args = ctx["args"]
    if peer not in ctx["peers"]:
        result["skipped"][peer] = "not selected (--peers)"
        return None
    if time.perf_counter() > ctx["deadline"]:
        result["skipped"][peer] = f"--time-budget of {args.time_budget:.0f} s spent"
        return None
    try:
        return fn()
    except Exception as exc:  # one peer failing must not hide the others' numbers
        result["failures"][peer] = f"{type(exc).__name__}: {exc}"
        log(f"[{result['name']}] {peer} FAILED: {exc}")
        if not isinstance(exc, CheckFailed):
            traceback.print_exc(file=sys.stderr)
        return None
    finally:
        gc.collect()


def bench_main(argv, *, name, doc, cases, peers, run_case, markdown, self_test, tolerance):
    """A benchmark's command line and main loop: parse the options every benchmark takes (bench/README),
    measure the link, run the selected cases (run_case(case name, case spec, ctx) -> result dict),
    write OUT/<name>.json after every case and OUT/<name>.md at the end, print the table last.
    cases: {"full": {...}, "quick": {...}, "dry-run": {...}}. Returns the exit status."""
    import argparse
    import gc
    import tempfile

    import numpy as np
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None,
                        help=f"directory for {name}.json/.md (default: bench/results; for --quick and "
                             "--dry-run a temporary directory, so they never overwrite real results)")
    parser.add_argument("--cases", default=",".join(cases["full"]),
                        help=f"comma-separated subset of: {', '.join(cases['full'])}")
    parser.add_argument("--peers", default=",".join(peers), help=f"comma-separated subset of: {', '.join(peers)}")
    parser.add_argument("--quick", action="store_true", help="~1 GB working sets (a fast first look)")
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny cases on pyooc's host backend, no GPU/torch needed (checks this script)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per peer after the warm-up (median)")
    parser.add_argument("--naive-repeats", type=int, default=2, help="timed runs of the (slow) naive loop")
    parser.add_argument("--max-run-seconds", type=float, default=20.0,
                        help="a peer whose warm-up run took longer is timed by that run alone")
    parser.add_argument("--time-budget", type=float, default=float("inf"),
                        help="seconds; peers not started by then are skipped (and reported so)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a speed target is missed")
    args = parser.parse_args(argv)

    mode = "dry-run" if args.dry_run else "quick" if args.quick else "full"
    if args.out is None:
        args.out = (os.path.join(REPO_ROOT, "bench", "results") if mode == "full"
                    else os.path.join(tempfile.gettempdir(), f"pyooc-bench-{mode}"))
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in cases[mode]]
    wanted = {p.strip() for p in args.peers.split(",") if p.strip()}
    if unknown or not names or wanted - set(peers):
        parser.error(f"unknown case(s) {unknown} or peer(s) {sorted(wanted - set(peers))}")

    import pyooc
    torch = None
    if not args.dry_run:
        import torch
        if not torch.cuda.is_available() or pyooc.device_count() == 0:
            sys.exit(f"{name}: no CUDA device visible to torch/pyooc (use --dry-run on a CPU machine)")
        torch_fp32(torch)
    started = time.perf_counter()

    if args.dry_run:
        checks = self_test(np.random.default_rng(args.seed))
        log(f"geometry self-test: {checks} chunkings emulated with numpy, all match the float64 reference")
    device, details = device_info(torch)
    if torch is not None:
        log("measuring link bandwidth ...")
        bandwidth = measure_bandwidth(torch)
        if hasattr(pyooc, "measure_link_bandwidth"):  # pyooc's own measurement, as a cross-check
            try:
                bandwidth["pyooc"] = {k: v / GB for k, v in pyooc.measure_link_bandwidth().items()}
            except Exception as exc:
                bandwidth["pyooc"] = f"failed: {exc}"
        copier = RegionCopier(torch)
    else:
        bandwidth = dict(ASSUMED_BANDWIDTH, assumed=True)
        copier = None
    log("bandwidth (GB/s): " + ", ".join(f"{k} {v:.1f}" for k, v in bandwidth.items() if isinstance(v, float)))
    report = {
        "benchmark": name, "commit": git_commit(), "date": utc_now(), "device": device, "mode": mode,
        "bandwidth": bandwidth, "environment": details, "tolerance": tolerance, "repeats": args.repeats,
        "naive_repeats": args.naive_repeats, "region_copy": copier.method if copier else None,
        "cases": [],
    }
    ctx = {"pyooc": pyooc, "torch": torch, "args": args, "bandwidth": bandwidth, "copier": copier,
           "backend": "host" if args.dry_run else "cuda", "peers": wanted, "deadline": started + args.time_budget}
    json_path = os.path.join(args.out, f"{name}.json")
    md_path = os.path.join(args.out, f"{name}.md")
    for case in progress(names, desc=name, leave=True):
        if time.perf_counter() > ctx["deadline"]:  # not even its inputs are drawn: say so and go on
            report.setdefault("skipped_cases", {})[case] = f"--time-budget of {args.time_budget:.0f} s spent"
            log(f"[{case}] skipped: --time-budget of {args.time_budget:.0f} s spent")
            continue
        report["cases"].append(run_case(case, cases[mode][case], ctx))
        gc.collect()  # the case's arrays went with run_case's frame: hand their memory back
        if torch is not None:
            release_host_cache(torch)
        report["seconds"] = time.perf_counter() - started
        write_json(json_path, report)  # after every case: a run killed later keeps what it measured
    report["seconds"] = time.perf_counter() - started
    write_json(json_path, report)  # with the cases the time budget skipped
    text = markdown(report)
    write_text(md_path, text)
    log(f"wrote {json_path} and {md_path} ({report['seconds']:.0f} s)")
    print(text, flush=True)

    failed = any(c["failures"] for c in report["cases"])
    missed = any(t["met"] is False or (t["met"] is None and args.strict)
                 for c in report["cases"] for t in c["targets"].values())
    return 1 if failed or (args.strict and missed) else 0


# --------------------------------------------------------------------------------------------
# results


def write_json(path, data):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=_json_default)
        f.write("\n")
    os.replace(tmp, path)


def _json_default(obj):
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def report_markdown(report, name, case_detail, roofline_note="", sections=()):
    """A report as markdown: the timings, the targets, `sections` (more lines), a note per case
    (case_detail(case): its operands, as a string)."""
    bw = report["bandwidth"]
    lines = [f"# {name} benchmark", "",
             f"commit `{report['commit']}`, {report['date']}, {report['device']}" +
             ("" if report["mode"] == "full" else f", {report['mode']} mode (not the issue's sizes)"), "",
             f"Link ({'assumed, not measured' if bw.get('assumed') else 'measured in this run'}): pinned H2D "
             f"{bw['h2d']:.1f} GB/s, D2H {bw['d2h']:.1f} GB/s, both directions {bw['bidir']:.1f} GB/s; pageable "
             f"H2D {bw['pageable_h2d']:.1f} GB/s, D2H {bw['pageable_d2h']:.1f} GB/s.", "",
             f"Median seconds (roofline = max(in/H2D, out/D2H, (in+out)/both, in-core compute){roofline_note}):", ""]
    rows = []
    for c in report["cases"]:
        bound = c.get("roofline", {}).get("bound", "?")
        rows.append([c["name"], fmt_bytes(c["working_set_bytes"]), fmt_bytes(c["memory_limit"]),
                     f"{fmt_s(c['roofline_s'])} ({bound})", fmt_s(c["pyooc_pinned_s"]),
                     fmt_s(c["pyooc_pageable_s"]), fmt_s(c["incore_torch_s"]), fmt_s(c["naive_torch_s"]),
                     fmt_s(c["expert_torch_s"])])
    lines.append(markdown_table(["case", "working set", "memory_limit", "roofline", "pyooc pinned",
                                 "pyooc pageable", "in-core torch", "naive torch", "expert torch"], rows))
    lines += ["", "Targets:", ""]
    rows = []
    for c in report["cases"]:
        for t in c["targets"].values():
            value, verdict = target_row(t["value"], t["goal"])
            rows.append([c["name"], t["label"], value, verdict])
    lines.append(markdown_table(["case", "target", "value", "verdict"], rows))
    lines += list(sections)
    notes = []
    for c in report["cases"]:
        plan = c.get("pyooc_plan", {})
        notes.append(f"- {c['name']}: {c['description']}; {case_detail(c)}; pyooc "
                     f"splits {plan.get('splits')}, {plan.get('num_chunks')} chunks; naive "
                     f"{_peer_note(c.get('naive'))}; expert {_peer_note(c.get('expert'))}; "
                     f"max rel. error {_max_err(c)}")
        for peer, why in c["failures"].items():
            notes.append(f"  - FAILED {peer}: {why}")
        for peer, why in c["skipped"].items():
            notes.append(f"  - skipped {peer}: {why}")
    for case, why in report.get("skipped_cases", {}).items():
        notes.append(f"- {case}: not run ({why})")
    lines += ["", *notes, ""]
    return "\n".join(lines)


def _peer_note(info):
    if not info:
        return "-"
    if info.get("mode") == "n":
        shape = f"{info.get('samples_per_chunk')} samples/chunk"
    elif info.get("mode") == "rows":
        shape = f"{info.get('rows_per_chunk')} {info.get('unit', 'rows')}/chunk"
    else:
        shape = f"{info.get('rows_per_chunk')} rows/slab"
    over = "" if info.get("within_limit", True) else " OVER LIMIT"
    return f"{info.get('chunks')} chunks of {shape}, peak {fmt_bytes(info.get('peak_device_bytes'))}{over}"


def _max_err(c):
    errs = [e for e in c["errors"].values() if e is not None]
    return f"{max(errs):.2e}" if errs else "-"


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_text(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def target_row(value, goal, higher_is_better=True):
    if value is None:
        return "-", "not measured"
    met = value >= goal if higher_is_better else value <= goal
    return f"{value:.2f}", "met" if met else "missed"
