// Sets (or, with a null value, unsets) an environment variable for one scope and
// restores what was there before: the tuning-knob and store tests' guard.
#pragma once

#include <stdlib.h>

#include <string>

namespace attnjit::testing {

class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  // Only restores at scope end (the test sets the variable itself).
  explicit EnvGuard(const char* name) : name_(name) {
    if (const char* old = getenv(name)) old_ = old, had_ = true;
  }
  ~EnvGuard() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace attnjit::testing
