// Tests of src/render/: golden translation units, unsupported specs, embedded templates.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/expect_error.hpp"
#include "attnjit/error.hpp"
#include "render/renderer.hpp"
#include "spec/kernel_spec.hpp"
#include "util/hash.hpp"

extern char** environ;

namespace attnjit::render {
namespace {

namespace fs = std::filesystem;
using spec::Arch;
using spec::KernelSpec;

using testing::expect_error;

std::string fixture_path(const std::string& name) {
  return std::string(ATTNJIT_SOURCE_DIR) + "/tests/fixtures/render/" + name + ".cu";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The golden variants: one per corner of the template's parameter space.
std::vector<std::pair<std::string, KernelSpec>> golden_specs() {
  std::vector<std::pair<std::string, KernelSpec>> v;
  KernelSpec d;  // the proof kernel
  d.family = spec::OpFamily::kDecode;
  d.q_dtype = d.kv_dtype = d.out_dtype = DType::kBFloat16;
  d.set_head_dim(128);
  d.group_size = 4;
  d.page_size = 0;
  d.arch = Arch{90, true};
  v.push_back({"decode_bf16_hd128_g4_contig_sm90a", d});

  KernelSpec x;
  x.family = spec::OpFamily::kXqa;
  x.q_dtype = x.out_dtype = DType::kFloat16;
  x.kv_dtype = DType::kFloat8E4M3;
  x.set_head_dim(64);
  x.group_size = 8;
  x.page_size = 16;
  x.layout = spec::KvLayout::kHND;
  x.arch = Arch{80, false};
  v.push_back({"xqa_fp16_kve4m3_hd64_g8_p16_hnd_sm80", x});

  KernelSpec m;
  m.family = spec::OpFamily::kXqa;
  m.q_dtype = m.kv_dtype = m.out_dtype = DType::kBFloat16;
  m.set_head_dim(256);
  m.group_size = 1;
  m.page_size = 128;
  m.layout = spec::KvLayout::kNHD;
  m.mask = spec::MaskMode::kCustom;
  m.features = spec::feature::kSinks | spec::feature::kSlidingWindow | spec::feature::kScalePointers;
  m.arch = Arch{100, true};
  v.push_back({"xqa_bf16_hd256_g1_p128_custom_sinks_window_scaleptr_sm100a", m});

  KernelSpec r;
  r.family = spec::OpFamily::kDecode;
  r.q_dtype = r.kv_dtype = r.out_dtype = DType::kFloat16;
  r.set_head_dim(128);
  r.group_size = 8;
  r.pos_encoding = spec::PosEncoding::kRopeLlama;
  r.features = spec::feature::kSoftCap | spec::feature::kReturnLse;
  r.arch = Arch{120, false};
  v.push_back({"decode_fp16_hd128_g8_rope_softcap_lse_sm120", r});
  return v;
}

// The stage count depends on this tuning knob; goldens are for the default.
class RenderGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("ATTNJIT_DECODE_RING_KB")) saved_ = v, had_ = true;
    unsetenv("ATTNJIT_DECODE_RING_KB");
  }
  void TearDown() override {
    if (had_) setenv("ATTNJIT_DECODE_RING_KB", saved_.c_str(), 1);
  }
  std::string saved_;
  bool had_ = false;
};

TEST_F(RenderGolden, MatchesFixturesByteForByte) {
  const char* update = std::getenv("ATTNJIT_UPDATE_GOLDEN");
  const bool write = update && std::string(update) == "1";
  for (const auto& [name, s] : golden_specs()) {
    const RenderedUnit u = render(s);
    const std::string path = fixture_path(name);
    if (write) {
      fs::create_directories(fs::path(path).parent_path());
      std::ofstream(path, std::ios::binary) << u.source;
      std::printf("wrote %s\n", path.c_str());
      continue;
    }
    const std::string golden = read_file(path);
    ASSERT_FALSE(golden.empty()) << "missing fixture " << path << " (run with ATTNJIT_UPDATE_GOLDEN=1)";
    EXPECT_EQ(u.source, golden) << "render of " << s.name() << " changed; if intended, rerun with "
                                << "ATTNJIT_UPDATE_GOLDEN=1 and review the diff of " << path;
  }
}

TEST_F(RenderGolden, RenderIsDeterministic) {
  for (const auto& [name, s] : golden_specs()) {
    EXPECT_EQ(render(s).source, render(s).source) << name;
    KernelSpec copy = KernelSpec::from_json(s.to_json());
    EXPECT_EQ(render(copy).source, render(s).source) << name;
  }
}

TEST_F(RenderGolden, RenderedUnitIsTiny) {
  for (const auto& [name, s] : golden_specs()) {
    const RenderedUnit u = render(s);
    const auto lines = std::count(u.source.begin(), u.source.end(), '\n');
    EXPECT_LT(lines, 20) << name << ":\n" << u.source;
    size_t count = 0;
    for (size_t p = u.source.find("extern \"C\" __global__"); p != std::string::npos;
         p = u.source.find("extern \"C\" __global__", p + 1))
      ++count;
    EXPECT_EQ(count, 1u) << name << ":\n" << u.source;
    EXPECT_EQ(u.entry, "attnjit_decode");
    EXPECT_NE(u.source.find(u.entry + "("), std::string::npos);
    EXPECT_NE(u.source.find(u.smem_symbol), std::string::npos);
    EXPECT_NE(u.source.find(s.name()), std::string::npos) << "the TU names its variant";
    EXPECT_NE(u.source.find("__grid_constant__"), std::string::npos);
    // Only template includes: nothing from the host.
    EXPECT_EQ(u.source.find("#include <"), std::string::npos);
  }
}

TEST_F(RenderGolden, SpecFieldsReachTheSource) {
  KernelSpec base = golden_specs()[0].second;
  const std::string src = render(base).source;
  auto changed = [&](std::function<void(KernelSpec&)> edit) {
    KernelSpec s = base;
    edit(s);
    return render(s).source != src;
  };
  EXPECT_TRUE(changed([](KernelSpec& s) { s.set_head_dim(64); }));
  EXPECT_TRUE(changed([](KernelSpec& s) { s.group_size = 8; }));
  EXPECT_TRUE(changed([](KernelSpec& s) { s.page_size = 32; }));
  EXPECT_TRUE(changed([](KernelSpec& s) { s.layout = spec::KvLayout::kHND; }));
  EXPECT_TRUE(changed([](KernelSpec& s) { s.kv_dtype = DType::kFloat8E5M2; }));
  EXPECT_TRUE(changed([](KernelSpec& s) { s.out_dtype = DType::kFloat16; }));
  EXPECT_TRUE(changed([](KernelSpec& s) { s.mask = spec::MaskMode::kCustom; }));
  EXPECT_TRUE(changed([](KernelSpec& s) { s.pos_encoding = spec::PosEncoding::kAlibi; }));
  for (uint32_t bit : {spec::feature::kSoftCap, spec::feature::kSlidingWindow, spec::feature::kSinks,
                       spec::feature::kReturnLse, spec::feature::kScalePointers, spec::feature::kRaggedQ})
    EXPECT_TRUE(changed([bit](KernelSpec& s) { s.features |= bit; })) << bit;
}

TEST(Render, UnsupportedSpecsThrowNamingTheProblem) {
  KernelSpec base = golden_specs()[1].second;  // xqa fp16/e4m3 hd64 p16
  auto with = [&](std::function<void(KernelSpec&)> edit) {
    KernelSpec s = base;
    edit(s);
    return s;
  };
  expect_error([&] { render(with([](KernelSpec& s) { s.set_head_dim(72); })); }, ErrorCode::kUnsupported,
               {"head_dim", "72"});
  expect_error([&] { render(with([](KernelSpec& s) { s.set_head_dim(272); })); }, ErrorCode::kUnsupported,
               {"head_dim", "272"});
  expect_error([&] { render(with([](KernelSpec& s) { s.set_head_dim(0); })); }, ErrorCode::kUnsupported,
               {"head_dim"});
  // MLA-style unequal head dims are a spec the decode family's can_implement refuses.
  expect_error([&] { render(with([](KernelSpec& s) { s.head_dim_qk = 576, s.head_dim_vo = 512; })); },
               ErrorCode::kUnsupported, {"hd576x512", "head_dim_qk == head_dim_vo"});
  expect_error([&] { render(with([](KernelSpec& s) { s.page_size = 24; })); }, ErrorCode::kUnsupported,
               {"page_size", "24"});
  expect_error([&] { render(with([](KernelSpec& s) { s.group_size = 0; })); }, ErrorCode::kUnsupported,
               {"group_size 0"});
  expect_error([&] { render(with([](KernelSpec& s) { s.page_size = -16; })); }, ErrorCode::kUnsupported,
               {"page_size -16"});
  expect_error([&] { render(with([](KernelSpec& s) { s.arch = {75, false}; })); }, ErrorCode::kUnsupported,
               {"sm_80"});
  expect_error([&] { render(with([](KernelSpec& s) { s.q_dtype = DType::kFloat8E5M2; })); },
               ErrorCode::kUnsupported, {"q dtype fp8_e5m2"});
  expect_error([&] { render(with([](KernelSpec& s) { s.mask = static_cast<spec::MaskMode>(9); })); },
               ErrorCode::kUnsupported, {"mask"});
  expect_error([&] { render(with([](KernelSpec& s) { s.features |= 1u << 13; })); }, ErrorCode::kUnsupported,
               {"feature bits"});
  expect_error([&] { render(with([](KernelSpec& s) { s.features |= spec::feature::kKTokenScale; })); },
               ErrorCode::kUnsupported, {"ktokscale/vtokscale take int8/int4"});
  expect_error([&] { render(with([](KernelSpec& s) { s.features |= spec::feature::kSharedPrefix; })); },
               ErrorCode::kUnsupported, {"prefill family"});
  // Bit 5 was the removed CUDA-core tile's: a spec carrying it is refused, not run otherwise.
  expect_error([&] { render(with([](KernelSpec& s) { s.features |= 1u << 5; })); }, ErrorCode::kUnsupported,
               {"feature bits"});
  expect_error([&] { render(with([](KernelSpec& s) { s.backend = spec::Backend::kTrtllmGen; })); },
               ErrorCode::kUnsupported, {"trtllmgen", "xqa backend"});
  expect_error([&] { render(with([](KernelSpec& s) { s.q_dtype = DType::kInt8; })); }, ErrorCode::kUnsupported,
               {"int8"});
  expect_error([&] { render(with([](KernelSpec& s) { s.kv_dtype = DType::kFloat32; })); },
               ErrorCode::kUnsupported, {"fp32"});
}

TEST(Templates, EmbeddedFilesAreThere) {
  const auto& files = template_files();
  std::vector<std::string> paths;
  for (const auto& f : files) {
    paths.emplace_back(f.path);
    EXPECT_FALSE(f.content.empty()) << f.path;
    EXPECT_EQ(f.path.find('\\'), std::string::npos);
    EXPECT_NE(f.path.front(), '/') << "paths are relative to templates/";
  }
  for (const char* want : {"common/dtype.cuh", "decode/gqa_decode.cuh", "decode/decode_params.cuh"})
    EXPECT_NE(std::find(paths.begin(), paths.end(), want), paths.end()) << want;
  // The embedded copy matches the tree it was built from (when nobody overrides it).
  if (!std::getenv("ATTNJIT_TEMPLATE_DIR"))
    for (const auto& f : files) {
      const std::string on_disk = read_file(std::string(ATTNJIT_SOURCE_DIR) + "/templates/" + std::string(f.path));
      if (!on_disk.empty()) EXPECT_EQ(f.content, on_disk) << f.path << " differs from the source tree (stale build?)";
    }
}

TEST(Templates, HashIsStableAnd32Hex) {
  const std::string& h = template_hash();
  EXPECT_EQ(h.size(), 32u);
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos) << h;
  EXPECT_EQ(&template_hash(), &h);
  EXPECT_EQ(template_hash(), h);
  util::KeyEncoder e;
  for (const auto& f : template_files()) e.field(f.path, f.content);
  EXPECT_EQ(e.hex(), h) << "the hash covers every path and content, in order";
}

// --- ATTNJIT_TEMPLATE_DIR: template_files() caches in a static, so the override is
// checked in a fresh process (this binary re-executed with a filter on the probe below).

constexpr const char* kProbeEnv = "ATTNJIT_RENDER_TEST_PROBE";

// The child's body; registered (below) only when kProbeEnv is set.
void template_dir_probe() {
  const std::string m = std::getenv(kProbeEnv);
  if (m == "good") {
    const auto& files = template_files();
    bool marked = false;
    for (const auto& f : files)
      if (f.path == "common/dtype.cuh") marked = f.content.find("// probe marker") != std::string::npos;
    EXPECT_TRUE(marked) << "the override dir's dtype.cuh was not used";
    const char* embedded_hash = std::getenv("ATTNJIT_RENDER_TEST_EMBEDDED_HASH");
    ASSERT_NE(embedded_hash, nullptr);
    EXPECT_NE(template_hash(), embedded_hash);
    for (const auto& f : files) EXPECT_EQ(f.path.find(".txt"), std::string::npos) << "only .cuh files: " << f.path;
    EXPECT_TRUE(std::is_sorted(files.begin(), files.end(),
                               [](const TemplateFile& a, const TemplateFile& b) { return a.path < b.path; }));
  } else if (m == "stray-include") {
    expect_error([] { template_files(); }, ErrorCode::kInvalidArgument,
                 {"common/mma.cuh includes \"common/knob.h\"", "self-contained"});
  } else if (m == "cccl-include") {
    bool found = false;
    for (const auto& f : template_files())
      if (f.path == "common/mma.cuh") found = f.content.find("#include <cuda/ptx>") != std::string::npos;
    EXPECT_TRUE(found) << "the override with a CCCL include was not read";
  } else if (m == "toolkit-include") {
    expect_error([] { template_files(); }, ErrorCode::kInvalidArgument,
                 {"common/mma.cuh includes <cuda_fp16.h>", "self-contained"});
  } else if (m == "params-changed") {
    expect_error([] { template_files(); }, ErrorCode::kInvalidArgument,
                 {"decode/decode_params.cuh differs", "rebuild"});
  } else if (m == "missing") {
    expect_error([] { template_files(); }, ErrorCode::kInvalidArgument, {"ATTNJIT_TEMPLATE_DIR", "not a directory"});
  } else {
    FAIL() << "unknown probe mode " << m;
  }
}

class TemplateDirProbe : public ::testing::Test {
 public:
  void TestBody() override {
    template_dir_probe();
    // Proof that the probe ran at all (a filter matching nothing also exits 0).
    if (!HasFailure()) std::ofstream(std::getenv("ATTNJIT_RENDER_TEST_PROBE_OUT")) << "ok";
  }
};

const bool kProbeRegistered = [] {
  if (!std::getenv(kProbeEnv)) return false;
  ::testing::RegisterTest("TemplateDirProbe", "ChildOnly", nullptr, nullptr, __FILE__, __LINE__,
                          []() -> ::testing::Test* { return new TemplateDirProbe; });
  return true;
}();

// Runs this test binary with the probe filter and extra environment; returns the exit
// status, or -2 when the probe did not run.
int run_probe(std::vector<std::string> extra_env) {
  char out_tmpl[] = "/tmp/attnjit-render-probe-XXXXXX";
  const int fd = mkstemp(out_tmpl);
  if (fd < 0) return -1;
  close(fd);
  extra_env.push_back(std::string("ATTNJIT_RENDER_TEST_PROBE_OUT=") + out_tmpl);
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("ATTNJIT_TEMPLATE_DIR=", 0) == 0 || kv.rfind("GTEST_", 0) == 0) continue;
    env_store.push_back(kv);
  }
  for (const auto& kv : extra_env) env_store.push_back(kv);
  std::vector<char*> envp;
  for (auto& kv : env_store) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=TemplateDirProbe.ChildOnly";
  std::string brief = "--gtest_brief=1";
  char* argv[] = {exe.data(), filter.data(), brief.data(), nullptr};
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    execve(exe.c_str(), argv, envp.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const bool ran = read_file(out_tmpl) == "ok";
  unlink(out_tmpl);
  if (!WIFEXITED(status)) return 128 + WTERMSIG(status);
  if (WEXITSTATUS(status) != 0) return WEXITSTATUS(status);
  return ran ? 0 : -2;  // -2: the child ran no probe
}

// A fresh folder holding the templates, with `extra(path)` appended to each file.
std::string copy_templates(const std::function<std::string(const std::string&)>& extra) {
  char tmpl[] = "/tmp/attnjit-render-test-XXXXXX";
  if (!mkdtemp(tmpl)) return "";
  const std::string dir = tmpl;
  for (const auto& f : template_files()) {
    const std::string path(f.path);
    fs::create_directories(fs::path(dir + "/" + path).parent_path());
    std::ofstream(dir + "/" + path, std::ios::binary) << f.content << extra(path);
  }
  return dir;
}

TEST(TemplateDirOverride, ReadsCuhFilesFromTheDirectory) {
  const std::string dir = copy_templates(
      [](const std::string& path) { return path == "common/dtype.cuh" ? "\n// probe marker\n" : ""; });
  ASSERT_FALSE(dir.empty());
  std::ofstream(dir + "/common/notes.txt") << "not a template";
  const int rc = run_probe({std::string(kProbeEnv) + "=good", "ATTNJIT_TEMPLATE_DIR=" + dir,
                            "ATTNJIT_RENDER_TEST_EMBEDDED_HASH=" + template_hash()});
  EXPECT_EQ(rc, 0) << "child probe failed (see its output above)";
  fs::remove_all(dir);
}

// An include outside the folder's .cuh files would be read from disk by NVRTC,
// unseen by the cache key (a stale cubin once a helper header changed); a changed
// params struct would not match what the host fills in.
TEST(TemplateDirOverride, RefusesIncludesOutsideTheSetAndAChangedParamsStruct) {
  for (const std::string mode : {"stray-include", "params-changed"}) {
    const std::string dir = copy_templates([&](const std::string& path) -> std::string {
      if (path == "common/mma.cuh" && mode == "stray-include") return "\n#include \"common/knob.h\"\n";
      if (path == "decode/decode_params.cuh" && mode == "params-changed")
        return "\nnamespace attnjit { struct Extra { int x; }; }\n";
      return "";
    });
    ASSERT_FALSE(dir.empty());
    std::ofstream(dir + "/common/knob.h") << "#define ATTNJIT_KNOB 1\n";
    const int rc = run_probe({std::string(kProbeEnv) + "=" + mode, "ATTNJIT_TEMPLATE_DIR=" + dir});
    EXPECT_EQ(rc, 0) << mode << ": child probe failed (see its output above)";
    fs::remove_all(dir);
  }
}

// CCCL's libcu++ (<cuda/ptx>, <cuda/barrier>, <nv/target>) may be included: a unit reaches it only
// through its include_dirs, whose content the key hashes. Other toolkit headers stay refused.
TEST(TemplateDirOverride, AllowsCcclIncludesOnly) {
  for (const std::string mode : {"cccl-include", "toolkit-include"}) {
    const std::string dir = copy_templates([&](const std::string& path) -> std::string {
      if (path != "common/mma.cuh") return "";
      return mode == "cccl-include" ? "\n#include <cuda/ptx>\n#include <nv/target>\n" : "\n#include <cuda_fp16.h>\n";
    });
    ASSERT_FALSE(dir.empty());
    const int rc = run_probe({std::string(kProbeEnv) + "=" + mode, "ATTNJIT_TEMPLATE_DIR=" + dir});
    EXPECT_EQ(rc, 0) << mode << ": child probe failed (see its output above)";
    fs::remove_all(dir);
  }
}

TEST(TemplateDirOverride, MissingDirectoryIsAClearError) {
  const int rc = run_probe({std::string(kProbeEnv) + "=missing",
                            "ATTNJIT_TEMPLATE_DIR=/nonexistent/attnjit-templates"});
  EXPECT_EQ(rc, 0) << "child probe failed (see its output above)";
}

}  // namespace
}  // namespace attnjit::render
