#pragma once
#include <compare>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata {

// Note [schedules are data]: a schedule is, per pipeline rank, the list of actions that
// rank runs in order; one executor runs any of them and tests check them as lists. A
// stage that is the whole model (pp=1) has the degenerate schedule: forward and
// backward of each micro-batch in turn, so one micro-batch's activations are alive at
// a time.
//
// Ranks and chunks: with p ranks and v chunks (model parts) per rank there are p*v
// virtual stages; chunk c of rank r is virtual stage c*p + r (Megatron's interleaving),
// so activations flow r -> r+1 within a chunk and from rank p-1's chunk c to rank 0's
// chunk c+1. Communication is explicit: a forward on a virtual stage other than the
// first is preceded by the receive of its input, and followed, on all but the last,
// by the send of its output; backward (or backward-input) mirrors it with gradients.
// Sends do not block; a receive waits for its matching send. Between two ranks each
// kind of message is received in the order it is sent (check_schedule proves it).
enum class ActionType {
  kForward,
  kBackward,        // input and weight gradients together
  kBackwardInput,   // zero-bubble split: the input gradient (on the critical path) ...
  kBackwardWeight,  // ... and the weight gradient, deferred into the bubbles
  kSendActivation,
  kRecvActivation,
  kSendGrad,
  kRecvGrad,
};

struct Action {
  ActionType type;
  int64_t micro = 0;  // micro-batch
  int64_t chunk = 0;  // model part (virtual stage) of this rank
  bool operator==(const Action&) const = default;
  // "0F3": chunk 0, forward, micro-batch 3 (PyTorch pipelining's notation); I and W
  // for the split backward; "0sF3"/"0rF3" send/receive chunk 0's activation of
  // micro-batch 3, "0sB3"/"0rB3" the gradient.
  std::string to_string() const;
  bool is_compute() const;
  bool is_send() const;
  bool is_receive() const;
  bool carries_activation() const;  // a send or receive of an activation (else a gradient)
};
using StageActions = std::vector<Action>;

// pp = 1: F0 B0 F1 B1 ... for micro_batches micro-batches (one stage's list).
std::vector<StageActions> single_stage_schedule(int64_t micro_batches);

// Note [pipeline schedules]
//  - gpipe: every forward, then every backward (m micro-batches in flight);
//  - 1f1b: p-r-1 warm-up forwards on rank r, then one forward and one backward in
//    turn, then the remaining backwards (at most p-r in flight; Narayanan et al. 2019);
//  - interleaved: 1f1b over v chunks per rank, micro-batches in groups of p (m must be
//    a multiple of p when v > 1), each group through chunk 0, 1, ... forward and the
//    reverse backward; rank r warms up with 2(p-r-1) + (v-1)p forwards (Megatron-LM's
//    order; Narayanan et al. 2021). The idle time shrinks by v at the cost of v times
//    the messages and more micro-batches in flight;
//  - zb-h1: the backward split into input (I) and weight (W) gradients (Qi et al.
//    2023). The list comes from a list scheduler over unit costs that runs, when a rank
//    is free, a forward 1f1b's discipline allows (at most p-r forwarded and not yet
//    I'd) and that keeps at most p micro-batches held until their W (1f1b's peak, on
//    rank 0, so the peak memory is 1f1b's), else a ready I, else the oldest deferred
//    W. With F, I and W of equal cost its idle time is p-1, a third of 1f1b's, as H1's.
enum class ScheduleKind { kGpipe, k1F1B, kInterleaved, kZbH1 };
// One error line naming the choices unless name is one of gpipe, 1f1b, interleaved, zb-h1.
ScheduleKind parse_schedule_kind(const std::string& name);
std::string schedule_name(ScheduleKind kind);

// Per rank, the whole list (compute and communication) for p ranks, m micro-batches
// and v chunks per rank (v > 1 only for interleaved). Refuses, in one line naming the
// fix, what a schedule cannot run: m < p for 1f1b, interleaved and zb-h1 (the warm-up
// would wait for micro-batches that do not exist).
std::vector<StageActions> pipeline_schedule(ScheduleKind kind, int64_t p, int64_t m, int64_t v = 1);

// What check_schedule found: an empty error when every micro-batch of every chunk is
// run forward once, then backward once (or backward-input then backward-weight), each
// communication action sits next to its compute and each send is received, in the
// same order, by the neighbour; and the largest number of micro-batches whose
// activations a rank holds at once (from a forward to its backward or weight step).
//
// beside: per rank, what it holds of the other micro-batches at each of its compute
// actions (distinct states, in order of first appearance): those run forward and not
// yet backward (all their activations), and those past their backward-input and not
// yet weight-stepped (only the tensors their deferred weight gradients need; Note
// [deferred weight gradients]; the forwarded also per chunk, whose parts differ), and
// whether the rank has run a backward (or
// backward-input) before it, after which what a step's first backward leaves (the
// gradients a pipeline's ZeRO-2 root keeps) is held too. The memory estimate takes the
// costliest.
struct HeldBeside {
  int64_t forwarded = 0;
  int64_t awaiting_weight = 0;
  bool after_backward = false;
  std::vector<int64_t> forwarded_by_chunk{};  // forwarded, per chunk of the rank
  // Input gradients sent and not yet released (Note [sent gradients released]).
  int64_t gradients_sent = 0;
  auto operator<=>(const HeldBeside&) const = default;
};
struct ScheduleCheck {
  std::string error;
  int64_t max_in_flight = 0;
  std::vector<int64_t> in_flight;  // per rank
  std::vector<std::vector<HeldBeside>> beside;
};
ScheduleCheck check_schedule(const std::vector<StageActions>& schedule, int64_t micro_batches,
                             int64_t chunks = 1);

// Note [sent gradients released]: a sent gradient's buffer must live until its send is
// waited, and waiting a Gloo send blocks until the neighbour has received it. Waited at
// the step's end, a stage held every micro-batch's input gradient until then (m of
// them: the debug GPT's last stage 0.75 MiB at 16 micro-batches, GPT-3's 50 MB each).
// The schedule tells when waiting cannot block: the neighbour received gradient k
// before its backward of k, so any activation it sends this rank after that backward
// arrives after gradient k did. For each action of rank `rank`'s list, the (chunk,
// micro) keys of the gradient sends that are surely complete once that action's input
// has arrived (set on forwards only; empty elsewhere). A send no such forward follows
// is waited at the step's end.
std::vector<std::vector<std::pair<int64_t, int64_t>>> sent_gradients_done(
    const std::vector<StageActions>& schedule, int64_t rank);

}  // namespace strata
