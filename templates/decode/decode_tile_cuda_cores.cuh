// The CUDA-core (FFMA) version of DecodeTile, for use_tensor_cores = false. It
// produces the same register layouts as the mma.sync tile (S and O in the MMA
// accumulator layout), so the kernel's loads, softmax and merges serve both.
#pragma once

#include "common/dtype.cuh"

namespace attnjit {

template <class Tr>
struct DecodeTileCudaCores {
  using MT = typename Tr::MT;
  static constexpr int HD = Tr::kHeadDim, kTile = Tr::kTile, kRowElems = Tr::kRowElems;
  static constexpr int kN = kTile / 8;

  // 8 consecutive MT values -> floats (one 16-byte shared-memory load).
  __device__ static void load8(const MT* p, float (&x)[8]) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const MT* e = reinterpret_cast<const MT*>(&v);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = to_float(e[i]);
  }

  // Lane (g, t) computes S[row][token] for rows g and g + 8 and tokens
  // 8n + 2t, 8n + 2t + 1: the positions it holds in the MMA layout. Rows past
  // rows_valid (padding) stay 0.
  template <class QF>
  __device__ static void scores(const QF&, const MT* q_s, const MT* kt, const unsigned char*, int lane,
                                int rows_valid, float (&s)[kN][4]) {
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int n = 0; n < kN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
      if (row >= rows_valid) continue;
      const MT* q = q_s + row * kRowElems;
#pragma unroll 2
      for (int d0 = 0; d0 < HD; d0 += 8) {
        float qv[8];
        load8(q + d0, qv);
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float kv[8];
            load8(kt + (n * 8 + 2 * tq + e) * kRowElems + d0, kv);
            float acc = s[n][2 * h + e];
#pragma unroll
            for (int i = 0; i < 8; ++i) acc = fmaf(qv[i], kv[i], acc);
            s[n][2 * h + e] = acc;
          }
      }
    }
  }

  // O += P V with P (fp32, in s) gathered across the lane quad: lane (g, t)
  // owns dims 8j + 2t, 8j + 2t + 1 of rows g and g + 8.
  __device__ static void accumulate_pv(const float (&s)[kN][4], const MT* vt, const unsigned char*, int lane,
                                       int rows_valid, float (&o)[HD / 8][4]) {
    const int g = lane / 4, tq = lane % 4;
    float p[2][kTile];  // [row half][token]
#pragma unroll
    for (int src = 0; src < 4; ++src)
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = __shfl_sync(0xffffffffu, s[n][e], (lane & ~3) | src);
          p[e / 2][n * 8 + 2 * src + (e & 1)] = v;
        }
    const bool row1 = g + 8 < rows_valid;
    if (g >= rows_valid) return;  // after the shuffles: every lane took part
#pragma unroll
    for (int tok = 0; tok < kTile; ++tok) {
      const MT* vrow = vt + tok * kRowElems + 2 * tq;
#pragma unroll
      for (int j = 0; j < HD / 8; ++j) {  // o[j] needs a compile-time j
        const float v0 = to_float(vrow[j * 8]), v1 = to_float(vrow[j * 8 + 1]);
        o[j][0] = fmaf(p[0][tok], v0, o[j][0]);
        o[j][1] = fmaf(p[0][tok], v1, o[j][1]);
        if (row1) {
          o[j][2] = fmaf(p[1][tok], v0, o[j][2]);
          o[j][3] = fmaf(p[1][tok], v1, o[j][3]);
        }
      }
    }
  }
};

}  // namespace attnjit
