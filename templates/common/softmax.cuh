// Online-softmax helpers for mma.sync accumulator layouts: each thread holds
// two rows (g and g+8), and a row's values are spread over a quad of lanes.
#pragma once

#include "common/mma.cuh"

namespace attnjit {

constexpr float kLog2e = 1.4426950408889634f;
// -inf as a bit pattern (NVRTC has no constexpr infinity without math headers).
#define kNegInf __int_as_float(0xff800000u)

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// exp2(x - ref) that stays 0 (not NaN) when both are -inf: a fully masked row.
__device__ __forceinline__ float safe_ref(float m) { return m == kNegInf ? 0.0f : m; }

// One row's online-softmax step over a tile whose max is t: the running max m takes t in,
// the row sum l is rescaled; returns that rescale factor (alpha), and t becomes the
// reference the tile's exponentials subtract (safe_ref: 0 for a row with nothing visible).
__device__ __forceinline__ float online_max_step(float& m, float& l, float& t) {
  const float m_new = fmaxf(m, t);
  const float ref = safe_ref(m_new);
  const float alpha = fast_exp2(m - ref);
  m = m_new;
  t = ref;
  l *= alpha;
  return alpha;
}

// Merge weight of a partial state with max m against the total max.
__device__ __forceinline__ float merge_weight(float m, float m_total) {
  return m == kNegInf ? 0.0f : fast_exp2(m - m_total);
}

// ALiBi slope of head h out of n heads (Press et al.; FlashInfer's get_alibi_slope).
__device__ __forceinline__ float alibi_slope(int h, int n) {
  int p = 1 << (31 - __clz(n));
  return h < p ? exp2f(-8.0f * float(h + 1) / float(p)) : exp2f(-4.0f * float(2 * (h - p) + 1) / float(p));
}

}  // namespace attnjit
