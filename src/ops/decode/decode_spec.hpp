// Argument validation and spec/params construction for the decode-family ops,
// separate from the launch so that the CPU tests can exercise it without a GPU.
#pragma once

#include "attnjit/decode.hpp"
#include "attnjit/xqa.hpp"
#include "decode/decode_params.cuh"
#include "ops/decode/decode_launch.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

struct SingleDecodePlan {
  spec::KernelSpec spec;
  DecodeParams params{};
  DecodeShape shape;
};

// sms: the SMs the call runs on (0: kNominalSms), for the kernel choice
// (decode_batch1_takes_tile32: a single request is batch 1).
SingleDecodePlan plan_single_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const SingleDecodeOptions& options,
                                    const TensorView* lse, const spec::Arch& arch, int sms = 0);

struct XqaPlan {
  spec::KernelSpec spec;
  DecodeParams params{};
  DecodeShape shape;
  size_t workspace_bytes = 0;
  size_t semaphore_count = 0;
};

// sms: the SMs the call runs on (args.sm_count wins; 0: kNominalSms), for the kernel choice
// at batch 1 (decode_batch1_takes_tile32).
XqaPlan plan_xqa(const XqaArgs& args, const spec::Arch& arch, int sms = 0);

// The spec a call with these arguments launches on `arch`, from shapes alone
// (tensor data may be null): the op's own validation and spec building, as
// prewarm_* runs them. The CLI's model-config expansion builds its specs here too,
// so the op's limits (page sizes, group sizes, dtypes) have one copy.
spec::KernelSpec single_decode_prewarm_spec(const TensorView& q, const TensorView& k, const TensorView& v,
                                            const TensorView& out, const SingleDecodeOptions& options,
                                            const TensorView* lse, const spec::Arch& arch, int sms = 0);
spec::KernelSpec xqa_prewarm_spec(const XqaArgs& args, const spec::Arch& arch, int sms = 0);

}  // namespace attnjit::ops
