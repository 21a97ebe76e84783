// The two element-wise stretches of a transformer block as single-pass CPU kernels, with their
// gradients:
//
//   ElectraBiasGelu            out = gelu(x + bias)                          (intermediate/dense)
//   ElectraResidualLayerNorm   out = LayerNorm(dropout(y + bias) + residual) (both sub-layer ends)
//
// TensorFlow runs each as a chain of 8-15 element-wise ops, every one a pass over a [B*L, H] or
// [B*L, F] tensor in memory; these kernels do one pass forward and one backward per row, and fold
// the bias add of the preceding matmul and its gradient (BiasAddGrad) into the same pass.
// The math and the order of the element-wise operations are those of `layer_utils.gelu`,
// `layer_utils._normalize` and `Dropout`; only the sums over a row are taken in another order.
// Column sums (gradients of bias, gamma and beta) are added up in fixed blocks of rows and then
// over the blocks in order, so results do not depend on the number of threads.
// Built and loaded by electra_tf/cpu_kernels/__init__.py, which also makes each Grad kernel its
// forward kernel's gradient.

#include <algorithm>
#include <cmath>
#include <vector>

#include <Eigen/Dense>
#include <unsupported/Eigen/SpecialFunctions>

#include "kernel_util.h"

namespace electra_kernels {
namespace {

using Row = Eigen::Map<Eigen::ArrayXf>;
using ConstRow = Eigen::Map<const Eigen::ArrayXf>;

constexpr int64_t kRowsPerBlock = 32;  // column sums are partial per block of rows, then summed in order
constexpr float kSqrtHalf = 0.70710678118654752440f;
constexpr float kInvSqrtTwoPi = 0.39894228040143267794f;

// x as a matrix [rows, width] with width = the size of `vector`'s only dimension.
tensorflow::Status CheckRows(const Tensor& x, const Tensor& vector, const char* x_name, const char* v_name,
                             int64_t* rows, int64_t* width) {
  if (x.dims() != 2) return InvalidArgument(x_name, " must be [N, W], got ", x.shape().DebugString());
  if (vector.dims() != 1 || vector.dim_size(0) != x.dim_size(1))
    return InvalidArgument(v_name, " must be [W] with W = ", x.dim_size(1), ", got ", vector.shape().DebugString());
  *rows = x.dim_size(0);
  *width = x.dim_size(1);
  return tensorflow::OkStatus();
}

// Runs work(first_row, end_row, partial) for every block of kRowsPerBlock rows, each with its own
// zeroed partial sums ([width] per output, one after another), and writes their in-order totals
// into `outputs` ([width] each).
template <typename Work>
void ForBlocksWithColumnSums(OpKernelContext* ctx, int64_t rows, int64_t width, int64_t cost_per_row,
                             const std::vector<float*>& outputs, Work work) {
  const int64_t count = static_cast<int64_t>(outputs.size());
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<float> partial(static_cast<size_t>(std::max<int64_t>(blocks, 1) * count * width), 0.0f);
  ParallelFor(ctx, blocks, cost_per_row * kRowsPerBlock, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      work(b * kRowsPerBlock, std::min(rows, (b + 1) * kRowsPerBlock), partial.data() + b * count * width);
  });
  for (int64_t c = 0; c < count; ++c) {
    Row total(outputs[c], width);
    total.setZero();
    for (int64_t b = 0; b < blocks; ++b) total += ConstRow(partial.data() + (b * count + c) * width, width);
  }
}

// ---------------------------------------------------------------------------------------- bias + GELU

// Φ(y) = 0.5 erfc(-y / sqrt(2)) as in layer_utils.gelu, an expression (no temporary array).
template <typename Array>
auto Cdf(const Array& y) {
  return 0.5f * (y * -kSqrtHalf).erfc();
}

class BiasGeluOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    int64_t rows, width;
    OP_REQUIRES_OK(ctx, CheckRows(x, bias, "x", "bias", &rows, &width));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &out));
    const float* in = x.flat<float>().data();
    float* o = out->flat<float>().data();
    ConstRow b(bias.flat<float>().data(), width);
    ParallelFor(ctx, rows, 40 * width, [&](int64_t begin, int64_t end) {
      Eigen::ArrayXf y(width);
      for (int64_t r = begin; r < end; ++r) {
        y = ConstRow(in + r * width, width) + b;
        Row(o + r * width, width) = y * Cdf(y);
      }
    });
  }
};

class BiasGeluGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    int64_t rows, width;
    OP_REQUIRES_OK(ctx, CheckRows(x, bias, "x", "bias", &rows, &width));
    OP_REQUIRES_OK(ctx, CheckShape(dy, x.shape(), "dy"));
    Tensor *dx = nullptr, *d_bias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, bias.shape(), &d_bias));
    const float* g = dy.flat<float>().data();
    const float* in = x.flat<float>().data();
    float* d = dx->flat<float>().data();
    ConstRow b(bias.flat<float>().data(), width);
    ForBlocksWithColumnSums(ctx, rows, width, 60 * width, {d_bias->flat<float>().data()},
                            [&](int64_t begin, int64_t end, float* partial) {
      Eigen::ArrayXf y(width);
      Row sum(partial, width);
      for (int64_t r = begin; r < end; ++r) {
        y = ConstRow(in + r * width, width) + b;
        Row row(d + r * width, width);  // may alias dy's row: read it once, first
        row = ConstRow(g + r * width, width) * (Cdf(y) + y * (-0.5f * y.square()).exp() * kInvSqrtTwoPi);
        sum += row;
      }
    });
  }
};

// ------------------------------------------------------------- bias + dropout + residual + LayerNorm

struct Dropout {
  const bool* keep;  // [N, W], or nullptr: no dropout
  float scale;
  // Row `row` (of width `width`) through dropout (no-op without it).
  void Apply(int64_t row, int64_t width, Eigen::ArrayXf* y) const {
    ApplyDropout(keep == nullptr ? nullptr : keep + row * width, scale, width, y->data());
  }
};

tensorflow::Status ReadDropout(const Tensor& keep, const TensorShape& shape, float scale, Dropout* dropout) {
  dropout->keep = nullptr;
  dropout->scale = scale;
  if (keep.NumElements() == 0) return tensorflow::OkStatus();
  TF_RETURN_IF_ERROR(CheckShape(keep, shape, "keep"));
  dropout->keep = keep.flat<bool>().data();
  return tensorflow::OkStatus();
}

class ResidualLayerNormOp : public OpKernel {
 public:
  explicit ResidualLayerNormOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("keep_scale", &keep_scale_));
    OP_REQUIRES_OK(c, c->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& y = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    const Tensor& residual = ctx->input(3);
    const Tensor& gamma = ctx->input(4);
    const Tensor& beta = ctx->input(5);
    int64_t rows, width;
    OP_REQUIRES_OK(ctx, CheckRows(y, bias, "y", "bias", &rows, &width));
    OP_REQUIRES_OK(ctx, CheckShape(residual, y.shape(), "residual"));
    OP_REQUIRES_OK(ctx, CheckShape(gamma, bias.shape(), "gamma"));
    OP_REQUIRES_OK(ctx, CheckShape(beta, bias.shape(), "beta"));
    Dropout dropout;
    OP_REQUIRES_OK(ctx, ReadDropout(ctx->input(2), y.shape(), keep_scale_, &dropout));
    Tensor *out = nullptr, *normalized = nullptr, *inv_std = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, y.shape(), &out));
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 1, y.shape(), &normalized));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({rows}), &inv_std));
    const float *in = y.flat<float>().data(), *res = residual.flat<float>().data();
    float *o = out->flat<float>().data(), *n = normalized->flat<float>().data(), *s = inv_std->flat<float>().data();
    ConstRow b(bias.flat<float>().data(), width), g(gamma.flat<float>().data(), width),
        be(beta.flat<float>().data(), width);
    const float inv_width = 1.0f / width, epsilon = epsilon_;
    ParallelFor(ctx, rows, 12 * width, [&](int64_t begin, int64_t end) {
      Eigen::ArrayXf x(width);
      for (int64_t r = begin; r < end; ++r) {
        x = ConstRow(in + r * width, width) + b;
        dropout.Apply(r, width, &x);
        x += ConstRow(res + r * width, width);
        x -= x.sum() * inv_width;  // centered
        const float scale = 1.0f / std::sqrt(x.square().sum() * inv_width + epsilon);
        Row row(n + r * width, width);  // may alias y's row, which is no longer read
        row = x * scale;
        Row(o + r * width, width) = row * g + be;
        s[r] = scale;
      }
    });
  }

 private:
  float keep_scale_, epsilon_;
};

class ResidualLayerNormGradOp : public OpKernel {
 public:
  explicit ResidualLayerNormGradOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("keep_scale", &keep_scale_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& d_out = ctx->input(0);
    const Tensor& normalized = ctx->input(1);
    const Tensor& inv_std = ctx->input(2);
    const Tensor& gamma = ctx->input(3);
    int64_t rows, width;
    OP_REQUIRES_OK(ctx, CheckRows(normalized, gamma, "normalized", "gamma", &rows, &width));
    OP_REQUIRES_OK(ctx, CheckShape(d_out, normalized.shape(), "d_out"));
    OP_REQUIRES_OK(ctx, CheckShape(inv_std, TensorShape({rows}), "inv_std"));
    Dropout dropout;
    OP_REQUIRES_OK(ctx, ReadDropout(ctx->input(4), normalized.shape(), keep_scale_, &dropout));
    Tensor *d_residual = nullptr, *d_y = nullptr, *column_sums[3];  // d_bias, d_gamma, d_beta
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, normalized.shape(), &d_residual));
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({1}, 1, normalized.shape(), &d_y));
    for (int i = 0; i < 3; ++i) OP_REQUIRES_OK(ctx, ctx->allocate_output(2 + i, gamma.shape(), &column_sums[i]));
    const float *dout = d_out.flat<float>().data(), *n = normalized.flat<float>().data();
    const float* s = inv_std.flat<float>().data();
    float *dres = d_residual->flat<float>().data(), *dy = d_y->flat<float>().data();
    ConstRow g(gamma.flat<float>().data(), width);
    const float inv_width = 1.0f / width;
    ForBlocksWithColumnSums(
        ctx, rows, width, 16 * width,
        {column_sums[0]->flat<float>().data(), column_sums[1]->flat<float>().data(),
         column_sums[2]->flat<float>().data()},
        [&](int64_t begin, int64_t end, float* partial) {
          Eigen::ArrayXf upstream(width), norm(width), dx(width);
          Row sum_bias(partial, width), sum_gamma(partial + width, width), sum_beta(partial + 2 * width, width);
          for (int64_t r = begin; r < end; ++r) {
            upstream = ConstRow(dout + r * width, width);  // copies: the outputs may alias these rows
            norm = ConstRow(n + r * width, width);
            sum_gamma += upstream * norm;
            sum_beta += upstream;
            dx = upstream * g;  // d(normalized)
            const float mean_d = dx.sum() * inv_width, mean_d_dot = (dx * norm).sum() * inv_width;
            dx = (dx - mean_d - norm * mean_d_dot) * s[r];
            Row(dres + r * width, width) = dx;
            dropout.Apply(r, width, &dx);
            Row(dy + r * width, width) = dx;
            sum_bias += dx;
          }
        });
  }

 private:
  float keep_scale_;
};

}  // namespace
}  // namespace electra_kernels

REGISTER_OP("ElectraBiasGelu")
    .Input("x: float")
    .Input("bias: float")
    .Output("out: float")
    .SetShapeFn(electra_kernels::OutputsShapedAs({0}));

REGISTER_OP("ElectraBiasGeluGrad")
    .Input("dy: float")
    .Input("x: float")
    .Input("bias: float")
    .Output("dx: float")
    .Output("d_bias: float")
    .SetShapeFn(electra_kernels::OutputsShapedAs({1, 2}));

REGISTER_OP("ElectraResidualLayerNorm")
    .Input("y: float")
    .Input("bias: float")
    .Input("keep: bool")
    .Input("residual: float")
    .Input("gamma: float")
    .Input("beta: float")
    .Output("out: float")
    .Output("normalized: float")
    .Output("inv_std: float")
    .Attr("keep_scale: float = 1.0")
    .Attr("epsilon: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      c->set_output(2, c->Vector(c->Dim(c->input(0), 0)));
      return tensorflow::OkStatus();
    });

REGISTER_OP("ElectraResidualLayerNormGrad")
    .Input("d_out: float")
    .Input("normalized: float")
    .Input("inv_std: float")
    .Input("gamma: float")
    .Input("keep: bool")
    .Output("d_residual: float")
    .Output("d_y: float")
    .Output("d_bias: float")
    .Output("d_gamma: float")
    .Output("d_beta: float")
    .Attr("keep_scale: float = 1.0")
    .SetShapeFn(electra_kernels::OutputsShapedAs({1, 1, 3, 3, 3}));

REGISTER_KERNEL_BUILDER(Name("ElectraBiasGelu").Device(tensorflow::DEVICE_CPU), electra_kernels::BiasGeluOp);
REGISTER_KERNEL_BUILDER(Name("ElectraBiasGeluGrad").Device(tensorflow::DEVICE_CPU),
                        electra_kernels::BiasGeluGradOp);
REGISTER_KERNEL_BUILDER(Name("ElectraResidualLayerNorm").Device(tensorflow::DEVICE_CPU),
                        electra_kernels::ResidualLayerNormOp);
REGISTER_KERNEL_BUILDER(Name("ElectraResidualLayerNormGrad").Device(tensorflow::DEVICE_CPU),
                        electra_kernels::ResidualLayerNormGradOp);
