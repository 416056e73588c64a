// fp8 e4m3 KV for the Hopper MLA kernel (mla_hopper.cuh). wgmma reads 16-bit operands
// from shared memory (an fp8 one needs an fp8 partner and a K-major V), so each half
// tile is widened once: its fp8 bytes land (TMA for dense pages, cp.async for sparse
// rows) in the upper part of the half's own 16-bit region (a staging area, no extra
// shared memory), and the warpgroup that computes the tile's S widens them in place to
// fp16 (exact for e4m3) in the swizzled layout the bf16 path loads, zeroing rows past
// the range. Its 128 threads then arrive on the blocks' `full` barriers, which the wgmma
// side waits on as before. Q is widened to fp16 once, at load (a bf16 query is rounded
// to fp16, as the xqa kernel's fp8 path does).
#pragma once

#include "common/hopper.cuh"

namespace attnjit {

template <class Tr>
struct MlaHopperFp8 {
  using QT = typename Tr::QT;
  using KVT = typename Tr::KVT;
  static constexpr int kBlk = Tr::kBlockBytes;      // one 64-row x 64-dim fp16 block
  static constexpr int kStageBlk = 64 * 64;          // the same block in fp8: 64 rows x 64 bytes
  static constexpr int kBoxRows = Tr::kPageSize < 64 ? Tr::kPageSize : 64;
  static_assert(sizeof(KVT) == 1 && IsFp8<KVT>::value, "e4m3 KV (widen4's cvt)");

  // Byte offset (from the buffer's start) of the staging area of blocks [kb0, kb1): the
  // last (kb1 - kb0) x 4 KB of the half's region [kb0, kb1) x 8 KB.
  template <int kb0, int kb1>
  __device__ static constexpr int stage_offset() { return kb1 * kBlk - (kb1 - kb0) * kStageBlk; }
  // The first block whose fp16 destination overlaps the staging area: from it on, the
  // half's staged bytes are read into registers before any is overwritten.
  template <int kb0, int kb1>
  __device__ static constexpr int first_overlapping() { return stage_offset<kb0, kb1>() / kBlk; }

  // Blocks [kb0, kb1) of tile `it` (64 tokens from range position j0) by TMA into the
  // staging area of buffer `buf`, issued by one thread: boxes of 64 dims x kBoxRows slots,
  // dense (no swizzle); a page past the range (entry -1) reads as zeros.
  template <int kb0, int kb1>
  __device__ static void load_tma(const MlaTensorMap* map, u32 buf_addr, u64* staged, int j0, const int (&e)[4]) {
    mbar_arrive_expect_tx(staged, (kb1 - kb0) * kStageBlk);
    const u32 dst = buf_addr + stage_offset<kb0, kb1>();
#pragma unroll
    for (int cb = kb0; cb < kb1; ++cb)
#pragma unroll
      for (int sub = 0; sub < 64 / kBoxRows; ++sub)
        tma_load_3d(dst + (cb - kb0) * kStageBlk + sub * kBoxRows * 64, map, staged, cb * 64,
                    (j0 + sub * kBoxRows) % Tr::kPageSize, e[sub * kBoxRows / 16], l2_evict_first());
  }

  // Four e4m3 (a 32-bit word) -> two fp16 pairs. The word splits into its 16-bit halves
  // as registers (no mask or shift instructions), each converted by one cvt.
  __device__ static void widen4(u32 w, u32& lo, u32& hi) {
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
  }

  // A staged chunk (16 fp8 of row r), or zeros for a row past the range: V meets P = 0 there.
  __device__ static uint4 staged_chunk(const unsigned char* at, bool keep) {
    return keep ? *reinterpret_cast<const uint4*>(at) : make_uint4(0u, 0u, 0u, 0u);
  }

  // 16 fp8 -> 16 fp16 into row r, dims 16q..16q+15 of the block at `blk` (its two swizzled
  // 16-byte chunks).
  __device__ static void put16(unsigned char* blk, int r, int q, uint4 v) {
    u32 h[8];
    widen4(v.x, h[0], h[1]);
    widen4(v.y, h[2], h[3]);
    widen4(v.z, h[4], h[5]);
    widen4(v.w, h[6], h[7]);
    *reinterpret_cast<uint4*>(blk + swizzled_offset<64>(r, q * 16)) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4*>(blk + swizzled_offset<64>(r, q * 16 + 8)) = make_uint4(h[4], h[5], h[6], h[7]);
  }

  // Widens blocks [kb0, kb1) of the tile in buffer `buf` (generic pointer), by the 128
  // threads of one warpgroup (`bar_id` its named barrier): thread t takes chunk q = t % 4
  // of rows t / 4 and 32 + t / 4 of each block. Blocks before first_overlapping() write outside
  // the staging area; the rest are read whole first, then a warpgroup barrier, then written.
  // `valid`: rows of the tile in the range (the rest become zeros: V meets P = 0 there).
  template <int kb0, int kb1>
  __device__ static void widen(unsigned char* buf, u64* staged, u32 parity, u64* full, int valid, int tid, int bar_id) {
    // (cp.async's rows are generic-proxy writes: the barrier's completion orders them too.)
    constexpr int kSplit = first_overlapping<kb0, kb1>();
    mbar_wait(staged, parity);
    const unsigned char* stage = buf + stage_offset<kb0, kb1>();
    const int r0 = tid / 4, q = tid % 4;
#pragma unroll
    for (int cb = kb0; cb < kSplit; ++cb)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = r0 + 32 * j;
        put16(buf + cb * kBlk, r, q, staged_chunk(stage + (cb - kb0) * kStageBlk + r * 64 + q * 16, r < valid));
      }
    uint4 v[kb1 - kSplit][2];
#pragma unroll
    for (int cb = kSplit; cb < kb1; ++cb)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = r0 + 32 * j;
        v[cb - kSplit][j] = staged_chunk(stage + (cb - kb0) * kStageBlk + r * 64 + q * 16, r < valid);
      }
    named_barrier_sync(bar_id, 128);  // every staged byte of the half is in registers
#pragma unroll
    for (int cb = kSplit; cb < kb1; ++cb)
#pragma unroll
      for (int j = 0; j < 2; ++j) put16(buf + cb * kBlk, r0 + 32 * j, q, v[cb - kSplit][j]);
    fence_proxy_async_shared();  // generic stores, read by wgmma after the barriers complete
#pragma unroll
    for (int cb = kb0; cb < kb1; ++cb) mbar_arrive(&full[cb]);
  }

  // Q's 64 rows as fp16 into the swizzled Q tile, by all 256 threads (row r0 + 32 j,
  // chunk cc of each 64-dim block); `row_src(j)` is the row's first element, or null past
  // rows_per_group. Every load is issued before any is widened.
  template <class RowSrc>
  __device__ static void load_q(unsigned char* q_tile, int ctid, RowSrc row_src) {
    const int cc = ctid % 8, r0 = ctid / 8;
    constexpr int kElem = int(sizeof(QT));
    uint4 raw[2][9];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const unsigned char* src = row_src(j);
#pragma unroll
      for (int cb = 0; cb < 9; ++cb) {
        const unsigned char* at = src ? src + (cb * 64 + cc * 8) * kElem : nullptr;
        if constexpr (IsFp8<QT>::value) {
          const uint2 w = at ? *reinterpret_cast<const uint2*>(at) : make_uint2(0u, 0u);
          raw[j][cb] = make_uint4(w.x, w.y, 0u, 0u);
        } else {
          raw[j][cb] = at ? *reinterpret_cast<const uint4*>(at) : make_uint4(0u, 0u, 0u, 0u);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int cb = 0; cb < 9; ++cb) {
        uint4 h;
        if constexpr (IsFp8<QT>::value) {
          h = make_uint4(widen_lo(QT{}, raw[j][cb].x), widen_hi(QT{}, raw[j][cb].x), widen_lo(QT{}, raw[j][cb].y),
                         widen_hi(QT{}, raw[j][cb].y));
        } else {
          const u32 in[4] = {raw[j][cb].x, raw[j][cb].y, raw[j][cb].z, raw[j][cb].w};
          u32 o[4];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            o[i] = pack2<half_t>(to_float(QT{u16(in[i] & 0xffffu)}), to_float(QT{u16(in[i] >> 16)}));
          h = make_uint4(o[0], o[1], o[2], o[3]);
        }
        *reinterpret_cast<uint4*>(q_tile + swizzled_offset<64>(r0 + 32 * j, cb * 64 + cc * 8)) = h;
      }
  }
};

}  // namespace attnjit
