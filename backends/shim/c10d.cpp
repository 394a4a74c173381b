// PyTorch's own distributed engine, c10d, which tch does not bind: a TCPStore rendezvous
// (rank 0 serves it) and a Gloo process group, with the collectives the strategies use.
// Every C++ exception (a peer that died, a timeout) becomes an error message. The NCCL
// process group is in nccl.cpp, a library of its own; the collectives here serve both.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <c10/util/Logging.h>
#include <cstdlib>
#include <mutex>
#include "group.h"
#include "shim.h"

// c10d logs its retries and timeouts itself, each with a C++ backtrace, before it throws;
// the exception's message is what a user is shown (as a diagnostic), so those lines are
// silenced: only fatal ones are left. `TORCH_CPP_LOG_LEVEL` set by hand (for debugging)
// is honoured as PyTorch honours it.
static void quiet_c10_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("TORCH_CPP_LOG_LEVEL") != nullptr) {
      c10::initLogging();
    } else {
      FLAGS_caffe2_log_level = 3;  // c10::GLOG_FATAL
      c10::UpdateLoggingLevelsFromFlags();
    }
  });
}


extern "C" {

// Joins the group of `world` processes whose rank 0 serves the rendezvous at host:port.
// Waits up to `timeout_ms` for the others; every collective then waits at most as long.
// With `gloo` false the group has no backend yet: nccl.cpp's `pipeline_group_use_nccl`
// gives it one.
const char* pipeline_group_new(const char* host, int port, int rank, int world,
                               int64_t timeout_ms, bool gloo, PipelineGroup** out) {
  return pipeline_guard([&] {
    quiet_c10_logging();
    auto timeout = std::chrono::milliseconds(timeout_ms);
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(port);
    store_options.isServer = rank == 0;
    store_options.numWorkers = static_cast<std::size_t>(world);
    store_options.waitWorkers = true;
    store_options.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(std::string(host), store_options);
    c10::intrusive_ptr<c10d::Backend> backend;
    if (gloo) {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      // As torch.distributed: the interface named by GLOO_SOCKET_IFNAME, or this host's.
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      options->devices.push_back(
          ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                 : c10d::ProcessGroupGloo::createDefaultDevice());
      backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
    }
    *out = new PipelineGroup{store, backend, timeout};
  });
}

// The layout of the groups this library makes (see group.h).
int64_t pipeline_group_layout() { return PIPELINE_GROUP_LAYOUT; }

// Shuts the backend down (NCCL's communicators and watchdog) and frees the group.
void pipeline_group_free(PipelineGroup* group) {
  pipeline_guard([&] {
    if (group->backend) group->backend->shutdown();
  });
  delete group;
}

// Sums `n` tensors element-wise across the group, in place.
const char* pipeline_group_all_reduce(PipelineGroup* group, at::Tensor** tensors, size_t n) {
  return pipeline_guard([&] {
    auto ts = pipeline_gather(tensors, n);
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    group->backend->allreduce(ts, options)->wait(group->timeout);
  });
}

// Copies `root`'s tensors to every rank, in place.
const char* pipeline_group_broadcast(PipelineGroup* group, at::Tensor** tensors, size_t n,
                                     int root) {
  return pipeline_guard([&] {
    auto ts = pipeline_gather(tensors, n);
    c10d::BroadcastOptions options;
    options.rootRank = root;
    group->backend->broadcast(ts, options)->wait(group->timeout);
  });
}

// Gathers every rank's `input` into `outputs` (one tensor per rank, in rank order).
const char* pipeline_group_all_gather(PipelineGroup* group, at::Tensor* input,
                                      at::Tensor** outputs, size_t world) {
  return pipeline_guard([&] {
    std::vector<std::vector<at::Tensor>> outs{pipeline_gather(outputs, world)};
    std::vector<at::Tensor> in{*input};
    group->backend->allgather(outs, in)->wait(group->timeout);
  });
}

// Sums `inputs` (one tensor per rank) across the group and leaves rank r's sum of
// inputs[r] in `output`.
const char* pipeline_group_reduce_scatter(PipelineGroup* group, at::Tensor* output,
                                          at::Tensor** inputs, size_t world) {
  return pipeline_guard([&] {
    std::vector<at::Tensor> out{*output};
    std::vector<std::vector<at::Tensor>> ins{pipeline_gather(inputs, world)};
    c10d::ReduceScatterOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    group->backend->reduce_scatter(out, ins, options)->wait(group->timeout);
  });
}

// Waits until every rank has arrived.
const char* pipeline_group_barrier(PipelineGroup* group) {
  return pipeline_guard([&] { group->backend->barrier()->wait(group->timeout); });
}
}
