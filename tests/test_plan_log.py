"""The pyooc logger (DEBUG: the plan, its predicted time and the candidates it beat), OOC_LOG, and
the warning when backend="auto" falls back to the host backend on a long problem."""

import logging
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pyooc
import pytest
from pyooc import _plan_log


def test_the_logger_has_a_null_handler_and_is_silent_by_default():
    logger = logging.getLogger("pyooc")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    r = subprocess.run([sys.executable, "-c", "import numpy as np, pyooc\n"
                        "pyooc.activation_forward(np.ones((2, 3, 4, 4), np.float32), 'relu', backend='host')"],
                       capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    assert "pyooc DEBUG" not in r.stderr and "running activation_forward" not in r.stderr, r.stderr


def test_a_run_logs_its_plan_and_the_candidates_it_beat(caplog, rng):
    x = rng.standard_normal((2, 3, 9, 9), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    with caplog.at_level(logging.DEBUG, logger="pyooc"):
        pyooc.conv_forward(x, w, padding=1, memory_limit="20KiB", backend="host")
    plan = pyooc.last_stats()["plan"]
    records = [r for r in caplog.records if r.name == "pyooc" and r.getMessage().startswith("running conv_forward")]
    assert len(records) == 1 and records[0].levelno == logging.DEBUG
    message = records[0].getMessage()
    assert str(plan) in message
    assert f"{plan.candidates_fitting} candidate(s) fitted the budget of 20480 bytes" in message
    assert "chosen: predicted" in message and "#2: predicted" in message


def test_candidates_are_the_fastest_first_and_the_winner_is_the_plan():
    plan = pyooc.plan_conv_forward((4, 8, 32, 32), (8, 8, 3, 3), padding=1, memory_limit="64KiB", backend="host")
    seconds = [c["predicted_seconds"] for c in plan.candidates]
    assert 2 <= len(seconds) <= 5 and seconds == sorted(seconds)
    assert plan.candidates_fitting >= len(seconds)
    assert seconds[0] == pytest.approx(plan.predicted_seconds, rel=1e-6)
    assert all(c["peak_device_bytes"] <= plan.memory_limit for c in plan.candidates)
    summaries = [tuple(c.values()) for c in plan.candidates]
    assert len(set(summaries)) == len(summaries), "candidates listed twice"


def test_plan_functions_log_too(caplog):
    with caplog.at_level(logging.DEBUG, logger="pyooc"):
        pyooc.plan_pool_forward((2, 3, 8, 8), 2, backend="host")
    assert any(r.getMessage().startswith("planned pool_forward on host") for r in caplog.records)


def test_nothing_is_logged_above_debug(caplog, rng):
    with caplog.at_level(logging.INFO, logger="pyooc"):
        pyooc.activation_forward(rng.standard_normal((2, 3, 4, 4), dtype=np.float32), "relu", backend="host")
    assert not [r for r in caplog.records if r.name == "pyooc"]


def test_ooc_log_debug_prints_plans_to_stderr():
    code = ("import numpy as np, pyooc\n"
            "pyooc.activation_forward(np.ones((2, 3, 4, 4), np.float32), 'relu', backend='host')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=tempfile.gettempdir(), env={**__import__("os").environ, "OOC_LOG": "debug"})
    assert r.returncode == 0, r.stderr
    assert "pyooc DEBUG: running activation_forward on host" in r.stderr and "chosen: predicted" in r.stderr


def test_ooc_log_with_a_bad_level_warns():
    with pytest.warns(UserWarning, match="OOC_LOG='loud' is no logging level"):
        _plan_log.configure_from_environment({"OOC_LOG": "loud"})


@pytest.fixture
def fresh_fallback_warning(monkeypatch):
    monkeypatch.setattr(_plan_log.observer, "fallback_warned", False)


@pytest.mark.skipif(pyooc.device_count() > 0, reason="backend='auto' falls back to the host only without a GPU")
def test_a_long_host_fallback_warns_once_with_its_predicted_time(fresh_fallback_warning, monkeypatch, rng):
    # The threshold lowered so that a small problem counts as long (the README's 4 GiB example is
    # predicted at ~1200 s on the host backend); the warning fires before the run, from the observer.
    x = rng.standard_normal((2, 3, 16, 16), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    predicted = pyooc.plan_conv_forward(x.shape, w.shape, padding=1).predicted_seconds
    monkeypatch.setattr(_plan_log, "FALLBACK_WARNING_SECONDS", predicted / 2)
    with pytest.warns(pyooc.HostFallbackWarning, match=r"no CUDA GPU is present, so backend='auto' runs "
                                                       r"conv_forward on the host backend.*predicted to take") as w1:
        pyooc.conv_forward(x, w, padding=1)
    assert len(w1) == 1 and w1[0].filename == __file__, "the warning points at the caller's line"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pyooc.conv_forward(x, w, padding=1)  # once per process


def test_no_fallback_warning_for_short_calls_or_an_explicit_host_backend(fresh_fallback_warning, monkeypatch, rng):
    x = rng.standard_normal((2, 3, 16, 16), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pyooc.conv_forward(x, w, padding=1)  # far below 10 s
        monkeypatch.setattr(_plan_log, "FALLBACK_WARNING_SECONDS", 0.0)
        pyooc.conv_forward(x, w, padding=1, backend="host")  # asked for the host: no surprise


def test_the_readme_example_is_predicted_long_on_the_host():
    plan = pyooc.plan_conv_forward((8, 64, 128, 128, 128), (64, 64, 3, 3, 3), padding=1, memory_limit="512MiB",
                                   backend="host")
    assert plan.predicted_seconds > _plan_log.FALLBACK_WARNING_SECONDS
