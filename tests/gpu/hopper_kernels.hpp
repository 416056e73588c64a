// Device code for the Hopper driver tests (cluster launch + PDL, a TMA tile load), shared by the
// GPU test that runs it and the CPU test that compiles it with NVRTC for sm_90a.
#pragma once

namespace attnjit::testing {

// Params mirror the host structs in tests/gpu/driver_hopper_gpu_test.cpp. The tensor map sits
// inside the __grid_constant__ Params: cp.async.bulk.tensor reads it from the param space.
constexpr const char* kHopperKernels = R"(
#include <cuda/barrier>
#include <cuda/ptx>

namespace ptx = cuda::ptx;

// out: n blocks x {rank, size, partner's value}, then reps x n verdicts of cluster_check.
struct ClusterParams { unsigned* out; unsigned n; unsigned rep; };

// Each block writes its rank in the cluster, the cluster size, and a DSMEM read of its
// partner's shared memory (which only a real cluster can do); then lets the dependent start.
extern "C" __global__ void cluster_probe(const __grid_constant__ ClusterParams p) {
  __shared__ unsigned mine;
  const unsigned rank = ptx::get_sreg_cluster_ctarank();
  const unsigned size = ptx::get_sreg_cluster_nctarank();
  if (threadIdx.x == 0) mine = 1000u + blockIdx.x + 100000u * p.rep;
  asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (threadIdx.x == 0) {
    const unsigned peer = (rank + 1) % size;
    const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(&mine));
    unsigned remote_addr = 0, remote = 0;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_addr) : "r"(local), "r"(peer));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(remote) : "r"(remote_addr) : "memory");
    p.out[blockIdx.x * 3 + 0] = rank;
    p.out[blockIdx.x * 3 + 1] = size;
    p.out[blockIdx.x * 3 + 2] = remote;
  }
  // No block may leave while its partner may still read its shared memory.
  asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Launched with PDL after cluster_probe: waits for it, then checks what this rep's probe wrote.
extern "C" __global__ void cluster_check(const __grid_constant__ ClusterParams p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= p.n) return;
  const unsigned peer_block = (b / 2) * 2 + (b % 2 == 0 ? 1 : 0);
  const bool ok = p.out[b * 3 + 0] == b % 2 && p.out[b * 3 + 1] == 2 &&
                  p.out[b * 3 + 2] == 1000u + peer_block + 100000u * p.rep;
  p.out[p.n * 3 + p.rep * p.n + b] = ok ? 1u : 0u;
}

// Mirrors CUtensorMap (128 bytes; CUDA 13's cuda.h aligns it to 128, the driver needs 64).
struct alignas(128) TensorMap { unsigned long long opaque[16]; };
constexpr int kBoxW = 32, kBoxH = 8;  // floats: 128 B rows, the 128B swizzle span
struct TmaParams { TensorMap map; float* out; int x0, y0; };

// One block TMA-loads a kBoxH x kBoxW float tile at (x0, y0) into shared memory, waits on an
// mbarrier for its bytes, and writes it out row-major (un-swizzling when the map swizzles).
extern "C" __global__ void tma_tile(const __grid_constant__ TmaParams p) {
  using Barrier = cuda::barrier<cuda::thread_scope_block>;
  __shared__ alignas(1024) float tile[kBoxH * kBoxW];
#pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ Barrier bar;
  if (threadIdx.x == 0) {
    init(&bar, blockDim.x);
    ptx::fence_proxy_async(ptx::space_shared);  // the init is visible to the async proxy
  }
  __syncthreads();
  Barrier::arrival_token token;
  if (threadIdx.x == 0) {
    const int32_t coords[2] = {p.x0, p.y0};
    ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, tile, &p.map, coords,
                              cuda::device::barrier_native_handle(bar));
    token = cuda::device::barrier_arrive_tx(bar, 1, sizeof(tile));
  } else {
    token = bar.arrive();
  }
  bar.wait(cuda::std::move(token));
  for (int i = threadIdx.x; i < kBoxH * kBoxW; i += blockDim.x) p.out[i] = tile[i];
}
)";

}  // namespace attnjit::testing
