#include "attnjit/error.hpp"
#include "attnjit/version.hpp"

namespace attnjit {

const char* version() noexcept { return ATTNJIT_VERSION_STRING; }

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kCompileFailed: return "compile failed";
    case ErrorCode::kDriver: return "driver error";
    case ErrorCode::kNoDevice: return "no device";
    case ErrorCode::kStore: return "store error";
    case ErrorCode::kNotPrewarmed: return "not prewarmed";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string("attnjit: ") + to_string(code) + ": " + message), code_(code) {}

CompileError::CompileError(const std::string& kernel_name, std::string log, std::string options,
                           std::string source)
    : Error(ErrorCode::kCompileFailed,
            "NVRTC failed to compile " + kernel_name + "\n--- log ---\n" + log +
                "\n--- options ---\n" + options),
      log_(std::move(log)),
      options_(std::move(options)),
      source_(std::move(source)) {}

}  // namespace attnjit
