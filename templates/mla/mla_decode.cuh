// The portable (xqa backend) MLA decode kernel: 16 head rows in the MMA's M,
// 32-token KV tiles of all 576 dims streamed into shared memory with cp.async,
// S = Q.K^T over 576, an online softmax, and O += P.V with V the first 512 dims of
// the same tile (the cache is read once; fp8 KV widened in registers, mla_tile.cuh).
// Split-KV CTAs merge in the last one.
#pragma once

#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "mla/mla_epilogue.cuh"
#include "mla/mla_params.cuh"
#include "mla/mla_tile.cuh"

namespace attnjit {

template <class Tr>
struct MlaDecode {
  using OT = typename Tr::OT;
  using MT = typename Tr::MT;
  using Tile = MlaTile<Tr>;
  using Out = MlaEpilogue<Tr, Tr::kRows>;
  static constexpr int D = mla_const::kHeadDimQk, DV = mla_const::kHeadDimVo, T = Tr::kTile, R = Tr::kRows;
  static constexpr int kKvBytes = int(sizeof(typename Tr::KVT));
  static constexpr int kChunksPerRow = D * kKvBytes / 16;  // 16-byte chunks per token row: 72, fp8 36
  static constexpr int kDimsPerWarp = Tile::kDimsPerWarp;  // 128
  static constexpr int kNBlocks = Tile::kNBlocks;          // 16 n8 blocks of O per warp

  struct Work {
    int b, group, rb, split;
    int lo, hi;        // this CTA's token range (dense: sequence positions; sparse: index slots)
    int seq_len;
  };

  // The table entry of range position j (dense: its page id; sparse: its physical
  // index), or -1 past the range. A volatile load, issued here: the caller uses it a
  // tile later, so the lookup's latency hides behind a tile's math.
  __device__ static int lookup(const MlaParams& p, const Work& w, int t, int j) {
    if (j >= w.hi) return -1;
    if constexpr (Tr::kSparse) {
      return ld_global_now(p.indices + w.b * p.idx_stride_b + t * p.idx_stride_t + j);
    } else {
      const int pi = j / Tr::kPageSize;
      if (pi >= p.pages_per_seq) return -1;
      return ld_global_now(p.block_tables + w.b * p.bt_stride_b + pi);
    }
  }

  // Physical token offset (elements) of range position j from its entry, or -1 when nothing is there.
  __device__ static long long token_offset(const MlaParams& p, int entry, int j) {
    if (entry < 0) return -1;
    long long page, slot;
    if constexpr (Tr::kSparse) {
      if ((long long)entry >= p.num_tokens) return -1;
      page = entry / Tr::kPageSize;
      slot = entry % Tr::kPageSize;
    } else {
      page = entry;
      slot = j % Tr::kPageSize;
    }
    return page * p.kv_stride_page + slot * p.kv_stride_tok;
  }

  // Lane i < 8 of warp w looks up token row w*8+i of the tile at j0 (-1 for other lanes).
  __device__ static int lookup_tile(const MlaParams& p, const Work& w, int t, int j0, int warp, int lane) {
    return lane < 8 ? lookup(p, w, t, j0 + warp * 8 + lane) : -1;
  }

  // Warp w copies token rows w*8 .. w*8+7 of the tile at j0, from the entries lookup_tile gave.
  __device__ static void load_tile(const MlaParams& p, int entry, int j0, unsigned char* stage, int* ok, int warp,
                                   int lane) {
    if constexpr (Tr::kSplitRope) {
      load_tile_split(p, entry, j0, stage, ok, warp, lane);
      return;
    }
    const long long off = lane < 8 ? token_offset(p, entry, j0 + warp * 8 + lane) : -1;
    if (lane < 8) ok[warp * 8 + lane] = off >= 0 ? 1 : 0;
    const unsigned char* base = static_cast<const unsigned char*>(p.kv);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      long long o = __shfl_sync(0xffffffffu, off, i);
      unsigned char* dst = stage + (warp * 8 + i) * Tr::kKvRowBytes;
      const unsigned char* src = o >= 0 ? base + o * kKvBytes : base;
      const unsigned bytes = o >= 0 ? 16u : 0u;  // zero-fill: V rows meet P = 0, never garbage
#pragma unroll
      for (int c = lane; c < kChunksPerRow; c += 32) cp_async_16(dst + c * 16, src + c * 16, bytes);
    }
  }

  // load_tile for FIA's split tensors: a row's first 512 dims from kv (the key), its
  // rope dims from kv_rope (key_rope), into the same 576-wide shared-memory row.
  __device__ static void load_tile_split(const MlaParams& p, int entry, int j0, unsigned char* stage, int* ok,
                                         int warp, int lane) {
    constexpr int kNopeChunks = mla_const::kNopeDims * kKvBytes / 16;
    long long off = -1, roff = -1;
    if (lane < 8 && entry >= 0) {
      const long long slot = (j0 + warp * 8 + lane) % Tr::kPageSize;
      off = entry * p.kv_stride_page + slot * p.kv_stride_tok;
      roff = entry * p.kvr_stride_page + slot * p.kvr_stride_tok;
    }
    if (lane < 8) ok[warp * 8 + lane] = off >= 0 ? 1 : 0;
    const unsigned char* base = static_cast<const unsigned char*>(p.kv);
    const unsigned char* rbase = static_cast<const unsigned char*>(p.kv_rope);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const long long o = __shfl_sync(0xffffffffu, off, i);
      const long long ro = __shfl_sync(0xffffffffu, roff, i);
      unsigned char* dst = stage + (warp * 8 + i) * Tr::kKvRowBytes;
      const unsigned bytes = o >= 0 ? 16u : 0u;  // zero-fill: V rows meet P = 0, never garbage
#pragma unroll
      for (int c = lane; c < kChunksPerRow; c += 32) {
        const unsigned char* src = o < 0                ? base
                                   : c < kNopeChunks   ? base + o * kKvBytes + c * 16
                                                       : rbase + ro * kKvBytes + (c - kNopeChunks) * 16;
        cp_async_16(dst + c * 16, src, bytes);
      }
    }
  }

  __device__ static void run(const MlaParams& p, unsigned char* smem) {
    if (p.split_pass == 2) return Out::template combine_any<16>(p, smem);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    Work w;
    w.split = blockIdx.x;
    w.b = blockIdx.z;
    w.group = blockIdx.y / p.row_blocks;
    w.rb = blockIdx.y % p.row_blocks;
    unsigned char* q_s = smem;
    unsigned char* kv_s = q_s + Tr::kQBytes;
    float* s_s = reinterpret_cast<float*>(kv_s + Tr::kStages * Tr::kStageBytes);
    int* ok_s = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(s_s) + Tr::kSBytes);
    unsigned* flag_s = reinterpret_cast<unsigned*>(ok_s + Tr::kStages * T);

    pdl_wait_prior_grid();
    int q_len = p.q_len;  // this request's (FIA: its actual query length)
    if constexpr (Tr::kSplitRope) {
      w.seq_len = p.seq_lens ? __ldg(p.seq_lens + w.b) : p.kv_len;
      if (p.q_lens) q_len = __ldg(p.q_lens + w.b);
    } else {
      w.seq_len = __ldg(p.seq_lens + w.b);
    }
    const int range = Tr::kSparse ? p.top_k : mla_dense_range(p, w.seq_len, Tr::kPageSize);
    w.lo = w.split * p.tokens_per_split;
    w.hi = mla_split_hi(p, range, w.lo, w.split);
    if constexpr (Tr::kSplitRope) {
      // Keys at or past the CTA's largest row limit are masked for all its rows: not loaded.
      const int cta_limit = fia_mla_cta_limit(w.seq_len, q_len, w.rb * R, R, p.rows_per_group, p.num_heads);
      w.hi = min(w.hi, max(cta_limit, w.lo));
    }
    // Sparse CTAs serve one query token (each has its own indices); dense ones any rows.
    const int t_sparse = Tr::kSparse ? w.group : 0;

    // Q rows into shared memory (zero rows past the last head row). 16-bit KV: cp.async
    // as stored, ahead of the KV tiles; fp8 KV: widened after the first tiles are issued.
    const int row0 = w.rb * R;
    if constexpr (!Tr::kFp8Kv) {
      Tile::load_q(p, w.b, w.group, row0, q_s, tid);
      cp_async_commit();
    }
    // The rows this lane holds in the accumulators: g and g + 8.
    int limit[2];
    bool row_ok[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int lr = row0 + (lane >> 2) + i * 8;
      const int f = w.group * p.rows_per_group + lr;
      row_ok[i] = lr < p.rows_per_group;
      const int t = f / p.num_heads;
      // Query t of q_len sees positions < seq_len - q_len + t + 1 (causal among the request's queries;
      // FIA's sparse_mode 3, j <= i + kv_len - q_len); FIA's rows past q_len see nothing.
      if constexpr (Tr::kSplitRope) limit[i] = fia_mla_row_limit(w.seq_len, q_len, t);
      else limit[i] = Tr::kSparse ? 0x7fffffff : w.seq_len - p.q_len + t + 1;
    }

    const float bmm1 = p.bmm1_scale_ptr ? *p.bmm1_scale_ptr : p.bmm1_scale;
    const float scale_log2 = bmm1 * kLog2e;
    float o[kNBlocks][4];
#pragma unroll
    for (int n = 0; n < kNBlocks; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};

    const int n_tiles = w.hi > w.lo ? (w.hi - w.lo + T - 1) / T : 0;
    // Every first lookup in flight at once (one memory round trip), then the first tiles' copies.
    int entry[Tr::kStages];
#pragma unroll
    for (int s = 0; s < Tr::kStages; ++s) entry[s] = s < n_tiles ? lookup_tile(p, w, t_sparse, w.lo + s * T, warp, lane) : -1;
#pragma unroll
    for (int s = 0; s < Tr::kStages - 1; ++s) {
      if (s < n_tiles) load_tile(p, entry[s], w.lo + s * T, kv_s + s * Tr::kStageBytes, ok_s + s * T, warp, lane);
      cp_async_commit();
    }
    // The entries of the next tile to load: looked up an iteration before its copies.
    int next_entry = entry[Tr::kStages - 1];
    if constexpr (Tr::kFp8Kv) Tile::load_q(p, w.b, w.group, row0, q_s, tid);  // read after the loop's barrier
    for (int it = 0; it < n_tiles; ++it) {
      cp_async_wait<Tr::kStages - 2>();
      __syncthreads();  // tile `it` (and Q) landed; every warp is done with tile it-1
      {
        const int nx = it + Tr::kStages - 1;
        if (nx < n_tiles) {
          const int st = nx % Tr::kStages;
          load_tile(p, next_entry, w.lo + nx * T, kv_s + st * Tr::kStageBytes, ok_s + st * T, warp, lane);
        }
        cp_async_commit();
        if (nx + 1 < n_tiles) next_entry = lookup_tile(p, w, t_sparse, w.lo + (nx + 1) * T, warp, lane);
      }
      const int st = it % Tr::kStages;
      const unsigned char* kt = kv_s + st * Tr::kStageBytes;
      const int* ok = ok_s + st * T;
      const int j0 = w.lo + it * T;

      // S (16 rows x 8 tokens per warp) over 576 dims.
      float s[4];
      Tile::scores(q_s, kt, warp, lane, s);
      {
        const int g = lane >> 2, c = warp * 8 + (lane & 3) * 2;
        s_s[g * Tr::kSStride + c] = s[0];
        s_s[g * Tr::kSStride + c + 1] = s[1];
        s_s[(g + 8) * Tr::kSStride + c] = s[2];
        s_s[(g + 8) * Tr::kSStride + c + 1] = s[3];
      }
      __syncthreads();

      // Online softmax (every warp the same, on all 32 tokens), then P into A fragments.
      u32 pa[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int g = (lane >> 2) + i * 8;
        float v[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = j * 8 + (lane & 3) * 2 + e;
            const int pos = j0 + c;
            const bool vis = row_ok[i] && ok[c] && pos < limit[i];
            v[j * 2 + e] = vis ? s_s[g * Tr::kSStride + c] * scale_log2 : kNegInf;
          }
        }
        float mx = v[0];
#pragma unroll
        for (int e = 1; e < 8; ++e) mx = fmaxf(mx, v[e]);
        mx = quad_max(mx);
        const float m_new = fmaxf(m[i], mx);
        const float ref = safe_ref(m_new);
        const float alpha = fast_exp2(m[i] - ref);
        float sum = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          v[e] = fast_exp2(v[e] - ref);
          sum += v[e];
        }
        l[i] = l[i] * alpha + sum;
        m[i] = m_new;
#pragma unroll
        for (int n = 0; n < kNBlocks; ++n) {
          o[n][i * 2] *= alpha;
          o[n][i * 2 + 1] *= alpha;
        }
        // A fragment of k-step kk2: a0/a1 rows g/g+8 at tokens 16kk2 + (lane&3)*2; a2/a3 at +8.
        pa[0][i] = pack2<MT>(v[0], v[1]);
        pa[0][2 + i] = pack2<MT>(v[2], v[3]);
        pa[1][i] = pack2<MT>(v[4], v[5]);
        pa[1][2 + i] = pack2<MT>(v[6], v[7]);
      }

      // O (16 rows x this warp's 128 dims) += P (16 x 32) . V (32 x 128), V = the tile's first 512 dims.
      Tile::accumulate_pv(pa, kt, warp, lane, o);
    }
    cp_async_wait<0>();
    pdl_launch_dependents();
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = quad_sum(l[i]);

    if (p.num_splits == 1) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int lr = (lane >> 2) + i * 8;
        float acc[kNBlocks * 2];
#pragma unroll
        for (int k = 0; k < kNBlocks; ++k) {
          int d;
          Tile::o_pair(o, k, i, lane, acc[2 * k], acc[2 * k + 1], d);
        }
        Out::template finish_row<kNBlocks * 2, Tile::kPairsPerRun, Tile::kRunStride>(
            p, w.b, w.group, w.rb * R + lr, warp * kDimsPerWarp + (lane & 3) * Tile::kLaneStride, m[i], l[i], acc,
            warp == 0 && (lane & 3) == 0);
      }
      return;
    }
    merge_splits(p, w, o, m, l, flag_s, warp, lane, tid);
  }

  __device__ static void merge_splits(const MlaParams& p, const Work& w, const float (&o)[kNBlocks][4],
                                      const float (&m)[2], const float (&l)[2], unsigned* flag_s, int warp,
                                      int lane, int tid) {
    const long long cta = (long long)w.b * gridDim.y + blockIdx.y;
    float* part = Out::partial(p, cta, w.split);
    // Partial O (unnormalized, relative to m), then m and l per row; an empty split writes m = -inf only.
    const int g = lane >> 2;
    if (m[0] != kNegInf || m[1] != kNegInf) {
#pragma unroll
      for (int k = 0; k < kNBlocks; ++k)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float a, b;
          int d;
          Tile::o_pair(o, k, i, lane, a, b, d);
          *reinterpret_cast<float2*>(part + (g + 8 * i) * DV + warp * kDimsPerWarp + d) = make_float2(a, b);
        }
    }
    if (warp == 0 && (lane & 3) == 0) {
      part[R * DV + g] = m[0];
      part[R * DV + g + 8] = m[1];
      part[R * DV + R + g] = l[0];
      part[R * DV + R + g + 8] = l[1];
    }
    if (p.split_pass == 1) return;  // a combine launch merges them
    if (Out::last_to_arrive(p, cta, flag_s, tid, [] { __syncthreads(); }))
      Out::template merge<8>(p, w.b, w.group, w.rb, cta, tid);
  }
};

}  // namespace attnjit
