// Warp-level tensor-core and async-copy wrappers (sm_80+): mma.sync m16n8k16,
// ldmatrix and cp.async.
#pragma once

#include "common/dtype.cuh"

namespace attnjit {

template <class T> struct MmaName;
template <> struct MmaName<half_t> { static constexpr bool is_bf16 = false; };
template <> struct MmaName<bf16_t> { static constexpr bool is_bf16 = true; };

// D = A(16x16, row) * B(16x8, col) + D, fp32 accumulate.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (MmaName<T>::is_bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// 16-byte global->shared copy; src_bytes 0 zero-fills (used past the end of a sequence).
// A kernel that defines ATTNJIT_CP_ASYNC_L2_PREFETCH (64, 128 or 256) asks L2 to fetch that
// many bytes around each copy (the decode generator's tuning knob).
#define ATTNJIT_CP_ASYNC_STR2(x) #x
#define ATTNJIT_CP_ASYNC_STR(x) ATTNJIT_CP_ASYNC_STR2(x)
#ifdef ATTNJIT_CP_ASYNC_L2_PREFETCH
#define ATTNJIT_CP_ASYNC_L2 ".L2::" ATTNJIT_CP_ASYNC_STR(ATTNJIT_CP_ASYNC_L2_PREFETCH) "B"
#else
#define ATTNJIT_CP_ASYNC_L2 ""
#endif
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global" ATTNJIT_CP_ASYNC_L2 " [%0], [%1], 16, %2;" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(src_bytes));
}
// 4-byte global->shared copy (per-token scales); src_bytes 0 zero-fills.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, u32 src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}
// The largest power of two <= |x| (x finite), at least 2^-126; and 1 / a power of two.
__device__ __forceinline__ float pow2_floor(float x) {
  const u32 e = __float_as_uint(x) & 0x7f800000u;
  return __uint_as_float(e ? e : 0x00800000u);
}
__device__ __forceinline__ float pow2_rcp(float pow2) { return __uint_as_float((254u << 23) - __float_as_uint(pow2)); }
// A global load issued here: neither NVVM (volatile asm) nor ptxas (.volatile) moves it past another.
__device__ __forceinline__ int ld_global_now(const int* p) {
  int v;
  asm volatile("ld.volatile.global.s32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// Programmatic dependent launch (sm_90+): no-ops elsewhere.
__device__ __forceinline__ void pdl_wait_prior_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace attnjit
