// The element type flows from the problem through plan, pipeline and backend: plans count its
// bytes, and a backend without a kernel for it refuses the chunk instead of misreading memory,
// freeing everything on the way out (the next float32 call runs).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend_fixtures.hpp"
#include "ooc/errors.hpp"
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

TEST(ElementType, TheHostBackendRefusesAChunkItHasNoKernelFor) {
  const ooc::Options o = ooc_test::host_options(16 << 10);
  const ooc::ConvProblem p = conv(ooc::DType::float16);
  std::vector<uint16_t> x(p.x_elements(), 0x3c00), w(p.w_elements(), 0x3c00), y(p.y_elements(), 0);
  try {
    // The public C++ entry points take float* until half-precision kernels exist.
    ooc::conv_forward(p, reinterpret_cast<const float*>(x.data()), reinterpret_cast<const float*>(w.data()), nullptr,
                      reinterpret_cast<float*>(y.data()), o);
    FAIL() << "a float16 chunk ran on float32 kernels";
  } catch (const ooc::not_supported& e) {
    EXPECT_NE(std::string(e.what()).find("float16"), std::string::npos) << e.what();
  }
  for (uint16_t v : y) ASSERT_EQ(v, 0);  // nothing written back
  const ooc::ConvProblem f = conv(ooc::DType::float32);
  std::vector<float> xf(f.x_elements(), 1.0f), wf(f.w_elements(), 1.0f), yf(f.y_elements(), 0.0f);
  ooc::conv_forward(f, xf.data(), wf.data(), nullptr, yf.data(), o);
  EXPECT_FLOAT_EQ(yf[10 * 20 + 10], 54.0f);  // y[0, 0, 10, 10], inside: 6 channels x 9 taps
  EXPECT_FLOAT_EQ(yf[0], 24.0f);            // a corner: 6 channels x 4 taps
}

}  // namespace
