#include "strata/parallel/pipeline/executor.h"

#include <chrono>
#include <map>
#include <optional>

#include "strata/core/errors.h"
#include "strata/distributed/heartbeat.h"
#include "strata/memory/precision.h"
#include "strata/memory/timeline.h"
#include "strata/memory/tracking_allocator.h"
#include "strata/models/deferred_grad.h"

namespace strata {

namespace {
// What the executor holds of one (chunk, micro-batch) between its actions.
struct InFlight {
  at::Tensor input;     // received activation (a leaf requiring grad); undefined on stage 0
  at::Tensor output;    // the part's output (not the last virtual stage) or its loss (last)
  at::Tensor grad;      // the output's received gradient
  CommWork input_recv;  // pending receive of input
  CommWork grad_recv;   // pending receive of grad
};
}  // namespace

double run_stage_actions(const StageActions& actions, int64_t micro_batches, StepContext& ctx,
                         const std::function<Batch(int64_t)>& batch_of) {
  double loss_sum = 0;
  const int64_t p = ctx.pp ? ctx.pp->size() : 1, rank = ctx.pp ? ctx.pp->rank() : 0;
  const int64_t last = p * static_cast<int64_t>(ctx.parts.size()) - 1;
  std::map<std::pair<int64_t, int64_t>, InFlight> held;  // (chunk, micro)
  // Weight gradients an I left for its W, by (chunk, micro).
  std::map<std::pair<int64_t, int64_t>, std::vector<DeferredWeightGrad>> deferred;
  // Sends in flight with what they send. Gloo reports a send complete only when it is
  // waited, so the schedule says when waiting cannot block: an activation's send is
  // surely received once its gradient has come back (the receiver ran that
  // micro-batch's forward and backward first), so it is waited and released there;
  // a gradient's send once an activation the neighbour sent after receiving it has
  // arrived (Note [sent gradients released]), else at the step's end.
  using Sends = std::map<std::pair<int64_t, int64_t>, std::pair<CommWork, at::Tensor>>;
  Sends activation_sends, grad_sends;  // by (chunk, micro)
  auto send = [&](at::Tensor t, int64_t to, int tag) {
    CommWork w = ctx.pp->send(t, to, tag);
    return std::make_pair(std::move(w), std::move(t));
  };
  // Waits a send the schedule says has arrived, and frees its buffer.
  auto release = [](Sends& sends, const std::pair<int64_t, int64_t>& key) {
    auto sent = sends.find(key);
    if (sent == sends.end()) return;
    sent->second.first.wait();
    sends.erase(sent);
  };
  // Note [pipeline executor]: one tag per message.
  auto tag = [&](int64_t micro, int64_t to_stage, bool activation) {
    return static_cast<int>(((micro * (last + 1) + to_stage) * 2) + (activation ? 0 : 1));
  };
  auto peer = [&](int64_t stage) { return ((stage % p) + p) % p; };
  const auto step_start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  };
  for (size_t index = 0; index < actions.size(); ++index) {
    const Action& a = actions[index];
    heartbeat::tick();  // Note [heartbeat]: a micro-batch is progress
    MemoryScope scope(Category::kActivations);
    const int64_t vs = a.chunk * p + rank;
    InFlight& f = held[{a.chunk, a.micro}];
    // Compute actions wait for their messages before the clock starts (a no-op where
    // nothing is pending: the first or last virtual stage, one stage).
    if (a.type == ActionType::kForward) {
      f.input_recv.wait();
      if (ctx.sent_gradients_done)
        for (const auto& key : ctx.sent_gradients_done->at(index)) release(grad_sends, key);
    }
    if (a.type == ActionType::kBackward || a.type == ActionType::kBackwardInput) {
      f.grad_recv.wait();
      release(activation_sends, {a.chunk, a.micro});
    }
    const double started = seconds();
    switch (a.type) {
      case ActionType::kRecvActivation:
        f.input = at::empty(ctx.activation_shape,
                            at::TensorOptions().dtype(ctx.activation_dtype).device(ctx.device));
        f.input_recv = ctx.pp->recv(f.input, peer(vs - 1), tag(a.micro, vs, true));
        break;
      case ActionType::kRecvGrad:
        f.grad = at::empty(ctx.activation_shape,
                           at::TensorOptions().dtype(ctx.activation_dtype).device(ctx.device));
        f.grad_recv = ctx.pp->recv(f.grad, peer(vs + 1), tag(a.micro, vs, false));
        break;
      case ActionType::kForward: {
        ctx.grad_sync.set_sync(a.micro + 1 == micro_batches);
        Model& part = *ctx.parts.at(static_cast<size_t>(a.chunk));
        Batch b = batch_of(a.micro);
        if (vs > 0) f.input.requires_grad_(true);
        STRATA_TIMELINE_MARK("micro[", a.micro, "].forward.begin");
        {
          AutocastScope autocast(ctx.device, ctx.compute_dtype);
          f.output = ctx.grad_sync.forward([&] { return part.forward_part(f.input, b); });
        }
        STRATA_TIMELINE_MARK("micro[", a.micro, "].loss");
        break;
      }
      case ActionType::kSendActivation: {
        activation_sends[{a.chunk, a.micro}] =
            send(f.output.detach().to(ctx.activation_dtype).contiguous(), peer(vs + 1),
                 tag(a.micro, vs + 1, true));
        break;
      }
      case ActionType::kBackward:
      case ActionType::kBackwardInput: {
        ctx.grad_sync.set_sync(a.micro + 1 == micro_batches);
        STRATA_ASSERT(f.output.defined(), "schedule runs ", a.to_string(), " before its forward");
        // Note [deferred weight gradients]: I leaves the linears' dW for W.
        std::optional<WeightGradDeferral> defer;
        if (a.type == ActionType::kBackwardInput) defer.emplace(deferred[{a.chunk, a.micro}]);
        if (vs == last) {
          (f.output * ctx.backward_factor).backward();
          loss_sum += f.output.item<double>();
        } else {
          f.output.backward(f.grad.to(f.output.scalar_type()));
        }
        STRATA_TIMELINE_MARK("micro[", a.micro, "].backward.end");
        f.output = at::Tensor();
        f.grad = at::Tensor();
        if (vs == 0) held.erase({a.chunk, a.micro});
        break;
      }
      case ActionType::kSendGrad: {
        STRATA_ASSERT(f.input.defined() && f.input.grad().defined(), a.to_string(),
                      " has no input gradient to send");
        grad_sends[{a.chunk, a.micro}] = send(f.input.grad().to(ctx.activation_dtype).contiguous(),
                                              peer(vs - 1), tag(a.micro, vs - 1, false));
        held.erase({a.chunk, a.micro});
        break;
      }
      case ActionType::kBackwardWeight: {
        auto queued = deferred.find({a.chunk, a.micro});
        STRATA_ASSERT(queued != deferred.end(), "schedule runs ", a.to_string(),
                      " before its backward-input");
        apply_weight_grads(queued->second);
        deferred.erase(queued);
        break;
      }
    }
    if (ctx.timeline) ctx.timeline->push_back({a, started, seconds()});
  }
  for (auto& [key, sent] : activation_sends) sent.first.wait();
  for (auto& [key, sent] : grad_sends) sent.first.wait();
  return loss_sum;
}

}  // namespace strata
