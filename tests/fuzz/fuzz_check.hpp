// Shared checks of the fuzz targets: a broken property prints what broke and aborts,
// which libFuzzer reports as a crash with the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "attnjit/error.hpp"

namespace attnjit::fuzz {

[[noreturn]] inline void fail(const char* what, const std::string& detail) {
  // At most 500 characters: the input itself is saved by libFuzzer.
  std::fprintf(stderr, "fuzz property broken: %s: %.500s\n", what, detail.c_str());
  std::abort();
}

inline void check(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) fail(what, detail);
}

// An attnjit::Error is the only way out; its code must be one the surface documents.
inline void require_code(const Error& e, std::initializer_list<ErrorCode> allowed) {
  for (ErrorCode c : allowed)
    if (e.code() == c) return;
  fail("unexpected error code", std::string(to_string(e.code())) + ": " + e.what());
}

}  // namespace attnjit::fuzz
