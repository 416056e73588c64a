// The GQA decode kernel shared by single_decode and xqa: one CTA per
// (split, kv head x row block, request); the group's query rows sit in the MMA's
// M dimension so each K/V byte is read once per KV head. Each warp streams its
// own tiles through a private cp.async ring (no CTA barrier in the main loop);
// warps merge through shared memory, and splits merge in the last CTA to finish.
// Spec-decode kernels may also hold 32 rows per CTA (dual-M, decode_dual_m.cuh) or 64
// (split-M, decode_split_m.cuh), and head dims past 256 split the output dims (split-D,
// decode_split_d.cuh).
#pragma once

#include "common/dtype.cuh"
#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "decode/decode_merge.cuh"
#include "decode/decode_params.cuh"
#include "decode/decode_softmax.cuh"
#include "decode/decode_tile.cuh"
#include "decode/decode_token_scales.cuh"
#include "decode/decode_traits.cuh"

namespace attnjit {

template <class Tr>
struct DecodeSplitD;  // decode/decode_split_d.cuh, included at the end of this file
template <class Tr>
struct DecodeSplitM;  // decode/decode_split_m.cuh, included at the end of this file
template <class Tr>
struct DecodeTransposed;  // decode/decode_transposed.cuh, included at the end of this file
template <class Tr>
struct DecodeDualM;  // decode/decode_dual_m.cuh, included at the end of this file

template <class Tr>
struct GqaDecode : DecodeSoftmax<Tr> {
  using Soft = DecodeSoftmax<Tr>;
  using QT = typename Tr::QT;
  using KVT = typename Tr::KVT;
  using OT = typename Tr::OT;
  using MT = typename Tr::MT;
  static constexpr int HD = Tr::kHeadDim, G = Tr::kGroup, W = Tr::kWarps, S = Tr::kStages;
  static constexpr int kTile = Tr::kTile, kRows = Tr::kRows, kRowElems = Tr::kRowElems;
  using Tile = DecodeTile<Tr>;
  static constexpr unsigned F = Tr::kFeatures;
  __device__ static constexpr bool has(unsigned f) { return (F & f) != 0; }

  // Per-CTA facts derived once from the params.
  struct Work {
    int b, kvh, rb, split, n_splits;
    int kv_heads;  // KV heads kvh.. this CTA serves: 1, or with kvpair 2 (1 past an odd count's last)
    int seq_len, q_len, q_tok0, rows_valid;
    int tok_lo, tok_hi;
    float score_scale;  // sm_scale * q_scale * k_scale
    float v_scale;
    int first_page[S > 1 ? S - 1 : 1];  // pages of the prologue tiles from tok_lo (paged)
    typename DecodeTokenScales<Tr>::Src tok;  // per-token scales: this lane's copy sources
  };

  // A CTA's row gr: its query token, query head and KV head (DecodeTraits::row_*).
  static constexpr int GC = Tr::kCtaGroup;
  __device__ static int row_token(int gr) { return Tr::row_token(gr); }
  __device__ static int row_q_head(const Work& w, int gr) { return Tr::row_q_head(w.kvh, gr); }
  __device__ static int row_kv_head(const Work& w, int gr) { return Tr::row_kv_head(w.kvh, gr); }
  // The query row that Q's shared-memory row s holds, or -1 (zeros). kvpair keeps its
  // two groups apart, in rows 0-7 and 8-15, each with the other group's rows zeroed: each
  // head's K then meets only its own queries in the MMA's columns (DecodeTransposed).
  __device__ static constexpr int q_src_row(int s) {
    if (Tr::kKvPack == 1) return s;
    return (s % 8) / G == s / 8 ? s % 8 : -1;
  }
  __device__ static constexpr int q_smem_row(int r) { return Tr::kKvPack == 1 || r >= GC ? r : r + 8 * (r / G); }

  __device__ static void run(const DecodeParams& p, unsigned char* smem) {
    if constexpr (Tr::kSplitD) {
      DecodeSplitD<Tr>::run(p, smem);
    } else if constexpr (Tr::kSplitM) {
      // The host's choice, the same for every CTA.
      if (p.rows_per_cta == kDecodeSplitMRows) DecodeSplitM<Tr>::run(p, smem);
      else if (Tr::kDualM && p.rows_per_cta == kDecodeDualMRows) run_dual_m(p, smem);
      else run_token_split(p, smem);
    } else {
      run_token_split(p, smem);
    }
  }

  __device__ static void run_dual_m(const DecodeParams& p, unsigned char* smem) {
    if constexpr (Tr::kDualM) DecodeDualM<Tr>::run(p, smem);
  }

  // head_dim <= 256: each warp streams its own tiles and holds O for every dim.
  __device__ static void run_token_split(const DecodeParams& p, unsigned char* smem) {
    Work w;
    if (!setup(p, w)) return;
    MT* q_s = reinterpret_cast<MT*>(smem);
    float* freq_s = reinterpret_cast<float*>(smem + Tr::kQBytes);
    unsigned char* loop_s = smem + Tr::kQBytes + Tr::kFreqBytes;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // The first KV tiles are in flight while Q loads.
    issue_prologue(p, w, loop_s, warp, lane);
    load_q(p, w, q_s, freq_s);
    __syncthreads();
    // Each warp's partial (row max, sum, O), in the ring's bytes once the loop drains it.
    float* red_o = reinterpret_cast<float*>(loop_s);
    float* red_m = red_o + W * kRows * HD;
    float* red_l = red_m + W * kRows;
    if constexpr (Tr::kTransposed) DecodeTransposed<Tr>::run(p, w, q_s, loop_s, warp, lane, red_o, red_m, red_l);
    else warp_partial(p, w, q_s, freq_s, loop_s, warp, lane, red_o, red_m, red_l);
    __syncthreads();
    DecodeMerge<Tr>::merge_and_store(p, w, red_o, red_m, red_l, reinterpret_cast<unsigned*>(smem));
  }

  // The first S - 1 tiles of this warp's private ring (every W-th tile of the CTA's
  // span from the warp's own), each its own cp.async group. setup() read their pages
  // (again, where a window moved the start).
  __device__ static void issue_prologue(const DecodeParams& p, const Work& w, unsigned char* loop_s, int warp,
                                        int lane) {
    const int n_tiles = (w.tok_hi - w.tok_lo + kTile - 1) / kTile;
    unsigned char* ring = loop_s + warp * S * Tr::kStageBytes;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      int t = warp + s * W;
      if (t < n_tiles)
        issue_tile(p, w, ring + s * Tr::kStageBytes, w.tok_lo + t * kTile, Tr::kPaged ? w.first_page[s] : 0, lane);
      cp_async_commit();
    }
  }

  // One warp's partial for its 16 rows (row max, the quad-summed row sum, O) into the
  // merge buffers at row row0: the token-split, split-M and dual-M loops' ends.
  __device__ static void store_partial(float* red_o, float* red_m, float* red_l, int row0, const float (&m)[2],
                                       const float (&l)[2], const float (&o)[HD / 8][4], int lane) {
    const int g = lane / 4, tq = lane % 4;
    const float l0 = quad_sum(l[0]), l1 = quad_sum(l[1]);
    if (tq == 0) {
      red_m[row0 + g] = m[0];
      red_m[row0 + g + 8] = m[1];
      red_l[row0 + g] = l0;
      red_l[row0 + g + 8] = l1;
    }
    store_warp_o(red_o + (row0 + g) * HD, o, tq);
  }

  // The row-major tile's loop, then the warp's partial into the merge buffers.
  __device__ static void warp_partial(const DecodeParams& p, const Work& w, const MT* q_s, const float* freq_s,
                                      unsigned char* loop_s, int warp, int lane, float* red_o, float* red_m,
                                      float* red_l) {
    float o[HD / 8][4];
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    warp_loop(p, w, q_s, freq_s, loop_s, warp, lane, o, m, l);

    cp_async_wait<0>();
    __syncthreads();  // the ring is now reused for the warp merge
    pdl_launch_dependents();
    store_partial(red_o, red_m, red_l, warp * kRows, m, l, o, lane);
  }

  // Returns false when this CTA has nothing to do (the same answer for every
  // CTA of a (request, head, row block), so the split counter stays consistent).
  // kRowsCta: the CTA's query rows (16; dual-M: kDecodeDualMRows; split-M: kDecodeSplitMRows).
  template <int kRowsCta = kRows>
  __device__ static bool setup(const DecodeParams& p, Work& w) {
    w.split = blockIdx.x;
    w.kvh = blockIdx.y / p.row_blocks * Tr::kKvPack;
    w.rb = blockIdx.y % p.row_blocks;
    w.kv_heads = min(Tr::kKvPack, p.num_kv_heads - w.kvh);
    w.b = blockIdx.z;
    pdl_wait_prior_grid();
    // The page ids of the first tiles are read beside seq_lens: without a window
    // their positions depend only on the split, so a CTA starts its KV copies one
    // memory round trip sooner.
    if constexpr (Tr::kPaged)
      load_first_pages<kRowsCta>(p, w, w.split * p.tokens_per_split, p.pages_per_seq * Tr::kPageSize);
    // Also an asm load, so that it is issued after the page ids, not before them.
    w.seq_len = p.seq_lens ? ld_global_now(reinterpret_cast<const int*>(p.seq_lens) + w.b) : p.kv_len;
    // Never read past the request's row of the page table, whatever seq_lens says.
    if constexpr (Tr::kPaged) w.seq_len = min(w.seq_len, p.pages_per_seq * Tr::kPageSize);
    if (has(feat::kRaggedQ)) {
      w.q_tok0 = int(p.q_cu_seq_lens[w.b]);
      // q_seq_len is the longest draft: rows and mask rows exist for no more.
      w.q_len = min(int(p.q_cu_seq_lens[w.b + 1]) - w.q_tok0, p.q_seq_len);
    } else {
      w.q_tok0 = 0;
      w.q_len = p.q_seq_len;
    }
    w.rows_valid = min(kRowsCta, w.q_len * G * w.kv_heads - w.rb * kRowsCta);  // kvpair: q_len 1
    if (w.rows_valid <= 0) return false;
    // A window walks only [kv_begin, seq_len), split from kv_begin (decode_params.cuh).
    const int kv_begin = has(feat::kWindow) ? decode_kv_begin(w.seq_len, w.q_len, p.window_left, kTile) : 0;
    const DecodeSplitRange range = decode_split_range(kv_begin, w.seq_len, w.split, p.num_splits, p.tokens_per_split);
    w.n_splits = range.n_splits;
    if (w.split >= w.n_splits) return false;
    w.tok_lo = range.lo;
    w.tok_hi = range.hi;
    // The window moved the start, so the page ids read early belong to tokens
    // before it: read this split's own, all issued at once (one round trip after
    // seq_lens, not one per prologue tile). No page outside [tok_lo, tok_hi).
    if constexpr (Tr::kPaged)
      if (kv_begin != 0) load_first_pages<kRowsCta>(p, w, w.tok_lo, w.tok_hi);
    float qs = has(feat::kScalePtr) && p.q_scale_ptr ? *p.q_scale_ptr : p.q_scale;
    const bool kv_ptr = has(feat::kScalePtr) && p.kv_scale_ptr;
    w.score_scale = p.sm_scale * qs * (kv_ptr ? *p.kv_scale_ptr : p.k_scale);
    w.v_scale = kv_ptr ? *p.kv_scale_ptr : p.v_scale;
    if constexpr (Tr::kTokScales) DecodeTokenScales<Tr>::init(p, w.b, w.kvh, w.tok);
    return true;
  }

  // The pages of the first S - 1 tiles from token tok_lo into w.first_page: a
  // CTA-wide ring (split-D, split-M) takes the CTA's first tiles in order, else
  // each warp its own (every W-th). Tokens at or past limit read nothing. Asm
  // loads, all issued before any is used: the compiler would otherwise sink them
  // to their use, after seq_lens is consumed.
  template <int kRowsCta>
  __device__ static void load_first_pages(const DecodeParams& p, Work& w, int tok_lo, int limit) {
    const int warp = threadIdx.x / 32;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      const int tok = tok_lo + (Tr::kSplitD || kRowsCta == kDecodeSplitMRows ? s : warp + s * W) * kTile;
      w.first_page[s] = tok < limit ? ld_global_now(page_entry(p, w, tok)) : 0;
    }
  }

  // Where head dim d sits in the Q operand. The direct fp8 path reads K with
  // ldmatrix as bytes, which hands lane quad t dims 4t..4t+3 of each 16; the MMA
  // expects 2t, 2t+1, 2t+8, 2t+9, so Q takes the same permutation.
  // int4 (DecodeTile::scores): lane quad t reads dims 8t..8t+7 of each 32 as one word and
  // pairs nibbles i and i + 4; pair i % 4 is operand b0 or b1 of the 32's first or second
  // MMA (i % 4 = 2m + b), nibble i / 4 its low or high half.
  __device__ static constexpr int q_col(int d) {
    if (Tr::kInt4Kv) {
      const int p = d % 32, t = p / 8, i = p % 8, j = i % 4;
      return d - p + (j / 2) * 16 + 8 * (j % 2) + 2 * t + i / 4;
    }
    if (!Tr::kDirectFp8) return d;
    int p = d % 16, t = p / 4, e = p % 4;
    return d - p + (e < 2 ? 2 * t + e : 8 + 2 * t + e - 2);
  }

  // 8 consecutive 16-bit Q elements in one 16-byte load: both ops require q's
  // pointer and strides 16-byte aligned (ops/common/validate: require_aligned).
  __device__ static uint4 load_q8(const QT* src) {
    static_assert(sizeof(QT) == 2, "q is fp16 or bf16");
    return *reinterpret_cast<const uint4*>(src);
  }

  // Q rows -> shared memory as MMA operands (zero rows past the valid ones). A unit
  // is 8 pairs (c, c + HD/2), so RoPE rotates in registers. Every load of a thread
  // is issued before any is used: one memory round trip per CTA, not one per unit.
  // kQRows: the CTA's query rows (16; dual-M: kDecodeDualMRows; split-M: kDecodeSplitMRows).
  template <int kQRows = kRows>
  __device__ static void load_q(const DecodeParams& p, const Work& w, MT* q_s, float* freq_s) {
    if (Tr::kPos == pos_mode::kRope) {
      for (int i = threadIdx.x; i < HD / 2; i += blockDim.x)
        freq_s[i] = p.rope_rcp_scale * powf(p.rope_rcp_theta, float(2 * i) / float(HD));
      __syncthreads();
    }
    const QT* q = static_cast<const QT*>(p.q);
    constexpr int kHalf = HD / 2, kUnitsPerRow = kHalf / 8, kUnits = kQRows * kUnitsPerRow;
    constexpr int kPerThread = (kUnits + Tr::kThreads - 1) / Tr::kThreads;
    uint4 raw[kPerThread][2];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int u = threadIdx.x + i * Tr::kThreads, r = q_src_row(u / kUnitsPerRow), c0 = (u % kUnitsPerRow) * 8;
      raw[i][0] = raw[i][1] = make_uint4(0u, 0u, 0u, 0u);
      if (u < kUnits && r >= 0 && r < w.rows_valid) {
        const int gr = w.rb * kQRows + r, qt = row_token(gr), h = row_q_head(w, gr);
        const QT* row = q + w.b * p.q_stride_b + (w.q_tok0 + qt) * p.q_stride_t + h * p.q_stride_h;
        raw[i][0] = load_q8(row + c0);
        raw[i][1] = load_q8(row + c0 + kHalf);
      }
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int u = threadIdx.x + i * Tr::kThreads, sr = u / kUnitsPerRow, c0 = (u % kUnitsPerRow) * 8;
      if (u >= kUnits) continue;
      const int r = q_src_row(sr), gr = w.rb * kQRows + (r < 0 ? 0 : r), qt = row_token(gr);
      // Zero rows read no scales: with kvpair past an odd head count, their KV head is none.
      const bool valid = r >= 0 && r < w.rows_valid;
      const u32* lo = &raw[i][0].x;
      const u32* hi = &raw[i][1].x;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int c = c0 + e;
        float x0 = to_float(QT{u16(lo[e / 2] >> (16 * (e % 2)))});
        float x1 = to_float(QT{u16(hi[e / 2] >> (16 * (e % 2)))});
        if (Tr::kPos == pos_mode::kRope && valid) {
          float sn, cs;
          sincosf(float(w.seq_len - w.q_len + qt) * freq_s[c], &sn, &cs);
          float y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
          x0 = y0;
          x1 = y1;
        }
        if (Tr::kQuantKv && !Tr::kKTok && valid) {  // K's channel scales, folded into q
          const long long at = (long long)row_kv_head(w, gr) * p.kc_sh;
          x0 *= load_as_float(p.k_chan, p.k_chan_dtype, at + (long long)c * p.kc_sd);
          x1 *= load_as_float(p.k_chan, p.k_chan_dtype, at + (long long)(c + kHalf) * p.kc_sd);
        }
        if constexpr (Tr::kTransposed) {  // int4 K widened without its 1/16 (DecodeTransposed::k_bias)
          x0 /= DecodeTransposed<Tr>::q_unscale(q_col(c));
          x1 /= DecodeTransposed<Tr>::q_unscale(q_col(c + kHalf));
        }
        q_s[sr * kRowElems + q_col(c)] = from_float<MT>(x0);
        q_s[sr * kRowElems + q_col(c + kHalf)] = from_float<MT>(x1);
      }
    }
  }

  // The page-table entry of token tok0 (paged KV only).
  __device__ static const int* page_entry(const DecodeParams& p, const Work& w, int tok0) {
    return p.page_table + (long long)w.b * p.pages_per_seq + tok0 / Tr::kPageSize;
  }
  // The page holding token tok0 (0 for contiguous KV).
  __device__ static int page_of(const DecodeParams& p, const Work& w, int tok0) {
    if constexpr (Tr::kPaged) return *page_entry(p, w, tok0);
    else return 0;
  }

  __device__ static const unsigned char* tile_base(const void* base, const Work& w, long long s_page,
                                                   long long s_tok, long long s_head, int page, int tok0) {
    long long off = w.kvh * s_head;
    if constexpr (Tr::kPaged) off += (long long)page * s_page + (tok0 % Tr::kPageSize) * s_tok;
    else off += (long long)w.b * s_page + (long long)tok0 * s_tok;  // s_page: the batch stride
    return static_cast<const unsigned char*>(base) + off * (long long)sizeof(KVT);
  }

  // One warp issues the cp.async copies of one K and one V tile into its stage.
  __device__ static void issue_tile(const DecodeParams& p, const Work& w, unsigned char* stage,
                                    int tok0, int page, int lane) {
    issue_tile_at(p, w, stage, tile_base(p.k, w, p.k_stride_page, p.k_stride_tok, p.k_stride_head, page, tok0),
                  tile_base(p.v, w, p.v_stride_page, p.v_stride_tok, p.v_stride_head, page, tok0), tok0, page, lane);
  }
  // The same from the tile's K and V row 0 (kb, vb).
  __device__ static __forceinline__ void issue_tile_at(const DecodeParams& p, const Work& w, unsigned char* stage,
                                                       const unsigned char* kb, const unsigned char* vb, int tok0,
                                                       int page, int lane) {
    const long long ks = p.k_stride_tok * (long long)sizeof(KVT), vs = p.v_stride_tok * (long long)sizeof(KVT);
    constexpr int kChunks = Tr::kRowDataBytes / 16;  // 16-byte chunks per row
    if constexpr (32 % kChunks == 0) {
      // Each pass of the warp copies whole rows: a lane keeps its chunk column and steps
      // its row, so its sources step by a constant (int8 hd128: 458 -> 453 instructions a
      // tile; the compiler had already strength-reduced most of the per-chunk arithmetic).
      constexpr int kRowsPerPass = 32 / kChunks;
      const int r0 = lane / kChunks, c = lane % kChunks;
      const unsigned char* ksrc = kb + r0 * ks + c * 16;
      const unsigned char* vsrc = vb + r0 * vs + c * 16;
      bool head_ok = true;
      if constexpr (Tr::kKvPack > 1) {  // kvpair: a stage row's second half is KV head kvh + 1's row
        constexpr int kHeadChunks = kChunks / Tr::kKvPack;
        const int hh = c / kHeadChunks, cc = c % kHeadChunks;
        ksrc = kb + r0 * ks + hh * p.k_stride_head * (long long)sizeof(KVT) + cc * 16;
        vsrc = vb + r0 * vs + hh * p.v_stride_head * (long long)sizeof(KVT) + cc * 16;
        head_ok = hh < w.kv_heads;  // an odd head count's last CTA: zeros, never read
      }
#pragma unroll
      for (int j = 0; j < kTile / kRowsPerPass; ++j) {
        const int r = r0 + j * kRowsPerPass;
        const bool valid = head_ok && tok0 + r < w.tok_hi;
        unsigned char* dk = stage + raw_offset<Tr>(r, c * 16);
        cp_async_16(dk, valid ? ksrc : kb, valid ? 16u : 0u);
        cp_async_16(dk + kTile * Tr::kRawRowBytes, valid ? vsrc : vb, valid ? 16u : 0u);
        ksrc += kRowsPerPass * ks;
        vsrc += kRowsPerPass * vs;
      }
    } else {
      static_assert(Tr::kKvPack == 1, "kvpair rows are whole copy passes");
#pragma unroll
      for (int i = lane; i < kTile * kChunks; i += 32) {
        int r = i / kChunks, c = i % kChunks;
        bool valid = tok0 + r < w.tok_hi;
        unsigned char* dk = stage + raw_offset<Tr>(r, c * 16);
        unsigned char* dv = dk + kTile * Tr::kRawRowBytes;
        cp_async_16(dk, valid ? kb + r * ks + c * 16 : kb, valid ? 16u : 0u);
        cp_async_16(dv, valid ? vb + r * vs + c * 16 : vb, valid ? 16u : 0u);
      }
    }
    if constexpr (Tr::kTokScales)
      DecodeTokenScales<Tr>::issue(p, w.tok, w.tok_hi, reinterpret_cast<float*>(stage + 2 * kTile * Tr::kRawRowBytes),
                                   tok0, page, lane);
  }


  // fp8 tile -> fp16 tile in the warp's conversion buffer.
  __device__ static void widen_tile(const unsigned char* raw, MT* dst, int lane) {
    constexpr int kChunks = HD / 16;  // 16 fp8 per chunk
    for (int i = lane; i < kTile * kChunks; i += 32) {
      int r = i / kChunks, c = i % kChunks;
      uint4 x = *reinterpret_cast<const uint4*>(raw + raw_offset<Tr>(r, c * 16));
      u32 in[4] = {x.x, x.y, x.z, x.w};
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

  // RoPE on a K tile in shared memory (keys at positions tok0 + row).
  __device__ static void rope_tile(MT* kt, const float* freq_s, int tok0, int lane) {
    constexpr int kPairs = HD / 2;
    for (int i = lane; i < kTile * kPairs; i += 32) {
      int r = i / kPairs, c = i % kPairs;
      MT* row = kt + r * kRowElems;
      float x0 = to_float(row[c]), x1 = to_float(row[c + kPairs]);
      float sn, cs;
      sincosf(float(tok0 + r) * freq_s[c], &sn, &cs);
      row[c] = from_float<MT>(x0 * cs - x1 * sn);
      row[c + kPairs] = from_float<MT>(x1 * cs + x0 * sn);
    }
  }

  __device__ static void warp_loop(const DecodeParams& p, const Work& w, const MT* q_s,
                                   const float* freq_s, unsigned char* loop_s, int warp, int lane,
                                   float (&o)[HD / 8][4], float (&m)[2], float (&l)[2]) {
    u32 qf[Tr::kQInRegs ? HD / 16 : 1][4];
    if constexpr (Tr::kQInRegs) {
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks)
        ldmatrix_x4(qf[ks], q_s + ((lane % 8) + ((lane / 8) % 2) * 8) * kRowElems + ks * 16 + (lane / 16) * 8);
    }
    MT* conv = reinterpret_cast<MT*>(loop_s + Tr::kRingBytes) + warp * 2 * kTile * kRowElems;
    const int g = lane / 4, tq = lane % 4;

    // Per-row constants for the two rows this thread holds.
    float slope[2] = {0.f, 0.f};
    int q_pos[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int gr = w.rb * kRows + g + 8 * h;
      q_pos[h] = w.seq_len - w.q_len + gr / G;
      if (Tr::kPos == pos_mode::kAlibi)
        slope[h] = alibi_slope(w.kvh * G + gr % G, p.num_kv_heads * G) * kLog2e;
    }
    // Per-token scales (decode_token_scales.cuh): K's offsets need each row's sum of q;
    // V's scales go into P under a running unit.
    float qsum[2] = {0.f, 0.f};
    if constexpr (Tr::kKTok) DecodeTokenScales<Tr>::q_sums(q_s, g, tq, qsum);
    typename DecodeTokenScales<Tr>::VUnit vu;

    walk_ring(p, w, loop_s, warp, lane, [&](int tok0, unsigned char* stage) {
      const MT* kt;
      const MT* vt;
      if constexpr (Tr::kFp8Kv && !Tr::kDirectFp8) {
        widen_tile(stage, conv, lane);
        widen_tile(stage + kTile * Tr::kRawRowBytes, conv + kTile * kRowElems, lane);
        kt = conv;
        vt = conv + kTile * kRowElems;
      } else {
        kt = reinterpret_cast<const MT*>(stage);
        vt = reinterpret_cast<const MT*>(stage + kTile * Tr::kRawRowBytes);
      }
      const unsigned char* k_raw = stage;
      const unsigned char* v_raw = stage + kTile * Tr::kRawRowBytes;
      const float* ts = reinterpret_cast<const float*>(stage + 2 * kTile * Tr::kRawRowBytes);
      if constexpr (Tr::kPos == pos_mode::kRope) {
        __syncwarp();
        rope_tile(const_cast<MT*>(kt), freq_s, tok0, lane);
      }
      __syncwarp();

      // S = Q K^T over this tile: 16 rows x kTile tokens.
      float s[Tile::kN][4];
      Tile::scores(qf, q_s, kt, k_raw, lane, s);

      // Scale, soft cap, ALiBi, mask; then the online-softmax update.
      Soft::softmax_tile(p, w, s, tok0, g, tq, slope, q_pos, o, m, l, ts, qsum, &vu);

      // O += P V: the S accumulators are already in the A-operand layout.
      Tile::accumulate_pv(s, vt, v_raw, lane, o);
    });
    if constexpr (Tr::kVTok) vu.finish(o);
  }

  // The warp's tiles through its private cp.async ring: body(tok0, stage) once each tile
  // has landed. The ring's first S - 1 tiles were issued before Q was loaded
  // (run_token_split). Each tile's page id is read one iteration before its copy is
  // issued, so the page-table load never stalls the issue.
  template <class Body>
  __device__ static __forceinline__ void walk_ring(const DecodeParams& p, const Work& w, unsigned char* loop_s,
                                                   int warp, int lane, Body&& body) {
    unsigned char* ring = loop_s + warp * S * Tr::kStageBytes;
    const int n_tiles = (w.tok_hi - w.tok_lo + kTile - 1) / kTile;
    int next_page = 0;
    if (Tr::kPaged && warp + (S - 1) * W < n_tiles) next_page = page_of(p, w, w.tok_lo + (warp + (S - 1) * W) * kTile);
    // Contiguous K/V: the next copy's sources step by W tiles, carried by the loop (the
    // compiler rebuilds hoisted (b, kvh, tok0) products each tile under a register cap).
    const int tok_next = w.tok_lo + (warp + (S - 1) * W) * kTile;
    const unsigned char* kn = tile_base(p.k, w, p.k_stride_page, p.k_stride_tok, p.k_stride_head, 0, tok_next);
    const unsigned char* vn = tile_base(p.v, w, p.v_stride_page, p.v_stride_tok, p.v_stride_head, 0, tok_next);
    for (int it = 0, t = warp; t < n_tiles; ++it, t += W) {
      {
        const int tn = t + (S - 1) * W;
        const int page = next_page;
        if (Tr::kPaged && tn + W < n_tiles) next_page = page_of(p, w, w.tok_lo + (tn + W) * kTile);
        unsigned char* stage = ring + ((it + S - 1) % S) * Tr::kStageBytes;
        if constexpr (Tr::kPaged) {
          if (tn < n_tiles) issue_tile(p, w, stage, w.tok_lo + tn * kTile, page, lane);
        } else {
          if (tn < n_tiles) issue_tile_at(p, w, stage, kn, vn, w.tok_lo + tn * kTile, 0, lane);
          kn += W * kTile * p.k_stride_tok * (long long)sizeof(KVT);
          vn += W * kTile * p.v_stride_tok * (long long)sizeof(KVT);
        }
        cp_async_commit();
      }
      cp_async_wait<S - 1>();
      __syncwarp();
      body(w.tok_lo + t * kTile, ring + (it % S) * Tr::kStageBytes);
      __syncwarp();  // every lane is done with this stage before it is refilled
    }
  }

  __device__ static void store_warp_o(float* dst, const float (&o)[HD / 8][4], int tq) {
    DecodeTile<Tr>::store_o(dst, o, tq);
  }
};

}  // namespace attnjit

#include "decode/decode_dual_m.cuh"
#include "decode/decode_split_d.cuh"
#include "decode/decode_split_m.cuh"
#include "decode/decode_transposed.cuh"
