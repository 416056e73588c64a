// Per-token antiquant scales in the decode kernel (FIA's int8/int4 K/V with features
// kKTokScale / kVTokScale): fp32 scales and offsets per key, copied with each tile into
// its cp.async stage as [K scale | K offset | V scale | V offset] x kTile floats
// (DecodeParams::tok_*: [0] K, [1] V), one such block per KV head of a kvpair CTA whose
// scales differ by head (tokhead: kTokHeads 2, the second at + 4 * kTile), and applied
// around the MMAs:
//   K: s = (q.k + off * sum(q)) * scale on the fp32 scores;
//   V: p * scale goes into P before P V, and sum(p * scale * off) into every output dim.
// P is 16-bit, so V's scales enter as P' = p * scale / unit, with unit the largest power
// of two under the largest |scale| seen so far: |P'| < 2 (no fp16 subnormals from small
// scales), and O holds o / unit, rescaled like a softmax max when unit grows.
#pragma once

#include "common/dtype.cuh"
#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "decode/decode_params.cuh"

namespace attnjit {

template <class Tr>
struct DecodeTokenScales {
  static constexpr int kTile = Tr::kTile, HD = Tr::kHeadDim;
  static constexpr int kBlock = 4 * kTile;                 // floats of one head's block
  static constexpr int kCopies = kBlock * Tr::kTokHeads / 32;  // 4-byte copies per lane per tile

  // Where this lane's copies of a tile read, for the tile at position 0 (of page 0),
  // or null (no such tensor, or that side per channel). Set once per CTA.
  struct Src {
    const float* at[kCopies];
  };

  // hh (fixed per j): the block's head of the pair; kv: 0 K, 1 V. A pair's absent
  // second head (an odd head count's last CTA) copies nothing.
  __device__ static void init(const DecodeParams& p, int b, int kvh, Src& src) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int i = (lane + 32 * j) % kBlock, r = i % kTile, kv = ((32 * j) % kBlock) / (2 * kTile);
      const int hh = (32 * j) / kBlock;
      const float* base = (i / kTile) % 2 ? p.tok_off[kv] : p.tok_scale[kv];
      const long long at = (kvh + hh) * p.tok_sh[kv] + (p.tok_paged[kv] ? 0ll : b * p.tok_sb[kv]) + r * p.tok_ss[kv];
      src.at[j] = (kv == 0 ? Tr::kKTok : Tr::kVTok) && base && kvh + hh < p.num_kv_heads ? base + at : nullptr;
    }
  }

  // The tile at tok0 (in `page`, paged KV) into dst; zeros past tok_hi and where src is null.
  __device__ static void issue(const DecodeParams& p, const Src& src, int tok_hi, float* dst, int tok0, int page,
                               int lane) {
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int i = lane + 32 * j, kv = ((32 * j) % kBlock) / (2 * kTile);
      const long long at = Tr::kPaged && p.tok_paged[kv]
                               ? (long long)page * p.tok_sb[kv] + (long long)(tok0 % Tr::kPageSize) * p.tok_ss[kv]
                               : (long long)tok0 * p.tok_ss[kv];
      const bool valid = src.at[j] && tok0 + i % kTile < tok_hi;  // i % kTile: the block's row
      cp_async_4(dst + i, valid ? static_cast<const void*>(src.at[j] + at) : p.k, valid ? 4u : 0u);
    }
  }

  // Each of the thread's two rows' sum of q, over Q as the MMA reads it (K's offsets).
  template <class MT>
  __device__ static void q_sums(const MT* q_s, int g, int tq, float (&qsum)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      for (int d = tq; d < HD; d += 4) qsum[h] += to_float(q_s[(g + 8 * h) * Tr::kRowElems + d]);
      qsum[h] = quad_sum(qsum[h]);
    }
  }

  // A raw score x of key j of the tile (ts: its scales) for a row whose q sums to qsum.
  __device__ static __forceinline__ float key_score(float x, const float* ts, int j, float qsum) {
    return (x + ts[kTile + j] * qsum) * ts[j];
  }

  // V's running unit, and each row's sum of P' * offset (this thread's keys).
  struct VUnit {
    float unit = 0.f, mul = 1.f, off[2] = {0.f, 0.f};

    // Before the tile's P: the unit takes the tile's largest |scale|; alpha (O's factor
    // from the softmax) also takes the unit's growth, and the offsets' sums alpha.
    __device__ __forceinline__ void begin_tile(const float* ts, int tq, float (&alpha)[2]) {
      float amax = 0.f;
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
        amax = fmaxf(amax, fmaxf(fabsf(ts[2 * kTile + nt * 8 + 2 * tq]), fabsf(ts[2 * kTile + nt * 8 + 2 * tq + 1])));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      grow(fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2)), alpha);
    }
    // The unit takes the tile's largest |scale| amax (every lane's the same).
    __device__ __forceinline__ void grow(float amax, float (&alpha)[2]) {
      const float grown = fmaxf(unit, pow2_floor(amax));
      mul = pow2_rcp(grown);
      const float grow = unit * mul;  // exact: powers of two; 0 on the first tile, when O is 0
      unit = grown;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        alpha[h] *= grow;
        off[h] *= alpha[h];
      }
    }
    // P' of probability pe of key j (ts: the tile's scales), for the thread's row h.
    __device__ __forceinline__ float scale_p(float pe, const float* ts, int j, int h) {
      pe *= ts[2 * kTile + j] * mul;
      off[h] += pe * ts[3 * kTile + j];
      return pe;
    }
    // After the last tile: O back to its true units, the offsets' sums in every dim.
    __device__ void finish(float (&o)[HD / 8][4]) const {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float sum = quad_sum(off[h]);
#pragma unroll
        for (int j = 0; j < HD / 8; ++j) {
          o[j][2 * h] = (o[j][2 * h] + sum) * unit;
          o[j][2 * h + 1] = (o[j][2 * h + 1] + sum) * unit;
        }
      }
    }
  };
};

}  // namespace attnjit
