"""Output shapes of pyooc's operations, for the fake (meta) kernels: torch.compile and opcheck
trace the ops with these, without running them. The same formulas as libooc's validation
(native/src/plan/conv_geometry.hpp), written for torch's symbolic sizes."""


def conv_output_shape(x_shape, w_shape, stride, padding, dilation):
    spatial = [(i + 2 * p - d * (k - 1) - 1) // s + 1
               for i, k, s, p, d in zip(x_shape[2:], w_shape[2:], stride, padding, dilation)]
    return [x_shape[0], w_shape[0], *spatial]


def conv_transpose_output_shape(x_shape, w_shape, stride, padding, output_padding, dilation, groups=1):
    spatial = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
               for i, k, s, p, op, d in zip(x_shape[2:], w_shape[2:], stride, padding, output_padding, dilation)]
    return [x_shape[0], w_shape[1] * groups, *spatial]


def pool_output_shape(x_shape, kernel, stride, padding):
    spatial = [(i + 2 * p - k) // s + 1 for i, k, s, p in zip(x_shape[2:], kernel, stride, padding)]
    return [x_shape[0], x_shape[1], *spatial]
