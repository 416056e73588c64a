// What both prefill kernels (portable mma.sync, Hopper wgmma) share: the work item
// of a CTA from the host-planned list, KV addressing (contiguous or paged), each
// thread's two score rows (band, mask and pse rows), the score of one element,
// zero-filled rows and the normalised output and LSE, and the rarer switches (left
// padding, the shared prefix, int8 output: prefill_ext). The MMA accumulator layout
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
  int prefix;       // kPrefix: the shared prefix's tokens (KV positions [0, prefix)); else 0
};

template <class Tr>
struct PrefillCommon {
  typedef typename Tr::T T;
  static constexpr int kRows = Tr::kRows, kDv = Tr::kHdVo;
  static constexpr bool kLeftPad = (Tr::kExt & prefill_ext::kLeftPad) != 0;
  static constexpr bool kPrefix = (Tr::kExt & prefill_ext::kPrefix) != 0;
  static constexpr bool kInt8Out = (Tr::kExt & prefill_ext::kInt8Out) != 0;
  typedef typename Select<kInt8Out, signed char, T>::type O;  // attention_out's element

  // Left padding: the valid windows [S - pad - len, S - pad) move the batch's first
  // Q and KV tokens; a window that does not fit sees no key (its rows output 0). Mask
  // and pse rows and columns stay logical (within the window), as Ascend's kernels
  // index them; output rows stay physical. Shared prefix: the KV is [prefix | own],
  // kv_len counts both, and mask, pse and band columns index that concatenation.
  static __device__ __forceinline__ void adjust_batch(const PrefillParams& p, PrefillWork& w) {
    w.prefix = 0;
    if constexpr (kLeftPad) {
      bool fits = true;
      if (p.q_pad) {
        const long long start = (long long)p.q_seq - max(0LL, p.q_pad[(long long)w.b * p.q_pad_stride]) - w.e.q_len;
        fits = start >= 0;
        w.e.q_tok0 = fits ? int(start) : 0;
      }
      if (p.kv_pad) {
        const long long start = (long long)p.kv_seq - max(0LL, p.kv_pad[(long long)w.b * p.kv_pad_stride]) - w.e.kv_len;
        fits = fits && start >= 0;
        w.e.kv_tok0 = start >= 0 ? int(start) : 0;
      }
      if (!fits) w.e.kv_len = 0;
    }
    if constexpr (kPrefix) {
      w.prefix = p.prefix_len ? int(min(max(0LL, *p.prefix_len), (long long)p.prefix_seq)) : p.prefix_seq;
      w.e.kv_len += w.prefix;
    }
  }

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
    adjust_batch(p, w);
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

  // Where K (or V, kValue) lives: its base and strides, and the shared prefix's. Taken
  // outside the loops that address rows (params loaded once, as a plain argument).
  struct KvSrc {
    const void* base;
    long long sb, ss, sh;
    const void* prefix;
    long long pss, psh;
  };
  template <bool kValue>
  static __device__ __forceinline__ KvSrc kv_src(const PrefillParams& p) {
    KvSrc s;
    s.base = kValue ? p.v : p.k;
    s.sb = kValue ? p.v_stride_b : p.k_stride_b;
    s.ss = kValue ? p.v_stride_s : p.k_stride_s;
    s.sh = kValue ? p.v_stride_h : p.k_stride_h;
    s.prefix = nullptr, s.pss = s.psh = 0;
    if constexpr (kPrefix) {
      s.prefix = kValue ? p.vp : p.kp;
      s.pss = kValue ? p.vp_stride_s : p.kp_stride_s;
      s.psh = kValue ? p.vp_stride_h : p.kp_stride_h;
    }
    return s;
  }

  // Address of KV token j (logical position) of the work's batch and head. One
  // function for both kernels, K and V: paging, the prefix and the left-padded window
  // (its start is kv_tok0) all resolve here. E: the stored element (quantised KV:
  // int8, or int32 words of int4).
  template <class E = T>
  static __device__ __forceinline__ const E* kv_row(const PrefillParams& p, const KvSrc& s, const PrefillWork& w,
                                                    int j) {
    if constexpr (kPrefix) {
      if (j < w.prefix) return static_cast<const E*>(s.prefix) + (long long)j * s.pss + (long long)w.hk * s.psh;
      j -= w.prefix;
    }
    long long off;
    if constexpr (Tr::kPageSize > 0) {
      const int blk = p.block_table[(long long)w.b * p.block_table_stride_b + j / Tr::kPageSize];
      off = (long long)blk * s.sb + (long long)(j % Tr::kPageSize) * s.ss;
    } else {
      off = (long long)w.b * s.sb + (long long)(w.e.kv_tok0 + j) * s.ss;
    }
    return static_cast<const E*>(s.base) + off + (long long)w.hk * s.sh;
  }
  static __device__ __forceinline__ const T* q_row(const PrefillParams& p, const PrefillWork& w, int r) {
    return static_cast<const T*>(p.q) + (long long)w.b * p.q_stride_b +
           (long long)(w.e.q_tok0 + r / p.group) * p.q_stride_s + (long long)(w.hk * p.group + r % p.group) * p.q_stride_h;
  }

  // Rows past q_len (padded layouts): output 0, LSE +inf. `tid` of `threads`. (With
  // split value dims every CTA writes the same LSE.)
  // Left padding: zero row token q_len + z is the z-th token outside the window,
  // before its start (q_tok0) or after its end.
  static __device__ __forceinline__ int zero_token(const PrefillWork& w, int qi) {
    if constexpr (kLeftPad) {
      const int z = qi - w.e.q_len;
      return z < w.e.q_tok0 ? z : qi;
    }
    return w.e.q_tok0 + qi;
  }
  static __device__ void zero_rows(const PrefillParams& p, const PrefillWork& w, int tid, int threads) {
    O* out = static_cast<O*>(p.out);
    for (int i = tid; i < (w.r_end - w.r0) * kDv; i += threads) {
      const int r = w.r0 + i / kDv, c = i % kDv;
      const int qi = r / p.group, h = w.hk * p.group + r % p.group;
      O* at = out + (long long)w.b * p.o_stride_b + (long long)zero_token(w, qi) * p.o_stride_s +
              (long long)h * p.o_stride_h + w.dv0 + c;
      if constexpr (kInt8Out) *at = 0;
      else *at = from_float<T>(0.0f);
    }
    if constexpr (Tr::kLse) {
      for (int r = w.r0 + tid; r < w.r_end; r += threads) {
        const int qi = zero_token(w, r / p.group), h = w.hk * p.group + r % p.group;
        p.lse[(long long)w.b * p.lse_stride_b + (long long)qi * p.lse_stride_s + (long long)h * p.lse_stride_h] =
            __int_as_float(0x7f800000);
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

  // int8 output: clamp(round(x * scale + offset), -128, 127), ties to even.
  static __device__ __forceinline__ int quantize_int8(const PrefillParams& p, int h, int d, float x) {
    const long long i = (long long)h * p.quant_stride_h + (long long)d * p.quant_stride_d;
    float scale, offset = 0.f;
    if (p.quant_bf16) {
      scale = to_float(static_cast<const bf16_t*>(p.quant_scale)[i]);
      if (p.quant_offset) offset = to_float(static_cast<const bf16_t*>(p.quant_offset)[i]);
    } else {
      scale = static_cast<const float*>(p.quant_scale)[i];
      if (p.quant_offset) offset = static_cast<const float*>(p.quant_offset)[i];
    }
    return min(127, max(-128, __float2int_rn(x * scale + offset)));
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
    O* orow = static_cast<O*>(p.out) + (long long)w.b * p.o_stride_b +
              (long long)(w.e.q_tok0 + R.q[hf]) * p.o_stride_s + (long long)R.h[hf] * p.o_stride_h + w.dv0;
    if constexpr (kInt8Out) {
      // A row that saw no key writes 0, not the quantised 0 (the offset).
#pragma unroll
      for (int n = 0; n < kDv / 8; ++n) {
        const int d = w.dv0 + n * 8 + (lane % 4) * 2;
        // Constant accumulator indices: a caller's hf loop may stay rolled (the Hopper
        // kernel's does), and a dynamic index would put the accumulators on the stack.
        const float x0 = (hf ? o_at(n, 2) : o_at(n, 0)) * inv, x1 = (hf ? o_at(n, 3) : o_at(n, 1)) * inv;
        int lo = quantize_int8(p, R.h[hf], d, x0), hi = quantize_int8(p, R.h[hf], d + 1, x1);
        if (!(sum > 0.f)) lo = hi = 0;
        *reinterpret_cast<unsigned short*>(orow + n * 8 + (lane % 4) * 2) =
            (unsigned short)((lo & 0xff) | ((hi & 0xff) << 8));
      }
    } else {
#pragma unroll
      for (int n = 0; n < kDv / 8; ++n) {
        const u32 packed = pack2<T>(o_at(n, hf * 2) * inv, o_at(n, hf * 2 + 1) * inv);
        *reinterpret_cast<u32*>(orow + n * 8 + (lane % 4) * 2) = packed;
      }
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
