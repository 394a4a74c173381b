// Batch normalisation whose statistics are those of the whole batch across the processes
// of a group (torch.nn.SyncBatchNorm): the forward pass gathers each process's per-channel
// mean, variance and count, the backward pass all-reduces the sums its input gradient
// needs. A custom autograd function, so
// that libtorch's autograd calls the backward pass.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include "group.h"
#include "shim.h"

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Every dimension but the channels' (dimension 1).
std::vector<int64_t> reduced_dims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); d++) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped (1, C, 1, …) to broadcast against `x`.
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = -1;
  return v.view(shape);
}

void all_reduce_sum(PipelineGroup* group, at::Tensor& t) {
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  group->backend->allreduce(ts, options)->wait(group->timeout);
}

struct SyncBatchNorm : public torch::autograd::Function<SyncBatchNorm> {
  // Statistics in float32 at least, whatever the input's type (as autocast runs
  // batch-norm). Each process's mean and variance are computed in two passes and combined
  // with the counts (torch's batch_norm_gather_stats_with_counts): sums of squares would
  // cancel catastrophically for features whose mean dwarfs their spread.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, const at::Tensor& bias,
                            at::Tensor running_mean, at::Tensor running_var, double momentum,
                            double eps, int64_t group_address) {
    auto* group = reinterpret_cast<PipelineGroup*>(group_address);
    auto x = input.to(at::promote_types(input.scalar_type(), at::kFloat));
    auto dims = reduced_dims(x);
    int64_t channels = x.size(1);
    double local = static_cast<double>(x.numel() / channels);
    auto [local_var, local_mean] = at::var_mean(x, dims, std::optional<at::Scalar>(0));
    auto mine = at::cat({local_mean, local_var, at::full({1}, local, x.options())}).contiguous();
    int world = group->backend->getSize();
    std::vector<std::vector<at::Tensor>> gathered(1);
    for (int r = 0; r < world; r++) gathered[0].push_back(at::empty_like(mine));
    std::vector<at::Tensor> inputs{mine};
    group->backend->allgather(gathered, inputs)->wait(group->timeout);
    auto all = at::stack(gathered[0]);  // (world, 2C + 1)
    auto means = all.narrow(1, 0, channels), vars = all.narrow(1, channels, channels);
    auto counts = all.narrow(1, 2 * channels, 1);
    auto count = counts.sum(0);  // (1)
    auto mean = (means * counts).sum(0) / count;
    auto var = ((vars + (means - mean).pow(2)) * counts).sum(0) / count;
    auto invstd = (var + eps).rsqrt();
    {
      at::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()) * momentum);
      auto unbiased = var * count / (count - 1).clamp_min(1);
      running_var.mul_(1 - momentum).add_(unbiased.to(running_var.scalar_type()) * momentum);
    }
    auto xhat = (x - per_channel(mean, x)) * per_channel(invstd, x);
    ctx->save_for_backward({xhat, weight, invstd, count});
    ctx->saved_data["group"] = group_address;
    ctx->saved_data["dtype"] = static_cast<int64_t>(input.scalar_type());
    auto out = xhat * per_channel(weight.to(x.scalar_type()), x) +
               per_channel(bias.to(x.scalar_type()), x);
    return out.to(input.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &xhat = saved[0], &weight = saved[1], &invstd = saved[2], &count = saved[3];
    auto* group = reinterpret_cast<PipelineGroup*>(ctx->saved_data["group"].toInt());
    auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    auto dy = grads[0].to(xhat.scalar_type());
    auto dims = reduced_dims(dy);
    int64_t channels = dy.size(1);
    auto sum_dy = dy.sum(dims);
    auto sum_dy_xhat = (dy * xhat).sum(dims);
    // The parameters' gradients are this process's (data parallelism averages them).
    auto grad_weight = sum_dy_xhat.to(weight.scalar_type());
    auto grad_bias = sum_dy.to(weight.scalar_type());
    auto global = at::cat({sum_dy, sum_dy_xhat}).contiguous();
    all_reduce_sum(group, global);
    auto mean_dy = global.narrow(0, 0, channels) / count;
    auto mean_dy_xhat = global.narrow(0, channels, channels) / count;
    auto dx = (dy - per_channel(mean_dy, dy) - xhat * per_channel(mean_dy_xhat, dy)) *
              per_channel(invstd * weight.to(xhat.scalar_type()), dy);
    return {dx.to(dtype), grad_weight, grad_bias, at::Tensor(), at::Tensor(),
            at::Tensor(),  at::Tensor(),  at::Tensor()};
  }
};

}  // namespace

extern "C" {

// Batch-norm in training mode over the whole batch of `group`'s processes: updates the
// running statistics in place and stores the output (tracked by autograd) in `*out`,
// which the caller owns.
const char* pipeline_sync_batch_norm(PipelineGroup* group, at::Tensor* input,
                                     at::Tensor* weight, at::Tensor* bias,
                                     at::Tensor* running_mean, at::Tensor* running_var,
                                     double momentum, double eps, at::Tensor** out) {
  return pipeline_guard([&] {
    auto result = SyncBatchNorm::apply(*input, *weight, *bias, *running_mean, *running_var,
                                       momentum, eps, reinterpret_cast<int64_t>(group));
    *out = new at::Tensor(result);
  });
}
}
