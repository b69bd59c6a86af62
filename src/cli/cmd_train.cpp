// `attnlab train` and `attnlab init`, through the public API (include/attnlab/) alone.
#include <cstdio>
#include <filesystem>
#include <string>

#include "attnlab/attnlab.h"
#include "cli/common.h"
#include "cli/validators.h"

namespace attnlab::cli {

void register_train(CLI::App& app) {
  {
    auto* cmd = app.add_subcommand("train", "train a model (prints progress; writes checkpoints and metrics.jsonl to train.out_dir)");
    auto* args = program_lifetime<ConfigArgs>();  // lives for the program's lifetime, like the App
    add_skip_checksums_flag(cmd);
    args->add_to(cmd);
    auto* params = program_lifetime<api::TrainParams>();
    params->quiet = false;  // the tool prints progress unless --quiet (the API's default is quiet)
    cmd->add_option("--resume", params->resume, "resume exactly from a checkpoint written by `attnlab train`");
    cmd->add_option("--stop-after", params->stop_after, "stop with a checkpoint after this many steps in this run")
        ->check(at_least(1))
        ->default_str("none");
    cmd->add_flag("--quiet", params->quiet, "no progress lines");
    cmd->add_flag("--force", params->force,
                  "start a new run in a train.out_dir that holds an earlier run's checkpoints (they are deleted)");
    cmd->callback([args, params] {
      const api::Config cfg = !params->resume.empty() && args->config_file.empty() && args->preset.empty()
                                  ? api::Config::resume(params->resume, args->sets)
                                  : args->api_config();
      cfg.resolve();  // errors before anything is printed
      // Under mpirun every rank trains its share of each batch; rank 0 alone prints.
      if (!params->quiet && api::DistributedSession::process_rank() == 0)
        std::printf("# resolved configuration\n%s\n", cfg.dump().c_str());
      api::train(cfg, *params);
    });
  }
  {
    auto* cmd = app.add_subcommand("init", "write a freshly initialised model as a checkpoint (step 0)");
    auto* args = program_lifetime<ConfigArgs>();
    args->add_to(cmd);
    auto* out = program_lifetime<std::string>();
    auto* force = program_lifetime<bool>();
    cmd->add_option("--out", *out, "checkpoint path (.safetensors)")->required();
    cmd->add_flag("--force", *force, "replace a file that is already at --out");
    cmd->callback([args, out, force] {
      // A checkpoint is hours of training: never replaced by a fresh model without being asked.
      if (!*force && std::filesystem::exists(*out))
        fail("--out ", *out, ": ", std::filesystem::is_directory(*out) ? "is a directory" : "a file is already there",
             "; pass --force to replace it, or choose another path");
      const api::Config cfg = args->api_config();
      const api::Model model = api::Model::create(cfg, std::stoull(cfg.get("train.seed")));
      model.save(*out);
      std::printf("wrote %s (%zu parameters)\n", out->c_str(), model.num_params());
    });
  }
}

}  // namespace attnlab::cli
