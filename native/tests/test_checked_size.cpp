// plan/checked_size.hpp: products and sums that leave 2^60 are refused naming what overflowed,
// never wrapped.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "ooc/errors.hpp"
#include "plan/checked_size.hpp"

namespace {

using ooc::checked::kMaxTensorBytes;

TEST(CheckedSize, InRangeResultsAreExact) {
  EXPECT_EQ(ooc::checked::mul(int64_t{1} << 30, int64_t{1} << 29, "a"), int64_t{1} << 59);
  EXPECT_EQ(ooc::checked::add(kMaxTensorBytes - 1, 1, "a"), kMaxTensorBytes);
  EXPECT_EQ(ooc::checked::tensor_elements({2, 3, 4}, 4, "x"), 24);
}

TEST(CheckedSize, OverflowAndPastTheLimitAreRefusedByName) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  for (auto call : {+[] { ooc::checked::mul(int64_t{1} << 31, int64_t{1} << 31, "padding"); },
                    +[] { ooc::checked::add(kMaxTensorBytes, 1, "padding"); },
                    +[] { ooc::checked::mul(std::numeric_limits<int64_t>::max(), 2, "padding"); }}) {
    try {
      call();
      ADD_FAILURE() << "accepted";
    } catch (const ooc::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("padding is too large"), std::string::npos) << e.what();
    }
  }
  // The bytes count: 2^58 float32 elements are 2^60 bytes, one more element is too many.
  EXPECT_EQ(ooc::checked::tensor_elements({int64_t{1} << 58}, 4, "x"), int64_t{1} << 58);
  EXPECT_THROW(ooc::checked::tensor_elements({(int64_t{1} << 58) + 1}, 4, "x"), ooc::invalid_argument);
  EXPECT_THROW(ooc::checked::tensor_elements({2, 3, max}, 4, "x"), ooc::invalid_argument);
}

}  // namespace
