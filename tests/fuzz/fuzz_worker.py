"""The fuzz suite's child process: runs cases (fuzz_cases.py) read one JSON line at a time from
stdin and answers each with one JSON line {"outcome": ..., "detail": ...} on stdout. The parent
(fuzz_runner.py) limits its memory (RLIMIT_AS) and the time of each case, and treats a child that
dies or stops answering as that case's crash or hang.

Outcomes: "result" (a result that passed its check), "expected" (an expected exception), "wrong_kind" (an
exception of another kind, or an expected kind with a library-internal message), "wrong_result",
"modified" (an input was written), "blowup" (a MemoryError that is no budget refusal)."""

import json
import os
import resource
import sys

import numpy as np

import pyooc

EXPECTED = (ValueError, TypeError, MemoryError, NotImplementedError)
# Messages of library internals that must never reach a caller (issue 13): each is a bug.
INTERNAL = ("region copy", "exceeds int", "logic_error", "std::", "bad_alloc", "internal", "nothing fits and")


def dtype_of(name):
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(name)


def build(v, kwargs):
    """The Python value a case's description stands for."""
    if isinstance(v, dict):
        if "array" in v:
            rng = np.random.default_rng(v["seed"])
            a = rng.standard_normal(v["array"]).astype(dtype_of(v.get("dtype", "float32")))
            if v.get("layout") == "channels_last" and a.ndim >= 3:
                # The same logical (N, C, ...) array with C innermost in memory: what torch's
                # channels_last tensors hand over.
                a = np.moveaxis(np.ascontiguousarray(np.moveaxis(a, 1, -1)), -1, 1)
            return a
        if "abs" in v:
            return np.abs(build(v["abs"], kwargs)) + np.float32(0.5)
        if "np_str" in v:
            return np.str_(v["np_str"])
        if "np_int" in v:
            return np.int64(v["np_int"])
        if "np_float" in v:
            return np.float64(v["np_float"])
        if "pool_of" in v:
            # y = pool(x) for pool_backward, with the case's mode unless that is the bad argument.
            x = build(v["pool_of"], kwargs)
            mode = kwargs.get("mode")
            mode = mode if mode in ("max", "avg", "avg_exclude_pad") else "max"
            return pyooc.pool_forward(x, v["kernel"], stride=v["stride"], mode=mode, backend="host")
        if "pool_dy" in v:
            return None  # filled in by run_call: dy has y's shape
        return {k: build(x, kwargs) for k, x in v.items()}
    if isinstance(v, list):
        return [build(x, kwargs) for x in v]
    return v


def materialize(c):
    kwargs = {k: build(v, c["kwargs"]) for k, v in c["kwargs"].items()}
    args = [build(a, c["kwargs"]) for a in c["args"]]
    for i, a in enumerate(c["args"]):
        if isinstance(a, dict) and "pool_dy" in a:
            y = args[0]
            dy = np.empty_like(y)  # y's dtype and layout
            dy[...] = np.random.default_rng(a["pool_dy"]).standard_normal(np.shape(y))
            args[i] = dy
    return args, kwargs


def arrays_of(values):
    return [v for v in values if isinstance(v, np.ndarray)]


def results_of(r):
    if isinstance(r, np.ndarray):
        return [r]
    if isinstance(r, (tuple, list)):
        return [x for x in r if isinstance(x, np.ndarray)]
    return []


def tolerance(a):
    """Half results may round a unit apart when another chunking picks another algorithm (GPU)."""
    return 1e-4 if np.asarray(a).dtype.itemsize >= 4 else 2e-2


def close(a, b, tol=None):
    tol = tolerance(a) if tol is None else tol
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a64.shape != b64.shape:
        return False
    if not (np.isfinite(a64).all() and np.isfinite(b64).all()):
        return bool(np.array_equal(np.isnan(a64), np.isnan(b64)) and np.array_equal(a64[~np.isnan(a64)],
                                                                                     b64[~np.isnan(b64)]))
    scale = max(1.0, float(np.abs(b64).max(initial=0)))
    return bool(np.abs(a64 - b64).max(initial=0) <= tol * scale)


def reference(fn, args, kwargs):
    """float64 numpy results of the cases whose check is "reference"; None where there is none."""
    a = [np.asarray(x, np.float64) if isinstance(x, np.ndarray) else x for x in args]
    if fn == "matmul":
        return a[0] @ a[1]
    if fn == "add_tensor":
        return kwargs["alpha"] * a[0] + kwargs["beta"] * a[1]
    if fn == "activation_forward":
        x, mode = a[0], str(args[1])
        table = {"relu": lambda: np.maximum(x, 0), "sigmoid": lambda: 1 / (1 + np.exp(-x)), "tanh": lambda: np.tanh(x),
                 "swish": lambda: x / (1 + np.exp(-x))}
        return table[mode]() if mode in table else None
    if fn == "pool_forward":
        x, k = a[0], args[1]
        if kwargs.get("stride") not in (None, k) or kwargs["mode"] != "max":
            return None
        sd = x.ndim - 2
        out = [(e - k) // k + 1 for e in x.shape[2:]]
        if min(out) <= 0:
            return None
        trimmed = x[(slice(None), slice(None)) + tuple(slice(0, o * k) for o in out)]
        shape = list(x.shape[:2])
        for o in out:
            shape += [o, k]
        return trimmed.reshape(shape).max(axis=tuple(3 + 2 * i for i in range(sd)))
    if fn == "conv_forward":
        x, w = a[0], a[1]
        if (kwargs["stride"] != 1 or kwargs["padding"] != 0 or kwargs["dilation"] != 1 or kwargs.get("groups", 1) != 1
                or x.ndim != 3):
            return None
        n, c, length = x.shape
        k, _, kw = w.shape
        out = length - kw + 1
        if out <= 0:
            return None
        y = np.zeros((n, k, out))
        for j in range(kw):
            y += np.einsum("ncl,kc->nkl", x[:, :, j:j + out], w[:, :, j])
        if a[2] is not None:
            y += a[2][None, :, None]
        return y
    return None


def plan_sane(plan, kwargs):
    """What any Plan must satisfy: at least one chunk, a peak within its own budget, traffic."""
    problems = []
    if plan.num_chunks < 1:
        problems.append(f"num_chunks {plan.num_chunks}")
    limit = plan.memory_limit if hasattr(plan, "memory_limit") else None
    if limit and plan.peak_device_bytes > limit:
        problems.append(f"peak {plan.peak_device_bytes} > memory_limit {limit}")
    if plan.peak_device_bytes <= 0:
        problems.append(f"peak {plan.peak_device_bytes}")
    if plan.bytes_d2h <= 0:
        problems.append(f"bytes_d2h {plan.bytes_d2h}")
    str(plan)
    return problems


# Cases that test the runner itself (test_fuzz_runner.py): it must see a crash, a hang and a blow-up.
SELF_TESTS = {"__crash__": lambda: __import__("os").abort(), "__hang__": lambda: __import__("time").sleep(3600),
              "__blowup__": lambda: bytearray(8 << 30)}


def run_case(c):
    """One case's outcome, as the dict the parent reads."""
    if c["fn"] in SELF_TESTS:
        SELF_TESTS[c["fn"]]()
    try:
        args, kwargs = materialize(c)
    except Exception as e:  # a description the test itself cannot build: its bug, not the library's
        return {"outcome": "case_error", "detail": f"{type(e).__name__}: {e}"}
    inputs = arrays_of(args) + arrays_of(kwargs.values())
    before = [x.copy() for x in inputs]
    fn = getattr(pyooc, c["fn"])
    try:
        r = fn(*args, **kwargs)
    except EXPECTED as e:
        msg = str(e)
        # A refused budget, or an output the call asks for that host memory cannot hold (numpy's
        # "Unable to allocate", within the address-space limit): anything else is a blow-up.
        if isinstance(e, MemoryError) and not any(m in msg for m in ("memory_limit", "budget", "Unable to allocate")):
            return {"outcome": "blowup", "detail": f"{type(e).__name__}: {msg}"}
        if not msg or any(m in msg for m in INTERNAL):
            return {"outcome": "wrong_kind", "detail": f"{type(e).__name__}: {msg}"}
        outcome, detail = "expected", f"{type(e).__name__}: {msg}"
    except Exception as e:  # noqa: BLE001 - every other kind is the failure this suite looks for
        return {"outcome": "wrong_kind", "detail": f"{type(e).__name__}: {e}"}
    else:
        outcome, detail = "result", ""
        if c["check"] == "plan":
            problems = plan_sane(r, kwargs)
            if problems:
                return {"outcome": "wrong_result", "detail": "; ".join(problems)}
        elif c["check"] in ("chunks", "reference"):
            got = results_of(r)
            if c["check"] == "reference":
                want = reference(c["fn"], args, kwargs)
                want = [want] if want is not None else None
            else:
                want = None
            if want is None:  # the same call in one chunk
                whole = dict(kwargs, memory_limit=1 << 30)
                want = results_of(fn(*[x.copy() if isinstance(x, np.ndarray) else x for x in args], **whole))
            if len(got) != len(want) or not all(close(g, w) for g, w in zip(got, want)):
                diffs = [float(np.abs(np.asarray(g, np.float64) - w).max(initial=0)) if np.shape(g) == np.shape(w)
                         else f"shape {np.shape(g)} vs {np.shape(w)}" for g, w in zip(got, want)]
                return {"outcome": "wrong_result", "detail": f"max differences {diffs}"}
    for x, b in zip(inputs, before):
        if not np.array_equal(x, b, equal_nan=True):
            return {"outcome": "modified", "detail": "an input array was written"}
    return {"outcome": outcome, "detail": detail}


def limit_address_space_after_init():
    """On the GPU the parent sets no RLIMIT_AS (a CUDA context reserves far more address space than
    it uses): the child creates its context and pipeline first, then limits what it may add to
    OOC_FUZZ_AS_HEADROOM bytes, so that an output too large for host memory fails at once here too."""
    headroom = os.environ.get("OOC_FUZZ_AS_HEADROOM")
    if not headroom:
        return
    backend = os.environ.get("OOC_FUZZ_BACKEND", "auto")
    x = np.ones((2, 3, 64), np.float32)
    for limit in (None, 1024):
        try:
            pyooc.activation_forward(x, "relu", memory_limit=limit, backend=backend)
        except Exception:  # noqa: BLE001 - no GPU: nothing to warm up
            pass
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = size + int(headroom)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main():
    limit_address_space_after_init()
    for line in sys.stdin:
        c = json.loads(line)
        try:
            r = run_case(c)
        except MemoryError as e:  # the address-space limit reached outside a refused budget
            r = {"outcome": "blowup", "detail": f"MemoryError: {e}"}
        except Exception as e:  # noqa: BLE001 - the reference or the one-chunk run raised
            r = {"outcome": "wrong_kind", "detail": f"{type(e).__name__} in the check: {e}"}
        sys.stdout.write(json.dumps(r) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
