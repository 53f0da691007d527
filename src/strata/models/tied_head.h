#pragma once
#include <ATen/ATen.h>

namespace strata {

// Note [tied head gradient]: the output projection of a language model whose weight is
// also its token embedding (GPT's tied head, BERT's MLM decoder). Through plain
// autograd the head's weight gradient (V x C) would wait in the weight's input buffer
// from the head's backward until the embedding's gradient arrives at the very end,
// and then be summed out of place (the head's gradient is a transposed view): three
// V x C tensors at once, 440 MiB for GPT-2's vocabulary in fp32. Here the head's
// contribution is added straight into weight.grad (addmm_, no V x C temporary) when
// .grad exists, or becomes .grad when it does not (DDP after zero_grad, ZeRO-2/3);
// the embedding's gradient remains autograd's edge to the weight, so the weight's
// accumulate hook (DDP's and ZeRO's readiness signal) fires once, after both parts.
// Returns x @ weight^T, (..., V), in autocast's dtype when autocast is on. On a
// pipeline's last stage the weight is a copy the embedding does not use
// (embedding_here false): there the head is plain autograd, so the copy's
// accumulate hook fires for data parallelism.
at::Tensor tied_head_logits(const at::Tensor& x, const at::Tensor& weight,
                            bool embedding_here = true);

}  // namespace strata
