// strata: train | launch | estimate | report | version. See README "Command line".
#include <c10/util/Exception.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "strata/api/strata.h"
#include "strata/cli/calibrate.h"
#include "strata/cli/estimate.h"
#include "strata/cli/generate.h"
#include "strata/cli/plan.h"
#include "strata/cli/schedule.h"
#include "strata/core/config.h"
#include "strata/core/env.h"
#include "strata/core/errors.h"
#include "strata/distributed/comm.h"
#include "strata/distributed/launcher.h"
#include "strata/distributed/rendezvous.h"
#include "strata/interop/hf.h"
#include "strata/report/html_report.h"
#include "strata/train/trainer.h"

namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "strata" : p.string();
}

int run_train(const std::string& config_path, int64_t nproc, int64_t max_restarts,
              const std::vector<std::string>& extras, const std::vector<std::string>& raw_args) {
  using namespace strata;
  if ((nproc > 1 || max_restarts > 0) && !get_env("STRATA_LAUNCHED")) {
    // `strata train --nproc N [--max-restarts R] ...` is `strata launch --nproc-per-node N
    // [--max-restarts R] -- strata train ...`.
    LaunchOptions lo;
    lo.nproc_per_node = nproc;
    lo.max_restarts = max_restarts;
    lo.master_port = get_env("MASTER_PORT").value_or("auto");
    lo.command = {self_exe(), "train"};
    for (size_t i = 0; i < raw_args.size(); ++i) {
      if (raw_args[i] == "--nproc" || raw_args[i] == "--max-restarts") {
        ++i;
        continue;
      }
      if (raw_args[i].rfind("--nproc=", 0) == 0 || raw_args[i].rfind("--max-restarts=", 0) == 0)
        continue;
      lo.command.push_back(raw_args[i]);
    }
    return launch(lo);
  }
  Config cfg;
  apply_config_args(cfg, config_path, extras, "train");
  WorldInfo info = world_from_env();
  // Note [init_from]: a Hugging Face folder gives the model its shape and its weights.
  Trainer::Extensions ext;
  if (!cfg.checkpoint.init_from.empty() && is_hf_folder(cfg.checkpoint.init_from)) {
    apply_hf_model(cfg, cfg.checkpoint.init_from);
    ext.open_weights = [](const std::string& dir,
                          const ModelSpec& spec) -> std::unique_ptr<PieceReader> {
      return std::make_unique<HfReader>(dir, spec.vocab_multiple);
    };
  }
  Trainer trainer(cfg, info, std::move(ext));
  TrainSummary s = trainer.run();
  if (info.rank == 0 && !s.losses.empty()) {
    std::printf("loss %.4f (step %lld) -> %.4f (step %lld)\n", s.losses.front(),
                static_cast<long long>(s.first_step + 1), s.losses.back(),
                static_cast<long long>(s.first_step + static_cast<int64_t>(s.losses.size())));
    if (s.eval_loss) std::printf("eval loss %.4f\n", *s.eval_loss);
    std::printf("metrics: %s\n", s.metrics_path.c_str());
    if (!s.checkpoint_dir.empty()) std::printf("checkpoint: %s\n", s.checkpoint_dir.c_str());
  }
  // A graceful stop (Note [graceful stop]) still says it was stopped, as a shell expects.
  if (s.stop_signal) return 128 + s.stop_signal;
  return 0;
}

// Note [parser errors]: CLI11's own messages carry its wording, its exit codes (105,
// 106, 114 ...) and, for range checks, numbers like 1.797693e308. Every parse error is
// rewritten here into Strata's convention: one "error:" line that names the problem and
// the fix, exit status 2.
std::string parse_error_line(const CLI::ParseError& e, const std::string& sub) {
  const std::string what = e.what();
  const std::string help = sub.empty() ? "strata --help" : "strata " + sub + " --help";
  const std::string name = e.get_name();
  if (name == "ArgumentMismatch") {
    // "--nproc: 1 required INT missing"
    const std::string opt = what.substr(0, what.find(':'));
    if (what.find("missing") != std::string::npos)
      return opt + " needs a value, e.g. " + opt + " 2; see '" + help + "'";
    return opt + " got the wrong number of values; see '" + help + "'";
  }
  if (name == "ConversionError") {
    // "Could not convert: --nproc = abc"
    const auto colon = what.find(": ");
    std::string rest = colon == std::string::npos ? what : what.substr(colon + 2);
    const auto eq = rest.find(" = ");
    if (eq != std::string::npos)
      return rest.substr(0, eq) + "=" + rest.substr(eq + 3) +
             " is not a number; give a whole number, e.g. " + rest.substr(0, eq) + " 2";
    return rest + " is not a number; see '" + help + "'";
  }
  if (name == "RequiredError") {
    if (what.rfind("run_dir", 0) == 0)
      return "strata report needs RUN_DIR, a run's logging.run_dir";
    return what + "; see '" + help + "'";
  }
  if (name == "ExtrasError" || what.find("not expected:") != std::string::npos)
    return "unexpected argument(s): " + what.substr(what.find(':') + 1) + "; see '" + help + "'";
  return what + "; see '" + help + "'";
}

int user_error(const std::string& line) {
  std::fprintf(stderr, "error: %s\n", line.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Strata: memory-optimized distributed training on libtorch"};
  app.require_subcommand(1);

  auto* train =
      app.add_subcommand("train", "train a model (config overrides: --section.key=value)");
  std::string config_path;
  int64_t nproc = 1, train_restarts = 0;
  train->add_option("-c,--config", config_path, "TOML config file");
  train->add_option("--nproc", nproc, "local processes (shorthand for strata launch)");
  train->add_option("--max-restarts", train_restarts,
                    "start every rank again after a failure or hang, up to N times");
  train->allow_extras();

  auto* launch_cmd = app.add_subcommand(
      "launch", "start ranks with torchrun's environment: launch [opts] -- CMD...");
  strata::LaunchOptions lo;
  launch_cmd->add_option("--nproc-per-node", lo.nproc_per_node, "ranks on this node")->required();
  launch_cmd->add_option("--nnodes", lo.nnodes, "nodes");
  launch_cmd->add_option("--node-rank", lo.node_rank, "this node's index");
  launch_cmd->add_option("--master-addr", lo.master_addr, "rendezvous host (rank 0's node)");
  launch_cmd->add_option("--master-port", lo.master_port, "rendezvous port, or auto");
  launch_cmd->add_option("--max-restarts", lo.max_restarts,
                         "start every rank again after a failure or hang, up to N times");
  launch_cmd->add_option("cmd", lo.command, "command to run for each rank (after --)");

  auto* estimate = app.add_subcommand(
      "estimate",
      "per-rank memory of a training config without running it (overrides: --section.key=value)");
  strata::EstimateArgs ea;
  estimate->add_option("-c,--config", ea.config_path, "TOML config file");
  estimate->add_option("--nproc", ea.nproc, "world size (default: dp x tp x pp)");
  estimate->add_option("--device-memory", ea.device_memory,
                       "memory per device, e.g. 80GiB: say FITS or DOES NOT FIT (exit 1)");
  estimate->add_option("--compare", ea.compare_dir,
                       "a run directory: predicted vs measured, with the run's own config");
  estimate->add_flag("--json", ea.json, "print JSON");
  estimate->allow_extras();

  auto* report = app.add_subcommand(
      "report", "write a self-contained HTML report of a run directory (memory, loss, comm)");
  std::string report_dir, report_out;
  report->add_option("run_dir", report_dir, "the run's logging.run_dir")->required();
  report->add_option("-o,--output", report_out, "HTML file (default RUN_DIR/report.html)");

  auto* schedule = app.add_subcommand(
      "schedule", "print a pipeline schedule's step x rank grid and its bubble (no training)");
  strata::ScheduleArgs sa;
  schedule->add_option("--pp", sa.pp, "pipeline stages (ranks)");
  schedule->add_option("--microbatches", sa.micro_batches, "micro-batches per step");
  schedule->add_option("--schedule", sa.schedule, "gpipe, 1f1b, interleaved or zb-h1");
  schedule->add_option("--virtual", sa.chunks, "chunks per rank (interleaved)");
  schedule->add_option("--trace", sa.trace, "also write the step as a Chrome trace-event file");
  schedule->add_option("--costs", sa.costs,
                       "a run's trace.json: simulate with its measured action durations");

  auto* export_cmd = app.add_subcommand(
      "export", "write a checkpoint as Hugging Face weights (model.safetensors + config.json)");
  strata::ExportArgs xa;
  export_cmd->add_option("checkpoint", xa.checkpoint, "a step-N folder, checkpoint.dir or run dir")
      ->required();
  export_cmd->add_option("-o,--output", xa.out, "the folder to write")->required();
  export_cmd->add_option("--format", xa.format, "hf (GPT2LMHeadModel or BertForMaskedLM)");
  export_cmd->add_option("--dtype", xa.dtype, "fp32, bf16 or fp16");

  auto* import_cmd = app.add_subcommand(
      "import", "make a Strata checkpoint of a Hugging Face GPT-2 or BERT folder (for init_from)");
  strata::ImportArgs ia;
  import_cmd->add_option("hf_dir", ia.hf_dir, "config.json + model.safetensors")->required();
  import_cmd->add_option("-o,--output", ia.out, "the checkpoint folder to write")->required();
  import_cmd->add_option("--vocab-multiple", ia.vocab_multiple,
                         "pad the vocabulary to a multiple of this (model.vocab_multiple)");

  auto* generate = app.add_subcommand(
      "generate", "sample text from a trained GPT (a run directory or checkpoint of any layout)");
  strata::GenerateArgs ga;
  generate->add_option("source", ga.source, "a run directory, checkpoint.dir or step-N folder")
      ->required();
  generate->add_option("--prompt", ga.prompt, "the text to continue");
  generate->add_option("--tokens", ga.tokens, "tokens to sample");
  generate->add_option("--temperature", ga.temperature, "softmax temperature; 0: greedy");
  generate->add_option("--top-k", ga.top_k, "sample among the k most likely; 0: all");
  generate->add_option("--seed", ga.seed, "the sampler's seed");
  generate->add_option("--kv-cache", ga.kv_cache,
                       "on: keep past keys and values; off: recompute the window per token");

  auto* calibrate = app.add_subcommand(
      "calibrate", "measure this machine for the cost model: matmul, memory, collectives");
  strata::CalibrateArgs ca;
  calibrate->add_option("--nproc", ca.nproc, "measure collectives over 2..N ranks");
  calibrate->add_option("-o,--output", ca.out, "the profile to write (JSON)");
  calibrate->add_option("--threads", ca.threads, "intra-op threads per rank (0: cores / nproc)");
  calibrate->add_flag("--quick", ca.quick, "fewer sizes and repeats");
  auto* plan = app.add_subcommand(
      "plan",
      "rank every layout that fits by predicted step time (overrides: --section.key=value)");
  strata::PlanArgs pa;
  plan->add_option("-c,--config", pa.config_path, "TOML config file");
  plan->add_option("--nproc", pa.nproc, "ranks to plan for")->required();
  plan->add_option("--device-memory", pa.device_memory, "memory per device, e.g. 80GiB");
  plan->add_option("--profile", pa.profile, "hardware profile (default: strata calibrate's)");
  plan->add_option("--top", pa.top, "layouts to print");
  plan->add_flag("--json", pa.json, "print JSON");
  plan->add_option("--fix", pa.fix,
                   "layout keys held at the config's value, e.g. parallel.tp,memory.recompute")
      ->delimiter(',');
  plan->add_option("--run-top", pa.run_top,
                   "train the first K predicted for a few steps each and rank them by measurement");
  plan->add_option("--run-steps", pa.run_steps, "steps per --run-top run (the first 3 warm up)");
  plan->add_flag("--no-measure", pa.no_measure,
                 "price from the profile alone: do not time the model's parts or the "
                 "machine's speed now on this machine");
  plan->add_option("--machine-now", pa.machine_now,
                   "SPEED[,COLLECTIVES]: the factors an earlier plan printed for the machine "
                   "now, in place of the runs that read them");
  plan->allow_extras();
  // One rank of calibrate's collective benchmark (started by calibrate itself).
  auto* calibrate_worker = app.add_subcommand("calibrate-worker", "");
  std::string worker_out;
  bool worker_quick = false;
  calibrate_worker->add_option("--out", worker_out)->required();
  calibrate_worker->add_flag("--quick", worker_quick);
  int64_t worker_threads = 1;
  calibrate_worker->add_option("--threads", worker_threads);
  calibrate_worker->group("");  // not in --help

  app.add_subcommand("version", "print the version")->callback([] {
    std::printf("strata %s\n", STRATA_VERSION);
  });

  std::vector<std::string> raw_args(argv + 1, argv + argc);
  std::vector<std::string> commands;
  std::string all;  // the commands a user types (not the hidden ones)
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    commands.push_back(sub->get_name());
    if (!sub->get_group().empty()) all += (all.empty() ? "" : ", ") + sub->get_name();
  }
  if (raw_args.empty()) return user_error("no command given; choose one of " + all);
  const std::string& first = raw_args.front();
  const bool known = std::find(commands.begin(), commands.end(), first) != commands.end();
  const bool help = first == "-h" || first == "--help";
  if (!known && !help && first.rfind('-', 0) == 0)
    return user_error("'" + first +
                      "' comes before a command; write strata COMMAND [options] (commands: " + all +
                      ")");
  if (!known && !help) {
    const std::string hint = strata::closest_name(first, commands);
    return user_error("'" + first + "' is not a strata command" +
                      (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                      " (commands: " + all + ")");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    return user_error(parse_error_line(e, known ? first : ""));
  }
  // Counts the parser takes as integers, checked here so the message names the fix.
  struct Count {
    const char* flag;
    int64_t value;
    const char* what;
  };
  for (const Count& c : std::initializer_list<Count>{
           {"--nproc",
            train->parsed()              ? nproc
            : estimate->count("--nproc") ? ea.nproc
                                         : 1,
            "processes"},
           {"--nproc-per-node", launch_cmd->parsed() ? lo.nproc_per_node : 1, "processes"},
           {"--nnodes", launch_cmd->parsed() ? lo.nnodes : 1, "processes"},
           {"--pp", schedule->parsed() ? sa.pp : 1, "stages"},
           {"--microbatches", schedule->parsed() ? sa.micro_batches : 1, "micro-batches"},
           {"--virtual", schedule->parsed() ? sa.chunks : 1, "chunks per rank"}}) {
    if (c.value < 1)
      return user_error(c10::str(c.flag, "=", c.value, " must be at least 1 (", c.what, "), e.g. ",
                                 c.flag, " 2"));
  }
  for (int64_t r : {train_restarts, lo.max_restarts})
    if (r < 0)
      return user_error(c10::str("--max-restarts=", r,
                                 " must be 0 or more (restarts after a failure), e.g. "
                                 "--max-restarts 3"));
  if (launch_cmd->parsed() && (lo.node_rank < 0 || lo.node_rank >= lo.nnodes))
    return user_error(c10::str("--node-rank=", lo.node_rank, " must be in [0, --nnodes=", lo.nnodes,
                               "); number the nodes 0 to ", lo.nnodes - 1));
  return strata::run_main([&]() -> int {
    if (train->parsed()) {
      std::vector<std::string> targs(raw_args.begin() + 1, raw_args.end());
      return run_train(config_path, nproc, train_restarts, train->remaining(), targs);
    }
    if (launch_cmd->parsed()) return strata::launch(lo);
    if (report->parsed()) return strata::run_report(report_dir, report_out);
    if (export_cmd->parsed()) return strata::run_export(xa);
    if (import_cmd->parsed()) return strata::run_import(ia);
    if (generate->parsed()) return strata::run_generate(ga);
    if (calibrate->parsed()) return strata::run_calibrate(ca, self_exe());
    if (plan->parsed()) {
      pa.overrides = plan->remaining();
      return strata::run_plan(pa, self_exe());
    }
    if (calibrate_worker->parsed())
      return strata::run_calibrate_worker(worker_out, worker_quick, worker_threads);
    if (schedule->parsed()) return strata::run_schedule(sa);
    if (estimate->parsed()) {
      ea.overrides = estimate->remaining();
      return strata::run_estimate(ea);
    }
    return 0;
  });
}
