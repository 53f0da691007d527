#include "strata/parallel/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <c10/util/StringUtil.h>

#include "strata/core/errors.h"

namespace strata {

namespace {
bool is_backward(ActionType t) {
  return t == ActionType::kBackward || t == ActionType::kBackwardInput;
}
}  // namespace

std::string Action::to_string() const {
  const char* kind = "";
  switch (type) {
    case ActionType::kForward:
      kind = "F";
      break;
    case ActionType::kBackward:
      kind = "B";
      break;
    case ActionType::kBackwardInput:
      kind = "I";
      break;
    case ActionType::kBackwardWeight:
      kind = "W";
      break;
    case ActionType::kSendActivation:
      kind = "sF";
      break;
    case ActionType::kRecvActivation:
      kind = "rF";
      break;
    case ActionType::kSendGrad:
      kind = "sB";
      break;
    case ActionType::kRecvGrad:
      kind = "rB";
      break;
  }
  return std::to_string(chunk) + kind + std::to_string(micro);
}

bool Action::is_compute() const {
  return type == ActionType::kForward || type == ActionType::kBackward ||
         type == ActionType::kBackwardInput || type == ActionType::kBackwardWeight;
}
bool Action::is_send() const {
  return type == ActionType::kSendActivation || type == ActionType::kSendGrad;
}
bool Action::is_receive() const {
  return type == ActionType::kRecvActivation || type == ActionType::kRecvGrad;
}
bool Action::carries_activation() const {
  return type == ActionType::kSendActivation || type == ActionType::kRecvActivation;
}

std::vector<StageActions> single_stage_schedule(int64_t micro_batches) {
  StageActions a;
  for (int64_t m = 0; m < micro_batches; ++m) {
    a.push_back({ActionType::kForward, m, 0});
    a.push_back({ActionType::kBackward, m, 0});
  }
  return {a};
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::kGpipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "interleaved") return ScheduleKind::kInterleaved;
  if (name == "zb-h1") return ScheduleKind::kZbH1;
  STRATA_FAIL("unknown pipeline schedule '", name, "'; use gpipe, 1f1b, interleaved or zb-h1");
}

std::string schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZbH1:
      return "zb-h1";
  }
  return "?";
}

namespace {

using Order = std::vector<Action>;  // one rank's compute actions

Order gpipe_order(int64_t m) {
  Order o;
  for (int64_t i = 0; i < m; ++i) o.push_back({ActionType::kForward, i, 0});
  for (int64_t i = 0; i < m; ++i) o.push_back({ActionType::kBackward, i, 0});
  return o;
}

// Warm-up forwards, then forward/backward pairs, then the remaining backwards, over
// the given forward and backward sequences of (micro, chunk).
Order one_f_one_b(const Order& fwd, const Order& bwd, int64_t warmup) {
  const auto total = static_cast<int64_t>(fwd.size());
  warmup = std::min(warmup, total);
  Order o(fwd.begin(), fwd.begin() + warmup);
  for (int64_t i = 0; i < total - warmup; ++i) {
    o.push_back(fwd[static_cast<size_t>(warmup + i)]);
    o.push_back(bwd[static_cast<size_t>(i)]);
  }
  for (int64_t i = total - warmup; i < total; ++i) o.push_back(bwd[static_cast<size_t>(i)]);
  return o;
}

Order interleaved_order(int64_t r, int64_t p, int64_t m, int64_t v) {
  // Micro-batches in groups of p; each group runs through the chunks in order forward
  // and in reverse backward.
  Order fwd, bwd;
  for (int64_t start = 0; start < m; start += p) {
    const int64_t size = std::min(p, m - start);
    for (int64_t c = 0; c < v; ++c)
      for (int64_t i = start; i < start + size; ++i) {
        fwd.push_back({ActionType::kForward, i, c});
        bwd.push_back({ActionType::kBackward, i, v - 1 - c});
      }
  }
  const int64_t warmup = v == 1 ? p - r - 1 : 2 * (p - r - 1) + (v - 1) * p;
  return one_f_one_b(fwd, bwd, warmup);
}

// Note [pipeline schedules]'s list scheduler for zb-h1, over unit costs.
std::vector<Order> zb_h1_orders(int64_t p, int64_t m) {
  constexpr int64_t kNone = -1;
  std::vector<std::vector<int64_t>> f_end(p, std::vector<int64_t>(m, kNone));
  std::vector<std::vector<int64_t>> i_end(p, std::vector<int64_t>(m, kNone));
  std::vector<int64_t> next_f(p, 0), next_i(p, 0), in_flight(p, 0), busy_until(p, 0);
  std::vector<std::deque<int64_t>> pending_w(p);
  std::vector<Order> orders(p);
  auto done = [](int64_t end, int64_t t) { return end != kNone && end <= t; };
  const int64_t limit = 4 * (3 * m + p) + 16;
  int64_t finished = 0;
  for (int64_t t = 0; finished < p * 3 * m; ++t) {
    STRATA_ASSERT(t < limit, "zb-h1 list scheduler made no progress");
    for (int64_t r = 0; r < p; ++r) {
      if (busy_until[r] > t) continue;
      const auto ru = static_cast<size_t>(r);
      const int64_t i = next_i[ru], f = next_f[ru];
      const bool i_ready = i < f && done(f_end[ru][static_cast<size_t>(i)], t) &&
                           (r == p - 1 || done(i_end[ru + 1][static_cast<size_t>(i)], t));
      const bool f_ready = f < m && f - i < p - r && in_flight[ru] < p &&
                           (r == 0 || done(f_end[ru - 1][static_cast<size_t>(f)], t));
      if (f_ready) {
        orders[ru].push_back({ActionType::kForward, f, 0});
        f_end[ru][static_cast<size_t>(f)] = t + 1;
        ++in_flight[ru];
        ++next_f[ru];
      } else if (i_ready) {
        orders[ru].push_back({ActionType::kBackwardInput, i, 0});
        i_end[ru][static_cast<size_t>(i)] = t + 1;
        pending_w[ru].push_back(i);
        ++next_i[ru];
      } else if (!pending_w[ru].empty()) {
        orders[ru].push_back({ActionType::kBackwardWeight, pending_w[ru].front(), 0});
        pending_w[ru].pop_front();
        --in_flight[ru];
      } else {
        continue;
      }
      busy_until[ru] = t + 1;
      ++finished;
    }
  }
  return orders;
}

// Adds each compute action's receive before it and send after it (Note [schedules
// are data]).
StageActions with_messages(const Order& order, int64_t r, int64_t p, int64_t v) {
  StageActions out;
  const int64_t last = p * v - 1;
  for (const Action& a : order) {
    const int64_t vs = a.chunk * p + r;
    if (a.type == ActionType::kForward) {
      if (vs > 0) out.push_back({ActionType::kRecvActivation, a.micro, a.chunk});
      out.push_back(a);
      if (vs < last) out.push_back({ActionType::kSendActivation, a.micro, a.chunk});
    } else if (is_backward(a.type)) {
      if (vs < last) out.push_back({ActionType::kRecvGrad, a.micro, a.chunk});
      out.push_back(a);
      if (vs > 0) out.push_back({ActionType::kSendGrad, a.micro, a.chunk});
    } else {
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace

std::vector<StageActions> pipeline_schedule(ScheduleKind kind, int64_t p, int64_t m, int64_t v) {
  STRATA_CHECK(p >= 1 && m >= 1 && v >= 1, "pipeline schedule needs pp, micro-batches and ",
               "chunks of at least 1 (got pp=", p, ", micro-batches=", m, ", chunks=", v, ")");
  STRATA_CHECK(v == 1 || kind == ScheduleKind::kInterleaved, "parallel.pp_virtual=", v,
               " applies to the interleaved schedule only; use pp_schedule=interleaved or ",
               "pp_virtual=1");
  STRATA_CHECK(kind == ScheduleKind::kGpipe || m >= p, "the ", schedule_name(kind),
               " schedule needs at least pp=", p, " micro-batches per step (got ", m,
               "); lower training.micro_batch_size so that batch_size / (micro_batch_size x ",
               "dp) >= ", p, ", or use pp_schedule=gpipe");
  // Note [pipeline schedules]: a last group smaller than p leaves ranks waiting in
  // every chunk's round (measured: more idle time than 1f1b for m = 3p+1), so the
  // interleaved order takes whole groups, as Megatron-LM first did.
  STRATA_CHECK(v == 1 || m % p == 0, "the interleaved schedule needs micro-batches per step (", m,
               ") divisible by pp=", p, "; choose training.micro_batch_size so that ",
               "batch_size / (micro_batch_size x dp) is a multiple of ", p);
  std::vector<Order> orders;
  if (kind == ScheduleKind::kZbH1) {
    orders = zb_h1_orders(p, m);
  } else {
    for (int64_t r = 0; r < p; ++r)
      orders.push_back(kind == ScheduleKind::kGpipe ? gpipe_order(m)
                                                    : interleaved_order(r, p, m, v));
  }
  std::vector<StageActions> out;
  for (int64_t r = 0; r < p; ++r)
    out.push_back(with_messages(orders[static_cast<size_t>(r)], r, p, v));
  return out;
}

ScheduleCheck check_schedule(const std::vector<StageActions>& schedule, int64_t micro_batches,
                             int64_t chunks) {
  ScheduleCheck out;
  const auto p = static_cast<int64_t>(schedule.size());
  const int64_t last = p * chunks - 1;
  // Messages per channel (sender, receiver, kind), as (micro, receiving virtual stage).
  using Channel = std::tuple<int64_t, int64_t, bool>;
  std::map<Channel, std::vector<std::pair<int64_t, int64_t>>> sent, received;
  enum : int { kNone = 0, kForwarded, kInputGrad, kDone };
  for (int64_t r = 0; r < p; ++r) {
    struct State {
      int compute = kNone;
      bool recv_act = false, send_act = false, recv_grad = false, send_grad = false;
    };
    std::map<std::pair<int64_t, int64_t>, State> state;  // (chunk, micro)
    int64_t in_flight = 0, peak = 0, awaiting_weight = 0;
    std::vector<HeldBeside> beside;
    std::set<HeldBeside> seen;  // a list of thousands of actions repeats few states
    bool backward_run = false;
    std::vector<int64_t> forwarded(static_cast<size_t>(std::max<int64_t>(chunks, 1)), 0);
    // Sent gradients held until the executor releases them.
    const auto released = sent_gradients_done(schedule, r);
    int64_t gradients_sent = 0;
    // The state beside an action of `chunk` (its own micro-batch not counted).
    auto note_beside = [&](int64_t chunk, bool own_forwarded) {
      HeldBeside h{0, awaiting_weight, backward_run, forwarded, gradients_sent};
      if (own_forwarded) --h.forwarded_by_chunk[static_cast<size_t>(chunk)];
      for (const int64_t n : h.forwarded_by_chunk) h.forwarded += n;
      if (seen.insert(h).second) beside.push_back(std::move(h));
    };
    const std::string where = "stage " + std::to_string(r) + ": ";
    auto fail = [&](const Action& a, const std::string& what) {
      out.error = where + a.to_string() + " " + what;
    };
    const StageActions& list = schedule[static_cast<size_t>(r)];
    for (size_t index = 0; index < list.size(); ++index) {
      const Action& a = list[index];
      gradients_sent -= static_cast<int64_t>(released[index].size());
      if (a.type == ActionType::kSendGrad) ++gradients_sent;
      if (a.micro < 0 || a.micro >= micro_batches || a.chunk < 0 || a.chunk >= chunks) {
        fail(a, "names no micro-batch or chunk of this run");
        return out;
      }
      State& st = state[{a.chunk, a.micro}];
      const int64_t vs = a.chunk * p + r;
      switch (a.type) {
        case ActionType::kForward:
          if (st.compute != kNone) return fail(a, "runs a second forward"), out;
          if (vs > 0 && !st.recv_act) return fail(a, "runs before its input is received"), out;
          st.compute = kForwarded;
          note_beside(a.chunk, false);
          ++forwarded[static_cast<size_t>(a.chunk)];
          peak = std::max(peak, ++in_flight);
          break;
        case ActionType::kBackward:
        case ActionType::kBackwardInput:
          if (st.compute != kForwarded)
            return fail(a, st.compute == kNone ? "comes before its forward"
                                               : "runs a second backward"),
                   out;
          if (vs < last && !st.recv_grad)
            return fail(a, "runs before its output's gradient is received"), out;
          note_beside(a.chunk, true);
          --forwarded[static_cast<size_t>(a.chunk)];
          backward_run = true;
          st.compute = a.type == ActionType::kBackward ? kDone : kInputGrad;
          if (a.type == ActionType::kBackward)
            --in_flight;
          else
            ++awaiting_weight;
          break;
        case ActionType::kBackwardWeight:
          if (st.compute != kInputGrad)
            return fail(a, "does not follow its input gradient (I) exactly once"), out;
          st.compute = kDone;
          --in_flight, --awaiting_weight;
          break;
        case ActionType::kSendActivation:
        case ActionType::kRecvActivation:
        case ActionType::kSendGrad:
        case ActionType::kRecvGrad: {
          const bool act = a.carries_activation(), send = a.is_send();
          if (act ? (send ? vs == last : vs == 0) : (send ? vs == 0 : vs == last))
            return fail(a, "has no neighbour on that side"), out;
          bool& flag =
              act ? (send ? st.send_act : st.recv_act) : (send ? st.send_grad : st.recv_grad);
          if (flag) return fail(a, "is repeated"), out;
          if (send && st.compute < (act ? kForwarded : kInputGrad))
            return fail(a, "sends before it is computed"), out;
          if (!send && st.compute != (act ? kNone : kForwarded))
            return fail(a, "is received too late (after its compute)"), out;
          flag = true;
          const int64_t to = act ? vs + 1 : vs - 1;  // the receiving virtual stage
          const int64_t from = act ? vs - 1 : vs + 1;
          if (send)
            sent[{r, ((to % p) + p) % p, act}].push_back({a.micro, to});
          else
            received[{((from % p) + p) % p, r, act}].push_back({a.micro, vs});
          break;
        }
      }
    }
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t m = 0; m < micro_batches; ++m) {
        const State& st = state[{c, m}];
        const int64_t vs = c * p + r;
        if (st.compute != kDone) return fail({ActionType::kBackward, m, c}, "never runs"), out;
        if (vs < last && !st.send_act)
          return fail({ActionType::kSendActivation, m, c}, "never runs"), out;
        if (vs > 0 && !st.send_grad) return fail({ActionType::kSendGrad, m, c}, "never runs"), out;
      }
    out.in_flight.push_back(peak);
    out.beside.push_back(std::move(beside));
    out.max_in_flight = std::max(out.max_in_flight, peak);
  }
  for (const auto& [channel, messages] : sent) {
    const auto& got = received[channel];
    if (got != messages) {
      const auto& [from, to, act] = channel;
      out.error = c10::str("stage ", to, " receives ", act ? "activations" : "gradients",
                           " from stage ", from, " in another order than they are sent");
      return out;
    }
  }
  for (const auto& [channel, messages] : received)
    if (!sent.contains(channel)) {
      out.error = c10::str("stage ", std::get<1>(channel), " waits for messages stage ",
                           std::get<0>(channel), " never sends");
      return out;
    }
  return out;
}

std::vector<std::vector<std::pair<int64_t, int64_t>>> sent_gradients_done(
    const std::vector<StageActions>& schedule, int64_t rank) {
  const auto p = static_cast<int64_t>(schedule.size());
  const StageActions& mine = schedule[static_cast<size_t>(rank)];
  std::vector<std::vector<std::pair<int64_t, int64_t>>> done(mine.size());
  const int64_t q = (rank + p - 1) % p;  // gradients go to, activations come from
  const StageActions& theirs = schedule[static_cast<size_t>(q)];
  // Indexed once: the estimator asks this of every rank for every stage it estimates,
  // and lists run to thousands of actions (GPT-3's 1536-sequence batch).
  using Key = std::pair<int64_t, int64_t>;  // (chunk, micro)
  std::map<Key, size_t> their_backward, my_forward;
  for (size_t i = 0; i < theirs.size(); ++i)
    if (theirs[i].type == ActionType::kBackward || theirs[i].type == ActionType::kBackwardInput)
      their_backward.emplace(Key{theirs[i].chunk, theirs[i].micro}, i);
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].type == ActionType::kForward)
      my_forward.emplace(Key{mine[i].chunk, mine[i].micro}, i);
  // next_send[i]: the first activation the neighbour sends at or after its action i.
  std::vector<size_t> next_send(theirs.size() + 1, theirs.size());
  for (size_t i = theirs.size(); i-- > 0;)
    next_send[i] = theirs[i].type == ActionType::kSendActivation ? i : next_send[i + 1];
  for (const Action& a : mine) {
    if (a.type != ActionType::kSendGrad) continue;
    const int64_t vs = a.chunk * p + rank - 1;  // the receiving virtual stage
    // The neighbour's backward (or backward-input) of that micro-batch ...
    const auto backward = their_backward.find({vs / p, a.micro});
    if (backward == their_backward.end()) continue;
    // ... then the first activation it sends on (to this rank: q's next stage is ours) ...
    const size_t sent = next_send[backward->second + 1];
    if (sent == theirs.size()) continue;
    // ... arrives before this rank's forward of it.
    const auto forward =
        my_forward.find({(theirs[sent].chunk * p + q + 1) / p, theirs[sent].micro});
    if (forward != my_forward.end()) done[forward->second].push_back({a.chunk, a.micro});
  }
  return done;
}

}  // namespace strata
