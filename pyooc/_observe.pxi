# The observer of one call (ooc::CallObserver, native/include/ooc/types.hpp): Ctrl-C, CancelToken
# and progress (docs/interruptible_calls.md). Included by _native.pyx.
#
# libooc reports between chunks from the thread running the call, which has released the GIL. The
# report below is nogil and costs a clock read; it takes the GIL only when something needs it:
# every few milliseconds on the main thread to run pending signal handlers (PyErr_CheckSignals:
# Ctrl-C's KeyboardInterrupt), and when a progress bar or hook is due an update (at most every
# 0.1 s, plus the first and the last report).

from cpython.exc cimport PyErr_SetObject
from cpython.ref cimport PyObject
from libcpp cimport bool as cbool
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cdef extern from "Python.h":
    int PyErr_CheckSignals() nogil  # left with its error set: the binding's translation keeps it

# At most this often the GIL is taken for signals (an uncontended acquire costs about a
# microsecond: 0.1% of the call; every millisecond of the interval is latency a Ctrl-C waits, which
# the H200 showed against 5 ms chunks); more rarely when taking it was slow (another thread held
# it), so that the call never spends more than ~2% of its time waiting for the GIL.
cdef double _SIGNAL_INTERVAL = 0.001
cdef double _PROGRESS_INTERVAL = 0.1


cdef inline double _monotonic() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec + t.tv_nsec * 1e-9


cdef class CancelToken:
    """Cancels the calls it is given to (cancel=token), from any thread: each stops between two
    chunks, drains what is in flight, frees what it holds and raises pyooc.CancelledError; its out=
    array is partially written. A token stays cancelled: calls given it later raise at once."""
    cdef ooc.atomic_bool flag

    def __cinit__(self):
        self.flag.store(False)

    def cancel(self):
        """Asks every call running with this token (and every later one) to stop."""
        self.flag.store(True)

    @property
    def cancelled(self):
        return self.flag.load()

    def __repr__(self):
        return f"<pyooc.CancelToken cancelled={self.cancelled}>"


cdef struct _ObserverState:
    PyObject* owner            # the CallObserver (borrowed: it outlives the call)
    cbool main_thread          # signal handlers run on the main thread only
    cbool wants_progress       # False: progress is off for this call, nothing to decide or show
    cbool decided              # the first report has decided whether progress is shown
    cbool showing              # a bar or hook is being updated
    int64_t last_done
    double next_signal_check, signal_interval, next_progress


cdef cbool _on_chunk(void* context, const ooc.ChunkProgress* progress) noexcept nogil:
    cdef _ObserverState* st = <_ObserverState*>context
    cdef double now = _monotonic()
    cdef cbool due = st.main_thread and now >= st.next_signal_check
    if st.wants_progress:
        if not st.decided:
            due = True
        elif st.showing and progress.done != st.last_done and (
                now >= st.next_progress or progress.done == progress.total):
            due = True
    if not due:
        return True
    return _report(st, progress, now)


cdef cbool _report(_ObserverState* st, const ooc.ChunkProgress* progress, double asked) noexcept with gil:
    cdef double now = _monotonic()
    if st.main_thread and now >= st.next_signal_check:
        st.signal_interval = max(_SIGNAL_INTERVAL, 50 * (now - asked))
        st.next_signal_check = now + st.signal_interval
        if PyErr_CheckSignals() != 0:
            return False  # the handler raised (KeyboardInterrupt): stop, keeping its error
    if not st.wants_progress or (st.decided and not st.showing):
        return True
    error = None
    try:
        st.showing = (<object>st.owner).reporter.update(progress.done, progress.total, progress.predicted_seconds)
    except BaseException as e:  # a hook's exception stops the call and is what the caller sees
        error = e
    st.decided = True
    st.last_done = progress.done
    st.next_progress = now + _PROGRESS_INTERVAL
    if error is not None:
        PyErr_SetObject(type(error), error)
        return False
    return True


cdef class CallObserver:
    """What one call's ooc::Options::observer points to: the token's flag and the report above,
    with `reporter` (pyooc/progress.py's) deciding and drawing the progress. Made by
    pyooc/_call_args.py's call_options on the calling thread, held by the call's CallOptions."""
    cdef ooc.CallObserver c_obj
    cdef _ObserverState state
    cdef readonly object reporter, token

    def __cinit__(self, reporter, CancelToken token=None, bint main_thread=False):
        self.reporter = reporter
        self.token = token
        self.c_obj.cancel = &token.flag if token is not None else NULL
        self.c_obj.on_chunk = _on_chunk
        self.c_obj.context = &self.state
        self.state.owner = <PyObject*>self
        self.state.main_thread = main_thread
        self.state.wants_progress = reporter is not None and reporter.wanted
        self.state.decided = False
        self.state.showing = False
        self.state.last_done = -1
        self.state.signal_interval = _SIGNAL_INTERVAL
        self.state.next_signal_check = 0
        self.state.next_progress = 0

    cdef const ooc.CallObserver* native(self):
        return &self.c_obj
