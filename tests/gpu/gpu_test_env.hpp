// Shared setup for GPU tests: skip cleanly without a GPU, one cache dir per run.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::testing {

// In prewarm mode (ATTNJIT_GPU_TEST_PREWARM=<arch>, no GPU) a test only compiles
// its kernels into the store, so that a GPU machine can start from a store built
// elsewhere. It checked nothing, so however its body ends it reports itself
// skipped, never passed; a failure while prewarming still fails it.
class PrewarmModeSkip {
 public:
  PrewarmModeSkip() : arch_(gpu_test_prewarm_arch()) {
    if (arch_) std::printf("[prewarm mode, %s: compiling only, nothing is checked]\n", arch_);
  }
  ~PrewarmModeSkip() {
    if (arch_ && !::testing::Test::HasFailure())
      GTEST_MESSAGE_AT_(__FILE__, __LINE__, "prewarm mode: kernels compiled into the store, nothing checked",
                        ::testing::TestPartResult::kSkip);
  }
  PrewarmModeSkip(const PrewarmModeSkip&) = delete;
  PrewarmModeSkip& operator=(const PrewarmModeSkip&) = delete;
  bool active() const { return arch_ != nullptr; }

 private:
  const char* arch_;
};

}  // namespace attnjit::testing

// Like ATTNJIT_REQUIRE_GPU, but in prewarm mode the test goes on (compiling only)
// and is reported skipped at its end. A statement at the top of a test body.
#define ATTNJIT_REQUIRE_GPU_OR_PREWARM()                                  \
  const ::attnjit::testing::PrewarmModeSkip attnjit_prewarm_mode_;        \
  if (!attnjit_prewarm_mode_.active()) ATTNJIT_REQUIRE_GPU()

#define ATTNJIT_REQUIRE_GPU()                                              \
  do {                                                                     \
    std::string reason_;                                                   \
    if (!attnjit::driver::is_available(&reason_)) GTEST_SKIP() << "no GPU: " << reason_; \
    (void)attnjit::driver::current_device();                               \
  } while (0)
