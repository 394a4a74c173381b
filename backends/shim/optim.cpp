// The small C ABI over libtorch that tch lacks: the fused (single-kernel) Adam and AdamW
// updates, and clearing gradients. A tch Tensor's raw pointer is an `at::Tensor*`.
// Every function returns nullptr on success, or the C++ exception's message (valid until
// the next call on the same thread).
#include <ATen/ATen.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <string>
#include <vector>

static thread_local std::string last_error;

static std::vector<at::Tensor> gather(at::Tensor** tensors, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; i++) out.push_back(*tensors[i]);
  return out;
}

extern "C" {

// One Adam (or, when `decoupled`, AdamW) step over `n` parameters. `step` is a float
// scalar tensor the caller has already incremented; it is shared by every parameter.
const char* pipeline_fused_adam(at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs,
                                at::Tensor** exp_avg_sqs, at::Tensor* step, size_t n, double lr,
                                double beta1, double beta2, double weight_decay, double eps,
                                int decoupled) {
  try {
    auto p = gather(params, n), g = gather(grads, n), m = gather(exp_avgs, n),
         v = gather(exp_avg_sqs, n);
    std::vector<at::Tensor> steps(n, *step), none;
    if (decoupled) {
      at::_fused_adamw_(p, g, m, v, none, steps, lr, beta1, beta2, weight_decay, eps, false, false);
    } else {
      at::_fused_adam_(p, g, m, v, none, steps, lr, beta1, beta2, weight_decay, eps, false, false);
    }
    return nullptr;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return last_error.c_str();
}

// Drops the gradients of `n` parameters (PyTorch's `zero_grad(set_to_none=True)`).
const char* pipeline_clear_grads(at::Tensor** params, size_t n) {
  try {
    for (size_t i = 0; i < n; i++) params[i]->mutable_grad().reset();
    return nullptr;
  } catch (const std::exception& e) {
    last_error = e.what();
  }
  return last_error.c_str();
}
}
