// bench/memory's Strata side: forward + backward of a stack of GPT-2 blocks under
// one precision and recompute mode; prints one JSON line per measured step.
// torch_blocks.py is the same for PyTorch; run.py drives both.
//
//   strata_bench_memory --blocks 12 --seq 512 --batch 1 --precision bf16
//                       --recompute selective [--k 2] [--dropout 0.1] [--steps 3]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "strata/memory/precision.h"
#include "strata/memory/process_memory.h"
#include "strata/memory/recompute.h"
#include "strata/memory/tracking_allocator.h"
#include "strata/models/init.h"
#include "strata/models/transformer.h"
#include "strata/parallel/recompute.h"

using namespace strata;

namespace {

// Blocks only: embed passes the batch's activations through, the "loss" is
// <output, target> so its gradient is target and the head costs nothing.
class BlockStack : public Model {
 public:
  BlockStack(int64_t n, int64_t d, int64_t heads, double dropout) {
    LayerInit init;
    for (int64_t i = 0; i < n; ++i) {
      blocks_.push_back(
          register_module("block" + std::to_string(i),
                          std::make_shared<GptBlock>(BlockShape{d, heads, dropout, true, n, {}})));
      init.held(*blocks_.back());
    }
    init.run();
  }
  at::Tensor embed(const Batch& b) override { return b.input; }
  at::Tensor head_loss(const at::Tensor& x, const Batch& b) override {
    return (x.to(at::kFloat) * b.target).sum();
  }
  double flops_per_sample() const override { return 0; }
  int64_t tokens_per_sample() const override { return 0; }
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {
      {"blocks", "12"},   {"seq", "512"},        {"batch", "1"},        {"d", "768"},
      {"heads", "12"},    {"precision", "fp32"}, {"recompute", "none"}, {"k", "2"},
      {"dropout", "0.1"}, {"steps", "3"},        {"warmup", "1"},       {"threads", "2"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0 || !a.count(key.substr(2))) {
      std::cerr << "error: unknown option " << key << "\n";
      return 2;
    }
    a[key.substr(2)] = argv[i + 1];
  }
  auto num = [&](const char* k) { return std::stoll(a[k]); };
  try {
    at::set_num_threads(static_cast<int>(num("threads")));
    install_tracking_allocator();
    at::manual_seed(0);
    const Precision precision = parse_precision(a["precision"]);
    const at::ScalarType dt = compute_dtype(precision);
    auto model = std::make_shared<BlockStack>(num("blocks"), num("d"), num("heads"),
                                              std::stod(a["dropout"]));
    apply_recompute(*model, parse_recompute(a["recompute"]), num("k"));
    if (dt != at::kFloat) cast_model(*model, dt);  // master-weights style: half blocks
    {
      MemoryScope scope(Category::kGradients);
      for (auto& p : model->parameters()) p.mutable_grad() = at::zeros_like(p);
    }
    Batch b{at::randn({num("batch"), num("seq"), num("d")}).to(dt),
            at::randn({num("batch"), num("seq"), num("d")}),
            {}};
    for (int64_t s = 0; s < num("warmup") + num("steps"); ++s) {
      reset_memory_peaks();
      reset_rss_peak();
      const int64_t rss0 = rss_bytes();
      const auto t0 = std::chrono::steady_clock::now();
      auto t_fwd = t0;
      {
        MemoryScope scope(Category::kActivations);
        at::Tensor loss;
        {
          AutocastScope autocast(c10::DeviceType::CPU, dt);
          loss = model->forward_loss(b);
        }
        t_fwd = std::chrono::steady_clock::now();
        loss.backward();
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const MemoryStats m = memory_stats();
      if (s < num("warmup")) continue;
      nlohmann::json rec = {
          {"framework", "strata"},
          {"precision", a["precision"]},
          {"recompute", a["recompute"]},
          {"blocks", num("blocks")},
          {"ms", ms},
          {"forward_ms", std::chrono::duration<double, std::milli>(t_fwd - t0).count()},
          {"activation_peak", m.peak[static_cast<size_t>(Category::kActivations)]},
          {"rss_peak_delta", rss_peak_bytes() - rss0}};
      std::cout << rec.dump() << std::endl;
    }
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::cerr << "error: " << msg.substr(0, msg.find('\n')) << "\n";
    return 2;
  }
  return 0;
}
