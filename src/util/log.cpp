#include "util/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace attnjit::util {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>(
        "attnjit", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    const char* env = std::getenv("ATTNJIT_LOG_LEVEL");
    l->set_level(env ? spdlog::level::from_str(env) : spdlog::level::warn);
    l->set_pattern("[attnjit %^%l%$] %v");
    return l;
  }();
  return *logger;
}

}  // namespace attnjit::util
