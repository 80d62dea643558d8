// GEMM (cuBLAS, full FP32) and batch norm (CUDA kernels) on the GPU, the same cases and float64
// references as the host tests; skipped without a CUDA device.
#include "layers_run.hpp"

namespace {

using namespace ooc_layers_test;

ooc::Options cuda() { return ooc_test::options_for(BackendKind::cuda); }

class CudaGemm : public ooc_test::GpuTest<::testing::TestWithParam<GemmCase>> {};

TEST_P(CudaGemm, MatchesFloat64Reference) {
  run_gemm_case(GetParam(), cuda());
}

INSTANTIATE_TEST_SUITE_P(Splits, CudaGemm,
                         ::testing::Values(GemmCase{7, 5, 9, false, false, false, 1.0, 0.0, 0},
                                           GemmCase{37, 29, 23, false, false, true, 1.0, 0.0, 4096},
                                           GemmCase{37, 29, 23, true, false, false, 0.5, 0.0, 3072},
                                           GemmCase{37, 29, 23, false, true, true, 1.0, 1.0, 3072},
                                           GemmCase{64, 300, 17, true, true, false, 2.0, -0.5, 2048},
                                           GemmCase{513, 1000, 257, false, false, true, 1.0, 0.0, 1 << 20}));

class CudaBatchnorm : public ooc_test::GpuTest<::testing::TestWithParam<BnCase>> {};

TEST_P(CudaBatchnorm, TrainingAndBackwardMatchFloat64) {
  run_bn_case(GetParam(), cuda());
}

INSTANTIATE_TEST_SUITE_P(Splits, CudaBatchnorm,
                         ::testing::Values(BnCase{{8, 3, 5, 7}, 0}, BnCase{{8, 3, 5, 7}, 4096},
                                           BnCase{{5, 4, 3, 4, 6}, 2048}, BnCase{{9, 6}, 1024},
                                           BnCase{{2, 3, 1000}, 3072}, BnCase{{16, 8, 33, 65}, 1 << 18}));

}  // namespace
