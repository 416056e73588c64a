// The prefill kernel (FIA, portable backend): FlashAttention-2 style with
// warp-level mma.sync. A CTA owns kRows rows (4 warps x 16) of one (batch, KV
// head), walks the visible KV tiles through a cp.async double buffer, and keeps
// the online softmax and O in registers. kHdVo is the CTA's slice of the value
// dims: past 256 they split over blockIdx.z (each CTA scores the whole q.k).
#pragma once

#include "prefill/prefill_common.cuh"
#include "prefill/prefill_dequant.cuh"

namespace attnjit {

template <class T_, int kHdQk_, int kHdVo_, int kKvTile_, int kMask_, int kPageSize_, bool kPse_, bool kLse_,
          unsigned kExt_ = 0>
struct PrefillTraits {
  typedef T_ T;
  static constexpr int kHdQk = kHdQk_, kHdVo = kHdVo_, kKvTile = kKvTile_, kMask = kMask_;
  static constexpr int kPageSize = kPageSize_;
  static constexpr bool kPse = kPse_, kLse = kLse_;
  static constexpr unsigned kExt = kExt_;  // prefill_ext bits
  static constexpr int kWarps = 4, kThreads = kWarps * 32, kRows = kWarps * 16, kMinBlocks = 1;
  // Rows padded by 16 bytes: ldmatrix's eight row addresses then hit distinct banks.
  static constexpr int kQkPitch = kHdQk + 8, kVoPitch = kHdVo + 8;  // elements
  static constexpr int kQBytes = kRows * kQkPitch * 2;
  static constexpr int kKStage = kKvTile * kQkPitch * 2, kVStage = kKvTile * kVoPitch * 2;
  // Quantised K/V (antiquant): the two stages hold raw rows (int4: two values a byte),
  // dequantised into one 16-bit stage right before each tile's MMAs.
  static constexpr int kKvQuantDiv = (kExt_ & prefill_ext::kKvInt4) ? 2 : (kExt_ & prefill_ext::kKvInt8) ? 1 : 0;
  static constexpr int kRawK = kKvQuantDiv ? kKvTile * kHdQk / kKvQuantDiv : 0;
  static constexpr int kRawV = kKvQuantDiv ? kKvTile * kHdVo / kKvQuantDiv : 0;
  static constexpr int kTileStages = kKvQuantDiv ? 1 : 2;
  // ... and {scale, offset * scale} of K's and V's dims and of the tile's K and V rows
  // (PrefillDequantTile::load_channels, load_rows).
  static constexpr int kChannelBytes = kKvQuantDiv ? (kHdQk + kHdVo + 2 * kKvTile) * 8 : 0;
  static constexpr int kSmemBytes =
      kQBytes + kTileStages * (kKStage + kVStage) + 2 * (kRawK + kRawV) + kChannelBytes;
  static_assert(kHdQk % 16 == 0 && kHdVo % 16 == 0, "head dims are multiples of 16");
  static_assert(kKvTile % 16 == 0, "the KV tile is whole MMA k-steps");
};

template <class Tr>
struct Prefill {
  typedef typename Tr::T T;
  typedef PrefillCommon<Tr> C;
  static constexpr int kRows = Tr::kRows, kTile = Tr::kKvTile, kThreads = Tr::kThreads;
  static constexpr int kD = Tr::kHdQk, kDv = Tr::kHdVo;
  typedef PrefillDequantTile<Tr> DQ;

  // Stage st's buffers (arithmetic, not an array: a dynamically indexed array goes to
  // the stack): the 16-bit K and V tiles (quantised KV: one, rewritten each tile after
  // the barrier that ends the last one's reads), and the raw rows after them.
  static __device__ __forceinline__ T* sk(unsigned char* smem, int st) {
    return reinterpret_cast<T*>(smem + Tr::kQBytes + (DQ::kOn ? 0 : st) * Tr::kKStage);
  }
  static __device__ __forceinline__ T* sv(unsigned char* smem, int st) {
    return reinterpret_cast<T*>(smem + Tr::kQBytes + Tr::kTileStages * Tr::kKStage + (DQ::kOn ? 0 : st) * Tr::kVStage);
  }
  static __device__ __forceinline__ unsigned char* raw_k(unsigned char* smem, int st) {
    return smem + Tr::kQBytes + Tr::kTileStages * (Tr::kKStage + Tr::kVStage) + st * (Tr::kRawK + Tr::kRawV);
  }
  static __device__ __forceinline__ float2* channels(unsigned char* smem) {  // K's kD, V's kDv, then the rows
    return reinterpret_cast<float2*>(raw_k(smem, 2));
  }
  static __device__ __forceinline__ float2* row_scales(unsigned char* smem) {  // K's kTile, then V's
    return channels(smem) + kD + kDv;
  }

  // Issues the cp.async loads of KV tile [j0, j0 + kTile) into one stage; rows at
  // or past kv_len are zero-filled (V must be 0 there: P is 0, but 0 * NaN is not).
  static __device__ __forceinline__ void load_kv(const PrefillParams& p, unsigned char* smem, int st,
                                                 const PrefillWork& w, int j0) {
    if constexpr (DQ::kOn) {  // raw rows into the stage's raw buffers; dequantised before use
      DQ::template load_raw<kD, false>(p, raw_k(smem, st), w, j0, 0, threadIdx.x, kThreads);
      DQ::template load_raw<kDv, true>(p, raw_k(smem, st) + Tr::kRawK, w, j0, w.dv0, threadIdx.x, kThreads);
      return;
    }
    T* const k_tile = sk(smem, st);
    T* const v_tile = sv(smem, st);
    constexpr int kKChunks = kD / 8, kVChunks = kDv / 8;
    for (int i = threadIdx.x; i < kTile * kKChunks; i += kThreads) {
      const int r = i / kKChunks, c = i % kKChunks, j = j0 + r;
      const bool ok = j < w.e.kv_len;
      const T* src = ok ? C::kv_row(p, C::template kv_src<false>(p), w, j) + c * 8
                        : static_cast<const T*>(p.k);
      cp_async_16(k_tile + r * Tr::kQkPitch + c * 8, src, ok ? 16u : 0u);
    }
    for (int i = threadIdx.x; i < kTile * kVChunks; i += kThreads) {
      const int r = i / kVChunks, c = i % kVChunks, j = j0 + r;
      const bool ok = j < w.e.kv_len;
      const T* src = ok ? C::kv_row(p, C::template kv_src<true>(p), w, j) + w.dv0 + c * 8
                        : static_cast<const T*>(p.v);
      cp_async_16(v_tile + r * Tr::kVoPitch + c * 8, src, ok ? 16u : 0u);
    }
  }

  static __device__ void run(const PrefillParams& p, unsigned char* smem) {
    const PrefillWork w = C::template find_work<kTile>(p);
    if (w.zero) {
      C::zero_rows(p, w, threadIdx.x, kThreads);
      return;
    }
    const int kv_first = w.kv_first, n_tiles = w.n_tiles;

    T* sq = reinterpret_cast<T*>(smem);

    // Q tile (zero rows past r_end), then the first KV tile: one group.
    constexpr int kQChunks = kD / 8;
    for (int i = threadIdx.x; i < kRows * kQChunks; i += kThreads) {
      const int rr = i / kQChunks, c = i % kQChunks, r = w.r0 + rr;
      const bool ok = r < w.r_end;
      const T* src = ok ? C::q_row(p, w, r) + c * 8 : static_cast<const T*>(p.q);
      cp_async_16(sq + rr * Tr::kQkPitch + c * 8, src, ok ? 16u : 0u);
    }
    if (n_tiles > 0) load_kv(p, smem, 0, w, kv_first);
    if constexpr (DQ::kOn) {  // read after the first tile's barrier
      DQ::load_channels(p.k_dq, w, channels(smem), kD, 0, threadIdx.x, kThreads);
      DQ::load_channels(p.v_dq, w, channels(smem) + kD, kDv, w.dv0, threadIdx.x, kThreads);
    }
    cp_async_commit();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const typename C::Rows R = C::rows_of(p, w, warp, lane);
    const bool active = w.r0 + warp * 16 < w.r_end;

    float o[kDv / 8][4];
    for (int n = 0; n < kDv / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};

    for (int it = 0; it < n_tiles; ++it) {
      const int st = it & 1, j0 = kv_first + it * kTile;
      // The stage written here was read in iteration it - 1, which ended in a barrier.
      if (it + 1 < n_tiles) load_kv(p, smem, st ^ 1, w, j0 + kTile);
      cp_async_commit();
      if constexpr (DQ::kOn) {
        DQ::load_rows(p, p.k_dq, w, row_scales(smem), j0, threadIdx.x, kThreads);
        DQ::load_rows(p, p.v_dq, w, row_scales(smem) + kTile, j0, threadIdx.x, kThreads);
      }
      cp_async_wait<1>();
      __syncthreads();
      if constexpr (DQ::kOn) {
        DQ::template convert<kD>(p.k_dq, w, channels(smem), row_scales(smem), raw_k(smem, st), sk(smem, st),
                                 Tr::kQkPitch, j0, threadIdx.x, kThreads);
        DQ::template convert<kDv>(p.v_dq, w, channels(smem) + kD, row_scales(smem) + kTile,
                                  raw_k(smem, st) + Tr::kRawK, sv(smem, st), Tr::kVoPitch, j0, threadIdx.x, kThreads);
        __syncthreads();
      }

      // A warp whose 16 rows all lie past the CTA's last (Q_S = 1 with a small group:
      // 48 of the 64) only loads and dequantises: its MMAs would compute rows nobody reads.
      if (active) {
        // S = Q K^T for the warp's 16 rows.
        float s[kTile / 8][4];
        for (int n = 0; n < kTile / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        const T* qw = sq + warp * 16 * Tr::kQkPitch;
#pragma unroll
        for (int k0 = 0; k0 < kD; k0 += 16) {
          u32 a[4];
          ldmatrix_x4(a, qw + (lane % 16) * Tr::kQkPitch + k0 + (lane / 16) * 8);
#pragma unroll
          for (int n0 = 0; n0 < kTile; n0 += 16) {
            u32 bf[4];
            ldmatrix_x4(bf, sk(smem, st) + (n0 + lane % 8 + (lane / 16) * 8) * Tr::kQkPitch + k0 +
                                ((lane / 8) % 2) * 8);
            mma_16816<T>(s[n0 / 8], a, bf[0], bf[1]);
            mma_16816<T>(s[n0 / 8 + 1], a, bf[2], bf[3]);
          }
        }

        // Scale, pse, mask; then the online softmax (log2 domain).
        float mx[2] = {kNegInf, kNegInf};
#pragma unroll
        for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int hf = c / 2;
            const int j = j0 + n * 8 + (lane % 4) * 2 + (c % 2);
            const float x = C::score(p.scale, R.jlo[hf], R.jhi[hf], R.mask[hf], R.pse[hf], j, s[n][c]);
            s[n][c] = x;
            mx[hf] = fmaxf(mx[hf], x);
          }
        float alpha[2];
        for (int hf = 0; hf < 2; ++hf) {
          mx[hf] = quad_max(mx[hf]);
          alpha[hf] = online_max_step(m[hf], l[hf], mx[hf]);
        }
#pragma unroll
        for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const float pv = fast_exp2(s[n][c] - mx[c / 2]);
            s[n][c] = pv;
            l[c / 2] += pv;
          }
#pragma unroll
        for (int n = 0; n < kDv / 8; ++n) {
          o[n][0] *= alpha[0];
          o[n][1] *= alpha[0];
          o[n][2] *= alpha[1];
          o[n][3] *= alpha[1];
        }

        // O += P V: P from the S accumulators (the A layout), V through ldmatrix.trans.
#pragma unroll
        for (int kk = 0; kk < kTile / 16; ++kk) {
          u32 a[4];
          a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
          a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
          a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
          a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
          for (int n0 = 0; n0 < kDv; n0 += 16) {
            u32 bf[4];
            ldmatrix_x4_trans(bf, sv(smem, st) + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * Tr::kVoPitch + n0 +
                                      (lane / 16) * 8);
            mma_16816<T>(o[n0 / 8], a, bf[0], bf[1]);
            mma_16816<T>(o[n0 / 8 + 1], a, bf[2], bf[3]);
          }
        }
      }
      __syncthreads();  // the stage is free for iteration it + 1's prefetch
    }
    cp_async_wait<0>();

#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      C::write_row(p, w, R, hf, lane, m[hf], l[hf], [&](int n, int c) { return o[n][c]; });
  }
};

}  // namespace attnjit
