#pragma once
#include <ATen/Tensor.h>

#include "strata/train/data/dataset.h"

namespace strata {

// Images in memory: (N, C, H, W) float, labels (N) int64.
class ImageDataset : public Dataset {
 public:
  ImageDataset(at::Tensor images, at::Tensor labels);
  int64_t size() const override { return images_.size(0); }
  Batch get(const std::vector<int64_t>& indices) const override;

 private:
  at::Tensor images_, labels_;
};

// Fashion-MNIST from IDX files (gzip or plain) in dir, as Debian's
// dataset-fashion-mnist installs them; split "train" or "t10k". Normalised with
// the training set's mean and std.
std::shared_ptr<ImageDataset> load_fashion_mnist(const std::string& dir, const std::string& split);

// Seeded random samples for benchmarks: each sample is a pure function of (seed, index).
class SyntheticDataset : public Dataset {
 public:
  // Language model: tokens in [0, vocab) of seq_len + 1. Images: C x H x W normal noise, label in
  // [0, classes).
  static std::shared_ptr<SyntheticDataset> tokens(int64_t size, int64_t seq_len, int64_t vocab,
                                                  uint64_t seed);
  static std::shared_ptr<SyntheticDataset> images(int64_t size, int64_t channels, int64_t hw,
                                                  int64_t classes, uint64_t seed);
  int64_t size() const override { return size_; }
  Batch get(const std::vector<int64_t>& indices) const override;

 private:
  int64_t size_ = 0, seq_len_ = 0, vocab_ = 0, channels_ = 0, hw_ = 0, classes_ = 0;
  uint64_t seed_ = 0;
  bool tokens_ = true;
};

}  // namespace strata
