// `attnlab task NAME --train ...` and `attnlab task NAME --eval ...`: synthetic long-context tasks
// (passkey, needle, mqar; docs/long-context.md). Training is `attnlab train`'s loop with the task's
// batches and loss weights; evaluation is teacher-forced at several lengths.
#include <cstdio>
#include <memory>
#include <string>

#include "attnlab/attnlab.h"
#include "cli/common.h"
#include "cli/validators.h"
#include "cli/plots.h"
#include "cli/progress_line.h"

namespace attnlab::cli {
namespace {

struct TaskArgs {
  std::string name;
  bool do_train = false, do_eval = false, quiet = false, no_plots = false;
  std::string resume;
  int stop_after = -1;
  ConfigArgs config;
  api::TaskParams params;
  // eval
  std::string checkpoint, lengths = "1,2,4,8", depths, json, plot_script;
  int samples = 256, batch_size = 8, chunk = 0;
  uint64_t seed = 1;
};

void run_task(TaskArgs& a) {
  if (a.do_train == a.do_eval) fail("attnlab task ", a.name, ": give exactly one of --train and --eval");
  a.params.name = a.name;
  if (a.do_train) {
    for (const auto& s : a.config.sets)
      if (s.rfind("model.vocab_size", 0) == 0) fail("--set model.vocab_size: the task fixes the vocabulary");
    const bool from_checkpoint = !a.resume.empty() && a.config.config_file.empty() && a.config.preset.empty();
    const api::Config given = from_checkpoint ? api::Config::resume(a.resume, a.config.sets) : a.config.api_config();
    // The task's vocabulary, applied last (no shard is read, so data.* is unused).
    const api::Config cfg = api::task_config(given, a.params);
    cfg.resolve();  // errors before anything is printed
    if (!a.quiet) std::printf("# resolved configuration\n%s\n", cfg.dump().c_str());
    api::TrainParams opts = api::default_train_params();
    opts.quiet = a.quiet;
    opts.resume = a.resume;
    opts.stop_after = a.stop_after;
    api::train_task(cfg, a.params, opts);
    return;
  }
  if (a.checkpoint.empty()) fail("attnlab task ", a.name, " --eval needs --checkpoint");
  api::TaskEvalParams o = api::default_task_eval_params();
  o.lengths = a.lengths;
  o.depths = a.depths;
  o.samples = a.samples;
  o.seed = a.seed;
  o.batch_size = a.batch_size;
  o.chunk = a.chunk;
  o.on_progress = progress_line();
  const api::TaskEvalResult rep = api::evaluate_task(a.checkpoint, a.params, o);
  std::printf("%s", rep.table.c_str());
  if (!a.json.empty()) {
    api::write_json_report(a.json, rep.json);
    std::printf("wrote %s\n", a.json.c_str());
    // the PNG next to the JSON (F.json -> F.png), scripts/plot_long_context.py
    if (!a.no_plots) run_plot_script("plot_long_context.py", a.plot_script, {a.json});
  }
}

}  // namespace

void register_task(CLI::App& app) {
  auto* a = program_lifetime<TaskArgs>();  // lives for the program's lifetime, like the App
  auto* cmd = app.add_subcommand("task", "synthetic long-context tasks: train on one, or evaluate a checkpoint at several lengths");
  cmd->add_option("name", a->name, "passkey (docs/mechanisms.md §8.7), needle (§8.8) or mqar (associative recall)")
      ->required()
      ->check(CLI::IsMember({"passkey", "needle", "mqar"}));
  cmd->add_flag("--train", a->do_train, "train a model on the task (the config options below; train.* as for attnlab train)");
  cmd->add_flag("--eval", a->do_eval, "evaluate --checkpoint on fresh samples at --lengths");
  a->config.add_to(cmd);
  add_skip_checksums_flag(cmd);
  cmd->add_flag("--quiet", a->quiet, "with --train: no progress lines");
  cmd->add_option("--resume", a->resume, "with --train: resume exactly from a checkpoint of this task's run (give the same task options)");
  cmd->add_option("--stop-after", a->stop_after, "with --train: stop (with a checkpoint) after this many steps in this run")
      ->check(at_least(1))
      ->default_str("none");
  cmd->add_option("--keys", a->params.mqar_keys, "mqar: K distinct keys and K values (vocabulary 3 + 2K; 0: 64 in training, the checkpoint's in evaluation)")
      ->check(at_least(0, "0 = the default"));
  cmd->add_option("--kv-pairs", a->params.kv_pairs, "mqar: key-value pairs per sample (0: min(K, model.seq_len/8))")
      ->check(at_least(0, "0 = the default"));
  cmd->add_option("--queries", a->params.queries, "mqar: queries per sample (0: the number of pairs)")
      ->check(at_least(0, "0 = the default"));
  cmd->add_option("--checkpoint", a->checkpoint, "with --eval: checkpoint (.safetensors)");
  cmd->add_option("--lengths", a->lengths, "with --eval: tokens read per sample, multiples of model.seq_len or N tok")
      ->check(not_empty("1,2,4,8"));
  cmd->add_option("--depths", a->depths, "with --eval, needle: depths in [0, 1] (default 0.1,0.3,0.5,0.7,0.9)")
      ->check(not_empty("0.1,0.5,0.9"));
  cmd->add_option("--samples", a->samples, "with --eval: samples per length (and depth)")->check(at_least(1));
  cmd->add_option("--seed", a->seed, "with --eval: seed of the evaluation samples (training uses train.seed)")
      ->check(seed_value());
  cmd->add_option("--batch-size", a->batch_size, "with --eval: samples evaluated side by side")->check(at_least(1));
  cmd->add_option("--chunk", a->chunk, "with --eval: tokens per KV-cached chunk (0: model.seq_len)")
      ->check(at_least(0, "0 = model.seq_len"));
  cmd->add_option("--json", a->json, "with --eval: also write the report as JSON, and a PNG next to it");
  cmd->add_flag("--no-plots", a->no_plots, "with --eval --json: write the JSON only (no PNG)");
  cmd->add_option("--plot-script", a->plot_script, "with --eval --json: the plotting script (default: scripts/plot_long_context.py of the source tree)");
  cmd->callback([a] { run_task(*a); });
}

}  // namespace attnlab::cli
