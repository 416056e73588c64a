// What both prefill kernels (portable mma.sync, Hopper wgmma) share: the work item
// of a CTA from the host-planned list, KV addressing (contiguous or paged), each
// thread's two score rows (band, mask and pse rows), the score of one element,
// zero-filled rows and the normalised output and LSE. The MMA accumulator layout
// (row lane / 4 and + 8 of a warp's 16, columns 2 * (lane % 4) + {0, 1} of each
// 8-wide block) is the same for mma.sync m16n8 and wgmma m64nN.
#pragma once

#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "prefill/prefill_params.cuh"

namespace attnjit {

// The CTA's work: batch entry, rows [r0, r_end) of (token, group head) pairs, and
// the KV tiles [kv_first, kv_first + n_tiles * kTile) its band can see.
struct PrefillWork {
  PrefillBatch e;
  int b;            // global batch index
  int hk;           // KV head
  bool zero;        // a zero tile: rows [r0, r_end) past q_len are cleared
  int r0, r_end;
  int shift;        // kv_len - q_len when the band is shifted, else 0
  int kv_first, n_tiles;
  int dv0;          // first V/output dim of this CTA: head dims past 256 split over blockIdx.z
};

template <class Tr>
struct PrefillCommon {
  typedef typename Tr::T T;
  static constexpr int kRows = Tr::kRows, kDv = Tr::kHdVo;

  // The CTA's own work: tile blockIdx.x of KV head blockIdx.y (value-dim chunk blockIdx.z).
  template <int kTile>
  static __device__ __forceinline__ PrefillWork find_work(const PrefillParams& p) {
    return find_work<kTile>(p, blockIdx.x, blockIdx.y, blockIdx.z);
  }
  // Work-list tile `tile` of KV head hk (a persistent CTA walks several).
  template <int kTile>
  static __device__ __forceinline__ PrefillWork find_work(const PrefillParams& p, int tile, int hk, int z) {
    PrefillWork w;
    w.hk = hk;
    w.dv0 = z * kDv;
    int bi = 0;
    while (bi + 1 < p.num_batches && p.batches[bi + 1].tile_begin <= tile) ++bi;
    w.e = p.batches[bi];
    w.b = p.first_batch + bi;
    const int G = p.group, t = tile - w.e.tile_begin, rows = w.e.q_len * G;
    w.shift = p.band_shift ? w.e.kv_len - w.e.q_len : 0;
    w.kv_first = w.n_tiles = 0;
    w.zero = t >= w.e.compute_tiles;
    if (w.zero) {
      w.r0 = rows + (t - w.e.compute_tiles) * kRows;
      w.r_end = min(w.r0 + kRows, p.q_seq * G);
      return w;
    }
    // Heaviest tiles first: under a causal band the later rows see more keys.
    w.r0 = (w.e.compute_tiles - 1 - t) * kRows;
    w.r_end = min(w.r0 + kRows, rows);
    // Visible KV span of the tile's query tokens [qa, qb].
    const int qa = w.r0 / G, qb = (w.r_end - 1) / G;
    long long lo = 0, hi = w.e.kv_len;
    if constexpr (Tr::kMask != prefill_mask::kNone) {
      lo = max(0LL, (long long)qa + p.band_lo + w.shift);
      hi = min((long long)w.e.kv_len, (long long)qb + p.band_hi + w.shift + 1);
    }
    w.kv_first = hi > lo ? int(lo / kTile) * kTile : 0;
    w.n_tiles = hi > lo ? int((hi - w.kv_first + kTile - 1) / kTile) : 0;
    return w;
  }

  // Address of KV token j (logical position) of the work's batch and head.
  static __device__ __forceinline__ const T* kv_row(const PrefillParams& p, const void* base, long long sb,
                                                    long long ss, long long sh, const PrefillWork& w, int j) {
    long long off;
    if constexpr (Tr::kPageSize > 0) {
      const int blk = p.block_table[(long long)w.b * p.block_table_stride_b + j / Tr::kPageSize];
      off = (long long)blk * sb + (long long)(j % Tr::kPageSize) * ss;
    } else {
      off = (long long)w.b * sb + (long long)(w.e.kv_tok0 + j) * ss;
    }
    return static_cast<const T*>(base) + off + (long long)w.hk * sh;
  }
  static __device__ __forceinline__ const T* q_row(const PrefillParams& p, const PrefillWork& w, int r) {
    return static_cast<const T*>(p.q) + (long long)w.b * p.q_stride_b +
           (long long)(w.e.q_tok0 + r / p.group) * p.q_stride_s + (long long)(w.hk * p.group + r % p.group) * p.q_stride_h;
  }

  // Rows past q_len (padded layouts): output 0, LSE +inf. `tid` of `threads`. (With
  // split value dims every CTA writes the same LSE.)
  static __device__ void zero_rows(const PrefillParams& p, const PrefillWork& w, int tid, int threads) {
    T* out = static_cast<T*>(p.out);
    for (int i = tid; i < (w.r_end - w.r0) * kDv; i += threads) {
      const int r = w.r0 + i / kDv, c = i % kDv;
      const int qi = r / p.group, h = w.hk * p.group + r % p.group;
      out[(long long)w.b * p.o_stride_b + (long long)(w.e.q_tok0 + qi) * p.o_stride_s + (long long)h * p.o_stride_h +
          w.dv0 + c] = from_float<T>(0.0f);
    }
    if constexpr (Tr::kLse) {
      for (int r = w.r0 + tid; r < w.r_end; r += threads) {
        const int qi = r / p.group, h = w.hk * p.group + r % p.group;
        p.lse[(long long)w.b * p.lse_stride_b + (long long)(w.e.q_tok0 + qi) * p.lse_stride_s +
              (long long)h * p.lse_stride_h] = __int_as_float(0x7f800000);
      }
    }
  }

  // A thread's two score rows (lane / 4 and + 8 of warp `warp`'s 16): their
  // visible keys [jlo, jhi] (band and length; empty for rows past r_end), and
  // their mask and pse rows.
  struct Rows {
    int q[2], h[2], jlo[2], jhi[2];
    bool ok[2];
    const unsigned char* mask[2];
    const T* pse[2];
  };
  static __device__ __forceinline__ Rows rows_of(const PrefillParams& p, const PrefillWork& w, int warp, int lane) {
    Rows R;
    const int G = p.group;
    for (int hf = 0; hf < 2; ++hf) {
      const int r = w.r0 + warp * 16 + lane / 4 + hf * 8;
      R.ok[hf] = r < w.r_end;
      R.q[hf] = R.ok[hf] ? r / G : 0;
      R.h[hf] = w.hk * G + (R.ok[hf] ? r % G : 0);
      long long jlo = 0, jhi = (long long)w.e.kv_len - 1;
      if constexpr (Tr::kMask != prefill_mask::kNone) {
        jlo = max(jlo, (long long)R.q[hf] + p.band_lo + w.shift);
        jhi = min(jhi, (long long)R.q[hf] + p.band_hi + w.shift);
      }
      R.jlo[hf] = int(min(jlo, (long long)kPrefillBandInf));
      R.jhi[hf] = R.ok[hf] ? int(max(jhi, -1LL)) : -1;
      R.mask[hf] = nullptr;
      R.pse[hf] = nullptr;
      if constexpr (Tr::kMask == prefill_mask::kTensor)
        R.mask[hf] = p.mask + (long long)w.b * p.mask_stride_b + (long long)R.q[hf] * p.mask_stride_s;
      if constexpr (Tr::kPse)
        R.pse[hf] = static_cast<const T*>(p.pse) + (long long)w.b * p.pse_stride_b +
                    (long long)R.h[hf] * p.pse_stride_h + (long long)R.q[hf] * p.pse_stride_s;
    }
    return R;
  }

  // The score of raw q.k `x` at key j of row half hf, in the log2 domain; -inf
  // when the key is not visible.
  // (The row's fields come by value: a Rows reference here costs registers.)
  static __device__ __forceinline__ float score(float scale, int jlo, int jhi, const unsigned char* mask_row,
                                                const T* pse_row, int j, float x) {
    x *= scale;
    bool vis = j >= jlo && j <= jhi;
    if constexpr (Tr::kMask == prefill_mask::kTensor) {
      if (vis) vis = mask_row[j] == 0;
    }
    if constexpr (Tr::kPse) {
      if (vis) x += to_float(pse_row[j]);
    }
    return vis ? x * kLog2e : kNegInf;
  }

  // Normalises row half hf (o_at(n, c): the accumulator of 8-wide output block n,
  // element c of the m16n8 layout) and writes it and its LSE. A row that saw no
  // key writes 0 and LSE +inf. Every lane of the quad must call (quad_sum).
  template <class OAt>
  static __device__ __forceinline__ void write_row(const PrefillParams& p, const PrefillWork& w, const Rows& R, int hf,
                                                   int lane, float m, float l, OAt o_at) {
    const float sum = quad_sum(l);
    if (!R.ok[hf]) return;
    const float inv = sum > 0.f ? 1.0f / sum : 0.f;
    T* orow = static_cast<T*>(p.out) + (long long)w.b * p.o_stride_b +
              (long long)(w.e.q_tok0 + R.q[hf]) * p.o_stride_s + (long long)R.h[hf] * p.o_stride_h + w.dv0;
#pragma unroll
    for (int n = 0; n < kDv / 8; ++n) {
      const u32 packed = pack2<T>(o_at(n, hf * 2) * inv, o_at(n, hf * 2 + 1) * inv);
      *reinterpret_cast<u32*>(orow + n * 8 + (lane % 4) * 2) = packed;
    }
    if constexpr (Tr::kLse) {
      if (lane % 4 == 0) {
        const float lse = sum > 0.f ? (m + __log2f(sum)) * 0.6931471805599453f : __int_as_float(0x7f800000);
        p.lse[(long long)w.b * p.lse_stride_b + (long long)(w.e.q_tok0 + R.q[hf]) * p.lse_stride_s +
              (long long)R.h[hf] * p.lse_stride_h] = lse;
      }
    }
  }
};

}  // namespace attnjit
