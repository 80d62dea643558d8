"""Channels-last arrays under a non-zero padding_mode (host backend): the two features meet in the
halo gather (a channels-last view is permuted into memory order with its border mode kept) and in
backward data's padded temporary (allocated in the call's layout). Each result against torch's
F.pad + convolution in float64, at budgets that split space unevenly, into NaN-poisoned
channels-last outputs, the inputs unchanged."""

import pytest

from layout_helpers import channels_last
from padding_mode_helpers import (CASES, DTYPES, MODES, OPERATIONS, conv_operation, random_inputs, run_every_budget,
                                  torch_reference)

# A 2-D and a 3-D case of the padding_mode suite: grouped, dilated, strided, uneven paddings.
SOME_CASES = ("2d_grouped_dilated", "3d")


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", SOME_CASES)
@pytest.mark.parametrize("mode", MODES)
def test_each_operation(rng, mode, case, dtype_name, operation):
    x_shape, w_shape, geometry = CASES[case]
    dtype, tol = DTYPES[dtype_name]
    x, w, dy = random_inputs(rng, x_shape, w_shape, geometry, dtype)
    ref = torch_reference(x, w, dy, x_shape, w_shape, geometry, mode)[OPERATIONS[operation]]
    plan, run, inputs = conv_operation(operation, channels_last(x), channels_last(w), channels_last(dy))
    options = dict(backend="host", padding_mode=mode, **geometry)
    run_every_budget(lambda m: plan(dtype=dtype_name, memory_limit=m, layout="channels_last", **options),
                     lambda m, out: run(out=out, memory_limit=m, **options), ref, dtype, tol, f"{mode} {operation}",
                     inputs, channels_last=True)
