// The state of libtorch's default random generators (dropout, initialisation), which tch
// cannot read or restore: saved in resumable snapshots so that a resumed run draws the
// same numbers as an uninterrupted one.
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <mutex>
#include "shim.h"

static at::Generator generator(int cuda_index) {
  return cuda_index < 0
             ? at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CPU))
             : at::globalContext().defaultGenerator(
                   c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(cuda_index)));
}

extern "C" {

// Stores a new tensor holding the state of the CPU generator (`cuda_index` < 0) or of
// CUDA device `cuda_index` in `*out`; the caller owns it.
const char* pipeline_rng_get_state(int cuda_index, at::Tensor** out) {
  return pipeline_guard([&] {
    auto gen = generator(cuda_index);
    std::lock_guard<std::mutex> lock(gen.mutex());
    *out = new at::Tensor(gen.get_state());
  });
}

// Restores a state from `pipeline_rng_get_state`.
const char* pipeline_rng_set_state(int cuda_index, at::Tensor* state) {
  return pipeline_guard([&] {
    auto gen = generator(cuda_index);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(*state);
  });
}
}
