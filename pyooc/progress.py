"""Progress and cancellation of the calls that run (docs/interruptible_calls.md).

Every operation that runs takes `progress=` and `cancel=` (added by `observed`, below, so that no
function spells them out) and, whatever it is given, stops on Ctrl-C within about one chunk,
raising KeyboardInterrupt once libooc has drained its queues and freed its memory:

- progress: None (the process default, set_progress(); initially "auto": a tqdm bar over chunks
  when the plan predicts more than AUTO_SECONDS and stderr is a terminal), True (a bar whatever
  the prediction or the terminal), False (none), or a callable hook(done, total) for notebooks and
  GUIs, called with done = 0 first, then as chunks complete (at most every 0.1 s), and done = total
  last when the call succeeds. An exception raised by the hook stops the call and propagates.
- cancel: a CancelToken; token.cancel() from any thread stops the call with pyooc.CancelledError.

A stopped call's out= array is partially written; the next call runs normally."""

import functools
import inspect
import sys
import threading
from contextvars import ContextVar

import tqdm

from pyooc._loader import load_native

_native = load_native()
CancelToken = _native.CancelToken

AUTO_SECONDS = 2.0  # an automatic bar for calls the plan predicts to take longer than this

_default = None  # set_progress's: None is "auto"
# The progress= and cancel= of the call running in this context (set by observed, read by
# _call_args.call_options when it builds the call's CallOptions).
_call = ContextVar("pyooc_call_controls", default=None)


def _check_progress(progress, name="progress"):
    if progress is None or isinstance(progress, bool) or callable(progress):
        return progress
    raise TypeError(f"{name} must be None, True, False or a callable hook(done, total), got {progress!r}")


def _check_cancel(cancel):
    if cancel is None or isinstance(cancel, CancelToken):
        return cancel
    raise TypeError(f"cancel must be a pyooc.CancelToken or None, got {type(cancel).__name__}")


def set_progress(progress):
    """The progress of calls given no progress= (see the module's doc): None ("auto"), True, False
    or a hook(done, total)."""
    global _default
    _default = _check_progress(progress)


def get_progress():
    """set_progress's value (None: "auto")."""
    return _default


class _Reporter:
    """Draws one call's progress: decides on the first report, then updates a tqdm bar or calls the
    hook; the observer (pyooc/_observe.pxi) calls update() with the GIL held."""

    def __init__(self, progress, name):
        self.progress = progress
        self.name = name
        self.wanted = progress is not False
        self.bar = None

    def update(self, done, total, predicted_seconds):
        """Shows done of total chunks; returns whether this call shows progress at all."""
        if callable(self.progress) and not isinstance(self.progress, bool):
            self.progress(done, total)
            return True
        if self.bar is None:
            auto = self.progress is None
            if auto and not (predicted_seconds > AUTO_SECONDS and _stderr_is_terminal()):
                return False
            self.bar = tqdm.tqdm(total=total, desc=self.name, unit="chunk", file=sys.stderr, leave=False,
                                 dynamic_ncols=True)
        self.bar.update(done - self.bar.n)
        if done >= total:
            self.close()
        return True

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _stderr_is_terminal():
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


class _Controls:
    __slots__ = ("reporter", "cancel")

    def __init__(self, progress, cancel, name):
        self.reporter = _Reporter(progress, name)
        self.cancel = cancel


def call_observer():
    """The CallObserver of the call being set up on this thread: its progress= and cancel= inside
    an observed function, else the process default and no token."""
    controls = _call.get()
    if controls is None:
        reporter, token = _Reporter(_default, None), None
    else:
        reporter, token = controls.reporter, controls.cancel
    return _native.CallObserver(reporter, token, threading.current_thread() is threading.main_thread())


def observed(function):
    """Adds progress= and cancel= (keyword-only, see the module's doc) to an operation that runs."""
    @functools.wraps(function)
    def call(*args, progress=None, cancel=None, **kwargs):
        progress = _check_progress(progress)
        if progress is None and cancel is None and _call.get() is not None:
            return function(*args, **kwargs)  # called by another operation: the outer call's controls
        controls = _Controls(_default if progress is None else progress, _check_cancel(cancel), function.__name__)
        reset = _call.set(controls)
        try:
            return function(*args, **kwargs)
        finally:
            _call.reset(reset)
            controls.reporter.close()  # an interrupted call's bar

    signature = inspect.signature(function)
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in ("progress", "cancel")]
    call.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *extra])
    call.__doc__ = (function.__doc__ or "") + (
        "\n\n    progress: None (set_progress's default: a bar for long calls on a terminal), True, False or a\n"
        "    hook(done, total); cancel: a pyooc.CancelToken. Ctrl-C or cancelling stops the call within about\n"
        "    one chunk (KeyboardInterrupt, pyooc.CancelledError), out= then partially written "
        "(pyooc.progress).")
    return call
