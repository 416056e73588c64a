// Tests of src/spec/: canonical JSON, readable names, Arch parsing and the cache key.
#include <gtest/gtest.h>

#include <functional>
#include <utility>
#include <set>
#include <string>
#include <vector>

#include "common/expect_error.hpp"
#include "decode/decode_params.cuh"
#include "attnjit/error.hpp"
#include "spec/kernel_spec.hpp"
#include "util/hash.hpp"

namespace attnjit::spec {
namespace {

// Runs `f`, expects Error with `code`, and a message containing every needle.
using testing::expect_error;

constexpr DType kAllDtypes[] = {DType::kFloat16,    DType::kBFloat16,   DType::kFloat32, DType::kFloat8E4M3,
                                DType::kFloat8E5M2, DType::kInt8,       DType::kUInt8,   DType::kUInt16,
                                DType::kInt32,      DType::kUInt32,     DType::kInt64};

KernelSpec xqa_spec() {
  KernelSpec s;
  s.family = OpFamily::kXqa;
  s.q_dtype = DType::kBFloat16;
  s.kv_dtype = DType::kFloat8E4M3;
  s.out_dtype = DType::kBFloat16;
  s.set_head_dim(128);
  s.group_size = 8;
  s.page_size = 32;
  s.layout = KvLayout::kNHD;
  s.arch = Arch{90, true};
  return s;
}

// Many specs: every enum value of every field, each feature bit alone, all bits together.
std::vector<KernelSpec> many_specs() {
  std::vector<KernelSpec> out;
  const KernelSpec base = xqa_spec();
  out.push_back(base);
  out.push_back(KernelSpec{});
  for (OpFamily f : {OpFamily::kDecode, OpFamily::kXqa}) { auto s = base; s.family = f; out.push_back(s); }
  for (Backend b : {Backend::kXqa, Backend::kTrtllmGen}) { auto s = base; s.backend = b; out.push_back(s); }
  for (DType d : kAllDtypes) {
    auto s = base; s.q_dtype = d; out.push_back(s);
    s = base; s.kv_dtype = d; out.push_back(s);
    s = base; s.out_dtype = d; out.push_back(s);
  }
  for (int hd : {16, 64, 128, 256}) { auto s = base; s.set_head_dim(hd); out.push_back(s); }
  // MLA (576/512) and FIA's TND layout (192/128) keep the two head dims apart.
  for (auto [qk, vo] : {std::pair{576, 512}, {192, 128}, {128, 192}}) {
    auto s = base; s.head_dim_qk = qk; s.head_dim_vo = vo; out.push_back(s);
  }
  for (int g : {1, 2, 5, 64}) { auto s = base; s.group_size = g; out.push_back(s); }
  for (int p : {0, 16, 64, 128}) { auto s = base; s.page_size = p; out.push_back(s); }
  for (KvLayout l : {KvLayout::kNHD, KvLayout::kHND}) { auto s = base; s.layout = l; out.push_back(s); }
  for (MaskMode m : {MaskMode::kNone, MaskMode::kCausal, MaskMode::kCustom}) { auto s = base; s.mask = m; out.push_back(s); }
  for (PosEncoding p : {PosEncoding::kNone, PosEncoding::kRopeLlama, PosEncoding::kAlibi}) {
    auto s = base; s.pos_encoding = p; out.push_back(s);
  }
  for (const auto& f : feature::kNames) { auto s = base; s.features = f.bit; out.push_back(s); }
  { auto s = base; s.features = feature::kAll; out.push_back(s); }
  for (Arch a : {Arch{80, false}, Arch{86, false}, Arch{89, false}, Arch{90, false}, Arch{90, true},
                 Arch{100, true}, Arch{120, false}}) {
    auto s = base; s.arch = a; out.push_back(s);
  }
  return out;
}

TEST(SpecJson, RoundTripsEveryEnumValueAndFeature) {
  for (const KernelSpec& s : many_specs()) {
    const nlohmann::json j = s.to_json();
    const KernelSpec back = KernelSpec::from_json(j);
    EXPECT_EQ(back, s) << j.dump();
    EXPECT_EQ(back.to_json(), j);
    // Through text too: the CLI and the store read it back from strings.
    EXPECT_EQ(KernelSpec::from_json(nlohmann::json::parse(j.dump())), s) << j.dump();
  }
}

TEST(SpecJson, IsCanonical) {
  const KernelSpec s = xqa_spec();
  const std::string text = s.to_json().dump();
  // Every field, keys sorted.
  const nlohmann::json obj = s.to_json();
  std::vector<std::string> keys;
  for (auto it = obj.begin(); it != obj.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"arch", "backend", "family", "features", "group_size", "head_dim",
                                            "kv_dtype", "layout", "mask", "out_dtype", "page_size",
                                            "pos_encoding", "q_dtype"}));
  EXPECT_EQ(text,
            R"({"arch":"sm_90a","backend":"xqa","family":"xqa","features":[],"group_size":8,"head_dim":128,)"
            R"("kv_dtype":"fp8_e4m3","layout":"NHD","mask":"none","out_dtype":"bf16","page_size":32,)"
            R"("pos_encoding":"none","q_dtype":"bf16"})");
  // Feature order is fixed, whatever order a reader gives.
  auto j = s.to_json();
  j["features"] = {"sinks", "softcap"};
  EXPECT_EQ(KernelSpec::from_json(j).to_json()["features"], nlohmann::json({"softcap", "sinks"}));
}

TEST(SpecJson, FromJsonErrorsNameTheField) {
  const nlohmann::json good = xqa_spec().to_json();
  for (const char* field : {"family", "backend", "q_dtype", "kv_dtype", "out_dtype", "head_dim", "group_size",
                            "page_size", "layout", "mask", "pos_encoding", "features", "arch"}) {
    auto missing = good;
    missing.erase(field);
    expect_error([&] { KernelSpec::from_json(missing); }, ErrorCode::kInvalidArgument, {field});
    auto wrong_type = good;
    wrong_type[field] = nlohmann::json::object();
    expect_error([&] { KernelSpec::from_json(wrong_type); }, ErrorCode::kInvalidArgument, {field});
  }
  for (const char* field : {"family", "backend", "layout", "mask", "pos_encoding"}) {
    auto j = good;
    j[field] = "bogus";
    expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {field, "bogus"});
  }
  auto j = good;
  j["head_dim"] = "128";
  expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {"head_dim", "integer"});
  j = good;
  j["kv_dtype"] = "fp7";
  expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {"fp7"});
  j = good;
  j["features"] = {"softcap", "teleport"};
  expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {"features", "teleport"});
  j = good;
  j["features"] = {7};
  expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {"features"});
  j = good;
  j["arch"] = "sm_70";
  expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {"sm_70"});
  expect_error([&] { KernelSpec::from_json(nlohmann::json::array()); }, ErrorCode::kInvalidArgument, {"object"});
}

// get<int>() used to keep the low 32 bits: 4294967424 became head_dim 128.
TEST(SpecJson, HeadDimFieldsAreOneOrThePair) {
  nlohmann::json j = xqa_spec().to_json();
  j["head_dim_qk"] = 192;
  expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {"head_dim", "not both"});
  j.erase("head_dim");
  expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {"head_dim_vo", "go together"});
  j["head_dim_vo"] = 128;
  const KernelSpec s = KernelSpec::from_json(j);
  EXPECT_EQ(s.head_dim_qk, 192);
  EXPECT_EQ(s.head_dim_vo, 128);
  j["head_dim_vo"] = 192;  // equal dims written as the pair read back as one spec, written canonically
  EXPECT_TRUE(KernelSpec::from_json(j).to_json().contains("head_dim"));
}

TEST(SpecJson, FromJsonRejectsIntegersOutsideIntRange) {
  const nlohmann::json good = xqa_spec().to_json();
  for (const char* field : {"head_dim", "group_size", "page_size"}) {
    for (const nlohmann::json& v : {nlohmann::json(4294967424ull), nlohmann::json(int64_t{2147483648}),
                                    nlohmann::json(int64_t{-2147483649}), nlohmann::json(18446744073709551615ull)}) {
      auto j = good;
      j[field] = v;
      expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {field, "out of range"});
    }
  }
  // A spec carries only what its readable name can: 0 to 999999, so every name parses back.
  for (const char* field : {"head_dim", "group_size", "page_size"}) {
    for (int64_t v : {int64_t{-1}, int64_t{-128}, int64_t{1000000}, int64_t{2147483647}}) {
      auto j = good;
      j[field] = v;
      expect_error([&] { KernelSpec::from_json(j); }, ErrorCode::kInvalidArgument, {field, "out of range"});
    }
  }
  auto j = good;
  j["head_dim"] = int64_t{999999};  // the edge still parses (the family refuses it later)
  const KernelSpec edge = KernelSpec::from_json(j);
  EXPECT_EQ(edge.head_dim_qk, 999999);
  EXPECT_EQ(KernelSpec::from_name(edge.name()), edge);
}

TEST(SpecJson, ParseDtypeAcceptsAliases) {
  for (DType d : kAllDtypes) EXPECT_EQ(parse_dtype(dtype_name(d)), d) << dtype_name(d);
  EXPECT_EQ(parse_dtype("e4m3"), DType::kFloat8E4M3);
  EXPECT_EQ(parse_dtype("e5m2"), DType::kFloat8E5M2);
  EXPECT_EQ(parse_dtype("fp8"), DType::kFloat8E4M3);
  EXPECT_EQ(parse_dtype("half"), DType::kFloat16);
  EXPECT_EQ(parse_dtype("float16"), DType::kFloat16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBFloat16);
  expect_error([] { parse_dtype("float8"); }, ErrorCode::kInvalidArgument, {"float8", "bf16"});
}

TEST(SpecName, ReadableExamples) {
  KernelSpec s = xqa_spec();
  EXPECT_EQ(s.name(), "xqa.bf16.kve4m3.hd128.g8.p32.nhd.sm90a");

  KernelSpec d;  // decode bf16 hd128, contiguous
  d.group_size = 4;
  d.arch = Arch{90, true};
  EXPECT_EQ(d.name(), "decode.bf16.hd128.g4.contig.nhd.sm90a");

  KernelSpec x;
  x.family = OpFamily::kXqa;
  x.q_dtype = DType::kFloat16;
  x.kv_dtype = DType::kFloat8E4M3;
  x.out_dtype = DType::kFloat8E4M3;
  x.set_head_dim(64);
  x.group_size = 16;
  x.page_size = 128;
  x.layout = KvLayout::kHND;
  x.mask = MaskMode::kCustom;
  x.features = feature::kSinks | feature::kSlidingWindow | feature::kScalePointers | feature::kRaggedQ;
  x.arch = Arch{80, false};
  EXPECT_EQ(x.name(), "xqa.fp16.kve4m3.oe4m3.hd64.g16.p128.hnd.custom.window.sinks.scaleptr.raggedq.sm80");

  KernelSpec r;
  r.q_dtype = r.kv_dtype = r.out_dtype = DType::kFloat16;
  r.kv_dtype = DType::kFloat8E5M2;
  r.pos_encoding = PosEncoding::kRopeLlama;
  r.features = feature::kSoftCap | feature::kReturnLse;
  r.backend = Backend::kTrtllmGen;
  r.arch = Arch{120, false};
  EXPECT_EQ(r.name(), "decode.fp16.kve5m2.hd128.g1.contig.nhd.rope_llama.softcap.lse.trtllmgen.sm120");

  KernelSpec a;
  a.pos_encoding = PosEncoding::kAlibi;
  a.mask = MaskMode::kCausal;
  a.arch = Arch{100, true};
  EXPECT_EQ(a.name(), "decode.bf16.hd128.g1.contig.nhd.causal.alibi.sm100a");
}

// Every spec's readable name parses back to the same spec (the parser reads
// the same field table that writes the name).
TEST(SpecName, EveryNameParsesBackToItsSpec) {
  for (const KernelSpec& s : many_specs()) {
    bool had_arch = false;
    EXPECT_EQ(KernelSpec::from_name(s.name(), &had_arch), s) << s.name();
    EXPECT_TRUE(had_arch) << s.name();
  }
}

TEST(SpecName, UnequalHeadDimsReadQkThenVo) {
  KernelSpec s = xqa_spec();
  s.head_dim_qk = 576;
  s.head_dim_vo = 512;
  EXPECT_EQ(s.name(), "xqa.bf16.kve4m3.hd576x512.g8.p32.nhd.sm90a");
  const nlohmann::json j = s.to_json();
  EXPECT_FALSE(j.contains("head_dim")) << j.dump();
  EXPECT_EQ(j["head_dim_qk"], 576);
  EXPECT_EQ(j["head_dim_vo"], 512);
  EXPECT_EQ(KernelSpec::from_json(j), s);
  KernelSpec equal = s;
  equal.set_head_dim(128);
  EXPECT_NE(equal, s);
  EXPECT_NE(KernelSpecHash()(equal), KernelSpecHash()(s));
  EXPECT_EQ(equal.to_json()["head_dim"], 128) << "equal head dims keep the one field (stable JSON and keys)";
}

TEST(SpecName, ParserRefusesWhatItCannotRead) {
  expect_error([] { KernelSpec::from_name("attention.bf16.hd64.g4.contig.nhd.sm90a"); }, ErrorCode::kInvalidArgument,
               {"unknown op family 'attention'"});
  expect_error([] { KernelSpec::from_name("xqa.bf16.hd64.g4.p16.nhd.bogus.sm90a"); }, ErrorCode::kInvalidArgument,
               {"unknown token 'bogus'"});
  expect_error([] { KernelSpec::from_name("xqa.bf16.g4.p16.nhd"); }, ErrorCode::kInvalidArgument, {"hd<head_dim>", "'g4'"});
  expect_error([] { KernelSpec::from_name("xqa.bf16.hd576x.g4.p16.nhd"); }, ErrorCode::kInvalidArgument, {"hd576x"});
  expect_error([] { KernelSpec::from_name("xqa.bf16.hd64.g4.p16"); }, ErrorCode::kInvalidArgument, {"missing", "layout"});
  expect_error([] { KernelSpec::from_name("xqa.bf16.hd64.g4.p16.nhd.sm90a.sinks"); }, ErrorCode::kInvalidArgument,
               {"must be the last token"});
  expect_error([] { KernelSpec::from_name("xqa.bf16.hd64.g4.p16.nhd.sinks.window.sm90a"); },
               ErrorCode::kInvalidArgument, {"canonical", "xqa.bf16.hd64.g4.p16.nhd.window.sinks.sm90a"});
  expect_error([] { KernelSpec::from_name("xqa.bf16.hd128x128.g4.p16.nhd"); }, ErrorCode::kInvalidArgument,
               {"canonical", "hd128.g4"});
  expect_error([] { KernelSpec::from_name("xqa.bf16.hd64.g4.p16.nhd.sm70"); }, ErrorCode::kInvalidArgument,
               {"sm_80 or newer"});
  bool had_arch = true;
  EXPECT_EQ(KernelSpec::from_name("decode.bf16.hd64.g4.contig.nhd", &had_arch).head_dim_qk, 64);
  EXPECT_FALSE(had_arch);
}

TEST(SpecName, DistinctSpecsHaveDistinctNames) {
  std::set<std::string> names;
  std::vector<KernelSpec> specs;
  for (const auto& s : many_specs()) {
    bool dup = false;
    for (const auto& o : specs) dup |= o == s;
    if (dup) continue;
    specs.push_back(s);
    EXPECT_TRUE(names.insert(s.name()).second) << "duplicate name " << s.name();
  }
}

TEST(Arch, ParseAcceptsSupportedTargets) {
  EXPECT_EQ(Arch::parse("sm_80"), (Arch{80, false}));
  EXPECT_EQ(Arch::parse("sm_90a"), (Arch{90, true}));
  EXPECT_EQ(Arch::parse("90a"), (Arch{90, true}));
  EXPECT_EQ(Arch::parse("sm_100a"), (Arch{100, true}));
  EXPECT_EQ(Arch::parse("120"), (Arch{120, false}));
  for (const char* t : {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"})
    EXPECT_EQ(Arch::parse(t).str(), t);
}

TEST(Arch, ParseRejectsOldAndGarbage) {
  expect_error([] { Arch::parse("sm_70"); }, ErrorCode::kInvalidArgument, {"sm_70", "sm_80 or newer"});
  expect_error([] { Arch::parse("75"); }, ErrorCode::kInvalidArgument, {"75", "sm_80"});
  for (const char* g : {"", "sm_", "a", "sm_9x", "hopper", "sm_90b", "compute_90", "sm_-90", "sm_ 90"})
    expect_error([&] { Arch::parse(g); }, ErrorCode::kInvalidArgument, {std::string("'") + g + "'", "sm_90a"});
}

// An over-long number is an Error naming the text, not std::out_of_range from stoi.
TEST(Arch, ParseRejectsOutOfRangeNumberWithError) {
  expect_error([] { Arch::parse("sm_99999999999999"); }, ErrorCode::kInvalidArgument, {"sm_99999999999999"});
}

// Arch-specific ('a') targets exist only for sm_90 and newer; sm_80a is refused at parse.
TEST(Arch, ParseRejectsArchSpecificSuffixWhereNoneExists) {
  for (const char* t : {"sm_80a", "sm_86a", "sm_89a"})
    expect_error([&] { Arch::parse(t); }, ErrorCode::kInvalidArgument, {t});
}

TEST(Arch, ForDevice) {
  EXPECT_EQ(arch_for_device(9, 0).str(), "sm_90a");
  EXPECT_EQ(arch_for_device(8, 9).str(), "sm_89");
  EXPECT_EQ(arch_for_device(8, 0).str(), "sm_80");
  EXPECT_EQ(arch_for_device(8, 6).str(), "sm_86");
  EXPECT_EQ(arch_for_device(10, 0).str(), "sm_100a");
  EXPECT_EQ(arch_for_device(12, 0).str(), "sm_120");
}

KeyInputs fixed_inputs() {
  return {"0.1.0", "0123456789abcdef0123456789abcdef", "// rendered\nextern \"C\" __global__ void k() {}\n",
          "13.0 (libnvrtc.so.13.0.88)", "--gpu-architecture=sm_90a --std=c++17 --ptxas-options=-v -DNDEBUG"};
}

TEST(CacheKey, GoldenValue) {
  // Pinned: a change here invalidates every cache in the field. Bump deliberately.
  const std::string key = cache_key(xqa_spec(), fixed_inputs());
  EXPECT_EQ(key.size(), 32u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(key, "fd57e17c7d7c607a0f400583dd0e7d4d");
  EXPECT_EQ(cache_key(xqa_spec(), fixed_inputs()), key);  // deterministic
}

TEST(CacheKey, ChangesWithEachInput) {
  const KernelSpec s = xqa_spec();
  const std::string base = cache_key(s, fixed_inputs());
  std::vector<std::pair<std::string, std::function<void(KeyInputs&)>>> edits = {
      {"library_version", [](KeyInputs& k) { k.library_version = "0.1.1"; }},
      {"template_hash", [](KeyInputs& k) { k.template_hash[0] = '1'; }},
      {"rendered_source", [](KeyInputs& k) { k.rendered_source += " "; }},
      {"nvrtc_version", [](KeyInputs& k) { k.nvrtc_version = "13.0 (libnvrtc.so.13.0.48)"; }},
      {"options", [](KeyInputs& k) { k.options += " -lineinfo"; }},
  };
  std::set<std::string> keys{base};
  for (auto& [name, edit] : edits) {
    KeyInputs in = fixed_inputs();
    edit(in);
    const std::string k = cache_key(s, in);
    EXPECT_NE(k, base) << name;
    EXPECT_TRUE(keys.insert(k).second) << name;
  }
  // The arch, alone (options unchanged): sm_90 vs sm_90a vs sm_100a.
  for (Arch a : {Arch{90, false}, Arch{100, true}, Arch{89, false}}) {
    KernelSpec t = s;
    t.arch = a;
    EXPECT_TRUE(keys.insert(cache_key(t, fixed_inputs())).second) << a.str();
  }
}

TEST(CacheKey, ChangesWithEachSpecField) {
  const KernelSpec s = xqa_spec();
  std::vector<std::pair<std::string, std::function<void(KernelSpec&)>>> edits = {
      {"family", [](KernelSpec& k) { k.family = OpFamily::kDecode; }},
      {"backend", [](KernelSpec& k) { k.backend = Backend::kTrtllmGen; }},
      {"q_dtype", [](KernelSpec& k) { k.q_dtype = DType::kFloat16; }},
      {"kv_dtype", [](KernelSpec& k) { k.kv_dtype = DType::kFloat8E5M2; }},
      {"out_dtype", [](KernelSpec& k) { k.out_dtype = DType::kFloat8E4M3; }},
      {"head_dim", [](KernelSpec& k) { k.set_head_dim(64); }},
      {"group_size", [](KernelSpec& k) { k.group_size = 4; }},
      {"page_size", [](KernelSpec& k) { k.page_size = 64; }},
      {"layout", [](KernelSpec& k) { k.layout = KvLayout::kHND; }},
      {"mask", [](KernelSpec& k) { k.mask = MaskMode::kCustom; }},
      {"pos_encoding", [](KernelSpec& k) { k.pos_encoding = PosEncoding::kAlibi; }},
      {"arch.sm", [](KernelSpec& k) { k.arch.sm = 100; }},
      {"arch.arch_specific", [](KernelSpec& k) { k.arch.arch_specific = false; }},
  };
  for (const auto& f : feature::kNames)
    edits.push_back({std::string("feature ") + f.token, [bit = f.bit](KernelSpec& k) { k.features ^= bit; }});
  std::set<std::string> keys{cache_key(s, fixed_inputs())};
  for (auto& [name, edit] : edits) {
    KernelSpec t = s;
    edit(t);
    ASSERT_NE(t, s) << name;
    EXPECT_TRUE(keys.insert(cache_key(t, fixed_inputs())).second) << name;
  }
}

// operator== compares members one by one (it runs on every launch); the field table, which
// writes the JSON, is the definition: the two agree on every pair of specs.
TEST(SpecEquality, AgreesWithTheFieldTable) {
  const auto specs = many_specs();
  for (const auto& a : specs)
    for (const auto& b : specs) EXPECT_EQ(a == b, a.to_json() == b.to_json()) << a.name() << " vs " << b.name();
}

TEST(KernelSpecHash, EqualForEqualSpecs) {
  KernelSpecHash h;
  const auto specs = many_specs();
  std::set<size_t> hashes;
  for (const auto& s : specs) {
    KernelSpec copy = KernelSpec::from_json(s.to_json());
    EXPECT_EQ(h(copy), h(s)) << s.name();
    hashes.insert(h(s));
  }
  // Not a requirement, but a hash that collides on this small set would be a poor one.
  std::set<std::string> names;
  for (const auto& s : specs) names.insert(s.name());
  EXPECT_EQ(hashes.size(), names.size());
}

TEST(KeyEncoder, LengthPrefixPreventsAliasing) {
  using util::KeyEncoder;
  KeyEncoder a, b;
  a.field("x", "ab").field("y", "c");
  b.field("x", "a").field("y", "bc");
  EXPECT_NE(KeyEncoder::field_bytes("x", "ab") + KeyEncoder::field_bytes("y", "c"),
            KeyEncoder::field_bytes("x", "a") + KeyEncoder::field_bytes("y", "bc"));
  EXPECT_NE(a.hex(), b.hex());
  // Names and values cannot trade bytes either.
  KeyEncoder c, d;
  c.field("ab", "c");
  d.field("a", "bc");
  EXPECT_NE(c.hex(), d.hex());
  KeyEncoder e, f;
  e.field("n", int64_t{12});
  f.field("n", "12");
  EXPECT_EQ(e.hex(), f.hex());  // integers encode as their decimal text
  EXPECT_EQ(KeyEncoder::field_bytes("k", "v"), std::string("\x01\0\0\0\0\0\0\0k\x01\0\0\0\0\0\0\0v", 18));
  EXPECT_EQ(util::xxh128_hex("").size(), 32u);
  // The encoder streams: its hash is that of the fields' encodings one after another,
  // and a copy continues from where the original stood.
  KeyEncoder g;
  g.field("k", "v").field("n", int64_t{-3});
  EXPECT_EQ(g.hex(), util::xxh128_hex(KeyEncoder::field_bytes("k", "v") + KeyEncoder::field_bytes("n", "-3")));
  const std::string big(100000, 'x');  // past XXH3's internal buffer
  KeyEncoder h = g;
  h.field("big", big);
  EXPECT_EQ(h.hex(), util::xxh128_hex(KeyEncoder::field_bytes("k", "v") + KeyEncoder::field_bytes("n", "-3") +
                                      KeyEncoder::field_bytes("big", big)));
  EXPECT_EQ(g.hex(), util::xxh128_hex(KeyEncoder::field_bytes("k", "v") + KeyEncoder::field_bytes("n", "-3")));
}

}  // namespace
}  // namespace attnjit::spec

// The renderer writes spec enums and feature bits as numbers into the Traits;
// the templates' constants must mean the same (templates/decode/decode_params.cuh).
TEST(SpecToTemplates, SwitchesAgree) {
  EXPECT_EQ(attnjit::mask_mode::kNone, static_cast<int>(attnjit::spec::MaskMode::kNone));
  EXPECT_EQ(attnjit::mask_mode::kCausal, static_cast<int>(attnjit::spec::MaskMode::kCausal));
  EXPECT_EQ(attnjit::mask_mode::kCustom, static_cast<int>(attnjit::spec::MaskMode::kCustom));
  EXPECT_EQ(attnjit::pos_mode::kNone, static_cast<int>(attnjit::spec::PosEncoding::kNone));
  EXPECT_EQ(attnjit::pos_mode::kRope, static_cast<int>(attnjit::spec::PosEncoding::kRopeLlama));
  EXPECT_EQ(attnjit::pos_mode::kAlibi, static_cast<int>(attnjit::spec::PosEncoding::kAlibi));
  namespace f = attnjit::spec::feature;
  EXPECT_EQ(attnjit::feat::kSoftCap, f::kSoftCap);
  EXPECT_EQ(attnjit::feat::kWindow, f::kSlidingWindow);
  EXPECT_EQ(attnjit::feat::kSinks, f::kSinks);
  EXPECT_EQ(attnjit::feat::kLse, f::kReturnLse);
  EXPECT_EQ(attnjit::feat::kScalePtr, f::kScalePointers);
  EXPECT_EQ(attnjit::feat::kRaggedQ, f::kRaggedQ);
  EXPECT_EQ(attnjit::feat::kKTokScale, f::kKTokenScale);
  EXPECT_EQ(attnjit::feat::kVTokScale, f::kVTokenScale);
  EXPECT_EQ(attnjit::feat::kKvPair, f::kKvPair);
  EXPECT_EQ(attnjit::feat::kTokHead, f::kTokHead);
}
