#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/models/flavours.h"

namespace strata {

// Note [activation accounting]
// What autograd keeps for one micro-batch, derived op by op from the tensors each
// of Strata's kernels saves for backward (CPU libtorch; a Note per family in
// activations.cpp), checked against the tracking allocator's timeline. A block's
// `saved` is everything it adds to memory in forward: its internals plus its
// output. In backward, block i frees `saved` and swaps the gradient flowing out
// of it (`out` bytes) for the one flowing into it (`in` bytes); while it runs,
// `backward_extra` more bytes are live (gradient temporaries and the weight
// gradient before it is accumulated into .grad).
struct BlockActivations {
  double saved = 0;           // internals + output, no recompute
  double in = 0, out = 0;     // input and output tensor bytes
  double backward_extra = 0;  // transient peak above the level at the block's backward
  double weights = 0;         // parameter bytes (= its gradients' bytes)
  double weight_grad = 0;     // part of backward_extra that is a weight gradient (ZeRO 2-3 keep it)
  // Held from its backward-input to its weight step when the linears' weight gradients
  // are deferred (zb-h1; Note [deferred weight gradients]): each linear's input and
  // output gradient.
  double deferred = 0;
};

struct ActivationModel {
  double batch = 0;  // the micro-batch's input tensors (indices, images, targets)
  double embed = 0;  // embedding/stem: kept until backward ends (includes block 0's input)
  std::vector<BlockActivations> blocks;
  double head = 0;           // added between the last block and the loss
  double head_backward = 0;  // transient above the loss level in the head's backward
  double head_deferred = 0;  // the head's deferrable linears' tensors (as a block's deferred)
  // Tied embedding without a .grad to add into (DDP after zero_grad, ZeRO-2/3): the
  // head's part of the weight gradient becomes .grad and waits for the embedding's
  // (Note [tied head gradient]).
  double tied_gradient = 0;
  // The token embedding's backward: its dense weight gradient (V x C), made before it
  // is added into (or becomes) .grad.
  double embed_backward = 0;
  bool block_keeps_output = false;  // the block's own last op saves its output (ReLU)
  // What a pipeline stage's send adds beside its output (Note [pipeline executor]): the
  // output is sent as it is, unless it must be cast to the activation dtype (GPT's
  // fp32 residual stream under autocast), when the half copy is held until its
  // gradient returns.
  double sent_copy = 0;
  // A message between pipeline stages (an activation or its gradient), in the
  // activation dtype; 0: the block input's size.
  double stage_message = 0;
  // Selective recompute: bytes dropped per block (attention core internals).
  double selective_saving = 0;
};

struct ActivationOptions {
  int64_t micro_batch = 1;
  int64_t act_bytes = 4;    // 2 when the blocks compute in bf16/fp16
  int64_t param_bytes = 4;  // bytes of a parameter (and of its gradient)
  int64_t tp = 1;           // Megatron tensor parallel: the block's matmul activations / tp
  bool sequence_parallel = false;
  bool autocast = false;  // fp32 parameters, half compute (memory.master_weights=false)
};

// Pure: the per-micro-batch activation model of the spec's family.
ActivationModel activation_model(const ModelSpec& spec, const ActivationOptions& o);

}  // namespace strata
