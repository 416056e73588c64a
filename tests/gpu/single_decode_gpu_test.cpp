// single_decode_with_kv_cache on the GPU against the float64 reference.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cmath>
#include <random>

#include "attnjit/decode.hpp"
#include "attnjit/error.hpp"
#include "common/attention_reference.hpp"
#include "common/device_tensor.hpp"
#include "gpu_test_env.hpp"

namespace attnjit {
namespace {

using testing::DeviceTensor;

struct SingleCase {
  DType dtype = DType::kBFloat16;
  DType kv_dtype = DType::kBFloat16;
  int head_dim = 128, group = 4, num_kv_heads = 2, kv_len = 1000;
  KvLayout layout = KvLayout::kNHD;
  PosEncodingMode pos = PosEncodingMode::kNone;
  float soft_cap = 0.f;
  int window_left = -1;
  bool lse = false;
  bool tensor_cores = true;
  float q_scale = 1.f, k_scale = 1.f, v_scale = 1.f;
};

std::string describe(const SingleCase& c) {
  return std::string(dtype_name(c.dtype)) + "/" + dtype_name(c.kv_dtype) + " hd" + std::to_string(c.head_dim) +
         " g" + std::to_string(c.group) + " kvh" + std::to_string(c.num_kv_heads) + " L" +
         std::to_string(c.kv_len) + (c.layout == KvLayout::kNHD ? " NHD" : " HND") + " pos" +
         std::to_string(int(c.pos)) + " cap" + std::to_string(c.soft_cap) + " win" +
         std::to_string(c.window_left) + (c.lse ? " lse" : "") + (c.tensor_cores ? "" : " use_tensor_cores=false");
}

// Returns the relative L2 error of out (and checks lse and NaN-free output).
double tolerance(const SingleCase& c) { return dtype_size(c.kv_dtype) == 1 ? 4e-2 : 1e-2; }

// kernel_name, when given, receives the name of the kernel the call ran (the prewarm's answer).
double run_single(const SingleCase& c, uint32_t seed, std::string* kernel_name = nullptr) {
  std::mt19937 rng(seed);
  const int H = c.num_kv_heads * c.group, D = c.head_dim, L = c.kv_len, KH = c.num_kv_heads;
  const bool nhd = c.layout == KvLayout::kNHD;
  const bool fp8 = dtype_size(c.kv_dtype) == 1;
  auto qv = util::quantize(testing::random_values(size_t(H) * D, rng), c.dtype);
  auto kv = util::quantize(testing::random_values(size_t(L) * KH * D, rng, fp8 ? 2.f : 1.f), c.kv_dtype);
  auto vv = util::quantize(testing::random_values(size_t(L) * KH * D, rng, fp8 ? 2.f : 1.f), c.kv_dtype);

  DeviceTensor q(c.dtype, {H, D}), out(c.dtype, {H, D}), lse(DType::kFloat32, {H});
  std::vector<int64_t> kshape = nhd ? std::vector<int64_t>{L, KH, D} : std::vector<int64_t>{KH, L, D};
  DeviceTensor k(c.kv_dtype, kshape), v(c.kv_dtype, kshape);
  q.upload_floats(qv);
  k.upload_floats(kv);
  v.upload_floats(vv);
  out.poison();
  lse.poison();

  SingleDecodeOptions o;
  o.kv_layout = c.layout;
  o.pos_encoding_mode = c.pos;
  o.logits_soft_cap = c.soft_cap;
  o.window_left = c.window_left;
  o.k_scale = c.k_scale;
  o.v_scale = c.v_scale;
  o.q_scale = c.q_scale;
  o.use_tensor_cores = c.tensor_cores;
  if (const char* arch = testing::gpu_test_prewarm_arch()) {
    const std::string name =
        prewarm_single_decode_with_kv_cache(q.view, k.view, v.view, out.view, o, c.lse ? &lse.view : nullptr, arch);
    if (kernel_name) *kernel_name = name;
    return 0.0;
  }
  single_decode_with_kv_cache(q.view, k.view, v.view, out.view, o, nullptr, c.lse ? &lse.view : nullptr);
  driver::ctx_sync();
  if (kernel_name)  // loaded already: names it, compiles nothing
    *kernel_name = prewarm_single_decode_with_kv_cache(q.view, k.view, v.view, out.view, o, c.lse ? &lse.view : nullptr);

  testing::RefProblem pr;
  pr.batch = 1;
  pr.num_kv_heads = KH;
  pr.group = c.group;
  pr.head_dim = D;
  pr.seq_lens = {L};
  pr.q_lens = {1};
  auto kidx = [&](int j, int h, int d) { return nhd ? (size_t(j) * KH + h) * D + d : (size_t(h) * L + j) * D + d; };
  pr.q = [&](int, int, int h, int d) { return double(qv[size_t(h) * D + d]); };
  pr.k = [&](int, int j, int h, int d) { return double(kv[kidx(j, h, d)]); };
  pr.v = [&](int, int j, int h, int d) { return double(vv[kidx(j, h, d)]); };
  pr.sm_scale = 1.0 / std::sqrt(double(D));
  pr.k_scale = c.k_scale;
  pr.v_scale = c.v_scale;
  pr.q_scale = c.q_scale;
  pr.soft_cap = c.soft_cap;
  pr.window_left = c.window_left;
  pr.pos = c.pos == PosEncodingMode::kRopeLlama ? testing::RefProblem::kRope
           : c.pos == PosEncodingMode::kAlibi   ? testing::RefProblem::kAlibi
                                                : testing::RefProblem::kNone;
  auto ref = testing::reference_decode(pr);

  auto got = out.download_floats();
  std::vector<double> gotd(got.begin(), got.end());
  for (size_t i = 0; i < got.size(); ++i)
    if (std::isnan(got[i])) {
      ADD_FAILURE() << describe(c) << ": output element " << i << " is NaN (unwritten or bad math)";
      return 1e9;
    }
  if (c.lse) {
    auto l = lse.download_floats();
    for (int h = 0; h < H; ++h)
      EXPECT_NEAR(l[h], ref.lse[h], 2e-2 * std::max(1.0, std::fabs(ref.lse[h]))) << describe(c) << " lse head " << h;
  }
  // Each element too, not only the L2 of the whole output.
  const double tol = tolerance(c);
  std::string report;
  const size_t outside = testing::count_outside_bound(gotd, ref.out, 5 * tol * testing::rms(ref.out), tol, &report);
  EXPECT_EQ(outside, 0u) << describe(c) << ": " << outside << " of " << gotd.size()
                         << " elements outside the bound:\n" << report;
  return testing::rel_l2(gotd, ref.out);
}

TEST(SingleDecodeGpu, ProofKernelFp16AndBf16) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    SingleCase c;
    c.dtype = c.kv_dtype = dt;
    c.kv_len = 4096;
    c.num_kv_heads = 8;
    double err = run_single(c, 1);
    EXPECT_LE(err, 1e-2) << describe(c);
  }
}

// A single request is batch 1: bf16 / fp16 hd128 past 4096 visible tokens takes batch 1's kernel
// of 32-token tiles (ops::decode_batch1_takes_tile32), with RoPE, ALiBi, soft caps, windows, LSE,
// NHD and HND; lengths that end inside a tile; up to 128K; head_dim 384 and 512 (split-D).
// Short sequences, a short window, fp8 K/V and head_dim 64 keep their kernels.
TEST(SingleDecodeGpu, LongSequencesTakeThirtyTwoTokenTiles) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  SingleCase b;
  b.num_kv_heads = 8;
  std::vector<SingleCase> cases;
  SingleCase c = b;
  c.kv_len = 4096 + 33;
  cases.push_back(c);
  c = b;
  c.kv_len = 33000 + 7;
  c.dtype = c.kv_dtype = DType::kFloat16;
  c.layout = KvLayout::kHND;
  c.pos = PosEncodingMode::kRopeLlama;
  c.lse = true;
  cases.push_back(c);
  c = b;
  c.kv_len = 20000 + 1;
  c.pos = PosEncodingMode::kAlibi;
  c.soft_cap = 20.f;
  c.window_left = 8191;
  c.group = 8;
  cases.push_back(c);
  c = b;
  c.kv_len = 131072 - 100;
  c.num_kv_heads = 2;
  c.lse = true;
  cases.push_back(c);
  c = b;  // split-D: three 32-token stages, one CTA an SM
  c.head_dim = 512;
  c.kv_len = 33000 + 5;
  c.pos = PosEncodingMode::kRopeLlama;
  c.layout = KvLayout::kHND;
  cases.push_back(c);
  c = b;
  c.head_dim = 384;
  c.group = 16;
  c.num_kv_heads = 2;
  c.kv_len = 9000 + 9;
  c.lse = true;
  c.soft_cap = 30.f;
  cases.push_back(c);
  int n = 0;
  for (const auto& x : cases) {
    std::string name;
    EXPECT_LE(run_single(x, 7000 + n++, &name), tolerance(x)) << describe(x);
    EXPECT_NE(name.find(".tile32"), std::string::npos) << describe(x) << " ran " << name;
  }
  std::vector<SingleCase> others;
  c = b;
  c.kv_len = 4096;
  others.push_back(c);
  c = b;
  c.kv_len = 32768;
  c.window_left = 1023;
  others.push_back(c);
  c = b;
  c.kv_len = 32768;
  c.kv_dtype = DType::kFloat8E4M3;
  others.push_back(c);
  c = b;
  c.kv_len = 32768;
  c.head_dim = 64;
  others.push_back(c);
  for (const auto& x : others) {
    std::string name;
    EXPECT_LE(run_single(x, 7000 + n++, &name), tolerance(x)) << describe(x);
    EXPECT_EQ(name.find(".tile32"), std::string::npos) << describe(x) << " ran " << name;
  }
}

TEST(SingleDecodeGpu, RandomizedSweep) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(12345);
  const DType dts[] = {DType::kFloat16, DType::kBFloat16};
  const int hds[] = {64, 128, 256};
  const int groups[] = {1, 4, 8};
  const int lens[] = {1, 7, 4096, 100000};
  int n = 0;
  for (int hd : hds)
    for (int g : groups)
      for (int len : lens) {
        SingleCase c;
        c.dtype = dts[rng() % 2];
        int kvsel = rng() % 3;
        c.kv_dtype = kvsel == 0 ? c.dtype : kvsel == 1 ? DType::kFloat8E4M3 : DType::kFloat8E5M2;
        c.head_dim = hd;
        c.group = g;
        c.kv_len = len;
        c.num_kv_heads = len >= 100000 ? 1 : 2;
        c.layout = rng() % 2 ? KvLayout::kNHD : KvLayout::kHND;
        if (dtype_size(c.kv_dtype) == 1) {
          c.k_scale = 0.5f;
          c.v_scale = 1.5f;
        }
        double err = run_single(c, 100 + n++);
        EXPECT_LE(err, tolerance(c)) << describe(c);
      }
}

TEST(SingleDecodeGpu, Features) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<SingleCase> cases;
  for (int len : {7, 4096, 100000})
    for (DType kvd : {DType::kBFloat16, DType::kFloat8E4M3}) {
      SingleCase base;
      base.kv_len = len;
      base.kv_dtype = kvd;
      base.num_kv_heads = len >= 100000 ? 1 : 2;
      SingleCase c = base;
      c.pos = PosEncodingMode::kRopeLlama;
      cases.push_back(c);
      c = base;
      c.pos = PosEncodingMode::kAlibi;
      c.lse = true;
      cases.push_back(c);
      c = base;
      c.soft_cap = 30.f;
      c.lse = true;
      cases.push_back(c);
      c = base;
      c.window_left = std::max(0, len / 3);
      cases.push_back(c);
      c = base;
      c.window_left = len * 2;  // longer than the sequence
      c.soft_cap = 5.f;
      c.pos = PosEncodingMode::kRopeLlama;
      c.lse = true;
      c.layout = KvLayout::kHND;
      cases.push_back(c);
    }
  {
    SingleCase c;  // ALiBi after the soft cap, with q/k/v scales (fp8 KV)
    c.kv_len = 3000;
    c.kv_dtype = DType::kFloat8E4M3;
    c.pos = PosEncodingMode::kAlibi;
    c.soft_cap = 20.f;
    c.lse = true;
    c.q_scale = 0.5f;
    c.k_scale = 2.0f;
    c.v_scale = 0.75f;
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_single(c, 900 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// FlashInfer's default use_tensor_cores = false (the same tensor-core kernel here)
// across head dims, groups 1-8, lengths, layouts, RoPE and soft cap.
TEST(SingleDecodeGpu, FlashInferDefaultAcrossGroupsAndLengths) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(2468);
  int n = 0;
  for (int hd : {64, 128, 256})
    for (int g : {1, 4, 8})
      for (int len : {7, 4096, 100000}) {
        SingleCase c;
        c.tensor_cores = false;
        c.dtype = rng() % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.kv_dtype = rng() % 3 == 0 ? DType::kFloat8E4M3 : c.dtype;
        c.head_dim = hd;
        c.group = g;
        c.kv_len = len;
        c.num_kv_heads = len >= 100000 ? 1 : 2;
        c.layout = rng() % 2 ? KvLayout::kNHD : KvLayout::kHND;
        c.lse = true;
        if (n % 3 == 1) c.pos = PosEncodingMode::kRopeLlama;
        if (n % 3 == 2) c.soft_cap = 15.f;
        double err = run_single(c, 4000 + n++);
        EXPECT_LE(err, tolerance(c)) << describe(c);
      }
}

// Issue 9: window_left on sequences much longer than the window (splits planned
// over window_left + 1 tokens, starting at the first visible tile).
TEST(SingleDecodeGpu, WindowOnLongSequences) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<SingleCase> cases;
  for (int len : {5000, 131072 + 3})
    for (int window_left : {0, 31, 1000, 4095}) {
      SingleCase c;
      c.kv_len = len;
      c.window_left = window_left;
      c.num_kv_heads = len > 100000 ? 1 : 2;
      c.lse = true;
      if (window_left == 1000) c.pos = PosEncodingMode::kRopeLlama;
      if (window_left == 31) c.layout = KvLayout::kHND;
      if (window_left == 4095 && len == 5000) c.kv_dtype = DType::kFloat8E4M3;
      cases.push_back(c);
    }
  int n = 0;
  for (auto& c : cases) {
    double err = run_single(c, 13000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// Issue 9 item 1: window_left costs what the window holds. The kernel starts at
// the first visible tile and the splits are planned over window_left + 1 keys, so
// a start that is not a whole tile (kv_len - 1 - window_left not a multiple of 16
// or 32) hands the last split up to a tile more: these lengths cover both, with
// positions kept logical for RoPE and ALiBi, a 32K window on 128K, a window as wide
// as the sequence and wider, one KV head and two, both tile paths, head_dim 512.
TEST(SingleDecodeGpu, WindowCostsOnlyTheWindow) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<SingleCase> cases;
  auto add = [&](int len, int window_left, auto&& edit) {
    SingleCase c;
    c.kv_len = len;
    c.window_left = window_left;
    c.num_kv_heads = 1;
    c.lse = true;
    edit(c);
    cases.push_back(c);
  };
  auto none = [](SingleCase&) {};
  add(131072, 4095, none);                                                       // whole tiles: plain L4096's plan
  add(131072 + 5, 4095, none);                                                   // the last split takes 5 keys more
  add(131072 + 21, 4095, [](SingleCase& c) { c.kv_dtype = DType::kFloat8E4M3; });  // 32-token tiles
  add(131072 + 1, 32767, [](SingleCase& c) { c.num_kv_heads = 2; });            // 32K window on 128K
  add(65536 + 9, 1000, [](SingleCase& c) { c.pos = PosEncodingMode::kRopeLlama; });
  add(65536 + 9, 1000, [](SingleCase& c) {
    c.pos = PosEncodingMode::kAlibi;
    c.layout = KvLayout::kHND;
  });
  add(40000 + 3, 4095, [](SingleCase& c) { c.tensor_cores = false; });
  add(4096, 4095, none);   // the window is the whole sequence
  add(4096, 4096, none);   // and wider
  add(3000, 1 << 20, [](SingleCase& c) { c.soft_cap = 10.f; });
  add(50000 + 11, 2047, [](SingleCase& c) {  // split-D past head_dim 256
    c.head_dim = 512;
    c.group = 16;
  });
  int n = 0;
  for (auto& c : cases) {
    double err = run_single(c, 19000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// Issue 9 item 4: head_dim 512 (and 384) in single_decode: the split-D kernel over
// contiguous KV with every single_decode feature it keeps (RoPE, which widens fp8
// and rotates K in shared memory between two extra barriers; ALiBi; soft cap;
// windows; LSE), short and long (many splits) sequences, groups up to 16.
TEST(SingleDecodeGpu, HeadDim512) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<SingleCase> cases;
  for (int len : {7, 4096, 100000})
    for (DType kvd : {DType::kBFloat16, DType::kFloat8E4M3}) {
      SingleCase base;
      base.head_dim = 512;
      base.kv_len = len;
      base.kv_dtype = kvd;
      base.num_kv_heads = len >= 100000 ? 1 : 2;
      if (kvd == DType::kFloat8E4M3) {
        base.k_scale = 0.5f;
        base.v_scale = 1.5f;
      }
      SingleCase c = base;
      c.lse = true;
      cases.push_back(c);
      c = base;
      c.pos = PosEncodingMode::kRopeLlama;
      c.layout = KvLayout::kHND;
      cases.push_back(c);
      c = base;
      c.pos = PosEncodingMode::kAlibi;
      c.soft_cap = 20.f;
      c.lse = true;
      cases.push_back(c);
      c = base;
      c.window_left = std::max(0, len / 3);
      c.group = 16;
      c.num_kv_heads = 1;
      cases.push_back(c);
    }
  {
    SingleCase c;  // e5m2 KV with RoPE: the widened path
    c.head_dim = 512;
    c.dtype = DType::kFloat16;
    c.kv_dtype = DType::kFloat8E5M2;
    c.pos = PosEncodingMode::kRopeLlama;
    c.kv_len = 3000;
    c.lse = true;
    cases.push_back(c);
  }
  {
    SingleCase c;  // head_dim 384, fp16, HND
    c.head_dim = 384;
    c.dtype = c.kv_dtype = DType::kFloat16;
    c.layout = KvLayout::kHND;
    c.kv_len = 20000;
    c.group = 8;
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_single(c, 17000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

}  // namespace
}  // namespace attnjit
