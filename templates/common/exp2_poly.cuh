// exp2 on the FMA and integer pipes, for a share of a softmax's exponentials: ex2.approx is
// a MUFU op (16 a clock per SM on Hopper), and at head dim 64 a prefill tile needs as many
// MUFU clocks as tensor-core clocks. 2^x = 2^j * 2^f, j = round(x), f in [-0.5, 0.5]: j by
// the 1.5 * 2^23 rounding trick (two FADDs), 2^f by a degree-3 polynomial (relative error
// 7.5e-5, below a bf16 or fp16 P's rounding), 2^j added to the exponent bits.
// For x >= -126 only (the caller clamps; nearer 0 than 2^-126 it returns a denormal, never 0).
// Plain C++ too: the host tests it against std::exp2.
#pragma once

// (No #include: a template set is self-contained. Bits are copied with memcpy, which NVRTC
// declares itself, and with the compiler's builtin elsewhere.)
#if defined(__CUDACC__)
#define ATTNJIT_EXP2_HD __host__ __device__ __forceinline__
#else
#define ATTNJIT_EXP2_HD inline
#endif
#if defined(__CUDACC_RTC__)
#define ATTNJIT_EXP2_MEMCPY memcpy
#else
#define ATTNJIT_EXP2_MEMCPY __builtin_memcpy
#endif

namespace attnjit {

// The same bits as another 4-byte type (memcpy: a register move on the device, no UB on the host).
template <class To, class From>
ATTNJIT_EXP2_HD To exp2_bits_as(From v) {
  static_assert(sizeof(To) == sizeof(From), "a bit copy between types of one size");
  To out;
  ATTNJIT_EXP2_MEMCPY(&out, &v, sizeof(out));
  return out;
}

// x in [-126, ~0.5]: 2^x to a relative error of 7.5e-5 (minimax on [-0.5, 0.5], relative).
ATTNJIT_EXP2_HD float exp2_poly(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound holds round(x) in its low bits
  const float t = x + kRound;
  const float f = x - (t - kRound);      // [-0.5, 0.5]
  float p = 0.055171668760614856f * f + 0.2426111327941456f;
  p = p * f + 0.6932609864397805f;
  p = p * f + 0.9999280729172344f;
  // t's bits are kRound's plus round(x); kRound's set bits all sit past bit 8, so << 23 leaves round(x) << 23.
  return exp2_bits_as<float>(exp2_bits_as<int>(p) + static_cast<int>(exp2_bits_as<unsigned>(t) << 23));
}

}  // namespace attnjit
