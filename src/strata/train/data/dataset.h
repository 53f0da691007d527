#pragma once
#include <memory>
#include <string>
#include <vector>

#include "strata/core/files.h"
#include "strata/models/model.h"

namespace strata {

// A finite, indexable source of samples; get() assembles a micro-batch.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch get(const std::vector<int64_t>& indices) const = 0;
};

}  // namespace strata
