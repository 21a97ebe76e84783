// The attention core of one transformer layer as two CPU kernels, forward and backward.
//
// softmax(Q K^T * scale + mask bias) -> dropout keep mask -> times V, for every (sequence, head)
// in turn, with the [L, L] scores kept in the thread's cache: TensorFlow's kernels write the scores,
// probabilities and dropout products for all heads to memory ([B, heads, L, L] floats each) and read
// them back several times, which on a bandwidth-starved CPU costs more than the products themselves.
// The backward kernel recomputes the probabilities from Q and K instead of keeping them.
//
// Layouts are those of the fused QKV projection, so no transposes are needed around the kernels:
//   qkv     float [B, L, 3H]  (query | key | value, each H = heads * D wide, head h at columns h*D)
//   bias    float [B, L]      additive mask over the keys (0 or -10000)
//   keep    bool  [B, heads, L, L] dropout keep mask, or shape [0] for no dropout
//   context float [B, L, H]   (head h at columns h*D)
// Built and loaded by electra_tf/cpu_kernels/__init__.py, which also makes the second kernel the
// first one's gradient.

#include <Eigen/Dense>

#include "kernel_util.h"

namespace electra_kernels {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::OuterStride<>;
using ConstView = Eigen::Map<const RowMatrix, 0, Strided>;  // a head's [L, D] block inside a wider row
using View = Eigen::Map<RowMatrix, 0, Strided>;

// Shapes and pointers shared by both kernels, checked once per call.
struct Problem {
  int64_t batch, length, heads, head_size, hidden;
  float scale, keep_scale;
  const float* qkv;
  const float* bias;
  const bool* keep;  // nullptr: no dropout

  ConstView query(int64_t b, int64_t h) const { return Block(b, h, 0); }
  ConstView key(int64_t b, int64_t h) const { return Block(b, h, 1); }
  ConstView value(int64_t b, int64_t h) const { return Block(b, h, 2); }
  ConstView Block(int64_t b, int64_t h, int slot) const {
    return ConstView(qkv + b * length * 3 * hidden + slot * hidden + h * head_size, length, head_size,
                     Strided(3 * hidden));
  }

  // probs [L, L] <- softmax over each row of Q K^T * scale + bias; with `dropped`, each row is
  // then multiplied by its dropout factors while it is still in the cache (the forward pass needs
  // only that product).
  void Probabilities(int64_t b, int64_t h, RowMatrix* probs, bool dropped) const {
    probs->noalias() = query(b, h) * key(b, h).transpose();
    Eigen::Map<const Eigen::ArrayXf> key_bias(bias + b * length, length);
    for (int64_t i = 0; i < length; ++i) {
      Eigen::Map<Eigen::ArrayXf> row(probs->data() + i * length, length);
      row = row * scale + key_bias;
      row = (row - row.maxCoeff()).exp();
      row *= 1.0f / row.sum();
      if (dropped) Drop(b, h, i, row.data());
    }
  }

  // Row i of head (b, h) through dropout (no-op without it).
  void Drop(int64_t b, int64_t h, int64_t i, float* x) const {
    ApplyDropout(keep == nullptr ? nullptr : keep + ((b * heads + h) * length + i) * length, keep_scale, length, x);
  }
};

tensorflow::Status ReadProblem(OpKernelContext* ctx, int64_t heads, float keep_scale, Problem* p) {
  const Tensor& qkv = ctx->input(0);
  const Tensor& bias = ctx->input(1);
  const Tensor& keep = ctx->input(2);
  if (qkv.dims() != 3 || qkv.dim_size(2) % (3 * heads) != 0)
    return InvalidArgument("qkv must be [B, L, 3 * heads * D], got ", qkv.shape().DebugString());
  p->batch = qkv.dim_size(0);
  p->length = qkv.dim_size(1);
  p->heads = heads;
  p->hidden = qkv.dim_size(2) / 3;
  p->head_size = p->hidden / heads;
  if (bias.shape() != TensorShape({p->batch, p->length}))
    return InvalidArgument("bias must be [B, L], got ", bias.shape().DebugString());
  const bool dropout = keep.NumElements() > 0;
  if (dropout && keep.shape() != TensorShape({p->batch, heads, p->length, p->length}))
    return InvalidArgument("keep must be [B, heads, L, L] or empty, got ", keep.shape().DebugString());
  p->scale = 1.0f / std::sqrt(static_cast<float>(p->head_size));
  p->keep_scale = keep_scale;
  p->qkv = qkv.flat<float>().data();
  p->bias = bias.flat<float>().data();
  p->keep = dropout ? keep.flat<bool>().data() : nullptr;
  return tensorflow::OkStatus();
}

// Runs work(b, h) for every (sequence, head) on the op's intra-op threads.
template <typename Work>
void ForEachHead(OpKernelContext* ctx, const Problem& p, int64_t flops_per_head, Work work) {
  ParallelFor(ctx, p.batch * p.heads, flops_per_head, [&](int64_t begin, int64_t end) {
    RowMatrix scratch(p.length, p.length), grad(p.length, p.length);
    for (int64_t i = begin; i < end; ++i) work(i / p.heads, i % p.heads, &scratch, &grad);
  });
}

class AttentionOp : public OpKernel {
 public:
  explicit AttentionOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("num_heads", &heads_));
    OP_REQUIRES_OK(c, c->GetAttr("keep_scale", &keep_scale_));
  }

  void Compute(OpKernelContext* ctx) override {
    Problem p;
    OP_REQUIRES_OK(ctx, ReadProblem(ctx, heads_, keep_scale_, &p));
    Tensor* context = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({p.batch, p.length, p.hidden}), &context));
    float* out = context->flat<float>().data();
    const int64_t flops = 4 * p.length * p.length * p.head_size;
    ForEachHead(ctx, p, flops, [&](int64_t b, int64_t h, RowMatrix* probs, RowMatrix*) {
      p.Probabilities(b, h, probs, /*dropped=*/true);
      View(out + b * p.length * p.hidden + h * p.head_size, p.length, p.head_size, Strided(p.hidden))
          .noalias() = *probs * p.value(b, h);
    });
  }

 private:
  int64_t heads_;
  float keep_scale_;
};

class AttentionGradOp : public OpKernel {
 public:
  explicit AttentionGradOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("num_heads", &heads_));
    OP_REQUIRES_OK(c, c->GetAttr("keep_scale", &keep_scale_));
  }

  void Compute(OpKernelContext* ctx) override {
    Problem p;
    OP_REQUIRES_OK(ctx, ReadProblem(ctx, heads_, keep_scale_, &p));
    const Tensor& d_context = ctx->input(3);
    OP_REQUIRES(ctx, d_context.shape() == TensorShape({p.batch, p.length, p.hidden}),
                InvalidArgument("d_context must be [B, L, H], got ", d_context.shape().DebugString()));
    Tensor* d_qkv = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(0).shape(), &d_qkv));
    const float* dc = d_context.flat<float>().data();
    float* dq = d_qkv->flat<float>().data();
    const int64_t flops = 10 * p.length * p.length * p.head_size;
    ForEachHead(ctx, p, flops, [&](int64_t b, int64_t h, RowMatrix* probs, RowMatrix* d_scores) {
      auto grad_block = [&](int slot) {
        return View(dq + b * p.length * 3 * p.hidden + slot * p.hidden + h * p.head_size, p.length,
                    p.head_size, Strided(3 * p.hidden));
      };
      ConstView d_out(dc + b * p.length * p.hidden + h * p.head_size, p.length, p.head_size,
                      Strided(p.hidden));
      p.Probabilities(b, h, probs, /*dropped=*/false);
      *d_scores = *probs;  // the dropped-out probabilities, for dV = dropped^T dC
      for (int64_t i = 0; i < p.length; ++i) p.Drop(b, h, i, d_scores->data() + i * p.length);
      grad_block(2).noalias() = d_scores->transpose() * d_out;
      d_scores->noalias() = d_out * p.value(b, h).transpose();  // d(dropped probs)
      // Per row: d(probs) through the dropout, then the softmax backward
      // dS = P * (dP - rowsum(dP * P)), times the score scale.
      for (int64_t i = 0; i < p.length; ++i) {
        Eigen::Map<const Eigen::ArrayXf> prob(probs->data() + i * p.length, p.length);
        Eigen::Map<Eigen::ArrayXf> grad(d_scores->data() + i * p.length, p.length);
        p.Drop(b, h, i, grad.data());
        grad = prob * (grad - (grad * prob).sum()) * p.scale;
      }
      grad_block(0).noalias() = *d_scores * p.key(b, h);
      grad_block(1).noalias() = d_scores->transpose() * p.query(b, h);
    });
  }

 private:
  int64_t heads_;
  float keep_scale_;
};

}  // namespace
}  // namespace electra_kernels

REGISTER_OP("ElectraAttention")
    .Input("qkv: float")
    .Input("bias: float")
    .Input("keep: bool")
    .Output("context: float")
    .Attr("num_heads: int >= 1")
    .Attr("keep_scale: float = 1.0")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle qkv;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &qkv));
      tensorflow::shape_inference::DimensionHandle hidden;
      TF_RETURN_IF_ERROR(c->Divide(c->Dim(qkv, 2), 3, /*evenly_divisible=*/true, &hidden));
      c->set_output(0, c->MakeShape({c->Dim(qkv, 0), c->Dim(qkv, 1), hidden}));
      return tensorflow::OkStatus();
    });

REGISTER_OP("ElectraAttentionGrad")
    .Input("qkv: float")
    .Input("bias: float")
    .Input("keep: bool")
    .Input("d_context: float")
    .Output("d_qkv: float")
    .Attr("num_heads: int >= 1")
    .Attr("keep_scale: float = 1.0")
    .SetShapeFn(electra_kernels::OutputsShapedAs({0}));

REGISTER_KERNEL_BUILDER(Name("ElectraAttention").Device(tensorflow::DEVICE_CPU),
                        electra_kernels::AttentionOp);
REGISTER_KERNEL_BUILDER(Name("ElectraAttentionGrad").Device(tensorflow::DEVICE_CPU),
                        electra_kernels::AttentionGradOp);
