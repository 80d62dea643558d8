"""What pyooc says about the plans it runs: the `pyooc` logger and the host-fallback warning.

libooc reports every run's plan just before it runs (ooc::set_plan_observer, native/include/ooc/
ooc.hpp); this module is the observer. At DEBUG the `pyooc` logger records the plan, its predicted
time and the fastest candidates the planner's search costed against it (Plan.candidates). The
logger has a NullHandler, so nothing is printed unless the application configures logging, or
OOC_LOG names a level (OOC_LOG=debug), which attaches a stderr handler at that level.

A call with backend="auto" on a machine without a GPU runs on the host backend; one predicted to
take longer than FALLBACK_WARNING_SECONDS warns, once per process, before it starts."""

import logging
import os
import sys
import warnings

from pyooc._loader import load_native

_native = load_native()

logger = logging.getLogger("pyooc")
logger.addHandler(logging.NullHandler())

FALLBACK_WARNING_SECONDS = 10.0


class HostFallbackWarning(UserWarning):
    """A call with backend="auto" found no GPU and runs on the (much slower) host backend."""


def configure_from_environment(environ=os.environ):
    """OOC_LOG=debug|info|warning|error: log pyooc's records at that level to stderr."""
    level_name = environ.get("OOC_LOG", "").strip()
    if not level_name:
        return
    level = logging.getLevelName(level_name.upper())
    if not isinstance(level, int):
        warnings.warn(f"OOC_LOG={level_name!r} is no logging level (debug, info, warning, error); ignored",
                      stacklevel=2)
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)


def describe_candidates(plan):
    """One line per candidate the plan's search kept: the winner first, then those it beat."""
    lines = [f"{plan.candidates_fitting} candidate(s) fitted the budget of {plan.memory_limit} bytes; the fastest:"]
    for rank, c in enumerate(plan.candidates):
        label = "chosen" if rank == 0 else f"#{rank + 1}"
        lines.append(f"  {label}: predicted {c['predicted_seconds']:.4g} s, {c['chunks']} chunks, "
                     f"peak {c['peak_device_bytes']} device bytes")
    return "\n".join(lines)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _caller_stacklevel():
    """warnings.warn's stacklevel of the first frame outside pyooc: the user's line that called it."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep):
        frame, level = frame.f_back, level + 1
    return level


class _PlanObserver:
    """libooc's plan observer (pyooc/_native.pyx: set_plan_observer)."""

    def __init__(self):
        self.fallback_warned = False

    def _warns(self, predicted_seconds, automatic_chose_host):
        return automatic_chose_host and not self.fallback_warned and predicted_seconds > FALLBACK_WARNING_SECONDS

    def wants(self, predicted_seconds, automatic_chose_host):
        return self._warns(predicted_seconds, automatic_chose_host) or logger.isEnabledFor(logging.DEBUG)

    def observe(self, plan, automatic_chose_host):
        if self._warns(plan.predicted_seconds, automatic_chose_host):
            self.fallback_warned = True
            warnings.warn(
                f"no CUDA GPU is present, so backend='auto' runs {plan.operation} on the host backend (CPU "
                f"reference kernels), predicted to take {plan.predicted_seconds:.0f} s; pass backend='host' "
                f"to silence this, or run on a GPU machine (pyooc warns once per process)",
                HostFallbackWarning, stacklevel=_caller_stacklevel())
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("running %s on %s: predicted %.4g s\n%s\n%s", plan.operation, plan.backend,
                         plan.predicted_seconds, plan, describe_candidates(plan))


observer = _PlanObserver()


def install():
    _native.set_plan_observer(observer)
    configure_from_environment()


def log_plan(plan):
    """Logs a plan_* result at DEBUG (runs are logged by the observer)."""
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("planned %s on %s: predicted %.4g s\n%s\n%s", plan.operation, plan.backend,
                     plan.predicted_seconds, plan, describe_candidates(plan))
