#include "runtime/backend.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"

namespace attnjit::runtime {

BackendChoice parse_backend_choice(const std::string& text) {
  if (text == "auto") return BackendChoice::kAuto;
  if (text == "xqa") return BackendChoice::kXqa;
  if (text == "trtllm-gen" || text == "trtllm_gen") return BackendChoice::kTrtllmGen;
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("backend: expected \"auto\", \"xqa\" or \"trtllm-gen\", got \"{}\"", text));
}

const char* to_string(BackendChoice c) {
  switch (c) {
    case BackendChoice::kAuto: return "auto";
    case BackendChoice::kXqa: return "xqa";
    case BackendChoice::kTrtllmGen: return "trtllm-gen";
  }
  return "?";
}

bool backend_supports(spec::Backend backend, const spec::KernelSpec& s, std::string* why) {
  // The reason is formatted only when asked for: auto selection runs on every launch.
  auto fail = [&](auto&& reason) {
    if (why) *why = reason();
    return false;
  };
  switch (backend) {
    case spec::Backend::kXqa:
      if (s.arch.sm < 80) return fail([] { return std::string("the xqa backend needs sm_80 or newer (mma.sync bf16, cp.async)"); });
      return true;
    case spec::Backend::kTrtllmGen:
      if (!(s.arch.sm == 90 && s.arch.arch_specific))
        return fail([&] {
          return fmt::format("the trtllm-gen backend needs sm_90a (TMA + wgmma); the target is {}", s.arch.str());
        });
      return fail([&] { return fmt::format("the trtllm-gen backend has no {} kernels yet", spec::to_string(s.family)); });
  }
  return fail([] { return std::string("unknown backend"); });
}

void select_backend(BackendChoice choice, spec::KernelSpec& s) {
  std::string why;
  if (choice == BackendChoice::kAuto) {
    // Prefer the arch-specialized backend where it serves the spec.
    if (backend_supports(spec::Backend::kTrtllmGen, s, nullptr)) {
      s.backend = spec::Backend::kTrtllmGen;
      return;
    }
    if (backend_supports(spec::Backend::kXqa, s, &why)) {
      s.backend = spec::Backend::kXqa;
      return;
    }
    throw Error(ErrorCode::kUnsupported, fmt::format("backend auto: no backend serves {}: {}", s.name(), why));
  }
  spec::Backend b = choice == BackendChoice::kXqa ? spec::Backend::kXqa : spec::Backend::kTrtllmGen;
  if (!backend_supports(b, s, &why))
    throw Error(ErrorCode::kUnsupported, fmt::format("backend {}: cannot serve {}: {}", to_string(choice),
                                                     s.name(), why));
  s.backend = b;
}

}  // namespace attnjit::runtime
