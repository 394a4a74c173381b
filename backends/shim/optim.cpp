// Optimizer updates over all parameters in one call, with their state in tensors the Rust
// side owns (so it can be saved and restored): Adam and AdamW as libtorch's fused
// (single-kernel) updates, SGD and RMSprop as libtorch's C++ optimizers compute them.
#include <ATen/ATen.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <c10/core/GradMode.h>
#include <vector>
#include "shim.h"

extern "C" {

// One Adam (or, when `decoupled`, AdamW) step over `n` parameters. `step` is a float
// scalar tensor the caller has already incremented; it is shared by every parameter.
const char* pipeline_fused_adam(at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs,
                                at::Tensor** exp_avg_sqs, at::Tensor* step, size_t n, double lr,
                                double beta1, double beta2, double weight_decay, double eps,
                                int decoupled) {
  return pipeline_guard([&] {
    auto p = pipeline_gather(params, n), g = pipeline_gather(grads, n),
         m = pipeline_gather(exp_avgs, n), v = pipeline_gather(exp_avg_sqs, n);
    std::vector<at::Tensor> steps(n, *step), none;
    if (decoupled) {
      at::_fused_adamw_(p, g, m, v, none, steps, lr, beta1, beta2, weight_decay, eps, false, false);
    } else {
      at::_fused_adam_(p, g, m, v, none, steps, lr, beta1, beta2, weight_decay, eps, false, false);
    }
  });
}

// One SGD step, as torch::optim::SGD (dampening 0). `bufs` are the momentum buffers,
// zeros before the first step (which then equals libtorch's clone of the first gradient);
// unused without momentum.
const char* pipeline_sgd(at::Tensor** params, at::Tensor** grads, at::Tensor** bufs, size_t n,
                         double lr, double momentum, double weight_decay, int nesterov) {
  return pipeline_guard([&] {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < n; i++) {
      at::Tensor& p = *params[i];
      at::Tensor d_p = *grads[i];
      if (weight_decay != 0) d_p = d_p.add(p, weight_decay);
      if (momentum != 0) {
        at::Tensor& buf = *bufs[i];
        buf.mul_(momentum).add_(d_p);
        d_p = nesterov ? d_p.add(buf, momentum) : buf;
      }
      p.add_(d_p, -lr);
    }
  });
}

// One RMSprop step, as torch::optim::RMSprop. `grad_avgs` are used when `centered`,
// `bufs` when `momentum` > 0; every state tensor starts as zeros.
const char* pipeline_rmsprop(at::Tensor** params, at::Tensor** grads, at::Tensor** square_avgs,
                             at::Tensor** grad_avgs, at::Tensor** bufs, size_t n, double lr,
                             double alpha, double eps, double weight_decay, double momentum,
                             int centered) {
  return pipeline_guard([&] {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < n; i++) {
      at::Tensor& p = *params[i];
      at::Tensor grad = *grads[i];
      if (weight_decay != 0) grad = grad.add(p, weight_decay);
      at::Tensor& square_avg = *square_avgs[i];
      square_avg.mul_(alpha).addcmul_(grad, grad, 1 - alpha);
      at::Tensor avg;
      if (centered) {
        at::Tensor& grad_avg = *grad_avgs[i];
        grad_avg.mul_(alpha).add_(grad, 1 - alpha);
        avg = square_avg.addcmul(grad_avg, grad_avg, -1).sqrt_().add_(eps);
      } else {
        avg = square_avg.sqrt().add_(eps);
      }
      if (momentum > 0) {
        at::Tensor& buf = *bufs[i];
        buf.mul_(momentum).addcdiv_(grad, avg);
        p.add_(buf, -lr);
      } else {
        p.addcdiv_(grad, avg, -lr);
      }
    }
  });
}

// Drops the gradients of `n` parameters (PyTorch's `zero_grad(set_to_none=True)`).
const char* pipeline_clear_grads(at::Tensor** params, size_t n) {
  return pipeline_guard([&] {
    for (size_t i = 0; i < n; i++) params[i]->mutable_grad().reset();
  });
}
}
