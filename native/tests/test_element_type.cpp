// The element type flows from the problem through plan, pipeline and backend: plans count its
// bytes, and a backend without a kernel for it refuses the chunk instead of misreading memory,
// freeing everything on the way out (the next float32 call runs).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend_fixtures.hpp"
#include "ooc/errors.hpp"
#include "ooc/fused.hpp"
#include "ooc/ooc.hpp"

namespace {

ooc::ConvProblem conv(ooc::DType dtype) {
  return ooc::ConvProblem::forward({4, 6, 20, 20}, {8, 6, 3, 3}, {1}, {1}, {1}, 1, 1.0, 0.0, false, dtype);
}

TEST(ElementType, HalfPrecisionPlansStreamHalfTheBytes) {
  const ooc::Options o = ooc_test::host_options(0);
  const ooc::Plan f32 = ooc::plan_conv_forward(conv(ooc::DType::float32), o);
  for (ooc::DType half : {ooc::DType::float16, ooc::DType::bfloat16}) {
    const ooc::Plan p = ooc::plan_conv_forward(conv(half), o);
    EXPECT_EQ(p.num_chunks(), f32.num_chunks()) << ooc::dtype_name(half);
    EXPECT_EQ(2 * p.bytes_h2d, f32.bytes_h2d) << ooc::dtype_name(half);
    EXPECT_EQ(2 * p.bytes_d2h, f32.bytes_d2h) << ooc::dtype_name(half);
    EXPECT_NE(p.describe().find(ooc::dtype_name(half)), std::string::npos);
  }
}

TEST(ElementType, TightBudgetsTileHalfPrecisionInFewerChunks) {
  const ooc::Options o = ooc_test::host_options(16 << 10);
  const ooc::Plan f32 = ooc::plan_conv_forward(conv(ooc::DType::float32), o);
  const ooc::Plan f16 = ooc::plan_conv_forward(conv(ooc::DType::float16), o);
  EXPECT_LT(f16.num_chunks(), f32.num_chunks());
  EXPECT_LE(f16.peak_device_bytes, o.memory_limit);
}

// The convolution kernels read half precision: all-ones float16 and bfloat16 inputs (exact in
// both) give the float32 call's sums, every output written.
TEST(ElementType, HalfPrecisionConvolutionsRunOnTheHostBackend) {
  const ooc::Options o = ooc_test::host_options(16 << 10);
  for (auto [dtype, one] : {std::pair{ooc::DType::float16, uint16_t{0x3c00}}, std::pair{ooc::DType::bfloat16,
                                                                                     uint16_t{0x3f80}}}) {
    const ooc::ConvProblem p = conv(dtype);
    std::vector<uint16_t> x(p.x_elements(), one), w(p.w_elements(), one), y(p.y_elements(), 0xffff);
    ooc::Plan plan;
    ooc::conv_forward(p, x.data(), w.data(), nullptr, y.data(), o, &plan);
    EXPECT_GT(plan.num_chunks(), 1u);
    EXPECT_EQ(plan.splits_c, 1) << "a half call keeps its reduction over C inside a chunk";
    const uint16_t v54 = dtype == ooc::DType::float16 ? 0x52c0 : 0x4258, v24 = dtype == ooc::DType::float16 ? 0x4e00
                                                                                                            : 0x41c0;
    EXPECT_EQ(y[10 * 20 + 10], v54) << ooc::dtype_name(dtype);  // y[0, 0, 10, 10]: 6 channels x 9 taps
    EXPECT_EQ(y[0], v24) << ooc::dtype_name(dtype);             // a corner: 6 channels x 4 taps
  }
}

// The fused backward of a half call streams half tensors but keeps dw and db in float32 on the
// device (the same kept bytes as a float32 call), brings them back as float32, and reserves the
// workspace where the cuda backend computes each chunk's half partial dw.
TEST(ElementType, TheFusedBackwardKeepsDwAndDbInFloat32) {
  const ooc::Options o = ooc_test::host_options(0);
  auto problem = [](ooc::DType dtype) {
    return ooc::ConvProblem::backward_data({4, 8, 20, 20}, {8, 6, 3, 3}, {4, 6, 20, 20}, {1}, {1}, {1}, 1, 1.0, 0.0,
                                           dtype);
  };
  const ooc::Plan f32 = ooc::plan_conv_backward_data_filter_bias(problem(ooc::DType::float32), o);
  for (ooc::DType half : {ooc::DType::float16, ooc::DType::bfloat16}) {
    const ooc::ConvProblem p = problem(half);
    const ooc::Plan h = ooc::plan_conv_backward_data_filter_bias(p, o);
    EXPECT_EQ(h.kept_bytes, f32.kept_bytes) << ooc::dtype_name(half);
    EXPECT_EQ(2 * h.bytes_h2d, f32.bytes_h2d) << ooc::dtype_name(half);
    EXPECT_EQ(h.bytes_d2h, static_cast<size_t>(p.x_elements() * 2 + (p.w_elements() + p.k) * 4))
        << ooc::dtype_name(half);
    // dw of one c-tile in half: k x c-tile x the 3x3 kernel, 2 bytes each.
    EXPECT_GE(h.workspace_bytes, f32.workspace_bytes + static_cast<size_t>(p.k * h.tiling.c * 9 * 2))
        << ooc::dtype_name(half);
  }
}

// A backend without a kernel for a dtype refuses the chunk instead of misreading memory: the cuda
// backend's own activation kernels (the modes cuDNN lacks) are float32 only. (The host backend has
// a kernel for every dtype of every operation now; the GEMM was its last float32-only one.)
TEST(ElementType, TheCudaBackendRefusesAChunkItHasNoKernelFor) {
  if (!ooc_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::unique_ptr<ooc::Backend> cuda = ooc::make_cuda_backend(0);
  ooc::ChunkConv shape;
  shape.dtype = shape.out_dtype = ooc::DType::float16;
  std::vector<uint16_t> x(1, 0x3c00), y(1, 0);
  try {
    // Refused before any memory is touched, so host vectors serve as the chunk's buffers.
    cuda->activation_forward(shape, ooc::ActivationMode::gelu, 0.0, x.data(), y.data(), 1.0, 0.0);
    FAIL() << "a float16 gelu chunk ran on float32 kernels";
  } catch (const ooc::not_supported& e) {
    EXPECT_NE(std::string(e.what()).find("float16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(y[0], 0) << "nothing written";
}

}  // namespace
