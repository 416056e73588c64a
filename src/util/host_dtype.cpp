#include "util/host_dtype.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace attnjit::util {

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Generic float -> small float with `mbits` mantissa bits, exponent bias `bias`,
// max finite `max_val`; round to nearest even, saturating.
uint8_t float_to_minifloat(float f, int mbits, int bias, float max_val) {
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (std::isnan(a)) return sign | 0x7f;
  if (a > max_val) a = max_val;
  const float min_normal = std::ldexp(1.0f, 1 - bias);
  int e;
  float q;
  if (a < min_normal) {
    const float step = std::ldexp(1.0f, 1 - bias - mbits);
    q = std::nearbyint(a / step);  // default rounding mode is nearest-even
    return sign | static_cast<uint8_t>(q);
  }
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;
  const float step = std::ldexp(1.0f, exp - mbits);
  q = std::nearbyint(a / step) * step;
  if (q > max_val) q = max_val;
  std::frexp(q, &e);
  exp = e - 1;
  if (q < min_normal) return sign | static_cast<uint8_t>(std::nearbyint(q / std::ldexp(1.0f, 1 - bias - mbits)));
  int mant = static_cast<int>(std::nearbyint((q / std::ldexp(1.0f, exp) - 1.0f) * (1 << mbits)));
  return sign | static_cast<uint8_t>(((exp + bias) << mbits) | mant);
}

float minifloat_to_float(uint8_t b, int mbits, int bias) {
  const int ebits = 7 - mbits;
  float sign = (b & 0x80) ? -1.0f : 1.0f;
  int exp = (b >> mbits) & ((1 << ebits) - 1);
  int mant = b & ((1 << mbits) - 1);
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), 1 - bias - mbits);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / (1 << mbits), exp - bias);
}

}  // namespace

uint16_t float_to_half_bits(float f) {
  uint32_t x = bits_of(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < std::ldexp(1.0f, -14)) {
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * std::ldexp(1.0f, 24))));
  }
  uint32_t ax = bits_of(a);
  uint32_t exp = ((ax >> 23) & 0xffu) - 127 + 15;
  uint32_t mant = ax & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float half_bits_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  int exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) return float_of(sign) + (sign ? -1.f : 1.f) * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
  return float_of(sign | (static_cast<uint32_t>(exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x = bits_of(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

uint8_t float_to_e4m3_bits(float f) { return float_to_minifloat(f, 3, 7, 448.0f); }
float e4m3_bits_to_float(uint8_t b) {
  if ((b & 0x7f) == 0x7f) return NAN;
  return minifloat_to_float(b, 3, 7);
}
uint8_t float_to_e5m2_bits(float f) { return float_to_minifloat(f, 2, 15, 57344.0f); }
float e5m2_bits_to_float(uint8_t b) { return half_bits_to_float(static_cast<uint16_t>(b) << 8); }

std::vector<uint8_t> encode(const std::vector<float>& v, DType d) {
  const size_t es = dtype_size(d);
  std::vector<uint8_t> out(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (d) {
      case DType::kFloat16: {
        uint16_t h = float_to_half_bits(v[i]);
        std::memcpy(&out[2 * i], &h, 2);
        break;
      }
      case DType::kBFloat16: {
        uint16_t h = float_to_bf16_bits(v[i]);
        std::memcpy(&out[2 * i], &h, 2);
        break;
      }
      case DType::kFloat32: std::memcpy(&out[4 * i], &v[i], 4); break;
      case DType::kFloat8E4M3: out[i] = float_to_e4m3_bits(v[i]); break;
      case DType::kFloat8E5M2: out[i] = float_to_e5m2_bits(v[i]); break;
      default: throw std::invalid_argument("encode: unsupported dtype");
    }
  }
  return out;
}

std::vector<float> decode(const std::vector<uint8_t>& b, DType d) {
  const size_t es = dtype_size(d);
  std::vector<float> out(b.size() / es);
  for (size_t i = 0; i < out.size(); ++i) {
    switch (d) {
      case DType::kFloat16: {
        uint16_t h;
        std::memcpy(&h, &b[2 * i], 2);
        out[i] = half_bits_to_float(h);
        break;
      }
      case DType::kBFloat16: {
        uint16_t h;
        std::memcpy(&h, &b[2 * i], 2);
        out[i] = bf16_bits_to_float(h);
        break;
      }
      case DType::kFloat32: std::memcpy(&out[i], &b[4 * i], 4); break;
      case DType::kFloat8E4M3: out[i] = e4m3_bits_to_float(b[i]); break;
      case DType::kFloat8E5M2: out[i] = e5m2_bits_to_float(b[i]); break;
      default: throw std::invalid_argument("decode: unsupported dtype");
    }
  }
  return out;
}

std::vector<float> quantize(const std::vector<float>& v, DType d) { return decode(encode(v, d), d); }

}  // namespace attnjit::util
