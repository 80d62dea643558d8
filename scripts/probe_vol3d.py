"""Device probe behind bench/NOTES.md's 16cd1ac rows: vol3d forward with pinned x and y and a
pageable or pinned w (stage timings, queue profile, three budgets), cuDNN compute of chunk shapes in
torch, and filter-vol3d against torch's default algorithm at N=1 and N=2. Prints what it measures.

On the GPU machine, after `GPU_CHECK_STEPS=install scripts/gpu-check`:
    cd /tmp && python3 -P "$REPO/scripts/probe_vol3d.py"
"""
import os
import statistics
import time

import numpy as np
import pyooc
import torch

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
GiB = 1 << 30
rng = np.random.default_rng(0)

def med(f, n=3):
    """Median seconds of n runs of f after a warm-up."""
    f()
    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        f()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def show(tag, sec):
    """One line: the median wall time and the last call's stage timings (ms) and chunk count."""
    stats = pyooc.last_stats()
    keys = ("chunks", "seconds", "host_wait_seconds", "gather_seconds", "h2d_busy_seconds", "compute_busy_seconds",
            "d2h_busy_seconds")
    fields = [f"{k.replace('_seconds', '')}={stats[k] * 1e3 if 'seconds' in k else stats[k]:.1f}" for k in keys]
    print(f"{tag}: median {sec * 1e3:.1f} ms | " + " ".join(fields), flush=True)


xs, ws = (2, 32, 256, 256, 256), (32, 32, 3, 3, 3)
x, y = pyooc.pinned_empty(xs), pyooc.pinned_empty(xs)
t0 = time.perf_counter()
for n in range(2):
    x[n] = rng.standard_normal(xs[1:], dtype=np.float32)
print(f"fill {time.perf_counter() - t0:.1f}s", flush=True)
w = rng.standard_normal(ws, dtype=np.float32) * 0.05
wp = pyooc.pinned_empty(ws)
wp[...] = w
for limit in (GiB, GiB * 3 // 4, GiB * 3 // 2):
    plan = pyooc.plan_conv_forward(xs, ws, padding=1, memory_limit=limit, pinned=True)
    print(f"limit {limit / GiB:.2f} GiB {plan!s} predicted={plan.predicted_seconds * 1e3:.1f} ms", flush=True)
    for wname, wa in (("w pageable", w), ("w pinned", wp)):
        sec = med(lambda: pyooc.conv_forward(x, wa, padding=1, out=y, memory_limit=limit))
        show(f"  fwd {wname}", sec)
    os.environ["OOC_PROFILE_QUEUES"] = "1"  # read at each call: events around every copy and kernel
    pyooc.conv_forward(x, wp, padding=1, out=y, memory_limit=limit)
    show("  fwd w pinned profiled", pyooc.last_stats()["seconds"])
    os.environ.pop("OOC_PROFILE_QUEUES")

# cuDNN compute per chunk shape (no accumulation), scaled to a full N=1 volume: a C split halves the
# work per chunk, so its cost shows as the per-voxel time divided by the C share.
dev = torch.device("cuda")


def conv_time(c, d, h, k=32):
    xi = torch.randn(1, c, d, h, 256, device=dev)
    wi = torch.randn(k, c, 3, 3, 3, device=dev)
    return med(lambda: torch.nn.functional.conv3d(xi, wi, padding=(0, 0, 1)), 5)


for c, d, h in ((16, 34, 130), (32, 34, 130), (32, 18, 258), (32, 34, 258), (32, 66, 130), (16, 66, 258),
                (32, 258, 258)):
    tt = conv_time(c, d, h)
    voxels = (d - 2) * (h - 2) * 256
    full = tt / voxels * 256 ** 3 * (32 / c)
    print(f"torch conv3d c={c} d={d} h={h}: {tt * 1e3:.2f} ms, {full * 1e3:.1f} ms per N=1 volume (all C)", flush=True)
xt, wt = torch.from_numpy(x[:1]).to(dev), torch.from_numpy(w).to(dev)
incore = med(lambda: torch.nn.functional.conv3d(xt, wt, padding=1))
print(f"torch in-core N=1 whole volume: {incore * 1e3:.1f} ms", flush=True)
del xt

# filter-vol3d: x and dy (y's buffer: the values do not matter for timing) pinned, 1 GiB.
dy = y
plan = pyooc.plan_conv_backward_filter(xs, xs, ws, padding=1, memory_limit=GiB, pinned=True)
print(f"filter {plan!s} predicted={plan.predicted_seconds * 1e3:.1f} ms", flush=True)
sec = med(lambda: pyooc.conv_backward_filter(x, dy, ws, padding=1, memory_limit=GiB), 2)
show("filter-vol3d pinned", sec)
# torch's default algorithm (cudnn.benchmark off) on whole volumes and on D slabs.
for n in (1, 2):
    xt, dyt = torch.from_numpy(x[:n]).to(dev), torch.from_numpy(y[:n]).to(dev)
    whole = med(lambda: torch.nn.grad.conv3d_weight(xt, ws, dyt, padding=1), 2)
    print(f"torch conv3d_weight N={n}: {whole * 1e3:.1f} ms", flush=True)
    for d in (16, 32, 64):
        x_slab, dy_slab = xt[:, :, :d + 2].contiguous(), dyt[:, :, :d].contiguous()
        tt = med(lambda: torch.nn.grad.conv3d_weight(x_slab, ws, dy_slab, padding=(0, 1, 1)), 2)
        print(f"  slab d={d} N={n}: {tt * 1e3:.2f} ms -> {tt * 256 / d * 1e3:.1f} ms per whole N={n}", flush=True)
    del xt, dyt
