"""`pyooc plan`, `bench`, `info` and their --help, run as a user runs them (a subprocess in an
empty directory, so the installed package is what runs)."""

import inspect
import json
import subprocess
import sys
import tempfile

import pyooc
import pytest

from test_package import run_cli


def test_plan_prints_the_plan_and_the_candidates_it_beat():
    r = run_cli("plan", "conv_forward", "--x", "2,3,9,9", "--w", "4,3,3,3", "--padding", "1",
                "--memory-limit", "20KiB", "--backend", "host")
    assert r.returncode == 0, r.stderr
    expected = pyooc.plan_conv_forward((2, 3, 9, 9), (4, 3, 3, 3), padding=1, memory_limit="20KiB", backend="host")
    assert str(expected) in r.stdout
    assert "candidate(s) fitted the budget of 20480 bytes" in r.stdout and "chosen: predicted" in r.stdout


def test_plan_json_matches_the_python_plan():
    r = run_cli("plan", "conv_backward_filter", "--x", "2,3,9,9", "--dy", "2,4,5,5", "--w", "4,3,3,3",
                "--stride", "2", "--padding", "1", "--memory-limit", "16KiB", "--backend", "host", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    plan = pyooc.plan_conv_backward_filter((2, 3, 9, 9), (2, 4, 5, 5), (4, 3, 3, 3), stride=2, padding=1,
                                           memory_limit="16KiB", backend="host")
    assert got["operation"] == "conv_backward_filter" and got["backend"] == "host"
    assert got["splits"] == plan.splits and got["num_chunks"] == plan.num_chunks
    assert got["peak_device_bytes"] == plan.peak_device_bytes and got["memory_limit"] == 16384
    assert got["predicted_seconds"] == pytest.approx(plan.predicted_seconds)
    assert got["candidates"][0]["predicted_seconds"] == pytest.approx(plan.predicted_seconds)


def test_plan_offers_every_plan_function_with_its_own_options():
    r = run_cli("plan", "--help")
    assert r.returncode == 0 and "example" in r.stdout
    names = [n[len("plan_"):] for n in pyooc.__all__ if n.startswith("plan_")]
    for name in names:
        assert name in r.stdout, name
    r = run_cli("plan", "conv_bias_activation_pooling_forward", "--help")
    assert r.returncode == 0
    params = inspect.signature(pyooc.plan_conv_bias_activation_pooling_forward).parameters
    for p in params:
        flag = "--" + (p[:-len("_shape")] if p.endswith("_shape") else p).replace("_", "-")
        assert flag in r.stdout, flag


def test_plan_pooling_with_a_required_kernel_and_a_tuple_option():
    r = run_cli("plan", "pool_forward", "--x", "2x3x8x8", "--kernel", "2,2", "--stride", "2", "--backend", "host")
    assert r.returncode == 0, r.stderr
    assert "pool" in r.stdout.lower()
    r = run_cli("plan", "pool_forward", "--x", "2x3x8x8", "--backend", "host")
    assert r.returncode == 2 and "--kernel" in r.stderr


def test_plan_errors_are_one_line_without_traceback():
    r = run_cli("plan", "conv_forward", "--x", "2,3,9,9", "--w", "4,5,3,3", "--backend", "host")
    assert r.returncode == 2
    assert "pyooc plan: ValueError" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("plan", "conv_forward", "--x", "2,3,9,9", "--w", "4,3,3,3", "--memory-limit", "1", "--backend", "host")
    assert r.returncode == 2 and "MemoryError" in r.stderr
    r = run_cli("plan", "conv_forward", "--x", "2,a", "--w", "4,3,3,3")
    assert r.returncode == 2 and "a shape is ints" in r.stderr


def test_plan_for_an_absent_gpu_by_name_and_from_a_saved_model():
    r = run_cli("plan", "conv_forward", "--x", "8,64,128,128,128", "--w", "64,64,3,3,3", "--padding", "1",
                "--machine", "h200", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["backend"] == "cuda" and got["machine"]["h2d_bytes_per_s"] == 54e9
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/model.json"
        r = run_cli("info", "--save-model", path, "--no-measure")
        assert r.returncode == 0 and f"to {path}" in r.stdout, r.stderr
        saved = json.load(open(path))
        r = run_cli("plan", "conv_forward", "--x", "2,3,9,9", "--w", "4,3,3,3", "--machine", path, "--json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["memory_limit"] == saved["memory_limit"]
        assert got["machine"]["flops_per_s"] == saved["flops_per_s"]


def test_info_shows_readable_versions_and_the_effective_budget():
    r = run_cli("info", "--no-measure")
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.strip().splitlines())
    major, minor = lines["cuda_runtime"].split(".")  # "13.0", not 13000
    assert int(major) >= 12 and int(minor) >= 0
    assert int(lines["memory_limit"]) > 0  # a number of bytes, not None
    if pyooc.device_count() == 0:  # (on a GPU it is 80% of the free memory at the time: no fixed value)
        assert int(lines["memory_limit"]) == pyooc.plan_activation_forward((1, 1, 1, 1)).memory_limit == 1 << 30
        assert "host backend" in lines["memory_limit_source"]


@pytest.mark.gpu
def test_info_measures_the_link_on_a_gpu():
    r = run_cli("info")
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.strip().splitlines())
    for key in ("link_h2d_GBps", "link_d2h_GBps", "link_bidir_GBps"):
        assert float(lines[key]) > 1.0, key


def test_bench_prints_a_table_and_says_when_it_runs_the_host_backend():
    r = run_cli("bench", "--repeat", "1")
    assert r.returncode == 0, r.stderr
    assert "pyooc s" in r.stdout and "roofline s" in r.stdout and "conv2d 3x3" in r.stdout and "relu" in r.stdout
    if pyooc.device_count() == 0:
        assert "no CUDA GPU here: running the host backend" in r.stdout


@pytest.mark.parametrize("command", ["plan", "bench", "info", "demo"])
def test_every_command_has_help_with_an_example(command):
    r = run_cli(command, "--help")
    assert r.returncode == 0 and "examples:" in r.stdout and f"pyooc {command}" in r.stdout


def test_the_pyooc_script_is_the_same_command():
    script = [sys.executable, "-c", "import sys; from pyooc.cli import main; sys.exit(main(sys.argv[1:]))"]
    r = subprocess.run(script + ["plan", "activation_forward", "--shape", "4,4,4,4", "--backend", "host"],
                       capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir())
    assert r.returncode == 0 and "Plan for" in r.stdout, r.stderr
