// The dequantising pass of int8 K/V at Q_S > 1 (the plan's dequant-first path): each
// CTA turns up to 64 tokens of one KV head of one batch into 16-bit rows, (x + offset)
// * scale by PrefillDequant, in fp32 and rounded once, into dense copies of K and V
// (PrefillDequantOut) that the 16-bit attention kernel then reads. Prefill reuses each
// K/V row for every query row of its KV head, so one pass that reads the int8 bytes and
// writes 16-bit ones costs a few percent of a compute-bound call, where dequantising
// inside the attention loop costs instruction issue on every tile of every row block.
// Rows at or past a batch's KV length are not written (the attention never reads them:
// its tails are zero-filled gathers), and their scales are never read.
#pragma once

#include "prefill/prefill_dequant.cuh"

namespace attnjit {

template <class T_, int kHdQk_, int kHdVo_, unsigned kExt_>
struct PrefillDequantPassTraits {
  typedef T_ T;
  static constexpr int kHdQk = kHdQk_, kHdVo = kHdVo_;
  // What PrefillCommon and PrefillDequantTile read: contiguous KV, no band.
  static constexpr int kKvTile = 64, kMask = prefill_mask::kNone, kPageSize = 0, kRows = 64;
  static constexpr bool kPse = false, kLse = false;
  static constexpr unsigned kExt = kExt_;
  static constexpr int kThreads = 256, kMinBlocks = 1;
  // {scale, offset * scale} of K's and V's channels, and of the tile's K and V rows.
  static constexpr int kSmemBytes = (kHdQk + kHdVo + 2 * kKvTile) * 8;
  static_assert((kExt & prefill_ext::kKvInt8) != 0 && (kExt & (prefill_ext::kKvInt4 | prefill_ext::kPrefix)) == 0,
                "the pass dequantises int8 K/V without a shared prefix");
  static_assert(kHdQk % 16 == 0 && kHdVo % 16 == 0, "rows are whole 16-byte chunks");
};

template <class Tr>
struct PrefillDequantPass {
  typedef typename Tr::T T;
  typedef PrefillCommon<Tr> C;
  typedef PrefillDequantTile<Tr> DQ;
  static constexpr int kTile = Tr::kKvTile;

  // Rows [j0, j0 + n) of K (or V) into its copy: 16 values a thread at a time.
  template <int kDims, bool kValue>
  static __device__ __forceinline__ void rows(const PrefillParams& p, const PrefillWork& w, const float2* ch,
                                              const float2* row_sc, int j0, int n) {
    constexpr int kChunks = kDims / 16;
    const PrefillDequant& q = kValue ? p.v_dq : p.k_dq;
    const bool per_channel = q.sd != 0;
    const typename C::KvSrc src = C::template kv_src<kValue>(p);
    const PrefillDequantOut& o = p.dq_out;
    T* const base = static_cast<T*>(kValue ? o.v : o.k) + (long long)w.b * (kValue ? o.v_sb : o.k_sb) +
                    (long long)w.hk * (kValue ? o.v_sh : o.k_sh);
    const long long ss = kValue ? o.v_ss : o.k_ss;
    for (int i = threadIdx.x; i < n * kChunks; i += Tr::kThreads) {
      const int r = i / kChunks, c = i % kChunks, j = j0 + r;
      const uint4 x = *reinterpret_cast<const uint4*>(C::template kv_row<signed char>(p, src, w, j) + c * 16);
      const float2* sc = per_channel ? ch + c * 16 : row_sc + r;
      const int step = per_channel ? 1 : 0;
      uint4* dst = reinterpret_cast<uint4*>(base + (long long)(w.e.kv_tok0 + j) * ss + c * 16);
      dst[0] = DQ::convert8(x.x, x.y, sc, step);
      dst[1] = DQ::convert8(x.z, x.w, sc + 8 * step, step);
    }
  }

  // Grid: x the 64-token tiles, y the KV head, z the batch entry of this launch.
  static __device__ void run(const PrefillParams& p, unsigned char* smem) {
    if ((int)blockIdx.z >= p.num_batches) return;
    PrefillWork w;
    w.e = p.batches[blockIdx.z];
    w.b = p.first_batch + blockIdx.z;
    w.hk = blockIdx.y;
    C::adjust_batch(p, w);  // left padding moves kv_tok0 (or empties the batch)
    const int j0 = blockIdx.x * kTile;
    if (j0 >= w.e.kv_len) return;
    const int n = min(kTile, w.e.kv_len - j0);
    float2* ch_k = reinterpret_cast<float2*>(smem);
    float2* ch_v = ch_k + Tr::kHdQk;
    float2* rows_k = ch_v + Tr::kHdVo;
    float2* rows_v = rows_k + kTile;
    DQ::load_channels(p.k_dq, w, ch_k, Tr::kHdQk, 0, threadIdx.x, Tr::kThreads);
    DQ::load_channels(p.v_dq, w, ch_v, Tr::kHdVo, 0, threadIdx.x, Tr::kThreads);
    DQ::load_rows(p, p.k_dq, w, rows_k, j0, threadIdx.x, Tr::kThreads);
    DQ::load_rows(p, p.v_dq, w, rows_v, j0, threadIdx.x, Tr::kThreads);
    __syncthreads();
    rows<Tr::kHdQk, false>(p, w, ch_k, rows_k, j0, n);
    rows<Tr::kHdVo, true>(p, w, ch_v, rows_v, j0, n);
  }
};

}  // namespace attnjit
