// The grid file of `attnlab compare` (docs/compare.md "The grid file"): the config's TOML subset
// (parse_config_text) with the config's value parsers (model/config_values.h), so a grid and a
// config accept the same values and fail with the same messages.
#include <cctype>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "experiment/compare.h"
#include "experiment/compare/common.h"
#include "model/config.h"
#include "model/config_values.h"

namespace attnlab {

using config_values::parse_bool;
using config_values::parse_int;
using config_values::parse_quoted;
using config_values::parse_string_list;

namespace {
constexpr long long kMaxInt = std::numeric_limits<int>::max();
constexpr long long kMaxSeed = 1LL << 62;  // train.seed's range (model/config.cpp)
}  // namespace

Grid parse_grid_text(const std::string& text, const std::string& origin) {
  Grid g;
  bool baseline_given = false;
  std::map<std::string, size_t> index, task_index;
  // A `set` list gives each configuration key once (a second value would silently win).
  auto sets_of = [](const std::string& k, const Assignment& a) {
    std::vector<std::string> sets = parse_string_list(k, a.value, a.origin);
    std::map<std::string, std::string> seen;
    for (const auto& text : sets) {
      const std::string key = parse_override(text).key;
      if (seen.count(key)) fail(a.origin, ": ", k, " gives ", key, " twice (", seen[key], ", ", text, "); give it once");
      seen[key] = text;
    }
    return sets;
  };
  for (const auto& a : parse_config_text(text, origin, /*keys_once=*/true)) {
    const std::string& k = a.key;
    if (k == "name") g.name = parse_quoted(k, a.value, a.origin);
    else if (k == "preset") g.preset = parse_quoted(k, a.value, a.origin);
    else if (k == "set") g.sets = sets_of(k, a);
    else if (k == "baseline") { g.baseline = parse_quoted(k, a.value, a.origin); baseline_given = true; }
    else if (k == "steps") g.steps = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);  // 0 is not "the preset's": leave it out
    else if (k == "ckpt_every") g.ckpt_every = (int)parse_int(k, a.value, a.origin, 0, kMaxInt);
    else if (k == "analyze") g.analyze = parse_bool(k, a.value, a.origin);
    else if (k == "analyze_sequences") g.analyze_sequences = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);
    else if (k == "seeds") {
      g.seeds.clear();
      for (const auto& s : parse_string_list(k, a.value, a.origin)) g.seeds.push_back((uint64_t)parse_int(k, s, a.origin, 0, kMaxSeed));
    } else if (k == "lengths") {
      g.lengths = parse_quoted(k, a.value, a.origin);
    } else if (k == "length_tokens") {
      g.length_tokens = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);
    } else if (k.rfind("tasks.", 0) == 0) {
      const size_t dot = k.find('.', 6);
      if (dot == std::string::npos) fail(a.origin, ": a task's settings go in a [tasks.NAME] table, got ", k);
      const std::string name = k.substr(6, dot - 6), field = k.substr(dot + 1);
      if (name != "passkey" && name != "needle" && name != "mqar")
        fail(a.origin, ": unknown task '", name, "' (passkey, needle or mqar)");
      if (!task_index.count(name)) {
        task_index[name] = g.tasks.size();
        g.tasks.push_back({});
        g.tasks.back().name = name;
      }
      GridTask& t = g.tasks[task_index[name]];
      if (field == "set") t.sets = sets_of(k, a);
      else if (field == "steps") t.steps = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);
      else if (field == "lengths") t.lengths = parse_quoted(k, a.value, a.origin);
      else if (field == "samples") t.samples = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);
      else fail(a.origin, ": unknown task key '", field, "' (known: set, steps, lengths, samples)");
      for (const auto& s : t.sets)
        if (s.rfind("model.vocab_size", 0) == 0) fail(a.origin, ": ", k, ": the task fixes model.vocab_size");
    } else if (k.rfind("variants.", 0) == 0 && k.size() > 13 && k.substr(k.size() - 4) == ".set") {
      const std::string name = k.substr(9, k.size() - 13);
      for (char c : name)
        if (!(std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '+'))
          fail(a.origin, ": variant name '", name, "' may use letters, digits, '-', '_' and '+' only");
      index[name] = g.variants.size();
      g.variants.push_back({name, sets_of(k, a)});
    } else {
      fail(a.origin, ": unknown grid key '", k,
           "' (known: name, preset, set, steps, seeds, baseline, ckpt_every, analyze, analyze_sequences, lengths, length_tokens, "
           "[variants.NAME] set, [tasks.NAME] set/steps/lengths/samples)");
    }
  }
  if (g.variants.empty()) fail(origin, ": no variants (add e.g. [variants.rope] set = [\"attn.pos=rope\"])");
  if (g.seeds.empty()) fail(origin, ": seeds is empty");
  if (std::set<uint64_t>(g.seeds.begin(), g.seeds.end()).size() != g.seeds.size()) fail(origin, ": seeds repeat a value");
  if (!baseline_given) g.baseline = g.variants[0].name;
  if (!index.count(g.baseline)) fail(origin, ": baseline '", g.baseline, "' is not a variant");
  if (!g.preset.empty() && !preset_config_text(g.preset)) fail(origin, ": unknown preset '", g.preset, "' (tiny, small or bench)");
  return g;
}

Grid parse_grid_file(const std::string& path) { return parse_grid_text(compare::read_text(path), path); }

}  // namespace attnlab
