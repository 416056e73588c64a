// The runtime on a GPU: a kernel miss during graph capture asks for a prewarm,
// a prewarmed kernel captures and replays, and a second process loads the cubin
// from the store without compiling.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <numeric>
#include <random>

#include "attnjit/decode.hpp"
#include "attnjit/error.hpp"
#include "attnjit/xqa.hpp"
#include "common/device_tensor.hpp"
#include "common/temp_dir.hpp"
#include "gpu_test_env.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit {
namespace {

using testing::DeviceTensor;

// A small xqa problem with an unusual shape, so no other test has loaded its kernel.
struct SmallXqa {
  static constexpr int B = 2, KH = 2, G = 3, D = 96, P = 16, L = 700;
  DeviceTensor q, k, v, out, pt, sl, ws, sem;
  XqaArgs args;
  SmallXqa() {
    std::mt19937 rng(3);
    const int pps = (L + P - 1) / P, pages = B * pps;
    q = DeviceTensor(DType::kFloat16, {B, 1, KH * G, D});
    out = DeviceTensor(DType::kFloat16, {B, 1, KH * G, D});
    k = DeviceTensor(DType::kFloat16, {pages, P, KH, D});
    v = DeviceTensor(DType::kFloat16, {pages, P, KH, D});
    q.upload_floats(testing::random_values(size_t(B) * KH * G * D, rng));
    k.upload_floats(testing::random_values(size_t(pages) * P * KH * D, rng));
    v.upload_floats(testing::random_values(size_t(pages) * P * KH * D, rng));
    std::vector<int> ids(pages);
    std::iota(ids.begin(), ids.end(), 0);
    pt = DeviceTensor(DType::kInt32, {B, pps});
    pt.upload_pod(ids);
    sl = DeviceTensor(DType::kUInt32, {B, 1});
    sl.upload_pod(std::vector<uint32_t>{uint32_t(L), uint32_t(L / 2)});
    ws = DeviceTensor(DType::kUInt8, {int64_t(std::max<size_t>(16, xqa_workspace_bytes(B, KH, G, 1, D, pps * P, 132)))});
    sem = DeviceTensor(DType::kUInt32, {int64_t(xqa_semaphore_count(B, KH, G, 1))});
    sem.zero();
    args.q = q.view;
    args.k_cache = k.view;
    args.v_cache = v.view;
    args.page_table = pt.view;
    args.seq_lens = sl.view;
    args.output = out.view;
    args.workspace_buffer = ws.view;
    args.semaphores = sem.view;
    args.num_kv_heads = KH;
    args.page_size = P;
  }
};

TEST(RuntimeGpu, CaptureMissAsksForPrewarmThenCapturedLaunchReplays) {
  ATTNJIT_REQUIRE_GPU();
  SmallXqa x;
  CUstream s = driver::stream_create();
  driver::begin_capture(s);
  try {
    xqa(x.args, reinterpret_cast<Stream>(s));
    ADD_FAILURE() << "a kernel miss during capture must throw kNotPrewarmed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotPrewarmed) << e.what();
    EXPECT_NE(std::string(e.what()).find("prewarm"), std::string::npos) << e.what();
  }
  driver::end_capture(s);

  // Outside capture: loads the kernel and gives the expected output.
  x.out.poison();
  xqa(x.args, reinterpret_cast<Stream>(s));
  driver::stream_sync(s);
  const auto expected = x.out.download();

  driver::begin_capture(s);
  xqa(x.args, reinterpret_cast<Stream>(s));  // warm: no compile, no allocation
  driver::CapturedGraph graph = driver::end_capture(s);
  x.out.poison();
  graph.launch(s);
  graph.launch(s);  // the semaphores reset themselves between replays
  driver::stream_sync(s);
  EXPECT_EQ(x.out.download(), expected);
  driver::stream_destroy(s);
}

spec::KernelSpec probe_spec() {
  const auto& caps = driver::device_caps(driver::current_device());
  spec::KernelSpec s;
  s.family = spec::OpFamily::kDecode;
  s.set_head_dim(80);
  s.group_size = 2;
  s.arch = spec::arch_for_device(caps.sm_major, caps.sm_minor);
  return s;
}

// prewarm_xqa without an arch loads the kernel on this GPU, so the very first
// launch may be captured: an engine prewarms at start-up, then captures graphs.
TEST(RuntimeGpu, PrewarmWithoutArchLetsTheFirstLaunchBeCaptured) {
  ATTNJIT_REQUIRE_GPU();
  testing::TempDir dir;
  RuntimeOptions options;
  options.cache_dir = dir.path();
  Runtime rt(options);  // its own registry: nothing loaded by earlier tests
  SmallXqa x;
  prewarm_xqa(x.args, "", &rt);
  CUstream s = driver::stream_create();
  driver::begin_capture(s);
  try {
    xqa(x.args, reinterpret_cast<Stream>(s), &rt);
  } catch (const Error& e) {
    driver::end_capture(s);
    driver::stream_destroy(s);
    FAIL() << "the prewarmed launch could not be captured: " << e.what();
  }
  driver::CapturedGraph graph = driver::end_capture(s);
  x.out.poison();
  graph.launch(s);
  driver::stream_sync(s);
  const auto captured = x.out.download();
  x.out.poison();
  xqa(x.args, reinterpret_cast<Stream>(s), &rt);
  driver::stream_sync(s);
  EXPECT_EQ(x.out.download(), captured);
  EXPECT_EQ(rt.stats().module_loads, 1);
  driver::stream_destroy(s);
}

// PyTorch captures in global mode, where a potentially unsafe driver call from any
// thread fails and invalidates the capture. single_decode's split scratch is looked up
// by stream id during the launch: that lookup must be allowed (found by the Python
// package's CUDA-graph test: cuStreamGetId failed with CAPTURE_UNSUPPORTED).
TEST(RuntimeGpu, GlobalModeCaptureOfASplitLaunchReplays) {
  ATTNJIT_REQUIRE_GPU();
  const int H = 8, KH = 2, D = 128, L = 8192;  // long enough to split
  std::mt19937 rng(5);
  DeviceTensor q(DType::kBFloat16, {H, D}), out(DType::kBFloat16, {H, D});
  DeviceTensor k(DType::kBFloat16, {L, KH, D}), v(DType::kBFloat16, {L, KH, D});
  q.upload_floats(testing::random_values(size_t(H) * D, rng));
  k.upload_floats(testing::random_values(size_t(L) * KH * D, rng));
  v.upload_floats(testing::random_values(size_t(L) * KH * D, rng));
  CUstream s = driver::stream_create();
  single_decode_with_kv_cache(q.view, k.view, v.view, out.view, {}, reinterpret_cast<Stream>(s));  // warm-up
  driver::stream_sync(s);
  const auto expected = out.download();
  driver::begin_capture(s, /*global_mode=*/true);
  try {
    single_decode_with_kv_cache(q.view, k.view, v.view, out.view, {}, reinterpret_cast<Stream>(s));
  } catch (const Error& e) {
    (void)driver::end_capture(s);
    driver::stream_destroy(s);
    FAIL() << "a launch during a global-mode capture failed: " << e.what();
  }
  driver::CapturedGraph graph = driver::end_capture(s);
  out.poison();
  graph.launch(s);
  driver::stream_sync(s);
  EXPECT_EQ(out.download(), expected);
  driver::stream_destroy(s);
}

TEST(RuntimeGpu, SecondProcessLoadsFromTheStoreWithoutCompiling) {
  ATTNJIT_REQUIRE_GPU();
  if (std::getenv("ATTNJIT_TEST_CHILD")) GTEST_SKIP() << "parent-only test";
  testing::TempDir dir("runtime-gpu");
  RuntimeOptions o;
  o.cache_dir = dir.path();
  {
    Runtime rt(o);
    rt.registry().kernel(probe_spec(), driver::current_device(), nullptr);
    EXPECT_EQ(rt.stats().compiles, 1);
  }
  const std::string cmd = "ATTNJIT_TEST_CHILD=1 ATTNJIT_CACHE_DIR=" + dir.path() +
                          " /proc/" + std::to_string(::getpid()) +
                          "/exe --gtest_filter=RuntimeGpu.ChildLoadsWithoutCompiling";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(RuntimeGpu, ChildLoadsWithoutCompiling) {
  if (!std::getenv("ATTNJIT_TEST_CHILD")) GTEST_SKIP() << "runs as the child of SecondProcessLoadsFromTheStoreWithoutCompiling";
  ATTNJIT_REQUIRE_GPU();
  Runtime rt;  // the cache folder comes from $ATTNJIT_CACHE_DIR
  rt.registry().kernel(probe_spec(), driver::current_device(), nullptr);
  EXPECT_EQ(rt.stats().compiles, 0);
  EXPECT_EQ(rt.stats().store_hits, 1);
  EXPECT_EQ(rt.stats().module_loads, 1);
}

}  // namespace
}  // namespace attnjit
