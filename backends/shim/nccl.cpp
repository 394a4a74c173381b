// c10d's NCCL process group, for CUDA tensors. Built into a library of its own
// (libpipeline_nccl.so, see build.rs) because it links libtorch_cuda, which only runs that
// use CUDA load; `process_group.rs` loads it when a group asks for NCCL.
//
// The collectives in c10d.cpp wait with the group's timeout, which under NCCL blocks the
// host until the collective is done (as torch.distributed's blocking wait): a peer that
// dies or hangs makes the wait abort the communicators and throw after that time, which
// becomes an error naming the cause instead of a hang. The price is a host sync per
// collective.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <c10/cuda/CUDAFunctions.h>
#include "group.h"
#include "shim.h"

extern "C" {

// The layout of the groups this library expects (see group.h).
int64_t pipeline_nccl_group_layout() { return PIPELINE_GROUP_LAYOUT; }

// Gives `group` (made by `pipeline_group_new` without Gloo) an NCCL backend whose
// tensors live on CUDA device `device`, and connects the processes now, so that a
// missing peer fails here rather than in the first collective.
const char* pipeline_group_use_nccl(PipelineGroup* group, int rank, int world, int device) {
  return pipeline_guard([&] {
    auto index = static_cast<c10::DeviceIndex>(device);
    c10::cuda::set_device(index);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = group->timeout;
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(group->store, rank, world, options);
    at::Device cuda(at::kCUDA, index);
    // The barrier's device, and eager communicator set-up.
    nccl->setBoundDeviceId(cuda);
    nccl->eagerConnectSingleDevice(cuda);
    group->backend = nccl;
  });
}
}
