// Quantised K/V tiles (antiquant) of the portable prefill kernel: the raw int8 or
// int4 rows of a tile land in shared memory through cp.async, then one pass
// dequantises them, (x + offset) * scale per PrefillDequant, into the 16-bit tile
// the MMAs read. Rows past the KV length become 0 (V must be 0 there: P is 0, but
// 0 * NaN is not), and their scales are never read.
#pragma once

#include "prefill/prefill_common.cuh"

namespace attnjit {

template <class Tr>
struct PrefillDequantTile {
  typedef typename Tr::T T;
  typedef PrefillCommon<Tr> C;
  static constexpr bool kInt4 = (Tr::kExt & prefill_ext::kKvInt4) != 0;
  static constexpr bool kOn = kInt4 || (Tr::kExt & prefill_ext::kKvInt8) != 0;
  static constexpr int kTile = Tr::kKvTile;
  // The K/V tensors' element: int8, or an int32 word of eight int4 values.
  typedef typename Select<kInt4, u32, signed char>::type Elem;
  // Bytes of `dims` quantised values.
  static constexpr __host__ __device__ int bytes(int dims) { return kInt4 ? dims / 2 : dims; }

  static __device__ __forceinline__ float param(const void* base, int dtype, long long i) {
    if (dtype == prefill_dq::kFloat32) return static_cast<const float*>(base)[i];
    if (dtype == prefill_dq::kFloat16) return to_float(static_cast<const half_t*>(base)[i]);
    return to_float(static_cast<const bf16_t*>(base)[i]);
  }

  // Index of the scale (and offset) of logical KV token j, channel 0. Prefix tokens
  // take position 0: the plan allows a prefix only with scales that ignore the position.
  static __device__ __forceinline__ long long param_row(const PrefillParams& p, const PrefillDequant& q,
                                                        const PrefillWork& w, int j) {
    if constexpr (C::kPrefix) j = j < w.prefix ? 0 : j - w.prefix;
    const long long h = (long long)w.hk * q.sh;
    if constexpr (Tr::kPageSize > 0) {
      if (q.paged) {
        const int blk = p.block_table[(long long)w.b * p.block_table_stride_b + j / Tr::kPageSize];
        return (long long)blk * q.sb + h + (long long)(j % Tr::kPageSize) * q.ss;
      }
      return (long long)w.b * q.sb + h + (long long)j * q.ss;  // paged KV: the logical position
    }
    return (long long)w.b * q.sb + h + (long long)(w.e.kv_tok0 + j) * q.ss;  // the physical position
  }

  // cp.async of raw rows [j0, j0 + kTile), value dims [d0, d0 + kDims), into `raw`
  // (rows of bytes(kDims)); rows past kv_len are zero-filled.
  template <int kDims, bool kValue>
  static __device__ __forceinline__ void load_raw(const PrefillParams& p, unsigned char* raw, const PrefillWork& w,
                                                  int j0, int d0, int tid, int threads) {
    constexpr int kRow = bytes(kDims), kChunks = kRow / 16;
    static_assert(kRow % 16 == 0, "quantised rows are whole 16-byte chunks");
    const typename C::KvSrc src = C::template kv_src<kValue>(p);
    for (int i = tid; i < kTile * kChunks; i += threads) {
      const int r = i / kChunks, c = i % kChunks, j = j0 + r;
      const bool ok = j < w.e.kv_len;
      const unsigned char* g =
          ok ? reinterpret_cast<const unsigned char*>(C::template kv_row<Elem>(p, src, w, j)) + bytes(d0) + c * 16
             : static_cast<const unsigned char*>(kValue ? p.v : p.k);
      cp_async_16(raw + r * kRow + c * 16, g, ok ? 16u : 0u);
    }
  }

  // The eight values of one 8-dim chunk, sign-extended.
  static __device__ __forceinline__ void unpack8(const unsigned char* at, float x[8]) {
    if constexpr (kInt4) {
      const u32 word = *reinterpret_cast<const u32*>(at);
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = float(int(word << (28 - 4 * e)) >> 28);  // low nibble first
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(at);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        x[e] = float(int(v.x << (24 - 8 * e)) >> 24);
        x[4 + e] = float(int(v.y << (24 - 8 * e)) >> 24);
      }
    }
  }

  // Dequantises the raw tile (rows [j0, j0 + kTile), dims [d0, d0 + kDims)) into
  // `dst` (rows of `pitch` elements).
  template <int kDims>
  static __device__ __forceinline__ void convert(const PrefillParams& p, const PrefillDequant& q, const PrefillWork& w,
                                                 const unsigned char* raw, T* dst, int pitch, int j0, int d0, int tid,
                                                 int threads) {
    constexpr int kChunks = kDims / 8;
    for (int i = tid; i < kTile * kChunks; i += threads) {
      const int r = i / kChunks, c = i % kChunks, j = j0 + r;
      uint4 out = make_uint4(0u, 0u, 0u, 0u);
      if (j < w.e.kv_len) {
        float x[8];
        unpack8(raw + r * bytes(kDims) + bytes(c * 8), x);
        const long long at = param_row(p, q, w, j) + (long long)(d0 + c * 8) * q.sd;
        float s[8], o[8];
        if (q.sd == 0) {  // one scale for the chunk: per tensor, head or token
          const float s0 = param(q.scale, q.dtype, at), o0 = q.offset ? param(q.offset, q.dtype, at) : 0.f;
#pragma unroll
          for (int e = 0; e < 8; ++e) s[e] = s0, o[e] = o0;
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            s[e] = param(q.scale, q.dtype, at + e * q.sd);
            o[e] = q.offset ? param(q.offset, q.dtype, at + e * q.sd) : 0.f;
          }
        }
        out.x = pack2<T>((x[0] + o[0]) * s[0], (x[1] + o[1]) * s[1]);
        out.y = pack2<T>((x[2] + o[2]) * s[2], (x[3] + o[3]) * s[3]);
        out.z = pack2<T>((x[4] + o[4]) * s[4], (x[5] + o[5]) * s[5]);
        out.w = pack2<T>((x[6] + o[6]) * s[6], (x[7] + o[7]) * s[7]);
      }
      *reinterpret_cast<uint4*>(dst + r * pitch + c * 8) = out;
    }
  }
};

}  // namespace attnjit
