"""Device-resident arrays read and written in place by the convolutions (marked gpu; skipped
without one): torch CUDA tensors through __cuda_array_interface__, alone and mixed with host
arrays, whole and split by small budgets, into NaN-poisoned device out= arrays, against float64
references; the producer's queued work is waited for. Needs a CUDA build of torch."""

import numpy as np
import pytest

import pyooc
from conftest import rel_err

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytestmark = pytest.mark.gpu

TOL = {np.float32: 1e-5, np.float16: 2e-3}


@pytest.fixture(autouse=True)
def cuda_torch():
    assert torch.cuda.is_available(), "the device-array tests need a CUDA build of torch"


def _ref(a):
    """A host array as a float64 CPU tensor, for the references."""
    return torch.from_numpy(np.asarray(a, np.float64))


def conv_ref(x, w, bias=None, padding=0):
    """F.conv2d/3d in float64 on the CPU."""
    conv = F.conv2d if x.ndim == 4 else F.conv3d
    return conv(_ref(x), _ref(w), None if bias is None else _ref(bias), padding=padding).numpy()


def on_device(a):
    return torch.from_numpy(a).cuda()


def poisoned_device(shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def host(t):
    return t.float().cpu().numpy()


@pytest.fixture
def problem(rng):
    x = rng.standard_normal((4, 16, 40, 43), dtype=np.float32)  # 440 KB: budgets of 400 KiB split it
    w = (rng.standard_normal((12, 16, 3, 3)) / 12).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    return x, w, b


# Which arguments live on the device: every mix a user meets.
MIXES = {"all": "xwbo", "x": "x", "w_and_bias": "wb", "out": "o", "x_and_out": "xo"}


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("memory_limit", [None, "400KiB"], ids=["whole", "split"])
def test_conv_forward_reads_and_writes_device_arrays_in_place(problem, mix, memory_limit):
    x, w, b = problem
    where = MIXES[mix]
    args = [on_device(a) if key in where else a for key, a in zip("xwb", (x, w, b))]
    out = poisoned_device((4, 12, 40, 43)) if "o" in where else np.full((4, 12, 40, 43), np.nan, np.float32)
    y = pyooc.conv_forward(*args, padding=1, out=out, memory_limit=memory_limit, backend="cuda")
    assert y is out  # the caller's own object comes back
    if memory_limit is not None:
        assert pyooc.last_stats()["chunks"] > 1
    assert rel_err(host(y) if "o" in where else y, conv_ref(x, w, b, padding=1)) < TOL[np.float32]


def test_a_fresh_result_of_device_inputs_is_a_host_array(problem):
    x, w, b = problem
    y = pyooc.conv_forward(on_device(x), on_device(w), on_device(b), padding=1, memory_limit="400KiB")
    assert isinstance(y, np.ndarray)
    assert rel_err(y, conv_ref(x, w, b, padding=1)) < TOL[np.float32]


def test_half_precision_device_arrays(problem):
    x, w, _ = problem
    xh, wh = x.astype(np.float16), w.astype(np.float16)
    out = poisoned_device((4, 12, 40, 43), torch.float16)
    pyooc.conv_forward(on_device(xh), on_device(wh), padding=1, out=out, memory_limit="200KiB")
    assert rel_err(host(out), conv_ref(xh, wh, padding=1)) < TOL[np.float16]


def test_unbatched_device_input_and_out(problem):
    x, w, b = problem
    out = poisoned_device((12, 40, 43))
    y = pyooc.conv_forward(on_device(x[0]), on_device(w), on_device(b), padding=1, out=out)
    assert y is out
    assert rel_err(host(out), conv_ref(x[:1], w, b, padding=1)[0]) < TOL[np.float32]


@pytest.mark.parametrize("memory_limit", [None, "400KiB"], ids=["whole", "split"])
def test_the_gradients_take_device_arrays(problem, rng, memory_limit):
    x, w, _ = problem
    dy = rng.standard_normal((4, 12, 40, 43), dtype=np.float32)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    wt = torch.from_numpy(w.astype(np.float64)).requires_grad_()
    F.conv2d(xt, wt, padding=1).backward(torch.from_numpy(dy.astype(np.float64)))

    dx = poisoned_device(x.shape)
    pyooc.conv_backward_data(on_device(dy), on_device(w), x.shape, padding=1, out=dx, memory_limit=memory_limit)
    assert rel_err(host(dx), xt.grad.numpy()) < TOL[np.float32]
    dw = pyooc.conv_backward_filter(on_device(x), dy, w.shape, padding=1, memory_limit=memory_limit)
    assert rel_err(dw, wt.grad.numpy()) < TOL[np.float32]
    db = poisoned_device((12,))
    pyooc.conv_backward_bias(on_device(dy), out=db, memory_limit=memory_limit)
    assert rel_err(host(db), dy.astype(np.float64).sum(axis=(0, 2, 3))) < TOL[np.float32]


def test_the_producers_queued_work_is_waited_for(problem):
    """torch exports no stream (the protocol's version 2): pyooc waits for the whole device, so a
    copy still queued on a side stream when the call starts has landed before x is read."""
    x, w, b = problem
    source = on_device(x)
    target = torch.zeros_like(source)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        big = torch.randn(4096, 4096, device="cuda")
        for _ in range(8):
            big = big @ big / 64  # keeps the side stream busy before the copy
        target.copy_(source)
    y = pyooc.conv_forward(target, w, b, padding=1)  # no synchronization by the caller
    assert rel_err(y, conv_ref(x, w, b, padding=1)) < TOL[np.float32]


def test_a_device_array_on_another_gpu_is_refused_by_name(problem):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    x, w, _ = problem
    with pytest.raises(ValueError, match="x is on cuda:1, but the call runs on device 0"):
        pyooc.conv_forward(torch.from_numpy(x).to("cuda:1"), w, device=0)


def test_inputs_are_not_modified(problem):
    x, w, b = problem
    xs, ws = on_device(x), on_device(w)
    pyooc.conv_forward(xs, ws, padding=1, memory_limit="400KiB")
    assert np.array_equal(host(xs), x) and np.array_equal(host(ws), w)


# The element-wise layers and pooling: device inputs and outputs, in place on the device, split.
LAYER_SHAPE = (4, 12, 40, 43)



@pytest.mark.parametrize("memory_limit", [None, "300KiB"], ids=["whole", "split"])
def test_activation_and_softmax_read_and_write_device_arrays(rng, memory_limit):
    x = rng.standard_normal(LAYER_SHAPE, dtype=np.float32)
    dy = rng.standard_normal(LAYER_SHAPE, dtype=np.float32)
    y = poisoned_device(LAYER_SHAPE)
    pyooc.activation_forward(on_device(x), "tanh", out=y, memory_limit=memory_limit)
    assert rel_err(host(y), np.tanh(x.astype(np.float64))) < TOL[np.float32]
    dx = pyooc.activation_backward(y, on_device(dy), on_device(x), "tanh", memory_limit=memory_limit)
    assert isinstance(dx, np.ndarray)  # a fresh result: a host array
    assert rel_err(dx, (1 - np.tanh(x.astype(np.float64)) ** 2) * dy) < 1e-4
    s = poisoned_device(LAYER_SHAPE)
    pyooc.softmax_forward(on_device(x), out=s, memory_limit=memory_limit)
    assert rel_err(host(s), torch.softmax(_ref(x), 1).numpy()) < TOL[np.float32]
    ds = poisoned_device(LAYER_SHAPE)
    pyooc.softmax_backward(s, on_device(dy), out=ds, memory_limit=memory_limit)
    xt = _ref(x).requires_grad_()
    torch.softmax(xt, 1).backward(_ref(dy))
    assert rel_err(host(ds), xt.grad.numpy()) < 1e-4


def test_in_place_on_the_device(rng):
    x = rng.standard_normal(LAYER_SHAPE, dtype=np.float32)
    xd = on_device(x)
    assert pyooc.activation_forward(xd, "relu", out=xd, memory_limit="300KiB") is xd
    assert np.array_equal(host(xd), np.maximum(x, 0))
    a = rng.standard_normal((1, 12, 1, 1), dtype=np.float32)
    c = on_device(x)
    pyooc.add_tensor(on_device(a), c, alpha=2.0, beta=0.5, out=c, memory_limit="300KiB")
    assert rel_err(host(c), 2.0 * a.astype(np.float64) + 0.5 * x) < TOL[np.float32]


@pytest.mark.parametrize("memory_limit", [None, "300KiB"], ids=["whole", "split"])
def test_pooling_reads_and_writes_device_arrays(rng, memory_limit):
    x = rng.standard_normal(LAYER_SHAPE, dtype=np.float32)
    y = poisoned_device((4, 12, 20, 21))
    pyooc.pool_forward(on_device(x), 2, mode="max", out=y, memory_limit=memory_limit)
    xt = _ref(x).requires_grad_()
    ref = torch.nn.functional.max_pool2d(xt, 2)
    assert rel_err(host(y), ref.detach().numpy()) < TOL[np.float32]
    dy = rng.standard_normal(tuple(ref.shape), dtype=np.float32)
    ref.backward(_ref(dy))
    dx = poisoned_device(LAYER_SHAPE)
    pyooc.pool_backward(y, on_device(dy), on_device(x), 2, mode="max", out=dx, memory_limit=memory_limit)
    assert rel_err(host(dx), xt.grad.numpy()) < TOL[np.float32]
