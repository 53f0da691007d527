#include "strata/train/fresh_optimizer.h"

#include <ATen/ATen.h>

namespace strata {
namespace {

bool is_optim(const std::string& name) {
  return name.rfind("optim.", 0) == 0;
}

// "optim.<param>.exp_avg" -> "model.<param>"; "" for a step counter.
std::string weight_of(const std::string& name) {
  for (const char* suffix : {".exp_avg_sq", ".exp_avg"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      return "model." + name.substr(6, name.size() - 6 - s.size());
  }
  return "";
}

}  // namespace

bool FreshOptimizerReader::has(const std::string& name) const {
  if (!is_optim(name)) return in_.has(name);
  const std::string w = weight_of(name);
  return w.empty() || in_.has(w);
}

std::vector<int64_t> FreshOptimizerReader::global_shape(const std::string& name) const {
  if (!is_optim(name)) return in_.global_shape(name);
  const std::string w = weight_of(name);
  return w.empty() ? std::vector<int64_t>{1} : in_.global_shape(w);
}

void FreshOptimizerReader::read(const std::string& name, at::Tensor out,
                                const std::vector<int64_t>& offsets) const {
  if (is_optim(name)) {
    out.zero_();
    return;
  }
  in_.read(name, out, offsets);
}

void FreshOptimizerReader::read_flat(const std::string& name, at::Tensor out,
                                     int64_t offset) const {
  if (is_optim(name)) {
    out.zero_();
    return;
  }
  in_.read_flat(name, out, offset);
}

void FreshOptimizerReader::read_box_flat(const std::string& name, at::Tensor out,
                                         const std::vector<int64_t>& offsets,
                                         const std::vector<int64_t>& box_shape,
                                         int64_t offset) const {
  if (is_optim(name)) {
    out.zero_();
    return;
  }
  in_.read_box_flat(name, out, offsets, box_shape, offset);
}

}  // namespace strata
