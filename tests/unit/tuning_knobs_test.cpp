// The decode tuning knobs (ATTNJIT_DECODE_TILE, ATTNJIT_DECODE_LAZY_RESCALE,
// ATTNJIT_DECODE_RING_KB): they reach the rendered source (so the cache key),
// respect page sizes and shared-memory limits, and their variants compile.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/env_guard.hpp"
#include "attnjit/error.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "ops/decode/decode_generator.hpp"
#include "ops/decode/decode_launch.hpp"
#include "render/renderer.hpp"

namespace attnjit {
namespace {

using testing::EnvGuard;

spec::KernelSpec xqa_spec(DType kv, int page, const char* arch = "sm_90a") {
  spec::KernelSpec s;
  s.family = spec::OpFamily::kXqa;
  s.kv_dtype = kv;
  s.set_head_dim(128);
  s.group_size = 8;
  s.page_size = page;
  s.arch = spec::Arch::parse(arch);
  return s;
}

TEST(TuningKnobs, DefaultsKeepTileBytesEqualWithLazyRescale) {
  unsetenv("ATTNJIT_DECODE_TILE");
  unsetenv("ATTNJIT_DECODE_LAZY_RESCALE");
  unsetenv("ATTNJIT_DECODE_RING_KB");
  auto u = render::render(xqa_spec(DType::kBFloat16, 32));
  EXPECT_EQ(u.launch.split_granule, 16);
  EXPECT_NE(u.source.find(", 232448, 16, true>"), std::string::npos) << u.source;
  EXPECT_EQ(ops::decode_tiling(xqa_spec(DType::kBFloat16, 32)).stages, 3);
  // fp8: 32-token tiles (the bytes of a 16-bit 16-token tile) in unpadded,
  // swizzled rows: three stages, and two CTAs still share an SM.
  EXPECT_EQ(render::render(xqa_spec(DType::kFloat8E4M3, 32)).launch.split_granule, 32);
  const auto fp8 = ops::decode_tiling(xqa_spec(DType::kFloat8E4M3, 32));
  EXPECT_EQ(fp8.stages, 3);
  EXPECT_LE(2 * (fp8.smem_bytes + 1024), 228 * 1024);
  // ...except where a page cannot hold a whole tile, or a spec-decode mask is on.
  EXPECT_EQ(render::render(xqa_spec(DType::kFloat8E4M3, 16)).launch.split_granule, 16);
  spec::KernelSpec masked = xqa_spec(DType::kFloat8E4M3, 64);
  masked.mask = spec::MaskMode::kCustom;
  EXPECT_EQ(render::render(masked).launch.split_granule, 16);
}

// The L2 prefetch size reaches the copies' PTX: by default 128 bytes for 16-bit (and int4)
// K/V and none for 8-bit, and the knob overrides either way.
TEST(TuningKnobs, L2PrefetchReachesTheCopies) {
  unsetenv("ATTNJIT_DECODE_L2_PREFETCH");
  EXPECT_EQ(ops::decode_tiling(xqa_spec(DType::kBFloat16, 32)).l2_prefetch, 128);
  const std::string fp8 = render::render(xqa_spec(DType::kFloat8E4M3, 32)).source;
  EXPECT_EQ(fp8.find("ATTNJIT_CP_ASYNC_L2_PREFETCH"), std::string::npos);
  {
    EnvGuard off("ATTNJIT_DECODE_L2_PREFETCH", "0");
    EXPECT_EQ(render::render(xqa_spec(DType::kBFloat16, 32)).source.find("ATTNJIT_CP_ASYNC_L2_PREFETCH"),
              std::string::npos);
  }
  EnvGuard knob("ATTNJIT_DECODE_L2_PREFETCH", "128");
  const auto spec = xqa_spec(DType::kFloat8E4M3, 32);
  const auto unit = render::render(spec);
  EXPECT_NE(unit.source.find("#define ATTNJIT_CP_ASYNC_L2_PREFETCH 128"), std::string::npos) << unit.source;
  const auto out = compile::compile(spec.name(), unit, spec.arch);
  EXPECT_FALSE(out.cubin.empty());
  EXPECT_NE(out.ptx.find("cp.async.cg.shared.global.L2::128B"), std::string::npos);
}

TEST(TuningKnobs, KnobsOverrideTheDefaults) {
  EnvGuard tile("ATTNJIT_DECODE_TILE", "16");
  EnvGuard lazy("ATTNJIT_DECODE_LAZY_RESCALE", "0");
  auto u = render::render(xqa_spec(DType::kFloat8E4M3, 32));
  EXPECT_EQ(u.launch.split_granule, 16);
  EXPECT_NE(u.source.find(", 16, false>"), std::string::npos) << u.source;
}

TEST(TuningKnobs, TileAndLazyRescaleReachTheSource) {
  EnvGuard tile("ATTNJIT_DECODE_TILE", "32");
  EnvGuard lazy("ATTNJIT_DECODE_LAZY_RESCALE", "1");
  auto u = render::render(xqa_spec(DType::kFloat8E4M3, 64));
  EXPECT_EQ(u.launch.split_granule, 32);
  EXPECT_NE(u.source.find(", 32, true>"), std::string::npos) << u.source;
  EXPECT_GE(ops::decode_tiling(xqa_spec(DType::kFloat8E4M3, 64)).stages, 2);  // still prefetches
  // 16-token pages cannot hold a 32-token tile: the knob falls back to 16.
  EXPECT_EQ(render::render(xqa_spec(DType::kFloat8E4M3, 16)).launch.split_granule, 16);
}

TEST(TuningKnobs, SharedMemoryStaysWithinEachArch) {
  for (const char* tile : {"16", "32"}) {
    EnvGuard t("ATTNJIT_DECODE_TILE", tile);
    for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"})
      for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3})
        for (int hd : {64, 128, 256}) {
          spec::KernelSpec s = xqa_spec(kv, 32, arch);
          s.set_head_dim(hd);
          auto t16 = ops::decode_tiling(s);
          EXPECT_LE(t16.smem_bytes, t16.smem_limit) << s.name() << " tile " << tile;
          EXPECT_GE(t16.stages, 1) << s.name();
        }
  }
}

TEST(TuningKnobs, ExperimentalVariantsCompile) {
  EnvGuard tile("ATTNJIT_DECODE_TILE", "32");
  EnvGuard lazy("ATTNJIT_DECODE_LAZY_RESCALE", "1");
  for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3}) {
    spec::KernelSpec s = xqa_spec(kv, 32);
    auto r = compile::compile(s.name(), render::render(s), s.arch);
    EXPECT_FALSE(r.cubin.empty());
    EXPECT_EQ(r.resources.spill_stores, 0) << s.name();
  }
}

// The host computes the kernel's shared memory to size the launch; the rendered
// TU static_asserts the same figure, so a drifting mirror fails every compile.
TEST(TuningKnobs, SharedMemoryMirrorIsCheckedAtCompile) {
  unsetenv("ATTNJIT_DECODE_TILE");
  const spec::KernelSpec s = xqa_spec(DType::kFloat8E4M3, 32);
  render::RenderedUnit u = render::render(s);
  const std::string want = "static_assert(Traits::kSmemBytes == " + std::to_string(u.launch.smem_bytes) + ",";
  const size_t at = u.source.find(want);
  ASSERT_NE(at, std::string::npos) << u.source;
  u.source.replace(at, want.size(),
                   "static_assert(Traits::kSmemBytes == " + std::to_string(u.launch.smem_bytes + 16) + ",");
  try {
    compile::compile(s.name(), u, s.arch);
    FAIL() << "a wrong shared-memory figure compiled";
  } catch (const CompileError& e) {
    EXPECT_NE(e.log().find("host and kernel disagree on shared memory"), std::string::npos) << e.log();
  }
}

// atoi once read "abc" as 0, "-1" as a negative ring, 3000000 KB overflowed int
// when multiplied by 1024, and an unsupported tile quietly meant 16.
TEST(TuningKnobs, BadValuesAreErrorsNamingTheVariable) {
  const struct {
    const char* name;
    const char* value;
  } cases[] = {{"ATTNJIT_DECODE_TILE", "abc"},         {"ATTNJIT_DECODE_TILE", "64"},
               {"ATTNJIT_DECODE_TILE", "24"},          {"ATTNJIT_DECODE_TILE", "32x"},
               {"ATTNJIT_DECODE_LAZY_RESCALE", "2"},   {"ATTNJIT_DECODE_LAZY_RESCALE", "yes"},
               {"ATTNJIT_DECODE_RING_KB", "-1"},       {"ATTNJIT_DECODE_RING_KB", "0"},
               {"ATTNJIT_DECODE_RING_KB", "3000000"},  {"ATTNJIT_DECODE_RING_KB", "99999999999999999999"},
               {"ATTNJIT_DECODE_RING_KB", " 105"},     {"ATTNJIT_DECODE_L2_PREFETCH", "100"},
               {"ATTNJIT_DECODE_L2_PREFETCH", "512"},  {"ATTNJIT_DECODE_L2_PREFETCH", "x"}};
  for (const auto& c : cases) {
    EnvGuard knob(c.name, c.value);
    try {
      render::render(xqa_spec(DType::kFloat8E4M3, 32));
      ADD_FAILURE() << c.name << "=" << c.value << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(std::string(c.name) + "='" + c.value + "'"), std::string::npos) << e.what();
    }
  }
  // Good values and an empty one (unset) still work.
  EnvGuard ring("ATTNJIT_DECODE_RING_KB", "70");
  EnvGuard tile("ATTNJIT_DECODE_TILE", "");
  EXPECT_EQ(render::render(xqa_spec(DType::kFloat8E4M3, 32)).launch.split_granule, 32);
}

// ATTNJIT_DECODE_SPLITS is read once per process, and a forked child inherits what its
// parent read: each value is tried in this binary run afresh (exec), which runs only
// SplitCountChild with the value in its environment.
int plan_splits_in_fresh_process(const char* value) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("ATTNJIT_DECODE_SPLITS", value, 1);
    setenv("ATTNJIT_TEST_SPLITS_CHILD", "1", 1);
    if (FILE* null = std::fopen("/dev/null", "w")) dup2(fileno(null), STDOUT_FILENO);
    execl("/proc/self/exe", "attnjit_unit_tests", "--gtest_filter=TuningKnobs.SplitCountChild", nullptr);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Exit 10: threw an Error naming the variable; 11: accepted; 13: planned 3 splits.
TEST(TuningKnobs, SplitCountChild) {
  if (!getenv("ATTNJIT_TEST_SPLITS_CHILD")) GTEST_SKIP() << "the child half of BadSplitCountsAreErrors";
  ops::DecodeShape shape;
  shape.batch = 1;
  shape.num_kv_heads = 8;
  shape.group = 4;
  shape.q_seq_len = 1;
  shape.max_seq_len = 4096;
  try {
    const auto plan = ops::plan_splits(shape, 132, 132, 16);
    _exit(plan.splits == 3 ? 13 : 11);
  } catch (const Error& e) {
    _exit(std::string(e.what()).find("ATTNJIT_DECODE_SPLITS") != std::string::npos ? 10 : 12);
  }
}

TEST(TuningKnobs, BadSplitCountsAreErrors) {
  const auto try_value = plan_splits_in_fresh_process;
  for (const char* bad : {"abc", "-1", "257", "100000000000", "4k"}) EXPECT_EQ(try_value(bad), 10) << bad;
  EXPECT_EQ(try_value("3"), 13);
}

// The launch metadata (threads, min blocks per SM) that the loaded kernel carries
// to launch_kernel is the generator's; the TU static_asserts it against the Traits,
// so a host figure that drifts from the kernel fails every compile.
TEST(TuningKnobs, LaunchMetadataMirrorIsCheckedAtCompile) {
  unsetenv("ATTNJIT_DECODE_TILE");
  for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3}) {
    const spec::KernelSpec s = xqa_spec(kv, 32);
    render::RenderedUnit u = render::render(s);
    EXPECT_EQ(u.launch.threads, 128);
    EXPECT_EQ(u.launch.min_blocks_per_sm, ops::decode_tiling(s).min_blocks);
    const std::string want = "Traits::kMinBlocks == " + std::to_string(u.launch.min_blocks_per_sm) + ",";
    const size_t at = u.source.find(want);
    ASSERT_NE(at, std::string::npos) << u.source;
    u.source.replace(at, want.size(), "Traits::kMinBlocks == " + std::to_string(u.launch.min_blocks_per_sm + 1) + ",");
    try {
      compile::compile(s.name(), u, s.arch);
      FAIL() << "a wrong min-blocks figure compiled";
    } catch (const CompileError& e) {
      EXPECT_NE(e.log().find("host and kernel disagree on launch metadata"), std::string::npos) << e.log();
    }
  }
}

}  // namespace
}  // namespace attnjit
