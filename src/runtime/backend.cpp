#include "runtime/backend.hpp"

#include <fmt/format.h>

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "attnjit/error.hpp"

namespace attnjit::runtime {

namespace {

const render::Family& family_of(const spec::KernelSpec& s) {
  const render::Family* f = render::find_family(s.family);
  if (!f) throw Error(ErrorCode::kUnsupported, fmt::format("{}: no family registered for it", s.name()));
  return *f;
}

const render::BackendRow& row_for(const render::BackendTable& t, const spec::Arch& arch) {
  const render::BackendRow* fallback = nullptr;
  for (size_t i = 0; i < t.num_rows; ++i) {
    if (t.rows[i].sm == arch.sm) return t.rows[i];
    if (t.rows[i].sm == 0) fallback = &t.rows[i];
  }
  if (!fallback) throw Error(ErrorCode::kInternal, fmt::format("backend table has no row for {}", arch.str()));
  return *fallback;
}

bool verified(const render::BackendTable& t, spec::Backend b, const spec::Arch& arch) {
  for (size_t i = 0; i < t.num_verified; ++i)
    if (t.verified[i].backend == b && (t.verified[i].sm == 0 || t.verified[i].sm == arch.sm)) return true;
  return false;
}

// The reason is formatted only when asked for: auto selection runs on every launch.
bool supports(const render::Family& f, spec::Backend b, const spec::KernelSpec& s, std::string* why) {
  if (!verified(*f.backends, b, s.arch)) {
    if (why)
      *why = fmt::format("no {} {} kernel for {} has run correctly on a GPU yet", spec::to_string(b),
                         spec::to_string(s.family), s.arch.str());
    return false;
  }
  spec::KernelSpec with = s;
  with.backend = b;
  return f.can_implement(with, s.arch, why);
}

}  // namespace

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
  return supports(family_of(s), backend, s, why);
}

BackendDecision decide_backend(const render::Family& f, BackendChoice choice, const spec::KernelSpec& s) {
  BackendDecision d;
  std::string why;
  if (choice != BackendChoice::kAuto) {
    d.backend = choice == BackendChoice::kXqa ? spec::Backend::kXqa : spec::Backend::kTrtllmGen;
    if (!supports(f, d.backend, s, &why))
      throw Error(ErrorCode::kUnsupported, fmt::format("backend {}: cannot serve {}: {}", to_string(choice), s.name(), why));
    d.why = fmt::format("{} was asked for", to_string(choice));
    return d;
  }
  const render::BackendRow& row = row_for(*f.backends, s.arch);
  const char* measured_why = nullptr;
  const spec::Backend prefer =
      row.by_measurement && f.backends->measured_faster ? f.backends->measured_faster(s, &measured_why) : row.prefer;
  const std::string table = fmt::format("the table prefers {} on {} ({}{}{})", spec::to_string(prefer), s.arch.str(),
                                        row.source, measured_why ? ": " : "", measured_why ? measured_why : "");
  if (supports(f, prefer, s, &why)) {
    d.backend = prefer;
    d.why = table;
    return d;
  }
  // The table's choice cannot serve: xqa, the portable backend, if it can.
  std::string xqa_why;
  if (prefer != spec::Backend::kXqa && supports(f, spec::Backend::kXqa, s, &xqa_why)) {
    d.backend = spec::Backend::kXqa;
    d.why = fmt::format("{}, but {}; using xqa", table, why);
    return d;
  }
  throw Error(ErrorCode::kUnsupported, fmt::format("backend auto: no backend serves {}: {}", s.name(),
                                                   xqa_why.empty() ? why : xqa_why));
}

namespace {

// Resolution is a pure function of the spec (without its backend) and the choice:
// the tables are static and can_implement reads only the spec. The launch path
// resolves each distinct spec once and afterwards pays one hash lookup.
class DecisionMemo {
 public:
  bool find(BackendChoice choice, const spec::KernelSpec& s, spec::Backend* out) const {
    std::shared_lock lock(mutex_);
    auto it = map_.find(keyed(choice, s));
    if (it == map_.end()) return false;
    *out = it->second;
    return true;
  }
  void remember(BackendChoice choice, const spec::KernelSpec& s, spec::Backend b) {
    std::unique_lock lock(mutex_);
    if (map_.size() >= kMaxEntries) map_.clear();  // a bound, not an LRU: specs in use come back in one launch
    map_.emplace(keyed(choice, s), b);
  }

 private:
  static constexpr size_t kMaxEntries = 4096;
  // The choice travels in the backend field, which resolution overwrites anyway.
  static spec::KernelSpec keyed(BackendChoice choice, spec::KernelSpec s) {
    s.backend = static_cast<spec::Backend>(static_cast<int>(choice));
    return s;
  }
  mutable std::shared_mutex mutex_;
  std::unordered_map<spec::KernelSpec, spec::Backend, spec::KernelSpecHash> map_;
};

DecisionMemo& decision_memo() {
  static DecisionMemo* memo = new DecisionMemo();  // never destroyed: launches may run during static teardown
  return *memo;
}

spec::Backend resolve_uncached(const render::Family& f, BackendChoice choice, const spec::KernelSpec& s) {
  if (choice == BackendChoice::kAuto) {
    const render::BackendRow& row = row_for(*f.backends, s.arch);
    const spec::Backend prefer =
        row.by_measurement && f.backends->measured_faster ? f.backends->measured_faster(s, nullptr) : row.prefer;
    if (supports(f, prefer, s, nullptr)) return prefer;
    if (prefer != spec::Backend::kXqa && supports(f, spec::Backend::kXqa, s, nullptr)) return spec::Backend::kXqa;
  } else {
    const spec::Backend b = choice == BackendChoice::kXqa ? spec::Backend::kXqa : spec::Backend::kTrtllmGen;
    if (supports(f, b, s, nullptr)) return b;
  }
  return decide_backend(f, choice, s).backend;  // throws, with the reason
}

}  // namespace

void select_backend(BackendChoice choice, spec::KernelSpec& s) {
  // A thread's last decision first: resolution is pure, so it never goes stale, and a
  // launch loop asks for the same spec each time (no hash, no lock).
  struct Last {
    bool valid = false;
    BackendChoice choice = BackendChoice::kAuto;
    spec::KernelSpec spec;  // with the caller's backend field, as asked
    spec::Backend backend = spec::Backend::kXqa;
  };
  thread_local Last last;
  if (last.valid && last.choice == choice && last.spec == s) {
    s.backend = last.backend;
    return;
  }
  spec::Backend b;
  if (!decision_memo().find(choice, s, &b)) {
    b = resolve_uncached(family_of(s), choice, s);  // a refusal throws and is not remembered
    decision_memo().remember(choice, s, b);
  }
  last = Last{true, choice, s, b};
  s.backend = b;
}

}  // namespace attnjit::runtime
