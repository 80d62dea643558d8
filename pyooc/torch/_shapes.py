"""Output shapes of pyooc's operations, for the fake (meta) kernels: torch.compile and opcheck
trace the ops with these, without running them. The same formulas as libooc's validation
(native/src/plan/conv_geometry.hpp), written for torch's symbolic sizes."""


def padding_ends(padding, spatial):
    """(before, after) per dimension of a convolution op's padding: `spatial` ints pad both ends
    alike; 2 * spatial ints are every dimension's before, then every dimension's after (torch's
    padding="same" with an even kernel, pyooc/torch/functional.py)."""
    padding = list(padding)
    if len(padding) == 2 * spatial:
        return list(zip(padding[:spatial], padding[spatial:]))
    return [(p, p) for p in padding]


def conv_output_shape(x_shape, w_shape, stride, padding, dilation):
    spatial = [(i + b + a - d * (k - 1) - 1) // s + 1
               for i, k, s, (b, a), d in zip(x_shape[2:], w_shape[2:], stride, padding_ends(padding, len(w_shape) - 2),
                                             dilation)]
    return [x_shape[0], w_shape[0], *spatial]


def conv_transpose_output_shape(x_shape, w_shape, stride, padding, output_padding, dilation, groups):
    spatial = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
               for i, k, s, p, op, d in zip(x_shape[2:], w_shape[2:], stride, padding, output_padding, dilation)]
    return [x_shape[0], w_shape[1] * groups, *spatial]


def pool_output_shape(x_shape, kernel, stride, padding):
    spatial = [(i + 2 * p - k) // s + 1 for i, k, s, p in zip(x_shape[2:], kernel, stride, padding)]
    return [x_shape[0], x_shape[1], *spatial]
