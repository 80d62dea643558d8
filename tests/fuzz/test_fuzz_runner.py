"""The fuzz runner tells a crash, a hang and a memory blow-up of one case from the cases around it,
and keeps going with a fresh child (fuzz_runner.py)."""

from fuzz_runner import Runner


def self_test(fn):
    return {"fn": fn, "args": [], "kwargs": {}, "check": "any", "bad": None}


def good():
    return {"fn": "plan_activation_forward", "args": [[2, 3, 4]], "kwargs": {"backend": "host"}, "check": "plan",
            "bad": None}


def test_runner_sees_crash_hang_and_blowup_and_recovers():
    runner = Runner(case_seconds=3.0, memory_bytes=2 << 30)
    try:
        outcomes = [runner.run(c)["outcome"] for c in
                    [good(), self_test("__crash__"), good(), self_test("__hang__"), good(), self_test("__blowup__"),
                     good()]]
    finally:
        runner.close()
    assert outcomes == ["result", "crash", "result", "hang", "result", "blowup", "result"], outcomes
    assert [f[0] for f in runner.failures] == ["crash", "hang", "blowup"]
    assert "reproducer" in runner.summary()
