// exp2_poly (templates/common/exp2_poly.cuh), the FMA-pipe exponential of the Hopper
// prefill's ATTNJIT_PREFILL_EXP_EMU: its accuracy against std::exp2 over the range the
// softmax hands it, compiled here as plain C++ from the same header.
#include <gtest/gtest.h>

#include <cmath>

#include "common/exp2_poly.cuh"

namespace attnjit {
namespace {

TEST(Exp2Poly, WithinItsBoundOverTheSoftmaxRange) {
  double worst = 0;
  // Every 1/4096 from the clamp to a little past 0 (a max taken before the scale can round up).
  for (double x = -125.5; x <= 0.5; x += 1.0 / 4096) {
    const float xf = static_cast<float>(x);
    const double rel = std::fabs(double(exp2_poly(xf)) / std::exp2(double(xf)) - 1.0);
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 7.6e-5) << "the degree-3 minimax bound";
  EXPECT_GT(worst, 1e-6) << "a different polynomial than the one this test measures";
  EXPECT_NEAR(exp2_poly(0.f), 1.f, 7.6e-5);
  EXPECT_NEAR(exp2_poly(-1.f), 0.5f, 0.5f * 7.6e-5);
  // At the clamp it stays positive and tiny: a denormal the fp32 sums ignore, never NaN or Inf.
  const float at_clamp = exp2_poly(-126.f);
  EXPECT_GT(at_clamp, 0.f);
  EXPECT_LT(at_clamp, 1.2e-38f);
  // Monotone at the integer steps, where j moves and the polynomial restarts.
  for (int j = -125; j < 0; ++j) {
    EXPECT_LE(exp2_poly(float(j) - 0.5001f), exp2_poly(float(j) - 0.4999f)) << j;
    EXPECT_LE(exp2_poly(float(j) + 0.4999f), exp2_poly(float(j) + 0.5001f)) << j;
  }
}

}  // namespace
}  // namespace attnjit
