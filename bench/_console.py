"""What a benchmark prints while it runs: log lines and progress bars, both on stderr, so that
stdout carries only the results table (printed last)."""

import sys


def log(message):
    print(message, file=sys.stderr, flush=True)


def progress(iterable=None, **kwargs):
    """tqdm on stderr (stdout stays for the results table); a plain iterator without tqdm."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a pyooc dependency
        return iterable
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)
