// Launch attribute assembly (see launch_attributes.hpp).
#include "driver/launch_attributes.hpp"

#include <string>

#include "attnjit/error.hpp"

namespace attnjit::driver {

namespace {

[[noreturn]] void bad_cluster(const LaunchConfig& cfg, const std::string& expected) {
  auto dims = [](const unsigned (&d)[3]) {
    return std::to_string(d[0]) + "x" + std::to_string(d[1]) + "x" + std::to_string(d[2]);
  };
  throw Error(ErrorCode::kInvalidArgument, "launch: cluster: expected " + expected + ", given " +
                                               dims(cfg.cluster) + " for grid " + dims(cfg.grid));
}

}  // namespace

int launch_attributes(const LaunchConfig& cfg, CUlaunchAttribute (&attrs)[kMaxLaunchAttributes]) {
  int n = 0;
  const unsigned* c = cfg.cluster;
  if (c[0] != 1 || c[1] != 1 || c[2] != 1) {
    for (int i = 0; i < 3; ++i) {
      if (c[i] == 0) bad_cluster(cfg, "every dim at least 1");
      if (cfg.grid[i] % c[i] != 0) bad_cluster(cfg, "dims that divide the grid's");
    }
    const unsigned long long blocks = 1ull * c[0] * c[1] * c[2];
    if (blocks > kMaxNonPortableCluster)
      bad_cluster(cfg, "at most " + std::to_string(kMaxNonPortableCluster) + " blocks");
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = c[0];
    attrs[n].value.clusterDim.y = c[1];
    attrs[n].value.clusterDim.z = c[2];
    ++n;
  }
  if (cfg.pdl) {
    // Lets this kernel start while the previous one on the stream finishes (griddepcontrol).
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n].value.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  return n;
}

}  // namespace attnjit::driver
