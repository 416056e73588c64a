// The Hopper prefill kernel (FIA, trtllm-gen backend, sm_90a): warp-specialized,
// with warpgroup MMA. Warpgroup 0 is the producer: it gathers K/V tiles with
// cp.async (any layout, paged or not) into a ring of 128-byte-swizzled stages and
// signals each through a "full" mbarrier. Warpgroups 1 and 2 are consumers, 64 query
// rows each (the CTA's 128 rows of (token, group head) pairs): S = Q K^T with both
// operands in shared memory, the online softmax in registers, O += P V with P
// from registers and V read MN-major (transposed) by the wgmma itself; each
// releases a stage through its "empty" mbarrier. The work list, masks, pse, paging
// and LSE are the portable kernel's (prefill_common.cuh).
#pragma once

#include "common/hopper.cuh"
#include "common/wgmma.cuh"
#include "prefill/prefill_common.cuh"

namespace attnjit {

template <class T_, int kHdQk_, int kHdVo_, int kKvTile_, int kStages_, int kMask_, int kPageSize_, bool kPse_,
          bool kLse_>
struct PrefillHopperTraits {
  typedef T_ T;
  static constexpr int kHdQk = kHdQk_, kHdVo = kHdVo_, kKvTile = kKvTile_, kStages = kStages_, kMask = kMask_;
  static constexpr int kPageSize = kPageSize_;
  static constexpr bool kPse = kPse_, kLse = kLse_;
  static constexpr int kConsumers = 2;  // warpgroups of 64 rows
  static constexpr int kThreads = 128 * (kConsumers + 1), kRows = 64 * kConsumers, kMinBlocks = 1;
  static constexpr int kQBytes = 64 * kHdQk * 2;  // one consumer's Q tile
  static constexpr int kKStage = kKvTile * kHdQk * 2, kVStage = kKvTile * kHdVo * 2;
  static constexpr int kTileBytes = kConsumers * kQBytes + kStages * (kKStage + kVStage);
  // 1024: slack to align the swizzled tiles; then the full and empty mbarriers.
  static constexpr int kSmemBytes = 1024 + kTileBytes + 2 * kStages * 8;
  // Registers per thread after reallocation (a multiple of 8; 128 x 56 + 256 x 224 <= 64K).
  static constexpr int kProducerRegs = 56, kConsumerRegs = 224;
  static_assert(kHdQk % 64 == 0 && kHdVo % 64 == 0 && kHdQk <= 256 && kHdVo <= 256,
                "head dims are whole 128-byte swizzle blocks, at most one wgmma wide");
  static_assert(kKvTile % 64 == 0 && kKvTile <= 256, "the KV tile is the N of one wgmma");
};

template <class Tr>
struct PrefillHopper {
  typedef typename Tr::T T;
  typedef PrefillCommon<Tr> C;
  static constexpr int kTile = Tr::kKvTile, kD = Tr::kHdQk, kDv = Tr::kHdVo, kStages = Tr::kStages;
  static constexpr int kConsumerWarps = Tr::kConsumers * 4;

  struct Smem {
    u32 q, k, v;  // shared-space addresses: consumer c's Q at q + c * kQBytes; stage st at k/v + st * k/vStage
    unsigned char* base;
    u64* full;    // [kStages]: the producer's 128 threads arrive when the stage's bytes landed
    u64* empty;   // [kStages]: each consumer warp arrives when it is done with the stage
  };

  // The producer: K and V of tile `it` into stage it % kStages, once its consumers
  // released it; the "full" arrive for tile it - 1 follows the issue of tile it, so
  // one tile is always in flight while the previous one is signalled.
  static __device__ void produce(const PrefillParams& p, const PrefillWork& w, const Smem& sm, int tid) {
    constexpr int kKChunks = kD / 8, kVChunks = kDv / 8;
    for (int it = 0; it < w.n_tiles; ++it) {
      const int st = it % kStages, j0 = w.kv_first + it * kTile;
      mbar_wait(&sm.empty[st], ((it / kStages) & 1) ^ 1);
      unsigned char* sk = sm.base + (sm.k - sm.q) + st * Tr::kKStage;
      unsigned char* sv = sm.base + (sm.v - sm.q) + st * Tr::kVStage;
      for (int i = tid; i < kTile * kKChunks; i += 128) {
        const int r = i / kKChunks, col = (i % kKChunks) * 8, j = j0 + r;
        const bool ok = j < w.e.kv_len;
        const T* src = ok ? C::kv_row(p, p.k, p.k_stride_b, p.k_stride_s, p.k_stride_h, w, j) + col
                          : static_cast<const T*>(p.k);
        cp_async_16(sk + swizzled_offset<kTile>(r, col), src, ok ? 16u : 0u);
      }
      // Rows past kv_len are zero (P is 0 there, but 0 * NaN is not).
      for (int i = tid; i < kTile * kVChunks; i += 128) {
        const int r = i / kVChunks, col = (i % kVChunks) * 8, j = j0 + r;
        const bool ok = j < w.e.kv_len;
        const T* src = ok ? C::kv_row(p, p.v, p.v_stride_b, p.v_stride_s, p.v_stride_h, w, j) + col
                          : static_cast<const T*>(p.v);
        cp_async_16(sv + swizzled_offset<kTile>(r, col), src, ok ? 16u : 0u);
      }
      cp_async_commit();
      if (it > 0) {
        cp_async_wait<1>();
        fence_proxy_async_shared();  // this thread's bytes, visible to the consumers' wgmma
        mbar_arrive(&sm.full[(it - 1) % kStages]);
      }
    }
    if (w.n_tiles > 0) {
      cp_async_wait<0>();
      fence_proxy_async_shared();
      mbar_arrive(&sm.full[(w.n_tiles - 1) % kStages]);
    }
  }

  // A consumer warpgroup: its 64 rows over every visible tile.
  static __device__ void consume(const PrefillParams& p, const PrefillWork& w, const Smem& sm, int c, int tid) {
    const int warp = tid / 32, lane = tid % 32;
    const u32 sq = sm.q + c * Tr::kQBytes;
    // Q (zero rows past r_end), swizzled as the wgmma reads it.
    constexpr int kQChunks = kD / 8;
    for (int i = tid; i < 64 * kQChunks; i += 128) {
      const int r = i / kQChunks, col = (i % kQChunks) * 8, row = w.r0 + c * 64 + r;
      const bool ok = row < w.r_end;
      const T* src = ok ? C::q_row(p, w, row) + col : static_cast<const T*>(p.q);
      cp_async_16(sm.base + c * Tr::kQBytes + swizzled_offset<64>(r, col), src, ok ? 16u : 0u);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async_shared();
    named_barrier_sync(1 + c, 128);

    const typename C::Rows R = C::rows_of(p, w, c * 4 + warp, lane);
    float o[kDv / 2];
#pragma unroll
    for (int i = 0; i < kDv / 2; ++i) o[i] = 0.f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};

    for (int it = 0; it < w.n_tiles; ++it) {
      const int st = it % kStages, j0 = w.kv_first + it * kTile;
      mbar_wait(&sm.full[st], (it / kStages) & 1);
      const u32 sk = sm.k + st * Tr::kKStage, sv = sm.v + st * Tr::kVStage;

      // S = Q K^T (64 x kTile), both from shared memory.
      float s[kTile / 2];
      wgmma_fence();
#pragma unroll
      for (int k0 = 0; k0 < kD; k0 += 16)
        Wgmma<T, kTile>::ss(s, desc_k_major<64>(sq, k0), desc_k_major<kTile>(sk, k0), k0 > 0);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(s);

      // Scale, pse, mask; the online softmax (log2 domain).
      float mx[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int i = 0; i < kTile / 2; ++i) {
        const int hf = (i % 4) / 2;
        const int j = j0 + (i / 4) * 8 + (lane % 4) * 2 + (i % 2);
        const float x = C::score(p.scale, R.jlo[hf], R.jhi[hf], R.mask[hf], R.pse[hf], j, s[i]);
        s[i] = x;
        mx[hf] = fmaxf(mx[hf], x);
      }
      float alpha[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float m_new = fmaxf(m[hf], quad_max(mx[hf]));
        const float ref = safe_ref(m_new);
        alpha[hf] = fast_exp2(m[hf] - ref);
        m[hf] = m_new;
        mx[hf] = ref;
        l[hf] *= alpha[hf];
      }
      // P in the A-operand layout: k step kk takes 8-wide blocks 2kk and 2kk + 1.
      u32 pa[kTile / 16][4];
#pragma unroll
      for (int i = 0; i < kTile / 2; i += 2) {
        const int hf = (i % 4) / 2;
        const float p0 = fast_exp2(s[i] - mx[hf]), p1 = fast_exp2(s[i + 1] - mx[hf]);
        l[hf] += p0 + p1;
        pa[i / 8][((i / 4) % 2) * 2 + hf] = pack2<T>(p0, p1);
      }
#pragma unroll
      for (int i = 0; i < kDv / 2; ++i) o[i] *= alpha[(i % 4) / 2];

      // O += P V, V MN-major from the stage.
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) Wgmma<T, kDv>::rs_mn(o, pa[kk], desc_mn_major<kTile>(sv, kk * 16), 1);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(o);
      __syncwarp();
      if (lane == 0) mbar_arrive(&sm.empty[st]);
    }

    for (int hf = 0; hf < 2; ++hf)
      C::write_row(p, w, R, hf, lane, m[hf], l[hf], [&](int n, int e) { return o[4 * n + e]; });
  }

  static __device__ void run(const PrefillParams& p, unsigned char* smem_raw) {
    const PrefillWork w = C::template find_work<kTile>(p);
    if (w.zero) {
      C::zero_rows(p, w, threadIdx.x, Tr::kThreads);
      return;
    }
    Smem sm;
    sm.base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    sm.q = smem_addr(sm.base);
    sm.k = sm.q + Tr::kConsumers * Tr::kQBytes;
    sm.v = sm.k + kStages * Tr::kKStage;
    sm.full = reinterpret_cast<u64*>(sm.base + Tr::kTileBytes);
    sm.empty = sm.full + kStages;
    if (threadIdx.x == 0) {
      for (int st = 0; st < kStages; ++st) {
        mbar_init(&sm.full[st], 128);
        mbar_init(&sm.empty[st], kConsumerWarps);
      }
    }
    __syncthreads();
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (wg == 0) {
      regs_decrease<Tr::kProducerRegs>();
      produce(p, w, sm, tid);
    } else {
      regs_increase<Tr::kConsumerRegs>();
      consume(p, w, sm, wg - 1, tid);
    }
  }
};

}  // namespace attnjit
