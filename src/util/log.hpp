// The library's spdlog logger ("attnjit"), level from $ATTNJIT_LOG_LEVEL (default: warn).
#pragma once

#include <spdlog/spdlog.h>

namespace attnjit::util {

spdlog::logger& log();

}  // namespace attnjit::util
