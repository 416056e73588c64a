// Host-side conversions between float and the 16/8-bit storage formats
// (round-to-nearest-even), for tests, the benchmark and the CLI demo.
#pragma once

#include <cstdint>
#include <vector>

#include "attnjit/tensor.hpp"

namespace attnjit::util {

uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);
uint8_t float_to_e4m3_bits(float f);  // saturates to +-448
float e4m3_bits_to_float(uint8_t b);
uint8_t float_to_e5m2_bits(float f);  // saturates to +-57344
float e5m2_bits_to_float(uint8_t b);

// Encode floats into `dtype` storage (bytes), and decode back.
std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype);
std::vector<float> decode(const std::vector<uint8_t>& bytes, DType dtype);
// The value each float becomes after a round trip through `dtype`.
std::vector<float> quantize(const std::vector<float>& values, DType dtype);

}  // namespace attnjit::util
