// Your own model, trained by Strata: an MLP on Fashion-MNIST with data parallelism,
// ZeRO-2 and bf16 by default (any [section] key of `strata train` changes them).
//
//   strata launch --nproc-per-node 2 -- ./fashion_mlp --training.steps=200
//
// The model is the one Strata's `mlp` flavour builds (flatten, Linear + GELU, residual
// Linear + GELU blocks, Linear head, torch's default init under training.seed), so at
// one rank it trains exactly as `strata train --model.flavour=mlp
// --data.source=fashion-mnist` does.
#include <strata/api/strata.h>
#include <torch/torch.h>

#include <cstdio>

namespace nn = torch::nn;

// x + GELU(W x + b): one block of the list Strata runs in order (and may recompute,
// shard or wrap).
class Residual : public strata::Block {
 public:
  explicit Residual(int64_t width) { lin = register_module("lin", nn::Linear(width, width)); }
  at::Tensor forward(const at::Tensor& x) override { return x + torch::gelu(lin->forward(x)); }

 private:
  nn::Linear lin{nullptr};
};

// embed: the batch into the first block; head_loss: the last block's output into the loss.
class FashionMlp : public strata::Model {
 public:
  FashionMlp(int64_t width, int64_t layers) {
    in_ = register_module("in", nn::Linear(28 * 28, width));
    for (int64_t i = 0; i < layers; ++i)
      blocks_.push_back(
          register_module("block" + std::to_string(i), std::make_shared<Residual>(width)));
    out_ = register_module("out", nn::Linear(width, 10));
    params_ = static_cast<double>(num_parameters());
  }
  at::Tensor embed(const strata::Batch& b) override {
    return torch::gelu(in_->forward(b.input.flatten(1)));  // (B, 784) -> (B, width)
  }
  at::Tensor head_loss(const at::Tensor& x, const strata::Batch& b) override {
    return at::cross_entropy_loss(out_->forward(x), b.target);
  }
  double flops_per_sample() const override { return 6 * params_; }  // for MFU
  int64_t tokens_per_sample() const override { return 1; }          // for throughput

 private:
  nn::Linear in_{nullptr}, out_{nullptr};
  double params_ = 0;
};

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::Config defaults;
    defaults.parallel.zero = 2;          // optimizer states and gradients sharded over dp
    defaults.memory.precision = "bf16";  // bf16 compute, fp32 master weights
    defaults.training.batch_size = 64;
    defaults.training.lr = 1e-3;
    defaults.training.warmup_steps = 10;
    defaults.training.steps = 100;
    defaults.training.eval_interval = 0;
    defaults.logging.run_dir = "runs/fashion_mlp";
    const strata::Config cfg = strata::parse_config(argc, argv, defaults);
    const strata::WorldInfo world = strata::init_from_env();

    strata::UserModel model;
    model.name = "fashion-mlp";
    model.build = [](const strata::StageInfo&, const strata::TpContext&) {
      return std::make_shared<FashionMlp>(/*width=*/256, /*layers=*/2);
    };
    const std::string dir =
        cfg.data.path.empty() ? "/usr/share/datasets/fashion-mnist" : cfg.data.path;
    strata::UserData data{strata::load_fashion_mnist(dir, "train"),
                          strata::load_fashion_mnist(dir, "t10k"), "Fashion-MNIST " + dir};

    const strata::TrainResult r = strata::train(cfg, world, model, data);
    if (world.rank == 0 && !r.losses.empty())
      std::printf("fashion_mlp: loss %.4f -> %.4f over %zu steps; metrics in %s\n",
                  r.losses.front(), r.losses.back(), r.losses.size(), r.metrics_path.c_str());
    return 0;
  });
}
