"""`pyooc bench`: a short side-by-side on this machine, printed as a table. With a GPU: pyooc's
conv forward and relu on pinned arrays through a budget far below the working set, against the link
roofline (each byte over the link once, at the bandwidth measured now) and, when torch is
importable, a torch loop doing the same chunk by chunk (copy in, compute, copy out). Without a GPU:
the host backend on a small case (and torch's CPU in core), and it says so. bench/*.py are the
full benchmarks."""

import time

import numpy as np

from pyooc.cli import subcommand

NAME = "bench"


def add_parser(commands):
    p = subcommand(commands, NAME, "run a short benchmark against the link roofline (and torch)",
                   "Runs a few seconds of benchmarks on this machine: pyooc against the link roofline and a "
                   "torch chunk loop when torch is importable. Without a GPU it runs the host backend on a "
                   "small case and says so. The full benchmarks are bench/*.py.",
                   "  pyooc bench\n  pyooc bench --repeat 5 --memory-limit 256MiB")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per case, best kept (default 3)")
    p.add_argument("--memory-limit", default=None, help="device budget (default: a quarter of the working set)")


def best_seconds(function, repeat):
    function()  # warm: plans cached, staging allocated
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def cases(gpu):
    """(name, x shape, w shape or None): conv 3x3 forward and relu; about 1 GiB each on a GPU."""
    if gpu:
        return [("conv2d 3x3 64ch fwd", (64, 64, 128, 128), (64, 64, 3, 3)), ("relu", (64, 64, 256, 256), None)]
    return [("conv2d 3x3 16ch fwd", (2, 16, 32, 32), (16, 16, 3, 3)), ("relu", (8, 16, 64, 64), None)]


def torch_loop(torch, device, x, w, out, chunks):
    """The chunk loop a torch user writes: along N, copy in, compute, copy out."""
    import torch.nn.functional as F

    wd = torch.from_numpy(w).to(device) if w is not None else None
    xs, outs = torch.from_numpy(x), torch.from_numpy(out)
    step = max(1, x.shape[0] // chunks)

    def run():
        for n in range(0, x.shape[0], step):
            xd = xs[n:n + step].to(device, non_blocking=True)
            yd = F.conv2d(xd, wd, padding=1) if wd is not None else torch.relu(xd)
            outs[n:n + step].copy_(yd, non_blocking=True)
        if device != "cpu":
            torch.cuda.synchronize()
    return run


def run(args):
    import pyooc

    gpu = pyooc.device_count() > 0
    backend = "cuda" if gpu else "host"
    try:
        import torch
    except ImportError:
        torch = None
    if not gpu:
        print("no CUDA GPU here: running the host backend (CPU reference kernels) on small cases; "
              "the numbers say nothing of GPU performance")
    bandwidth = pyooc.measure_link_bandwidth() if gpu else None
    rows = []
    for name, x_shape, w_shape in cases(gpu):
        rng = np.random.default_rng(0)
        alloc = pyooc.pinned_empty if gpu else np.empty
        x = alloc(x_shape, dtype=np.float32)
        x[...] = rng.standard_normal(x_shape, dtype=np.float32)
        w = rng.standard_normal(w_shape, dtype=np.float32) if w_shape else None
        if w is not None:
            y_shape = pyooc.plan_conv_forward(x_shape, w_shape, padding=1, backend=backend).y_shape
        else:
            y_shape = x_shape
        out = alloc(y_shape, dtype=np.float32)
        limit = args.memory_limit or max(x.nbytes // 4, 16 << 20)
        if w is not None:
            call = lambda: pyooc.conv_forward(x, w, padding=1, out=out, memory_limit=limit, backend=backend)  # noqa: E731
        else:
            call = lambda: pyooc.activation_forward(x, "relu", out=out, memory_limit=limit, backend=backend)  # noqa: E731
        seconds = best_seconds(call, args.repeat)
        roofline = pyooc.roofline_seconds(x.nbytes, out.nbytes, bandwidth) if gpu else None
        torch_seconds = None
        if torch is not None and (not gpu or torch.cuda.is_available()):
            chunks = max(1, (x.nbytes + out.nbytes) // int(pyooc.parse_memory_limit(limit)))
            torch_seconds = best_seconds(torch_loop(torch, "cuda" if gpu else "cpu", x, w, np.empty_like(out),
                                                    chunks if gpu else 1), args.repeat)
        rows.append((name, x.nbytes + out.nbytes, seconds, roofline, torch_seconds))
    print_table(rows, backend, torch is not None)
    return 0


def print_table(rows, backend, have_torch):
    def fmt(v, spec):
        return "-" if v is None else format(v, spec)

    header = f"{'case':<22} {'MiB moved':>10} {'pyooc s':>9} {'roofline s':>10} {'pyooc/roof':>10} {'torch s':>9}"
    print(f"backend {backend}; " + ("roofline: bytes in and out once over the link measured now" if backend == "cuda"
                                    else "no link, no roofline")
          + ("; torch: a chunk loop along N" if have_torch else "; torch not importable, no torch column"))
    print(header)
    print("-" * len(header))
    for name, nbytes, seconds, roofline, torch_seconds in rows:
        ratio = roofline / seconds if roofline else None
        print(f"{name:<22} {nbytes / 2**20:>10.1f} {seconds:>9.4f} {fmt(roofline, '10.4f'):>10} "
              f"{fmt(ratio, '10.2f'):>10} {fmt(torch_seconds, '9.4f'):>9}")
