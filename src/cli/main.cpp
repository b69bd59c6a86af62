// attnlab: train, evaluate, sample and compare transformer language models on CPU.
#if defined(__SSE__)
#include <immintrin.h>
#endif
#include <cstdio>
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "core/error.h"
#include "data/shard.h"
#include "model/version.h"
#include "checkpoint/checkpoint.h"

namespace attnlab::cli {

void ConfigArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--config", config_file, "configuration file (TOML subset: key = value, [tables])");
  cmd->add_option("--preset", preset, "built-in configuration: tiny, small or bench (applied before --config)");
  cmd->add_option("--set", sets, "override one key: --set model.n_layer=6 (repeatable)");
}

Config ConfigArgs::resolve() const {
  std::vector<Assignment> as;
  if (!preset.empty()) {
    const char* text = preset_config_text(preset);
    if (!text) fail("--preset ", preset, ": unknown preset (choose tiny, small or bench)");
    as = parse_config_text(text, "preset " + preset);
  }
  if (!config_file.empty()) {
    auto f = parse_config_file(config_file);
    as.insert(as.end(), f.begin(), f.end());
  }
  for (const auto& s : sets) as.push_back(parse_override(s));
  return resolve_config(as);
}

api::Config ConfigArgs::api_config() const {
  api::Config c;
  if (!preset.empty()) {
    if (!preset_config_text(preset)) fail("--preset ", preset, ": unknown preset (choose tiny, small or bench)");
    c = api::Config::preset(preset);
  }
  if (!config_file.empty()) c.merge(api::Config::from_file(config_file));
  for (const auto& s : sets) c.set_override(s);
  return c;
}

api::Config resume_api_config(const std::string& checkpoint, const std::vector<std::string>& sets) {
  api::Config c = api::Config::from_checkpoint(checkpoint);
  // As resume_config: a new data.dir replaces the stored paths resolved from the old one.
  std::vector<Assignment> overrides;
  for (const auto& s : sets) overrides.push_back(parse_override(s));
  if (std::any_of(overrides.begin(), overrides.end(), [](const Assignment& a) { return a.key == "data.dir"; }))
    c.unset("data.train").unset("data.val").unset("data.tokenizer");
  for (const auto& s : sets) c.set_override(s);
  return c;
}

Config resume_config(const std::string& checkpoint, const std::vector<std::string>& sets) {
  const Config stored = read_checkpoint_config(checkpoint);
  std::vector<Assignment> overrides;
  for (const auto& s : sets) overrides.push_back(parse_override(s));
  // The stored data.train/val/tokenizer are paths resolved from the stored data.dir: a new
  // data.dir replaces them (unless they are given too), or it would be silently ignored.
  const bool new_dir = std::any_of(overrides.begin(), overrides.end(), [](const Assignment& a) { return a.key == "data.dir"; });
  std::vector<Assignment> as;
  const auto j = stored.to_json();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (new_dir && (it.key() == "data.train" || it.key() == "data.val" || it.key() == "data.tokenizer")) continue;
    as.push_back({it.key(), it->is_string() ? "\"" + it->get<std::string>() + "\"" : it->dump(), checkpoint});
  }
  as.insert(as.end(), overrides.begin(), overrides.end());
  return resolve_config(as);
}

std::vector<std::vector<int32_t>> read_token_file(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) fail("token file ", path, ": cannot be opened (does it exist?)");
  int32_t magic = 0;
  probe.read(reinterpret_cast<char*>(&magic), sizeof magic);
  if (probe && magic == 20240520) {
    Shard s = Shard::open(path);
    return {std::vector<int32_t>(s.tokens(), s.tokens() + s.size())};
  }
  std::ifstream f(path);
  std::vector<std::vector<int32_t>> seqs;
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    std::istringstream ls(line);
    std::vector<int32_t> seq;
    std::string tok;
    while (ls >> tok) {
      size_t used = 0;
      long long v = -1;
      try { v = std::stoll(tok, &used); } catch (...) { used = 0; }
      if (used != tok.size() || v < 0 || v > 65535)
        fail("token file ", path, ":", lineno, ": '", tok, "' is not a token id (0..65535)");
      seq.push_back((int32_t)v);
    }
    if (seq.empty()) continue;
    if (!seqs.empty() && seq.size() != seqs[0].size())
      fail("token file ", path, ":", lineno, ": ", seq.size(), " ids, but the first sequence has ", seqs[0].size(),
           " (all lines must have the same length)");
    seqs.push_back(std::move(seq));
  }
  if (seqs.empty()) fail("token file ", path, ": contains no token ids");
  return seqs;
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
  CLI::App app{"attnlab: transformer attention-mechanism lab (train, evaluate, sample, compare) on CPU"};
  app.set_version_flag("--version", std::string("attnlab ") + attnlab::version());
  app.require_subcommand(1);
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
  } catch (const attnlab::Error& e) {
    std::fprintf(stderr, "attnlab: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
