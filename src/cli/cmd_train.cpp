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
    auto* args = program_lifetime<ConfigArgs>();  // lives for the program's lifetime, like the App
    args->add_to(cmd);
    auto* opts = program_lifetime<TrainOptions>();
    cmd->add_option("--resume", opts->resume, "resume exactly from a checkpoint written by `attnlab train`");
    cmd->add_option("--stop-after", opts->stop_after, "stop with a checkpoint after this many steps in this run");
    cmd->add_flag("--quiet", opts->quiet, "no progress lines");
    cmd->add_flag("--force", opts->force,
                  "start a new run in a train.out_dir that holds an earlier run's checkpoints (they are deleted)");
    cmd->callback([args, opts] {
      Config cfg;
      if (!opts->resume.empty() && args->config_file.empty() && args->preset.empty()) {
        cfg = resume_config(opts->resume, args->sets);
      } else {
        cfg = args->resolve();
      }
      if (!opts->quiet) std::printf("# resolved configuration\n%s\n", cfg.to_text().c_str());
      train(cfg, *opts);
    });
  }
  {
    auto* cmd = app.add_subcommand("init", "write a freshly initialised model as a checkpoint (step 0)");
    auto* args = program_lifetime<ConfigArgs>();
    args->add_to(cmd);
    auto* out = program_lifetime<std::string>();
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
