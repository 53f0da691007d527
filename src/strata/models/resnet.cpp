#include "strata/models/resnet.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/pooling.h>

namespace strata {

namespace nn = torch::nn;

namespace {
nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}
double conv_flops(int64_t in, int64_t out, int64_t k, int64_t out_hw) {
  return 2.0 * static_cast<double>(in * out * k * k * out_hw * out_hw);
}
}  // namespace

ResidualBlock::ResidualBlock(int64_t in, int64_t width, int64_t stride, bool bottleneck)
    : in_(in),
      width_(width),
      out_(bottleneck ? width * 4 : width),
      stride_(stride),
      bottleneck_(bottleneck) {
  body = nn::Sequential();
  if (bottleneck) {
    body->push_back(conv(in, width, 1, 1));
    body->push_back(nn::BatchNorm2d(width));
    body->push_back(nn::ReLU(true));
    body->push_back(conv(width, width, 3, stride));
    body->push_back(nn::BatchNorm2d(width));
    body->push_back(nn::ReLU(true));
    body->push_back(conv(width, out_, 1, 1));
    body->push_back(nn::BatchNorm2d(out_));
  } else {
    body->push_back(conv(in, width, 3, stride));
    body->push_back(nn::BatchNorm2d(width));
    body->push_back(nn::ReLU(true));
    body->push_back(conv(width, width, 3, 1));
    body->push_back(nn::BatchNorm2d(width));
  }
  register_module("body", body);
  if (stride != 1 || in != out_) {
    shortcut = nn::Sequential(conv(in, out_, 1, stride), nn::BatchNorm2d(out_));
    register_module("shortcut", shortcut);
  }
}

at::Tensor ResidualBlock::forward(const at::Tensor& x) {
  at::Tensor identity = shortcut ? shortcut->forward(x) : x;
  return at::relu(body->forward(x) + identity);
}

double ResidualBlock::forward_flops(int64_t in_hw) const {
  const int64_t o = (in_hw + stride_ - 1) / stride_;
  double f = 0;
  if (bottleneck_) {
    f = conv_flops(in_, width_, 1, in_hw) + conv_flops(width_, width_, 3, o) +
        conv_flops(width_, out_, 1, o);
  } else {
    f = conv_flops(in_, width_, 3, o) + conv_flops(width_, width_, 3, o);
  }
  if (shortcut) f += conv_flops(in_, out_, 1, o);
  return f;
}

ResNet::ResNet(const ModelSpec& spec) : small_stem_(spec.image_size < 64) {
  int64_t hw = spec.image_size;
  if (small_stem_) {
    stem = nn::Sequential(conv(spec.in_channels, 64, 3, 1), nn::BatchNorm2d(64), nn::ReLU(true));
    forward_flops_ += conv_flops(spec.in_channels, 64, 3, hw);
  } else {
    stem = nn::Sequential(conv(spec.in_channels, 64, 7, 2), nn::BatchNorm2d(64), nn::ReLU(true),
                          nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
    hw = (hw + 1) / 2;
    forward_flops_ += conv_flops(spec.in_channels, 64, 7, hw);
    hw = (hw + 1) / 2;
  }
  register_module("stem", stem);
  int64_t in = 64;
  for (size_t stage = 0; stage < spec.resnet_layers.size(); ++stage) {
    const int64_t width = 64 << stage;
    for (int64_t i = 0; i < spec.resnet_layers[stage]; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      auto blk = std::make_shared<ResidualBlock>(in, width, stride, spec.bottleneck);
      forward_flops_ += blk->forward_flops(hw);
      hw = (hw + stride - 1) / stride;
      in = blk->out_channels();
      blocks_.push_back(register_module("block" + std::to_string(blocks_.size()), blk));
    }
  }
  fc = register_module("fc", nn::Linear(in, spec.num_classes));
  forward_flops_ += 2.0 * static_cast<double>(in * spec.num_classes);
  // He init for convolutions; BatchNorm weight 1, bias 0 (the defaults).
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>())
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
  }
}

at::Tensor ResNet::embed(const Batch& b) {
  return stem->forward(b.input);
}

at::Tensor ResNet::head_loss(const at::Tensor& x, const Batch& b) {
  at::Tensor pooled = x.mean({2, 3});  // (B, C)
  return at::cross_entropy_loss(fc->forward(pooled), b.target);
}

Mlp::Mlp(const ModelSpec& spec) {
  const int64_t in_features = spec.in_channels * spec.image_size * spec.image_size;
  in = register_module("in", nn::Linear(in_features, spec.hidden));
  struct Layer : Block {
    nn::Linear lin{nullptr};
    explicit Layer(int64_t h) { lin = register_module("lin", nn::Linear(h, h)); }
    at::Tensor forward(const at::Tensor& x) override { return x + at::gelu(lin->forward(x)); }
  };
  for (int64_t i = 0; i < spec.n_layer; ++i)
    blocks_.push_back(
        register_module("block" + std::to_string(i), std::make_shared<Layer>(spec.hidden)));
  out = register_module("out", nn::Linear(spec.hidden, spec.num_classes));
  n_params_ = num_parameters();
}

at::Tensor Mlp::embed(const Batch& b) {
  return at::gelu(in->forward(b.input.flatten(1)));
}

at::Tensor Mlp::head_loss(const at::Tensor& x, const Batch& b) {
  return at::cross_entropy_loss(out->forward(x), b.target);
}

}  // namespace strata
