// ConvProblem::forward: argument validation (type of error, and a message naming the argument,
// in torch's wording where torch has one) and derived output sizes.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "ooc/errors.hpp"
#include "ooc/problem.hpp"
#include "test_util.hpp"

namespace {

using ooc::ConvProblem;
using ooc_test::names_argument;
using ooc_test::Shape;

ConvProblem make(const Shape& x, const Shape& w, const Shape& stride = {1}, const Shape& padding = {0},
                 const Shape& dilation = {1}, int64_t groups = 1) {
  return ConvProblem::forward(x, w, stride, padding, dilation, groups, 1.0, 0.0, false);
}

// Expects ooc::invalid_argument whose message names `argument` and contains `fragment`.
void expect_invalid(const std::function<void()>& call, const std::string& argument, const std::string& fragment = "") {
  try {
    call();
    ADD_FAILURE() << "expected ooc::invalid_argument naming '" << argument << "', nothing was thrown";
  } catch (const ooc::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(names_argument(msg, argument)) << "message does not name '" << argument << "': " << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << "message lacks '" << fragment << "': " << msg;
    // ooc::invalid_argument must be catchable as the standard type (the bindings rely on it).
    EXPECT_NE(dynamic_cast<const std::invalid_argument*>(&e), nullptr);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ooc::invalid_argument naming '" << argument << "', got another exception: " << e.what();
  }
}

TEST(ProblemValidation, WrongRanks) {
  expect_invalid([] { make({2, 3, 8, 8}, {4, 3}); }, "w");                     // w rank 2
  expect_invalid([] { make({2, 3, 8, 8, 8, 8}, {4, 3, 3, 3, 3, 3}); }, "w");   // rank 6: 4D conv
  expect_invalid([] { make({2, 3}, {4, 3}); }, "w");
  expect_invalid([] { make({2, 3, 8}, {4, 3, 3, 3}); }, "x");                  // x 3D, w 4D
  expect_invalid([] { make({2, 3, 8, 8, 8}, {4, 3, 3, 3}); }, "x");            // x 5D, w 4D
  expect_invalid([] { make({3, 8, 8}, {4, 3, 3, 3}); }, "x", "[3, 8, 8]");     // unbatched input is not accepted
}

TEST(ProblemValidation, ChannelMismatchUsesTorchWording) {
  expect_invalid([] { make({2, 3, 8, 8}, {5, 4, 3, 3}); }, "x",
                 "expected x[2, 3, 8, 8] to have 4 channels, but got 3 channels instead");
  expect_invalid([] { make({1, 7, 9}, {2, 6, 3}); }, "x", "to have 6 channels, but got 7 channels instead");
}

TEST(ProblemValidation, PerDimensionOptions) {
  expect_invalid([] { make({1, 1, 8, 8}, {1, 1, 3, 3}, {0}); }, "stride");
  expect_invalid([] { make({1, 1, 8, 8}, {1, 1, 3, 3}, {1, -2}); }, "stride");
  expect_invalid([] { make({1, 1, 8, 8, 8}, {1, 1, 3, 3, 3}, {1, 1}); }, "stride");  // 2 entries for 3D
  expect_invalid([] { make({1, 1, 8, 8}, {1, 1, 3, 3}, {}); }, "stride");            // no entry at all
  expect_invalid([] { make({1, 1, 8, 8}, {1, 1, 3, 3}, {1}, {-1}); }, "padding");
  expect_invalid([] { make({1, 1, 8}, {1, 1, 3}, {1}, {0, 0}); }, "padding");
  expect_invalid([] { make({1, 1, 8, 8}, {1, 1, 3, 3}, {1}, {0}, {0}); }, "dilation");
  expect_invalid([] { make({1, 1, 8, 8, 8}, {1, 1, 3, 3, 3}, {1}, {0}, {1, 1, -1}); }, "dilation");
  expect_invalid([] { make({1, 1, 8, 8}, {1, 1, 3, 3}, {1}, {0}, {1, 1, 1}); }, "dilation");
}

TEST(ProblemValidation, KernelLargerThanPaddedInput) {
  expect_invalid([] { make({1, 1, 4, 4}, {1, 1, 5, 5}); }, "Kernel size", "(4 x 4)");
  expect_invalid([] { make({1, 1, 6, 20}, {1, 1, 3, 3}, {1}, {0}, {3, 1}); }, "Kernel size", "(7 x 3)");  // dilated span 7 > 6
  expect_invalid([] { make({1, 1, 5}, {1, 1, 8}, {1}, {1}); }, "Kernel size", "(7)");
  // The boundary case is valid: span == padded input gives one output.
  EXPECT_EQ(make({1, 1, 4}, {1, 1, 6}, {1}, {1}).out[0], 1);
  EXPECT_EQ(make({1, 1, 4, 4}, {1, 1, 5, 5}, {1}, {1}).out, (ooc::Dims3{2, 2, 1}));
}

TEST(ProblemValidation, ZeroOrNegativeDims) {
  expect_invalid([] { make({0, 3, 8, 8}, {4, 3, 3, 3}); }, "x");
  expect_invalid([] { make({2, 0, 8, 8}, {4, 0, 3, 3}); }, "x");
  expect_invalid([] { make({2, 3, 8, 0}, {4, 3, 3, 3}); }, "x");
  expect_invalid([] { make({2, 3, -8, 8}, {4, 3, 3, 3}); }, "x");
  expect_invalid([] { make({2, 3, 8, 8}, {0, 3, 3, 3}); }, "w");
  expect_invalid([] { make({2, 3, 8, 8}, {4, 3, 0, 3}); }, "w");
  expect_invalid([] { make({2, 3, 8, 8, 8}, {4, 3, 3, 3, -1}); }, "w");
}

TEST(ProblemValidation, Groups) {
  expect_invalid([] { make({2, 4, 8, 8}, {4, 4, 3, 3}, {1}, {0}, {1}, 0); }, "groups");
  expect_invalid([] { make({2, 4, 8, 8}, {4, 4, 3, 3}, {1}, {0}, {1}, -2); }, "groups");
  // k not divisible by groups, and channels not matching c / groups: bad arguments, not "unsupported".
  expect_invalid([] { make({2, 4, 8, 8}, {3, 2, 3, 3}, {1}, {0}, {1}, 2); }, "groups");
  expect_invalid([] { make({2, 4, 8, 8}, {4, 4, 3, 3}, {1}, {0}, {1}, 2); }, "x", "to have 8 channels, but got 4");
  // A valid grouped convolution: w holds c / groups input channels, y has k.
  const ooc::ConvProblem grouped = make({2, 4, 8, 8}, {6, 2, 3, 3}, {1}, {0}, {1}, 2);
  EXPECT_EQ(grouped.groups, 2);
  EXPECT_EQ(grouped.w_elements(), 6 * 2 * 9);
  EXPECT_EQ(grouped.y_shape(), (Shape{2, 6, 6, 6}));
  // Depthwise with a channel multiplier of 3: groups = c.
  const ooc::ConvProblem depthwise = make({2, 4, 8, 8}, {12, 1, 3, 3}, {1}, {1}, {1}, 4);
  EXPECT_EQ(depthwise.y_shape(), (Shape{2, 12, 8, 8}));
  EXPECT_DOUBLE_EQ(depthwise.flops(), 2.0 * 2 * 12 * 64 * 9);
}

TEST(ProblemGeometry, OutputSizes1D) {
  // floor((in + 2p - d(k-1) - 1) / s) + 1, worked out by hand.
  ConvProblem p = make({2, 3, 10}, {4, 3, 3});
  EXPECT_EQ(p.spatial_dims, 1);
  EXPECT_EQ(p.y_shape(), (Shape{2, 4, 8}));
  p = make({2, 3, 10}, {4, 3, 3}, {2}, {1}, {2});  // span 5, padded 12 -> 4
  EXPECT_EQ(p.y_shape(), (Shape{2, 4, 4}));
  p = make({1, 1, 5}, {1, 1, 1}, {7});  // stride beyond the input: one output
  EXPECT_EQ(p.y_shape(), (Shape{1, 1, 1}));
  p = make({1, 2, 11}, {3, 2, 4}, {3}, {2});  // padded 15, span 4 -> 4
  EXPECT_EQ(p.y_shape(), (Shape{1, 3, 4}));
  // Unused dims are neutral.
  EXPECT_EQ(p.in, (ooc::Dims3{11, 1, 1}));
  EXPECT_EQ(p.kernel, (ooc::Dims3{4, 1, 1}));
  EXPECT_EQ(p.stride, (ooc::Dims3{3, 1, 1}));
  EXPECT_EQ(p.padding, (ooc::Dims3{2, 0, 0}));
  EXPECT_EQ(p.dilation, (ooc::Dims3{1, 1, 1}));
  EXPECT_EQ(p.out, (ooc::Dims3{4, 1, 1}));
}

TEST(ProblemGeometry, OutputSizes2D) {
  // dim0: span 3, padded 9, stride 2 -> 4; dim1: span 3, padded 9, stride 3 -> 3.
  ConvProblem p = make({1, 2, 7, 9}, {5, 2, 3, 2}, {2, 3}, {1, 0}, {1, 2});
  EXPECT_EQ(p.spatial_dims, 2);
  EXPECT_EQ(p.y_shape(), (Shape{1, 5, 4, 3}));
  EXPECT_EQ(p.x_shape(), (Shape{1, 2, 7, 9}));
  EXPECT_EQ(p.w_shape(), (Shape{5, 2, 3, 2}));
  EXPECT_EQ(p.out[2], 1);
  p = make({3, 4, 32, 17}, {8, 4, 3, 3}, {1}, {1});  // "same" convolution
  EXPECT_EQ(p.y_shape(), (Shape{3, 8, 32, 17}));
  p = make({1, 1, 8, 8}, {1, 1, 2, 2}, {2});  // pooling-like
  EXPECT_EQ(p.y_shape(), (Shape{1, 1, 4, 4}));
}

TEST(ProblemGeometry, OutputSizes3D) {
  // Single-value options broadcast to every spatial dim.
  // dim0: span 7, padded 9 -> 3; dim1: span 1, padded 10 -> 10; dim2: span 4, padded 11 -> 8.
  ConvProblem p = make({2, 1, 5, 6, 7}, {3, 1, 3, 1, 2}, {1}, {2}, {3});
  EXPECT_EQ(p.spatial_dims, 3);
  EXPECT_EQ(p.y_shape(), (Shape{2, 3, 3, 10, 8}));
  EXPECT_EQ(p.padding, (ooc::Dims3{2, 2, 2}));
  EXPECT_EQ(p.dilation, (ooc::Dims3{3, 3, 3}));
  // Mixed per-dim options: dim0 (9+2-3)/2+1 = 5, dim1 (10-5)/1+1 = 6 (span 5), dim2 (12+6-3)/4+1 = 4.
  p = make({1, 2, 9, 10, 12}, {2, 2, 3, 3, 3}, {2, 1, 4}, {1, 0, 3}, {1, 2, 1});
  EXPECT_EQ(p.y_shape(), (Shape{1, 2, 5, 6, 4}));
}

TEST(ProblemGeometry, SizesAndFlops) {
  ConvProblem p = ConvProblem::forward({2, 3, 10, 12}, {4, 3, 3, 5}, {1}, {0}, {1}, 1, 0.5, 2.0, true);
  EXPECT_EQ(p.out, (ooc::Dims3{8, 8, 1}));
  EXPECT_EQ(p.x_elements(), 2 * 3 * 10 * 12);
  EXPECT_EQ(p.w_elements(), 4 * 3 * 3 * 5);
  EXPECT_EQ(p.y_elements(), 2 * 4 * 8 * 8);
  EXPECT_DOUBLE_EQ(p.flops(), 2.0 * (2 * 4 * 8 * 8) * 3 * 15);
  EXPECT_EQ(p.alpha, 0.5);
  EXPECT_EQ(p.beta, 2.0);
  EXPECT_TRUE(p.has_bias);
  EXPECT_EQ(p.groups, 1);
  const std::string d = p.describe();
  EXPECT_NE(d.find("[2, 3, 10, 12]"), std::string::npos) << d;
  EXPECT_NE(d.find("[2, 4, 8, 8]"), std::string::npos) << d;
}

// ConvProblem::set_padding_mode: torch's F.pad limits per mode (reflect < size, circular <= size,
// replicate any), checked against both ends of an asymmetric padding, refused for the operations
// that take zeros only; a mode makes every padded dimension explicit (cudnn_can_pad).
TEST(ProblemPaddingMode, LimitsPerModeInTorchsWords) {
  using ooc::PaddingMode;
  ConvProblem p = make({1, 2, 5, 4}, {3, 2, 3, 3}, {1}, {4, 3});
  ConvProblem q = p;
  q.set_padding_mode(PaddingMode::reflect);  // 4 < 5 and 3 < 4
  EXPECT_EQ(q.padding_mode, PaddingMode::reflect);
  expect_invalid([] { make({1, 2, 5, 4}, {3, 2, 3, 3}, {1}, {1, 4}).set_padding_mode(PaddingMode::reflect); },
                 "padding_mode",
                 "Padding size should be less than the corresponding input dimension, but got: padding (4, 4) at "
                 "dimension 3 of input [1, 2, 5, 4]");
  make({1, 2, 5, 4}, {3, 2, 3, 3}, {1}, {5, 4}).set_padding_mode(PaddingMode::circular);  // <= size
  expect_invalid([] { make({1, 2, 5, 4}, {3, 2, 3, 3}, {1}, {6, 1}).set_padding_mode(PaddingMode::circular); },
                 "padding_mode", "Padding value causes wrapping around more than once: padding (6, 6) at dimension 2");
  make({1, 2, 5, 4}, {3, 2, 3, 3}, {1}, {9, 9}).set_padding_mode(PaddingMode::replicate);
  // the end's padding counts too: (before 1, after 4) on a dimension of 4
  expect_invalid([] {
    ConvProblem::forward({1, 2, 5, 4}, {3, 2, 3, 3}, {1}, {0, 1}, {1}, 1, 1.0, 0.0, false, ooc::DType::float32, {0, 4})
        .set_padding_mode(PaddingMode::reflect);
  }, "padding_mode", "padding (1, 4) at dimension 3");
}

TEST(ProblemPaddingMode, OnlyTheForwardAndTheFilterGradientTakeAMode) {
  using ooc::PaddingMode;
  const ConvProblem data = ConvProblem::backward_data({1, 3, 5, 4}, {3, 2, 3, 3}, {1, 2, 5, 4}, {1}, {1}, {1}, 1, 1.0,
                                                      0.0);
  expect_invalid([&] { ConvProblem(data).set_padding_mode(PaddingMode::reflect); }, "padding_mode",
                 "not supported by conv_backward_data");
  ConvProblem(data).set_padding_mode(PaddingMode::zeros);  // zeros is every operation's
  ConvProblem filter = ConvProblem::backward_filter({1, 2, 5, 4}, {1, 3, 5, 4}, {3, 2, 3, 3}, {1}, {1}, {1}, 1, 1.0,
                                                    0.0);
  filter.set_padding_mode(PaddingMode::circular);
  EXPECT_EQ(filter.padding_mode, PaddingMode::circular);
}

TEST(ProblemPaddingMode, AModePadsEveryPaddedDimensionExplicitly) {
  ConvProblem p = make({1, 2, 5, 4}, {3, 2, 3, 1}, {1}, {1, 0});
  EXPECT_TRUE(p.cudnn_can_pad(0) && p.cudnn_can_pad(1));
  p.set_padding_mode(ooc::PaddingMode::replicate);
  EXPECT_FALSE(p.cudnn_can_pad(0)) << "padded: the gather computes it";
  EXPECT_TRUE(p.cudnn_can_pad(1)) << "unpadded: nothing to compute";
  EXPECT_NE(p.describe().find("padding_mode=replicate"), std::string::npos) << p.describe();
}

}  // namespace
