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

  // Value e (0-7) of an 8-dim chunk, sign-extended: int8 bytes e of lo/hi's 8 bytes,
  // int4 nibble e of lo (low nibble first).
  static __device__ __forceinline__ float value(u32 lo, u32 hi, int e) {
    if constexpr (kInt4) return float(int(lo << (28 - 4 * e)) >> 28);
    const u32 w = e < 4 ? lo : hi;
    return float(int(w << (24 - 8 * (e % 4))) >> 24);
  }

  // Per-channel scales (sd != 0: the modes whose scale varies by channel, never by
  // token) are fixed for a CTA's KV head: {scale, offset * scale} of each of the
  // `dims` channels from d0 go to shared memory once, so that the tiles' pass reads
  // them there instead of 16 dependent global loads a chunk (H200: 0.06x the 16-bit
  // prefill with the loads). Other modes leave it unused.
  static __device__ __forceinline__ void load_channels(const PrefillDequant& q, const PrefillWork& w, float2* ch,
                                                       int dims, int d0, int tid, int threads) {
    if (q.sd == 0) return;
    const long long base = (long long)w.hk * q.sh;  // sd != 0: sb = ss = 0 (the plan's shapes)
    for (int d = tid; d < dims; d += threads) {
      const long long at = base + (long long)(d0 + d) * q.sd;
      const float sc = load_as_float(q.scale, q.dtype, at), off = q.offset ? load_as_float(q.offset, q.dtype, at) : 0.f;
      ch[d] = make_float2(sc, off * sc);
    }
  }

  // The other modes (per tensor, head or token) take one {scale, offset * scale} per
  // row: written to `rows` for tile rows [j0, j0 + kTile) before the barrier that
  // precedes the tile's pass (the last pass read them before its own barrier). The
  // pass then reads shared memory only: its loop holds few registers.
  static __device__ __forceinline__ void load_rows(const PrefillParams& p, const PrefillDequant& q,
                                                   const PrefillWork& w, float2* rows, int j0, int tid, int threads) {
    if (q.sd != 0) return;
    for (int r = tid; r < kTile; r += threads) {
      const int j = j0 + r;
      float2 v = make_float2(0.f, 0.f);
      if (j < w.e.kv_len) {
        const long long at = param_row(p, q, w, j);
        v.x = load_as_float(q.scale, q.dtype, at);
        v.y = q.offset ? load_as_float(q.offset, q.dtype, at) * v.x : 0.f;
      }
      rows[r] = v;
    }
  }

  // Eight values (lo/hi, as value() reads them) to eight 16-bit ones: x * sc[e].x + sc[e].y,
  // sc[e * step] the pair of value e.
  static __device__ __forceinline__ uint4 convert8(u32 lo, u32 hi, const float2* sc, int step) {
    u32 out[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 a = sc[2 * k * step], b = sc[(2 * k + 1) * step];
      out[k] = pack2<T>(fmaf(value(lo, hi, 2 * k), a.x, a.y), fmaf(value(lo, hi, 2 * k + 1), b.x, b.y));
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
  }

  // Chunk c (8 values) of raw row r into dst; rows past the KV length (valid false) write 0.
  template <int kDims>
  static __device__ __forceinline__ void convert_chunk(const unsigned char* raw, T* dst, int pitch, int r, int c,
                                                       bool valid, const float2* sc, int step) {
    uint4 out = make_uint4(0u, 0u, 0u, 0u);
    if (valid) {
      const unsigned char* at_raw = raw + r * bytes(kDims) + bytes(c * 8);
      const u32 lo = *reinterpret_cast<const u32*>(at_raw);
      const u32 hi = kInt4 ? 0u : *reinterpret_cast<const u32*>(at_raw + 4);
      out = convert8(lo, hi, sc, step);
    }
    *reinterpret_cast<uint4*>(dst + r * pitch + c * 8) = out;
  }

  // Dequantises the raw tile (rows [j0, j0 + kTile) of kDims values) into `dst` (rows
  // of `pitch` elements): x * scale + offset * scale, per channel from `ch` or per row
  // from `rows`.
  template <int kDims>
  static __device__ __forceinline__ void convert(const PrefillDequant& q, const PrefillWork& w, const float2* ch,
                                                 const float2* rows, const unsigned char* raw, T* dst, int pitch,
                                                 int j0, int tid, int threads) {
    constexpr int kChunks = kDims / 8;
    const bool per_channel = q.sd != 0;
    // Per channel, where the block's threads tile the row's chunks evenly, a thread's
    // chunks share one column: its eight pairs are read once, not once a chunk (up to
    // head dim 128: past it the registers they take spill).
    if constexpr (kDims <= 128 && Tr::kThreads % kChunks == 0) {
      if (per_channel) {
        const int c = tid % kChunks;
        float2 sc[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) sc[e] = ch[c * 8 + e];
        for (int r = tid / kChunks; r < kTile; r += Tr::kThreads / kChunks)
          convert_chunk<kDims>(raw, dst, pitch, r, c, j0 + r < w.e.kv_len, sc, 1);
        return;
      }
    }
    for (int i = tid; i < kTile * kChunks; i += threads) {
      const int r = i / kChunks, c = i % kChunks;
      const float2* sc = per_channel ? ch + c * 8 : rows + r;
      convert_chunk<kDims>(raw, dst, pitch, r, c, j0 + r < w.e.kv_len, sc, per_channel ? 1 : 0);
    }
  }
};

}  // namespace attnjit
