// `attnlab train` and `attnlab init`.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace attnlab::cli {

void register_train(CLI::App& app) {
  {
    auto* cmd = app.add_subcommand("train", "train a model (prints progress; writes checkpoints and metrics.jsonl to train.out_dir)");
    auto* args = new ConfigArgs;  // lives for the program's lifetime, like the App
    args->add_to(cmd);
    auto* opts = new TrainOptions;
    cmd->add_option("--resume", opts->resume, "resume exactly from a checkpoint written by `attnlab train`");
    cmd->add_option("--stop-after", opts->stop_after, "stop with a checkpoint after this many steps in this run");
    cmd->add_flag("--quiet", opts->quiet, "no progress lines");
    cmd->add_flag("--force", opts->force,
                  "start a new run in a train.out_dir that holds an earlier run's checkpoints (they are deleted)");
    cmd->callback([args, opts] {
      Config cfg;
      if (!opts->resume.empty() && args->config_file.empty() && args->preset.empty()) {
        // Resume with the stored configuration, plus any --set (e.g. more train.steps).
        const Config stored = read_checkpoint_config(opts->resume);
        std::vector<Assignment> overrides;
        for (const auto& s : args->sets) overrides.push_back(parse_override(s));
        // The stored data.train/val/tokenizer are paths resolved from the stored data.dir: a new
        // data.dir replaces them (unless they are given too), or it would be silently ignored.
        const bool new_dir = std::any_of(overrides.begin(), overrides.end(), [](const Assignment& a) { return a.key == "data.dir"; });
        std::vector<Assignment> as;
        const auto j = stored.to_json();
        for (auto it = j.begin(); it != j.end(); ++it) {
          if (new_dir && (it.key() == "data.train" || it.key() == "data.val" || it.key() == "data.tokenizer")) continue;
          as.push_back({it.key(), it->is_string() ? "\"" + it->get<std::string>() + "\"" : it->dump(), opts->resume});
        }
        as.insert(as.end(), overrides.begin(), overrides.end());
        cfg = resolve_config(as);
      } else {
        cfg = args->resolve();
      }
      if (!opts->quiet) std::printf("# resolved configuration\n%s\n", cfg.to_text().c_str());
      train(cfg, *opts);
    });
  }
  {
    auto* cmd = app.add_subcommand("init", "write a freshly initialised model as a checkpoint (step 0)");
    auto* args = new ConfigArgs;
    args->add_to(cmd);
    auto* out = new std::string;
    cmd->add_option("--out", *out, "checkpoint path (.safetensors)")->required();
    cmd->callback([args, out] {
      const Config cfg = args->resolve();
      GPT<float> model(cfg);
      model.init_weights(cfg.train.seed);
      const auto parent = std::filesystem::path(*out).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      save_checkpoint(*out, model, nullptr, nullptr, TrainingState{});
      std::printf("wrote %s (%zu parameters)\n", out->c_str(), model.num_params());
    });
  }
}

}  // namespace attnlab::cli
