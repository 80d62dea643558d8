"""The command line and main loop every benchmark shares (bench/README.md lists the options): which
cases and peers run, and the --time-budget that scripts/gpu-check hands each benchmark. What the
budget leaves out is skipped and said so in the results (`skipped_cases`, each case's `skipped`),
never silently dropped."""

import os
import sys
import time

from _check import CheckFailed
from _console import log, progress
from _link import run_bandwidth
from _region_copy import RegionCopier
from _report import write_json, write_text
from _run_info import REPO_ROOT, device_info, git_commit, utc_now
from _torch_env import release_host_cache, torch_fp32


def _device_list(text):
    """--devices: at least two comma-separated ordinals (argparse reports the error)."""
    import argparse
    try:
        devices = [int(d) for d in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of device ordinals: {text!r}") from None
    if len(devices) < 2 or min(devices) < 0:
        raise argparse.ArgumentTypeError(f"give two or more device ordinals, got {text!r}")
    return devices


def parse_args(argv, *, name, doc, cases, peers):
    """The options every benchmark takes; returns (args, mode, case names, wanted peers), with
    args.out defaulted by mode (a --quick or --dry-run never overwrites bench/results)."""
    import argparse
    import tempfile
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
    parser.add_argument("--devices", type=_device_list, default=None,
                        help="comma-separated device ordinals (e.g. 0,1) for the multi-device variant of the "
                             "benchmarks that have one (conv_forward): the first device alone and all of them, in "
                             "one run; with --dry-run, virtual host devices")
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
    return args, mode, names, wanted


def bench_main(argv, *, name, doc, cases, peers, run_case, markdown, self_test, tolerance):
    """A benchmark's command line and main loop: parse the options every benchmark takes (bench/README),
    measure the link, run the selected cases (run_case(case name, case spec, ctx) -> result dict),
    write OUT/<name>.json after every case and OUT/<name>.md at the end, print the table last.
    cases: {"full": {...}, "quick": {...}, "dry-run": {...}}. Returns the exit status."""
    import gc

    import numpy as np
    args, mode, names, wanted = parse_args(argv, name=name, doc=doc, cases=cases, peers=peers)

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
    bandwidth = run_bandwidth(torch, pyooc)
    copier = RegionCopier(torch) if torch is not None else None
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
