"""Every plan carries its device memory as one table of named slots (Plan.slots), laid out once by
the planner: the table adds up to the plan's peak, names the operation's own tensors, and holds the
fused backward's kept and carried pieces, which its pipeline reads instead of recomputing them."""
import numpy as np
import pytest

import pyooc

BUDGETS = (None, "256KiB", "48KiB")

# (plan function, positional shapes, keywords, the tensors its slots must name)
CASES = [
    ("plan_conv_forward", ((4, 6, 20, 20), (8, 6, 3, 3)), {"padding": 1, "bias": True}, {"x", "w", "y", "bias"}),
    ("plan_conv_backward_data", ((4, 8, 20, 20), (8, 6, 3, 3), (4, 6, 20, 20)), {"padding": 1}, {"dx", "w", "dy"}),
    ("plan_conv_backward_filter", ((4, 6, 20, 20), (4, 8, 20, 20), (8, 6, 3, 3)), {"padding": 1}, {"x", "dw", "dy"}),
    ("plan_conv_backward_bias", ((4, 8, 20, 20),), {}, {"dy", "db"}),
    ("plan_matmul", ((96, 80), (80, 72)), {"bias": True}, {"a", "b", "c", "bias"}),
    ("plan_batchnorm_forward_training", ((4, 6, 20, 20),), {}, {"x", "y", "coefficients"}),
    ("plan_batchnorm_backward", ((4, 6, 20, 20),), {}, {"x", "dy", "dx", "coefficients"}),
    ("plan_pool_forward", ((4, 6, 20, 20), 3), {"stride": 2, "padding": 1}, {"x", "y"}),
    ("plan_pool_backward", ((4, 6, 20, 20), 3), {"stride": 2, "padding": 1}, {"x", "dx", "y", "dy"}),
    ("plan_activation_forward", ((4, 6, 20, 20),), {}, {"x", "y"}),
    ("plan_activation_backward", ((4, 6, 20, 20),), {}, {"y", "dy", "x", "dx"}),
    ("plan_softmax_forward", ((4, 6, 20, 20),), {}, {"x", "y"}),
    ("plan_softmax_backward", ((4, 6, 20, 20),), {}, {"y", "dy", "dx"}),
    ("plan_add_tensor", ((1, 6, 1, 1), (4, 6, 20, 20)), {}, {"a", "c", "out"}),
    ("plan_conv_bias_activation_forward", ((4, 6, 20, 20), (8, 6, 3, 3)), {"padding": 1}, {"x", "w", "y", "bias"}),
    ("plan_conv_bias_activation_pooling_forward", ((4, 6, 20, 20), (8, 6, 3, 3)),
     {"padding": 1, "pool_kernel": 2}, {"x", "w", "y", "bias", "pooled tile"}),
    ("plan_deconv_bias_activation_forward", ((4, 8, 10, 10), (8, 6, 3, 3)), {"stride": 2}, {"dx", "w", "dy", "bias"}),
    ("plan_conv_backward_data_filter_bias", ((4, 6, 20, 20), (4, 8, 20, 20), (8, 6, 3, 3)), {"padding": 1},
     {"x", "w", "dy", "dx", "dw[0]", "db"}),
    ("plan_activation_conv_backward_data_filter_bias", ((4, 6, 20, 20), (4, 8, 20, 20), (8, 6, 3, 3)),
     {"padding": 1, "activation": "elu", "pre": True}, {"x", "w", "dy", "y", "pre", "dx", "dw[0]", "db"}),
    ("plan_pooling_activation_conv_backward_data_filter_bias", ((4, 6, 20, 20), (4, 8, 20, 20), (8, 6, 3, 3)),
     {"padding": 1, "pool_kernel": 2}, {"x", "w", "dq", "q", "y", "dx", "dw[0]", "db", "dz", "pooled dy"}),
]


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name, shapes, keywords, tensors", CASES, ids=[c[0] for c in CASES])
def test_slot_table_adds_up_to_the_peak_and_names_the_operations_tensors(name, shapes, keywords, tensors, budget):
    plan = getattr(pyooc, name)(*shapes, **keywords, memory_limit=budget, backend="host")
    slots = plan.slots
    laid_out = sum(s["buffers"] * s["bytes"] for s in slots) + plan.workspace_bytes
    assert laid_out == plan.peak_device_bytes
    assert plan.peak_device_bytes <= plan.memory_limit
    assert tensors <= {s["name"] for s in slots}
    for s in slots:
        assert s["kind"] in ("streamed", "kept", "scratch")
        assert s["bytes"] % 256 == 0 and s["buffers"] >= 1
        if s["bytes"]:
            assert f"({s['name']}" in str(plan)  # describe() prints the same table


def _pieces(slots, kind):
    return sorted((s["offset"], s["offset"] + s["bytes"], s["name"]) for s in slots if s["kind"] == kind)


@pytest.mark.parametrize("budget", ["96KiB", "40KiB", "24KiB"])
def test_fused_backward_records_its_kept_and_carried_layout(budget):
    """dw per c-tile and db are kept, the dx rows two spatial tiles share are carried: each piece is
    as large as the chunks need and the pieces tile their blocks without overlapping."""
    x_shape, dy_shape, w_shape = (2, 6, 40, 12), (2, 8, 40, 12), (8, 6, 3, 3)
    plan = pyooc.plan_conv_backward_data_filter_bias(x_shape, dy_shape, w_shape, padding=1, memory_limit=budget,
                                                     backend="host")
    slots = plan.slots
    c_tile = plan.tiles["c"]
    c_tiles = -(-x_shape[1] // c_tile)
    kept = _pieces(slots, "kept")
    assert [n for _, _, n in kept] == [f"dw[{j}]" for j in range(c_tiles)] + ["db"]
    for begin, end, name in kept:
        if name.startswith("dw["):
            j = int(name[3:-1])
            c = min(c_tile, x_shape[1] - j * c_tile)
            assert end - begin >= 8 * c * 9 * 4
    for kind in ("kept", "scratch"):
        pieces = _pieces(slots, kind)
        assert all(a_end <= b_begin for (_, a_end, _), (b_begin, _, _) in zip(pieces, pieces[1:]))
    carried = [s for s in slots if s["name"].startswith("carried dx[")]
    assert len(carried) == c_tiles
    if plan.splits["h"] > 1:  # rows shared by consecutive tiles: 2 (kernel 3, stride 1) per n and c
        for s in carried:
            j = int(s["name"][len("carried dx["):-1])
            c = min(c_tile, x_shape[1] - j * c_tile)
            assert s["bytes"] >= plan.tiles["n"] * c * 2 * x_shape[3] * 4
    else:
        assert all(s["bytes"] == 0 for s in carried)


def test_a_fused_backward_with_a_spatial_split_runs_from_its_recorded_layout():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 6, 40, 12), dtype=np.float32)
    dy = rng.standard_normal((2, 8, 40, 12), dtype=np.float32)
    w = rng.standard_normal((8, 6, 3, 3), dtype=np.float32)
    plan = pyooc.plan_conv_backward_data_filter_bias(x.shape, dy.shape, w.shape, padding=1, memory_limit="24KiB",
                                                     backend="host")
    assert plan.splits["h"] > 1 and any(s["bytes"] for s in plan.slots if s["name"].startswith("carried dx["))
    dx, dw, db = pyooc.conv_backward_data_filter_bias(x, dy, w, padding=1, memory_limit="24KiB", backend="host")
    whole = pyooc.conv_backward_data_filter_bias(x, dy, w, padding=1, backend="host")
    for got, want in zip((dx, dw, db), whole):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
