#include "strata/train/data/images.h"

#include <ATen/ATen.h>
#include <zlib.h>

#include <filesystem>

#include "strata/core/errors.h"

namespace strata {

ImageDataset::ImageDataset(at::Tensor images, at::Tensor labels)
    : images_(std::move(images)), labels_(std::move(labels)) {}

Batch ImageDataset::get(const std::vector<int64_t>& indices) const {
  at::Tensor idx = at::tensor(indices, at::kLong);
  return Batch{images_.index_select(0, idx), labels_.index_select(0, idx), {}};
}

namespace {

std::string read_gz_or_plain(const std::string& base) {
  std::string path = std::filesystem::exists(base + ".gz") ? base + ".gz" : base;
  STRATA_CHECK(std::filesystem::exists(path), "Fashion-MNIST file ", base,
               "(.gz) not found; install "
               "Debian's dataset-fashion-mnist (scripts/setup.sh does it) or set data.path to the "
               "folder with the IDX files");
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  STRATA_CHECK(f, "cannot open ", path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

uint32_t be32(const std::string& s, size_t off) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[off + i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

}  // namespace

std::shared_ptr<ImageDataset> load_fashion_mnist(const std::string& dir, const std::string& split) {
  std::string img = read_gz_or_plain(dir + "/" + split + "-images-idx3-ubyte");
  std::string lab = read_gz_or_plain(dir + "/" + split + "-labels-idx1-ubyte");
  STRATA_CHECK(img.size() >= 16 && be32(img, 0) == 2051 && lab.size() >= 8 && be32(lab, 0) == 2049,
               "Fashion-MNIST files in ", dir, " are not IDX image/label files; reinstall them");
  const int64_t n = be32(img, 4), h = be32(img, 8), w = be32(img, 12);
  STRATA_CHECK(be32(lab, 4) == static_cast<uint32_t>(n) &&
                   img.size() >= 16 + static_cast<size_t>(n * h * w) &&
                   lab.size() >= 8 + static_cast<size_t>(n),
               "Fashion-MNIST ", split, " files in ", dir, " are truncated; reinstall them");
  at::Tensor pixels = at::from_blob(img.data() + 16, {n, 1, h, w}, at::kByte).to(at::kFloat);
  at::Tensor labels = at::from_blob(lab.data() + 8, {n}, at::kByte).to(at::kLong);
  // Mean and std of the Fashion-MNIST training pixels (scaled to [0, 1]).
  pixels = (pixels / 255.0 - 0.2860) / 0.3530;
  return std::make_shared<ImageDataset>(pixels, labels);
}

std::shared_ptr<SyntheticDataset> SyntheticDataset::tokens(int64_t size, int64_t seq_len,
                                                           int64_t vocab, uint64_t seed) {
  auto d = std::make_shared<SyntheticDataset>();
  d->size_ = size;
  d->seq_len_ = seq_len;
  d->vocab_ = vocab;
  d->seed_ = seed;
  d->tokens_ = true;
  return d;
}

std::shared_ptr<SyntheticDataset> SyntheticDataset::images(int64_t size, int64_t channels,
                                                           int64_t hw, int64_t classes,
                                                           uint64_t seed) {
  auto d = std::make_shared<SyntheticDataset>();
  d->size_ = size;
  d->channels_ = channels;
  d->hw_ = hw;
  d->classes_ = classes;
  d->seed_ = seed;
  d->tokens_ = false;
  return d;
}

Batch SyntheticDataset::get(const std::vector<int64_t>& indices) const {
  std::vector<at::Tensor> xs, ys;
  for (int64_t i : indices) {
    auto gen =
        at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003ull + static_cast<uint64_t>(i));
    if (tokens_) {
      xs.push_back(at::randint(vocab_, {seq_len_ + 1}, gen));
    } else {
      xs.push_back(at::randn({channels_, hw_, hw_}, gen));
      ys.push_back(at::randint(classes_, {}, gen));
    }
  }
  at::Tensor x = at::stack(xs);
  if (tokens_) {
    return Batch{x.narrow(1, 0, seq_len_).contiguous(), x.narrow(1, 1, seq_len_).contiguous(), {}};
  }
  return Batch{x, at::stack(ys), {}};
}

}  // namespace strata
