// attnlab public API: a model and training configuration (keys: docs/mechanisms.md §7.2).
//
//   auto cfg = attnlab::api::Config::preset("tiny").set("model.n_layer", 2).set("attn.xsa", "on");
//   cfg.resolve();                        // throws attnlab::Error naming the key and where it was set
//   std::string n = cfg.get("model.n_layer");   // "2"
//
// A Config is the ordered list of `key = value` assignments it was built from (a preset, a TOML
// file or text, set() calls); later ones override earlier ones. Nothing is checked until resolve()
// or a use (get, dump, Model::create, train): the assignments are then applied over the defaults
// and validated, exactly as `attnlab train --preset ... --config ... --set ...` does.
//
// The public API lives in attnlab::api: the library's internal layers own the plain attnlab::
// names (attnlab::Config is the resolved internal struct). attnlab::Error is shared by both.
// Thread-safety: a Config is a value. Const methods may run concurrently on one object; set() and
// assignment need exclusive access.
#pragma once
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "attnlab/error.h"

namespace attnlab::api {

class Config {
 public:
  Config();  // no assignments: the library defaults
  // A built-in preset: "tiny", "small" or "bench" (configs/*.toml hold the same text).
  static Config preset(const std::string& name);
  // A configuration file (TOML subset: `key = value`, [tables], # comments); errors name file and line.
  static Config from_file(const std::string& path);
  // Configuration text in the same syntax; `origin` names it in error messages.
  static Config from_text(const std::string& text, const std::string& origin = "configuration text");
  // The configuration stored in a checkpoint written by attnlab (every key, resolved).
  static Config from_checkpoint(const std::string& path);
  // What resuming a run trains with (`attnlab train --resume CK --set ...` without --config or
  // --preset): the checkpoint's configuration, then `overrides` ("key=value", e.g. more
  // train.steps). A new data.dir among them drops the stored data.train, data.val and
  // data.tokenizer (paths resolved from the old data.dir), unless they are given too.
  static Config resume(const std::string& checkpoint, const std::vector<std::string>& overrides);
  // Whether preset(name) exists.
  static bool has_preset(const std::string& name);

  // Appends one assignment. The value is written as in a file: 2, 3e-3, true, on, "a/path", [0, 1].
  Config& set(const std::string& key, const std::string& value);
  Config& set(const std::string& key, const char* value) { return set(key, std::string(value)); }
  // Any integer type (int, uint64_t seeds, ...), exactly.
  template <class Integer>
    requires(std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>)
  Config& set(const std::string& key, Integer value) {
    return set(key, std::to_string(value));
  }
  Config& set(const std::string& key, double value);
  Config& set(const std::string& key, bool value);
  // Appends one assignment written "key=value" (as `attnlab train --set key=value`; errors name it).
  Config& set_override(const std::string& key_equals_value);
  // Appends every assignment of `other` (its preset, file and sets, in order).
  Config& merge(const Config& other);
  // Removes every assignment of `key` made so far (the key returns to its default or derived value).
  Config& unset(const std::string& key);

  // Applies and validates the assignments; throws attnlab::Error naming the key and its origin.
  void resolve() const;
  // A resolved value as text: strings as they are ("rope"), numbers and lists as JSON (2, 0.003, [0,1]).
  // Throws attnlab::Error for a key the configuration does not have.
  std::string get(const std::string& key) const;
  // The resolved configuration, one `key = value` line per key (the banner `attnlab train` prints).
  std::string dump() const;
  // The resolved configuration as a flat JSON object of dotted keys (what checkpoints store).
  std::string to_json_string() const;
  // Equal when both resolve to the same configuration (however they were written); throws
  // attnlab::Error when either does not resolve.
  bool operator==(const Config& other) const;

  Config(const Config& other);
  Config& operator=(const Config& other);
  Config(Config&&) noexcept;
  Config& operator=(Config&&) noexcept;
  ~Config();

  struct Impl;  // the assignments; defined (and used) by the library only
  const Impl& impl() const { return *impl_; }
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnlab::api
