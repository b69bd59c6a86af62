// Parameter registry (as in llm.c): one table of {name, shape, init, weight decay} lays out one
// contiguous buffer each for parameters, gradients and the two Adam moments, gives the safetensors
// names, and drives initialization and the optimizer's decay policy (docs/mechanisms.md §0, §1.4).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"

namespace attnlab {

enum class Init { Normal, Zero, One, Constant, Values };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  Init init = Init::Normal;
  double init_value = 0.0;  // std for Normal, value for Constant
  std::vector<double> init_values;  // Values: one per element (e.g. GOAT's ALiBi-initialized ρ, §3.6)
  bool decay = false;       // AdamW decoupled weight decay (§0: only E, P, W_q/k/v/o, MLP matrices)
  size_t offset = 0;        // element offset in the buffers
  size_t numel = 0;
};

class ParamRegistry {
 public:
  // Adds a tensor; returns its index. Offsets are assigned by finalize().
  size_t add(std::string name, std::vector<int64_t> shape, Init init, double init_value, bool decay);
  // Adds a tensor initialized element by element from `values` (numel entries).
  size_t add_values(std::string name, std::vector<int64_t> shape, std::vector<double> values, bool decay);
  // Lays the tensors out: every decayed tensor first, then the rest, each 16-element (64-byte)
  // aligned. The optimizer is then two contiguous calls (decayed range, undecayed range) instead
  // of one small call per tensor; padding stays zero in every buffer and is left zero by AdamW.
  void finalize();
  size_t total() const { return total_; }
  size_t decayed_total() const { return decayed_total_; }  // [0, decayed_total) decays; [decayed_total, total) does not
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& spec(size_t i) const { return specs_[i]; }
  const ParamSpec* find(const std::string& name) const;

 private:
  std::vector<ParamSpec> specs_;
  size_t total_ = 0, decayed_total_ = 0;
  bool finalized_ = false;
};

}  // namespace attnlab
