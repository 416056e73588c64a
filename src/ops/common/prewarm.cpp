#include "ops/common/prewarm.hpp"

#include "attnjit/error.hpp"
#include "driver/cuda_driver.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit::ops {

PrewarmTarget prewarm_target(const std::string& arch) {
  if (!arch.empty()) return {spec::Arch::parse(arch), 0};
  std::string why;
  if (!driver::is_available(&why))
    throw Error(ErrorCode::kNoDevice, "prewarm without an arch needs a GPU to take it from (" + why +
                                          "); pass arch, e.g. \"sm_90a\"");
  const driver::DeviceCaps& caps = driver::device_caps(driver::current_device());
  return {spec::arch_for_device(caps.sm_major, caps.sm_minor), caps.sm_count};
}

spec::Arch prewarm_arch(const std::string& arch) { return prewarm_target(arch).arch; }

std::string prewarm_spec(Runtime& rt, const spec::KernelSpec& spec, const std::string& arch) {
  auto& registry = rt.registry();
  if (arch.empty()) registry.kernel(spec, driver::current_device(), nullptr);
  return registry.artifact(spec).name;
}

}  // namespace attnjit::ops
