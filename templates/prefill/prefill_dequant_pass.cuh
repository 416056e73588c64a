// The dequantising pass of int8 K/V at Q_S > 1 (the plan's dequant-first path): each
// CTA turns up to 64 tokens of one KV head of one batch into 16-bit rows, (x + offset)
// * scale by PrefillDequant, in fp32 and rounded once, into dense copies of K and V
// (PrefillDequantOut) that the 16-bit attention kernel then reads. Prefill reuses each
// K/V row for every query row of its KV head, so one pass that reads the int8 bytes and
// writes 16-bit ones costs a few percent of a compute-bound call, where dequantising
// inside the attention loop costs instruction issue on every tile of every row block.
// Rows at or past a batch's KV length are not written (the attention never reads them:
// its tails are zero-filled gathers), and their scales are never read.
// The full int8 path (kQInt8) also copies the query's rows of the tile's tokens, and
// scales all three by the seed's per-tensor fp32 scales (PrefillDequantOut) read on
// device, so a captured graph replays new values.
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
  static constexpr bool kQInt8 = (kExt_ & prefill_ext::kQInt8) != 0;
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

  // A thread's chunks of K (or V): chunk i of the tile is row i / (kDims / 16), 16 values
  // (one 16-byte load) of column i % (kDims / 16); thread t takes chunks t, t + kThreads, ...
  template <int kDims>
  struct Chunks {
    static constexpr int kPerRow = kDims / 16, kCount = (kTile * kPerRow + Tr::kThreads - 1) / Tr::kThreads;
  };

  // All of a thread's loads of K (or V) at once (the pass is bound by memory latency):
  // rows [j0, j0 + n); the others stay unread.
  template <int kDims, bool kValue>
  static __device__ __forceinline__ void load(const PrefillParams& p, const PrefillWork& w, int j0, int n,
                                              uint4 (&x)[Chunks<kDims>::kCount]) {
    typedef Chunks<kDims> K;
    const typename C::KvSrc src = C::template kv_src<kValue>(p);
#pragma unroll
    for (int k = 0; k < K::kCount; ++k) {
      const int i = threadIdx.x + k * Tr::kThreads, r = i / K::kPerRow, c = i % K::kPerRow;
      if (r < n) x[k] = *reinterpret_cast<const uint4*>(C::template kv_row<signed char>(p, src, w, j0 + r) + c * 16);
    }
  }

  // The loaded chunks, (x + offset) * scale per channel (ch) or per row (row_sc), into the copy.
  template <int kDims, bool kValue>
  static __device__ __forceinline__ void store(const PrefillParams& p, const PrefillWork& w, const float2* ch,
                                               const float2* row_sc, int j0, int n,
                                               const uint4 (&x)[Chunks<kDims>::kCount]) {
    typedef Chunks<kDims> K;
    const bool per_channel = (kValue ? p.v_dq : p.k_dq).sd != 0;
    const PrefillDequantOut& o = p.dq_out;
    T* const base = static_cast<T*>(kValue ? o.v : o.k) + (long long)w.b * (kValue ? o.v_sb : o.k_sb) +
                    (long long)w.hk * (kValue ? o.v_sh : o.k_sh);
    const long long ss = kValue ? o.v_ss : o.k_ss;
#pragma unroll
    for (int k = 0; k < K::kCount; ++k) {
      const int i = threadIdx.x + k * Tr::kThreads, r = i / K::kPerRow, c = i % K::kPerRow;
      if (r >= n) continue;
      const float2* sc = per_channel ? ch + c * 16 : row_sc + r;
      const int step = per_channel ? 1 : 0;
      uint4* dst = reinterpret_cast<uint4*>(base + (long long)(w.e.kv_tok0 + j0 + r) * ss + c * 16);
      dst[0] = DQ::convert8(x[k].x, x[k].y, sc, step);
      dst[1] = DQ::convert8(x[k].z, x[k].w, sc + 8 * step, step);
    }
  }

  // The full int8 path: query tokens [j0, j0 + kTile) of the batch, each with the group's
  // heads of KV head w.hk, q * sc into the query's copy (at the same token positions, so
  // left padding's q_tok0 addresses both alike).
  static __device__ __forceinline__ void copy_query(const PrefillParams& p, const PrefillWork& w, int j0, float sc) {
    constexpr int kPerRow = Tr::kHdQk / 16;
    const int n = min(kTile, w.e.q_len - j0), G = p.group;
    if (n <= 0) return;
    const PrefillDequantOut& o = p.dq_out;
    const float2 s2 = make_float2(sc, 0.f);
    for (int i = threadIdx.x; i < n * G * kPerRow; i += Tr::kThreads) {
      const int r = i / kPerRow, c = i % kPerRow, h = w.hk * G + r % G;
      const long long tok = w.e.q_tok0 + j0 + r / G;
      const uint4 x = *reinterpret_cast<const uint4*>(static_cast<const signed char*>(p.q) + (long long)w.b * p.q_stride_b +
                                                      tok * p.q_stride_s + (long long)h * p.q_stride_h + c * 16);
      uint4* dst = reinterpret_cast<uint4*>(static_cast<T*>(o.q) + (long long)w.b * o.q_sb + tok * o.q_ss +
                                            (long long)h * o.q_sh + c * 16);
      dst[0] = DQ::convert8(x.x, x.y, &s2, 0);
      dst[1] = DQ::convert8(x.z, x.w, &s2, 0);
    }
  }

  // Grid: x the 64-token tiles (of the longer of the query and the KV), y the KV head,
  // z the batch entry of this launch.
  static __device__ void run(const PrefillParams& p, unsigned char* smem) {
    if ((int)blockIdx.z >= p.num_batches) return;
    PrefillWork w;
    w.e = p.batches[blockIdx.z];
    w.b = p.first_batch + blockIdx.z;
    w.hk = blockIdx.y;
    C::adjust_batch(p, w);  // left padding moves q_tok0 and kv_tok0 (or empties the batch's KV)
    const int j0 = blockIdx.x * kTile;
    float qk_scale = 0.f, v_scale = 0.f;
    if constexpr (Tr::kQInt8) {
      // Q and K each take sqrt(|dequant_scale1|), K its sign too: their product is the scale
      // (a negative one took the root of a negative number: NaN).
      const float ds1 = *p.dq_out.dequant_scale1, root = sqrtf(fabsf(ds1));
      qk_scale = copysignf(root, ds1);
      v_scale = *p.dq_out.quant_scale1 * *p.dq_out.dequant_scale2;
      copy_query(p, w, j0, root);
    }
    if (j0 >= w.e.kv_len) return;
    const int n = min(kTile, w.e.kv_len - j0);
    // The tile's bytes first, then the scales under their latency.
    uint4 xk[Chunks<Tr::kHdQk>::kCount], xv[Chunks<Tr::kHdVo>::kCount];
    load<Tr::kHdQk, false>(p, w, j0, n, xk);
    load<Tr::kHdVo, true>(p, w, j0, n, xv);
    float2* ch_k = reinterpret_cast<float2*>(smem);
    float2* ch_v = ch_k + Tr::kHdQk;
    float2* rows_k = ch_v + Tr::kHdVo;
    float2* rows_v = rows_k + kTile;
    if constexpr (Tr::kQInt8) {  // per tensor: every row's pair (k_dq and v_dq are empty, sd 0)
      for (int r = threadIdx.x; r < kTile; r += Tr::kThreads) {
        rows_k[r] = make_float2(qk_scale, 0.f);
        rows_v[r] = make_float2(v_scale, 0.f);
      }
    } else {
      DQ::load_channels(p.k_dq, w, ch_k, Tr::kHdQk, 0, threadIdx.x, Tr::kThreads);
      DQ::load_channels(p.v_dq, w, ch_v, Tr::kHdVo, 0, threadIdx.x, Tr::kThreads);
      DQ::load_rows(p, p.k_dq, w, rows_k, j0, threadIdx.x, Tr::kThreads);
      DQ::load_rows(p, p.v_dq, w, rows_v, j0, threadIdx.x, Tr::kThreads);
    }
    __syncthreads();
    store<Tr::kHdQk, false>(p, w, ch_k, rows_k, j0, n, xk);
    store<Tr::kHdVo, true>(p, w, ch_v, rows_v, j0, n, xv);
  }
};

}  // namespace attnjit
