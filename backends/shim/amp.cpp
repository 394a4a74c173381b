// Mixed precision and the optimizer step's surroundings, which tch does not expose:
// autocast per device type with a chosen dtype (tch's autocast is CUDA-only and has no
// dtype), the dynamic loss scaler's unscale and update, gradient clipping as
// torch.nn.utils does it, and deterministic algorithms.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include "shim.h"

static at::DeviceType device_type(int cuda) { return cuda ? at::kCUDA : at::kCPU; }

extern "C" {

// Enters an autocast region on the CPU (`cuda` = 0) or CUDA, computing in bfloat16
// (`half` = 0) or float16.
const char* pipeline_autocast_enter(int cuda, int half) {
  return pipeline_guard([&] {
    at::autocast::set_autocast_dtype(device_type(cuda), half ? at::kHalf : at::kBFloat16);
    at::autocast::set_autocast_enabled(device_type(cuda), true);
    at::autocast::increment_nesting();
  });
}

// Leaves it, dropping autocast's cache of casted weights when the outermost region ends.
const char* pipeline_autocast_exit(int cuda) {
  return pipeline_guard([&] {
    at::autocast::set_autocast_enabled(device_type(cuda), false);
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  });
}

// libtorch's `use_deterministic_algorithms` (errors, not warnings), and cuDNN's.
const char* pipeline_set_deterministic(int on) {
  return pipeline_guard([&] {
    at::globalContext().setDeterministicAlgorithms(on != 0, false);
    at::globalContext().setDeterministicCuDNN(on != 0);
    if (on) at::globalContext().setBenchmarkCuDNN(false);
  });
}

// Divides the gradients by the loss scale and sets `found_inf` (a float tensor of one
// element, zero on entry) to 1 if any is inf or NaN: GradScaler.unscale_.
const char* pipeline_amp_unscale(at::Tensor** grads, size_t n, at::Tensor* found_inf,
                                 at::Tensor* inv_scale) {
  return pipeline_guard([&] {
    c10::NoGradGuard no_grad;
    auto g = pipeline_gather(grads, n);
    at::_amp_foreach_non_finite_check_and_unscale_(g, *found_inf, *inv_scale);
  });
}

// GradScaler.update: halves the scale after a step with inf/NaN, doubles it after
// `interval` good steps in a row.
const char* pipeline_amp_update(at::Tensor* scale, at::Tensor* growth_tracker,
                                at::Tensor* found_inf, double growth, double backoff,
                                int64_t interval) {
  return pipeline_guard([&] {
    at::_amp_update_scale_(*scale, *growth_tracker, *found_inf, growth, backoff, interval);
  });
}

// The gradients' total `norm_type`-norm (torch.nn.utils.get_total_norm), on the device.
static at::Tensor total_norm(const std::vector<at::Tensor>& g, double norm_type) {
  auto norms = at::_foreach_norm(g, norm_type);
  return at::linalg_vector_norm(at::stack(norms), norm_type);
}

// Sets `*total` to the gradients' total norm, without reading it back to the host (left
// undefined when there are none).
const char* pipeline_grad_norm(at::Tensor** grads, size_t n, double norm_type,
                               at::Tensor* total) {
  return pipeline_guard([&] {
    c10::NoGradGuard no_grad;
    if (n == 0) return;
    *total = total_norm(pipeline_gather(grads, n), norm_type);
  });
}

// torch.nn.utils.clip_grad_norm_: scales every gradient by
// min(1, max_norm / (total norm + 1e-6)), without reading the norm back to the host;
// `*total` is set to the norm before clipping (what clip_grad_norm_ returns).
const char* pipeline_clip_grad_norm(at::Tensor** grads, size_t n, double max_norm,
                                    double norm_type, at::Tensor* total) {
  return pipeline_guard([&] {
    c10::NoGradGuard no_grad;
    if (n == 0) return;
    auto g = pipeline_gather(grads, n);
    *total = total_norm(g, norm_type);
    auto coef = (max_norm / (*total + 1e-6)).clamp_max(1.0);
    at::_foreach_mul_(g, coef);
  });
}

// torch.nn.utils.clip_grad_value_: clamps every element to [-value, value].
const char* pipeline_clip_grad_value(at::Tensor** grads, size_t n, double value) {
  return pipeline_guard([&] {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < n; i++) grads[i]->clamp_(-value, value);
  });
}
}
