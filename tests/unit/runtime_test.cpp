// KernelRegistry: single-flight compiles, store hits across runtimes, the
// in-memory mode, and clear errors where a GPU is needed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/runtime.hpp"
#include "common/temp_dir.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit {
namespace {


spec::KernelSpec small_spec(int group = 4) {
  spec::KernelSpec s;
  s.family = spec::OpFamily::kDecode;
  s.set_head_dim(64);
  s.group_size = group;
  s.arch = spec::Arch::parse("sm_90a");
  return s;
}

TEST(RuntimeTest, ConcurrentRequestsForOneSpecCompileOnce) {
  RuntimeOptions o;
  testing::TempDir dir("runtime");
  o.cache_dir = dir.path();
  Runtime rt(o);
  const spec::KernelSpec s = small_spec();
  std::atomic<int> compiled{0};
  std::vector<std::thread> threads;
  std::vector<const runtime::Artifact*> seen(8, nullptr);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      runtime::Origin origin;
      seen[i] = &rt.registry().artifact(s, &origin);
      if (origin == runtime::Origin::kCompiled) ++compiled;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(compiled.load(), 1);
  EXPECT_EQ(rt.stats().compiles, 1);
  for (auto* a : seen) EXPECT_EQ(a, seen[0]);  // one artifact, shared
  EXPECT_FALSE(seen[0]->cubin.empty());
}

TEST(RuntimeTest, SecondRuntimeReadsTheStoreWithoutCompiling) {
  RuntimeOptions o;
  testing::TempDir dir("runtime");
  o.cache_dir = dir.path();
  std::string cubin, key;
  {
    Runtime first(o);
    const auto& a = first.registry().artifact(small_spec(8));
    cubin = a.cubin;
    key = a.key;
    EXPECT_EQ(first.stats().compiles, 1);
  }
  Runtime second(o);
  runtime::Origin origin;
  const auto& b = second.registry().artifact(small_spec(8), &origin);
  EXPECT_EQ(origin, runtime::Origin::kStore);
  EXPECT_EQ(second.stats().compiles, 0);
  EXPECT_EQ(second.stats().store_hits, 1);
  EXPECT_EQ(b.key, key);
  EXPECT_EQ(b.cubin, cubin);  // byte-identical
  EXPECT_GT(b.resources.registers, 0);
}

// A store hit reads the cubin, not the PTX (a launch needs none); ptx() reads it when asked.
TEST(RuntimeTest, StoreHitLeavesThePtxInTheStoreUntilAskedFor) {
  RuntimeOptions o;
  testing::TempDir dir("runtime");
  o.cache_dir = dir.path();
  std::string ptx;
  {
    Runtime first(o);
    const auto& a = first.registry().artifact(small_spec(8));
    ptx = a.ptx;
    ASSERT_NE(ptx.find(".entry"), std::string::npos);
    EXPECT_EQ(a.ptx_bytes, ptx.size());
    EXPECT_EQ(first.registry().ptx(small_spec(8)), ptx) << "compiled here: from memory";
  }
  Runtime second(o);
  const auto& b = second.registry().artifact(small_spec(8));
  EXPECT_TRUE(b.from_store);
  EXPECT_TRUE(b.ptx.empty());
  EXPECT_EQ(b.ptx_bytes, ptx.size());
  EXPECT_EQ(second.registry().ptx(small_spec(8)), ptx);
  // The row gone since its cubin was read: a clear error, not an empty PTX.
  ASSERT_TRUE(second.registry().store()->remove(b.key));
  try {
    second.registry().ptx(small_spec(8));
    ADD_FAILURE() << "no error for a row that is gone";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kStore);
    EXPECT_NE(std::string(e.what()).find("PTX is not available"), std::string::npos) << e.what();
  }
}

// A row whose checksum holds but whose recorded inputs are not this key's (an
// imported bundle, a key that missed an input) is never run: it is replaced.
TEST(RuntimeTest, StoreRowBuiltFromOtherInputsIsRecompiled) {
  RuntimeOptions o;
  testing::TempDir dir("runtime");
  o.cache_dir = dir.path();
  std::string key, source;
  {
    Runtime first(o);
    const auto& a = first.registry().artifact(small_spec(2));
    key = a.key;
    source = a.unit.source;
    auto* store = first.registry().store();
    auto row = store->get(key);
    ASSERT_TRUE(row);
    auto meta = nlohmann::json::parse(row->meta_json);
    meta["source"] = source + "// another kernel\n";
    row->meta_json = meta.dump();
    row->cubin = "not the kernel this key means";
    ASSERT_TRUE(store->remove(key));
    ASSERT_TRUE(store->put(*row));  // self-consistent: the checksum covers the new content
  }
  Runtime second(o);
  runtime::Origin origin;
  const auto& b = second.registry().artifact(small_spec(2), &origin);
  EXPECT_EQ(origin, runtime::Origin::kCompiled);
  EXPECT_EQ(second.stats().compiles, 1);
  EXPECT_NE(b.cubin, "not the kernel this key means");
  auto row = second.registry().store()->get(key);
  ASSERT_TRUE(row) << "the compiled kernel replaced the row";
  EXPECT_EQ(nlohmann::json::parse(row->meta_json).value("source", ""), source);
}

TEST(RuntimeTest, WithoutStoreCompilesInMemory) {
  RuntimeOptions o;
  o.use_store = false;
  Runtime rt(o);
  runtime::Origin origin;
  rt.registry().artifact(small_spec(2), &origin);
  EXPECT_EQ(origin, runtime::Origin::kCompiled);
  rt.registry().artifact(small_spec(2), &origin);
  EXPECT_EQ(origin, runtime::Origin::kMemory);
  EXPECT_EQ(rt.stats().cache_path, ":memory:");
}

TEST(RuntimeTest, KeyDependsOnArchAndSpec) {
  RuntimeOptions o;
  o.use_store = false;
  Runtime rt(o);
  spec::KernelSpec a = small_spec(), b = small_spec();
  b.arch = spec::Arch::parse("sm_90");
  EXPECT_NE(rt.registry().key_of(a), rt.registry().key_of(b));
  EXPECT_EQ(rt.registry().key_of(a), rt.registry().key_of(small_spec()));
  b = small_spec(8);
  EXPECT_NE(rt.registry().key_of(a), rt.registry().key_of(b));
}

TEST(RuntimeTest, LaunchPathWithoutGpuSaysSo) {
  if (driver::is_available()) GTEST_SKIP() << "a GPU is present";
  RuntimeOptions o;
  o.use_store = false;
  Runtime rt(o);
  try {
    rt.registry().kernel(small_spec(), 0, nullptr);
    FAIL() << "expected Error(kNoDevice)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNoDevice);
    EXPECT_NE(std::string(e.what()).find("libcuda"), std::string::npos) << e.what();
  }
}

TEST(RuntimeTest, CompileErrorsCarryLogOptionsAndSource) {
  RuntimeOptions o;
  o.use_store = false;
  Runtime rt(o);
  spec::KernelSpec s = small_spec();
  s.set_head_dim(72);  // not a multiple of 16: rejected before NVRTC, naming the problem
  try {
    rt.registry().artifact(s);
    FAIL() << "expected Error(kUnsupported)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("head_dim 72"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnjit
