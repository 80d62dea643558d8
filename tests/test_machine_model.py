"""Planning for a GPU that is not present: plan_*(..., machine=) with a built-in name, a dict or a
file saved by `pyooc info --save-model`."""

import json

import pyooc
import pytest
from pyooc.machine import BUILTIN_MODELS, FIELDS


def test_plan_for_a_named_gpu_on_any_machine():
    plan = pyooc.plan_conv_forward((8, 64, 128, 128, 128), (64, 64, 3, 3, 3), padding=1, machine="h200")
    assert plan.backend == "cuda"
    assert plan.memory_limit == BUILTIN_MODELS["h200"]["memory_limit"]
    assert plan.machine == {f: BUILTIN_MODELS["h200"][f] for f in FIELDS}
    # The cuda backend's workspace allowance applies (the host backend's is 0).
    small = pyooc.plan_conv_forward((8, 64, 64, 64), (64, 64, 3, 3), padding=1, machine="h200", memory_limit="1GiB")
    assert small.memory_limit == 1 << 30 and small.peak_device_bytes <= 1 << 30


def test_the_model_changes_the_prediction():
    fast = dict(BUILTIN_MODELS["h200"])
    slow = dict(fast, h2d_bytes_per_s=fast["h2d_bytes_per_s"] / 10, d2h_bytes_per_s=fast["d2h_bytes_per_s"] / 10,
                bidir_bytes_per_s=fast["bidir_bytes_per_s"] / 10)
    shapes = ((16, 64, 128, 128), (64, 64, 3, 3))
    a = pyooc.plan_conv_forward(*shapes, padding=1, machine=fast, memory_limit="256MiB")
    b = pyooc.plan_conv_forward(*shapes, padding=1, machine=slow, memory_limit="256MiB")
    assert b.predicted_seconds > 3 * a.predicted_seconds


def test_every_plan_function_takes_machine():
    for name in pyooc.__all__:
        if name.startswith("plan_"):
            assert "machine" in __import__("inspect").signature(getattr(pyooc, name)).parameters, name
    plan = pyooc.plan_matmul((512, 256), (256, 128), machine="h200", memory_limit="256KiB")
    assert plan.backend == "cuda" and plan.num_chunks > 1


def test_a_saved_model_round_trips(tmp_path):
    path = tmp_path / "m.json"
    pyooc.save_machine_model(dict(BUILTIN_MODELS["h200"], flops_per_s=1e12), path)
    assert json.loads(path.read_text())["flops_per_s"] == 1e12
    plan = pyooc.plan_activation_forward((64, 64, 64, 64), machine=str(path))
    assert plan.machine["flops_per_s"] == 1e12 and plan.backend == "cuda"


def test_host_backend_with_a_model_uses_its_figures():
    model = dict(BUILTIN_MODELS["h200"], flops_per_s=1e9)
    plan = pyooc.plan_conv_forward((2, 3, 9, 9), (4, 3, 3, 3), backend="host", machine=model)
    assert plan.backend == "host" and plan.machine["flops_per_s"] == 1e9


def test_bad_models_are_refused_naming_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="one of \\['h200'\\]"):
        pyooc.plan_activation_forward((4, 4, 4, 4), machine="a100x")
    with pytest.raises(ValueError, match="machine lacks \\['flops_per_s'"):
        pyooc.plan_activation_forward((4, 4, 4, 4), machine={k: v for k, v in BUILTIN_MODELS["h200"].items()
                                                             if k != "flops_per_s"})
    with pytest.raises(ValueError, match="machine\\['h2d_bytes_per_s'\\] must be a positive"):
        pyooc.plan_activation_forward((4, 4, 4, 4), machine=dict(BUILTIN_MODELS["h200"], h2d_bytes_per_s=0))
    with pytest.raises(TypeError, match="machine must be a dict"):
        pyooc.plan_activation_forward((4, 4, 4, 4), machine=3)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="is not a machine model saved by"):
        pyooc.plan_activation_forward((4, 4, 4, 4), machine=str(bad))
