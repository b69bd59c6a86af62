// Drawing the next token id from a model's logits: greedy, or softmax with a temperature over the
// top-k ids (the public API's Model::generate draws through this one function; `attnlab sample`
// runs Model::generate).
#pragma once
#include <vector>

#include "core/rng.h"

namespace attnlab {

// Draws among the first V logits. temperature 0: the argmax; top_k 0: all V ids. `order` is
// scratch of at least V entries (kept by the caller so that a decoding loop allocates nothing).
int sample_token(const std::vector<float>& logits, int V, std::vector<int>& order, double temperature, int top_k, Rng& rng);

}  // namespace attnlab
