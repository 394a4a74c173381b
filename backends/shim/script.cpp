// TorchScript modules (`model { torchscript "net.pt" }`), which tch's CModule covers only
// in part: it lists a module's parameters but not its buffers (batch-norm statistics),
// which checkpoints, snapshots and ddp's first broadcast need under their state-dict
// names. A module is a `torch::jit::Module*` the caller owns (`pipeline_script_free`).
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include "shim.h"

extern "C" {

// Loads the archive at `path` onto the CPU (`device` < 0) or CUDA device `device`.
const char* pipeline_script_load(const char* path, int device, void** out) {
  return pipeline_guard([&] {
    auto where = device < 0 ? c10::Device(c10::kCPU)
                            : c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device));
    *out = new torch::jit::Module(torch::jit::load(path, where));
  });
}

void pipeline_script_free(void* module) { delete static_cast<torch::jit::Module*>(module); }

// Converts the module's floating-point parameters and buffers to `kind` (a c10
// ScalarType's number), in place; integer and boolean ones (batch-norm's step count,
// position ids, masks) stay as they are (`Module::to(dtype)` would convert them too).
const char* pipeline_script_to_kind(void* module, int kind) {
  return pipeline_guard([&] {
    auto m = static_cast<torch::jit::Module*>(module);
    auto dtype = static_cast<c10::ScalarType>(kind);
    c10::NoGradGuard no_grad;
    for (at::Tensor t : m->parameters(/*recurse=*/true))
      if (t.is_floating_point() && t.scalar_type() != dtype) t.set_data(t.to(dtype));
    for (at::Tensor t : m->buffers(/*recurse=*/true))
      if (t.is_floating_point() && t.scalar_type() != dtype) t.set_data(t.to(dtype));
  });
}

// Calls `each(data, name, tensor, kind)` for every parameter, then every buffer, of the
// module and its submodules, with state-dict names (`0.weight`,
// `encoder.norm.running_mean`). `tensor` is a new `at::Tensor*` sharing the module's
// storage, which the callee owns. `kind` is 1 for a parameter, 0 for a buffer, and 2
// for a tensor listed before under another name (tied weights: libtorch lists a shared
// parameter under each of its names, and it must be trained once).
const char* pipeline_script_tensors(void* module, void* data,
                                    void (*each)(void*, const char*, at::Tensor*, int)) {
  return pipeline_guard([&] {
    auto m = static_cast<torch::jit::Module*>(module);
    std::vector<const c10::TensorImpl*> seen;
    auto kind = [&](const at::Tensor& t, int first) {
      const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
      for (auto s : seen)
        if (s == impl) return 2;
      seen.push_back(impl);
      return first;
    };
    for (const auto& p : m->named_parameters(/*recurse=*/true))
      each(data, p.name.c_str(), new at::Tensor(p.value), kind(p.value, 1));
    for (const auto& b : m->named_buffers(/*recurse=*/true))
      each(data, b.name.c_str(), new at::Tensor(b.value), kind(b.value, 0));
  });
}

// `module.train(on)`: dropout and batch statistics in every submodule.
const char* pipeline_script_train(void* module, int on) {
  return pipeline_guard([&] { static_cast<torch::jit::Module*>(module)->train(on != 0); });
}

// The names of `forward`'s arguments after `self`, in order: `each(data, name,
// has_default)` for each.
const char* pipeline_script_arguments(void* module, void* data,
                                      void (*each)(void*, const char*, int)) {
  return pipeline_guard([&] {
    auto m = static_cast<torch::jit::Module*>(module);
    const auto& arguments = m->get_method("forward").function().getSchema().arguments();
    for (size_t i = 1; i < arguments.size(); ++i)
      each(data, arguments[i].name().c_str(), arguments[i].default_value().has_value());
  });
}

// `module.forward(inputs[0], …, inputs[count - 1])`, which must return one tensor:
// stored as a new `at::Tensor*` in `*out`.
const char* pipeline_script_forward(void* module, at::Tensor** inputs, int count,
                                    at::Tensor** out) {
  return pipeline_guard([&] {
    auto m = static_cast<torch::jit::Module*>(module);
    std::vector<c10::IValue> arguments;
    for (int i = 0; i < count; ++i) arguments.emplace_back(*inputs[i]);
    auto result = m->forward(std::move(arguments));
    if (!result.isTensor())
      throw std::runtime_error("the module's forward returns " + result.tagKind() +
                               ", not one tensor");
    *out = new at::Tensor(result.toTensor());
  });
}
}
