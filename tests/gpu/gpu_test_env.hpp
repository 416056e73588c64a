// Shared setup for GPU tests: skip cleanly without a GPU, one cache dir per run.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "driver/cuda_driver.hpp"

#define ATTNJIT_REQUIRE_GPU()                                              \
  do {                                                                     \
    std::string reason_;                                                   \
    if (!attnjit::driver::is_available(&reason_)) GTEST_SKIP() << "no GPU: " << reason_; \
    (void)attnjit::driver::current_device();                               \
  } while (0)
