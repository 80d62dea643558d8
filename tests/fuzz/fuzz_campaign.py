"""A fuzz campaign: hypothesis draws cases of each family (fuzz_cases.py) and a Runner executes
them in child processes. Every case runs, failures included, so that the summary counts all
outcomes (hypothesis would stop at the first failure); the caller fails on any.

Size: OOC_FUZZ_EXAMPLES cases per family (default 400: the CI run, under a minute on the CPU);
OOC_FUZZ_SEED fixes hypothesis' seed (default: derandomized, the same cases every run)."""

import os
import sys
import time

# Run as a script with -P (scripts/gpu-check: the checkout's pyooc/ must not shadow the installed
# one), this directory is not on sys.path: its sibling modules are found through it.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hypothesis  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402

import fuzz_cases  # noqa: E402
from fuzz_runner import Runner  # noqa: E402

FAMILIES = {"valid": fuzz_cases.valid_cases, "bad": fuzz_cases.bad_cases, "plans": fuzz_cases.plan_cases}


def examples():
    return int(os.environ.get("OOC_FUZZ_EXAMPLES", "400"))


def run_family(runner, family, backend, count, seconds=None):
    """Runs `count` cases of one family, or as many as `seconds` allows (in rounds of 100 cases,
    each round with its own seed, so that hypothesis never draws cases it cannot run)."""
    strategy = FAMILIES[family](backend)
    seed = os.environ.get("OOC_FUZZ_SEED")
    deadline = time.monotonic() + seconds if seconds else None

    def one_round(examples, round_seed):
        @settings(max_examples=examples, deadline=None, database=None, derandomize=round_seed is None,
                  suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.generate])
        @given(strategy)
        def drive(case):
            runner.run(case)

        if round_seed is not None:
            drive = hypothesis.seed(round_seed)(drive)
        drive()

    if deadline is None:
        one_round(count, int(seed) if seed is not None else None)
        return
    done, base = 0, int(seed) if seed is not None else 0
    while done < count and time.monotonic() < deadline:
        one_round(min(100, count - done), base + done)
        done += 100


def campaign(backend="host", count=None, seconds=None, families=tuple(FAMILIES)):
    if backend == "host":
        runner = Runner(memory_bytes=4 << 30)
    else:  # the child limits its address space itself, once its CUDA context exists (fuzz_worker.py)
        runner = Runner(memory_bytes=None, rss_bytes=6 << 30,
                        env=dict(os.environ, OOC_FUZZ_AS_HEADROOM=str(8 << 30), OOC_FUZZ_BACKEND=backend))
    try:
        for family in families:
            run_family(runner, family, backend, count or examples(),
                       seconds / len(families) if seconds else None)
    finally:
        runner.close()
    return runner


if __name__ == "__main__":  # python tests/fuzz/fuzz_campaign.py [backend] [seconds] [summary file]
    import sys

    backend = sys.argv[1] if len(sys.argv) > 1 else "host"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else None
    r = campaign(backend, seconds=seconds)
    text = r.summary()
    print(text)
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            f.write(text + "\n")
    sys.exit(1 if r.failures else 0)
