// Hopper (sm_90a) building blocks for warp-specialized kernels: mbarriers, TMA
// tensor loads, proxy fences, register reallocation, named barriers, the wgmma fence/commit/wait and
// the shared-memory matrix descriptors of 128-byte-swizzled tiles.
#pragma once

#include "common/dtype.cuh"
#include "common/mma.cuh"

namespace attnjit {

// ---- mbarrier (CTA scope) ----
__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
// Waits until the phase with this parity has completed. A fresh barrier counts its
// phase "1" as complete, so a producer's first wait on an empty slot passes.
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
  u32 done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// Arrives on the mbarrier once every cp.async this thread issued so far has landed
// (the barrier's count includes this arrival: .noinc). The thread does not wait.
__device__ __forceinline__ void cp_async_mbar_arrive(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// ---- TMA (cp.async.bulk.tensor) ----
// One arrival that also expects `bytes` of TMA writes before the phase completes.
__device__ __forceinline__ void mbar_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(
                   smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
// A box of a 4-D tensor map (a CUtensorMap in the __grid_constant__ Params) at
// coordinates c0..c3 (innermost first) into shared memory at `dst`; its bytes
// complete on `bar`.
__device__ __forceinline__ void tma_load_4d(u32 dst, const void* map, u64* bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// The same for a 3-D tensor map.
__device__ __forceinline__ void tma_load_3d(u32 dst, const void* map, u64* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
          dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// `bytes` (a multiple of 16) from shared memory to global memory (both 16-byte aligned) by the
// bulk copy engine, in this thread's bulk group; the generic writes of src must be made
// visible first (fence_proxy_async_shared, then a barrier).
__device__ __forceinline__ void bulk_store(void* dst, u32 src, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
// This thread's bulk stores so far have read their shared memory (it may be written again).
__device__ __forceinline__ void bulk_store_commit_and_wait_read() {
  asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;" ::: "memory");
}

// An L2 policy for data read once (streamed KV): its lines go first when L2 needs room, so
// the stream does not push out what is read again (tables, Q, partials).
__device__ __forceinline__ u64 l2_evict_first() {
  u64 policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// tma_load_3d with an L2 cache policy (l2_evict_first).
__device__ __forceinline__ void tma_load_3d(u32 dst, const void* map, u64* bar, int c0, int c1, int c2, u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, "
      "%4}], [%5], %6;" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}

// Generic-proxy shared-memory writes (st.shared, cp.async) become visible to the
// async proxy (wgmma, TMA) of the same thread.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Register reallocation between warpgroups (whole-warpgroup instructions).
template <int N> __device__ __forceinline__ void regs_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void regs_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// A barrier among `threads` threads (multiples of 32) of the CTA; id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- wgmma ordering ----
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulators across an
// in-flight wgmma (the asm operands are its only view of the dependency).
template <int N> __device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for A fragments in registers: their writes stay before the wgmma.fence that
// precedes the wgmma reading them.
template <int N> __device__ __forceinline__ void wgmma_fence_operands(u32 (&a)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// ---- 128-byte-swizzled tiles ----
// A tile of R rows x C 16-bit elements (C a multiple of 64) is stored as C/64
// column blocks of R rows x 128 bytes; in each 128-byte row the 16-byte chunk c
// sits at c ^ (row % 8). Blocks start 1024-byte aligned. This is the layout of
// TMA's SWIZZLE_128B and the canonical wgmma layout (K-major and MN-major).
template <int kRows>
__device__ __forceinline__ int swizzled_offset(int row, int col) {  // bytes; col a multiple of 8
  return (col / 64) * (kRows * 128) + row * 128 + ((((col % 64) / 8) ^ (row % 8)) << 4);
}

// Four 8x8 16-bit matrices from the warp's registers (x_j: matrix j, in the mma
// accumulator-fragment layout) into shared memory; lane 8j + r gives the address of
// matrix j's row r.
__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 x0, u32 x1, u32 x2, u32 x3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(x0), "r"(x1),
               "r"(x2), "r"(x3)
               : "memory");
}

// The same, each matrix transposed: lane 8j + r gives the address of row r of matrix j's
// transpose (column r of the fragment).
__device__ __forceinline__ void stmatrix_x4_trans(u32 addr, u32 x0, u32 x1, u32 x2, u32 x3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(x0), "r"(x1),
               "r"(x2), "r"(x3)
               : "memory");
}

// The wgmma shared-memory matrix descriptor: start, leading and stride byte
// offsets (16-byte units), layout 1 = 128-byte swizzle.
__device__ __forceinline__ u64 smem_desc(u32 addr, u32 lead_bytes, u32 stride_bytes) {
  return u64((addr & 0x3FFFF) >> 4) | (u64(lead_bytes >> 4) << 16) | (u64(stride_bytes >> 4) << 32) | (1ull << 62);
}
// K-major operand (rows = M or N, the contraction dim contiguous): 8-row groups
// 1024 bytes apart; the 16-element k step k0 (a multiple of 16) of a tile of kRows rows
// starts k_major_offset bytes into the tile.
template <int kRows>
__device__ __forceinline__ constexpr u32 k_major_offset(int k0) {
  return (k0 / 64) * (kRows * 128) + (k0 % 64) * 2;
}
template <int kRows>
__device__ __forceinline__ u64 desc_k_major(u32 tile, int k0) {
  return smem_desc(tile + k_major_offset<kRows>(k0), 16, 1024);
}
// The descriptor of an operand byte_off bytes (a multiple of 16) past desc's: its
// start-address field is bits 0-13 in 16-byte units, and a CTA's shared addresses
// (< 256 KB) keep the sum inside that field, so no carry reaches the others. Cheaper than
// smem_desc's mask, shift and or per k step.
__device__ __forceinline__ u64 desc_step(u64 desc, u32 byte_off) {
  // A 32-bit add on the low word (one uniform add, where a 64-bit add takes two).
  return (desc & 0xFFFFFFFF00000000ull) | u32(u32(desc) + (byte_off >> 4));
}
// MN-major operand (rows = the contraction dim, N contiguous in 64-wide column
// blocks kRows * 128 bytes apart): the k step starting at row k0.
__device__ __forceinline__ constexpr u32 mn_major_offset(int k0) { return k0 * 128; }
template <int kRows>
__device__ __forceinline__ u64 desc_mn_major(u32 tile, int k0) {
  return smem_desc(tile + mn_major_offset(k0), kRows * 128, 1024);
}

}  // namespace attnjit
