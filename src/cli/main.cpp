// attnlab: train, evaluate, sample and compare transformer language models on CPU.
#if defined(__SSE__)
#include <immintrin.h>
#endif
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "attnlab/distributed.h"
#include "attnlab/model.h"
#include "attnlab/version.h"
#include "cli/common.h"

namespace attnlab::cli {

void ConfigArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--config", config_file, "configuration file (TOML subset: key = value, [tables])");
  cmd->add_option("--preset", preset, "built-in configuration: tiny, small or bench (applied before --config)");
  cmd->add_option("--set", sets, "override one key: --set model.n_layer=6 (repeatable)");
}

void add_skip_checksums_flag(CLI::App* cmd) {
  cmd->add_flag_callback("--skip-checksums", [] { api::set_verify_checksums(false); },
                         "load checkpoints without verifying their tensors' checksums (faster; damage goes unnoticed)");
}

api::Config ConfigArgs::api_config() const {
  api::Config c;
  if (!preset.empty()) {
    if (!api::Config::has_preset(preset)) fail("--preset ", preset, ": unknown preset (choose tiny, small or bench)");
    c = api::Config::preset(preset);
  }
  if (!config_file.empty()) c.merge(api::Config::from_file(config_file));
  for (const auto& s : sets) c.set_override(s);
  return c;
}

int& exit_status() {
  static int status = 0;
  return status;
}

}  // namespace attnlab::cli

int main(int argc, char** argv) {
#if defined(__SSE__)
  // Flush denormals to zero (FTZ) and treat denormal inputs as zero (DAZ) before any thread starts
  // (OpenMP and oneDNN workers inherit this thread's MXCSR). Under ALiBi or GOAT's recency prior at
  // long T, far keys get probabilities near e^-87, and their products with gradients land in the
  // denormal range, where each operation costs ~100 cycles: +20% step time at T = 1024 without this.
  _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
  // Under an MPI launcher (`mpirun -np N attnlab compare ...`, docs/distributed.md) the N processes
  // are ranks of one job; otherwise this is one process and the session does nothing. Only compare
  // (a grid's cells) and train (one model, data-parallel) share their work across ranks: other
  // commands would all write the same files.
  std::unique_ptr<attnlab::api::DistributedSession> session;
  try {
    session = std::make_unique<attnlab::api::DistributedSession>(&argc, &argv);
    if (session->size() > 1) {
      const char* command = nullptr;  // the subcommand: the first argument that is not an option
      for (int i = 1; i < argc && !command; ++i)
        if (argv[i][0] != '-') command = argv[i];
      if (command && std::strcmp(command, "compare") != 0 && std::strcmp(command, "train") != 0)
        throw attnlab::JobError(std::string("attnlab ") + command + " runs as one process; under mpirun (" + std::to_string(session->size()) +
                                " processes) only `attnlab compare` (a grid's runs) and `attnlab train` (one model, data-parallel) "
                                "share their work across processes (docs/distributed.md)");
    }
  } catch (const attnlab::JobError& e) {
    if (!session || session->rank() == 0) std::fprintf(stderr, "attnlab: error: %s\n", e.what());
    return 1;
  } catch (const attnlab::Error& e) {
    std::fprintf(stderr, "attnlab: error: %s\n", e.what());
    return 1;
  }
  CLI::App app{"attnlab: transformer attention-mechanism lab (train, evaluate, sample, compare) on CPU"};
  app.set_version_flag("--version", std::string("attnlab ") + attnlab::api::library_version());
  app.require_subcommand(1);
  // Every option's help line shows its default ("[8]"); subcommands inherit this setting.
  app.option_defaults()->always_capture_default();
  attnlab::cli::register_data(app);
  attnlab::cli::register_train(app);
  attnlab::cli::register_infer(app);
  attnlab::cli::register_bench(app);
  attnlab::cli::register_analyze(app);
  attnlab::cli::register_task(app);
  attnlab::cli::register_compare(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help text) and returns its own codes (104-109 for bad
    // arguments); the documented status of every error is 1, and --help / --version stay 0.
    return app.exit(e) == 0 ? 0 : 1;
  } catch (const attnlab::JobError& e) {
    // Every rank stops with this same message: rank 0 prints it.
    if (session->rank() == 0) std::fprintf(stderr, "attnlab: error: %s\n", e.what());
    return 1;
  } catch (const attnlab::Interrupted& e) {
    // Ctrl-C during long work: the documented status of a stop that can be continued, as training's.
    std::fprintf(stderr, "\nattnlab: %s\n", e.what());
    return 3;
  } catch (const attnlab::Error& e) {
    std::fprintf(stderr, "attnlab: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // The sizes users give are checked against the machine's memory where they enter; what is
    // left is an allocation nobody predicted: say so in words, not "std::bad_alloc".
    std::fprintf(stderr, "attnlab: error: out of memory: an allocation failed (the sizes given, e.g. --sequences, "
                         "--batch-size, --lengths or model.*, need more memory than this machine has)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: error: %s\n", e.what());
    return 1;
  }
  return attnlab::cli::exit_status();
}
