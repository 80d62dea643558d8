"""How every peer is timed: wall-clock runs after a warm-up, reported as their median."""

import statistics
import time

from _console import log


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


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


def timed_after_warmup(fn, warm_seconds, repeats, max_run_seconds, sync=None):
    """The timed repeats; where one warm-up run already took longer than max_run_seconds, that run
    stands alone (the device machine kills a command at 10 minutes)."""
    if warm_seconds > max_run_seconds:
        log(f"  one run took {warm_seconds:.1f} s > --max-run-seconds {max_run_seconds}: not repeated")
        return [warm_seconds]
    return timed_runs(fn, repeats, warmup=0, sync=sync)
