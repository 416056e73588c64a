// attnjit::Error: the one exception type every public entry point throws.
#pragma once

#include <stdexcept>
#include <string>

namespace attnjit {

enum class ErrorCode {
  kInvalidArgument,  // an argument is wrong: the message names it, expected vs given
  kUnsupported,      // valid request this build/arch/backend cannot serve
  kCompileFailed,    // NVRTC rejected the rendered source (see CompileError)
  kDriver,           // a CUDA driver call failed
  kNoDevice,         // no libcuda or no GPU: everything but launching still works
  kStore,            // the cubin store failed in a way it could not recover from
  kNotPrewarmed,     // a kernel miss during stream capture: prewarm this spec first
  kInternal,
};

const char* to_string(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// NVRTC failure: carries everything needed to reproduce it by hand.
class CompileError : public Error {
 public:
  CompileError(const std::string& kernel_name, std::string log, std::string options,
               std::string source);
  const std::string& log() const noexcept { return log_; }
  const std::string& options() const noexcept { return options_; }
  const std::string& source() const noexcept { return source_; }

 private:
  std::string log_;
  std::string options_;
  std::string source_;
};

}  // namespace attnjit
