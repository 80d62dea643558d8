"""The fuzz suite in CI (issue 13, item 5): every public function and its plan_* twin, each case in a
child process with time and memory limits (fuzz_runner.py), on the host backend. A crash, hang,
memory blow-up, exception of the wrong kind, wrong result or modified input fails the test with
each failing case's reproducer. OOC_FUZZ_EXAMPLES=N runs N cases per family (default 400)."""

import pytest

from fuzz_campaign import campaign


@pytest.mark.parametrize("family", ["valid", "bad", "plans"])
def test_fuzz(family):
    runner = campaign("host", families=(family,))
    print(runner.summary())
    assert not runner.failures, runner.summary()
