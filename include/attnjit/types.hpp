// Enums shared by the op families (layouts, positional encodings, backends).
#pragma once

namespace attnjit {

enum class KvLayout { kNHD, kHND };
enum class PosEncodingMode { kNone, kRopeLlama, kAlibi };
// auto: the fastest backend that serves the call on this GPU; an explicit choice
// that cannot serve it is an error, never a silent fallback.
enum class Backend { kAuto, kXqa, kTrtllmGen };

}  // namespace attnjit
