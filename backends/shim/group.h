// A process group as the shim's collectives see it, whichever backend it has: made by
// c10d.cpp (the store, and Gloo) and, for CUDA tensors, given NCCL by nccl.cpp.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <chrono>

struct PipelineGroup {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  std::chrono::milliseconds timeout;
};

// The struct's layout as both libraries were compiled with it: bump the version when the
// struct changes. `process_group.rs` refuses an NCCL library that disagrees.
constexpr int64_t PIPELINE_GROUP_LAYOUT = 1 * 1000 + sizeof(PipelineGroup);
