// Tests of src/compile/: NVRTC compiles of rendered variants for every target arch, no GPU needed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "attnjit/error.hpp"
#include "common/temp_dir.hpp"
#include "compile/library_identity.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "compile/toolkit_headers.hpp"
#include "gpu/hopper_kernels.hpp"
#include "ops/decode/decode_generator.hpp"
#include "render/renderer.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::compile {
namespace {

using spec::Arch;
using spec::KernelSpec;
namespace feature = spec::feature;

KernelSpec proof_spec(Arch arch) {
  KernelSpec s;
  s.family = spec::OpFamily::kDecode;
  s.q_dtype = s.kv_dtype = s.out_dtype = DType::kBFloat16;
  s.set_head_dim(128);
  s.group_size = 4;
  s.page_size = 0;
  s.arch = arch;
  return s;
}

struct Compiled {
  KernelSpec spec;
  CompileResult result;
  std::string error;  // non-empty when the compile threw
};

// Compiles every spec, `threads` at a time; failures are collected, not thrown.
std::vector<Compiled> compile_all(const std::vector<KernelSpec>& specs, int threads = 2) {
  std::vector<Compiled> out(specs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < specs.size();) {
      out[i].spec = specs[i];
      try {
        out[i].result = compile(specs[i].name(), render::render(specs[i]), specs[i].arch);
      } catch (const CompileError& e) {
        out[i].error = std::string(e.what()) + "\n--- source ---\n" + e.source();
      } catch (const std::exception& e) {
        out[i].error = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  return out;
}

// Every compile: ok, a cubin, no spills, no stack frame (RoPE aside: precise sincosf
// keeps a small local array for its rarely taken large-argument reduction); prints a
// register table.
void check_and_print(const std::vector<Compiled>& all, const char* title) {
  std::printf("%s\n  %-88s %5s %6s %6s %8s\n", title, "variant", "regs", "stack", "spill", "ms");
  for (const auto& c : all) {
    const Resources& r = c.result.resources;
    if (!c.error.empty()) {
      ADD_FAILURE() << c.spec.name() << " failed to compile:\n" << c.error;
      continue;
    }
    std::printf("  %-88s %5d %6d %6d %8.0f\n", c.spec.name().c_str(), r.registers, r.stack_bytes, r.spill_stores,
                c.result.compile_ms);
    EXPECT_GE(c.result.cubin.size(), 4u) << c.spec.name();
    EXPECT_EQ(c.result.cubin.compare(0, 4, "\x7f" "ELF"), 0) << c.spec.name();
    EXPECT_GT(r.registers, 0) << c.spec.name() << "\n" << c.result.log;
    EXPECT_EQ(r.spill_stores, 0) << c.spec.name() << "\n" << c.result.log;
    EXPECT_EQ(r.spill_loads, 0) << c.spec.name() << "\n" << c.result.log;
    if (c.spec.pos_encoding == spec::PosEncoding::kRopeLlama)
      EXPECT_LE(r.stack_bytes, 32) << c.spec.name() << "\n" << c.result.log;
    else
      EXPECT_EQ(r.stack_bytes, 0) << c.spec.name() << "\n" << c.result.log;
  }
  std::fflush(stdout);
}

class ProofKernel : public ::testing::TestWithParam<const char*> {};

TEST_P(ProofKernel, CompilesWithoutSpills) {
  const Arch arch = Arch::parse(GetParam());
  const KernelSpec s = proof_spec(arch);
  const render::RenderedUnit unit = render::render(s);
  const CompileResult r = compile(s.name(), unit, arch);
  ASSERT_GE(r.cubin.size(), 4u);
  EXPECT_EQ(r.cubin.compare(0, 4, "\x7f" "ELF"), 0);
  EXPECT_NE(r.ptx.find(".entry attnjit_decode"), std::string::npos) << r.ptx.substr(0, 2000);
  EXPECT_NE(r.ptx.find(".target " + arch.str()), std::string::npos) << "PTX targets the exact arch";
  EXPECT_NE(r.ptx.find("attnjit_smem_bytes"), std::string::npos);
  EXPECT_GT(r.resources.registers, 0) << r.log;
  EXPECT_LE(r.resources.registers, 255) << r.log;
  EXPECT_EQ(r.resources.stack_bytes, 0) << r.log;
  EXPECT_EQ(r.resources.spill_stores, 0) << r.log;
  EXPECT_EQ(r.resources.spill_loads, 0) << r.log;
  EXPECT_GT(r.compile_ms, 0.0);
  EXPECT_EQ(r.options, join_options(nvrtc_options(arch)));
  EXPECT_NE(r.options.find("--gpu-architecture=" + arch.str()), std::string::npos);
  EXPECT_NE(r.log.find("attnjit_decode"), std::string::npos) << "ptxas -v output is in the log";
  std::printf("  %-40s %3d registers, %.0f ms\n", s.name().c_str(), r.resources.registers, r.compile_ms);
}

INSTANTIATE_TEST_SUITE_P(EveryArch, ProofKernel,
                         ::testing::Values("sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"),
                         [](const auto& info) { return std::string(info.param); });

struct XqaVariant {
  int head_dim, group, page;
  spec::KvLayout layout;
  DType q, kv, out;
  spec::MaskMode mask;
  uint32_t features;
};

// Sampled so that every value of every axis appears at least once.
const std::vector<XqaVariant>& xqa_variants() {
  using L = spec::KvLayout;
  using M = spec::MaskMode;
  constexpr DType f16 = DType::kFloat16, b16 = DType::kBFloat16, e4 = DType::kFloat8E4M3;
  static const std::vector<XqaVariant> v = {
      {64, 1, 16, L::kNHD, f16, f16, f16, M::kNone, 0},
      {128, 2, 32, L::kHND, b16, b16, b16, M::kNone, feature::kSinks},
      {256, 4, 64, L::kNHD, f16, e4, f16, M::kCustom, feature::kSlidingWindow},
      {128, 5, 128, L::kHND, b16, e4, b16, M::kNone, feature::kScalePointers},
      {64, 8, 32, L::kNHD, b16, e4, e4, M::kCustom, feature::kRaggedQ},
      {128, 16, 16, L::kHND, f16, f16, f16, M::kCustom, feature::kSinks | feature::kSlidingWindow},
      {128, 64, 64, L::kNHD, b16, b16, b16, M::kNone, 0},
      {256, 8, 128, L::kHND, b16, e4, e4, M::kNone, feature::kSinks | feature::kScalePointers},
      {64, 4, 64, L::kHND, b16, e4, b16, M::kCustom, feature::kRaggedQ | feature::kSlidingWindow},
      {128, 8, 32, L::kNHD, b16, e4, b16, M::kNone, 0},
      {256, 16, 16, L::kNHD, b16, b16, b16, M::kCustom, feature::kScalePointers},
      {64, 64, 128, L::kNHD, f16, e4, f16, M::kNone, feature::kSinks},
  };
  return v;
}

TEST(VariantMatrix, SampleCoversEveryAxisValue) {
  auto covers = [&](auto pred) {
    for (const auto& v : xqa_variants())
      if (pred(v)) return true;
    return false;
  };
  for (int hd : {64, 128, 256}) EXPECT_TRUE(covers([&](auto& v) { return v.head_dim == hd; })) << hd;
  for (int g : {1, 2, 4, 5, 8, 16, 64}) EXPECT_TRUE(covers([&](auto& v) { return v.group == g; })) << g;
  for (int p : {16, 32, 64, 128}) EXPECT_TRUE(covers([&](auto& v) { return v.page == p; })) << p;
  for (auto l : {spec::KvLayout::kNHD, spec::KvLayout::kHND})
    EXPECT_TRUE(covers([&](auto& v) { return v.layout == l; }));
  for (auto m : {spec::MaskMode::kNone, spec::MaskMode::kCustom})
    EXPECT_TRUE(covers([&](auto& v) { return v.mask == m; }));
  for (uint32_t f : {feature::kSinks, feature::kSlidingWindow, feature::kScalePointers, feature::kRaggedQ})
    EXPECT_TRUE(covers([&](auto& v) { return (v.features & f) != 0; })) << f;
  const DType triples[][3] = {{DType::kFloat16, DType::kFloat16, DType::kFloat16},
                              {DType::kBFloat16, DType::kBFloat16, DType::kBFloat16},
                              {DType::kFloat16, DType::kFloat8E4M3, DType::kFloat16},
                              {DType::kBFloat16, DType::kFloat8E4M3, DType::kBFloat16},
                              {DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E4M3}};
  for (const auto& t : triples)
    EXPECT_TRUE(covers([&](auto& v) { return v.q == t[0] && v.kv == t[1] && v.out == t[2]; }))
        << dtype_name(t[0]) << "/" << dtype_name(t[1]) << "/" << dtype_name(t[2]);
}

TEST(VariantMatrix, XqaVariantsCompileForEveryArch) {
  std::vector<KernelSpec> specs;
  for (const char* a : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"})
    for (const auto& v : xqa_variants()) {
      KernelSpec s;
      s.family = spec::OpFamily::kXqa;
      s.set_head_dim(v.head_dim);
      s.group_size = v.group;
      s.page_size = v.page;
      s.layout = v.layout;
      s.q_dtype = v.q;
      s.kv_dtype = v.kv;
      s.out_dtype = v.out;
      s.mask = v.mask;
      s.features = v.features;
      s.arch = Arch::parse(a);
      specs.push_back(s);
    }
  for (const KernelSpec& s : specs) EXPECT_EQ(KernelSpec::from_name(s.name()), s) << s.name();
  const auto t0 = std::chrono::steady_clock::now();
  check_and_print(compile_all(specs), "xqa variant matrix:");
  std::printf("  %zu compiles in %.1f s\n", specs.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(VariantMatrix, DecodeVariantsCompileForEveryArch) {
  std::vector<KernelSpec> base;
  auto add = [&](DType q, DType kv, int hd, int g, spec::KvLayout l, spec::PosEncoding pos, uint32_t f) {
    KernelSpec s;
    s.family = spec::OpFamily::kDecode;
    s.q_dtype = s.out_dtype = q;
    s.kv_dtype = kv;
    s.set_head_dim(hd);
    s.group_size = g;
    s.layout = l;
    s.pos_encoding = pos;
    s.features = f;
    base.push_back(s);
  };
  using L = spec::KvLayout;
  using P = spec::PosEncoding;
  add(DType::kBFloat16, DType::kBFloat16, 128, 4, L::kNHD, P::kRopeLlama, 0);
  add(DType::kFloat16, DType::kFloat16, 64, 8, L::kHND, P::kAlibi, 0);
  add(DType::kBFloat16, DType::kBFloat16, 128, 1, L::kNHD, P::kNone, feature::kSoftCap | feature::kReturnLse);
  add(DType::kFloat16, DType::kFloat16, 256, 4, L::kNHD, P::kNone, feature::kSlidingWindow);
  add(DType::kBFloat16, DType::kFloat8E5M2, 128, 8, L::kNHD, P::kNone, 0);
  add(DType::kFloat16, DType::kFloat8E5M2, 128, 4, L::kHND, P::kRopeLlama, feature::kReturnLse);
  add(DType::kBFloat16, DType::kFloat8E4M3, 128, 8, L::kHND, P::kRopeLlama,
      feature::kSoftCap | feature::kSlidingWindow | feature::kReturnLse);
  std::vector<KernelSpec> specs;
  for (const char* a : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"})
    for (KernelSpec s : base) {
      s.arch = Arch::parse(a);
      specs.push_back(s);
    }
  for (const KernelSpec& s : specs) EXPECT_EQ(KernelSpec::from_name(s.name()), s) << s.name();
  check_and_print(compile_all(specs), "decode variants:");
}

// Head dims 384 and 512: the split-D kernel (warps split the output dims) on
// every arch, without spills, over both ops' features: fp8 KV (direct and, with
// RoPE, widened), fp8 output, sinks, windows, scale pointers, HND/NHD, pages
// 16-128, groups 1-16, ALiBi, soft cap and LSE.
TEST(VariantMatrix, SplitDHeadDimsCompileForEveryArch) {
  using L = spec::KvLayout;
  using P = spec::PosEncoding;
  constexpr DType f16 = DType::kFloat16, b16 = DType::kBFloat16, e4 = DType::kFloat8E4M3, e5 = DType::kFloat8E5M2;
  struct V {
    spec::OpFamily family;
    int head_dim, group, page;
    L layout;
    DType q, kv, out;
    P pos;
    uint32_t features;
  };
  const spec::OpFamily x = spec::OpFamily::kXqa, d = spec::OpFamily::kDecode;
  const V variants[] = {
      {x, 512, 8, 32, L::kNHD, b16, b16, b16, P::kNone, 0},
      {x, 512, 16, 16, L::kHND, f16, e4, f16, P::kNone, feature::kSinks | feature::kSlidingWindow},
      {x, 384, 4, 64, L::kNHD, b16, e4, e4, P::kNone, feature::kScalePointers},
      {x, 384, 1, 128, L::kHND, f16, f16, f16, P::kNone, feature::kSinks},
      {d, 512, 4, 0, L::kNHD, b16, b16, b16, P::kRopeLlama, feature::kReturnLse | feature::kSlidingWindow},
      {d, 512, 8, 0, L::kHND, f16, e5, f16, P::kRopeLlama, feature::kReturnLse},
      {d, 384, 2, 0, L::kNHD, b16, e4, b16, P::kAlibi, feature::kSoftCap | feature::kReturnLse},
  };
  std::vector<KernelSpec> specs;
  for (const char* a : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"})
    for (const V& v : variants) {
      KernelSpec s;
      s.family = v.family;
      s.set_head_dim(v.head_dim);
      s.group_size = v.group;
      s.page_size = v.page;
      s.layout = v.layout;
      s.q_dtype = v.q;
      s.kv_dtype = v.kv;
      s.out_dtype = v.out;
      s.pos_encoding = v.pos;
      s.features = v.features;
      s.arch = Arch::parse(a);
      specs.push_back(s);
    }
  for (const KernelSpec& s : specs) EXPECT_EQ(KernelSpec::from_name(s.name()), s) << s.name();
  check_and_print(compile_all(specs), "split-D (head_dim 384/512) variants:");
}

// Speculative decoding with head_dim <= 256: the kernels that also carry split-M
// (64 query rows per CTA over one CTA ring, decode_split_m.cuh) on every arch,
// without spills, over the features xqa gives them: fp8 KV and output, ragged
// drafts, sinks, windows, scale pointers, HND/NHD, pages 16-128, groups 2-64.
TEST(VariantMatrix, SplitMSpecDecodeCompilesForEveryArch) {
  using L = spec::KvLayout;
  constexpr DType f16 = DType::kFloat16, b16 = DType::kBFloat16, e4 = DType::kFloat8E4M3;
  const XqaVariant variants[] = {
      {128, 8, 32, L::kNHD, b16, b16, b16, spec::MaskMode::kCustom, 0},
      {128, 8, 32, L::kHND, b16, e4, b16, spec::MaskMode::kCustom, feature::kRaggedQ},
      {64, 16, 16, L::kNHD, f16, f16, f16, spec::MaskMode::kCustom, feature::kSinks | feature::kSlidingWindow},
      {256, 4, 64, L::kHND, b16, b16, b16, spec::MaskMode::kCustom, feature::kRaggedQ | feature::kScalePointers},
      {192, 8, 128, L::kNHD, f16, e4, e4, spec::MaskMode::kCustom, feature::kSinks},
      {32, 64, 32, L::kNHD, b16, e4, b16, spec::MaskMode::kCustom, 0},
      {96, 2, 32, L::kNHD, b16, b16, b16, spec::MaskMode::kCustom, feature::kSlidingWindow},
  };
  std::vector<KernelSpec> specs;
  for (const char* a : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"})
    for (const XqaVariant& v : variants) {
      KernelSpec s;
      s.family = spec::OpFamily::kXqa;
      s.set_head_dim(v.head_dim);
      s.group_size = v.group;
      s.page_size = v.page;
      s.layout = v.layout;
      s.q_dtype = v.q;
      s.kv_dtype = v.kv;
      s.out_dtype = v.out;
      s.mask = v.mask;
      s.features = v.features;
      s.arch = Arch::parse(a);
      EXPECT_GT(ops::decode_tiling(s).split_m_stages, 0) << s.name();
      specs.push_back(s);
    }
  for (const KernelSpec& s : specs) EXPECT_EQ(KernelSpec::from_name(s.name()), s) << s.name();
  check_and_print(compile_all(specs), "split-M (spec decoding, 64 rows per CTA) variants:");
}

// The templates static_assert head_dim % 32 == 0 for fp8 KV without RoPE; a spec
// that reaches NVRTC must compile, so render (or the op) has to reject the rest.
TEST(VariantMatrix, Fp8KvHeadDimNotMultipleOf32IsRejectedBeforeNvrtc) {
  for (int hd : {48, 80, 112}) {
    KernelSpec s;
    s.family = spec::OpFamily::kXqa;
    s.q_dtype = s.out_dtype = DType::kBFloat16;
    s.kv_dtype = DType::kFloat8E4M3;
    s.set_head_dim(hd);
    s.group_size = 8;
    s.page_size = 32;
    s.arch = Arch{90, true};
    render::RenderedUnit unit;
    try {
      unit = render::render(s);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
      continue;
    }
    try {
      compile(s.name(), unit, s.arch);
    } catch (const CompileError& e) {
      ADD_FAILURE() << s.name() << ": render accepted it but NVRTC failed:\n" << e.log();
    }
  }
}

// Contiguous variants must not instantiate the paged address math (`if constexpr`):
// NVRTC used to warn "division by zero" on every contiguous decode compile.
TEST(CompileLog, ContiguousDecodeCompilesWithoutWarnings) {
  const KernelSpec s = proof_spec(Arch{90, true});
  const CompileResult r = compile(s.name(), render::render(s), s.arch);
  EXPECT_EQ(r.log.find("warning"), std::string::npos) << r.log;
}

TEST(CompileError, CarriesLogOptionsAndSource) {
  render::RenderedUnit unit;
  unit.entry = "broken";
  unit.source = "extern \"C\" __global__ void broken(int* p) {\n  *p = undeclared_identifier_xyz + ;\n}\n";
  const Arch arch{90, true};
  try {
    compile("broken.kernel", unit, arch);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCompileFailed);
    EXPECT_NE(e.log().find("undeclared_identifier_xyz"), std::string::npos) << e.log();
    EXPECT_NE(e.log().find("error"), std::string::npos) << e.log();
    EXPECT_NE(e.options().find("--gpu-architecture=sm_90a"), std::string::npos) << e.options();
    EXPECT_EQ(e.source(), unit.source);
    const std::string what = e.what();
    EXPECT_NE(what.find("broken.kernel"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_identifier_xyz"), std::string::npos) << what;
    EXPECT_NE(what.find("--gpu-architecture=sm_90a"), std::string::npos) << what;
  }
}

// NVRTC can fail with little or no log (a bad option such as the nonexistent
// target sm_80a, which Arch::parse now refuses): the error still says what NVRTC returned.
TEST(CompileError, FailureWithoutLogStillSaysWhy) {
  const KernelSpec s = proof_spec(Arch{80, true});
  try {
    compile(s.name(), render::render(s), s.arch);
    FAIL() << "sm_80a is not a real target";
  } catch (const CompileError& e) {
    EXPECT_FALSE(e.log().empty()) << e.what();
    EXPECT_NE(std::string(e.what()).find("NVRTC_ERROR"), std::string::npos) << e.what();
  }
}

TEST(CompileError, MissingIncludeIsACompileError) {
  render::RenderedUnit unit;
  unit.entry = "k";
  unit.source = "#include \"decode/no_such_file.cuh\"\nextern \"C\" __global__ void k() {}\n";
  try {
    compile("missing.include", unit, Arch{80, false});
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(e.log().find("no_such_file.cuh"), std::string::npos) << e.log();
    EXPECT_NE(e.options().find("--gpu-architecture=sm_80"), std::string::npos);
  }
}

// compile() is a pure function of the unit: it hands NVRTC the unit's headers, and no others.
TEST(CompileUnit, UsesTheHeadersTheUnitCarriesAndNoOthers) {
  render::RenderedUnit own;
  own.entry = "k";
  own.headers = std::make_shared<const std::vector<render::TemplateFile>>(
      std::vector<render::TemplateFile>{{"own/value.cuh", "constexpr int kValue = 7;\n"}});
  own.source = "#include \"own/value.cuh\"\nextern \"C\" __global__ void k(int* p) { *p = kValue; }\n";
  EXPECT_NO_THROW(compile("own.header", own, Arch{90, true}));

  render::RenderedUnit bare = render::render(proof_spec(Arch{90, true}));
  ASSERT_TRUE(bare.headers && !bare.headers->empty());
  bare.headers = nullptr;  // the templates are no longer fetched behind the unit's back
  try {
    compile("no.headers", bare, Arch{90, true});
    FAIL() << "compiled without the templates it includes";
  } catch (const CompileError& e) {
    EXPECT_NE(e.log().find("gqa_decode.cuh"), std::string::npos) << e.log();
  }
}

// The key's header hash: the same as template_hash() for a decode unit (so existing keys hold),
// and it moves with any header's content and any include dir's content, not with its path.
TEST(HeadersHash, FollowsContentNotPaths) {
  render::RenderedUnit u = render::render(proof_spec(Arch{90, true}));
  EXPECT_EQ(render::headers_hash(u), render::template_hash());
  render::RenderedUnit edited = u;
  auto files = *u.headers;  // another set: hashed from its files, not the process's memo
  const std::string edited_text = std::string(files.back().content) + "\n// edited\n";
  files.back().content = edited_text;
  edited.headers = std::make_shared<const std::vector<render::TemplateFile>>(files);
  EXPECT_NE(render::headers_hash(edited), render::headers_hash(u));
  const std::string same_text(u.headers->back().content);
  files.back().content = same_text;  // the same content in another set (other memory): the same hash
  edited.headers = std::make_shared<const std::vector<render::TemplateFile>>(files);
  EXPECT_EQ(render::headers_hash(edited), render::headers_hash(u));
  render::RenderedUnit with_dir = u;
  with_dir.include_dirs.push_back({"/opt/a/cccl", "hash-1"});
  EXPECT_NE(render::headers_hash(with_dir), render::headers_hash(u));
  render::RenderedUnit moved = with_dir;
  moved.include_dirs[0].path = "/elsewhere/cccl";
  EXPECT_EQ(render::headers_hash(moved), render::headers_hash(with_dir));
  moved.include_dirs[0].content_hash = "hash-2";
  EXPECT_NE(render::headers_hash(moved), render::headers_hash(with_dir));
}

TEST(ToolkitHeaders, TreeHashIsContentOnly) {
  attnjit::testing::TempDir a, b;
  for (const auto* d : {&a, &b}) {
    std::filesystem::create_directories(d->path() + "/cuda/x");
    std::ofstream(d->path() + "/cuda/ptx") << "ptx";
    std::ofstream(d->path() + "/cuda/x/y.h") << "y";
    std::ofstream(d->path() + "/other.h") << "not hashed";
  }
  std::ofstream(b.path() + "/other.h") << "changed outside cuda/ and nv/";
  EXPECT_EQ(hash_header_tree(a.path(), {"cuda", "nv"}), hash_header_tree(b.path(), {"cuda", "nv"}));
  std::ofstream(b.path() + "/cuda/x/y.h") << "Y";
  EXPECT_NE(hash_header_tree(a.path(), {"cuda", "nv"}), hash_header_tree(b.path(), {"cuda", "nv"}));
}

TEST(ToolkitHeaders, CcclIsFoundAndAddedOnce) {
  const render::IncludeDir& d = cccl_include_dir();
  EXPECT_TRUE(std::filesystem::is_regular_file(d.path + "/cuda/ptx")) << d.path;
  EXPECT_TRUE(std::filesystem::is_regular_file(d.path + "/cuda/barrier")) << d.path;
  EXPECT_EQ(d.content_hash.size(), 32u);
  EXPECT_EQ(&cccl_include_dir(), &d);  // hashed once per process
  render::RenderedUnit u;
  add_cccl(u);
  add_cccl(u);
  ASSERT_EQ(u.include_dirs.size(), 1u);
  EXPECT_EQ(u.include_dirs[0].content_hash, d.content_hash);
}

// The Hopper driver GPU test's kernels (cuda/ptx TMA + cuda/barrier, cluster DSMEM, PDL) compile
// here for sm_90a through compile() with CCCL; the H200 runs them.
TEST(ToolkitHeaders, HopperDriverKernelsCompileWithCcclForSm90a) {
  render::RenderedUnit u;
  u.source = attnjit::testing::kHopperKernels;
  add_cccl(u);
  const CompileResult r = compile("hopper.driver.kernels", u, Arch{90, true});
  EXPECT_FALSE(r.cubin.empty());
  EXPECT_EQ(r.options, join_options(nvrtc_options(Arch{90, true})));  // no machine path recorded
  for (const char* needle : {".entry cluster_probe", ".entry cluster_check", ".entry tma_tile",
                             "cp.async.bulk.tensor.2d", "mbarrier", "mapa.shared::cluster", "griddepcontrol.wait"})
    EXPECT_NE(r.ptx.find(needle), std::string::npos) << needle;
}

TEST(PtxasLog, ParsesResourceLines) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'attnjit_decode' for 'sm_90a'\n"
      "ptxas info    : Function properties for attnjit_decode\n"
      "    24 bytes stack frame, 8 bytes spill stores, 16 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 4096 bytes smem, 912 bytes cmem[0]\n";
  const Resources r = parse_ptxas_log(log);
  EXPECT_EQ(r.registers, 168);
  EXPECT_EQ(r.shared_bytes, 4096);
  EXPECT_EQ(r.stack_bytes, 24);
  EXPECT_EQ(r.spill_stores, 8);
  EXPECT_EQ(r.spill_loads, 16);

  const Resources none = parse_ptxas_log("");
  EXPECT_EQ(none.registers, -1);
  EXPECT_EQ(none.shared_bytes, -1);
  EXPECT_EQ(none.stack_bytes, -1);
  EXPECT_EQ(none.spill_stores, -1);
  EXPECT_EQ(none.spill_loads, -1);

  const Resources back = Resources::from_json(r.to_json());
  EXPECT_EQ(back.registers, r.registers);
  EXPECT_EQ(back.shared_bytes, r.shared_bytes);
  EXPECT_EQ(back.stack_bytes, r.stack_bytes);
  EXPECT_EQ(back.spill_stores, r.spill_stores);
  EXPECT_EQ(back.spill_loads, r.spill_loads);
  EXPECT_EQ(Resources::from_json(nlohmann::json::object()).registers, -1);
}

TEST(Nvrtc, VersionIsTheContentIdentityNeverTheFileName) {
  const std::string& v = nvrtc_version();
  EXPECT_TRUE(std::regex_match(v, std::regex(R"(\d+\.\d+ \(build-id [0-9a-f]{16,}\))"))) << v;
  EXPECT_EQ(v.rfind("13.", 0), 0u) << "built against CUDA 13: " << v;
  EXPECT_EQ(v.find("libnvrtc"), std::string::npos) << "a file name in the key: " << v;
  EXPECT_EQ(v.find('/'), std::string::npos) << "a path in the key: " << v;
  EXPECT_EQ(&nvrtc_version(), &v);
}

TEST(Nvrtc, IdentityIsTheSameForEveryOnDiskLayoutOfOneLibrary) {
  // Distributions lay NVRTC out differently (libnvrtc.so.13 here, a link chain to
  // libnvrtc.so.13.0.88 there, another prefix): one library, one key.
  const std::string lib = nvrtc_library_path();
  ASSERT_FALSE(lib.empty());
  const std::string id = library_identity(lib);
  ASSERT_EQ(id.rfind("build-id ", 0), 0u) << id;
  EXPECT_NE(nvrtc_version().find(id), std::string::npos) << nvrtc_version();

  ::attnjit::testing::TempDir tmp("nvrtc-layout");
  namespace fs = std::filesystem;
  const std::string real = fs::canonical(lib).string();
  fs::create_directory(tmp.sub("a"));
  fs::create_directory(tmp.sub("b"));
  // A symlink chain, as libnvrtc.so -> libnvrtc.so.13 -> libnvrtc.so.13.0.88.
  fs::create_symlink(real, tmp.sub("a/libnvrtc.so.13.0.88"));
  fs::create_symlink("libnvrtc.so.13.0.88", tmp.sub("a/libnvrtc.so.13"));
  fs::create_symlink("libnvrtc.so.13", tmp.sub("a/libnvrtc.so"));
  // A plain copy under another name in another folder.
  fs::copy_file(real, tmp.sub("b/libnvrtc-copy.so"));
  for (const char* p : {"a/libnvrtc.so", "a/libnvrtc.so.13", "a/libnvrtc.so.13.0.88", "b/libnvrtc-copy.so"}) {
    EXPECT_EQ(library_identity(tmp.sub(p)), id) << p;
  }
  // So the cache key is the same too.
  spec::KeyInputs in{"v", "t", "src", "13.0 (" + library_identity(tmp.sub("a/libnvrtc.so")) + ")", "opts"};
  spec::KeyInputs copy = in;
  copy.nvrtc_version = "13.0 (" + library_identity(tmp.sub("b/libnvrtc-copy.so")) + ")";
  EXPECT_EQ(spec::cache_key(spec::KernelSpec{}, in), spec::cache_key(spec::KernelSpec{}, copy));
}

TEST(Nvrtc, IdentityFallsBackToAContentHashWithoutABuildId) {
  ::attnjit::testing::TempDir tmp("nvrtc-id");
  const std::string a = tmp.sub("a.so"), b = tmp.sub("b.so"), c = tmp.sub("c.so");
  { std::ofstream(a) << "not an ELF file"; }
  { std::ofstream(b) << "not an ELF file"; }
  { std::ofstream(c) << "another file"; }
  EXPECT_EQ(elf_build_id(a), "");
  EXPECT_EQ(library_identity(a).rfind("xxh128 ", 0), 0u);
  EXPECT_EQ(library_identity(a), library_identity(b));
  EXPECT_NE(library_identity(a), library_identity(c));
  EXPECT_EQ(library_identity(tmp.sub("missing.so")), "");
}

TEST(Nvrtc, OptionsNameTheExactArch) {
  for (const char* a : {"sm_80", "sm_90", "sm_90a", "sm_100a", "sm_120"}) {
    const auto opts = nvrtc_options(Arch::parse(a));
    const std::string joined = join_options(opts);
    EXPECT_NE(joined.find(std::string("--gpu-architecture=") + a + " "), std::string::npos) << joined;
    EXPECT_NE(joined.find("--ptxas-options=-v"), std::string::npos) << "resources come from the ptxas log";
  }
  EXPECT_EQ(join_options({"a", "b c", "d"}), "a b c d");
  EXPECT_EQ(join_options({}), "");
}

}  // namespace
}  // namespace attnjit::compile
