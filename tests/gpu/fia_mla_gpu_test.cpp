// MLA inside FIA (query_rope/key_rope) on the GPU against the float64 reference
// (tests/common/fia_mla_reference.hpp): random data, paged shuffled blocks, ragged
// lengths, every layout, bf16 and fp16, LSE on and off. Outputs and LSE start as NaN;
// every element is checked (rows past a query length must be exactly 0, LSE +inf).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "attnjit/error.hpp"
#include "attnjit/fia.hpp"
#include "common/env_guard.hpp"
#include "common/attention_reference.hpp"
#include "common/device_tensor.hpp"
#include "common/fia_mla_reference.hpp"
#include "gpu_test_env.hpp"

namespace attnjit {
namespace {

using testing::DeviceTensor;

struct MlaFiaCase {
  DType dtype = DType::kBFloat16;
  std::string layout = "BSND";
  int heads = 32, q_seq = 1, block_size = 128;
  std::vector<int64_t> kv_list = {300, 17};  // actual_seq_lengths_kv (its count is the batch)
  std::vector<int64_t> q_list;               // actual_seq_lengths (empty: Q_S)
  bool lse = true;
  bool rank4 = false;    // key/key_rope as (blocknum, 1, block_size, D)
  double scale = 0.0417;  // ~1/sqrt(576)
  bool capture = false;  // run once, then capture the call in a graph and replay it
};

std::string describe(const MlaFiaCase& c) {
  std::string s = std::string(dtype_name(c.dtype)) + " " + c.layout + " N" + std::to_string(c.heads) + " Q_S" +
                  std::to_string(c.q_seq) + " bs" + std::to_string(c.block_size) + (c.rank4 ? " r4" : "") +
                  (c.lse ? " lse" : "") + (c.capture ? " capture" : "") + " kv[";
  for (auto v : c.kv_list) s += std::to_string(v) + ",";
  s += "] q[";
  for (auto v : c.q_list) s += std::to_string(v) + ",";
  return s + "]";
}

int64_t at(const std::vector<int64_t>& v, size_t b, int64_t d) { return v.empty() ? d : v.size() == 1 ? v[0] : v[b]; }

void run_case(const MlaFiaCase& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(seed);
  const int B = int(c.kv_list.size()), N = c.heads, QS = c.q_seq, bs = c.block_size;
  std::vector<int> ql(B), kl(B);
  int max_blocks = 1;
  for (int b = 0; b < B; ++b) {
    ql[b] = int(at(c.q_list, size_t(b), QS));
    kl[b] = int(c.kv_list[size_t(b)]);
    max_blocks = std::max(max_blocks, (kl[b] + bs - 1) / bs + 1);  // a spare column
  }
  const int num_blocks = B * max_blocks + 2;
  std::vector<int> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int> table(ids.begin(), ids.begin() + size_t(B) * max_blocks);

  const bool bsh = c.layout == "BSH", bnsd = c.layout == "BNSD";
  auto q_shape = [&](int64_t d) -> std::vector<int64_t> {
    if (bsh) return {B, QS, N * d};
    if (bnsd) return {B, N, QS, d};
    return {B, QS, N, d};
  };
  auto qidx = [&](int b, int t, int h, int d, int dim) -> size_t {
    if (bnsd) return ((size_t(b) * N + h) * QS + t) * dim + d;
    return ((size_t(b) * QS + t) * N + h) * dim + d;
  };
  auto kidx = [&](int b, int j, int d, int dim) -> size_t {  // the same for rank 3 and rank 4 (N = 1)
    return (size_t(table[size_t(b) * max_blocks + j / bs]) * bs + j % bs) * dim + d;
  };
  auto kshape = [&](int64_t d) -> std::vector<int64_t> {
    return c.rank4 ? std::vector<int64_t>{num_blocks, 1, bs, d} : std::vector<int64_t>{num_blocks, bs, d};
  };
  auto numel = [](const std::vector<int64_t>& s) {
    size_t n = 1;
    for (auto x : s) n *= size_t(x);
    return n;
  };
  const auto qn = util::quantize(testing::random_values(numel(q_shape(512)), rng), c.dtype);
  const auto qr = util::quantize(testing::random_values(numel(q_shape(64)), rng), c.dtype);
  const auto kn = util::quantize(testing::random_values(numel(kshape(512)), rng), c.dtype);
  const auto kr = util::quantize(testing::random_values(numel(kshape(64)), rng), c.dtype);
  DeviceTensor q(c.dtype, q_shape(512)), q_rope(c.dtype, q_shape(64)), k(c.dtype, kshape(512)),
      k_rope(c.dtype, kshape(64)), out(c.dtype, q_shape(512));
  q.upload_floats(qn);
  q_rope.upload_floats(qr);
  k.upload_floats(kn);
  k_rope.upload_floats(kr);
  out.poison();
  DeviceTensor lse(DType::kFloat32, {B, N, QS, 1});
  lse.poison();
  DeviceTensor bt(DType::kInt32, {B, max_blocks});
  bt.upload_pod(table);
  DeviceTensor mask;
  if (QS > 1) {
    mask.allocate(DType::kUInt8, {2048, 2048});
    mask.upload_pod(std::vector<uint8_t>(size_t(2048) * 2048, 1));  // never read: all-masked content would show
  }

  FiaArgs a;
  a.query = q.view;
  a.query_rope = q_rope.view;
  a.key = k.view;
  a.value = k.view;  // MLA: V is the key's 512-dim latent
  a.key_rope = k_rope.view;
  a.attention_out = out.view;
  a.num_heads = N;
  a.num_key_value_heads = 1;
  a.input_layout = c.layout;
  a.scale = c.scale;
  a.block_table = bt.view;
  a.block_size = bs;
  a.actual_seq_lengths_kv = c.kv_list;
  a.actual_seq_lengths = c.q_list;
  if (QS > 1) {
    a.sparse_mode = 3;
    a.atten_mask = mask.view;
  }
  a.softmax_lse_flag = c.lse;
  if (c.lse) a.softmax_lse = lse.view;

  if (const char* arch = testing::gpu_test_prewarm_arch()) {
    EXPECT_EQ(prewarm_fused_infer_attention_score(a, arch).rfind("mla.", 0), 0u);
    return;
  }
  if (c.capture) {
    // The first call grows the stream's lengths table; the graph must replay the captured lengths.
    CUstream st = driver::stream_create();
    fused_infer_attention_score(a, st);
    driver::stream_sync(st);
    out.poison();
    driver::begin_capture(st);
    fused_infer_attention_score(a, st);
    driver::CapturedGraph graph = driver::end_capture(st);
    const auto untouched = out.download_floats();
    EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float x) { return std::isnan(x); }))
        << "capturing ran the kernel";
    graph.launch(st);
    driver::stream_sync(st);
    driver::stream_destroy(st);
  } else {
    fused_infer_attention_score(a);
  }
  driver::ctx_sync();

  testing::FiaMlaRefProblem m;
  m.batch = B;
  m.num_heads = N;
  m.q_seq = QS;
  m.q_lens = ql;
  m.kv_lens = kl;
  m.scale = c.scale;
  m.q_nope = [&](int b, int t, int h, int d) { return double(qn[qidx(b, t, h, d, 512)]); };
  m.q_rope = [&](int b, int t, int h, int d) { return double(qr[qidx(b, t, h, d, 64)]); };
  m.k_nope = [&](int b, int j, int d) { return double(kn[kidx(b, j, d, 512)]); };
  m.k_rope = [&](int b, int j, int d) { return double(kr[kidx(b, j, d, 64)]); };
  const testing::FiaRefResult ref = testing::reference_fia_mla(m);

  const auto got = out.download_floats();
  const auto got_lse = c.lse ? lse.download_floats() : std::vector<float>{};
  std::vector<double> g, r, gl, rl;
  int bad_pad = 0, bad_inf = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < QS; ++t)
      for (int h = 0; h < N; ++h) {
        const bool real = t < ql[b];
        for (int d = 0; d < 512; ++d) {
          const float x = got[qidx(b, t, h, d, 512)];
          if (!real) {
            bad_pad += x != 0.0f;  // rows past the actual query length: exactly 0 (NaN counts too)
            continue;
          }
          g.push_back(x);
          r.push_back(ref.out[ref.out_index(b, t, h, d, N, 512)]);
        }
        if (c.lse) {
          const float x = got_lse[(size_t(b) * N + h) * QS + t];
          const double want = real ? ref.lse[ref.lse_index(b, t, h, N)] : INFINITY;
          if (std::isinf(want)) {
            bad_inf += !(std::isinf(x) && x > 0);
          } else {
            gl.push_back(x);
            rl.push_back(want);
          }
        }
      }
  EXPECT_EQ(bad_pad, 0) << "output elements past the actual query length not 0";
  EXPECT_EQ(bad_inf, 0) << "LSE of rows that see no key (or lie past their length) not +inf";
  const double tol = 1e-2;
  std::string report;
  const size_t outside = testing::count_outside_bound(g, r, 5 * tol * testing::rms(r), tol, &report);
  EXPECT_EQ(outside, 0u) << outside << " of " << r.size() << " elements outside:\n" << report;
  if (c.lse) {
    std::string lr;
    const size_t lo = testing::count_outside_bound(gl, rl, 2e-3, 1e-3, &lr);
    EXPECT_EQ(lo, 0u) << lo << " of " << rl.size() << " LSE values outside:\n" << lr;
  }
}

std::vector<int64_t> ragged(std::mt19937& rng, int batch, int max_len) {
  std::vector<int64_t> v(static_cast<size_t>(batch), 0);
  for (auto& x : v) x = int64_t(rng() % uint32_t(max_len + 1));
  return v;
}

// Q_S = 1 (sparse 0, no mask): heads, layouts, dtypes, block sizes, LSE on and off.
TEST(FiaMlaGpu, DecodeSweep) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(1201);
  int i = 0;
  for (int heads : {32, 64, 128})
    for (const char* layout : {"BSH", "BSND", "BNSD"})
      for (DType dt : {DType::kBFloat16, DType::kFloat16})
        for (int bs : {16, 128}) {
          MlaFiaCase c;
          c.dtype = dt;
          c.layout = layout;
          c.heads = heads;
          c.block_size = bs;
          c.kv_list = ragged(rng, 3, 700);
          c.kv_list[0] = 1 + int64_t(rng() % 3);  // a very short one
          c.lse = ++i % 2 == 0;
          c.rank4 = std::string(layout) == "BNSD" && i % 3 == 0;
          run_case(c, 100 + uint32_t(i));
        }
}

// Q_S 2, 7 and 16 (MTP, sparse 3: j <= i + kv_len - q_len): ragged query and KV lengths,
// a batch whose KV is shorter than its queries (early rows see nothing: 0 out, LSE +inf).
TEST(FiaMlaGpu, CausalSweep) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(1202);
  int i = 0;
  for (int qs : {2, 7, 16})
    for (int heads : {32, 64, 128})
      for (const char* layout : {"BSH", "BSND", "BNSD"}) {
        MlaFiaCase c;
        c.q_seq = qs;
        c.heads = heads;
        c.layout = layout;
        c.dtype = ++i % 2 ? DType::kBFloat16 : DType::kFloat16;
        c.block_size = i % 3 == 0 ? 16 : 128;
        c.kv_list = ragged(rng, 3, 600);
        c.kv_list[2] = qs / 2;  // fewer keys than queries
        c.q_list = {int64_t(qs), int64_t(1 + rng() % qs), int64_t(qs)};
        c.lse = i % 4 != 1;
        c.rank4 = std::string(layout) == "BNSD" && i % 2 == 0;
        run_case(c, 200 + uint32_t(i));
      }
}

// Long sequences: the KV splits across CTAs (split-KV merge through the runtime's
// scratch), at Q_S 1 and Q_S 16, with an empty batch beside a long one.
TEST(FiaMlaGpu, LongSequencesSplitTheKv) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaFiaCase c;
  c.heads = 32;
  c.kv_list = {20000, 0};
  run_case(c, 301);
  c.heads = 128;
  c.q_seq = 16;
  c.kv_list = {9000, 40};
  c.q_list = {16, 5};
  c.layout = "BNSD";
  c.block_size = 16;
  run_case(c, 302);
  c.q_seq = 1;
  c.q_list = {1, 0};  // Q_S = 1 reads actual_seq_lengths with query_rope: batch 1 is empty
  c.kv_list = {12345, 700};
  c.dtype = DType::kFloat16;
  c.layout = "BSH";
  run_case(c, 303);
}

// The same long cases with the split merge forced either way (ATTNJIT_MLA_COMBINE): the
// last CTA of each row block, or the combine launch (empty batches and rows included).
TEST(FiaMlaGpu, SplitMergeByLastCtaOrCombineLaunchMatch) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  for (const char* mode : {"0", "1"}) {
    testing::EnvGuard combine("ATTNJIT_MLA_COMBINE", mode);
    MlaFiaCase c;
    c.heads = 32;
    c.kv_list = {20000, 0};
    run_case(c, mode[0] == '0' ? 311 : 321);
    c.heads = 128;
    c.q_seq = 1;
    c.q_list = {1, 0};
    c.kv_list = {12345, 700};
    c.dtype = DType::kFloat16;
    c.layout = "BSH";
    run_case(c, mode[0] == '0' ? 312 : 322);
  }
}

// A captured call replays the lengths it was captured with (memsets, not a host copy).
TEST(FiaMlaGpu, CaptureReplaysTheLengths) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  MlaFiaCase c;
  c.capture = true;
  c.q_seq = 2;
  c.kv_list = {513, 64, 1000};
  c.q_list = {2, 1, 2};
  run_case(c, 401);
  c.q_seq = 1;
  c.q_list = {};
  c.kv_list = {3000, 3000};  // uniform: no table
  run_case(c, 402);
}

}  // namespace
}  // namespace attnjit
