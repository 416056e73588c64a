// The prefill kernel (FIA, portable backend): FlashAttention-2 style with
// warp-level mma.sync. A CTA owns kRows rows (4 warps x 16) of one (batch, KV
// head), walks the visible KV tiles through a cp.async double buffer, and keeps
// the online softmax and O in registers.
#pragma once

#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "prefill/prefill_params.cuh"

namespace attnjit {

template <class T_, int kHdQk_, int kHdVo_, int kKvTile_, int kMask_, int kPageSize_, bool kPse_, bool kLse_>
struct PrefillTraits {
  typedef T_ T;
  static constexpr int kHdQk = kHdQk_, kHdVo = kHdVo_, kKvTile = kKvTile_, kMask = kMask_;
  static constexpr int kPageSize = kPageSize_;
  static constexpr bool kPse = kPse_, kLse = kLse_;
  static constexpr int kWarps = 4, kThreads = kWarps * 32, kRows = kWarps * 16, kMinBlocks = 1;
  // Rows padded by 16 bytes: ldmatrix's eight row addresses then hit distinct banks.
  static constexpr int kQkPitch = kHdQk + 8, kVoPitch = kHdVo + 8;  // elements
  static constexpr int kQBytes = kRows * kQkPitch * 2;
  static constexpr int kKStage = kKvTile * kQkPitch * 2, kVStage = kKvTile * kVoPitch * 2;
  static constexpr int kSmemBytes = kQBytes + 2 * (kKStage + kVStage);
  static_assert(kHdQk % 16 == 0 && kHdVo % 16 == 0, "head dims are multiples of 16");
  static_assert(kKvTile % 16 == 0, "the KV tile is whole MMA k-steps");
};

template <class Tr>
struct Prefill {
  typedef typename Tr::T T;
  static constexpr int kRows = Tr::kRows, kTile = Tr::kKvTile, kThreads = Tr::kThreads;
  static constexpr int kD = Tr::kHdQk, kDv = Tr::kHdVo;

  // Address of KV token j (logical position) of batch b, head hk.
  static __device__ __forceinline__ const T* kv_row(const PrefillParams& p, const void* base, long long sb,
                                                    long long ss, long long sh, int b, const PrefillBatch& e,
                                                    int hk, int j) {
    long long off;
    if constexpr (Tr::kPageSize > 0) {
      const int blk = p.block_table[(long long)b * p.block_table_stride_b + j / Tr::kPageSize];
      off = (long long)blk * sb + (long long)(j % Tr::kPageSize) * ss;
    } else {
      off = (long long)b * sb + (long long)(e.kv_tok0 + j) * ss;
    }
    return static_cast<const T*>(base) + off + (long long)hk * sh;
  }

  // Issues the cp.async loads of KV tile [j0, j0 + kTile) into one stage; rows at
  // or past kv_len are zero-filled (V must be 0 there: P is 0, but 0 * NaN is not).
  static __device__ __forceinline__ void load_kv(const PrefillParams& p, T* sk, T* sv, int b, const PrefillBatch& e,
                                                 int hk, int j0) {
    constexpr int kKChunks = kD / 8, kVChunks = kDv / 8;
    for (int i = threadIdx.x; i < kTile * kKChunks; i += kThreads) {
      const int r = i / kKChunks, c = i % kKChunks, j = j0 + r;
      const bool ok = j < e.kv_len;
      const T* src = ok ? kv_row(p, p.k, p.k_stride_b, p.k_stride_s, p.k_stride_h, b, e, hk, j) + c * 8
                        : static_cast<const T*>(p.k);
      cp_async_16(sk + r * Tr::kQkPitch + c * 8, src, ok ? 16u : 0u);
    }
    for (int i = threadIdx.x; i < kTile * kVChunks; i += kThreads) {
      const int r = i / kVChunks, c = i % kVChunks, j = j0 + r;
      const bool ok = j < e.kv_len;
      const T* src = ok ? kv_row(p, p.v, p.v_stride_b, p.v_stride_s, p.v_stride_h, b, e, hk, j) + c * 8
                        : static_cast<const T*>(p.v);
      cp_async_16(sv + r * Tr::kVoPitch + c * 8, src, ok ? 16u : 0u);
    }
  }

  // Rows past q_len (padded layouts): output 0, LSE +inf.
  static __device__ void zero_rows(const PrefillParams& p, int b, const PrefillBatch& e, int hk, int r0, int r1) {
    T* out = static_cast<T*>(p.out);
    for (int i = threadIdx.x; i < (r1 - r0) * kDv; i += kThreads) {
      const int r = r0 + i / kDv, c = i % kDv;
      const int qi = r / p.group, h = hk * p.group + r % p.group;
      out[(long long)b * p.o_stride_b + (long long)(e.q_tok0 + qi) * p.o_stride_s + (long long)h * p.o_stride_h + c] =
          from_float<T>(0.0f);
    }
    if constexpr (Tr::kLse) {
      for (int r = r0 + threadIdx.x; r < r1; r += kThreads) {
        const int qi = r / p.group, h = hk * p.group + r % p.group;
        p.lse[(long long)b * p.lse_stride_b + (long long)(e.q_tok0 + qi) * p.lse_stride_s +
              (long long)h * p.lse_stride_h] = __int_as_float(0x7f800000);
      }
    }
  }

  static __device__ void run(const PrefillParams& p, unsigned char* smem) {
    // The work item: the batch entry holding this CTA's tile, then the tile.
    const int tile = blockIdx.x, hk = blockIdx.y;
    int bi = 0;
    while (bi + 1 < p.num_batches && p.batches[bi + 1].tile_begin <= tile) ++bi;
    const PrefillBatch e = p.batches[bi];
    const int b = p.first_batch + bi;
    const int G = p.group;
    const int t = tile - e.tile_begin;
    const int rows = e.q_len * G;
    if (t >= e.compute_tiles) {
      const int r0 = rows + (t - e.compute_tiles) * kRows;
      zero_rows(p, b, e, hk, r0, min(r0 + kRows, p.q_seq * G));
      return;
    }
    // Heaviest tiles first: under a causal band the later rows see more keys.
    const int r0 = (e.compute_tiles - 1 - t) * kRows;
    const int r_end = min(r0 + kRows, rows);

    T* sq = reinterpret_cast<T*>(smem);
    // Stage st of K and V (arithmetic, not an array: a dynamically indexed array goes to the stack).
    auto sk = [&](int st) { return reinterpret_cast<T*>(smem + Tr::kQBytes + st * Tr::kKStage); };
    auto sv = [&](int st) { return reinterpret_cast<T*>(smem + Tr::kQBytes + 2 * Tr::kKStage + st * Tr::kVStage); };

    // Visible KV span of the tile's query tokens [qa, qb].
    const int qa = r0 / G, qb = (r_end - 1) / G;
    const int shift = p.band_shift ? e.kv_len - e.q_len : 0;
    long long lo = 0, hi = e.kv_len;
    if constexpr (Tr::kMask != prefill_mask::kNone) {
      lo = max(0LL, (long long)qa + p.band_lo + shift);
      hi = min((long long)e.kv_len, (long long)qb + p.band_hi + shift + 1);
    }
    const int kv_first = hi > lo ? int(lo / kTile) * kTile : 0;
    const int n_tiles = hi > lo ? int((hi - kv_first + kTile - 1) / kTile) : 0;

    // Q tile (zero rows past r_end), then the first KV tile: one group.
    constexpr int kQChunks = kD / 8;
    for (int i = threadIdx.x; i < kRows * kQChunks; i += kThreads) {
      const int rr = i / kQChunks, c = i % kQChunks, r = r0 + rr;
      const bool ok = r < r_end;
      const T* src = static_cast<const T*>(p.q);
      if (ok)
        src += (long long)b * p.q_stride_b + (long long)(e.q_tok0 + r / G) * p.q_stride_s +
               (long long)(hk * G + r % G) * p.q_stride_h + c * 8;
      cp_async_16(sq + rr * Tr::kQkPitch + c * 8, src, ok ? 16u : 0u);
    }
    if (n_tiles > 0) load_kv(p, sk(0), sv(0), b, e, hk, kv_first);
    cp_async_commit();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // This thread's two rows (lane / 4 and lane / 4 + 8 of the warp's 16): their
    // visible keys [jlo, jhi] (band and length; empty for rows past r_end), and
    // their mask and pse rows.
    int row_q[2], row_h[2], row_jlo[2], row_jhi[2];
    bool row_ok[2];
    const unsigned char* mask_row[2];
    const T* pse_row[2];
    for (int hf = 0; hf < 2; ++hf) {
      const int r = r0 + warp * 16 + lane / 4 + hf * 8;
      row_ok[hf] = r < r_end;
      row_q[hf] = row_ok[hf] ? r / G : 0;
      row_h[hf] = hk * G + (row_ok[hf] ? r % G : 0);
      long long jlo = 0, jhi = (long long)e.kv_len - 1;
      if constexpr (Tr::kMask != prefill_mask::kNone) {
        jlo = max(jlo, (long long)row_q[hf] + p.band_lo + shift);
        jhi = min(jhi, (long long)row_q[hf] + p.band_hi + shift);
      }
      row_jlo[hf] = int(min(jlo, (long long)kPrefillBandInf));
      row_jhi[hf] = row_ok[hf] ? int(max(jhi, -1LL)) : -1;
      mask_row[hf] = p.mask + (long long)b * p.mask_stride_b + (long long)row_q[hf] * p.mask_stride_s;
      pse_row[hf] = static_cast<const T*>(p.pse) + (long long)b * p.pse_stride_b +
                    (long long)row_h[hf] * p.pse_stride_h + (long long)row_q[hf] * p.pse_stride_s;
    }

    float o[kDv / 8][4];
    for (int n = 0; n < kDv / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};

    for (int it = 0; it < n_tiles; ++it) {
      const int st = it & 1, j0 = kv_first + it * kTile;
      // The stage written here was read in iteration it - 1, which ended in a barrier.
      if (it + 1 < n_tiles) load_kv(p, sk(st ^ 1), sv(st ^ 1), b, e, hk, j0 + kTile);
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();

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
          ldmatrix_x4(bf, sk(st) + (n0 + lane % 8 + (lane / 16) * 8) * Tr::kQkPitch + k0 + ((lane / 8) % 2) * 8);
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
          const int hf = c / 2, j = j0 + n * 8 + (lane % 4) * 2 + (c % 2);
          float x = s[n][c] * p.scale;
          bool vis = j >= row_jlo[hf] && j <= row_jhi[hf];
          if constexpr (Tr::kMask == prefill_mask::kTensor) {
            if (vis) vis = mask_row[hf][j] == 0;
          }
          if constexpr (Tr::kPse) {
            if (vis) x += to_float(pse_row[hf][j]);
          }
          x = vis ? x * kLog2e : kNegInf;
          s[n][c] = x;
          mx[hf] = fmaxf(mx[hf], x);
        }
      float alpha[2];
      for (int hf = 0; hf < 2; ++hf) {
        const float m_new = fmaxf(m[hf], quad_max(mx[hf]));
        const float ref = safe_ref(m_new);
        alpha[hf] = fast_exp2(m[hf] - ref);
        m[hf] = m_new;
        mx[hf] = ref;
        l[hf] *= alpha[hf];
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
          ldmatrix_x4_trans(bf, sv(st) + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * Tr::kVoPitch + n0 +
                                    (lane / 16) * 8);
          mma_16816<T>(o[n0 / 8], a, bf[0], bf[1]);
          mma_16816<T>(o[n0 / 8 + 1], a, bf[2], bf[3]);
        }
      }
      __syncthreads();  // the stage is free for iteration it + 1's prefetch
    }
    cp_async_wait<0>();

    // Normalise and write. A row that saw no key writes 0 and LSE +inf.
    T* out = static_cast<T*>(p.out);
    for (int hf = 0; hf < 2; ++hf) {
      const float sum = quad_sum(l[hf]);
      if (!row_ok[hf]) continue;
      const float inv = sum > 0.f ? 1.0f / sum : 0.f;
      T* orow = out + (long long)b * p.o_stride_b + (long long)(e.q_tok0 + row_q[hf]) * p.o_stride_s +
                (long long)row_h[hf] * p.o_stride_h;
#pragma unroll
      for (int n = 0; n < kDv / 8; ++n) {
        const u32 packed = pack2<T>(o[n][hf * 2] * inv, o[n][hf * 2 + 1] * inv);
        *reinterpret_cast<u32*>(orow + n * 8 + (lane % 4) * 2) = packed;
      }
      if constexpr (Tr::kLse) {
        if (lane % 4 == 0) {
          const float lse = sum > 0.f ? (m[hf] + __log2f(sum)) * 0.6931471805599453f : __int_as_float(0x7f800000);
          p.lse[(long long)b * p.lse_stride_b + (long long)(e.q_tok0 + row_q[hf]) * p.lse_stride_s +
                (long long)row_h[hf] * p.lse_stride_h] = lse;
        }
      }
    }
  }
};

}  // namespace attnjit
