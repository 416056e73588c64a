// The Hopper prefill's producer for int8 K/V (antiquant with an fp16 query), apart from
// the kernel (prefill_hopper.cuh) that calls it from its producer warpgroup. First the
// dims' {scale, offset * scale} table for the item's KV head (the per-channel, per-tensor
// and per-head modes; fp16 pairs), then each tile: its raw rows (and per-token scales)
// by cp.async into slot (g + it) % 2 one tile ahead, and once they land and the stage is
// free, the 128 threads dequantise the slot into the stage and arrive on its "full"
// barrier. Named barrier 5 orders the producer's threads.
#pragma once

#include "common/hopper.cuh"
#include "prefill/prefill_common.cuh"
#include "prefill/prefill_dequant.cuh"

namespace attnjit {

template <class Tr>
struct PrefillHopperInt8 {
  typedef PrefillCommon<Tr> C;
  typedef PrefillDequantTile<Tr> Dq;
  static constexpr int kTile = Tr::kKvTile, kD = Tr::kHdQk, kDv = Tr::kHdVo, kStages = Tr::kStages;

  static __device__ __forceinline__ bool by_table(const PrefillDequant& q) { return q.sb == 0 && q.ss == 0 && !q.paged; }

  template <int kDims, bool kValue>
  static __device__ __forceinline__ void issue_raw(const PrefillParams& p, const PrefillWork& w, unsigned char* slot,
                                                   int j0, int tid) {
    constexpr int kChunks = kDims / 16;
    unsigned char* raw = slot + (kValue ? kTile * kD : 0);
    const typename C::KvSrc s = C::template kv_src<kValue>(p);
    for (int i = tid; i < kTile * kChunks; i += 128) {
      const int r = i / kChunks, c = i % kChunks, j = j0 + r;
      const bool ok = j < w.e.kv_len;
      const signed char* src = ok ? C::template kv_row<signed char>(p, s, w, j) + c * 16 : static_cast<const signed char*>(s.base);
      cp_async_16(raw + r * kDims + c * 16, src, ok ? 16u : 0u);
    }
    const PrefillDequant& q = kValue ? p.v_dq : p.k_dq;
    if (by_table(q)) return;
    float* rows = reinterpret_cast<float*>(slot + kTile * (kD + kDv)) + (kValue ? 2 * kTile : 0);  // [row][scale, offset]
    for (int i = tid; i < 2 * kTile; i += 128) {
      const int r = i / 2, j = j0 + r;
      const float* base = static_cast<const float*>(i % 2 ? q.offset : q.scale);  // per token: fp32
      const bool ok = j < w.e.kv_len && base;
      cp_async_4(rows + i, ok ? static_cast<const void*>(base + Dq::param_row(p, q, w, j)) : p.k, ok ? 4u : 0u);
    }
  }

  // Raw rows of a slot -> the stage's swizzled fp16 tile: (x + offset) * scale as one
  // HFMA2 of x (exact in fp16) by {scale, offset * scale}; rows past kv_len become 0.
  template <int kDims, bool kValue>
  static __device__ __forceinline__ void dequant(const PrefillParams& p, const PrefillWork& w, const unsigned char* slot,
                                                 const u32* table, unsigned char* dst, int j0, int tid) {
    constexpr int kChunks = kDims / 16;
    const unsigned char* raw = slot + (kValue ? kTile * kD : 0);
    const float* rows = reinterpret_cast<const float*>(slot + kTile * (kD + kDv)) + (kValue ? 2 * kTile : 0);
    const u32* tab = table + (kValue ? kD : 0);  // [dim / 2][scale pair, offset pair]
    const bool per_row = !by_table(kValue ? p.v_dq : p.k_dq);
    for (int i = tid; i < kTile * kChunks; i += 128) {
      const int r = i / kChunks, c = i % kChunks;
      uint4 out[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
      if (j0 + r < w.e.kv_len) {
        const uint4 x = *reinterpret_cast<const uint4*>(raw + r * kDims + c * 16);
        const u32 words[4] = {x.x, x.y, x.z, x.w};
        u32 sc = 0u, of = 0u;
        if (per_row) {
          const float s = rows[2 * r], o = rows[2 * r + 1] * s;
          sc = pack2<half_t>(s, s);
          of = pack2<half_t>(o, o);
        }
        u32* o32 = &out[0].x;
#pragma unroll
        for (int k = 0; k < 8; ++k) {  // value pair k: dims c * 16 + 2k, + 1
          const u32 v = k % 2 ? widen_hi(i8_t{}, words[k / 2]) : widen_lo(i8_t{}, words[k / 2]);
          if (!per_row) sc = tab[c * 16 + 2 * k], of = tab[c * 16 + 2 * k + 1];
          asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(o32[k]) : "r"(v), "r"(sc), "r"(of));
        }
      }
      *reinterpret_cast<uint4*>(dst + swizzled_offset<kTile>(r, c * 16)) = out[0];
      *reinterpret_cast<uint4*>(dst + swizzled_offset<kTile>(r, c * 16 + 8)) = out[1];
    }
  }

  template <class Smem>
  static __device__ void produce(const PrefillParams& p, const PrefillWork& w, const Smem& sm, int tid, int g) {
    unsigned char* raw0 = sm.base + Tr::kConsumers * Tr::kQBytes + kStages * (Tr::kKStage + Tr::kVStage);
    u32* table = reinterpret_cast<u32*>(raw0 + 2 * Tr::kRawSlot);
    named_barrier_sync(5, 128);  // the last item's tiles are dequantised: the table may change
    for (int d2 = tid; d2 < (kD + kDv) / 2; d2 += 128) {  // dim pairs: K's, then V's
      const bool value = d2 >= kD / 2;
      const PrefillDequant& q = value ? p.v_dq : p.k_dq;
      if (!by_table(q)) continue;
      const int d = 2 * d2 - (value ? kD : 0);
      float sc[2], of[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const long long at = (long long)w.hk * q.sh + (long long)(d + e) * q.sd;
        sc[e] = load_as_float(q.scale, q.dtype, at);
        of[e] = q.offset ? load_as_float(q.offset, q.dtype, at) * sc[e] : 0.f;
      }
      table[2 * d2] = pack2<half_t>(sc[0], sc[1]);
      table[2 * d2 + 1] = pack2<half_t>(of[0], of[1]);
    }
    auto issue = [&](int it) {
      unsigned char* slot = raw0 + ((g + it) % 2) * Tr::kRawSlot;
      issue_raw<kD, false>(p, w, slot, w.kv_first + it * kTile, tid);
      issue_raw<kDv, true>(p, w, slot, w.kv_first + it * kTile, tid);
      cp_async_commit();
    };
    issue(0);
    for (int it = 0; it < w.n_tiles; ++it) {
      const int st = (g + it) % kStages, j0 = w.kv_first + it * kTile;
      if (it + 1 < w.n_tiles) {
        issue(it + 1);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      named_barrier_sync(5, 128);  // every thread's rows of tile it (and the table) landed
      const unsigned char* slot = raw0 + ((g + it) % 2) * Tr::kRawSlot;
      // Both halves free first (this path is bound by the dequantisation, and one
      // wait keeps the 56-register producer from spilling).
      mbar_wait(sm.empty_of(false, st), (((g + it) / kStages) & 1) ^ 1);
      mbar_wait(sm.empty_of(true, st), (((g + it) / kStages) & 1) ^ 1);
      dequant<kD, false>(p, w, slot, table, sm.base + (sm.k - sm.q) + st * Tr::kKStage, j0, tid);
      mbar_arrive(sm.full_of(false, st));
      dequant<kDv, true>(p, w, slot, table, sm.base + (sm.v - sm.q) + st * Tr::kVStage, j0, tid);
      mbar_arrive(sm.full_of(true, st));
      named_barrier_sync(5, 128);  // slot (g + it) % 2 is read: tile it + 2 may land there
    }
  }
};

}  // namespace attnjit
