// CPU tests for src/driver/: behaviour without libcuda, and sanity with one (either machine).
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "attnjit/error.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::driver {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Runs `fn` and returns the Error code it throws; fails the test if it throws nothing.
template <typename Fn>
ErrorCode error_code_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "expected attnjit::Error";
  return ErrorCode::kInternal;
}

TEST(DriverTest, AvailabilityIsConsistent) {
  std::string reason;
  bool available = is_available(&reason);
  EXPECT_EQ(available, is_available());  // cached: the same answer every time
  if (available) {
    EXPECT_GT(device_count(), 0);
    EXPECT_GE(driver_version(), 12000);
    EXPECT_NO_THROW(require_available());
  } else {
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ(device_count(), 0);
    EXPECT_EQ(driver_version(), 0);
  }
}

TEST(DriverTest, ReasonMentionsLibcudaWhenMissing) {
  std::string reason;
  if (is_available(&reason)) GTEST_SKIP() << "a CUDA driver is present on this machine";
  // Without libcuda the reason names it and says what still works; with libcuda but no GPU
  // (cuInit failing), it names cuInit.
  EXPECT_TRUE(contains(reason, "libcuda.so.1") || contains(reason, "cuInit") ||
              contains(reason, "CUDA device"))
      << reason;
  if (contains(reason, "libcuda.so.1 not found")) {
    EXPECT_TRUE(contains(reason, "no NVIDIA driver")) << reason;
    EXPECT_TRUE(contains(reason, "compiling and the cache still work")) << reason;
  }
}

TEST(DriverTest, RequireAvailableThrowsNoDevice) {
  std::string reason;
  if (is_available(&reason)) GTEST_SKIP() << "a CUDA driver is present on this machine";
  try {
    require_available();
    FAIL() << "require_available() did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNoDevice);
    EXPECT_TRUE(contains(e.what(), reason)) << e.what();
    EXPECT_TRUE(contains(e.what(), "no device")) << e.what();
  }
}

TEST(DriverTest, EveryDeviceCallThrowsNoDeviceWithoutDriver) {
  if (is_available()) GTEST_SKIP() << "a CUDA driver is present on this machine";
  LaunchConfig cfg;
  cfg.grid[0] = 4;
  cfg.block[0] = 128;
  cfg.pdl = true;
  // Launching without a driver is an Error, never a call through a null function pointer.
  EXPECT_EQ(error_code_of([&] { launch(nullptr, cfg, nullptr); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { is_capturing(nullptr); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { current_device(); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { context_for_device(0); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { device_info(0); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { func_attributes(nullptr); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { set_max_dynamic_smem(nullptr, 1024); }), ErrorCode::kNoDevice);
  static const char kImage[] = "not a cubin";
  EXPECT_EQ(error_code_of([] { Module m(0, kImage); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { mem_alloc(256); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { DeviceBuffer b(256); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { EventTimer t; }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { ctx_sync(); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { stream_sync(nullptr); }), ErrorCode::kNoDevice);
  int host = 0;
  EXPECT_EQ(error_code_of([&] { memcpy_htod(0, &host, sizeof(host)); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([&] { memcpy_dtoh(&host, 0, sizeof(host)); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { memset_d8(0, 0, 4); }), ErrorCode::kNoDevice);
  EXPECT_EQ(error_code_of([] { memset_d32(0, 0, 1); }), ErrorCode::kNoDevice);
}

TEST(DriverTest, EmptyHandlesAreSafeWithoutDriver) {
  // Default-constructed RAII objects never touch the driver, so they work on any machine.
  Module m;
  EXPECT_EQ(m.handle(), nullptr);
  Module m2(std::move(m));
  m = std::move(m2);
  EXPECT_EQ(m.handle(), nullptr);

  DeviceBuffer a;
  EXPECT_EQ(a.get(), 0u);
  EXPECT_EQ(a.ptr(), nullptr);
  EXPECT_EQ(a.bytes(), 0u);
  DeviceBuffer b(std::move(a));
  a = std::move(b);
  a = std::move(a);  // self-move keeps it empty
  EXPECT_EQ(a.get(), 0u);
  mem_free(0);  // noexcept and a no-op
}

TEST(DriverTest, FunctionOnEmptyModuleIsInvalidArgument) {
  if (!is_available()) GTEST_SKIP() << "needs a driver to get past the availability check";
  Module m;
  EXPECT_EQ(error_code_of([&] { m.function("k"); }), ErrorCode::kInvalidArgument);
}

TEST(DriverTest, CheckThrowsDriverErrorNamingTheCall) {
  EXPECT_NO_THROW(check(CUDA_SUCCESS, "cuNothing"));
  try {
    check(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc(64 bytes)");
    FAIL() << "check() did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDriver);
    EXPECT_TRUE(contains(e.what(), "cuMemAlloc(64 bytes)")) << e.what();
    if (is_available()) {
      EXPECT_TRUE(contains(e.what(), "CUDA_ERROR_INVALID_VALUE")) << e.what();
    } else {
      EXPECT_TRUE(contains(e.what(), "CUresult 1")) << e.what();
    }
  }
}

TEST(DriverTest, LaunchConfigDefaults) {
  LaunchConfig cfg;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cfg.grid[i], 1u);
    EXPECT_EQ(cfg.block[i], 1u);
  }
  EXPECT_EQ(cfg.smem_bytes, 0u);
  EXPECT_EQ(cfg.stream, nullptr);
  EXPECT_FALSE(cfg.pdl);
}

TEST(DriverTest, DeviceInfoOnGpuMachine) {
  if (!is_available()) GTEST_SKIP() << "no CUDA driver on this machine";
  DeviceInfo info = device_info(0);
  EXPECT_EQ(info.ordinal, 0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.sm_major, 7);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.total_mem, 0);
  EXPECT_EQ(error_code_of([] { device_info(device_count()); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([] { device_info(-1); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnjit::driver
