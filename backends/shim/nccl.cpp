// c10d's NCCL process group, for CUDA tensors. Built into a library of its own
// (libpipeline_nccl.so, see build.rs) because it links libtorch_cuda, which only runs that
// use CUDA load; `process_group.rs` loads it when a group asks for NCCL.
//
// A collective's `wait` orders the current CUDA stream after it rather than blocking the
// host (as torch.distributed does); a peer that dies or hangs is caught by NCCL's watchdog
// after the group's timeout, which aborts the communicators and ends the process.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <c10/cuda/CUDAFunctions.h>
#include "group.h"
#include "shim.h"

extern "C" {

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
