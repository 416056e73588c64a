// The Hopper MLA decode kernel (trtllm-gen backend, sm_90a), warp-specialized
// with warpgroup MMA. A CTA holds 64 query rows (head x query token) and walks
// its split of the KV in 64-token tiles of all 576 dims:
//   warpgroup 0, the scorer: gathers each tile's rows with cp.async (pages or
//     sparse indices looked up a tile ahead) into a two-stage ring of
//     128-byte-swizzled stages (Q too, once), each signalled by a "full" mbarrier;
//     computes S = Q K^T (64 x 64 over 576, both operands in shared memory), masks,
//     the online softmax, and hands P (as A fragments) and the rows' rescale
//     factors to the others through shared memory;
//   warpgroups 1 and 2, the accumulators: O[:, 256h .. 256h + 255] += P V with
//     P from registers and V (the first 512 dims of the same tile) read MN-major.
// The scorer computes S of tile k + 1 while the accumulators run P V of tile k, and
// issues tile k + kStages's copies as soon as P V of tile k frees its stage. (384 threads:
// ptxas allots every thread the accumulators' ~160 registers; a fourth warpgroup
// as a separate producer would cap them at 128.)
// Split-KV CTAs merge in the last one (mla_epilogue.cuh).
#pragma once

#include "common/hopper.cuh"
#include "common/wgmma.cuh"
#include "mla/mla_epilogue.cuh"

namespace attnjit {

template <class T_, class OT_, int kPageSize_, bool kSparse_, unsigned kFeatures_, int kTile_>
struct MlaHopperTraits {
  using T = T_;
  using OT = OT_;
  static constexpr int kPageSize = kPageSize_;
  static constexpr bool kSparse = kSparse_;
  static constexpr unsigned kFeatures = kFeatures_;
  static constexpr bool kSplitRope = false;
  // 64-token tiles in two stages, or 32-token tiles in four: the same 144 KB, three
  // tiles in flight instead of one (S = Q K^T then runs as m64n32 wgmmas).
  static constexpr int kRows = mla_const::kHopperRows, kTile = kTile_, kStages = kTile_ == 64 ? 2 : 4;
  static_assert(kTile_ == 32 || kTile_ == 64, "32- or 64-token tiles");
  static constexpr int kThreads = 384, kMinBlocks = 1;
  static constexpr int kQBytes = kRows * mla_const::kHeadDimQk * 2;       // 9 swizzled column blocks
  static constexpr int kStageBytes = kTile * mla_const::kHeadDimQk * 2;
  static constexpr int kTileBytes = kQBytes + kStages * kStageBytes;
  static constexpr int kPBytes = kRows * 64 * 2;  // P: one swizzled 64 x 64 16-bit tile (kTile columns used)
  static constexpr int kAlphaBytes = 128 * 2 * 4;  // two rows' rescale factors per scorer thread
  static constexpr int kTokBytes = kStages * kTile * 4;  // per stage: each row's page entry, -1 empty
  static constexpr int kBarriers = 2 * kStages + 2;
  // 1024: slack to align the swizzled tiles.
  static constexpr int kSmemBytes = 1024 + kTileBytes + kPBytes + kAlphaBytes + kTokBytes + kBarriers * 8 + 16;
  static_assert(!IsFp8<T>::value, "the wgmma MLA kernel reads 16-bit KV");
};

template <class Tr>
struct MlaHopper {
  using T = typename Tr::T;
  using Out = MlaEpilogue<Tr, Tr::kRows>;
  static constexpr int D = mla_const::kHeadDimQk, DV = mla_const::kHeadDimVo, kTile = Tr::kTile;
  static constexpr int kStages = Tr::kStages, kChunks = D / 8;  // 16-byte chunks per 576-dim row

  struct Work {
    int b, group, rb, split;
    int lo, hi;   // the CTA's range positions (dense: sequence positions; sparse: index slots)
    int seq_len, n_tiles;
  };

  struct Smem {
    unsigned char* base;  // 1024-aligned: Q, then the stages
    u32 q, kv;            // shared-space addresses of Q and of stage 0
    unsigned char* pt;    // P: a 64 x 64 swizzled tile (K-major A of P V); last: each scorer thread's m and l
    float2* alpha;        // [128]: the rescale factors of a scorer thread's two rows
    int* tok;             // [kStages][kTile]: each row's page entry (sparse: position), -1 none
    u64* full;            // [kStages]: the scorer's 128 cp.async arrivals + one that publishes tok
    u64* empty;           // [kStages]: the scorer's 4 warps (after S) and the accumulators' 8 (after P V)
    u64* p_full;          // the scorer's 128 threads wrote P (or the final m, l)
    u64* p_empty;         // the accumulators' 256 threads: P V is done with P and alpha
    unsigned* flag;
  };

  __device__ static Smem carve(unsigned char* raw) {
    Smem sm;
    sm.base = raw + ((1024u - (smem_addr(raw) & 1023u)) & 1023u);
    sm.q = smem_addr(sm.base);
    sm.kv = sm.q + Tr::kQBytes;
    unsigned char* c = sm.base + Tr::kTileBytes;
    sm.pt = c;
    sm.alpha = reinterpret_cast<float2*>(c + Tr::kPBytes);
    sm.tok = reinterpret_cast<int*>(c + Tr::kPBytes + Tr::kAlphaBytes);
    sm.full = reinterpret_cast<u64*>(c + Tr::kPBytes + Tr::kAlphaBytes + Tr::kTokBytes);
    sm.empty = sm.full + kStages;
    sm.p_full = sm.empty + kStages;
    sm.p_empty = sm.p_full + 1;
    sm.flag = reinterpret_cast<unsigned*>(sm.p_empty + 1);
    return sm;
  }

  // The page entry of range position j (dense: its page id; sparse: its physical
  // position), or -1 past the range or where nothing is stored.
  __device__ static int lookup(const MlaParams& p, const Work& w, int j) {
    if (j >= w.hi) return -1;
    if constexpr (Tr::kSparse) {
      const int e = ld_global_now(p.indices + w.b * p.idx_stride_b + w.group * p.idx_stride_t + j);
      return e >= 0 && (long long)e < p.num_tokens ? e : -1;
    } else {
      const int pi = j / Tr::kPageSize;
      return pi < p.pages_per_seq ? ld_global_now(p.block_tables + w.b * p.bt_stride_b + pi) : -1;
    }
  }

  // Q's 64 rows (zero past rows_per_group) into the swizzled Q tile.
  __device__ static void load_q(const MlaParams& p, const Work& w, const Smem& sm, int tid) {
    const T* q = static_cast<const T*>(p.q);
    const int cc = tid % 8, r0 = tid / 8;  // as in load_tile: one address per row
    unsigned char* dst = sm.base + r0 * 128 + ((cc ^ (r0 % 8)) << 4);
#pragma unroll
    for (int j = 0; j < Tr::kRows / 16; ++j) {
      const int row = w.rb * Tr::kRows + r0 + 16 * j, f = w.group * p.rows_per_group + row;
      const bool ok = row < p.rows_per_group;
      const T* src = (ok ? q + w.b * p.q_stride_b + (f / p.num_heads) * p.q_stride_t + (f % p.num_heads) * p.q_stride_h : q) + cc * 8;
#pragma unroll
      for (int cb = 0; cb < kChunks / 8; ++cb)
        cp_async_16(dst + j * 16 * 128 + cb * Tr::kRows * 128, src + cb * 64, ok ? 16u : 0u);
    }
  }

  // Tile it's rows into stage it % kStages (the caller waited for the stage to be
  // free). `entry`: lanes < kTile hold the tile's page entries, looked up a load ahead.
  // Each thread's copies arrive on the stage's "full" barrier as they land.
  __device__ static void load_tile(const MlaParams& p, const Work& w, const Smem& sm, int tid, int it, int entry) {
    const unsigned char* kv = static_cast<const unsigned char*>(p.kv);
    const int st = it % kStages, j0 = w.lo + it * kTile;
    int* tok = sm.tok + st * kTile;
    if (tid < kTile) tok[tid] = entry;
    named_barrier_sync(1, 128);  // the entries are visible to the warpgroup
    if (it == 0) load_q(p, w, sm, tid);
    // Thread t copies 16-byte chunk t % 8 of every 128-byte column block of rows
    // t / 8 + 16 j: one address per row, and in the swizzled stage every destination
    // is the thread's base plus a constant (row % 8 is the same for its rows).
    unsigned char* stage = sm.base + Tr::kQBytes + st * Tr::kStageBytes;
    const int cc = tid % 8, r0 = tid / 8;
    unsigned char* dst = stage + r0 * 128 + ((cc ^ (r0 % 8)) << 4);
#pragma unroll
    for (int j = 0; j < kTile / 16; ++j) {
      const int r = r0 + 16 * j, e = tok[r];
      long long page, slot;
      if constexpr (Tr::kSparse) {
        page = e / Tr::kPageSize;
        slot = e % Tr::kPageSize;
      } else {
        page = e;
        slot = (j0 + r) % Tr::kPageSize;
      }
      const unsigned char* src = (e >= 0 ? kv + (page * p.kv_stride_page + slot * p.kv_stride_tok) * 2 : kv) + cc * 16;
      const unsigned bytes = e >= 0 ? 16u : 0u;  // zero rows: V meets P = 0 there, and 0 * garbage could be NaN
#pragma unroll
      for (int cb = 0; cb < kChunks / 8; ++cb) cp_async_16(dst + j * 16 * 128 + cb * kTile * 128, src + cb * 128, bytes);
    }
    cp_async_mbar_arrive(&sm.full[st]);
    if (tid == 0) mbar_arrive(&sm.full[st]);  // release: the entries (plain stores) reach the consumers
  }

  __device__ static void wait_full(const Smem& sm, int it) {
    mbar_wait(&sm.full[it % kStages], (it / kStages) & 1);
    fence_proxy_async_shared();
  }

  // The scorer warpgroup: the loads, S, the softmax and the hand-over of P per tile;
  // then the rows' final max and sum (m, l), through the same hand-over.
  __device__ static void score(const MlaParams& p, const Work& w, const Smem& sm, int tid) {
    const int warp = tid / 32, lane = tid % 32;
    // The first kStages - 1 tiles; `entry` then holds the next tile to load's entries.
    int entry = tid < kTile && w.n_tiles > 0 ? lookup(p, w, w.lo + tid) : -1;
    for (int t = 0; t < kStages - 1 && t < w.n_tiles; ++t) {
      load_tile(p, w, sm, tid, t, entry);
      if (tid < kTile && t + 1 < w.n_tiles) entry = lookup(p, w, w.lo + (t + 1) * kTile + tid);
    }
    int limit[2];  // query token t of the request sees positions < seq_len - q_len + t + 1
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = w.rb * Tr::kRows + warp * 16 + (lane >> 2) + hf * 8;
      const int t = (w.group * p.rows_per_group + row) / p.num_heads;
      limit[hf] = Tr::kSparse ? 0x7fffffff : w.seq_len - p.q_len + t + 1;
    }
    const float scale_log2 = (p.bmm1_scale_ptr ? *p.bmm1_scale_ptr : p.bmm1_scale) * kLog2e;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
    float s[kTile / 2];
    for (int it = 0; it < w.n_tiles; ++it) {
      const int st = it % kStages, j0 = w.lo + it * kTile;
      wait_full(sm, it);
      const u32 sk = sm.kv + st * Tr::kStageBytes;
      wgmma_fence();
#pragma unroll
      for (int k0 = 0; k0 < D; k0 += 16)
        Wgmma<T, kTile>::ss(s, desc_k_major<Tr::kRows>(sm.q, k0), desc_k_major<kTile>(sk, k0), k0 > 0);
      wgmma_commit();
      // Tile it + kStages - 1 into the stage tile it - 1 used, once its P V is done.
      const int nx = it + kStages - 1;
      if (nx < w.n_tiles) {
        mbar_wait(&sm.empty[nx % kStages], ((nx / kStages) & 1) ^ 1);
        load_tile(p, w, sm, tid, nx, entry);
        if (tid < kTile && nx + 1 < w.n_tiles) entry = lookup(p, w, w.lo + (nx + 1) * kTile + tid);
      }
      // Which of this thread's 16 columns hold a key (read before the stage is released).
      unsigned present = 0;
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) present |= (sm.tok[st * kTile + n * 8 + (lane & 3) * 2 + e] >= 0 ? 1u : 0u) << (2 * n + e);
      wgmma_wait<0>();
      wgmma_fence_operands(s);
      __syncwarp();
      if (lane == 0) mbar_arrive(&sm.empty[st]);

      float mx[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int i = 0; i < kTile / 2; ++i) {
        const int hf = (i % 4) / 2, col = (i / 4) * 8 + (lane & 3) * 2 + (i % 2);
        const bool vis = ((present >> ((i / 4) * 2 + (i % 2))) & 1u) && j0 + col < limit[hf];
        s[i] = vis ? s[i] * scale_log2 : kNegInf;
        mx[hf] = fmaxf(mx[hf], s[i]);
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
#pragma unroll
      for (int i = 0; i < kTile / 2; ++i) {
        s[i] = fast_exp2(s[i] - mx[(i % 4) / 2]);
        l[(i % 4) / 2] += s[i];
      }
      // P (bf16/fp16) into the swizzled 64 x 64 tile the accumulators' wgmma reads
      // K-major, once their P V of the tile before is done with it.
      mbar_wait(sm.p_empty, (it & 1) ^ 1);
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = warp * 16 + (lane >> 2) + hf * 8;
          *reinterpret_cast<u32*>(sm.pt + r * 128 + ((n ^ (r % 8)) << 4) + (lane & 3) * 4) =
              pack2<T>(s[n * 4 + hf * 2], s[n * 4 + hf * 2 + 1]);
        }
      sm.alpha[tid] = make_float2(alpha[0], alpha[1]);
      fence_proxy_async_shared();  // P's generic stores, visible to the accumulators' wgmma
      mbar_arrive(sm.p_full);
    }
    mbar_wait(sm.p_empty, (w.n_tiles & 1) ^ 1);
    reinterpret_cast<float4*>(sm.pt)[tid] = make_float4(m[0], m[1], quad_sum(l[0]), quad_sum(l[1]));
    mbar_arrive(sm.p_full);
    asm volatile("cp.async.wait_all;" ::: "memory");  // (every copy landed: its tile was scored)
  }

  // An accumulator warpgroup (half h: V/O dims 256h ..): O += P V per tile, P and V
  // both read by the wgmma from shared memory. Returns the rows' m and l in ml
  // (m0, m1, l0, l1).
  __device__ static void accumulate(const Work& w, const Smem& sm, int h, int tid, float (&o)[128], float4& ml) {
    const int lane = tid % 32;
    const u32 sp = smem_addr(sm.pt);
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    for (int it = 0; it < w.n_tiles; ++it) {
      mbar_wait(sm.p_full, it & 1);
      const float2 alpha = sm.alpha[tid];
      // Once the row maxima settle, alpha is 1 across the warp: skip the rescale.
      if (!__all_sync(0xffffffffu, alpha.x == 1.f && alpha.y == 1.f)) {
#pragma unroll
        for (int i = 0; i < 128; ++i) o[i] *= (i % 4) / 2 ? alpha.y : alpha.x;
      }
      const int st = it % kStages;
      wait_full(sm, it);
      const u32 sv = sm.kv + st * Tr::kStageBytes + h * (DV / 2 / 64) * (kTile * 128);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk)
        Wgmma<T, DV / 2>::ss_mn(o, desc_k_major<Tr::kRows>(sp, kk * 16), desc_mn_major<kTile>(sv, kk * 16), 1);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(o);
      mbar_arrive(sm.p_empty);  // every thread, after its own alpha read
      __syncwarp();
      if (lane == 0) mbar_arrive(&sm.empty[st]);
    }
    mbar_wait(sm.p_full, w.n_tiles & 1);
    ml = reinterpret_cast<const float4*>(sm.pt)[tid];
  }

  __device__ static void run(const MlaParams& p, unsigned char* smem_raw) {
    const Smem sm = carve(smem_raw);
    if (threadIdx.x == 0) {
      for (int st = 0; st < kStages; ++st) {
        mbar_init(&sm.full[st], 128 + 1);
        mbar_init(&sm.empty[st], 4 + 8);
      }
      mbar_init(sm.p_full, 128);
      mbar_init(sm.p_empty, 256);
    }
    __syncthreads();
    pdl_wait_prior_grid();
    Work w;
    w.split = blockIdx.x;
    w.b = blockIdx.z;
    w.group = blockIdx.y / p.row_blocks;
    w.rb = blockIdx.y % p.row_blocks;
    w.seq_len = __ldg(p.seq_lens + w.b);
    const int range = Tr::kSparse ? p.top_k : max(w.seq_len, 0);
    w.lo = w.split * p.tokens_per_split;
    w.hi = min(range, w.lo + p.tokens_per_split);
    w.n_tiles = w.hi > w.lo ? (w.hi - w.lo + kTile - 1) / kTile : 0;

    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    if (wg == 0) {
      score(p, w, sm, tid);
      if (p.num_splits > 1 && (lane & 3) == 0) {  // the rows' m and l into the partial
        const float4 ml = reinterpret_cast<const float4*>(sm.pt)[tid];
        float* part = Out::partial(p, (long long)w.b * gridDim.y + blockIdx.y, w.split);
        const int r = warp * 16 + (lane >> 2);
        part[Tr::kRows * DV + r] = ml.x;
        part[Tr::kRows * DV + r + 8] = ml.y;
        part[Tr::kRows * DV + Tr::kRows + r] = ml.z;
        part[Tr::kRows * DV + Tr::kRows + r + 8] = ml.w;
      }
    } else {
      const int h = wg - 1;
      float o[128];
      float4 ml;
      accumulate(w, sm, h, tid, o, ml);
      pdl_launch_dependents();
      if (p.num_splits == 1) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          float acc[64];
#pragma unroll
          for (int n = 0; n < 32; ++n) {
            acc[2 * n] = o[4 * n + 2 * hf];
            acc[2 * n + 1] = o[4 * n + 2 * hf + 1];
          }
          const int row = w.rb * Tr::kRows + warp * 16 + (lane >> 2) + hf * 8;
          Out::template finish_row<64, 1, 8>(p, w.b, w.group, row, h * (DV / 2) + (lane & 3) * 2, hf ? ml.y : ml.x,
                                             hf ? ml.w : ml.z, acc, h == 0 && (lane & 3) == 0);
        }
        return;
      }
      float* part = Out::partial(p, (long long)w.b * gridDim.y + blockIdx.y, w.split);
#pragma unroll
      for (int n = 0; n < 32; ++n)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = warp * 16 + (lane >> 2) + hf * 8;
          *reinterpret_cast<float2*>(part + r * DV + h * (DV / 2) + n * 8 + (lane & 3) * 2) =
              make_float2(o[4 * n + 2 * hf], o[4 * n + 2 * hf + 1]);
        }
    }
    // One call site for all 384 threads: bar.sync is an aligned barrier.
    if (p.num_splits > 1) finish_splits(p, w, sm, threadIdx.x);
  }

  // Every thread after writing its partials: in the last CTA of the row block, the
  // first 256 merge, 4 threads per row.
  __device__ static void finish_splits(const MlaParams& p, const Work& w, const Smem& sm, int ctid) {
    const long long cta = (long long)w.b * gridDim.y + blockIdx.y;
    // Every thread of the CTA is here (one call site): a plain __syncthreads.
    if (Out::last_to_arrive(p, cta, sm.flag, ctid, [] { __syncthreads(); }))
      Out::template merge<4>(p, w.b, w.group, w.rb, cta, ctid);
  }
};

}  // namespace attnjit
