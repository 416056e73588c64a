// One cp.async KV ring shared by a whole decode CTA (split-D past head_dim 256,
// split-M for spec-decode rows): the CTA's threads copy each tile together, and
// one __syncthreads per tile both publishes the tile and frees the stage that the
// next copy refills. Tile t lives in stage t % kS.
// kWarpSlices (split-D on K/V as stored): warp w copies only its 1/kWarps of each
// row's dims, the dims it alone reads, so a __syncwarp does the barrier's work.
#pragma once

#include "decode/gqa_decode.cuh"

namespace attnjit {

template <class Tr, int kS, bool kWarpSlices = false>
struct DecodeCtaRing {
  using Base = GqaDecode<Tr>;
  using Work = typename Base::Work;
  using KVT = typename Tr::KVT;
  using MT = typename Tr::MT;
  static constexpr int HD = Tr::kHeadDim, kTile = Tr::kTile, kRowElems = Tr::kRowElems;
  static_assert(kS >= 2, "the next tile's copy refills the stage of the tile before it");
  __host__ __device__ static constexpr int pow2_at_most(int x) { return x < 2 ? 1 : 2 * pow2_at_most(x / 2); }

  // The cp.async copies of a tile: the whole CTA's, or (kWarpSlices) each warp its own
  // dims of each row. A pass copies kRowsPerPass whole rows (slices): a thread keeps its
  // chunk column and steps its row by a constant, so its sources step by a constant and
  // its destinations repeat every 8 rows (the swizzle's period).
  static constexpr int kChunks = HD * int(sizeof(KVT)) / 16 / (kWarpSlices ? Tr::kWarps : 1);  // a row's, a copier's
  static constexpr int kCopiers = kWarpSlices ? 32 : Tr::kThreads;
  static_assert(kChunks <= kCopiers, "a pass copies at least one whole row");
  static constexpr int kRowsPerPass =
      pow2_at_most(kCopiers / kChunks) < kTile ? pow2_at_most(kCopiers / kChunks) : kTile;
  // Distinct destinations a thread has modulo 8 rows (a pass steps kRowsPerPass rows).
  static constexpr int kDstBases = kRowsPerPass >= 8 ? 1 : (kTile < 8 ? kTile : 8) / kRowsPerPass;

  // This thread's share of every tile copy, the same for each tile and computed once:
  // the per-tile work is then a source step, an immediate destination and the copy.
  // (Chunk i at row i / kChunks, computed a tile at a time, cost ~10 instructions a copy
  // with its 64-bit products: fp8 hd384, ~196 of the ~800 a tile.)
  struct Copier {
    long long k_off, v_off;  // source bytes from the tile's row 0 of head 0: its KV head, row r0, chunk
    int dst[kDstBases];      // destination bytes from the stage of rows r0 + i * kRowsPerPass (i < kDstBases)
    int r0;                  // its first row; -1: it copies nothing (fp8 hd384's slices: 24 of 32 lanes copy)
  };
  __device__ static Copier copier(const DecodeParams& p, const Work& w) {
    Copier cp;
    const int t = kWarpSlices ? int(threadIdx.x % 32) : int(threadIdx.x);
    const int r0 = t / kChunks, c = (kWarpSlices ? int(threadIdx.x / 32) * kChunks : 0) + t % kChunks;
    cp.r0 = t < kRowsPerPass * kChunks ? r0 : -1;
    cp.k_off = ((long long)w.kvh * p.k_stride_head + (long long)r0 * p.k_stride_tok) * (long long)sizeof(KVT) + c * 16;
    cp.v_off = ((long long)w.kvh * p.v_stride_head + (long long)r0 * p.v_stride_tok) * (long long)sizeof(KVT) + c * 16;
#pragma unroll
    for (int i = 0; i < kDstBases; ++i) cp.dst[i] = raw_offset<Tr>(r0 + i * kRowsPerPass, c * 16);
    return cp;
  }

  __device__ static void issue_tile(const DecodeParams& p, const Work& w, const Copier& cp, unsigned char* stage,
                                    int tok0, int page) {
    if (cp.r0 < 0) return;
    // The tile's row 0 of KV head 0 (Copier::k_off holds the head).
    Work w0 = w;
    w0.kvh = 0;
    const unsigned char* kb = Base::tile_base(p.k, w0, p.k_stride_page, p.k_stride_tok, p.k_stride_head, page, tok0);
    const unsigned char* vb = Base::tile_base(p.v, w0, p.v_stride_page, p.v_stride_tok, p.v_stride_head, page, tok0);
    const long long ks = kRowsPerPass * p.k_stride_tok * (long long)sizeof(KVT);
    const long long vs = kRowsPerPass * p.v_stride_tok * (long long)sizeof(KVT);
    const int rows_left = w.tok_hi - tok0 - cp.r0;
    if (rows_left >= kTile) copy_rows<true>(cp, stage, kb, vb, ks, vs, rows_left);  // every tile but a split's last
    else copy_rows<false>(cp, stage, kb, vb, ks, vs, rows_left);
  }
  // kWhole: every row of the tile exists. Else rows past rows_left (from r0) copy zeros.
  template <bool kWhole>
  __device__ static __forceinline__ void copy_rows(const Copier& cp, unsigned char* stage, const unsigned char* kb,
                                                   const unsigned char* vb, long long ks, long long vs, int rows_left) {
    const unsigned char* ksrc = kb + cp.k_off;
    const unsigned char* vsrc = vb + cp.v_off;
#pragma unroll
    for (int j = 0; j < kTile / kRowsPerPass; ++j) {
      // raw_offset(r + 8, col) = raw_offset(r, col) + 8 rows: the swizzle repeats every 8 rows.
      unsigned char* dk = stage + cp.dst[j % kDstBases] + (j / kDstBases) * kDstBases * kRowsPerPass * Tr::kRawRowBytes;
      const bool valid = kWhole || j * kRowsPerPass < rows_left;
      cp_async_16(dk, valid ? ksrc : kb + cp.k_off, valid ? 16u : 0u);
      cp_async_16(dk + kTile * Tr::kRawRowBytes, valid ? vsrc : vb + cp.v_off, valid ? 16u : 0u);
      ksrc += ks;
      vsrc += vs;
    }
  }

  // fp8 tile -> fp16 tile, the whole CTA.
  __device__ static void widen_tile(const unsigned char* raw, MT* dst) {
    constexpr int kChunks = HD / 16;  // 16 fp8 per chunk
    for (int i = threadIdx.x; i < kTile * kChunks; i += Tr::kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const uint4 x = *reinterpret_cast<const uint4*>(raw + raw_offset<Tr>(r, c * 16));
      const u32 in[4] = {x.x, x.y, x.z, x.w};
      u32 out[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[2 * j] = widen_lo(KVT{}, in[j]);
        out[2 * j + 1] = widen_hi(KVT{}, in[j]);
      }
      uint4* d = reinterpret_cast<uint4*>(dst + r * kRowElems + c * 16);
      d[0] = make_uint4(out[0], out[1], out[2], out[3]);
      d[1] = make_uint4(out[4], out[5], out[6], out[7]);
    }
  }

  // RoPE on a K tile in shared memory (keys at positions tok0 + row), the whole
  // CTA; each thread owns its (row, pair) elements.
  __device__ static void rope_tile(MT* kt, const float* freq_s, int tok0) {
    constexpr int kPairs = HD / 2;
    for (int i = threadIdx.x; i < kTile * kPairs; i += Tr::kThreads) {
      const int r = i / kPairs, c = i % kPairs;
      MT* row = kt + r * kRowElems;
      const float x0 = to_float(row[c]), x1 = to_float(row[c + kPairs]);
      float sn, cs;
      sincosf(float(tok0 + r) * freq_s[c], &sn, &cs);
      row[c] = from_float<MT>(x0 * cs - x1 * sn);
      row[c + kPairs] = from_float<MT>(x1 * cs + x0 * sn);
    }
  }

  // The first kS - 1 tiles, one commit group each. setup() read the pages of the
  // first Tr::kStages - 1 in CTA order from tok_lo (again where a window moved it).
  __device__ static void prologue(const DecodeParams& p, const Work& w, unsigned char* ring, int n_tiles) {
    const Copier cp = copier(p, w);
#pragma unroll
    for (int s = 0; s < kS - 1; ++s) {
      const int tok0 = w.tok_lo + s * kTile;
      if (s < n_tiles)
        issue_tile(p, w, cp, ring + s * Tr::kStageBytes, tok0,
                   Tr::kPaged && s < Tr::kStages - 1 ? w.first_page[s < Tr::kStages - 1 ? s : 0]
                                                     : Base::page_of(p, w, tok0));
      cp_async_commit();
    }
  }

  // Per tile: wait for this thread's copies of it, barrier (everyone's copies
  // landed; everyone is done with tile t - 1, whose stage the next copy refills;
  // kWarpSlices: the warp's lanes, whose copies are all the warp reads),
  // issue tile t + kS - 1, then body(t, tok0, stage). A body that rewrites the
  // stage (RoPE, widening) adds its own barrier; the next one orders its reads
  // before the refill. kAligned = false: warps may run this loop from different
  // call sites (split-M's copy-only warps), so the barrier is the non-aligned
  // barrier.sync (PTX: .aligned, i.e. __syncthreads, requires every thread of the
  // CTA to execute the same barrier instruction).
  template <bool kAligned = true, class Body>
  __device__ static void for_each_tile(const DecodeParams& p, const Work& w, unsigned char* ring, int n_tiles,
                                       Body&& body) {
    // Each tile's page id is read one tile before its copy is issued.
    const Copier cp = copier(p, w);
    int next_page = 0;
    if (kS - 1 < n_tiles) next_page = Base::page_of(p, w, w.tok_lo + (kS - 1) * kTile);
    for (int t = 0; t < n_tiles; ++t) {
      cp_async_wait<kS - 2>();  // groups committed: kS - 1 + t; tiles 0..t are this thread's
      if constexpr (kWarpSlices) __syncwarp();
      else if constexpr (kAligned) __syncthreads();
      else asm volatile("barrier.sync 0;" ::: "memory");
      {
        const int tn = t + kS - 1;
        const int page = next_page;
        if (tn + 1 < n_tiles) next_page = Base::page_of(p, w, w.tok_lo + (tn + 1) * kTile);
        if (tn < n_tiles) issue_tile(p, w, cp, ring + (tn % kS) * Tr::kStageBytes, w.tok_lo + tn * kTile, page);
        cp_async_commit();
      }
      body(t, w.tok_lo + t * kTile, ring + (t % kS) * Tr::kStageBytes);
    }
  }
};

}  // namespace attnjit
