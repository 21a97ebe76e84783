// The original's AdamWeightDecay update of one variable as one CPU kernel (optimization.py):
//
//   m' = beta_1 * m + (1 - beta_1) * g
//   v' = beta_2 * v + (1 - beta_2) * (g * g)
//   u  = m' / (sqrt(v') + epsilon)  [+ weight_decay * p]
//   p' = p - lr * u
//
// in one pass over p, m, v and g instead of TensorFlow's dozen element-wise ops, each a pass over
// memory. Every operation is the float32 operation TensorFlow's ops perform, in the same order, and
// the build turns off FMA contraction (-ffp-contract=off), so the results equal those ops' bit for
// bit. The new values are returned; the caller assigns them, which adopts the buffers without a copy.
// Built and loaded by electra_tf/cpu_kernels/__init__.py.

#include <cmath>
#include <utility>

#include "kernel_util.h"

namespace electra_kernels {
namespace {

class AdamWeightDecayOp : public OpKernel {
 public:
  explicit AdamWeightDecayOp(OpKernelConstruction* c) : OpKernel(c) {
    const std::pair<const char*, float*> attrs[] = {
        {"beta_1", &beta_1_}, {"one_minus_beta_1", &one_minus_beta_1_}, {"beta_2", &beta_2_},
        {"one_minus_beta_2", &one_minus_beta_2_}, {"epsilon", &epsilon_}, {"weight_decay", &weight_decay_}};
    for (const auto& [name, value] : attrs) OP_REQUIRES_OK(c, c->GetAttr(name, value));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& param = ctx->input(0);
    static const char* const kNames[] = {"param", "m", "v", "grad"};
    for (int i = 1; i < 4; ++i) OP_REQUIRES_OK(ctx, CheckShape(ctx->input(i), param.shape(), kNames[i]));
    OP_REQUIRES(ctx, ctx->input(4).NumElements() == 1,
                InvalidArgument("lr must be a scalar, got ", ctx->input(4).shape().DebugString()));
    Tensor* out[3];
    for (int i = 0; i < 3; ++i)
      OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({i}, i, param.shape(), &out[i]));
    const float *p = param.flat<float>().data(), *m = ctx->input(1).flat<float>().data(),
                *v = ctx->input(2).flat<float>().data(), *g = ctx->input(3).flat<float>().data();
    float *p_out = out[0]->flat<float>().data(), *m_out = out[1]->flat<float>().data(),
          *v_out = out[2]->flat<float>().data();
    const float lr = ctx->input(4).flat<float>()(0);
    const float b1 = beta_1_, c1 = one_minus_beta_1_, b2 = beta_2_, c2 = one_minus_beta_2_, eps = epsilon_,
                wd = weight_decay_;
    const bool decay = weight_decay_ != 0.0f;
    ParallelFor(ctx, param.NumElements(), 20, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {  // outputs may alias inputs element for element
        const float grad = g[i], value = p[i];
        const float m_t = b1 * m[i] + c1 * grad;
        const float v_t = b2 * v[i] + c2 * (grad * grad);
        float update = m_t / (std::sqrt(v_t) + eps);
        if (decay) update += wd * value;
        m_out[i] = m_t;
        v_out[i] = v_t;
        p_out[i] = value - lr * update;
      }
    });
  }

 private:
  float beta_1_, one_minus_beta_1_, beta_2_, one_minus_beta_2_, epsilon_, weight_decay_;
};

}  // namespace
}  // namespace electra_kernels

REGISTER_OP("ElectraAdamWeightDecay")
    .Input("param: float")
    .Input("m: float")
    .Input("v: float")
    .Input("grad: float")
    .Input("lr: float")
    .Output("new_param: float")
    .Output("new_m: float")
    .Output("new_v: float")
    .Attr("beta_1: float")
    .Attr("one_minus_beta_1: float")
    .Attr("beta_2: float")
    .Attr("one_minus_beta_2: float")
    .Attr("epsilon: float")
    .Attr("weight_decay: float")
    .SetShapeFn(electra_kernels::OutputsShapedAs({0, 0, 0}));

REGISTER_KERNEL_BUILDER(Name("ElectraAdamWeightDecay").Device(tensorflow::DEVICE_CPU),
                        electra_kernels::AdamWeightDecayOp);
