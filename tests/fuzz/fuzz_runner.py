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

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_worker.py")
FAILURES = ("crash", "hang", "blowup", "wrong_kind", "wrong_result", "modified", "case_error")


class Runner:
    def __init__(self, case_seconds=20.0, memory_bytes=4 << 30, env=None):
        self.case_seconds = case_seconds
        self.memory_bytes = memory_bytes
        self.env = env
        self.child = None
        self.counts = collections.Counter()
        self.failures = []  # (outcome, detail, case)

    def _start(self):
        limit = self.memory_bytes

        def limits():
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
        with selectors.DefaultSelector() as sel:
            sel.register(self.child.stdout, selectors.EVENT_READ)
            ready = sel.select(self.case_seconds)
        if not ready:
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
        self.counts["cases"] += 1
        self.counts[r["outcome"]] += 1
        if r["outcome"] in FAILURES:
            self.failures.append((r["outcome"], r["detail"], case))
        return r

    def close(self):
        self._stop()

    def summary(self):
        c = self.counts
        line = (f"fuzz: {c['cases']} cases, {c['crash']} crashes, {c['hang']} hangs, {c['blowup']} blow-ups, "
                f"{c['wrong_kind']} wrong kinds, {c['wrong_result']} wrong results, {c['modified']} modified inputs, "
                f"{c['case_error']} case errors")
        out = [line]
        for outcome, detail, case in self.failures[:30]:
            out.append(f"  {outcome}: {detail[:300]}\n    reproducer: {reproducer(case)}")
        return "\n".join(out)


def reproducer(case):
    """A shell command that replays a case in a fresh interpreter, from the repository root."""
    text = json.dumps(case).replace("'", "'\\''")
    return (f"python -c 'import json, sys; sys.path.insert(0, \"tests/fuzz\"); import fuzz_worker; "
            f"print(fuzz_worker.run_case(json.loads(sys.argv[1])))' '{text}'")
