// Tests of src/util/host_dtype: exhaustive round trips and round-to-nearest-even for fp16/bf16/fp8.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "util/host_dtype.hpp"

namespace attnjit::util {
namespace {

bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0; }
bool e4m3_is_nan(uint8_t b) { return (b & 0x7f) == 0x7f; }
bool e5m2_is_finite(uint8_t b) { return (b & 0x7c) != 0x7c; }

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(HostDtype, EveryHalfRoundTrips) {
  int checked = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    if (half_is_nan(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(half_bits_to_float(static_cast<uint16_t>(h)))) << std::hex << h;
      continue;
    }
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(float_to_half_bits(f), h) << std::hex << "0x" << h << " -> " << f;
    ++checked;
  }
  EXPECT_EQ(checked, 65536 - 2 * 1023);
  EXPECT_EQ(half_bits_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_bits_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(half_bits_to_float(0x7c00)));
  EXPECT_TRUE(std::signbit(half_bits_to_float(0x8000)));
}

TEST(HostDtype, EveryBf16RoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    if (bf16_is_nan(static_cast<uint16_t>(b))) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(bf16_is_nan(float_to_bf16_bits(f))) << "NaN stays NaN: " << std::hex << b;
      continue;
    }
    ASSERT_EQ(float_to_bf16_bits(f), b) << std::hex << "0x" << b;
  }
}

TEST(HostDtype, EveryE4m3RoundTrips) {
  for (uint32_t b = 0; b <= 0xff; ++b) {
    const float f = e4m3_bits_to_float(static_cast<uint8_t>(b));
    if (e4m3_is_nan(static_cast<uint8_t>(b))) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << b;
      continue;
    }
    EXPECT_EQ(float_to_e4m3_bits(f), b) << std::hex << "0x" << b << " -> " << f;
  }
  EXPECT_EQ(e4m3_bits_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_bits_to_float(0xfe), -448.0f);
}

TEST(HostDtype, EveryFiniteE5m2RoundTrips) {
  int checked = 0;
  for (uint32_t b = 0; b <= 0xff; ++b) {
    if (!e5m2_is_finite(static_cast<uint8_t>(b))) continue;
    const float f = e5m2_bits_to_float(static_cast<uint8_t>(b));
    EXPECT_EQ(float_to_e5m2_bits(f), b) << std::hex << "0x" << b << " -> " << f;
    ++checked;
  }
  EXPECT_EQ(checked, 256 - 8);
  EXPECT_EQ(e5m2_bits_to_float(0x7b), 57344.0f);
  EXPECT_EQ(e5m2_bits_to_float(0x3c), 1.0f);
}

TEST(HostDtype, E4m3SaturatesAndRoundsToNearestEven) {
  EXPECT_EQ(float_to_e4m3_bits(1000.0f), 0x7e);
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1000.0f)), 448.0f);
  EXPECT_EQ(float_to_e4m3_bits(-1000.0f), 0xfe);
  EXPECT_EQ(float_to_e4m3_bits(464.0f), 0x7e);  // above the largest finite: saturate, never NaN
  EXPECT_EQ(float_to_e4m3_bits(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_TRUE(e4m3_is_nan(float_to_e4m3_bits(std::nanf(""))));
  // 1.0625 is halfway between 1.0 (mantissa 0, even) and 1.125 (mantissa 1): even wins.
  EXPECT_EQ(float_to_e4m3_bits(1.0625f), 0x38);
  // 1.1875 is halfway between 1.125 (odd) and 1.25 (even).
  EXPECT_EQ(float_to_e4m3_bits(1.1875f), 0x3a);
  EXPECT_EQ(float_to_e4m3_bits(std::nextafter(1.0625f, 2.0f)), 0x39);
  // Subnormal midpoints: 0.5 and 1.5 steps of 2^-9.
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(0.5f, -9)), 0x00);
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.5f, -9)), 0x02);
  EXPECT_EQ(float_to_e4m3_bits(-std::ldexp(1.5f, -9)), 0x82);
  // Between the largest subnormal (7 * 2^-9) and the smallest normal (2^-6 = 8 * 2^-9).
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(7.5f, -9)), 0x08);
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.0f, -12)), 0x00);
}

// For every pair of adjacent finite codes: the midpoint rounds to the even code,
// and values just either side of it round to the nearer one.
template <class Code, class ToFloat, class FromFloat>
void check_midpoints(uint32_t count, ToFloat to_float, FromFloat from_float, bool (*valid)(Code), const char* what) {
  int checked = 0;
  for (uint32_t c = 0; c + 1 < count; ++c) {
    const Code lo = static_cast<Code>(c), hi = static_cast<Code>(c + 1);
    if (!valid(lo) || !valid(hi) || (lo & (Code(1) << (sizeof(Code) * 8 - 1)))) continue;  // positives only
    const float a = to_float(lo), b = to_float(hi);
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    const float mid = a + (b - a) / 2;
    ASSERT_TRUE(mid > a && mid < b) << what;
    const Code even = (lo & 1) ? hi : lo;
    ASSERT_EQ(from_float(mid), even) << what << " midpoint of 0x" << std::hex << c << " and 0x" << c + 1;
    ASSERT_EQ(from_float(std::nextafter(mid, 0.0f)), lo) << what << " below midpoint 0x" << std::hex << c;
    ASSERT_EQ(from_float(std::nextafter(mid, b)), hi) << what << " above midpoint 0x" << std::hex << c;
    ASSERT_EQ(from_float(-mid), static_cast<Code>(even | (Code(1) << (sizeof(Code) * 8 - 1)))) << what;
    ++checked;
  }
  EXPECT_GT(checked, 0) << what;
}

bool half_valid(uint16_t h) { return !half_is_nan(h) && (h & 0x7c00) != 0x7c00; }
bool bf16_valid(uint16_t b) { return !bf16_is_nan(b) && (b & 0x7f80) != 0x7f80; }
bool e4m3_valid(uint8_t b) { return !e4m3_is_nan(b); }
bool e5m2_valid(uint8_t b) { return e5m2_is_finite(b); }

TEST(HostDtype, RoundsToNearestEvenAtEveryMidpoint) {
  check_midpoints<uint16_t>(0x8000, half_bits_to_float, float_to_half_bits, half_valid, "fp16");
  check_midpoints<uint16_t>(0x8000, bf16_bits_to_float, float_to_bf16_bits, bf16_valid, "bf16");
  check_midpoints<uint8_t>(0x80, e4m3_bits_to_float, float_to_e4m3_bits, e4m3_valid, "e4m3");
  check_midpoints<uint8_t>(0x80, e5m2_bits_to_float, float_to_e5m2_bits, e5m2_valid, "e5m2");
}

TEST(HostDtype, OverflowBehaviour) {
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.0f), 0x7bff);  // below the rounding threshold
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);  // IEEE: rounds to infinity
  EXPECT_EQ(float_to_half_bits(-1e9f), 0xfc00);
  EXPECT_TRUE(half_is_nan(float_to_half_bits(std::nanf(""))));
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(float_to_e5m2_bits(1e6f), 0x7b);  // saturates to 57344
  EXPECT_EQ(float_to_e5m2_bits(-1e6f), 0xfb);
  EXPECT_EQ(bits(bf16_bits_to_float(0x3f80)), bits(1.0f));
}

TEST(HostDtype, QuantizeVector) {
  const std::vector<float> v = {0.0f, -0.0f, 1.0f, 0.1f, -3.3f, 1000.0f, 1e-8f, 65504.0f};
  for (DType d : {DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kFloat32}) {
    const auto q = quantize(v, d);
    ASSERT_EQ(q.size(), v.size());
    const auto bytes = encode(v, d);
    EXPECT_EQ(bytes.size(), v.size() * dtype_size(d));
    EXPECT_EQ(decode(bytes, d), q);
    EXPECT_EQ(quantize(q, d), q) << dtype_name(d) << ": quantize is idempotent";
    for (size_t i = 0; i < v.size(); ++i) {
      float want = v[i];
      switch (d) {
        case DType::kFloat16: want = half_bits_to_float(float_to_half_bits(v[i])); break;
        case DType::kBFloat16: want = bf16_bits_to_float(float_to_bf16_bits(v[i])); break;
        case DType::kFloat8E4M3: want = e4m3_bits_to_float(float_to_e4m3_bits(v[i])); break;
        case DType::kFloat8E5M2: want = e5m2_bits_to_float(float_to_e5m2_bits(v[i])); break;
        default: break;
      }
      EXPECT_EQ(bits(q[i]), bits(want)) << dtype_name(d) << " [" << i << "]";
    }
  }
  const auto e4 = quantize(v, DType::kFloat8E4M3);
  EXPECT_EQ(e4[2], 1.0f);
  EXPECT_EQ(e4[5], 448.0f);
  EXPECT_EQ(e4[3], 0.1015625f);  // 13 * 2^-7, the nearest e4m3 to 0.1
  EXPECT_EQ(quantize(v, DType::kFloat32), v);
  EXPECT_EQ(quantize({1.0f / 3}, DType::kFloat16)[0], half_bits_to_float(0x3555));
  EXPECT_THROW(encode(v, DType::kInt32), std::invalid_argument);
  EXPECT_THROW(decode(std::vector<uint8_t>(4), DType::kInt8), std::invalid_argument);
  EXPECT_TRUE(quantize({}, DType::kBFloat16).empty());
}

}  // namespace
}  // namespace attnjit::util
