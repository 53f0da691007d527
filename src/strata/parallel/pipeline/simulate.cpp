#include "strata/parallel/pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>

#include <c10/util/StringUtil.h>

namespace strata {

namespace {
// A schedule's point-to-point channels, one per (sender, receiver, activation?):
// the end times of its sends so far, and how many of them the receiver has taken (the
// n-th receive on a channel matches the n-th send).
class Channels {
 public:
  explicit Channels(int64_t p) : p_(p) {}
  void send(int64_t rank, const Action& a, double end) { sends_[key(rank, a)].push_back(end); }
  // The end of the send a receive matches, once one has ended by `now`; nullopt while
  // the sender has not got there.
  std::optional<double> take(int64_t rank, const Action& a,
                             double now = std::numeric_limits<double>::infinity()) {
    const Key k = key(rank, a);
    const std::vector<double>& s = sends_[k];
    size_t& n = taken_[k];
    if (n >= s.size() || s[n] > now) return std::nullopt;
    return s[n++];
  }

 private:
  using Key = std::tuple<int64_t, int64_t, bool>;
  // Activations go to the next virtual stage and come from the previous one; gradients
  // the other way.
  Key key(int64_t rank, const Action& a) const {
    const bool act = a.carries_activation(), send = a.is_send();
    const int64_t vs = a.chunk * p_ + rank + (send == act ? 1 : -1);
    const int64_t other = ((vs % p_) + p_) % p_;
    return send ? Key{rank, other, act} : Key{other, rank, act};
  }
  int64_t p_;
  std::map<Key, std::vector<double>> sends_;
  std::map<Key, size_t> taken_;
};

// Nothing run yet: a busy time and a timeline per rank.
Simulation empty_simulation(const std::vector<StageActions>& schedule) {
  Simulation sim;
  sim.busy.assign(schedule.size(), 0);
  sim.timeline.assign(schedule.size(), {});
  return sim;
}

// The ranks whose lists did not finish make the error; otherwise the step and bubble.
void finish(const std::vector<StageActions>& schedule, const std::vector<size_t>& next,
            Simulation& sim) {
  std::string waiting;
  for (size_t r = 0; r < schedule.size(); ++r)
    if (next[r] < schedule[r].size())
      waiting += c10::str(waiting.empty() ? "" : ", ", "stage ", r, " at ",
                          schedule[r][next[r]].to_string());
  if (!waiting.empty()) {
    sim.error = "deadlock: " + waiting + " wait for sends that never come";
    return;
  }
  double total_busy = 0;
  for (size_t r = 0; r < schedule.size(); ++r) {
    if (!sim.timeline[r].empty())
      sim.step_time = std::max(sim.step_time, sim.timeline[r].back().end);
    total_busy += sim.busy[r];
  }
  if (sim.step_time > 0)
    sim.bubble_fraction = 1 - total_busy / (static_cast<double>(schedule.size()) * sim.step_time);
}
}  // namespace

Simulation simulate_schedule(const std::vector<StageActions>& schedule, const ActionCost& cost) {
  Simulation sim = empty_simulation(schedule);
  const auto p = static_cast<int64_t>(schedule.size());
  std::vector<size_t> next(schedule.size(), 0);
  std::vector<double> clock(schedule.size(), 0);
  Channels channels(p);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      const auto ru = static_cast<size_t>(r);
      while (next[ru] < schedule[ru].size()) {
        const Action& a = schedule[ru][next[ru]];
        double start = clock[ru];
        if (a.is_receive()) {
          const std::optional<double> sent = channels.take(r, a);
          if (!sent) break;  // blocked until the sender gets there
          start = std::max(start, *sent);
        }
        const double end = start + cost(r, a);
        if (a.is_send()) channels.send(r, a, end);
        if (a.is_compute()) sim.busy[ru] += end - start;
        sim.timeline[ru].push_back({a, start, end});
        clock[ru] = end;
        ++next[ru];
        progress = true;
      }
    }
  }
  finish(schedule, next, sim);
  return sim;
}

Simulation simulate_shared(const std::vector<StageActions>& schedule, const ActionWorkFn& work,
                           const SlowdownFn& slowdown) {
  Simulation sim = empty_simulation(schedule);
  const size_t ranks = schedule.size();
  std::vector<size_t> next(ranks, 0);
  struct Running {
    bool on = false;
    ActionWork left;  // compute still to do (at full speed), then the fixed time
    double start = 0;
  };
  std::vector<Running> run(ranks);
  Channels channels(static_cast<int64_t>(ranks));
  double now = 0;
  auto complete = [&](size_t r) {
    const Action& a = schedule[r][next[r]];
    if (a.is_send()) channels.send(static_cast<int64_t>(r), a, now);
    if (a.is_compute()) sim.busy[r] += now - run[r].start;
    sim.timeline[r].push_back({a, run[r].start, now});
    run[r].on = false;
    ++next[r];
  };
  for (;;) {
    // Start what can start now; a receive whose message is there, and anything that
    // costs nothing, passes at once (and may free another rank's receive).
    for (bool moved = true; moved;) {
      moved = false;
      for (size_t r = 0; r < ranks; ++r) {
        while (!run[r].on && next[r] < schedule[r].size()) {
          const Action& a = schedule[r][next[r]];
          if (a.is_receive() && !channels.take(static_cast<int64_t>(r), a, now)) break;
          run[r] = {true, work(static_cast<int64_t>(r), a), now};
          if (run[r].left.compute > 0 || run[r].left.fixed > 0) break;
          complete(r);
          moved = true;
        }
      }
    }
    double computing = 0;
    bool any = false;
    for (const Running& x : run) {
      any = any || x.on;
      computing += x.on && x.left.compute > 0 ? 1 : 0;
    }
    if (!any) break;  // finished, or deadlocked
    const double slow = computing > 0 ? slowdown(computing) : 1;
    // Advance to the next phase end: a compute part ending, or a fixed part.
    auto phase_left = [&](const Running& x) {
      return x.left.compute > 0 ? x.left.compute * slow : x.left.fixed;
    };
    double dt = std::numeric_limits<double>::infinity();
    for (const Running& x : run)
      if (x.on) dt = std::min(dt, phase_left(x));
    now += dt;
    for (size_t r = 0; r < ranks; ++r) {
      Running& x = run[r];
      if (!x.on) continue;
      const bool ends = phase_left(x) <= dt * (1 + 1e-12);
      if (x.left.compute > 0)
        x.left.compute = ends ? 0 : x.left.compute - dt / slow;
      else
        x.left.fixed = ends ? 0 : x.left.fixed - dt;
      if (x.left.compute <= 0 && x.left.fixed <= 0) complete(r);
    }
  }
  finish(schedule, next, sim);
  return sim;
}

ActionCost unit_costs(int64_t chunks, double forward, double backward_input,
                      double backward_weight) {
  const double v = static_cast<double>(chunks);
  return [=](int64_t, const Action& a) {
    switch (a.type) {
      case ActionType::kForward:
        return forward / v;
      case ActionType::kBackward:
        return (backward_input + backward_weight) / v;
      case ActionType::kBackwardInput:
        return backward_input / v;
      case ActionType::kBackwardWeight:
        return backward_weight / v;
      default:
        return 0.0;
    }
  };
}

std::string schedule_grid(const Simulation& sim, double unit) {
  const auto columns = static_cast<size_t>(std::llround(sim.step_time / unit));
  std::vector<std::vector<std::string>> cells(sim.timeline.size(),
                                              std::vector<std::string>(columns, "."));
  size_t width = 1;
  for (size_t r = 0; r < sim.timeline.size(); ++r)
    for (const TimedAction& t : sim.timeline[r]) {
      if (!t.action.is_compute()) continue;
      const auto from = static_cast<size_t>(std::llround(t.start / unit));
      const auto to = static_cast<size_t>(std::llround(t.end / unit));
      for (size_t c = from; c < to && c < columns; ++c) {
        cells[r][c] = t.action.to_string();
        width = std::max(width, cells[r][c].size());
      }
    }
  std::ostringstream out;
  for (size_t r = 0; r < cells.size(); ++r) {
    out << "stage " << r << " |";
    for (const std::string& c : cells[r]) out << ' ' << std::string(width - c.size(), ' ') << c;
    out << '\n';
  }
  return out.str();
}

namespace {
constexpr ActionType kComputeTypes[] = {ActionType::kForward, ActionType::kBackward,
                                        ActionType::kBackwardInput, ActionType::kBackwardWeight};
}  // namespace

const char* action_category(ActionType type) {
  switch (type) {
    case ActionType::kForward:
      return "forward";
    case ActionType::kBackward:
      return "backward";
    case ActionType::kBackwardInput:
      return "backward-input";
    case ActionType::kBackwardWeight:
      return "backward-weight";
    default:
      return "communication";
  }
}

nlohmann::json chrome_trace(const std::vector<std::vector<TimedAction>>& timelines) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < timelines.size(); ++r) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"name", "stage " + std::to_string(r)}}}});
    for (const TimedAction& t : timelines[r]) {
      if (!t.action.is_compute()) continue;
      events.push_back({{"name", t.action.to_string()},
                        {"cat", action_category(t.action.type)},
                        {"ph", "X"},
                        {"ts", t.start * 1e6},
                        {"dur", (t.end - t.start) * 1e6},
                        {"pid", 0},
                        {"tid", r},
                        {"args", {{"micro", t.action.micro}, {"chunk", t.action.chunk}}}});
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

std::vector<std::vector<TimedAction>> timelines_from_trace(const nlohmann::json& trace) {
  std::vector<std::vector<TimedAction>> out;
  if (!trace.is_object() || !trace.contains("traceEvents")) return out;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string cat = e.value("cat", "");
    const auto* type = std::find_if(std::begin(kComputeTypes), std::end(kComputeTypes),
                                    [&](ActionType t) { return cat == action_category(t); });
    if (type == std::end(kComputeTypes)) continue;
    const auto rank = static_cast<size_t>(e.value("tid", int64_t{0}));
    if (out.size() <= rank) out.resize(rank + 1);
    const auto args = e.value("args", nlohmann::json::object());
    const double start = e.value("ts", 0.0) / 1e6;
    out[rank].push_back({{*type, args.value("micro", int64_t{0}), args.value("chunk", int64_t{0})},
                         start,
                         start + e.value("dur", 0.0) / 1e6});
  }
  for (auto& r : out)
    std::stable_sort(r.begin(), r.end(),
                     [](const TimedAction& a, const TimedAction& b) { return a.start < b.start; });
  return out;
}

ActionCost measured_costs(const std::vector<std::vector<TimedAction>>& timelines) {
  auto table = std::make_shared<std::map<std::pair<int64_t, std::string>, double>>();
  for (size_t r = 0; r < timelines.size(); ++r)
    for (const TimedAction& t : timelines[r])
      (*table)[{static_cast<int64_t>(r), t.action.to_string()}] = t.end - t.start;
  return [table](int64_t rank, const Action& a) {
    if (!a.is_compute()) return 0.0;
    auto it = table->find({rank, a.to_string()});
    return it == table->end() ? std::nan("") : it->second;
  };
}

}  // namespace strata
