// Tests of src/ops/fia/fia_plan_antiquant.cpp, the calls it accepts: for every antiquant
// mode of the seed (separate params 0-5 and their mix, the combined param, at Q_S = 1
// and Q_S > 1) the k_dq / v_dq descriptors address, for sample (b, h, pos, d), exactly
// the element the seed's shape puts there; spec.kv_dtype, the packed int4 strides, the
// kernel name and the decode route follow. Refusals: fia_antiquant_refusal_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/fia_antiquant_args.hpp"
#include "ops/fia/fia_decode.hpp"

namespace attnjit::ops {
namespace {

using testing::aq_view;
using testing::kFiaBatch;
using testing::kFiaKvHeads;
using testing::kFiaKvSeq;
using testing::kHd;
using Idx = std::vector<int64_t>;
using SeedIndex = std::function<Idx(int64_t b, int64_t h, int64_t pos, int64_t d)>;

constexpr int64_t B = kFiaBatch, KN = kFiaKvHeads, D = kHd, KS = kFiaKvSeq;

uintptr_t element_addr(const TensorView& t, const Idx& idx) {
  EXPECT_EQ(int(idx.size()), t.rank) << t.shape_string();
  int64_t off = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    EXPECT_LT(idx[i], t.shape[i]) << "index past " << t.shape_string();
    off += idx[i] * t.stride[i];
  }
  return reinterpret_cast<uintptr_t>(t.data) + uintptr_t(off * int64_t(dtype_size(t.dtype)));
}

// The kernel's formula (prefill_params.cuh) from base: paged, `b` is the block id.
uintptr_t formula_addr(const void* base, const PrefillDequant& q, size_t es, int64_t b, int64_t h, int64_t pos,
                       int64_t d, int64_t page) {
  const int64_t p = q.paged ? pos % page : pos;
  return reinterpret_cast<uintptr_t>(base) + uintptr_t((q.sb * b + q.sh * h + q.ss * p + q.sd * d) * int64_t(es));
}

int dq_code(DType t) {
  return t == DType::kFloat32 ? prefill_dq::kFloat32 : t == DType::kFloat16 ? prefill_dq::kFloat16 : prefill_dq::kBFloat16;
}

// Every sample (b, h, pos, d) of q's scale (and offset) is the element idx(b, h, pos, d)
// of the tensors. Paged: b runs over block ids, pos over [0, 2 * page).
void expect_maps(const PrefillDequant& q, const TensorView& scale, const TensorView* offset, const SeedIndex& idx,
                 int64_t s_len, int64_t page, int64_t blocks, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(q.dtype, dq_code(scale.dtype));
  EXPECT_EQ(q.paged, page > 0 ? 1 : 0);
  EXPECT_EQ(q.offset == nullptr, offset == nullptr);
  const size_t es = dtype_size(scale.dtype);
  const Idx bs = page ? Idx{0, 3, blocks - 1} : Idx{0, B - 1};
  const Idx ps = page ? Idx{0, 1, page - 1, page, 2 * page - 1} : Idx{0, 1, s_len - 1};
  for (int64_t b : bs)
    for (int64_t h : {int64_t(0), KN - 1})
      for (int64_t pos : ps)
        for (int64_t d : {int64_t(0), int64_t(1), D - 1}) {
          const Idx i = idx(b, h, page ? pos % page : pos, d);
          EXPECT_EQ(formula_addr(q.scale, q, es, b, h, pos, d, page), element_addr(scale, i))
              << "scale at b " << b << " h " << h << " pos " << pos << " d " << d;
          if (offset)
            EXPECT_EQ(formula_addr(q.offset, q, es, b, h, pos, d, page), element_addr(*offset, i))
                << "offset at b " << b << " h " << h << " pos " << pos << " d " << d;
        }
}

struct ModeCase {
  const char* what;
  int km, vm;
  Idx kshape, vshape;
  SeedIndex kidx, vidx;
  DType kv = DType::kInt8;
  DType q = DType::kBFloat16;
  int page = 0;  // paged KV with blocks of this size
  bool offsets = true;
};

const SeedIndex kChan4 = [](int64_t, int64_t h, int64_t, int64_t d) { return Idx{0, h, 0, d}; };
const SeedIndex kChan3 = [](int64_t, int64_t h, int64_t, int64_t d) { return Idx{0, h, d}; };
const SeedIndex kChanH = [](int64_t, int64_t h, int64_t, int64_t d) { return Idx{0, h * D + d}; };
const SeedIndex kTensor = [](int64_t, int64_t, int64_t, int64_t) { return Idx{0}; };
const SeedIndex kToken = [](int64_t b, int64_t, int64_t pos, int64_t) { return Idx{0, b, pos}; };
const SeedIndex kHead = [](int64_t, int64_t h, int64_t, int64_t) { return Idx{h}; };
const SeedIndex kTokenHead = [](int64_t b, int64_t h, int64_t pos, int64_t) { return Idx{b, h, pos}; };
const SeedIndex kPage = [](int64_t blk, int64_t, int64_t off, int64_t) { return Idx{blk, off}; };
const SeedIndex kPageHead = [](int64_t blk, int64_t h, int64_t off, int64_t) { return Idx{blk, h, off}; };

// The seed's Q_S = 1 table of key_/value_antiquant_mode, each shape it lists.
std::vector<ModeCase> qs1_cases() {
  const DType i4 = DType::kInt32, f16 = DType::kFloat16;
  return {
      {"mode 0 (1, N, 1, D)", 0, 0, {1, KN, 1, D}, {1, KN, 1, D}, kChan4, kChan4},
      {"mode 0 (1, N, D)", 0, 0, {1, KN, D}, {1, KN, D}, kChan3, kChan3},
      {"mode 0 (1, H)", 0, 0, {1, KN * D}, {1, KN * D}, kChanH, kChanH},
      {"mode 0 per tensor (1,)", 0, 0, {1}, {1}, kTensor, kTensor},
      {"mode 0 symmetric", 0, 0, {1, KN, D}, {1, KN, D}, kChan3, kChan3, DType::kInt8, DType::kBFloat16, 0, false},
      {"mode 1 (1, B, S)", 1, 1, {1, B, KS}, {1, B, KS}, kToken, kToken},
      {"mode 1 with S past the key's", 1, 1, {1, B, KS + 44}, {1, B, KS + 44}, kToken, kToken},
      {"mode 2 (N,)", 2, 2, {KN}, {KN}, kHead, kHead},
      {"mode 3 (B, N, S)", 3, 3, {B, KN, KS}, {B, KN, KS}, kTokenHead, kTokenHead},
      {"key 0 + value 1, int8 (fp16 only)", 0, 1, {1, KN, 1, D}, {1, B, KS}, kChan4, kToken, DType::kInt8, f16},
      // Paged (blocks of 128, lengths {384, 5}): modes 1-3 index the logical position.
      {"paged mode 4 (blocknum, block_size)", 4, 4, {8, 128}, {8, 128}, kPage, kPage, DType::kInt8, DType::kBFloat16, 128},
      {"paged mode 5 (blocknum, N, block_size)", 5, 5, {8, KN, 128}, {8, KN, 128}, kPageHead, kPageHead, DType::kInt8,
       DType::kBFloat16, 128},
      {"paged mode 1, S = the longest length", 1, 1, {1, B, 384}, {1, B, 384}, kToken, kToken, DType::kInt8,
       DType::kBFloat16, -128},
      {"paged mode 3", 3, 3, {B, KN, 400}, {B, KN, 400}, kTokenHead, kTokenHead, DType::kInt8, DType::kBFloat16, -128},
      {"paged mode 0", 0, 0, {1, KN, D}, {1, KN, D}, kChan3, kChan3, DType::kInt8, DType::kBFloat16, -128},
      // int4 packed in int32: per channel and the per-token modes.
      {"int4 mode 0", 0, 0, {1, KN, 1, D}, {1, KN, 1, D}, kChan4, kChan4, i4},
      {"int4 mode 0 (1, H)", 0, 0, {1, KN * D}, {1, KN * D}, kChanH, kChanH, i4},
      {"int4 mode 1", 1, 1, {1, B, KS}, {1, B, KS}, kToken, kToken, i4},
      {"int4 mode 3", 3, 3, {B, KN, KS}, {B, KN, KS}, kTokenHead, kTokenHead, i4},
      {"int4 key 0 + value 1 (bf16 allowed)", 0, 1, {1, KN, D}, {1, B, KS}, kChan3, kToken, i4},
  };
}

// Negative page: paged KV, but scales that are not page-managed (descriptor paged = 0).
void run_case(const ModeCase& c, int q_seq) {
  FiaArgs a = testing::separate_kv(q_seq, c.kv, c.km, c.kshape, c.vm, c.vshape, c.offsets, c.q);
  const int page = c.page < 0 ? -c.page : c.page;
  if (page) testing::page_kv(a, page);
  FiaPlan p;
  ASSERT_NO_THROW(p = plan_fia(a, testing::kPlanArch)) << c.what;
  EXPECT_EQ(p.spec.kv_dtype, c.kv) << c.what;
  EXPECT_EQ(p.spec.q_dtype, c.q) << c.what;
  const int64_t s_len = page ? 384 : KS;  // per token: the positions the kernel may read
  const int scale_page = c.page > 0 ? c.page : 0;
  expect_maps(p.params.k_dq, a.key_antiquant_scale, c.offsets ? &a.key_antiquant_offset : nullptr, c.kidx, s_len,
              scale_page, 8, std::string(c.what) + " (key)");
  expect_maps(p.params.v_dq, a.value_antiquant_scale, c.offsets ? &a.value_antiquant_offset : nullptr, c.vidx, s_len,
              scale_page, 8, std::string(c.what) + " (value)");
  EXPECT_EQ(p.params.k_dq.scale, a.key_antiquant_scale.data) << c.what;
  EXPECT_EQ(p.params.v_dq.scale, a.value_antiquant_scale.data) << c.what;
}

TEST(FiaAntiquant, SeparateModesAtQs1AddressTheSeedsElements) {
  for (const ModeCase& c : qs1_cases()) run_case(c, 1);
}

// Q_S > 1: per token only, (B, S) fp32, bf16 in and out, S <= 16.
TEST(FiaAntiquant, SeparateParamsAtQsAbove1ArePerTokenBS) {
  const SeedIndex bs = [](int64_t b, int64_t, int64_t pos, int64_t) { return Idx{b, pos}; };
  for (int qs : {2, 16})
    for (int64_t s : {KS, KS + 7})
      run_case({"Q_S > 1 (B, S)", 1, 1, {B, s}, {B, s}, bs, bs}, qs);
  run_case({"Q_S > 1 symmetric", 1, 1, {B, KS}, {B, KS}, bs, bs, DType::kInt8, DType::kBFloat16, 0, false}, 16);
}

// The combined antiquant_scale: K at index 0 of dim 0, V at index 1. Q_S > 1 ignores
// antiquant_mode (per channel in the layout's shape, or (2,) per tensor); fp16 only.
TEST(FiaAntiquant, CombinedParamAtQsAbove1IsPerChannelByLayout) {
  struct C {
    const char* layout;
    Idx shape;
    std::function<Idx(int64_t kv, int64_t h, int64_t d)> idx;
  };
  const std::vector<C> cases = {
      {"BNSD", {2, KN, 1, D}, [](int64_t kv, int64_t h, int64_t d) { return Idx{kv, h, 0, d}; }},
      {"BSND", {2, KN, D}, [](int64_t kv, int64_t h, int64_t d) { return Idx{kv, h, d}; }},
      {"BSH", {2, KN * D}, [](int64_t kv, int64_t h, int64_t d) { return Idx{kv, h * D + d}; }},
      {"BSND", {2}, [](int64_t kv, int64_t, int64_t) { return Idx{kv}; }},
  };
  for (const C& c : cases)
    for (int mode : {0, 1}) {
      FiaArgs a = testing::combined_kv(64, c.layout, c.shape);
      a.antiquant_mode = mode;  // ignored at Q_S > 1
      FiaPlan p;
      ASSERT_NO_THROW(p = plan_fia(a, testing::kPlanArch)) << c.layout << " " << a.antiquant_scale.shape_string();
      // 64 tokens x group 4 rows per KV head: dequantised first, the pass reading these descriptors.
      ASSERT_TRUE(p.dequant_first.has_value());
      EXPECT_EQ(p.dequant_first->pass.kv_dtype, DType::kInt8);
      for (int64_t kv : {0, 1}) {
        const SeedIndex i = [&](int64_t, int64_t h, int64_t, int64_t d) { return c.idx(kv, h, d); };
        expect_maps(kv ? p.params.v_dq : p.params.k_dq, a.antiquant_scale, &a.antiquant_offset, i, KS, 0, 0,
                    std::string(c.layout) + (kv ? " V " : " K ") + a.antiquant_scale.shape_string());
      }
    }
}

// Q_S = 1: antiquant_mode 0 per channel (query dtype) or (2,), 1 per token (2, B, S) fp32.
TEST(FiaAntiquant, CombinedParamAtQs1FollowsAntiquantMode) {
  for (DType qd : {DType::kFloat16, DType::kBFloat16}) {
    FiaArgs a = testing::combined_kv(1, "BSND", {2, KN, D}, qd);
    a.query.dtype = a.attention_out.dtype = qd;
    FiaPlan p = plan_fia(a, testing::kPlanArch);
    for (int64_t kv : {0, 1})
      expect_maps(kv ? p.params.v_dq : p.params.k_dq, a.antiquant_scale, &a.antiquant_offset,
                  [kv](int64_t, int64_t h, int64_t, int64_t d) { return Idx{kv, h, d}; }, KS, 0, 0, "mode 0");
  }
  FiaArgs t = testing::combined_kv(1, "BNSD", {2, B, KS + 1}, DType::kFloat32);
  t.antiquant_mode = 1;
  FiaPlan p = plan_fia(t, testing::kPlanArch);
  for (int64_t kv : {0, 1})
    expect_maps(kv ? p.params.v_dq : p.params.k_dq, t.antiquant_scale, &t.antiquant_offset,
                [kv](int64_t b, int64_t, int64_t pos, int64_t) { return Idx{kv, b, pos}; }, KS, 0, 0, "mode 1");
  // Symmetric: no offset for either.
  FiaArgs s = testing::combined_kv(1, "BSH", {2}, DType::kFloat16, false);
  p = plan_fia(s, testing::kPlanArch);
  EXPECT_EQ(p.params.k_dq.offset, nullptr);
  EXPECT_EQ(p.params.v_dq.offset, nullptr);
  expect_maps(p.params.v_dq, s.antiquant_scale, nullptr, [](int64_t, int64_t, int64_t, int64_t) { return Idx{1}; }, KS,
              0, 0, "per tensor, V");
}

// The separate params win: a combined param given with them is ignored, even one
// that would be refused on its own.
TEST(FiaAntiquant, SeparateParamsWinOverTheCombinedOnes) {
  FiaArgs a = testing::separate_kv(1, DType::kInt8, 0, {1, KN, D}, 0, {1, KN, D});
  a.antiquant_scale = aq_view(0x5000000, DType::kFloat32, {7, 7});
  a.antiquant_offset = aq_view(0x6000000, DType::kFloat32, {7, 7});
  FiaPlan p = plan_fia(a, testing::kPlanArch);
  EXPECT_EQ(p.params.k_dq.scale, a.key_antiquant_scale.data);
  EXPECT_EQ(p.params.v_dq.offset, a.value_antiquant_offset.data);
  expect_maps(p.params.k_dq, a.key_antiquant_scale, &a.key_antiquant_offset, kChan3, KS, 0, 0, "separate");
}

// int4: the key's last dim (or H) is D / 8 and its strides count int32 words; the head
// dim stays D.
TEST(FiaAntiquant, Int4KeyValueArePackedEightToAWord) {
  for (const char* layout : {"BSND", "BSH", "BNSD"}) {
    FiaArgs a = testing::separate_kv(1, DType::kInt32, 0, {1, KN, D}, 0, {1, KN, D});
    a.input_layout = layout;
    const std::string l = layout;
    auto shaped = [&](int64_t n, int64_t s, int64_t d) -> Idx {
      return l == "BSH" ? Idx{B, s, n * d} : l == "BNSD" ? Idx{B, n, s, d} : Idx{B, s, n, d};
    };
    a.query = aq_view(0x10000, DType::kBFloat16, shaped(8, 1, D));
    a.attention_out = aq_view(0x400000, DType::kBFloat16, shaped(8, 1, D));
    a.key = aq_view(0x100000, DType::kInt32, shaped(KN, KS, D / 8));
    a.value = aq_view(0x200000, DType::kInt32, shaped(KN, KS, D / 8));
    a.softmax_lse_flag = false;
    a.softmax_lse = {};
    FiaPlan p = plan_fia(a, testing::kPlanArch);
    SCOPED_TRACE(layout);
    EXPECT_EQ(p.spec.kv_dtype, DType::kInt32);
    EXPECT_EQ(p.spec.head_dim_qk, D);
    EXPECT_EQ(p.spec.head_dim_vo, D);
    // Token (b, t), head h starts at word b*sb + t*ss + h*sh.
    const int64_t words_h = l == "BNSD" ? KS * D / 8 : D / 8, words_s = l == "BNSD" ? D / 8 : KN * D / 8;
    EXPECT_EQ(p.params.k_stride_h, words_h);
    EXPECT_EQ(p.params.k_stride_s, words_s);
    EXPECT_EQ(p.params.k_stride_b, KN * KS * D / 8);
    EXPECT_EQ(p.params.v_stride_h, words_h);
    EXPECT_EQ(p.params.v_stride_s, words_s);
  }
}

// A shared prefix with per-channel scales: the prefix takes the key's dtype (int4: D / 8).
TEST(FiaAntiquant, SharedPrefixWithPerChannelScales) {
  FiaArgs a = testing::combined_kv(64, "BSND", {2, KN, D});
  a.key_shared_prefix = aq_view(0x900000, DType::kInt8, {1, 48, KN, D});
  a.value_shared_prefix = aq_view(0xa00000, DType::kInt8, {1, 48, KN, D});
  FiaPlan p = plan_fia(a, testing::kPlanArch);
  EXPECT_TRUE(p.spec.has(spec::feature::kSharedPrefix));
  EXPECT_EQ(p.spec.kv_dtype, DType::kInt8);
  EXPECT_EQ(p.params.prefix_seq, 48);

  FiaArgs f = testing::separate_kv(1, DType::kInt32, 0, {1, KN * D}, 0, {1, KN * D});
  f.input_layout = "BSH";
  f.query = aq_view(0x10000, DType::kBFloat16, {B, 1, 8 * D});
  f.attention_out = aq_view(0x400000, DType::kBFloat16, {B, 1, 8 * D});
  f.key = aq_view(0x100000, DType::kInt32, {B, KS, KN * D / 8});
  f.value = aq_view(0x200000, DType::kInt32, {B, KS, KN * D / 8});
  f.key_shared_prefix = aq_view(0x900000, DType::kInt32, {1, 48, KN * D / 8});
  f.value_shared_prefix = aq_view(0xa00000, DType::kInt32, {1, 48, KN * D / 8});
  p = plan_fia(f, testing::kPlanArch);
  EXPECT_EQ(p.params.kp_stride_h, D / 8);  // words
  EXPECT_EQ(p.params.kp_stride_s, KN * D / 8);
  // The prefix in unpacked D is refused, naming it.
  f.key_shared_prefix = aq_view(0x900000, DType::kInt32, {1, 48, KN * D});
  f.value_shared_prefix = aq_view(0xa00000, DType::kInt32, {1, 48, KN * D});
  EXPECT_THROW(plan_fia(f, testing::kPlanArch), Error);
}

// The kernel name carries the K/V dtype (kv<short_dtype_name>) and round-trips; at Q_S = 1
// int8 and int4 with per-token scales take the decode kernel, and prewarm builds that one.
TEST(FiaAntiquant, SpecNameAndDecodeRoute) {
  FiaArgs bf = testing::valid_fia(1);
  bf.softmax_lse_flag = false;
  bf.softmax_lse = {};
  ASSERT_TRUE(plan_fia_decode(plan_fia(bf, testing::kPlanArch), bf, testing::kPlanArch).has_value());
  for (DType kv : {DType::kInt8, DType::kInt32}) {
    FiaArgs a = testing::separate_kv(1, kv, 1, {1, B, KS}, 1, {1, B, KS});
    a.softmax_lse_flag = false;
    a.softmax_lse = {};
    const FiaPlan p = plan_fia(a, testing::kPlanArch);
    const auto d = plan_fia_decode(p, a, testing::kPlanArch);
    ASSERT_TRUE(d.has_value()) << dtype_name(kv);
    const std::string token = kv == DType::kInt8 ? "kvint8" : "kvint32";
    EXPECT_NE(p.spec.name().find(token), std::string::npos) << p.spec.name();
    EXPECT_EQ(spec::KernelSpec::from_name(p.spec.name()), p.spec);
    // Prewarm: shapes only (null data), the same spec as the call.
    FiaArgs s = a;
    for (TensorView* t : {&s.query, &s.key, &s.value, &s.attention_out, &s.key_antiquant_scale, &s.value_antiquant_scale,
                          &s.key_antiquant_offset, &s.value_antiquant_offset})
      t->data = nullptr;
    const spec::KernelSpec w = fia_prewarm_spec(s, testing::kPlanArch);
    EXPECT_EQ(w.name(), d->spec.name());
    EXPECT_NE(w.name().find(token), std::string::npos) << w.name();
  }
  // The combined param in prewarm: V's half of a null tensor stays null. 64 tokens x group
  // 4: dequantised first, so the int8 kernel is the pass and the attention reads 16-bit K/V.
  FiaArgs c = testing::combined_kv(64, "BSND", {2, KN, D});
  for (TensorView* t : {&c.query, &c.key, &c.value, &c.attention_out, &c.antiquant_scale, &c.antiquant_offset})
    t->data = nullptr;
  const std::vector<spec::KernelSpec> specs = fia_prewarm_specs(c, testing::kPlanArch);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_NE(specs[0].name().find("kvint8"), std::string::npos) << specs[0].name();
  EXPECT_NE(specs[0].name().find("dqpass"), std::string::npos) << specs[0].name();
  EXPECT_EQ(specs[1].name().find("kvint8"), std::string::npos) << specs[1].name();
  EXPECT_EQ(fia_prewarm_spec(c, testing::kPlanArch), specs[1]);
}

// int8 K/V whose scales vary by KV head and channel only (per channel, tensor or head, and
// the combined param's mode 0) take the decode kernel at Q_S = 1: kvint8 spec, the scales'
// strides in its Params (K's offset is dropped: softmax ignores a row-wide shift); with an
// LSE they stay on the prefill kernel. int4 per channel takes it too.
TEST(FiaAntiquant, ChannelScalesTakeTheDecodeKernel) {
  const int64_t KN = 2, D = 128;
  struct Case {
    int key_mode, value_mode;
    std::vector<int64_t> kshape, vshape;
    bool decode;
  };
  const Case cases[] = {
      {0, 0, {1, KN, 1, D}, {1, KN, 1, D}, true}, {0, 0, {1, KN, D}, {1, KN, D}, true},
      {0, 0, {1, KN * D}, {1, KN * D}, true},     {0, 0, {1}, {1}, true},
      {2, 2, {KN}, {KN}, true},
  };
  for (const Case& c : cases) {
    FiaArgs a = testing::separate_kv(1, DType::kInt8, c.key_mode, c.kshape, c.value_mode, c.vshape, true,
                                     c.key_mode == 0 && c.value_mode == 1 ? DType::kFloat16 : DType::kBFloat16);
    a.softmax_lse_flag = false;
    a.softmax_lse = {};
    const FiaPlan p = plan_fia(a, testing::kPlanArch);
    const auto d = plan_fia_decode(p, a, testing::kPlanArch);
    ASSERT_EQ(d.has_value(), c.decode) << c.key_mode << "/" << c.value_mode;
    if (!d) continue;
    EXPECT_EQ(d->spec.kv_dtype, DType::kInt8);
    EXPECT_EQ(d->spec.name().rfind("decode.", 0), 0u) << d->spec.name();
    EXPECT_NE(d->spec.name().find("kvint8"), std::string::npos) << d->spec.name();
    EXPECT_EQ(d->params.k_chan, p.params.k_dq.scale);
    EXPECT_EQ(d->params.v_chan, p.params.v_dq.scale);
    EXPECT_EQ(d->params.v_chan_off, p.params.v_dq.offset);
    EXPECT_NE(d->params.v_chan_off, nullptr);
    EXPECT_EQ(d->params.kc_sh, p.params.k_dq.sh);
    EXPECT_EQ(d->params.kc_sd, p.params.k_dq.sd);
    EXPECT_EQ(d->params.vc_sh, p.params.v_dq.sh);
    EXPECT_EQ(d->params.vc_sd, p.params.v_dq.sd);
    EXPECT_EQ(d->params.k_chan_dtype, p.params.k_dq.dtype);
    EXPECT_EQ(d->params.k_scale, 1.0f);
    EXPECT_EQ(d->params.v_scale, 1.0f);
    // With an LSE the raw scores are seen: the prefill kernel serves it.
    FiaArgs l = a;
    l.softmax_lse_flag = true;
    l.softmax_lse = testing::valid_fia(1).softmax_lse;
    EXPECT_FALSE(plan_fia_decode(plan_fia(l, testing::kPlanArch), l, testing::kPlanArch).has_value());
  }
  FiaArgs i4 = testing::separate_kv(1, DType::kInt32, 0, {1, KN, 1, D}, 0, {1, KN, 1, D});
  i4.softmax_lse_flag = false;
  i4.softmax_lse = {};
  const auto d4 = plan_fia_decode(plan_fia(i4, testing::kPlanArch), i4, testing::kPlanArch);
  ASSERT_TRUE(d4.has_value());
  EXPECT_EQ(d4->spec.kv_dtype, DType::kInt32);
  EXPECT_NE(d4->spec.name().find("kvint32"), std::string::npos) << d4->spec.name();
}

// int8 K/V with fp32 per-token scales (modes 1 and 3, and key mode 0 with value mode 1)
// take the decode kernel too: spec features ktokscale / vtokscale, the per-token
// descriptors in tok_* (index 0 K, 1 V), per-channel K still folded through k_chan.
TEST(FiaAntiquant, TokenScalesTakeTheDecodeKernel) {
  const int64_t KN = 2, D = 128, S = 256;
  struct Case {
    int key_mode, value_mode;
    std::vector<int64_t> kshape, vshape;
  };
  const Case cases[] = {{1, 1, {1, 2, S}, {1, 2, S}}, {3, 3, {2, KN, S}, {2, KN, S}}, {0, 1, {1, KN, 1, D}, {1, 2, S}}};
  for (const Case& c : cases) {
    const bool k_tok = c.key_mode != 0;
    FiaArgs a = testing::separate_kv(1, DType::kInt8, c.key_mode, c.kshape, c.value_mode, c.vshape, true,
                                     k_tok ? DType::kBFloat16 : DType::kFloat16);
    a.softmax_lse_flag = false;
    a.softmax_lse = {};
    const FiaPlan p = plan_fia(a, testing::kPlanArch);
    const auto d = plan_fia_decode(p, a, testing::kPlanArch);
    ASSERT_TRUE(d.has_value()) << c.key_mode << "/" << c.value_mode;
    EXPECT_EQ(d->spec.has(spec::feature::kKTokenScale), k_tok);
    EXPECT_TRUE(d->spec.has(spec::feature::kVTokenScale));
    EXPECT_NE(d->spec.name().find("vtokscale"), std::string::npos) << d->spec.name();
    EXPECT_EQ(spec::KernelSpec::from_name(d->spec.name()), d->spec);
    for (int i = 0; i < 2; ++i) {
      const PrefillDequant& q = i ? p.params.v_dq : p.params.k_dq;
      if (i == 0 && !k_tok) {
        EXPECT_EQ(d->params.k_chan, q.scale);
        EXPECT_EQ(d->params.tok_scale[0], nullptr);
        continue;
      }
      EXPECT_EQ(d->params.tok_scale[i], q.scale);
      EXPECT_EQ(d->params.tok_off[i], q.offset);
      EXPECT_NE(d->params.tok_off[i], nullptr);
      EXPECT_EQ(d->params.tok_sb[i], q.sb);
      EXPECT_EQ(d->params.tok_sh[i], q.sh);
      EXPECT_EQ(d->params.tok_ss[i], q.ss);
      EXPECT_EQ(d->params.tok_paged[i], 0);
      EXPECT_NE(q.ss, 0);
    }
    EXPECT_EQ(d->params.v_chan, nullptr);  // V's scales are per token: none at the output
  }
}

// int4 K/V at group <= 4 with a token's KV heads side by side (BSND), or with per-token
// scales, take the decode kernel that serves two KV heads a CTA (spec feature kvpair): one
// copy then reads both heads' rows, a whole 128-byte line at D 128; per-token scales that
// differ by head (mode 3) pair there with both heads' scales a stage (tokhead). Heads apart
// (BNSD) with channel or per-head token scales, group 8, int8 K/V and
// ATTNJIT_DECODE_KV_PAIR=0 keep one head a CTA.
TEST(FiaAntiquant, Int4WithAdjacentHeadsPairsThem) {
  const int64_t KN = kFiaKvHeads, D = kHd, S = kFiaKvSeq;
  auto plan = [](FiaArgs a) {
    a.softmax_lse_flag = false;
    a.softmax_lse = {};
    const auto d = plan_fia_decode(plan_fia(a, testing::kPlanArch), a, testing::kPlanArch);
    EXPECT_TRUE(d.has_value());
    return d ? d->spec : spec::KernelSpec{};
  };
  const FiaArgs per_channel = testing::separate_kv(1, DType::kInt32, 0, {1, KN, 1, D}, 0, {1, KN, 1, D});
  const spec::KernelSpec paired = plan(per_channel);
  EXPECT_TRUE(paired.has(spec::feature::kKvPair)) << paired.name();
  EXPECT_NE(paired.name().find(".kvpair."), std::string::npos) << paired.name();
  EXPECT_EQ(spec::KernelSpec::from_name(paired.name()), paired);
  EXPECT_TRUE(plan(testing::separate_kv(1, DType::kInt32, 1, {1, kFiaBatch, S}, 1, {1, kFiaBatch, S}))
                  .has(spec::feature::kKvPair));  // per token, the same scales for every head
  const spec::KernelSpec by_head =
      plan(testing::separate_kv(1, DType::kInt32, 3, {kFiaBatch, KN, S}, 3, {kFiaBatch, KN, S}));  // per token and head
  EXPECT_TRUE(by_head.has(spec::feature::kKvPair | spec::feature::kTokHead)) << by_head.name();
  EXPECT_NE(by_head.name().find(".kvpair.tokhead."), std::string::npos) << by_head.name();
  EXPECT_EQ(spec::KernelSpec::from_name(by_head.name()), by_head);
  EXPECT_FALSE(paired.has(spec::feature::kTokHead));
  EXPECT_FALSE(plan(testing::separate_kv(1, DType::kInt8, 0, {1, KN, 1, D}, 0, {1, KN, 1, D}))
                   .has(spec::feature::kKvPair));  // int8 rows are whole lines already
  FiaArgs g8 = per_channel;  // 16 query heads over 2
  g8.num_heads = 16;
  g8.query = TensorView::contiguous(g8.query.data, g8.query.dtype, {kFiaBatch, 1, 16, D});
  g8.attention_out = TensorView::contiguous(g8.attention_out.data, g8.attention_out.dtype, {kFiaBatch, 1, 16, D});
  EXPECT_FALSE(plan(g8).has(spec::feature::kKvPair));
  FiaArgs bnsd = per_channel;  // heads apart
  bnsd.input_layout = "BNSD";
  bnsd.query = TensorView::contiguous(bnsd.query.data, bnsd.query.dtype, {kFiaBatch, testing::kFiaHeads, 1, D});
  bnsd.attention_out = TensorView::contiguous(bnsd.attention_out.data, bnsd.attention_out.dtype,
                                              {kFiaBatch, testing::kFiaHeads, 1, D});
  bnsd.key = aq_view(0x100000, DType::kInt32, {kFiaBatch, KN, S, D / 8});
  bnsd.value = aq_view(0x200000, DType::kInt32, {kFiaBatch, KN, S, D / 8});
  EXPECT_FALSE(plan(bnsd).has(spec::feature::kKvPair));
  FiaArgs bnsd_tok = bnsd;  // per-token scales pair heads apart too: the scale work serves both
  bnsd_tok.key_antiquant_mode = bnsd_tok.value_antiquant_mode = 1;
  bnsd_tok.key_antiquant_scale = aq_view(0x1000000, DType::kFloat32, {1, kFiaBatch, S}, true);
  bnsd_tok.value_antiquant_scale = aq_view(0x2000000, DType::kFloat32, {1, kFiaBatch, S}, true);
  bnsd_tok.key_antiquant_offset = aq_view(0x3000000, DType::kFloat32, {1, kFiaBatch, S}, true);
  bnsd_tok.value_antiquant_offset = aq_view(0x4000000, DType::kFloat32, {1, kFiaBatch, S}, true);
  EXPECT_TRUE(plan(bnsd_tok).has(spec::feature::kKvPair));
  FiaArgs bnsd_head = bnsd;  // per token and head, heads apart: nothing shared, unpaired
  bnsd_head.key_antiquant_mode = bnsd_head.value_antiquant_mode = 3;
  bnsd_head.key_antiquant_scale = aq_view(0x1000000, DType::kFloat32, {kFiaBatch, KN, S}, true);
  bnsd_head.value_antiquant_scale = aq_view(0x2000000, DType::kFloat32, {kFiaBatch, KN, S}, true);
  bnsd_head.key_antiquant_offset = aq_view(0x3000000, DType::kFloat32, {kFiaBatch, KN, S}, true);
  bnsd_head.value_antiquant_offset = aq_view(0x4000000, DType::kFloat32, {kFiaBatch, KN, S}, true);
  EXPECT_FALSE(plan(bnsd_head).has(spec::feature::kKvPair));
  setenv("ATTNJIT_DECODE_KV_PAIR", "0", 1);
  EXPECT_FALSE(plan(per_channel).has(spec::feature::kKvPair));
  setenv("ATTNJIT_DECODE_KV_PAIR", "2", 1);  // wherever the kernel can, heads apart too
  EXPECT_TRUE(plan(bnsd).has(spec::feature::kKvPair));
  EXPECT_FALSE(plan(g8).has(spec::feature::kKvPair));
  setenv("ATTNJIT_DECODE_KV_PAIR", "3", 1);
  try {
    plan(per_channel);
    ADD_FAILURE() << "ATTNJIT_DECODE_KV_PAIR=3 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ATTNJIT_DECODE_KV_PAIR"), std::string::npos) << e.what();
  }
  unsetenv("ATTNJIT_DECODE_KV_PAIR");
}

}  // namespace
}  // namespace attnjit::ops
