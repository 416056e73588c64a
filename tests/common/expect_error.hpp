// expect_error: the call throws attnjit::Error with this code, and its message
// contains every needle (the argument's name, the expected and given values).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "attnjit/error.hpp"

namespace attnjit::testing {

inline void expect_error(const std::function<void()>& f, ErrorCode code, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected attnjit::Error(" << to_string(code) << "), nothing thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
  }
}

}  // namespace attnjit::testing
