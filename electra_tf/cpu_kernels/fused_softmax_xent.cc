// The MLM loss's softmax cross-entropy as one CPU kernel: per row of logits [N, V] with its target
// id, the loss -log softmax(logits)[target] and its gradient softmax(logits) - onehot(target), as
// TensorFlow's SparseSoftmaxCrossEntropyWithLogits computes them (same formulas: the row's maximum
// is subtracted before exp). Each row (V = 30522 floats, 120 KB) is processed while it stays in
// the core's cache, three passes (max; exp and sum; scale) instead of TensorFlow's passes over the
// whole [N, V] matrix for each step.
// Built and loaded by electra_tf/cpu_kernels/__init__.py.

#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

#include "kernel_util.h"

namespace electra_kernels {
namespace {

class SparseSoftmaxXentOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    OP_REQUIRES(ctx, logits.dims() == 2 && logits.dim_size(1) > 0,
                InvalidArgument("logits must be [N, V] with V > 0, got ", logits.shape().DebugString()));
    const int64_t rows = logits.dim_size(0), classes = logits.dim_size(1);
    OP_REQUIRES(ctx, labels.shape() == TensorShape({rows}),
                InvalidArgument("labels must be [N] with N = ", rows, ", got ", labels.shape().DebugString()));
    const int32_t* target = labels.flat<int32_t>().data();
    for (int64_t r = 0; r < rows; ++r)
      OP_REQUIRES(ctx, target[r] >= 0 && target[r] < classes,
                  InvalidArgument("labels[", r, "] = ", target[r], " is not a class id in [0, ", classes, ")"));
    Tensor *loss = nullptr, *backprop = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows}), &loss));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, logits.shape(), &backprop));
    const float* in = logits.flat<float>().data();
    float *l = loss->flat<float>().data(), *bp = backprop->flat<float>().data();
    ParallelFor(ctx, rows, 30 * classes, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        Eigen::Map<const Eigen::ArrayXf> x(in + r * classes, classes);
        Eigen::Map<Eigen::ArrayXf> p(bp + r * classes, classes);
        const float max = x.maxCoeff();
        p = (x - max).exp();
        const float sum = p.sum();
        l[r] = std::log(sum) - (x[target[r]] - max);
        p /= sum;
        p[target[r]] -= 1.0f;
      }
    });
  }
};

}  // namespace
}  // namespace electra_kernels

REGISTER_OP("ElectraSparseSoftmaxXent")
    .Input("logits: float")
    .Input("labels: int32")
    .Output("loss: float")
    .Output("backprop: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Vector(c->Dim(c->input(0), 0)));
      c->set_output(1, c->input(0));
      return tensorflow::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("ElectraSparseSoftmaxXent").Device(tensorflow::DEVICE_CPU),
                        electra_kernels::SparseSoftmaxXentOp);
