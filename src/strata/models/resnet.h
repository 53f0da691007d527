#pragma once
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "strata/models/flavours.h"
#include "strata/models/model.h"

namespace strata {

// Residual block (He et al. 2016): basic (two 3x3) or bottleneck (1x1, 3x3 with the
// stride, 1x1 x4), with a 1x1 projection shortcut when the shape changes.
class ResidualBlock : public Block {
 public:
  ResidualBlock(int64_t in, int64_t width, int64_t stride, bool bottleneck);
  at::Tensor forward(const at::Tensor& x) override;
  int64_t out_channels() const { return out_; }
  double forward_flops(int64_t in_hw) const;  // multiply-adds x 2 at input resolution in_hw

 private:
  torch::nn::Sequential body{nullptr}, shortcut{nullptr};
  int64_t in_, width_, out_, stride_;
  bool bottleneck_;
};

// ResNet-18/50. The ImageNet stem (7x7/2 conv + 3x3/2 max-pool) for inputs of 64
// pixels or more, a 3x3/1 stem without pooling for small images (Fashion-MNIST).
class ResNet : public Model {
 public:
  explicit ResNet(const ModelSpec& spec);
  at::Tensor embed(const Batch& b) override;
  at::Tensor head_loss(const at::Tensor& x, const Batch& b) override;
  double flops_per_sample() const override { return 3.0 * forward_flops_; }
  int64_t tokens_per_sample() const override { return 1; }

 private:
  torch::nn::Sequential stem{nullptr};
  torch::nn::Linear fc{nullptr};
  bool small_stem_;
  double forward_flops_ = 0;
};

// MLP classifier: flatten, Linear+GELU input layer, n_layer residual Linear+GELU
// blocks, Linear head.
class Mlp : public Model {
 public:
  explicit Mlp(const ModelSpec& spec);
  at::Tensor embed(const Batch& b) override;
  at::Tensor head_loss(const at::Tensor& x, const Batch& b) override;
  double flops_per_sample() const override { return 6.0 * static_cast<double>(n_params_); }
  int64_t tokens_per_sample() const override { return 1; }

 private:
  torch::nn::Linear in{nullptr}, out{nullptr};
  int64_t n_params_ = 0;
};

}  // namespace strata
