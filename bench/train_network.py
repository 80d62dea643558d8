"""Whole networks trained beyond the device budget (issue 17, item 5): a 3D U-Net and a VGG-16-like
2D net on synthetic data, a fixed number of SGD steps, activations at least 4x the device budget.

Peers, in one run, same model (same seed) and data:
- incore:       torch with the whole GPU (the reference loss curve and time per step);
- pyooc:        pyooc.torch.policy.OutOfCore(model, budget): in-core layers where they fit, pyooc's
                chunked layers where they do not, saved activations offloaded and prefetched;
- save_on_cpu:  torch.autograd.graph.save_on_cpu(pin_memory=True) at the budget;
- checkpoint:   activation checkpointing (each block, or sqrt(n) segments of a Sequential) at the budget.
The budget binds torch's allocator (torch.cuda.set_per_process_memory_fraction) and pyooc's calls
(memory_limit, inside the policy's compute share).

Records per peer: time per step (median after a warm-up step), peak device memory (torch's
counter; pyooc's own arena is bounded by its compute share and reported beside it), the loss curve,
and the largest volume (U-Net: cube side; VGG: image side) it trains one step at the budget, found
by doubling then bisection within --bisect-seconds. Targets (issue 17): loss curve within float32
tolerance of in-core's; pyooc <= 1.3x in-core's time per step and faster than save_on_cpu and
checkpoint; pyooc's largest volume >= 4x in-core torch's at the same budget.

    python3 bench/train_network.py                 # full run, writes bench/results/train_network.{json,md}
    python3 bench/train_network.py --dry-run       # CPU: tiny sizes, host backend, checks the script
"""

import argparse
import copy
import math
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _console import log  # noqa: E402
from _networks import saved_activation_bytes, unet3d, vgg16  # noqa: E402
from _report import markdown_table, write_json, write_text  # noqa: E402
from _run_info import REPO_ROOT, device_info, git_commit, utc_now  # noqa: E402
from _torch_env import release_host_cache, torch_fp32  # noqa: E402
from _units import GiB, MiB, fmt_bytes, fmt_s  # noqa: E402

NAME = "train_network"
PEERS = ["incore", "pyooc", "save_on_cpu", "checkpoint"]
# name -> (network, batch, side, budget bytes, steps); the side is the volume's edge (3D) or the image's (2D).
CASES = {
    "full": {"unet3d": ("unet3d", 1, 256, 3 * GiB, 8), "vgg16": ("vgg16", 128, 224, 3 * GiB + GiB // 2, 8)},
    "quick": {"unet3d": ("unet3d", 1, 128, 384 * MiB, 4), "vgg16": ("vgg16", 16, 224, 448 * MiB, 4)},
    # Budgets above the smallest plans of the widest layers' weights (which pyooc keeps whole on the device).
    "dry-run": {"unet3d": ("unet3d", 1, 16, 256 * 1024, 3), "vgg16": ("vgg16", 4, 32, 512 * 1024, 3)},
}
TARGETS = {"time_vs_incore": 1.3, "largest_volume_vs_incore": 4.0, "activations_over_budget": 4.0}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="directory for train_network.json/.md (default: bench/results; "
                                                    "a temporary directory for --quick and --dry-run)")
    parser.add_argument("--cases", default="unet3d,vgg16")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, pyooc's host backend")
    parser.add_argument("--steps", type=int, default=None, help="training steps per peer (default: the case's)")
    parser.add_argument("--bisect-seconds", type=float, default=None,
                        help="time for each peer's largest-volume search (default 120; dry-run 1)")
    parser.add_argument("--time-budget", type=float, default=float("inf"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    args.mode = "dry-run" if args.dry_run else "quick" if args.quick else "full"
    if args.out is None:
        args.out = os.path.join(REPO_ROOT, "bench", "results") if args.mode == "full" \
            else os.path.join(tempfile.gettempdir(), f"pyooc-bench-{args.mode}")
    if args.bisect_seconds is None:
        args.bisect_seconds = 1.0 if args.dry_run else 120.0
    args.cases = [c for c in args.cases.split(",") if c]
    args.peers = [p for p in args.peers.split(",") if p]
    bad = [c for c in args.cases if c not in CASES[args.mode]] + [p for p in args.peers if p not in PEERS]
    if bad:
        parser.error(f"unknown case(s) or peer(s): {bad}")
    return args


# ------------------------------------------------------------------------------------------------
# one peer's training


class Env:
    """torch, the device, and the budget's enforcement for the peers that run under it."""

    def __init__(self, torch, dry_run):
        self.torch = torch
        self.cuda = not dry_run
        self.device = torch.device("cuda" if self.cuda else "cpu")
        self.total = torch.cuda.get_device_properties(0).total_memory if self.cuda else None

    def limit(self, budget):
        """Caps torch's allocator at budget bytes (None: the whole GPU) and resets its peak counter."""
        if not self.cuda:
            return
        release_host_cache(self.torch)
        self.torch.cuda.set_per_process_memory_fraction(1.0 if budget is None else min(1.0, budget / self.total))
        self.torch.cuda.reset_peak_memory_stats()

    def peak(self):
        return self.torch.cuda.max_memory_allocated() if self.cuda else None

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()


def build(torch, network, batch, side, seed, device):
    """(model, inputs, loss function) with the seed's weights and data."""
    torch.manual_seed(seed)
    if network == "unet3d":
        model = unet3d(torch, base=16 if side > 32 else 4, levels=3)
        x = torch.randn(batch, 1, side, side, side)
        target = (x > 0).float()  # a learnable target: the sign of each voxel
        loss_fn = torch.nn.functional.mse_loss
    else:
        model = vgg16(torch, width=1.0 if side >= 224 else 0.125, side=side)
        x = torch.randn(batch, 3, side, side)
        target = torch.randint(0, 10, (batch,))
        loss_fn = torch.nn.functional.cross_entropy
    return model.to(device), x.to(device), target.to(device), loss_fn


def checkpointed(torch, model):
    """model's forward with activation checkpointing: each nn.Sequential block of a U-Net (re-run in
    the backward), or sqrt(n) segments of a Sequential model."""
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential
    if isinstance(model, torch.nn.Sequential):
        segments = max(1, int(math.sqrt(len(model))))
        return lambda x: checkpoint_sequential(model, segments, x, use_reentrant=False)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Sequential):
                parent._modules[name] = _Checkpointed(torch, child, checkpoint)
    return model


def _Checkpointed(torch, block, checkpoint):
    class Checkpointed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=False)

    return Checkpointed()


def runner_for(torch, env, peer, model, budget, backend):
    """The callable one training step runs the model through, and what it needs to be kept alive."""
    if peer == "pyooc":
        from pyooc.torch.policy import OutOfCore
        return OutOfCore(model, budget, device=env.device, backend=backend)
    if peer == "checkpoint":
        return checkpointed(torch, model)
    return model


def train(torch, env, peer, case, steps, seed, backend, budget_override=None):
    """Trains `steps` SGD steps; returns losses, step seconds and the peak device bytes."""
    network, batch, side, budget, _ = case
    budget = budget if budget_override is None else budget_override
    env.limit(None if peer == "incore" and budget_override is None else budget)
    model, x, target, loss_fn = build(torch, network, batch, side, seed, env.device)
    run = runner_for(torch, env, peer, model, budget, backend)
    if peer == "pyooc":  # torch's allocator gets the runner's torch share: pyooc's calls take the rest
        env.limit(run.torch_budget)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses, seconds = [], []
    for _ in range(steps):
        env.sync()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if peer == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu(pin_memory=env.cuda):
                loss = loss_fn(run(x), target.to(x.device))
        else:
            out = run(x)
            loss = loss_fn(out, target.to(out.device))
        loss.backward()
        opt.step()
        env.sync()
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
    result = {"losses": losses, "step_seconds": seconds, "peak_device_bytes": env.peak()}
    if peer == "pyooc":
        result["decisions"] = dict(run.decisions)
        result["offload"] = dict(run.offloader.stats)
        result["pyooc_arena_bound_bytes"] = run.compute_budget
        result["torch_cap_bytes"] = run.torch_budget
    del model, run, opt
    return result


def _is_oom(torch, exc):
    return isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)) or "out of memory" in str(exc)


def largest_side(torch, env, peer, case, seed, backend, seconds, multiple, host_cap, smallest):
    """The largest side (a multiple of `multiple`, at least `smallest`: the network's least) one
    training step of peer fits at the case's budget: doubling from the case's side (halving first
    if that fails), then bisection, within `seconds`."""
    network, batch, side, budget, _ = case
    deadline = time.perf_counter() + seconds
    tried = {}

    def fits(s):
        if s in tried:
            return tried[s]
        probe = (network, batch, s, budget, 1)
        input_bytes = 4 * batch * (1 if network == "unet3d" else 3) * s ** (3 if network == "unet3d" else 2)
        if host_cap and input_bytes * 64 > host_cap:  # the activations are tens of inputs: stay in host RAM
            tried[s] = None
            return None
        try:
            train(torch, env, peer, probe, 1, seed, backend, budget_override=budget)
            tried[s] = True
        except Exception as exc:  # noqa: BLE001 - an OOM is the answer; anything else too, recorded
            if not _is_oom(torch, exc):
                log(f"  {peer} side {s}: {type(exc).__name__}: {exc}")
            tried[s] = False
        return tried[s]

    lo, hi = None, None
    s = side
    while time.perf_counter() < deadline and s >= smallest:
        ok = fits(s)
        if ok is None:
            hi = s
            break
        if ok:
            lo = s
            if hi is not None:
                break
            s *= 2
        else:
            hi = s
            if lo is not None:
                break
            s = (s // 2) // multiple * multiple
    while lo is not None and hi is not None and hi - lo > multiple and time.perf_counter() < deadline:
        mid = (lo + hi) // 2 // multiple * multiple
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return {"largest_side": lo, "smallest_failed_side": hi, "probes": {str(k): v for k, v in sorted(tried.items())},
            "complete": hi is not None and lo is not None and hi - lo <= multiple}


# ------------------------------------------------------------------------------------------------
# a case


def run_case(torch, env, name, case, args, deadline):
    network, batch, side, budget, steps = case
    steps = args.steps or steps
    backend = "cuda" if env.cuda else "host"
    model, x, _, _ = build(torch, network, batch, side, args.seed, "cpu")
    activations = saved_activation_bytes(torch, model, x)
    del model, x
    result = {"name": name, "network": network, "batch": batch, "side": side, "budget_bytes": budget,
              "steps": steps, "activation_bytes": activations, "activations_over_budget": activations / budget,
              "peers": {}, "largest": {}, "out_of_memory": {}, "failures": {}, "skipped": {}}
    log(f"[{name}] {network} N={batch} side={side}: activations {fmt_bytes(activations)}, budget "
        f"{fmt_bytes(budget)} ({activations / budget:.1f}x)")
    for peer in args.peers:
        if time.perf_counter() > deadline:
            result["skipped"][peer] = "--time-budget spent"
            continue
        try:
            result["peers"][peer] = r = train(torch, env, peer, case, steps, args.seed, backend)
            timed = r["step_seconds"][1:] or r["step_seconds"]
            r["median_step_seconds"] = statistics.median(timed)
            log(f"[{name}] {peer}: {fmt_s(r['median_step_seconds'])}/step, peak {fmt_bytes(r['peak_device_bytes'])}, "
                f"losses {['%.4g' % v for v in r['losses']]}")
        except Exception as exc:  # noqa: BLE001 - one peer failing must not hide the others
            message = f"{type(exc).__name__}: {str(exc)[:300]} at {_where(exc)}"
            if peer in ("save_on_cpu", "checkpoint") and _is_oom(torch, exc):
                # Not training at the budget is what these peers may show: a result, not a failure.
                result["out_of_memory"][peer] = message
                log(f"[{name}] {peer}: out of memory at the budget")
            else:
                result["failures"][peer] = message
                log(f"[{name}] {peer} failed: {message}")
    multiple = 2 ** 3 if network == "unet3d" else 32
    # The U-Net pools three times: below side 16 its bottom batch norm sees one value per channel.
    smallest = 16 if network == "unet3d" else multiple
    # A quarter of the host's memory for the activations the search estimates: the host also holds
    # their gradients, pinned staging and the saved copies (the H200 run of 288343f was killed by
    # the kernel's out-of-memory killer at half).
    host_cap = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.25)
    for peer in args.peers:
        if time.perf_counter() > deadline:
            result["skipped"][f"largest:{peer}"] = "--time-budget spent"
            continue
        # incore here is in-core torch at the budget (the whole GPU trains anything that fits it).
        seconds = min(args.bisect_seconds, deadline - time.perf_counter())
        result["largest"][peer] = largest_side(torch, env, peer, case, args.seed, backend, seconds, multiple,
                                               host_cap, smallest)
        log(f"[{name}] largest side at the budget, {peer}: {result['largest'][peer]['largest_side']}")
    result["targets"] = targets(result, 3 if network == "unet3d" else 2, args.mode)
    return result


def _where(exc, frames=6):
    """The innermost frames of exc's traceback as "file:line function" (what an out-of-memory in a
    long training step needs to be found), innermost first."""
    import traceback
    stack = traceback.extract_tb(exc.__traceback__)[-frames:]
    return " < ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(stack))


def targets(result, dims, mode):
    peers, out = result["peers"], {}
    ref, ours = peers.get("incore"), peers.get("pyooc")
    tol = 1e-4 if mode == "dry-run" else 1e-3
    if ref and ours:
        diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ours["losses"], ref["losses"]))
        out["loss_curve_vs_incore"] = {"value": diff, "goal": f"<= {tol}", "met": diff <= tol}
        if diff > tol:
            result["failures"]["pyooc_loss_curve"] = f"loss curve differs from in-core torch's by {diff:.2e} > {tol}"
        ratio = ours["median_step_seconds"] / ref["median_step_seconds"]
        out["time_vs_incore"] = {"value": ratio, "goal": f"<= {TARGETS['time_vs_incore']}",
                                 "met": ratio <= TARGETS["time_vs_incore"] if mode == "full" else None}
    for peer in ("save_on_cpu", "checkpoint"):
        if ours and peer in result["out_of_memory"]:  # pyooc trains what the peer cannot at this budget
            out[f"faster_than_{peer}"] = {"value": float("inf"), "goal": "> 1 (the peer ran out of memory)",
                                          "met": True}
        elif ours and peers.get(peer):
            faster = ours["median_step_seconds"] < peers[peer]["median_step_seconds"]
            out[f"faster_than_{peer}"] = {"value": peers[peer]["median_step_seconds"] / ours["median_step_seconds"],
                                          "goal": "> 1", "met": faster if mode == "full" else None}
    largest = result["largest"]
    if largest.get("pyooc", {}).get("largest_side") and largest.get("incore", {}).get("largest_side"):
        ratio = (largest["pyooc"]["largest_side"] / largest["incore"]["largest_side"]) ** dims
        out["largest_volume_vs_incore"] = {"value": ratio, "goal": f">= {TARGETS['largest_volume_vs_incore']}",
                                           "met": ratio >= TARGETS["largest_volume_vs_incore"] if mode == "full"
                                           else None}
    a = result["activations_over_budget"]
    out["activations_over_budget"] = {"value": a, "goal": f">= {TARGETS['activations_over_budget']}",
                                      "met": a >= TARGETS["activations_over_budget"]}
    return out


def markdown(report):
    lines = [f"# {NAME}: whole networks beyond the device budget", "",
             f"commit {report['commit'][:10]}, {report['date']}, {report['device']}, mode {report['mode']}", ""]
    for c in report["cases"]:
        lines += [f"## {c['name']}: {c['network']}, N={c['batch']}, side {c['side']}, budget "
                  f"{fmt_bytes(c['budget_bytes'])}, activations {fmt_bytes(c['activation_bytes'])} "
                  f"({c['activations_over_budget']:.1f}x)", ""]
        rows = []
        for peer in PEERS:
            r = c["peers"].get(peer)
            big = c["largest"].get(peer, {})
            if r is None:
                note = c["out_of_memory"].get(peer) and "out of memory at the budget"
                rows.append([peer, "-", "-", "-", big.get("largest_side", "-"),
                             note or c["failures"].get(peer, c["skipped"].get(peer, "not run"))])
                continue
            # pyooc: torch's peak under its capped share, plus what pyooc's calls may hold beside it.
            note = (f"torch capped at {fmt_bytes(r['torch_cap_bytes'])}; pyooc's calls <= "
                    f"{fmt_bytes(r['pyooc_arena_bound_bytes'])}" if "torch_cap_bytes" in r else "")
            rows.append([peer, fmt_s(r["median_step_seconds"]), fmt_bytes(r["peak_device_bytes"]),
                         " ".join(f"{v:.4g}" for v in r["losses"]), big.get("largest_side", "-"), note])
        lines += [markdown_table(["peer", "time/step", "peak device (torch)", "losses", "largest side at budget",
                                  "note"], rows), ""]
        trows = [[k, f"{t['value']:.3g}", t["goal"], {True: "met", False: "missed", None: "not judged"}[t["met"]]]
                 for k, t in c["targets"].items()]
        lines += [markdown_table(["target", "value", "goal", "verdict"], trows), ""]
        if c["failures"]:
            lines += ["failures: " + "; ".join(f"{k}: {v}" for k, v in c["failures"].items()), ""]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    started = time.perf_counter()
    if not args.dry_run and not torch.cuda.is_available():
        sys.exit(f"{NAME}: no CUDA device visible to torch (use --dry-run on a CPU machine)")
    torch_fp32(torch)
    env = Env(torch, args.dry_run)
    device, details = device_info(torch if env.cuda else None)
    report = {"benchmark": NAME, "commit": git_commit(), "date": utc_now(), "device": device, "mode": args.mode,
              "environment": details, "cases": []}
    json_path, md_path = os.path.join(args.out, f"{NAME}.json"), os.path.join(args.out, f"{NAME}.md")
    deadline = started + args.time_budget
    for name in args.cases:
        if time.perf_counter() > deadline:
            report.setdefault("skipped_cases", {})[name] = "--time-budget spent"
            continue
        report["cases"].append(run_case(torch, env, name, CASES[args.mode][name], args, deadline))
        report["seconds"] = time.perf_counter() - started
        write_json(json_path, report)
    report["seconds"] = time.perf_counter() - started
    write_json(json_path, report)
    text = markdown(report)
    write_text(md_path, text)
    log(f"wrote {json_path} and {md_path} ({report['seconds']:.0f} s)")
    print(text, flush=True)
    failed = any(c["failures"] for c in report["cases"])
    missed = any(t["met"] is False for c in report["cases"] for t in c["targets"].values())
    return 1 if failed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
