// Your own transformer, trained by Strata with tensor parallelism and activation
// recompute: its linears come from strata::make_linear (column- and row-parallel
// kinds, Megatron's layout), so `--parallel.tp=N` splits the heads and the MLP over N
// ranks; `--memory.recompute=full` (the default here) keeps only each block's input.
// The builder honours StageInfo (the embedding on the first stage, the head on the
// last, only the stage's blocks), so `--parallel.pp=N` cuts it into stages too.
//
//   strata launch --nproc-per-node 2 -- ./tiny_transformer --parallel.tp=2
//
// make_linear draws each layer at its full shape (torch's default init) and keeps this
// rank's slice, so every tp starts from the weights of one process.
//
// The data is the program's own Dataset: sequences that count up by a per-sample
// stride (mod the vocabulary), which a causal model learns to continue.
#include <strata/api/strata.h>
#include <torch/torch.h>

#include <cstdio>

namespace nn = torch::nn;
using strata::LinearKind;

constexpr int64_t kVocab = 64, kSeq = 32, kWidth = 64, kHeads = 4, kLayers = 4;

// Pre-LayerNorm causal block: x + attn(ln1(x)), then x + mlp(ln2(x)).
class Block : public strata::Block {
 public:
  explicit Block(const strata::TpContext& tp) : heads_(kHeads / tp.size) {
    ln1_ = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({kWidth})));
    ln2_ = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({kWidth})));
    // [q; k; v] as three column-parallel groups: each rank its own heads of each.
    qkv_ = register_module(
        "qkv", strata::make_linear(kWidth, 3 * kWidth, true, LinearKind::kColumn, tp, 0.0, 3));
    proj_ = register_module("proj",
                            strata::make_linear(kWidth, kWidth, true, LinearKind::kRow, tp, 0.0));
    fc_ = register_module(
        "fc", strata::make_linear(kWidth, 4 * kWidth, true, LinearKind::kColumn, tp, 0.0));
    out_ = register_module(
        "out", strata::make_linear(4 * kWidth, kWidth, true, LinearKind::kRow, tp, 0.0));
  }
  at::Tensor forward(const at::Tensor& x) override {
    const int64_t B = x.size(0), T = x.size(1), D = kWidth / kHeads;
    auto qkv = qkv_->forward(ln1_->forward(x)).split(heads_ * D, 2);  // 3 x (B, T, H D)
    auto heads = [&](const at::Tensor& t) { return t.view({B, T, heads_, D}).transpose(1, 2); };
    at::Tensor y = at::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {},
                                                    0.0, /*is_causal=*/true);
    at::Tensor h = x + proj_->forward(y.transpose(1, 2).reshape({B, T, heads_ * D}));
    return h + out_->forward(torch::gelu(fc_->forward(ln2_->forward(h))));
  }

 private:
  int64_t heads_;  // on this rank
  nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  std::shared_ptr<strata::ParallelLinear> qkv_, proj_, fc_, out_;
};

class TinyTransformer : public strata::Model {
 public:
  // Every unit is constructed, in the whole model's order, and a stage keeps those it
  // holds: each stage then makes the random draws one process makes and starts from
  // its weights. Names are global (block3 on any stage), so checkpoints of any layout
  // name the same tensors.
  TinyTransformer(const strata::StageInfo& stage, const strata::TpContext& tp)
      : strata::Model(stage) {
    nn::Embedding tok(kVocab, kWidth), pos(kSeq, kWidth);
    if (stage.first) {
      tok_ = register_module("tok", tok);
      pos_ = register_module("pos", pos);
    }
    for (int64_t i = 0; i < kLayers; ++i) {
      auto block = std::make_shared<Block>(tp);
      if (stage.holds(i, kLayers))
        blocks_.push_back(register_module("block" + std::to_string(i), block));
    }
    nn::LayerNorm ln_f(nn::LayerNormOptions({kWidth}));
    nn::Linear head(kWidth, kVocab);
    if (stage.last) {
      ln_f_ = register_module("ln_f", ln_f);
      head_ = register_module("head", head);
    }
  }
  at::Tensor embed(const strata::Batch& b) override {
    const at::Tensor positions = at::arange(b.input.size(1), b.input.options());
    return tok_->forward(b.input) + pos_->forward(positions);  // (B, T, C)
  }
  at::Tensor head_loss(const at::Tensor& x, const strata::Batch& b) override {
    const at::Tensor logits = head_->forward(ln_f_->forward(x));  // (B, T, V)
    return at::cross_entropy_loss(logits.reshape({-1, kVocab}).to(at::kFloat),
                                  b.target.reshape({-1}));
  }
  double flops_per_sample() const override { return 6.0 * 12 * kWidth * kWidth * kLayers * kSeq; }
  int64_t tokens_per_sample() const override { return kSeq; }

 private:
  nn::Embedding tok_{nullptr}, pos_{nullptr};
  nn::LayerNorm ln_f_{nullptr};
  nn::Linear head_{nullptr};
};

// Sample i: start s and stride k from i; tokens s, s+k, s+2k, ... mod the vocabulary.
class CountingDataset : public strata::Dataset {
 public:
  explicit CountingDataset(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  strata::Batch get(const std::vector<int64_t>& indices) const override {
    const auto n = static_cast<int64_t>(indices.size());
    at::Tensor seq = at::empty({n, kSeq + 1}, at::kLong);
    auto a = seq.accessor<int64_t, 2>();
    for (int64_t r = 0; r < n; ++r) {
      const int64_t i = indices[static_cast<size_t>(r)], start = (i * 7) % kVocab;
      const int64_t stride = 1 + (i / kVocab) % 5;
      for (int64_t t = 0; t <= kSeq; ++t) a[r][t] = (start + stride * t) % kVocab;
    }
    return {seq.narrow(1, 0, kSeq).contiguous(), seq.narrow(1, 1, kSeq).contiguous(), {}};
  }

 private:
  int64_t size_;
};

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::Config defaults;
    defaults.memory.recompute = "full";
    defaults.training.batch_size = 16;
    defaults.training.lr = 3e-3;
    defaults.training.warmup_steps = 5;
    defaults.training.steps = 60;
    defaults.training.eval_interval = 0;
    defaults.logging.run_dir = "runs/tiny_transformer";
    const strata::Config cfg = strata::parse_config(argc, argv, defaults);
    const strata::WorldInfo world = strata::init_from_env();

    strata::UserModel model;
    model.name = "tiny-transformer";
    model.build = [](const strata::StageInfo& stage, const strata::TpContext& tp) {
      return std::make_shared<TinyTransformer>(stage, tp);
    };
    model.blocks = kLayers;                   // for --parallel.pp
    model.activation_shape = {kSeq, kWidth};  // what one stage sends the next, per sample
    strata::UserData data{std::make_shared<CountingDataset>(4096),
                          std::make_shared<CountingDataset>(256), "counting sequences"};

    const strata::TrainResult r = strata::train(cfg, world, model, data);
    if (world.rank == 0 && !r.losses.empty())
      std::printf("tiny_transformer: loss %.4f -> %.4f over %zu steps; metrics in %s\n",
                  r.losses.front(), r.losses.back(), r.losses.size(), r.metrics_path.c_str());
    return 0;
  });
}
