// What the kernels of electra_tf/cpu_kernels share: TensorFlow's kernel names, a shape check whose
// error names the input, work split over the op's intra-op threads, dropout by a keep mask, and a
// shape function.

#ifndef ELECTRA_TF_CPU_KERNELS_KERNEL_UTIL_H_
#define ELECTRA_TF_CPU_KERNELS_KERNEL_UTIL_H_

#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace electra_kernels {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::errors::InvalidArgument;

// OK, or an error "<name> must have shape <shape>, got <t's shape>".
inline tensorflow::Status CheckShape(const Tensor& t, const TensorShape& shape, const char* name) {
  if (t.shape() != shape)
    return InvalidArgument(name, " must have shape ", shape.DebugString(), ", got ", t.shape().DebugString());
  return tensorflow::OkStatus();
}

// Runs work(begin, end) over the items [0, count) on the op's intra-op threads; `cost_per_item`
// (roughly, operations) decides how finely the range is split.
template <typename Work>
void ParallelFor(OpKernelContext* ctx, int64_t count, int64_t cost_per_item, Work work) {
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(workers->num_threads, workers->workers, count, cost_per_item, work);
}

// Dropout on n values: x[j] *= keep_scale where keep[j], 0 where not (Dropout's multiply by
// tf.where(keep, keep_scale, 0)), as a product with the mask: no branch, so it vectorizes.
// keep == nullptr means no dropout.
inline void ApplyDropout(const bool* keep, float keep_scale, int64_t n, float* x) {
  if (keep == nullptr) return;
  for (int64_t j = 0; j < n; ++j) x[j] *= static_cast<float>(keep[j]) * keep_scale;
}

// A shape function giving output i the shape of input inputs[i].
inline tensorflow::OpShapeInferenceFn OutputsShapedAs(std::vector<int> inputs) {
  return [inputs](tensorflow::shape_inference::InferenceContext* c) {
    for (size_t i = 0; i < inputs.size(); ++i) c->set_output(static_cast<int>(i), c->input(inputs[i]));
    return tensorflow::OkStatus();
  };
}

}  // namespace electra_kernels

#endif  // ELECTRA_TF_CPU_KERNELS_KERNEL_UTIL_H_
