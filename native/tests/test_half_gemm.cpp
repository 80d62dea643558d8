// Half-precision GEMM (float16, bfloat16): plans stream two bytes an element and, where K is split
// over chunks, carry the reduction in a float32 device tile ("float32 c"), so that a split K
// rounds no more than an unsplit call. Run end to end on the host backend and, where a GPU is
// present, the cuda one (cublasGemmEx), against float64 references of the half-rounded inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "backend/host/host_elements.hpp"
#include "backend_fixtures.hpp"
#include "ooc/layers.hpp"

namespace {

using ooc::DType;

constexpr int64_t M = 37, K = 301, N = 29;  // none a power of two: every split has an uneven edge

struct HalfMatrix {
  std::vector<uint16_t> bits;
  std::vector<double> values;  // the half values, exactly
};

HalfMatrix random_half(DType dtype, int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(count));
  for (float& v : f) v = dist(rng);
  HalfMatrix m{std::vector<uint16_t>(f.size()), {}};
  ooc::host_elements::convert(DType::float32, f.data(), dtype, m.bits.data(), count);
  ooc::host_elements::convert(dtype, m.bits.data(), DType::float32, f.data(), count);
  m.values.assign(f.begin(), f.end());
  return m;
}

std::vector<double> as_doubles(DType dtype, const std::vector<uint16_t>& bits) {
  std::vector<float> f(bits.size());
  ooc::host_elements::convert(dtype, bits.data(), DType::float32, f.data(), static_cast<int64_t>(bits.size()));
  return {f.begin(), f.end()};
}

double rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

// c = a @ b^T + bias + 0.5 * c0 (F.linear's layout, blended into a prior c).
struct LinearCase {
  HalfMatrix a, b, bias, c0;
  std::vector<double> want;
};

LinearCase make_case(DType dtype) {
  std::mt19937 rng(7);
  LinearCase lc{random_half(dtype, M * K, rng), random_half(dtype, N * K, rng), random_half(dtype, N, rng),
                random_half(dtype, M * N, rng), std::vector<double>(M * N)};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += lc.a.values[i * K + k] * lc.b.values[j * K + k];
      lc.want[i * N + j] = s + lc.bias.values[j] + 0.5 * lc.c0.values[i * N + j];
    }
  return lc;
}

ooc::ConvProblem problem(DType dtype) { return ooc::matmul_problem({M, K}, {K, N}, 1.0, 0.5, true, dtype); }

// The largest budget whose plan splits M, N and K alike (halving from the unsplit plan's).
size_t splitting_budget(const ooc::ConvProblem& p, ooc::Options o) {
  for (size_t limit = size_t{1} << 20; limit > 256; limit /= 2) {
    o.memory_limit = limit;
    const ooc::Plan plan = ooc::plan_matmul(p, o);
    if (plan.splits_n > 1 && plan.splits_k > 1 && plan.splits_c > 1) return limit;
  }
  ADD_FAILURE() << "no budget splits M, N and K";
  return 0;
}

class HalfGemm : public ::testing::TestWithParam<std::tuple<ooc::BackendKind, DType>> {
 protected:
  void SetUp() override {
    if (backend() == ooc::BackendKind::cuda && !ooc_test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
  ooc::BackendKind backend() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  ooc::Options options(size_t limit) const { return ooc_test::options_for(backend(), limit); }

  // Runs the case under `limit`; returns the relative error of c against the float64 reference.
  double run(const LinearCase& lc, size_t limit, ooc::Plan* plan) const {
    std::vector<uint16_t> c = lc.c0.bits;
    ooc::matmul(problem(dtype()), false, true, lc.a.bits.data(), lc.b.bits.data(), lc.bias.bits.data(), c.data(),
                options(limit), plan);
    return rel_error(as_doubles(dtype(), c), lc.want);
  }
};

TEST_P(HalfGemm, SplittingKRoundsNoMoreThanOneChunk) {
  const LinearCase lc = make_case(dtype());
  ooc::Plan whole, split;
  const double whole_error = run(lc, size_t{64} << 20, &whole);
  ASSERT_EQ(whole.num_chunks(), 1u);
  EXPECT_EQ(whole.scratch_bytes, 0u) << "an unsplit K needs no float32 accumulator";
  const double split_error = run(lc, splitting_budget(problem(dtype()), options(0)), &split);
  ASSERT_GT(split.splits_c, 2);
  const double tolerance = dtype() == DType::float16 ? 1e-3 : 1e-2;
  EXPECT_LT(whole_error, tolerance);
  // Each partial sum rounded to half would add an error of the result's own rounding per K chunk.
  EXPECT_LE(split_error, whole_error * 1.05) << "K in " << split.splits_c << " chunks: " << split_error
                                             << ", unsplit: " << whole_error;
}

TEST_P(HalfGemm, WritesEveryElementOfAPoisonedOutput) {
  const LinearCase lc = make_case(dtype());
  const size_t limit = splitting_budget(problem(dtype()), options(0));
  const ooc::ConvProblem p = ooc::matmul_problem({M, K}, {K, N}, 1.0, 0.0, false, dtype());
  std::vector<uint16_t> c(M * N, 0x7fff);  // NaN in both dtypes; beta == 0 never reads it
  ooc::matmul(p, false, true, lc.a.bits.data(), lc.b.bits.data(), nullptr, c.data(), options(limit));
  const std::vector<double> got = as_doubles(dtype(), c);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += lc.a.values[i * K + k] * lc.b.values[j * K + k];
      ASSERT_NEAR(got[i * N + j], s, (dtype() == DType::float16 ? 2e-3 : 2e-2) * (std::abs(s) + 1)) << i << ", " << j;
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, HalfGemm,
                         ::testing::Combine(::testing::Values(ooc::BackendKind::host, ooc::BackendKind::cuda),
                                            ::testing::Values(DType::float16, DType::bfloat16)));

// The accumulator is planned memory: a slot of its own, inside the budget; the streamed tiles
// count two bytes an element.
TEST(HalfGemmPlan, TheFloat32AccumulatorIsASlotOfThePlan) {
  const ooc::Options o = ooc_test::host_options(0);
  const size_t limit = splitting_budget(problem(DType::float16), o);
  ooc::Options at = o;
  at.memory_limit = limit;
  const ooc::Plan plan = ooc::plan_matmul(problem(DType::float16), at);
  ASSERT_GT(plan.splits_c, 1);
  EXPECT_EQ(plan.scratch_bytes, (plan.tiling.n * plan.tiling.k * sizeof(float) + 255) / 256 * 256);
  bool found = false;
  for (const ooc::SlotPlan& s : plan.slots) found |= s.name == "float32 c" && s.bytes == plan.scratch_bytes;
  EXPECT_TRUE(found) << plan.describe();
  EXPECT_LE(plan.peak_device_bytes, limit);
  // Whole, the float32 plan moves twice the bytes of the half one.
  ooc::Options whole = o;
  whole.memory_limit = size_t{64} << 20;
  const ooc::Plan f32 = ooc::plan_matmul(problem(DType::float32), whole);
  const ooc::Plan f16 = ooc::plan_matmul(problem(DType::float16), whole);
  EXPECT_EQ(f16.bytes_h2d * 2, f32.bytes_h2d);
  EXPECT_EQ(f16.bytes_d2h * 2, f32.bytes_d2h);
}

// Backend::convert_on_device, the accumulator's way in and out: rounds to nearest even.
TEST(HalfGemmPlan, TheHostBackendConvertsBetweenDtypes) {
  const std::unique_ptr<ooc::Backend> host = ooc::make_host_backend();
  const std::vector<float> f = {1.0f, 1.0f + 1.0f / 4096, -2.5f, 65504.0f};
  std::vector<uint16_t> h(f.size(), 0xffff);
  host->convert_on_device(f.data(), DType::float32, h.data(), DType::float16, 4);
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3c00, 0x3c00, 0xc100, 0x7bff}));  // 1 + 2^-12 ties to even: 1
  std::vector<float> back(4, std::nanf(""));
  host->convert_on_device(h.data(), DType::float16, back.data(), DType::float32, 4);
  EXPECT_EQ(back, (std::vector<float>{1.0f, 1.0f, -2.5f, 65504.0f}));
}

}  // namespace
