// Tests of src/ops/fia/fia_mla.cpp (MLA inside FIA, query_rope/key_rope): the seed's
// rope constraints (each refusal names its argument), layouts -> the mla kernel's
// strides, the lengths table, the causal rule against FIA's sparse_mode 3, and the
// kernel this call prewarms (compiled by NVRTC for sm_80 and sm_90a).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/fia.hpp"
#include "common/expect_error.hpp"
#include "common/fia_mla_reference.hpp"
#include "common/fia_reference.hpp"
#include "common/op_args.hpp"
#include "common/temp_dir.hpp"
#include "ops/fia/fia_mla.hpp"
#include "ops/mla/mla_family.hpp"
#include "render/family.hpp"

namespace attnjit::ops {
namespace {

using testing::fake;
using testing::kPlanArch;
using testing::valid_fia_mla;

FiaMlaPlan plan_of(const FiaArgs& a, const spec::Arch& arch = kPlanArch) {
  const FiaPlan plan = plan_fia(a, arch);
  auto m = plan_fia_mla(plan, a, arch);
  if (!m) throw std::runtime_error("no MLA plan for a rope call");
  return *m;
}

TensorView view(uintptr_t at, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(at), t, shape);
}

TEST(FiaMla, FeatureBitMatchesTheKernels) { EXPECT_EQ(mla_const::kFeatSplitRope, spec::feature::kSplitRope); }

TEST(FiaMla, PlansEveryLayoutQsAndBlockSize) {
  for (const char* layout : {"BSH", "BSND", "BNSD"})
    for (int qs : {1, 2, 7, 16})
      for (int bs : {16, 128})
        for (int heads : {32, 64, 128}) {  // 128 / 1 is past FIA's group limit of 64: MLA's own rule
          SCOPED_TRACE(std::string(layout) + " Q_S " + std::to_string(qs) + " block " + std::to_string(bs) + " N " +
                       std::to_string(heads));
          const FiaArgs a = valid_fia_mla(qs, layout, bs, heads);
          const FiaMlaPlan m = plan_of(a);
          EXPECT_EQ(m.spec.name(), "mla.bf16.hd576x512.g1.p" + std::to_string(bs) + ".nhd.causal.lse.splitrope.sm90a");
          const MlaParams& p = m.params;
          const int64_t N = heads;
          // Element strides of row (b, t, h) in each layout, for the nope and the rope tensors.
          if (std::string(layout) == "BNSD") {
            EXPECT_EQ(p.q_stride_b, N * qs * 512);
            EXPECT_EQ(p.q_stride_h, qs * 512);
            EXPECT_EQ(p.q_stride_t, 512);
            EXPECT_EQ(p.qr_stride_b, N * qs * 64);
            EXPECT_EQ(p.qr_stride_h, qs * 64);
            EXPECT_EQ(p.qr_stride_t, 64);
            EXPECT_EQ(p.o_stride_h, qs * 512);
          } else {
            EXPECT_EQ(p.q_stride_b, qs * N * 512);
            EXPECT_EQ(p.q_stride_t, N * 512);
            EXPECT_EQ(p.q_stride_h, 512);
            EXPECT_EQ(p.qr_stride_b, qs * N * 64);
            EXPECT_EQ(p.qr_stride_t, N * 64);
            EXPECT_EQ(p.qr_stride_h, 64);
            EXPECT_EQ(p.o_stride_t, N * 512);
          }
          EXPECT_EQ(p.kv_stride_page, bs * 512);
          EXPECT_EQ(p.kv_stride_tok, 512);
          EXPECT_EQ(p.kvr_stride_page, bs * 64);
          EXPECT_EQ(p.kvr_stride_tok, 64);
          // FIA's LSE is (B, N, Q_S, 1).
          EXPECT_EQ(p.lse_stride_b, N * qs);
          EXPECT_EQ(p.lse_stride_h, qs);
          EXPECT_EQ(p.lse_stride_t, 1);
          EXPECT_EQ(p.num_heads, N);
          EXPECT_EQ(p.q_len, qs);
          EXPECT_EQ(p.rows_per_group, qs * N);
          EXPECT_EQ(p.row_blocks, (qs * N + 15) / 16);
          EXPECT_EQ(p.pages_per_seq, testing::kFiaMlaBlocks);
          EXPECT_FLOAT_EQ(p.bmm1_scale, 0.0417f);
          EXPECT_FLOAT_EQ(p.bmm2_scale, 1.0f);
          EXPECT_EQ(p.lse_base2, 0);
          EXPECT_EQ(m.shape.range, bs * testing::kFiaMlaBlocks);
          // Ragged KV lengths: the table holds [kv lengths | query lengths].
          EXPECT_EQ(m.lens, (std::vector<int>{bs * testing::kFiaMlaBlocks, 5, qs, qs}));
        }
}

TEST(FiaMla, RankFourKeyAndUniformLengths) {
  FiaArgs a = valid_fia_mla(4, "BNSD", 16);
  a.key = view(0x100000, DType::kBFloat16, {8, 1, 16, 512});
  a.value = a.key;
  a.key_rope = view(0x200000, DType::kBFloat16, {8, 1, 16, 64});
  a.actual_seq_lengths_kv = {40};
  a.softmax_lse_flag = false;
  a.softmax_lse = view(0x500000, DType::kFloat32, {1});
  const FiaMlaPlan m = plan_of(a);
  EXPECT_EQ(m.spec.name(), "mla.bf16.hd576x512.g1.p16.nhd.causal.splitrope.sm90a");
  EXPECT_EQ(m.params.kv_stride_page, 16 * 512);
  EXPECT_EQ(m.params.kv_stride_tok, 512);
  EXPECT_EQ(m.params.kvr_stride_tok, 64);
  EXPECT_TRUE(m.lens.empty());  // one KV length and every query length Q_S: no table
  EXPECT_EQ(m.params.kv_len, 40);
  EXPECT_EQ(m.params.lse, nullptr);
  // Shorter query lengths need the table, even when all equal.
  a.actual_seq_lengths = {3};
  EXPECT_EQ(plan_of(a).lens, (std::vector<int>{40, 40, 3, 3}));
}

TEST(FiaMla, DecodeReadsActualSeqLengths) {
  FiaArgs a = valid_fia_mla(1);
  a.actual_seq_lengths = {1, 0};
  EXPECT_EQ(plan_of(a).lens, (std::vector<int>{512, 5, 1, 0}));
  a.actual_seq_lengths = {2};
  testing::expect_error([&] { plan_of(a); }, ErrorCode::kInvalidArgument, {"actual_seq_lengths", "[0, 1]", "2"});
}

TEST(FiaMla, Fp16AndNoRopeIsNotMla) {
  FiaArgs a = valid_fia_mla(2);
  for (TensorView* t : {&a.query, &a.query_rope, &a.key, &a.key_rope, &a.attention_out}) t->dtype = DType::kFloat16;
  a.value = a.key;
  EXPECT_EQ(plan_of(a).spec.name(), "mla.fp16.hd576x512.g1.p128.nhd.causal.lse.splitrope.sm90a");
  const FiaArgs plain = testing::valid_fia();
  EXPECT_FALSE(fia_uses_mla(plain));
  EXPECT_FALSE(plan_fia_mla(plan_fia(plain, kPlanArch), plain, kPlanArch).has_value());
}

// FIA's visibility (tests/common/fia_reference.hpp, from the text) against the
// kernel's row limits and the CTA cap, over lengths, Q_S and every row block.
TEST(FiaMla, CausalRuleIsSparseModeThree) {
  for (int qs : {1, 2, 7, 16})
    for (int heads : {32, 64, 128})
      for (int ql = 0; ql <= qs; ++ql)
        for (int kv : {0, 1, 5, 16, 33}) {
          testing::FiaRefProblem pr;
          pr.batch = 1;
          pr.q_lens = {ql};
          pr.kv_lens = {kv};
          pr.sparse_mode = qs == 1 ? 0 : 3;  // Q_S = 1: sparse 0 without a mask
          const int rows_per_group = qs * heads;
          for (int row0 = 0; row0 < rows_per_group; row0 += 16) {
            const int cta = fia_mla_cta_limit(kv, ql, row0, 16, rows_per_group, heads);
            for (int r = row0; r < std::min(row0 + 16, rows_per_group); ++r) {
              const int t = r / heads;
              const int lim = fia_mla_row_limit(kv, ql, t);
              EXPECT_LE(lim, std::max(cta, 0));
              for (int j = 0; j < kv; ++j) {
                const bool want = t < ql && testing::fia_visible(pr, 0, t, j);
                ASSERT_EQ(j < lim, want) << "Q_S " << qs << " q_len " << ql << " kv " << kv << " t " << t << " j " << j;
              }
            }
          }
        }
}

// The reference joins the rope dims for the score only: V is the key's 512 dims.
TEST(FiaMla, ReferenceJoinsRopeForTheScoreOnly) {
  testing::FiaMlaRefProblem m;
  m.batch = 1, m.num_heads = 1, m.q_seq = 2;
  m.q_lens = {2};
  m.kv_lens = {3};
  m.scale = 0.5;
  // Only rope dim 0 of the query is set: key j scores 0.5 * (j + 1) * 2 through its rope dim 0.
  m.q_nope = [](int, int, int, int) { return 0.0; };
  m.q_rope = [](int, int, int, int d) { return d == 0 ? 2.0 : 0.0; };
  m.k_nope = [](int, int j, int d) { return d == 7 ? double(10 * j) : 0.0; };
  m.k_rope = [](int, int j, int d) { return d == 0 ? double(j + 1) : 0.0; };
  const testing::FiaRefResult r = testing::reference_fia_mla(m);
  // Row 0 sees keys 0 and 1 (j <= 0 + 3 - 2), row 1 all three.
  for (int t = 0; t < 2; ++t) {
    double den = 0, num = 0;
    for (int j = 0; j <= t + 1; ++j) {
      const double w = std::exp(0.5 * 2.0 * (j + 1));
      den += w;
      num += w * 10 * j;
    }
    EXPECT_NEAR(r.out[r.out_index(0, t, 0, 7, 1, 512)], num / den, 1e-12);
    EXPECT_EQ(r.out[r.out_index(0, t, 0, 8, 1, 512)], 0.0);
    EXPECT_NEAR(r.lse[r.lse_index(0, t, 0, 1)], std::log(den), 1e-12);
  }
}

struct Broken {
  const char* what;
  std::function<void(FiaArgs&)> edit;
  const char* argument;
  ErrorCode code = ErrorCode::kInvalidArgument;
  int q_seq = 2;
  const char* layout = "BSND";
};

const std::vector<Broken>& broken_cases() {
  static const std::vector<Broken> k = {
      {"query_rope alone", [](FiaArgs& a) { a.key_rope = {}; }, "key_rope"},
      {"key_rope alone", [](FiaArgs& a) { a.query_rope = {}; }, "query_rope"},
      {"NZ key",
       [](FiaArgs& a) { a.key = view(0x100000, DType::kBFloat16, {8, 1, 32, 128, 16}), a.value = a.key; }, "key",
       ErrorCode::kUnsupported},
      {"NZ key_rope", [](FiaArgs& a) { a.key_rope = view(0x200000, DType::kBFloat16, {8, 1, 4, 128, 16}); },
       "key_rope", ErrorCode::kUnsupported},
      {"NZ layout", [](FiaArgs& a) { a.input_layout = "BSND_NZ"; }, "input_layout", ErrorCode::kUnsupported},
      {"TND", [](FiaArgs& a) { a.input_layout = "TND"; }, "input_layout"},
      {"BNSD_BSND", [](FiaArgs& a) { a.input_layout = "BNSD_BSND"; }, "input_layout", ErrorCode::kInvalidArgument, 2,
       "BNSD"},
      {"no block table", [](FiaArgs& a) { a.block_table = {}; }, "block_table"},
      {"block size 32", [](FiaArgs& a) { a.block_size = 32; }, "block_size"},
      {"block size 256", [](FiaArgs& a) { a.block_size = 256; }, "block_size"},
      {"pse", [](FiaArgs& a) { a.pse_shift = view(0x700000, DType::kBFloat16, {2, 32, 2, 512}); }, "pse_shift"},
      {"left padding", [](FiaArgs& a) { a.kv_padding_size = view(0x700000, DType::kInt64, {1}); }, "kv_padding_size"},
      {"shared prefix", [](FiaArgs& a) { a.key_shared_prefix = view(0x700000, DType::kBFloat16, {1, 16, 512}); },
       "key_shared_prefix"},
      {"antiquant", [](FiaArgs& a) { a.key_antiquant_scale = view(0x700000, DType::kFloat32, {1}); },
       "key_antiquant_scale", ErrorCode::kUnsupported},
      {"int8 output", [](FiaArgs& a) { a.quant_scale2 = view(0x700000, DType::kFloat32, {1}); }, "quant_scale2",
       ErrorCode::kUnsupported},
      {"reserved key_rope_antiquant_scale",
       [](FiaArgs& a) { a.key_rope_antiquant_scale = view(0x700000, DType::kFloat32, {1}); }, "key_rope_antiquant_scale"},
      {"int8 query_rope", [](FiaArgs& a) { a.query_rope.dtype = DType::kInt8; }, "query_rope", ErrorCode::kUnsupported},
      {"query_rope dtype", [](FiaArgs& a) { a.query_rope.dtype = DType::kFloat16; }, "query_rope"},
      {"key_rope dtype", [](FiaArgs& a) { a.key_rope.dtype = DType::kFloat16; }, "key_rope"},
      {"query_rope D 32", [](FiaArgs& a) { a.query_rope.shape[3] = 32; }, "query_rope"},
      {"query_rope N", [](FiaArgs& a) { a.query_rope = view(0x80000, DType::kBFloat16, {2, 2, 16, 64}); }, "query_rope"},
      {"query_rope S", [](FiaArgs& a) { a.query_rope = view(0x80000, DType::kBFloat16, {2, 3, 32, 64}); }, "query_rope"},
      {"query_rope B", [](FiaArgs& a) { a.query_rope = view(0x80000, DType::kBFloat16, {1, 2, 32, 64}); }, "query_rope"},
      {"query_rope rank", [](FiaArgs& a) { a.query_rope = view(0x80000, DType::kBFloat16, {2, 2, 32 * 64}); },
       "query_rope"},
      {"query_rope BSH H", [](FiaArgs& a) { a.query_rope = view(0x80000, DType::kBFloat16, {2, 2, 64}); }, "query_rope",
       ErrorCode::kInvalidArgument, 2, "BSH"},
      {"query_rope strided", [](FiaArgs& a) { a.query_rope.stride[3] = 2; }, "query_rope"},
      {"key_rope D 128", [](FiaArgs& a) { a.key_rope.shape[2] = 128; }, "key_rope"},
      {"key_rope blocks", [](FiaArgs& a) { a.key_rope.shape[0] = 4; }, "key_rope"},
      {"key_rope block size", [](FiaArgs& a) { a.key_rope.shape[1] = 16; }, "key_rope"},
      {"key_rope rank", [](FiaArgs& a) { a.key_rope = view(0x200000, DType::kBFloat16, {8, 1, 128, 64}); }, "key_rope"},
      {"num_heads 16",
       [](FiaArgs& a) {
         a.num_heads = 16;
         a.query = view(0x10000, DType::kBFloat16, {2, 2, 16, 512});
         a.query_rope = view(0x80000, DType::kBFloat16, {2, 2, 16, 64});
         a.attention_out = view(0x400000, DType::kBFloat16, {2, 2, 16, 512});
         a.softmax_lse = view(0x500000, DType::kFloat32, {2, 16, 2, 1});
       },
       "num_heads"},
      {"query D 256",
       [](FiaArgs& a) {
         a.query = view(0x10000, DType::kBFloat16, {2, 2, 32, 256});
         a.attention_out = a.query;
         a.key = view(0x100000, DType::kBFloat16, {8, 128, 256});
         a.value = a.key;
       },
       "query"},
      {"Q_S 17",
       [](FiaArgs& a) {
         a.query = view(0x10000, DType::kBFloat16, {2, 17, 32, 512});
         a.query_rope = view(0x80000, DType::kBFloat16, {2, 17, 32, 64});
         a.attention_out = a.query;
         a.softmax_lse = view(0x500000, DType::kFloat32, {2, 32, 17, 1});
       },
       "query"},
      {"key N 2",
       [](FiaArgs& a) {
         a.num_key_value_heads = 2;
         a.key = view(0x100000, DType::kBFloat16, {8, 128, 1024});
         a.value = a.key;
         a.key_rope = view(0x200000, DType::kBFloat16, {8, 128, 64});
       },
       "num_key_value_heads"},
      {"num_key_value_heads 0 (= num_heads)", [](FiaArgs& a) { a.num_key_value_heads = 0; }, "key"},
      {"value another tensor", [](FiaArgs& a) { a.value.data = fake(0x900000); }, "value", ErrorCode::kUnsupported},
      {"Q_S 1 sparse 3", [](FiaArgs& a) { a.sparse_mode = 3; }, "sparse_mode", ErrorCode::kInvalidArgument, 1},
      {"Q_S 1 with a mask", [](FiaArgs& a) { a.atten_mask = view(0x600000, DType::kUInt8, {2, 512}); }, "atten_mask",
       ErrorCode::kInvalidArgument, 1},
      {"Q_S 2 sparse 0", [](FiaArgs& a) { a.sparse_mode = 0, a.atten_mask = {}; }, "sparse_mode"},
      {"Q_S 2 sparse 2", [](FiaArgs& a) { a.sparse_mode = 2; }, "sparse_mode"},
      {"Q_S 2 no mask", [](FiaArgs& a) { a.atten_mask = {}; }, "atten_mask"},
      {"Q_S 2 mask not 2048", [](FiaArgs& a) { a.atten_mask = view(0x600000, DType::kUInt8, {2, 512}); },
       "atten_mask"},
      {"no actual_seq_lengths_kv", [](FiaArgs& a) { a.actual_seq_lengths_kv.clear(); }, "actual_seq_lengths_kv"},
      {"kv length past the table", [](FiaArgs& a) { a.actual_seq_lengths_kv = {513}; }, "actual_seq_lengths_kv"},
      {"query length past Q_S", [](FiaArgs& a) { a.actual_seq_lengths = {3}; }, "actual_seq_lengths"},
      {"lse shape", [](FiaArgs& a) { a.softmax_lse = view(0x500000, DType::kFloat32, {2, 2, 32}); }, "softmax_lse"},
      {"out D 576", [](FiaArgs& a) { a.attention_out = view(0x400000, DType::kBFloat16, {2, 2, 32, 576}); },
       "attention_out"},
      {"scale nan", [](FiaArgs& a) { a.scale = std::nan(""); }, "scale"},
      {"trtllm-gen (no mla kernel)", [](FiaArgs& a) { a.backend = Backend::kTrtllmGen; }, "backend",
       ErrorCode::kUnsupported},
  };
  return k;
}

TEST(FiaMla, EachSeedConstraintNamesItsArgument) {
  for (const Broken& c : broken_cases()) {
    SCOPED_TRACE(c.what);
    FiaArgs a = valid_fia_mla(c.q_seq, c.layout);
    ASSERT_NO_THROW(plan_of(a));
    c.edit(a);
    // The backend's refusal reads "backend trtllm-gen: cannot serve ...".
    const std::string needle = std::string(c.argument) == "backend" ? "backend " : std::string("'") + c.argument + "'";
    testing::expect_error([&] { plan_of(a); }, c.code, {needle});
  }
}

TEST(FiaMla, KernelRefusesWhatTheKernelCannotServe) {
  FiaArgs a = valid_fia_mla(2);
  spec::KernelSpec s = plan_of(a).spec;
  std::string why;
  EXPECT_TRUE(mla_can_implement(s, s.arch, &why)) << why;
  s.mask = spec::MaskMode::kCustom;
  EXPECT_FALSE(mla_can_implement(s, s.arch, &why));
  EXPECT_NE(why.find("splitrope"), std::string::npos) << why;
  s.mask = spec::MaskMode::kCausal;
  s.kv_dtype = DType::kFloat8E4M3;
  EXPECT_FALSE(mla_can_implement(s, s.arch, &why));
  // The decode family has no splitrope kernel (bit 8 was unknown to it before the mla family took it).
  spec::KernelSpec d = spec::KernelSpec::from_name("decode.bf16.hd128.g4.p16.nhd.sm90a");
  const render::Family* decode = render::find_family(spec::OpFamily::kDecode);
  ASSERT_NE(decode, nullptr);
  EXPECT_TRUE(decode->can_implement(d, d.arch, &why)) << why;
  d.features = spec::feature::kSplitRope;
  EXPECT_FALSE(decode->can_implement(d, d.arch, &why));
}

// On archs of 99 KB of shared memory the prefill kernel cannot take D 512, the mla one can:
// an MLA call never asks the prefill family (it did, and was refused there).
TEST(FiaMla, PlansWhereThePrefillKernelCannotServeD512) {
  for (const char* arch : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"})
    for (int qs : {1, 16}) {
      SCOPED_TRACE(std::string(arch) + " Q_S " + std::to_string(qs));
      const spec::Arch on = spec::Arch::parse(arch);
      EXPECT_EQ(plan_of(valid_fia_mla(qs, "BSND", 128, 128), on).spec.family, spec::OpFamily::kMla);
    }
}

// The op's prewarm names the mla kernel and NVRTC compiles it, for Q_S 1 and > 1 alike.
TEST(FiaMla, PrewarmCompilesTheMlaKernel) {
  testing::TempDir dir("fia-mla-prewarm");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  Runtime rt(o);
  FiaArgs a = valid_fia_mla(1, "BNSD", 16);
  for (TensorView* t : {&a.query, &a.query_rope, &a.key, &a.key_rope, &a.attention_out, &a.block_table,
                        &a.softmax_lse, &a.atten_mask})
    t->data = nullptr;
  a.value = a.key;
  EXPECT_EQ(prewarm_fused_infer_attention_score(a, "sm_80", &rt), "mla.bf16.hd576x512.g1.p16.nhd.causal.lse.splitrope.sm80");
  a.softmax_lse_flag = false;
  a.softmax_lse = {};
  EXPECT_EQ(prewarm_fused_infer_attention_score(a, "sm_90a", &rt), "mla.bf16.hd576x512.g1.p16.nhd.causal.splitrope.sm90a");
  EXPECT_EQ(rt.stats().compiles, 2);
  // Q_S > 1 (sparse 3) serves the same kernel: nothing new to compile.
  FiaArgs b = valid_fia_mla(16, "BSH", 16);
  for (TensorView* t : {&b.query, &b.query_rope, &b.key, &b.key_rope, &b.attention_out, &b.block_table, &b.atten_mask})
    t->data = nullptr;
  b.value = b.key;
  b.softmax_lse_flag = false;
  b.softmax_lse = {};
  EXPECT_EQ(prewarm_fused_infer_attention_score(b, "sm_90a", &rt), "mla.bf16.hd576x512.g1.p16.nhd.causal.splitrope.sm90a");
  EXPECT_EQ(rt.stats().compiles, 2);
}

}  // namespace
}  // namespace attnjit::ops
