// The Hopper MLA kernel's shared-memory plan and its loads (mla_hopper.cuh holds the two
// math warpgroups' loops): the CTA's work item, the carve of Q, the two KV buffers and
// the row statistics, the page lookups, the KV halves by TMA or cp.async (fp8: into the
// halves' staging areas, widened by mla_hopper_fp8.cuh), the waits, and Q.
#pragma once

#include "common/hopper.cuh"
#include "mla/mla_hopper_fp8.cuh"
#include "mla/mla_params.cuh"

namespace attnjit {

// kTma: dense KV through the TMA tensor map; false: cp.async (sparse rows, or a dense
// call without a map).
template <class Tr, bool kTma>
struct MlaHopperIo {
  using T = typename Tr::T;
  using QT = typename Tr::QT;
  using KVT = typename Tr::KVT;
  using Fp8 = MlaHopperFp8<Tr>;
  static constexpr int D = mla_const::kHeadDimQk, DV = mla_const::kHeadDimVo, kTile = Tr::kTile;
  static constexpr int kBlk = Tr::kBlockBytes, kLeftBlocks = 4;  // warpgroup 0 loads blocks 0..3
  // The KV buffers (two of 64 tokens, or four of 32) and their column blocks.
  static constexpr int kBufs = Tr::kBufs, kKvBlk = Tr::kKvBlockBytes, kKvTileBytes = Tr::kKvTileBytes;
  // Named barriers between the warpgroups (id 0 is __syncthreads'): one side arrives,
  // the other waits; all 256 threads count.
  enum : int {
    kMaxA = 1,    // 0 -> 1: tile A's row maxima and rescale factors are in shared memory
    kMaxB = 2,    // 1 -> 0: tile B's (or A's again, when B is past the end)
    kP0Ready = 3, // 0 -> 1: A's P, rescaled to B's maxima
    kP1Ready = 4, // 1 -> 0: B's P
    kTokBar = 5,  // + warpgroup: within a warpgroup (128 threads): sparse row flags, zeroed tail rows
  };

  struct Work {
    int b, group, rb, split;
    int lo, hi;   // the CTA's range positions (dense: sequence positions; sparse: index slots)
    int seq_len, n_tiles;
    // kFeatFlat: bit i flips buffer i's mbarrier parities (the fills of the CTA's earlier pieces).
    unsigned phase;
  };
  static constexpr bool kFlat = (Tr::kFeatures & mla_const::kFeatFlat) != 0;
  // Buffer buf's parity at its fill `fill` within this piece.
  __device__ static u32 parity(const Work& w, int buf, int fill) {
    return (u32(fill) ^ (kFlat ? w.phase >> buf : 0u)) & 1u;
  }
  // After a piece of n tiles: each buffer's parity moves by the fills it took.
  __device__ static void advance_phase(Work& w) {
#pragma unroll
    for (int buf = 0; buf < kBufs; ++buf)
      if (w.n_tiles > buf) w.phase ^= (u32((w.n_tiles - buf + kBufs - 1) / kBufs) & 1u) << buf;
  }

  struct Smem {
    unsigned char* base;  // 1024-aligned: Q, the KV buffers, A's P
    u32 q, kv, p0, p1;    // shared-space addresses; p1 (B's P) is Q's rope block
    float* m;             // [64] the rows' running max after the latest tile
    float* scale_a;       // [64] tile A's rescale factor
    float* scale_b;       // [64] tile B's
    float* lsum;          // [2][64] the warpgroups' row sums, at the end
    int* tok;             // [buffer][kTile] sparse: whether each row of the buffer's tile holds a key
    u64* full;            // [buffer * 9 + block]: the block's TMA bytes, or its 128 loaders' cp.async (fp8: widening) arrivals
    unsigned* flag;       // [12]: the split flag; [2..11] the flat schedule's walk state
    u64* staged;          // fp8: [buffer * 2 + half]: the half's staged fp8 bytes (TMA)
  };

  // Thread 0 initialises the mbarriers (TMA: one expect_tx arrival; cp.async and fp8's
  // widening: the loading warpgroup's 128 threads); then the CTA waits for the prior grid.
  __device__ static void init_barriers(const Smem& sm) {
    if (threadIdx.x == 0) {
      for (int i = 0; i < kBufs * 9; ++i) mbar_init(&sm.full[i], kTma && !Tr::kFp8Kv ? 1 : 128);
      for (int i = 0; i < kBufs * 2; ++i) mbar_init(&sm.staged[i], kTma ? 1 : 128);
    }
    __syncthreads();
    pdl_wait_prior_grid();
  }

  // The CTA's work item: split x of the KV range, row block y of the query rows, request z.
  __device__ static Work work(const MlaParams& p) {
    Work w;
    w.split = blockIdx.x;
    w.b = blockIdx.z;
    w.group = blockIdx.y / p.row_blocks;
    w.rb = blockIdx.y % p.row_blocks;
    w.seq_len = __ldg(p.seq_lens + w.b);
    const int range = Tr::kSparse ? p.top_k : mla_dense_range(p, w.seq_len, Tr::kPageSize);
    w.lo = w.split * p.tokens_per_split;
    w.hi = mla_split_hi(p, range, w.lo, w.split);
    w.n_tiles = w.hi > w.lo ? (w.hi - w.lo + kTile - 1) / kTile : 0;
    w.phase = 0u;
    return w;
  }

  // Query row `row` of the CTA's group (null past rows_per_group).
  __device__ static const QT* q_row(const MlaParams& p, const Work& w, int row) {
    if (row >= p.rows_per_group) return nullptr;
    const int f = w.group * p.rows_per_group + row;
    return static_cast<const QT*>(p.q) + w.b * p.q_stride_b + (f / p.num_heads) * p.q_stride_t +
           (f % p.num_heads) * p.q_stride_h;
  }

  __device__ static Smem carve(unsigned char* raw) {
    Smem sm;
    sm.base = raw + ((1024u - (smem_addr(raw) & 1023u)) & 1023u);
    sm.q = smem_addr(sm.base);
    sm.kv = sm.q + Tr::kTileBytes;
    sm.p0 = sm.kv + kBufs * kKvTileBytes;
    sm.p1 = sm.q + 8 * kBlk;
    unsigned char* c = sm.base + Tr::kTileBytes + kBufs * kKvTileBytes + kBlk;
    sm.m = reinterpret_cast<float*>(c);
    sm.scale_a = sm.m + 64;
    sm.scale_b = sm.m + 128;
    sm.lsum = sm.m + 192;
    sm.tok = reinterpret_cast<int*>(sm.m + 320);
    sm.full = reinterpret_cast<u64*>(sm.m + 320 + Tr::kTokInts);  // (mla_wide_smem_bytes)
    sm.flag = reinterpret_cast<unsigned*>(sm.full + kBufs * 9);
    sm.staged = reinterpret_cast<u64*>(sm.m + 320 + Tr::kTokInts + kBufs * 18 + 12);
    return sm;
  }

  // The page entry of range position j (dense: its page id; sparse: its physical
  // position), or -1 past the range or where nothing is stored. Branch-free: the load
  // reads a clamped entry and the select decides (nothing writes the tables while
  // this grid runs, so the read may be cached).
  __device__ static int lookup(const MlaParams& p, const Work& w, int j) {
    const int jc = min(j, w.hi - 1);
    if constexpr (Tr::kSparse) {
      const int e = __ldg(p.indices + w.b * p.idx_stride_b + w.group * p.idx_stride_t + jc);
      return j < w.hi && e >= 0 && (long long)e < p.num_tokens ? e : -1;
    } else {
      const int pi = j / Tr::kPageSize;
      const int e = __ldg(p.block_tables + w.b * p.bt_stride_b + max(min(pi, p.pages_per_seq - 1), 0));
      return j < w.hi && pi < p.pages_per_seq ? e : -1;
    }
  }

  // A loader thread's rows of tile it: tid / 8 + 16 j, j < kTile / 16 (TMA: thread 0's rows
  // that start a box, 0 / 16 / 32 / 48 by page size). Looked up an iteration before the copies.
  static constexpr int kBoxRows = Tr::kPageSize < kTile ? Tr::kPageSize : kTile;  // a page's rows of one tile
  __device__ static void lookup_rows(const MlaParams& p, const Work& w, int it, int tid, int (&e)[4]) {
    constexpr int kBoxStep = kBoxRows / 16;  // rows j that start a TMA box
    const bool needed = it < w.n_tiles && (!kTma || tid == 0);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      e[j] = needed && j < kTile / 16 && (!kTma || j % kBoxStep == 0) ? lookup(p, w, w.lo + it * kTile + tid / 8 + 16 * j)
                                                                      : -1;
  }

  // Column blocks [kb0, kb1) of tile it into buffer it % kBufs by TMA, issued by one thread:
  // a box of 64 dims x min(page_size, kTile) slots per block and page. A page past the
  // range (entry -1) is out of the map's bounds: TMA fills it with zeros.
  template <int kb0, int kb1>
  __device__ static void load_half_tma(const MlaParams& p, const Work& w, const Smem& sm, int it, const int (&e)[4]) {
    const int buf = it % kBufs, j0 = w.lo + it * kTile;
    const u32 dst = sm.kv + buf * kKvTileBytes;
#pragma unroll
    for (int cb = kb0; cb < kb1; ++cb) {
      u64* bar = &sm.full[buf * 9 + cb];
      mbar_arrive_expect_tx(bar, kKvBlk);
#pragma unroll
      for (int sub = 0; sub < kTile / kBoxRows; ++sub)
        tma_load_3d(dst + cb * kKvBlk + sub * kBoxRows * 128, &p.kv_map, bar, cb * 64,
                    (j0 + sub * kBoxRows) % Tr::kPageSize, e[sub * kBoxRows / 16], l2_evict_first());
    }
  }

  // One warpgroup's half of tile it (kb0 == 0: blocks 0..3, else 4..8), by TMA or cp.async.
  // `flags` (sparse): publish the rows' flags, then sync the loading warpgroup on named barrier flags_bar.
  template <int kb0, int kb1>
  __device__ static void load(const MlaParams& p, const Work& w, const Smem& sm, int tid, int it, const int (&e)[4],
                              bool flags, int flags_bar) {
    if constexpr (Tr::kFp8Kv && kTma) {
      if (tid == 0)
        Fp8::template load_tma<kb0, kb1>(&p.kv_map, sm.kv + (it % 2) * Tr::kTileBytes,
                                         &sm.staged[(it % 2) * 2 + (kb0 == 0 ? 0 : 1)], w.lo + it * kTile, e);
    } else if constexpr (kTma) {
      if (tid == 0) load_half_tma<kb0, kb1>(p, w, sm, it, e);
    } else {
      load_half<kb0, kb1>(p, w, sm, tid, it, e, flags, flags_bar);
    }
  }

  // TMA: rows past the range end hold whatever their page holds there, and V meets
  // P = 0 in them (0 * NaN is NaN). The warpgroup about to multiply by its half of
  // tile it's V zeroes those rows of it first (only the range's last tile has any).
  __device__ static void zero_tail(const MlaParams& p, const Work& w, const Smem& sm, int it, int half, int tid) {
    const int valid = w.hi - w.lo - it * kTile;
    if (!kTma || Tr::kFp8Kv || valid >= kTile) return;  // (fp8: the widening wrote zeros there)
    unsigned char* v = sm.base + Tr::kTileBytes + (it % kBufs) * kKvTileBytes + half * kLeftBlocks * kKvBlk;
    for (int i = tid; i < (kTile - valid) * kLeftBlocks * 8; i += 128) {  // rows x 4 blocks x 8 chunks
      const int r = valid + i / (kLeftBlocks * 8), cb = (i / 8) % kLeftBlocks;
      *reinterpret_cast<uint4*>(v + cb * kKvBlk + r * 128 + (i % 8) * 16) = make_uint4(0u, 0u, 0u, 0u);
    }
    fence_proxy_async_shared();
    named_barrier_sync(kTokBar + half, 128);
  }

  // Column blocks [kb0, kb1) of tile it into buffer it % kBufs, by one warpgroup: thread t
  // copies chunk t % 8 of rows t / 8 + 16 j, j < kTile / 16 (one address per row; in the swizzled
  // buffer every destination is the thread's base plus a constant). Rows without a
  // key are zero-filled: V meets P = 0 there, and 0 * garbage could be NaN. The copies
  // arrive on the half's mbarrier; `flags`: publish the rows' sparse flags too (then barrier flags_bar).
  template <int kb0, int kb1>
  __device__ static void load_half(const MlaParams& p, const Work& w, const Smem& sm, int tid, int it, const int (&e)[4],
                                   bool flags, int flags_bar) {
    const unsigned char* kv = static_cast<const unsigned char*>(p.kv);
    const int buf = it % kBufs, j0 = w.lo + it * kTile, cc = tid % 8, r0 = tid / 8;
    constexpr int kRowGroups = kTile / 16;
    if constexpr (Tr::kSparse) {
      if (flags) {
        if (cc == 0)
#pragma unroll
          for (int j = 0; j < kRowGroups; ++j) sm.tok[buf * kTile + r0 + 16 * j] = e[j] >= 0;
        named_barrier_sync(flags_bar, 128);
      }
    }
    const unsigned char* src[4];  // the rows' first bytes (the cache's base where nothing is stored)
    unsigned bytes[4];
#pragma unroll
    for (int j = 0; j < kRowGroups; ++j) {
      const int r = r0 + 16 * j;
      long long page, slot;
      if constexpr (Tr::kSparse) {
        page = e[j] / Tr::kPageSize;
        slot = e[j] % Tr::kPageSize;
      } else {
        page = e[j];
        slot = (j0 + r) % Tr::kPageSize;
      }
      src[j] = e[j] >= 0 ? kv + (page * p.kv_stride_page + slot * p.kv_stride_tok) * int(sizeof(KVT)) : kv;
      bytes[j] = e[j] >= 0 ? 16u : 0u;
    }
    if constexpr (Tr::kFp8Kv) {
      // fp8: into the half's dense staging area (64-byte rows a block), two blocks per pass:
      // chunk cc takes 16 bytes of block kb0 + 2 pass + cc / 4. One arrival on the half's
      // staged barrier fires once all of the thread's copies have landed.
      unsigned char* stage = sm.base + Tr::kTileBytes * (1 + buf) + Fp8::template stage_offset<kb0, kb1>();
      const int q = cc % 4;
#pragma unroll
      for (int pass = 0; pass < (kb1 - kb0 + 1) / 2; ++pass) {
        const int cb = kb0 + 2 * pass + cc / 4;
        if (cb < kb1)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            cp_async_16(stage + (cb - kb0) * Fp8::kStageBlk + (r0 + 16 * j) * 64 + q * 16, src[j] + cb * 64 + q * 16,
                        bytes[j]);
      }
      cp_async_mbar_arrive(&sm.staged[buf * 2 + (kb0 == 0 ? 0 : 1)]);
      return;
    }
    unsigned char* dst = sm.base + Tr::kTileBytes + buf * kKvTileBytes + swizzled_offset<64>(r0, cc * 8);
#pragma unroll
    for (int j = 0; j < kRowGroups; ++j) src[j] += cc * 16;
    // Block by block: a thread's arrival on a block's barrier fires once all its copies so
    // far have landed, so the block's S can start while later blocks are in flight.
#pragma unroll
    for (int cb = kb0; cb < kb1; ++cb) {
#pragma unroll
      for (int j = 0; j < kRowGroups; ++j) cp_async_16(dst + j * 16 * 128 + cb * kKvBlk, src[j] + cb * 128, bytes[j]);
      cp_async_mbar_arrive(&sm.full[buf * 9 + cb]);
    }
  }

  // fp8: warpgroup wg widens half [kb0, kb1) of tile it once its bytes have landed (either
  // warpgroup may have loaded it); the wgmma side waits on the blocks' `full` barriers as for
  // 16-bit KV. Each warpgroup widens the tile whose S it computes, both halves, just before
  // that S: the other warpgroup's P V reads the half only after the P hand-over, which follows.
  template <int kb0, int kb1>
  __device__ static void widen(const Work& w, const Smem& sm, int it, int wg, int tid) {
    if constexpr (Tr::kFp8Kv) {
      const int buf = it % 2, half = kb0 == 0 ? 0 : 1;
      Fp8::template widen<kb0, kb1>(sm.base + Tr::kTileBytes * (1 + buf), &sm.staged[buf * 2 + half], parity(w, buf, it / 2),
                                    &sm.full[buf * 9], w.hi - w.lo - it * kTile, tid, kTokBar + wg);
    }
  }

  // TMA writes through the async proxy that wgmma reads with: the mbarrier's completion
  // is all they need. cp.async writes are generic-proxy ones and need the fence.
  __device__ static void wait_block(const Work& w, const Smem& sm, int it, int cb) {
    mbar_wait(&sm.full[(it % kBufs) * 9 + cb], parity(w, it % kBufs, it / kBufs));
    if constexpr (!kTma) fence_proxy_async_shared();
  }

  // Q's 64 rows (zero past rows_per_group) into the swizzled Q tile, by all 256 threads.
  __device__ static void load_q(const MlaParams& p, const Work& w, const Smem& sm, int ctid) {
    const T* q = static_cast<const T*>(p.q);
    const int cc = ctid % 8, r0 = ctid / 8;
    unsigned char* dst = sm.base + swizzled_offset<64>(r0, cc * 8);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = w.rb * Tr::kRows + r0 + 32 * j, f = w.group * p.rows_per_group + row;
      const bool ok = row < p.rows_per_group;
      const T* src = (ok ? q + w.b * p.q_stride_b + (f / p.num_heads) * p.q_stride_t + (f % p.num_heads) * p.q_stride_h : q) + cc * 8;
#pragma unroll
      for (int cb = 0; cb < 9; ++cb) cp_async_16(dst + j * 32 * 128 + cb * kBlk, src + cb * 64, ok ? 16u : 0u);
    }
  }

  // Q's rope block as A fragments of its four k steps (rows warp * 16 + lane / 4 (+ 8)).
  __device__ static void q_rope_regs(const Smem& sm, u32 (&rq)[4][4], int warp, int lane) {
    const unsigned char* blk = sm.base + 8 * kBlk;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int r = warp * 16 + (lane >> 2) + (x % 2) * 8, col = kk * 16 + (x / 2) * 8;
        rq[kk][x] = *reinterpret_cast<const u32*>(blk + swizzled_offset<64>(r, col) + (lane & 3) * 4);
      }
  }
};

}  // namespace attnjit
