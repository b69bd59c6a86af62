#include "experiment/compare/checkpoints.h"

#include <algorithm>
#include <cstdlib>

#include "checkpoint/safetensors.h"

namespace attnlab::compare {

namespace fs = std::filesystem;

namespace {

int64_t checkpoint_step(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  auto it = f.metadata().find("step");
  if (it == f.metadata().end()) return -1;
  return std::stoll(it->second);
}

}  // namespace

std::string latest_checkpoint(const fs::path& dir, int64_t* step, std::vector<std::string>* unreadable) {
  std::string best;
  int64_t best_step = -1;
  if (!fs::exists(dir)) return best;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 12 || name.substr(name.size() - 12) != ".safetensors") continue;
    if (name != "model.safetensors" && name.rfind("step_", 0) != 0) continue;
    int64_t s = -1;
    try {
      s = checkpoint_step(e.path().string());
    } catch (const std::exception&) {  // torn or foreign file
      if (unreadable) unreadable->push_back(name);
      continue;
    }
    if (s > best_step) { best_step = s; best = e.path().string(); }
  }
  if (step) *step = best_step;
  return best;
}

void prune_step_checkpoints(const fs::path& dir, int64_t keep) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.size() != 23 || name.substr(11) != ".safetensors") continue;
    const long long s = std::atoll(name.substr(5, 6).c_str());
    if (keep < 0 || s < keep) fs::remove(e.path(), ec);
  }
}

void keep_newest_step_checkpoint(const fs::path& dir) {
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.size() != 23 || name.substr(11) != ".safetensors") continue;
    newest = std::max<int64_t>(newest, std::atoll(name.substr(5, 6).c_str()));
  }
  if (newest >= 0) prune_step_checkpoints(dir, newest);
}

}  // namespace attnlab::compare
