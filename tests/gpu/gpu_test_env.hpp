// Shared setup for GPU tests: skip cleanly without a GPU, one cache dir per run.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"

// Like ATTNJIT_REQUIRE_GPU, but in prewarm mode (ATTNJIT_GPU_TEST_PREWARM=<arch>, no
// GPU) the test goes on and only compiles its kernels into the store, so that a
// GPU machine can start from a store built elsewhere.
#define ATTNJIT_REQUIRE_GPU_OR_PREWARM()                                   \
  do {                                                                     \
    if (const char* arch_ = attnjit::testing::gpu_test_prewarm_arch()) {   \
      std::printf("[prewarm mode, %s: compiling only, nothing is checked]\n", arch_); \
      break;                                                               \
    }                                                                      \
    ATTNJIT_REQUIRE_GPU();                                                 \
  } while (0)

#define ATTNJIT_REQUIRE_GPU()                                              \
  do {                                                                     \
    std::string reason_;                                                   \
    if (!attnjit::driver::is_available(&reason_)) GTEST_SKIP() << "no GPU: " << reason_; \
    (void)attnjit::driver::current_device();                               \
  } while (0)
