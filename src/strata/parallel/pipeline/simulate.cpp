#include "strata/parallel/pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include <c10/util/StringUtil.h>

namespace strata {

Simulation simulate_schedule(const std::vector<StageActions>& schedule, const ActionCost& cost) {
  Simulation sim;
  const auto p = static_cast<int64_t>(schedule.size());
  const auto ranks = static_cast<size_t>(p);
  sim.busy.assign(ranks, 0);
  sim.timeline.assign(ranks, {});
  std::vector<size_t> next(ranks, 0);
  std::vector<double> clock(ranks, 0);
  // Per channel (sender, receiver, activation?): the end times of its sends so far,
  // and how many the receiver has taken.
  using Channel = std::tuple<int64_t, int64_t, bool>;
  std::map<Channel, std::vector<double>> sends;
  std::map<Channel, size_t> taken;
  auto neighbour = [&](int64_t r, const Action& a, bool towards_next) {
    const int64_t vs = a.chunk * p + r + (towards_next ? 1 : -1);
    return ((vs % p) + p) % p;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      const auto ru = static_cast<size_t>(r);
      while (next[ru] < schedule[ru].size()) {
        const Action& a = schedule[ru][next[ru]];
        double start = clock[ru];
        const bool act =
            a.type == ActionType::kSendActivation || a.type == ActionType::kRecvActivation;
        if (a.type == ActionType::kRecvActivation || a.type == ActionType::kRecvGrad) {
          // Activations come from the previous virtual stage, gradients from the next.
          const Channel ch{neighbour(r, a, !act), r, act};
          const std::vector<double>& s = sends[ch];
          size_t& k = taken[ch];
          if (k >= s.size()) break;  // blocked until the sender gets there
          start = std::max(start, s[k++]);
        }
        const double end = start + cost(r, a);
        if (a.type == ActionType::kSendActivation || a.type == ActionType::kSendGrad)
          sends[{r, neighbour(r, a, act), act}].push_back(end);
        if (a.is_compute()) sim.busy[ru] += end - start;
        sim.timeline[ru].push_back({a, start, end});
        clock[ru] = end;
        ++next[ru];
        progress = true;
      }
    }
  }
  std::string waiting;
  for (int64_t r = 0; r < p; ++r) {
    const auto ru = static_cast<size_t>(r);
    if (next[ru] < schedule[ru].size())
      waiting += c10::str(waiting.empty() ? "" : ", ", "stage ", r, " at ",
                          schedule[ru][next[ru]].to_string());
  }
  if (!waiting.empty()) {
    sim.error = "deadlock: " + waiting + " wait for sends that never come";
    return sim;
  }
  double total_busy = 0;
  for (size_t r = 0; r < ranks; ++r) {
    sim.step_time = std::max(sim.step_time, clock[r]);
    total_busy += sim.busy[r];
  }
  if (sim.step_time > 0)
    sim.bubble_fraction = 1 - total_busy / (static_cast<double>(p) * sim.step_time);
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
