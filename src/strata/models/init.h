#pragma once
#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include <vector>

namespace strata {

// Note [layer init]: transformer weights are drawn in two passes over the whole model,
// in its global layer order: construction (torch::nn's default draws) and then one
// normal draw per weight (linears at their own init_std, embeddings at 0.02; biases
// zero), as GPT-2 does. A part of the model (a pipeline stage, a tensor-parallel
// slice) must start from exactly the weights of one process, so it makes the same
// draws in the same order: the layers it does not hold are constructed for their
// draws and dropped at once, and recorded here by size; the layers it holds slices of
// draw at their full shape and keep the slice. Memory stays one layer over the part;
// time is that of initialising the whole model on each rank (the CPU generator cannot
// skip ahead).
class LayerInit {
 public:
  // Records the second-pass draws of a module this part holds, in module order.
  void held(torch::nn::Module& m);
  // Records the draws of a module constructed only for its draws (then dropped).
  void skipped(torch::nn::Module& m);
  // The second pass, in recorded order.
  void run();

 private:
  void record(torch::nn::Module& m, bool keep);
  struct Item {
    std::vector<int64_t> full_shape;
    double std = 0;
    at::Tensor target;                                   // undefined: a skipped layer
    std::function<at::Tensor(const at::Tensor&)> slice;  // full draw -> this rank's region
    at::Tensor zero;                                     // the bias to zero
  };
  std::vector<Item> items_;
};

}  // namespace strata
