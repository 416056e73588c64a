// Device dtypes and conversions written with inline PTX, so that NVRTC needs no
// toolkit header (cuda_fp16.h alone costs ~100 ms of every compile).
#pragma once

namespace attnjit {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

struct half_t { u16 bits; };
struct bf16_t { u16 bits; };
struct e4m3_t { u8 bits; };
struct e5m2_t { u8 bits; };
struct i8_t { u8 bits; };  // int8 K/V (FIA antiquant): widened to fp16 like fp8, scales outside the MMA
struct i4x8_t { u32 bits; };  // int4 K/V (FIA antiquant): eight two's-complement nibbles, low first

template <bool C, class A, class B> struct Select { typedef A type; };
template <class A, class B> struct Select<false, A, B> { typedef B type; };

template <class A, class B> struct IsSame { static constexpr bool value = false; };
template <class A> struct IsSame<A, A> { static constexpr bool value = true; };

template <class T> struct IsFp8 { static constexpr bool value = false; };
template <> struct IsFp8<e4m3_t> { static constexpr bool value = true; };
template <> struct IsFp8<e5m2_t> { static constexpr bool value = true; };
// The decode kernels' 8-bit K/V widened to fp16 in registers: fp8, and int8 (exact in fp16).
template <> struct IsFp8<i8_t> { static constexpr bool value = true; };

__device__ __forceinline__ float to_float(half_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}
__device__ __forceinline__ float to_float(bf16_t b) { return __uint_as_float(u32(b.bits) << 16); }

// Element i of a tensor stored as fp32, fp16 or bf16 (dtype 0, 1, 2: prefill_dq's codes,
// which the decode Params' int8 channel scales share): antiquant scales come in all three.
__device__ __forceinline__ float load_as_float(const void* base, int dtype, long long i) {
  if (dtype == 0) return static_cast<const float*>(base)[i];
  if (dtype == 1) return to_float(static_cast<const half_t*>(base)[i]);
  return to_float(static_cast<const bf16_t*>(base)[i]);
}

template <class T> __device__ __forceinline__ T from_float(float f);
template <> __device__ __forceinline__ half_t from_float<half_t>(float f) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
template <> __device__ __forceinline__ bf16_t from_float<bf16_t>(float f) {
  bf16_t b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(f));
  return b;
}
template <> __device__ __forceinline__ float from_float<float>(float f) { return f; }

// Two floats -> a packed pair, lo in bits 0..15 (PTX puts the first source high).
template <class T> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<half_t>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ u32 pack2<bf16_t>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two fp8 (bits 0..15 of x) -> two fp16 (packed). Exact for every finite value.
__device__ __forceinline__ u32 fp8x2_to_half2(e4m3_t, u32 x) {
#if __CUDA_ARCH__ >= 890
  u32 r;
  asm("{ .reg .b16 t; cvt.u16.u32 t, %1; cvt.rn.f16x2.e4m3x2 %0, t; }" : "=r"(r) : "r"(x));
  return r;
#else
  // e4m3 -> fp16 bit layout is x * 2^-8; the fp16 multiply restores the scale
  // and normalizes subnormals.
  u32 lo = x & 0xffu, hi = (x >> 8) & 0xffu;
  u32 bits = ((lo & 0x80u) << 8) | ((lo & 0x7fu) << 7) | ((((hi & 0x80u) << 8) | ((hi & 0x7fu) << 7)) << 16);
  u32 r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(bits), "r"(0x5c005c00u));  // 256.0 x2
  return r;
#endif
}
__device__ __forceinline__ u32 fp8x2_to_half2(e5m2_t, u32 x) {
  // e5m2 is the high byte of an fp16.
  return ((x & 0xffu) << 8) | ((x & 0xff00u) << 16);
}

// 8-bit K/V pairs as the decode kernels' call sites take them from a 32-bit word: bytes
// 0-1 (lo), 2-3 (hi), or the two a byte_perm selector picks (V's interleave). int8 builds
// the biased halves with one byte_perm straight from the word (its sign flip shared by the
// word's pairs): 2.5 instructions a pair (an extract, a flip, a permute and a subtract before).
template <class K> __device__ __forceinline__ u32 widen_lo(K k, u32 w) { return fp8x2_to_half2(k, w & 0xffffu); }
template <class K> __device__ __forceinline__ u32 widen_hi(K k, u32 w) { return fp8x2_to_half2(k, w >> 16); }
template <class K> __device__ __forceinline__ u32 widen_sel(K k, u32 w, u32 sel) {
  return fp8x2_to_half2(k, __byte_perm(w, 0, sel));
}
// Bytes sel & 0xf and (sel >> 4) & 0xf of w (int8) -> half2 of x + 1152, exactly: each
// byte's x + 128 (the sign bit flipped) becomes the mantissa of 1024 + (x + 128). The
// transposed decode tile's K takes it as it is (the bias shifts a head's scores alike);
// int8_pick_to_half2 takes the 1152 off.
__device__ __forceinline__ u32 int8_pick_biased(u32 w, u32 sel) {
  return __byte_perm(w ^ 0x80808080u, 0x64u, 0x4040u | (sel & 0xfu) | (((sel >> 4) & 0xfu) << 8));
}
__device__ __forceinline__ u32 int8_pick_to_half2(u32 w, u32 sel) {
  const u32 biased = int8_pick_biased(w, sel);
  u32 r;
  asm("sub.f16x2 %0, %1, %2;" : "=r"(r) : "r"(biased), "r"(0x64806480u));
  return r;
}
__device__ __forceinline__ u32 widen_lo(i8_t, u32 w) { return int8_pick_to_half2(w, 0x10u); }
__device__ __forceinline__ u32 widen_hi(i8_t, u32 w) { return int8_pick_to_half2(w, 0x32u); }
__device__ __forceinline__ u32 widen_sel(i8_t, u32 w, u32 sel) { return int8_pick_to_half2(w, sel); }

// An int4 word (eight two's-complement nibbles, nibble i at bits 4i) -> four half2, exactly:
// h[j] = (nibble j, nibble j + 4). One LOP3 per pair flips the sign bit (x + 8) and ORs it
// into the mantissa of 1024: (w & mask) ^ (0x8 | 0x6400) per half, as the sign bit is in
// the mask and 0x6400 outside it. Pairs 0 and 2 sit at bits 0-3 (1024 + (x + 8), minus
// 1032); pairs 1 and 3 at bits 4-7 (1024 + 16 (x + 8), times 1/16 minus 72). One shift
// brings pairs 2 and 3 down: nine instructions a word.
__device__ __forceinline__ u32 lop3_and_xor(u32 a, u32 b, u32 c) {
  u32 d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6a;" : "=r"(d) : "r"(a), "r"(b), "r"(c));  // (a & b) ^ c
  return d;
}
// The pairs before their subtractions, five instructions a word: with exponent 0x6400,
// x + 1032 (pairs 0, 2) and 16 x + 1152 (1, 3); with exponent 0, fp16 subnormals (the
// nibble's bits are the mantissa, no implicit one): (x + 8) 2^-24 and (x + 8) 2^-20.
// The transposed decode tile's K takes the first as it is (its q holds the 1/16, and the
// bias shifts a head's scores alike), its V the second (scaled back and unbiased once,
// after the last tile: DecodeTransposed::unbias_v).
template <u32 kExp = 0x6400u>
__device__ __forceinline__ void int4x8_to_half2_biased(u32 w, u32 (&h)[4]) {
  constexpr u32 lo = (kExp | 0x8u) * 0x10001u, hi = (kExp | 0x80u) * 0x10001u;
  const u32 w8 = w >> 8;
  h[0] = lop3_and_xor(w, 0x000f000fu, lo);
  h[1] = lop3_and_xor(w, 0x00f000f0u, hi);
  h[2] = lop3_and_xor(w8, 0x000f000fu, lo);
  h[3] = lop3_and_xor(w8, 0x00f000f0u, hi);
}
__device__ __forceinline__ void int4x8_to_half2(u32 w, u32 (&h)[4]) {
  u32 t[4];
  int4x8_to_half2_biased(w, t);
#pragma unroll
  for (int j = 0; j < 4; j += 2) {
    asm("sub.f16x2 %0, %1, %2;" : "=r"(h[j]) : "r"(t[j]), "r"(0x64086408u));                     // - 1032
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(h[j + 1]) : "r"(t[j + 1]), "r"(0x2c002c00u), "r"(0xd480d480u));  // / 16 - 72
  }
}

// float -> e4m3 with round-to-nearest-even and saturation to +-448.
__device__ __forceinline__ u8 float_to_e4m3(float f) {
#if __CUDA_ARCH__ >= 890
  u32 r;
  asm("{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, %2, %1; cvt.u32.u16 %0, t; }"
      : "=r"(r) : "f"(f), "f"(0.0f));
  return u8(r & 0xffu);
#else
  u32 bits = __float_as_uint(f);
  u32 sign = (bits >> 24) & 0x80u;
  if (f != f) return u8(sign | 0x7fu);  // NaN stays NaN (fminf would make it 448)
  float a = fminf(fabsf(f), 448.0f);
  if (a < 0.015625f) {  // subnormal range of e4m3: multiples of 2^-9
    u32 m = u32(__float2int_rn(a * 512.0f));
    return u8(sign | m);
  }
  u32 ab = __float_as_uint(a);
  u32 exp = (ab >> 23) - 127 + 7;
  u32 mant = ab & 0x7fffffu;
  u32 keep = mant >> 20, rest = mant & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) ++keep;
  if (keep == 8u) { keep = 0; ++exp; }
  u32 v = (exp << 3) | keep;
  if (v > 0x7eu) v = 0x7eu;
  return u8(sign | v);
#endif
}

template <class T> __device__ __forceinline__ void store_float(T* p, float f) { *p = from_float<T>(f); }
template <> __device__ __forceinline__ void store_float<e4m3_t>(e4m3_t* p, float f) { p->bits = float_to_e4m3(f); }

}  // namespace attnjit
