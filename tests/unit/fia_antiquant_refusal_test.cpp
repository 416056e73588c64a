// Tests of src/ops/fia/fia_plan_antiquant.cpp, the calls it refuses: every illegal
// antiquant combination of the seed's constraints (and of the rules where the
// seed is silent) is Error(kInvalidArgument) naming the argument; legal ones this
// op does not serve (the quantised MLA path, per-token scales of a shared prefix) are
// kUnsupported. Each case starts from a call fia_antiquant_test.cpp shows is accepted.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/fia_antiquant_args.hpp"

namespace attnjit::ops {
namespace {

using testing::aq_view;
using testing::combined_kv;
using testing::kFiaBatch;
using testing::kFiaKvHeads;
using testing::kFiaKvSeq;
using testing::kHd;
using testing::separate_kv;
using Idx = std::vector<int64_t>;

constexpr int64_t B = kFiaBatch, KN = kFiaKvHeads, D = kHd, KS = kFiaKvSeq;
constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument, kUnsupported = ErrorCode::kUnsupported;
const DType i8 = DType::kInt8, i4 = DType::kInt32, f32 = DType::kFloat32, f16 = DType::kFloat16,
            bf16 = DType::kBFloat16;

// The accepted starting points.
FiaArgs chan_qs1(DType kv = i8) { return separate_kv(1, kv, 0, {1, KN, 1, D}, 0, {1, KN, 1, D}); }
FiaArgs token_qs1(DType kv = i8) { return separate_kv(1, kv, 1, {1, B, KS}, 1, {1, B, KS}); }
FiaArgs token_qs16() { return separate_kv(16, i8, 1, {B, KS}, 1, {B, KS}); }
FiaArgs paged_mode(int mode) {
  FiaArgs a = separate_kv(1, i8, mode, mode == 4 ? Idx{8, 128} : Idx{8, KN, 128}, mode,
                          mode == 4 ? Idx{8, 128} : Idx{8, KN, 128});
  testing::page_kv(a, 128);
  return a;
}
void prefix(FiaArgs& a) {
  const int64_t last = a.key.dtype == i4 ? D / 8 : D;
  a.key_shared_prefix = aq_view(0x900000, a.key.dtype, {1, 48, KN, last});
  a.value_shared_prefix = aq_view(0xa00000, a.key.dtype, {1, 48, KN, last});
}
void int8_out(FiaArgs& a) {
  a.attention_out.dtype = i8;
  a.quant_scale2 = aq_view(0x800300, f32, {1});
}
void no_lse(FiaArgs& a) { a.softmax_lse_flag = false, a.softmax_lse = {}; }

struct Case {
  const char* what;
  std::function<FiaArgs()> make;
  const char* argument;
  ErrorCode code = kInvalid;
};

template <class F>
std::function<FiaArgs()> from(FiaArgs (*base)(), F edit) {
  return [base, edit] {
    FiaArgs a = base();
    edit(a);
    return a;
  };
}
FiaArgs chan8() { return chan_qs1(i8); }
FiaArgs chan4() { return chan_qs1(i4); }
FiaArgs tok8() { return token_qs1(i8); }
FiaArgs tok4() { return token_qs1(i4); }
FiaArgs comb64() { return combined_kv(64, "BSND", {2, KN, D}); }
FiaArgs comb1() { return combined_kv(1, "BSND", {2, KN, D}); }
FiaArgs mode4() { return paged_mode(4); }
FiaArgs mode5() { return paged_mode(5); }
FiaArgs bf16_kv() { return testing::valid_fia(1); }

const std::vector<Case>& cases() {
  static const std::vector<Case> k = {
      // Which tensors go with which K/V.
      {"int8 K/V without scales", from(bf16_kv, [](FiaArgs& a) { testing::quantise_kv(a, i8); }), "antiquant_scale"},
      {"int4 K/V without scales", from(bf16_kv, [](FiaArgs& a) { testing::quantise_kv(a, i4); }), "antiquant_scale"},
      {"int8 key, bf16 value", from(chan8, [](FiaArgs& a) { a.value.dtype = bf16; }), "value"},
      {"int8 key, int32 value", from(chan8, [](FiaArgs& a) { a.value.dtype = i4; }), "value"},
      {"bf16 key, int8 value", from(bf16_kv, [](FiaArgs& a) { a.value.dtype = i8; }), "value"},
      {"antiquant_scale with bf16 K/V", from(bf16_kv, [](FiaArgs& a) { a.antiquant_scale = aq_view(0x1000000, bf16, {2}); }),
       "antiquant_scale"},
      {"value_antiquant_offset with bf16 K/V",
       from(bf16_kv, [](FiaArgs& a) { a.value_antiquant_offset = aq_view(0x1000000, f32, {1, B, KS}); }),
       "value_antiquant_offset"},
      {"int8 K/V with MLA", [] {
         FiaArgs a = testing::valid_fia_mla(1);
         a.key.dtype = a.value.dtype = i8;
         return a;
       }, "key", kUnsupported},
      {"int8 K/V in TND", [] {
         FiaArgs a;
         a.input_layout = "TND";
         a.num_heads = 8;
         a.query = aq_view(0x10000, bf16, {100, 8, 192});
         a.key = aq_view(0x100000, i8, {150, 8, 192});
         a.value = aq_view(0x200000, i8, {150, 8, 128});
         a.attention_out = aq_view(0x400000, bf16, {100, 8, 128});
         a.actual_seq_lengths = {40, 100};
         a.actual_seq_lengths_kv = {50, 150};
         return a;
       }, "key"},
      // The full int8 path takes no antiquant parameters (its own tests: fia_int8_test.cpp).
      {"int8 query with antiquant", from(chan8, [](FiaArgs& a) { a.query.dtype = i8; }), "key_antiquant_scale"},
      // int4 (int32).
      {"int4 at Q_S > 1", [] { return separate_kv(16, i4, 1, {B, KS}, 1, {B, KS}); }, "key"},
      {"int4 key in unpacked D", from(chan4, [](FiaArgs& a) { a.key.shape[3] = a.value.shape[3] = D; }), "key"},
      {"int4 D 96 (not 64-aligned)", [] {
         FiaArgs a = separate_kv(1, i4, 0, {1, KN, 96}, 0, {1, KN, 96});
         a.query = aq_view(0x10000, bf16, {B, 1, 8, 96});
         a.attention_out = aq_view(0x400000, bf16, {B, 1, 8, 96});
         a.key = aq_view(0x100000, i4, {B, KS, KN, 12});
         a.value = aq_view(0x200000, i4, {B, KS, KN, 12});
         return a;
       }, "key"},
      {"int4 paged", from(tok4, [](FiaArgs& a) { testing::page_kv(a, 128); }), "block_table"},
      {"int4 with kv left padding", from(chan4, [](FiaArgs& a) {
         a.actual_seq_lengths_kv = {100, 7};
         a.kv_padding_size = aq_view(0x800100, DType::kInt64, {2});
       }), "kv_padding_size"},
      {"int4 with int8 output", from(chan4, int8_out), "quant_scale2"},
      {"int4 with the combined param", from(chan4, [](FiaArgs& a) {
         a.key_antiquant_scale = a.value_antiquant_scale = a.key_antiquant_offset = a.value_antiquant_offset = {};
         a.antiquant_scale = aq_view(0x1000000, bf16, {2, KN, D});
       }), "antiquant_scale"},
      {"int4 mode 2", [] { return separate_kv(1, i4, 2, {KN}, 2, {KN}); }, "key_antiquant_mode"},
      {"int4 per tensor (1,)", [] { return separate_kv(1, i4, 0, {1}, 0, {1}); }, "key_antiquant_scale"},
      // int8 shapes.
      {"int8 D 48 at Q_S > 1", [] {
         FiaArgs a = separate_kv(16, i8, 1, {B, KS}, 1, {B, KS});
         a.query = aq_view(0x10000, bf16, {B, 16, 8, 48});
         a.attention_out = aq_view(0x400000, bf16, {B, 16, 8, 48});
         a.key = aq_view(0x100000, i8, {B, KS, KN, 48});
         a.value = aq_view(0x200000, i8, {B, KS, KN, 48});
         no_lse(a);
         return a;
       }, "key"},
      {"int8 paged at Q_S > 1", [] {
         FiaArgs a = combined_kv(64, "BSND", {2, KN, D});
         testing::page_kv(a, 128);
         return a;
       }, "block_table"},
      {"int8 paged block_size 16 at Q_S 1", from(tok8, [](FiaArgs& a) { testing::page_kv(a, 16); }), "block_size"},
      // Separate params: pairing.
      {"key scale alone", from(tok8, [](FiaArgs& a) { a.value_antiquant_scale = a.value_antiquant_offset = {}; }),
       "value_antiquant_scale"},
      {"value scale alone", from(tok8, [](FiaArgs& a) { a.key_antiquant_scale = {}; }), "key_antiquant_scale"},
      {"key offset alone", from(tok8, [](FiaArgs& a) { a.value_antiquant_offset = {}; }), "value_antiquant_offset"},
      {"offsets without scales", from(tok8, [](FiaArgs& a) { a.key_antiquant_scale = a.value_antiquant_scale = {}; }),
       "key_antiquant_scale"},
      {"key/value shapes differ",
       from(chan8, [](FiaArgs& a) { a.value_antiquant_scale = aq_view(0x2000000, bf16, {1, KN, D}, true);
                                    a.value_antiquant_offset = aq_view(0x4000000, bf16, {1, KN, D}, true); }),
       "value_antiquant_scale"},
      {"offset shape differs", from(tok8, [](FiaArgs& a) { a.key_antiquant_offset.shape[2] = KS + 1; }),
       "key_antiquant_offset"},
      {"offset dtype differs", from(chan8, [](FiaArgs& a) { a.key_antiquant_offset.dtype = f16; }), "key_antiquant_offset"},
      {"offset strides differ", from(tok8, [](FiaArgs& a) { a.value_antiquant_offset.stride[2] = 1; }),
       "value_antiquant_offset"},
      {"modes 1 and 2", from(tok8, [](FiaArgs& a) { a.value_antiquant_mode = 2; }), "value_antiquant_mode"},
      {"modes 1 and 0", from(tok8, [](FiaArgs& a) { a.value_antiquant_mode = 0; }), "value_antiquant_mode"},
      // Separate params at Q_S > 1.
      {"Q_S > 1 mode 0", [] { return separate_kv(16, i8, 0, {1, KN, D}, 0, {1, KN, D}); }, "key_antiquant_mode"},
      {"Q_S > 1 key 0 + value 1", [] { return separate_kv(16, i8, 0, {1, KN, D}, 1, {B, KS}); }, "key_antiquant_mode"},
      {"Q_S 17", [] {
         FiaArgs a = separate_kv(17, i8, 1, {B, KS}, 1, {B, KS});
         return a;
       }, "query"},
      {"Q_S > 1 fp16 query", [] { return separate_kv(16, i8, 1, {B, KS}, 1, {B, KS}, true, f16); }, "query"},
      {"Q_S > 1 int8 output", [] {
         FiaArgs a = token_qs16();
         int8_out(a);
         return a;
       }, "quant_scale2"},
      {"Q_S > 1 query left padding", [] {
         FiaArgs a = token_qs16();
         a.actual_seq_lengths = {7};
         a.query_padding_size = aq_view(0x800000, DType::kInt64, {1});
         return a;
       }, "query_padding_size"},
      {"Q_S > 1 kv left padding", [] {
         FiaArgs a = token_qs16();
         a.actual_seq_lengths_kv = {100, 7};
         a.kv_padding_size = aq_view(0x800000, DType::kInt64, {1});
         return a;
       }, "kv_padding_size"},
      {"Q_S > 1 shared prefix", [] {
         FiaArgs a = token_qs16();
         prefix(a);
         return a;
       }, "key_shared_prefix"},
      {"Q_S > 1 paged", [] {
         FiaArgs a = separate_kv(16, i8, 1, {B, 384}, 1, {B, 384});
         testing::page_kv(a, 128);
         return a;
       }, "block_table"},
      {"Q_S > 1 (1, B, S)", [] { return separate_kv(16, i8, 1, {1, B, KS}, 1, {1, B, KS}); }, "key_antiquant_scale"},
      {"Q_S > 1 S short", [] { return separate_kv(16, i8, 1, {B, KS - 1}, 1, {B, KS - 1}); }, "key_antiquant_scale"},
      {"Q_S > 1 bf16 scales", [] {
         FiaArgs a = token_qs16();
         a.key_antiquant_scale.dtype = a.value_antiquant_scale.dtype = bf16;
         return a;
       }, "key_antiquant_scale"},
      // Separate params at Q_S = 1: each mode's shape and dtype.
      {"mode 0 fp32 with a bf16 query", from(chan8, [](FiaArgs& a) {
         a.key_antiquant_scale.dtype = a.value_antiquant_scale.dtype = f32;
         a.key_antiquant_offset.dtype = a.value_antiquant_offset.dtype = f32;
       }), "key_antiquant_scale"},
      {"mode 0 wrong N", [] { return separate_kv(1, i8, 0, {1, 4, 1, D}, 0, {1, 4, 1, D}); }, "key_antiquant_scale"},
      {"mode 0 (1, H) of the query's H", [] { return separate_kv(1, i8, 0, {1, 8 * D}, 0, {1, 8 * D}); },
       "key_antiquant_scale"},
      {"mode 0 (2,) (the combined per tensor)", [] { return separate_kv(1, i8, 0, {2}, 0, {2}); }, "key_antiquant_scale"},
      {"mode 1 bf16", from(tok8, [](FiaArgs& a) {
         a.key_antiquant_scale.dtype = a.value_antiquant_scale.dtype = bf16;
         a.key_antiquant_offset.dtype = a.value_antiquant_offset.dtype = bf16;
       }), "key_antiquant_scale"},
      {"mode 1 S short", [] { return separate_kv(1, i8, 1, {1, B, KS - 1}, 1, {1, B, KS - 1}); }, "key_antiquant_scale"},
      {"mode 1 batch 3", [] { return separate_kv(1, i8, 1, {1, 3, KS}, 1, {1, 3, KS}); }, "key_antiquant_scale"},
      {"mode 1 (B, S)", [] { return separate_kv(1, i8, 1, {B, KS}, 1, {B, KS}); }, "key_antiquant_scale"},
      {"mode 1 paged, S short of the longest length", [] {
         FiaArgs a = separate_kv(1, i8, 1, {1, B, 383}, 1, {1, B, 383});
         testing::page_kv(a, 128);
         return a;
       }, "key_antiquant_scale"},
      {"mode 2 wrong N", [] { return separate_kv(1, i8, 2, {8}, 2, {8}); }, "key_antiquant_scale"},
      {"mode 3 wrong N", [] { return separate_kv(1, i8, 3, {B, 4, KS}, 3, {B, 4, KS}); }, "key_antiquant_scale"},
      {"mode 3 S short", [] { return separate_kv(1, i8, 3, {B, KN, 9}, 3, {B, KN, 9}); }, "key_antiquant_scale"},
      {"mode 4 without block_table", [] { return separate_kv(1, i8, 4, {8, 128}, 4, {8, 128}); }, "key_antiquant_mode"},
      {"mode 5 without block_table", [] { return separate_kv(1, i8, 5, {8, KN, 128}, 5, {8, KN, 128}); },
       "key_antiquant_mode"},
      {"mode 4 wrong blocknum", from(mode4, [](FiaArgs& a) {
         a.key_antiquant_scale.shape[0] = a.value_antiquant_scale.shape[0] = 7;
         a.key_antiquant_offset.shape[0] = a.value_antiquant_offset.shape[0] = 7;
       }), "key_antiquant_scale"},
      {"mode 4 wrong block_size", from(mode4, [](FiaArgs& a) { a.key_antiquant_scale.shape[1] = 256; }),
       "key_antiquant_scale"},
      {"mode 5 wrong N", from(mode5, [](FiaArgs& a) { a.key_antiquant_scale.shape[1] = 1; }), "key_antiquant_scale"},
      {"key 0 + value 1, int8 with a bf16 query", [] { return separate_kv(1, i8, 0, {1, KN, D}, 1, {1, B, KS}); },
       "query"},
      {"key 0 + value 1, int8 with int8 output", [] {
         FiaArgs a = separate_kv(1, i8, 0, {1, KN, D}, 1, {1, B, KS}, true, f16);
         int8_out(a);
         return a;
       }, "quant_scale2"},
      {"key 0 + value 1, value in the key's shape",
       [] { return separate_kv(1, i8, 0, {1, KN, D}, 1, {1, KN, D}, true, f16); }, "value_antiquant_scale"},
      {"misaligned scale", from(tok8, [](FiaArgs& a) {
         a.key_antiquant_scale.data = static_cast<char*>(a.key_antiquant_scale.data) + 2;
       }), "key_antiquant_scale"},
      {"scale stride past int64", from(tok8, [](FiaArgs& a) { a.value_antiquant_scale.stride[2] = INT64_MAX / 2; }),
       "value_antiquant_scale"},
      {"scale of size 0", from(tok8, [](FiaArgs& a) { a.key_antiquant_scale.shape[0] = 0; }), "key_antiquant_scale"},
      // Shared prefix: per-token scales of it are not defined.
      {"prefix with mode 1", from(tok8, prefix), "key_shared_prefix", kUnsupported},
      {"prefix with key 0 + value 1", [] {
         FiaArgs a = separate_kv(1, i8, 0, {1, KN, D}, 1, {1, B, KS}, true, f16);
         prefix(a);
         return a;
       }, "key_shared_prefix", kUnsupported},
      {"prefix with combined mode 1", [] {
         FiaArgs a = combined_kv(1, "BSND", {2, B, KS}, f32);
         a.antiquant_mode = 1;
         prefix(a);
         return a;
       }, "key_shared_prefix", kUnsupported},
      {"int8 prefix with int4 K/V", from(chan4, [](FiaArgs& a) { prefix(a), a.key_shared_prefix.dtype = i8; }),
       "key_shared_prefix"},
      // The combined param.
      {"antiquant_offset alone", from(comb64, [](FiaArgs& a) { a.antiquant_scale = {}; }), "antiquant_offset"},
      {"combined, Q_S > 1, bf16 query", [] {
         FiaArgs a = combined_kv(64, "BSND", {2, KN, D}, bf16);
         a.query.dtype = a.attention_out.dtype = bf16;
         return a;
       }, "query"},
      {"combined, Q_S > 1, per token (2, B, S)", [] { return combined_kv(64, "BSND", {2, B, KS}, f32); },
       "antiquant_scale"},
      {"combined, BSND given the BNSD shape", [] { return combined_kv(64, "BSND", {2, KN, 1, D}); }, "antiquant_scale"},
      {"combined, BNSD given the BSH shape", [] { return combined_kv(64, "BNSD", {2, KN * D}); }, "antiquant_scale"},
      {"combined (1, N, D) (the separate shape)", [] { return combined_kv(64, "BSND", {1, KN, D}); }, "antiquant_scale"},
      {"combined fp32 at Q_S > 1", [] { return combined_kv(64, "BSND", {2, KN, D}, f32); }, "antiquant_scale"},
      {"combined Q_S 1, bf16 scale with an fp16 query", [] { return combined_kv(1, "BSND", {2, KN, D}, bf16); },
       "antiquant_scale"},
      {"combined Q_S 1 mode 1 fp16", [] {
         FiaArgs a = combined_kv(1, "BSND", {2, B, KS}, f16);
         a.antiquant_mode = 1;
         return a;
       }, "antiquant_scale"},
      {"combined Q_S 1 mode 1 S short", [] {
         FiaArgs a = combined_kv(1, "BSND", {2, B, KS - 1}, f32);
         a.antiquant_mode = 1;
         return a;
       }, "antiquant_scale"},
      {"combined Q_S 1 mode 0 given the per-token shape", [] { return combined_kv(1, "BSND", {2, B, KS}); },
       "antiquant_scale"},
      {"combined offset shape differs", from(comb1, [](FiaArgs& a) { a.antiquant_offset = aq_view(0x3000000, f16, {2}); }),
       "antiquant_offset"},
  };
  return k;
}

TEST(FiaAntiquantRefusal, EachIllegalCombinationNamesItsArgument) {
  for (const Case& c : cases()) {
    const FiaArgs a = c.make();
    try {
      plan_fia(a, testing::kPlanArch);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), c.code) << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("argument '") + c.argument + "'"), std::string::npos)
          << c.what << ": " << e.what();
    }
  }
}

// The starting points themselves plan (so each refusal above is the edit's).
TEST(FiaAntiquantRefusal, StartingPointsAreAccepted) {
  for (auto make : {chan8, chan4, tok8, tok4, comb64, comb1, mode4, mode5, token_qs16})
    EXPECT_NO_THROW(plan_fia(make(), testing::kPlanArch));
  FiaArgs p = chan_qs1(i8);
  prefix(p);
  EXPECT_NO_THROW(plan_fia(p, testing::kPlanArch));  // per channel with a prefix
  FiaArgs h = separate_kv(1, i8, 2, {KN}, 2, {KN});
  prefix(h);
  EXPECT_NO_THROW(plan_fia(h, testing::kPlanArch));  // per head with a prefix
  FiaArgs m = separate_kv(1, i8, 0, {1, KN, D}, 1, {1, B, KS}, true, f16);
  EXPECT_NO_THROW(plan_fia(m, testing::kPlanArch));
  FiaArgs q = combined_kv(1, "BSND", {2, KN, D}, bf16);
  q.query.dtype = q.attention_out.dtype = bf16;
  EXPECT_NO_THROW(plan_fia(q, testing::kPlanArch));
}

}  // namespace
}  // namespace attnjit::ops
