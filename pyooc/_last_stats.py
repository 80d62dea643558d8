"""What the calling thread's last operation measured, kept for last_stats(). Every binding that
runs returns that record (pyooc/_native.pyx: _ran); the public functions pass it to record()."""

import threading

_last = threading.local()


def record(stats):
    """Keeps a run's stats (a dict holding the Plan it ran under "plan") for last_stats()."""
    _last.stats = stats


def last_stats():
    """What the calling thread's last call (any operation that ran: conv_forward, a gradient, a
    layer, a fused function) measured: bytes over each link direction, device bytes reserved,
    chunks, seconds by stage, and the Plan it ran ("plan")."""
    return getattr(_last, "stats", None)
