#include "strata/core/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include "strata/core/errors.h"

namespace strata {

std::vector<Field> config_fields(Config& c) {
  auto& m = c.model;
  auto& d = c.data;
  auto& t = c.training;
  auto& p = c.parallel;
  auto& me = c.memory;
  auto& ck = c.checkpoint;
  auto& l = c.logging;
  return {
      {"model", "flavour", &m.flavour},
      {"model", "vocab_size", &m.vocab_size},
      {"model", "vocab_multiple", &m.vocab_multiple},
      {"model", "seq_len", &m.seq_len},
      {"model", "n_layer", &m.n_layer},
      {"model", "n_head", &m.n_head},
      {"model", "d_model", &m.d_model},
      {"model", "dropout", &m.dropout},
      {"model", "tied_embedding", &m.tied_embedding},
      {"model", "num_classes", &m.num_classes},
      {"model", "hidden", &m.hidden},
      {"data", "source", &d.source},
      {"data", "eval_path", &d.eval_path},
      {"data", "token_format", &d.token_format},
      {"data", "path", &d.path},
      {"data", "tokenizer_vocab", &d.tokenizer_vocab},
      {"data", "eval_fraction", &d.eval_fraction},
      {"data", "cache_dir", &d.cache_dir},
      {"training", "steps", &t.steps},
      {"training", "batch_size", &t.batch_size},
      {"training", "micro_batch_size", &t.micro_batch_size},
      {"training", "lr", &t.lr},
      {"training", "min_lr", &t.min_lr},
      {"training", "warmup_steps", &t.warmup_steps},
      {"training", "weight_decay", &t.weight_decay},
      {"training", "beta1", &t.beta1},
      {"training", "beta2", &t.beta2},
      {"training", "eps", &t.eps},
      {"training", "grad_clip", &t.grad_clip},
      {"training", "seed", &t.seed},
      {"training", "eval_interval", &t.eval_interval},
      {"training", "eval_batches", &t.eval_batches},
      {"training", "device", &t.device},
      {"training", "threads", &t.threads},
      {"training", "deterministic", &t.deterministic},
      {"parallel", "dp", &p.dp},
      {"parallel", "tp", &p.tp},
      {"parallel", "pp", &p.pp},
      {"parallel", "sequence_parallel", &p.sequence_parallel},
      {"parallel", "pp_schedule", &p.pp_schedule},
      {"parallel", "pp_virtual", &p.pp_virtual},
      {"parallel", "pp_partition", &p.pp_partition},
      {"parallel", "pp_profile", &p.pp_profile},
      {"parallel", "timeout_s", &p.timeout_s},
      {"parallel", "bucket_cap_mb", &p.bucket_cap_mb},
      {"parallel", "first_bucket_mb", &p.first_bucket_mb},
      {"parallel", "find_unused_parameters", &p.find_unused_parameters},
      {"parallel", "broadcast_buffers", &p.broadcast_buffers},
      {"parallel", "comm_hook", &p.comm_hook},
      {"parallel", "powersgd_rank", &p.powersgd_rank},
      {"parallel", "powersgd_start_iter", &p.powersgd_start_iter},
      {"parallel", "powersgd_min_compression", &p.powersgd_min_compression},
      {"parallel", "powersgd_error_feedback", &p.powersgd_error_feedback},
      {"parallel", "powersgd_warm_start", &p.powersgd_warm_start},
      {"parallel", "powersgd_orth_eps", &p.powersgd_orth_eps},
      {"parallel", "powersgd_seed", &p.powersgd_seed},
      {"parallel", "zero", &p.zero},
      {"parallel", "offload", &p.offload},
      {"parallel", "zero_prefetch", &p.zero_prefetch},
      {"memory", "track", &me.track},
      {"memory", "reuse_host_memory", &me.reuse_host_memory},
      {"memory", "precision", &me.precision},
      {"memory", "master_weights", &me.master_weights},
      {"memory", "loss_scale_init", &me.loss_scale_init},
      {"memory", "loss_scale_growth", &me.loss_scale_growth},
      {"memory", "loss_scale_backoff", &me.loss_scale_backoff},
      {"memory", "loss_scale_interval", &me.loss_scale_interval},
      {"memory", "recompute", &me.recompute},
      {"memory", "recompute_k", &me.recompute_k},
      {"checkpoint", "dir", &ck.dir},
      {"checkpoint", "interval", &ck.interval},
      {"checkpoint", "resume", &ck.resume},
      {"checkpoint", "keep", &ck.keep},
      {"checkpoint", "save_final", &ck.save_final},
      {"checkpoint", "async", &ck.async},
      {"checkpoint", "init_from", &ck.init_from},
      {"logging", "run_dir", &l.run_dir},
      {"logging", "log_interval", &l.log_interval},
      {"logging", "progress", &l.progress},
      {"logging", "memory_timeline_steps", &l.memory_timeline_steps},
      {"logging", "trace_step", &l.trace_step},
      {"logging", "peak_tflops", &l.peak_tflops},
  };
}

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  auto dist = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = std::max<size_t>(3, name.size() / 3) + 1;
  for (const auto& c : candidates) {
    size_t d = dist(name, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

namespace {

std::string type_name(const FieldPtr& p) {
  return std::visit(
      [](auto* v) -> std::string {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) return "a string";
        if constexpr (std::is_same_v<T, int64_t>) return "an integer";
        if constexpr (std::is_same_v<T, double>) return "a number";
        return "true or false";
      },
      p);
}

Field* find_field(std::vector<Field>& fields, const std::string& section, const std::string& key) {
  bool section_known = false;
  std::vector<std::string> keys, sections;
  for (auto& f : fields) {
    if (f.section == section) {
      section_known = true;
      if (f.key == key) return &f;
      keys.push_back(f.key);
    }
    if (sections.empty() || sections.back() != f.section) sections.push_back(f.section);
  }
  if (!section_known) {
    std::string hint = closest_name(section, sections);
    std::string all;
    for (auto& s : sections) all += (all.empty() ? "" : ", ") + s;
    STRATA_FAIL("unknown config section [", section, "]",
                hint.empty() ? "" : "; did you mean [" + hint + "]?", " (sections: ", all, ")");
  }
  std::string hint = closest_name(key, keys);
  STRATA_FAIL("unknown config key ", section, ".", key,
              hint.empty() ? "" : "; did you mean " + section + "." + hint + "?",
              " (see README, Config reference)");
}

void set_from_string(const Field& f, const std::string& value) {
  std::string name = f.section + "." + f.key;
  std::visit(
      [&](auto* v) {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          *v = value;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (value == "true" || value == "1" || value == "on") {
            *v = true;
          } else if (value == "false" || value == "0" || value == "off") {
            *v = false;
          } else {
            STRATA_FAIL(name, "='", value, "' is not a boolean; use true or false");
          }
        } else {
          size_t pos = 0;
          bool ok = !value.empty();
          try {
            if constexpr (std::is_same_v<T, int64_t>) {
              *v = std::stoll(value, &pos);
            } else {
              *v = std::stod(value, &pos);
            }
          } catch (const std::exception&) {
            ok = false;
          }
          STRATA_CHECK(ok && pos == value.size(), name, "='", value, "' is not ", type_name(f.ptr),
                       "; give ", type_name(f.ptr));
        }
      },
      f.ptr);
}

void set_from_toml(const Field& f, const toml::node& node) {
  std::string name = f.section + "." + f.key;
  std::visit(
      [&](auto* v) {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          auto s = node.value<std::string>();
          STRATA_CHECK(s && node.is_string(), name, " must be a string, e.g. ", f.key,
                       " = \"...\"");
          *v = *s;
        } else if constexpr (std::is_same_v<T, bool>) {
          STRATA_CHECK(node.is_boolean(), name, " must be true or false");
          *v = *node.value<bool>();
        } else if constexpr (std::is_same_v<T, int64_t>) {
          STRATA_CHECK(node.is_integer(), name,
                       " must be an integer (no quotes, no decimal point)");
          *v = *node.value<int64_t>();
        } else {
          STRATA_CHECK(node.is_number(), name, " must be a number");
          *v = *node.value<double>();
        }
      },
      f.ptr);
}

std::string value_string(const FieldPtr& p, bool quote) {
  return std::visit(
      [&](auto* v) -> std::string {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) return quote ? "\"" + *v + "\"" : *v;
        if constexpr (std::is_same_v<T, bool>) return *v ? "true" : "false";
        if constexpr (std::is_same_v<T, int64_t>) return std::to_string(*v);
        std::ostringstream os;
        os << *v;
        std::string s = os.str();
        if (quote && s.find_first_of(".eEn") == std::string::npos) s += ".0";
        return s;
      },
      p);
}

}  // namespace

void load_config_file(Config& c, const std::string& path) {
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    STRATA_FAIL("cannot parse config ", path, " at line ", src.begin.line, ": ", e.description(),
                "; fix the TOML syntax there");
  }
  auto fields = config_fields(c);
  for (auto&& [section, node] : tbl) {
    std::string sec(section.str());
    auto* t = node.as_table();
    STRATA_CHECK(t, "config ", path, ": '", sec, "' must be a [section], not a top-level key");
    for (auto&& [key, value] : *t) {
      Field* f = find_field(fields, sec, std::string(key.str()));
      set_from_toml(*f, value);
    }
  }
}

void apply_override(Config& c, const std::string& assignment) {
  auto eq = assignment.find('=');
  auto dot = assignment.find('.');
  STRATA_CHECK(eq != std::string::npos && dot != std::string::npos && dot < eq, "override '--",
               assignment, "' must look like --section.key=value");
  auto fields = config_fields(c);
  Field* f =
      find_field(fields, assignment.substr(0, dot), assignment.substr(dot + 1, eq - dot - 1));
  set_from_string(*f, assignment.substr(eq + 1));
}

namespace {
void check_one_of(const std::string& name, const std::string& v,
                  const std::vector<std::string>& ok) {
  if (std::find(ok.begin(), ok.end(), v) != ok.end()) return;
  std::string all;
  for (auto& o : ok) all += (all.empty() ? "" : ", ") + o;
  std::string hint = closest_name(v, ok);
  STRATA_FAIL(name, "='", v, "' is not known", hint.empty() ? "" : "; did you mean '" + hint + "'?",
              " (choose from ", all, ")");
}
}  // namespace

void apply_config_args(Config& c, const std::string& path,
                       const std::vector<std::string>& overrides, const std::string& command) {
  if (!path.empty()) {
    STRATA_CHECK(std::filesystem::exists(path), "config file ", path,
                 " does not exist; give a TOML file with --config");
    load_config_file(c, path);
  }
  for (const auto& o : overrides) {
    STRATA_CHECK(o.rfind("--", 0) == 0 && o.find('.') != std::string::npos, "unknown argument '", o,
                 "'; config overrides look like --section.key=value (see strata ", command,
                 " --help)");
    apply_override(c, o.substr(2));
  }
}

int64_t threads_per_rank(int64_t configured, int64_t local_ranks) {
  if (configured > 0) return configured;
  const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max<int64_t>(1, cores / std::max<int64_t>(1, local_ranks));
}

void validate_config(const Config& c) {
  const auto& t = c.training;
  check_one_of("data.source", c.data.source,
               {"kjv", "text", "tokens", "fashion-mnist", "synthetic"});
  check_one_of("data.token_format", c.data.token_format, {"auto", "llmc", "raw"});
  check_one_of("training.device", t.device, {"cpu", "cuda"});
  check_one_of("logging.progress", c.logging.progress, {"auto", "on", "off"});
  STRATA_CHECK(t.steps > 0, "training.steps=", t.steps, " must be positive");
  STRATA_CHECK(t.batch_size > 0, "training.batch_size=", t.batch_size, " must be positive");
  STRATA_CHECK(t.micro_batch_size >= 0, "training.micro_batch_size=", t.micro_batch_size,
               " must be >= 0 (0 means batch_size / dp)");
  STRATA_CHECK(t.lr > 0 && t.min_lr >= 0 && t.min_lr <= t.lr, "training.lr=", t.lr,
               " and training.min_lr=", t.min_lr, " must satisfy 0 <= min_lr <= lr, lr > 0");
  STRATA_CHECK(t.warmup_steps >= 0, "training.warmup_steps must be >= 0");
  STRATA_CHECK(t.beta1 >= 0 && t.beta1 < 1 && t.beta2 >= 0 && t.beta2 < 1,
               "training.beta1 and beta2 must be in [0, 1)");
  STRATA_CHECK(t.grad_clip >= 0, "training.grad_clip must be >= 0 (0 turns clipping off)");
  STRATA_CHECK(t.threads >= 0, "training.threads must be >= 0 (0 picks cores / local ranks)");
  // Shape keys: 0 means "the flavour's (or the data's) value"; a negative value is a
  // mistake, never a request for the default.
  const auto& m = c.model;
  for (const auto& [key, v] :
       std::initializer_list<std::pair<const char*, int64_t>>{{"vocab_size", m.vocab_size},
                                                              {"seq_len", m.seq_len},
                                                              {"n_layer", m.n_layer},
                                                              {"n_head", m.n_head},
                                                              {"d_model", m.d_model},
                                                              {"num_classes", m.num_classes},
                                                              {"hidden", m.hidden}})
    STRATA_CHECK(v >= 0, "model.", key, "=", v,
                 " is negative; give a positive value, or 0 for the flavour's default");
  STRATA_CHECK(c.model.vocab_multiple >= 1, "model.vocab_multiple=", c.model.vocab_multiple,
               " must be at least 1 (1: no padding; default 128)");
  STRATA_CHECK(c.model.dropout >= 0 && c.model.dropout < 1, "model.dropout=", c.model.dropout,
               " must be in [0, 1)");
  STRATA_CHECK(c.data.eval_fraction >= 0 && c.data.eval_fraction < 0.5,
               "data.eval_fraction=", c.data.eval_fraction, " must be in [0, 0.5)");
  STRATA_CHECK(c.data.tokenizer_vocab >= 64, "data.tokenizer_vocab=", c.data.tokenizer_vocab,
               " is too small; use at least 64");
  STRATA_CHECK(c.data.source != "text" || !c.data.path.empty(),
               "data.source=text needs data.path=<a UTF-8 text file>");
  STRATA_CHECK(c.data.source != "tokens" || !c.data.path.empty(),
               "data.source=tokens needs data.path=<a token file or a glob of shards>");
  STRATA_CHECK(c.parallel.dp >= 0 && c.parallel.tp >= 1 && c.parallel.pp >= 1,
               "parallel.dp must be >= 0 (0: all remaining ranks), tp and pp >= 1");
  STRATA_CHECK(!c.parallel.sequence_parallel || c.parallel.tp > 1,
               "parallel.sequence_parallel=true splits the sequence over the tp ranks; set "
               "parallel.tp > 1 or turn it off");
  STRATA_CHECK(c.parallel.timeout_s > 0, "parallel.timeout_s must be positive");
  const auto& p = c.parallel;
  STRATA_CHECK(p.bucket_cap_mb > 0, "parallel.bucket_cap_mb=", p.bucket_cap_mb,
               " must be positive (25 is PyTorch's default)");
  STRATA_CHECK(p.first_bucket_mb > 0, "parallel.first_bucket_mb=", p.first_bucket_mb,
               " must be positive (default 1)");
  check_one_of("parallel.comm_hook", p.comm_hook, {"none", "fp16", "bf16", "powersgd"});
  check_one_of("parallel.pp_schedule", p.pp_schedule, {"gpipe", "1f1b", "interleaved", "zb-h1"});
  STRATA_CHECK(p.pp_virtual >= 1, "parallel.pp_virtual=", p.pp_virtual,
               " must be at least 1 (model chunks per pipeline rank)");
  STRATA_CHECK(p.pp_virtual == 1 || p.pp_schedule == "interleaved",
               "parallel.pp_virtual=", p.pp_virtual,
               " applies to the interleaved schedule only; set ",
               "parallel.pp_schedule=interleaved or pp_virtual=1");
  STRATA_CHECK(p.zero >= 0 && p.zero <= 3, "parallel.zero=", p.zero,
               " is not a ZeRO stage; choose 0 (plain DDP), 1, 2 or 3");
  STRATA_CHECK(!p.offload || p.zero >= 1,
               "parallel.offload=true moves ZeRO's sharded optimizer state to host memory and "
               "needs parallel.zero=1, 2 or 3 (it is 0)");
  STRATA_CHECK(p.zero == 0 || p.comm_hook == "none", "parallel.comm_hook=", p.comm_hook,
               " compresses DDP's all-reduce; ZeRO (parallel.zero=", p.zero,
               ") reduce-scatters uncompressed gradients: set parallel.comm_hook=none or "
               "parallel.zero=0");
  STRATA_CHECK(c.logging.memory_timeline_steps >= 0,
               "logging.memory_timeline_steps=", c.logging.memory_timeline_steps,
               " must be >= 0 (0: no memory timeline)");
  STRATA_CHECK(c.logging.trace_step >= 0, "logging.trace_step=", c.logging.trace_step,
               " must be >= 0 (0: no trace.json)");
  const auto& me = c.memory;
  check_one_of("memory.precision", me.precision, {"fp32", "bf16", "fp16"});
  check_one_of("memory.recompute", me.recompute, {"none", "full", "every-k", "sqrt", "selective"});
  STRATA_CHECK(me.recompute_k >= 1, "memory.recompute_k=", me.recompute_k,
               " must be >= 1 (blocks per recomputed segment)");
  STRATA_CHECK(me.loss_scale_init > 0 && std::isfinite(me.loss_scale_init),
               "memory.loss_scale_init=", me.loss_scale_init, " must be a positive number");
  STRATA_CHECK(me.loss_scale_growth >= 1, "memory.loss_scale_growth=", me.loss_scale_growth,
               " must be >= 1 (2 is PyTorch's default)");
  STRATA_CHECK(me.loss_scale_backoff > 0 && me.loss_scale_backoff < 1,
               "memory.loss_scale_backoff=", me.loss_scale_backoff,
               " must be in (0, 1) (0.5 is PyTorch's default)");
  STRATA_CHECK(me.loss_scale_interval >= 1, "memory.loss_scale_interval=", me.loss_scale_interval,
               " must be >= 1 (2000 is PyTorch's default)");
  STRATA_CHECK(p.powersgd_rank > 0, "parallel.powersgd_rank=", p.powersgd_rank,
               " must be positive (1 to 4 is typical)");
  STRATA_CHECK(p.powersgd_min_compression >= 1,
               "parallel.powersgd_min_compression=", p.powersgd_min_compression,
               " must be >= 1 (default 2)");
  STRATA_CHECK(p.powersgd_orth_eps >= 0, "parallel.powersgd_orth_eps must be >= 0");
  STRATA_CHECK(p.powersgd_start_iter > 1 || (!p.powersgd_error_feedback && !p.powersgd_warm_start),
               "parallel.powersgd_start_iter=", p.powersgd_start_iter,
               " must be > 1 with error feedback or warm start (PowerSGD starts after the "
               "first two steps); raise it or turn both off");
  STRATA_CHECK(c.checkpoint.interval >= 0 && c.checkpoint.keep >= 1,
               "checkpoint.interval must be >= 0 and checkpoint.keep >= 1");
  STRATA_CHECK(c.logging.log_interval > 0, "logging.log_interval must be positive");
  STRATA_CHECK(t.eval_interval >= 0, "training.eval_interval=", t.eval_interval,
               " must be >= 0 (0: no evaluation)");
  STRATA_CHECK(t.eval_batches >= 0, "training.eval_batches=", t.eval_batches, " must be >= 0");
  STRATA_CHECK(c.logging.peak_tflops >= 0, "logging.peak_tflops=", c.logging.peak_tflops,
               " must be >= 0 (0: the CPU estimate)");
}

std::string config_table(Config& c) {
  std::ostringstream os;
  size_t width = 0;
  auto fields = config_fields(c);
  for (auto& f : fields) width = std::max(width, f.section.size() + f.key.size() + 1);
  for (auto& f : fields) {
    std::string name = f.section + "." + f.key;
    os << "  " << name << std::string(width - name.size() + 1, ' ') << value_string(f.ptr, false)
       << "\n";
  }
  return os.str();
}

std::string config_toml(Config& c) {
  std::ostringstream os;
  std::string section;
  for (auto& f : config_fields(c)) {
    if (f.section != section) {
      os << (section.empty() ? "" : "\n") << "[" << f.section << "]\n";
      section = f.section;
    }
    os << f.key << " = " << value_string(f.ptr, true) << "\n";
  }
  return os.str();
}

}  // namespace strata
