"""Runs fuzz cases (fuzz_cases.py) in child processes (fuzz_worker.py), many per child for speed:
each case gets a time limit and every child a memory limit (RLIMIT_AS); a child that dies is that
case's crash, one that does not answer in time its hang (the child is killed and a fresh one
takes the next case). Outcomes are counted for the summary the suite reports."""

import collections
import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import time

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_worker.py")
FAILURES = ("crash", "hang", "blowup", "wrong_kind", "wrong_result", "modified", "case_error")


class Runner:
    def __init__(self, case_seconds=20.0, memory_bytes=4 << 30, rss_bytes=3 << 30, env=None):
        # memory_bytes: the child's RLIMIT_AS, or None (a CUDA context reserves far more address
        # space than it uses: on the GPU only the resident-memory watch, rss_bytes, applies).
        self.case_seconds = case_seconds
        self.memory_bytes = memory_bytes
        self.rss_bytes = rss_bytes
        self.env = env
        self.child = None
        self.counts = collections.Counter()
        self.failures = []  # (outcome, detail, case)
        log = os.environ.get("OOC_FUZZ_LOG")  # every case and its outcome, one JSON line each
        self.log = open(log, "a") if log else None

    def _start(self):
        limit = self.memory_bytes

        def limits():
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        self.child = subprocess.Popen([sys.executable, WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, preexec_fn=limits, env=self.env)

    def _stop(self):
        if self.child is not None:
            if self.child.poll() is None:
                os.kill(self.child.pid, signal.SIGKILL)
            self.child.wait()
            for f in (self.child.stdin, self.child.stdout, self.child.stderr):
                try:
                    f.close()
                except OSError:
                    pass
        self.child = None

    def run(self, case):
        """The outcome of one case: {"outcome", "detail"}; counted, and kept when it is a failure."""
        if self.child is None or self.child.poll() is not None:
            self._stop()
            self._start()
        try:
            self.child.stdin.write(json.dumps(case) + "\n")
            self.child.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        ready, rss = self._wait_for_answer()
        if rss is not None:
            r = {"outcome": "blowup", "detail": f"resident memory {rss >> 20} MiB, over {self.rss_bytes >> 20} MiB"}
            self._stop()
        elif not ready:
            r = {"outcome": "hang", "detail": f"no answer within {self.case_seconds} s"}
            self._stop()
        else:
            line = self.child.stdout.readline()
            if line:
                r = json.loads(line)
            else:
                rc = self.child.wait()
                err = self.child.stderr.read()[-800:]
                kind = "blowup" if "MemoryError" in err or "bad_alloc" in err else "crash"
                r = {"outcome": kind, "detail": f"child exited with {rc}: {err.strip()}"}
                self._stop()
        if self.log:
            self.log.write(json.dumps({"case": case, **r}) + "\n")
        self.counts["cases"] += 1
        self.counts[r["outcome"]] += 1
        if r["outcome"] in FAILURES:
            self.failures.append((r["outcome"], r["detail"], case))
        return r

    def _wait_for_answer(self):
        """(whether the child answered in time, its resident bytes when it passed rss_bytes first)."""
        deadline = time.monotonic() + self.case_seconds
        with selectors.DefaultSelector() as sel:
            sel.register(self.child.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False, None
                if sel.select(min(left, 0.25)):
                    return True, None
                rss = resident_bytes(self.child.pid)
                if rss > self.rss_bytes:
                    return False, rss

    def close(self):
        self._stop()
        if self.log:
            self.log.close()

    def summary(self):
        c = self.counts
        line = (f"fuzz: {c['cases']} cases ({c['result']} results checked, {c['expected']} expected exceptions), "
                f"{c['crash']} crashes, {c['hang']} hangs, {c['blowup']} blow-ups, "
                f"{c['wrong_kind']} wrong kinds, {c['wrong_result']} wrong results, {c['modified']} modified inputs, "
                f"{c['case_error']} case errors")
        out = [line]
        for outcome, detail, case in self.failures[:30]:
            out.append(f"  {outcome}: {detail[:300]}\n    reproducer: {reproducer(case)}")
        return "\n".join(out)


def resident_bytes(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def reproducer(case):
    """A shell command that replays a case in a fresh interpreter, from the repository root."""
    text = json.dumps(case).replace("'", "'\\''")
    return (f"python -c 'import json, sys; sys.path.insert(0, \"tests/fuzz\"); import fuzz_worker; "
            f"print(fuzz_worker.run_case(json.loads(sys.argv[1])))' '{text}'")
