// attnlab.Model (include/attnlab/model.h): create, load, save; forward returns the engine's logits
// as a NumPy array that owns the engine's buffer (moved out of the returned vector, no copy).
// Compute runs with the GIL released; a generate callback takes it back for each id.
#include <attnlab/model.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>

#include <filesystem>

#include "bindings.h"

namespace attnlab::python {

using namespace nb::literals;
using api::Model;

namespace {

api::Weights weights_named(const std::string& name) {
  if (name == "fp32") return api::Weights::fp32;
  if (name == "bf16") return api::Weights::bf16;
  throw attnlab::Error("Model.load: weights = \"" + name + "\": choose \"fp32\" or \"bf16\"");
}

// (B, T) from token ids of shape (T,) or (B, T).
std::pair<int, int> batch_shape(const Tokens& t) {
  return t.shape.size() == 1 ? std::pair<int, int>(1, int(t.shape[0])) : std::pair<int, int>(int(t.shape[0]), int(t.shape[1]));
}

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<Model>(m, "Model",
                    "A model in memory: Model(config, seed=1) initialises one (GPT-2 init), Model.load(path) reads a\n"
                    "checkpoint. Token ids are integers in [0, vocab_size); a Model must not be used by two threads\n"
                    "at once.")
      .def(
          "__init__",
          [](Model* self, const api::Config& config, uint64_t seed) {
            nb::gil_scoped_release release;
            new (self) Model(Model::create(config, seed));
          },
          "config"_a, "seed"_a = 1, "A freshly initialised model of the configuration (docs/mechanisms.md §1.4).")
      .def_static(
          "load",
          [](const std::filesystem::path& path, const std::string& weights) {
            const api::Weights w = weights_named(weights);
            nb::gil_scoped_release release;
            return Model::load(path.string(), w);
          },
          "path"_a, "weights"_a = "fp32",
          "The weights and configuration of a safetensors checkpoint written by attnlab. weights=\"bf16\" rounds\n"
          "the matrices to bf16 for inference.")
      .def(
          "save",
          [](const Model& model, const std::filesystem::path& path) {
            nb::gil_scoped_release release;
            model.save(path.string());
          },
          "path"_a, "Writes the weights and the configuration (no optimizer state) atomically.")
      .def(
          "forward",
          [](Model& model, nb::handle tokens) {
            const Tokens t = tokens_from(tokens, "Model.forward: tokens", model.vocab_size());
            const auto [B, T] = batch_shape(t);
            std::vector<float> logits;
            {
              nb::gil_scoped_release release;
              logits = model.forward(t.ids, B, T);
            }
            std::vector<size_t> shape = t.shape;
            shape.push_back(size_t(model.vocab_size()));
            return numpy_owning(std::move(logits), shape);
          },
          "tokens"_a,
          nb::sig("def forward(self, tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]"),
          "Logits of token ids (T,) or (B, T): a float32 array (T, V) or (B, T, V). The array owns the\n"
          "engine's buffer: no copy is made.")
      .def(
          "loss",
          [](Model& model, nb::handle inputs, nb::handle targets) {
            Tokens in, tg;
            if (targets.is_none()) {  // windows of T + 1 ids
              const Tokens w = tokens_from(inputs, "Model.loss: tokens", model.vocab_size());
              const auto [B, T1] = batch_shape(w);
              if (T1 < 2) throw attnlab::Error("Model.loss: tokens: windows need at least 2 ids (inputs and a target)");
              for (int b = 0; b < B; ++b) {
                in.ids.insert(in.ids.end(), w.ids.begin() + size_t(b) * T1, w.ids.begin() + size_t(b) * T1 + T1 - 1);
                tg.ids.insert(tg.ids.end(), w.ids.begin() + size_t(b) * T1 + 1, w.ids.begin() + size_t(b) * T1 + T1);
              }
              in.shape = tg.shape = {size_t(B), size_t(T1 - 1)};
            } else {
              in = tokens_from(inputs, "Model.loss: inputs", model.vocab_size());
              tg = tokens_from(targets, "Model.loss: targets", model.vocab_size(), -(1 << 30));  // negative: ignored
              if (in.shape != tg.shape) throw attnlab::Error("Model.loss: inputs and targets must have the same shape");
            }
            const auto [B, T] = batch_shape(in);
            nb::gil_scoped_release release;
            return model.loss(in.ids, tg.ids, B, T);
          },
          "inputs"_a, "targets"_a = nb::none(),
          nb::sig("def loss(self, inputs: numpy.typing.ArrayLike, targets: numpy.typing.ArrayLike | None = None) -> float"),
          "Mean cross-entropy (nats per token). loss(windows) with windows (B, T + 1) predicts each id from the\n"
          "ones before it; loss(inputs, targets) with both (B, T). A negative target is ignored.")
      .def(
          "generate",
          [](Model& model, nb::handle prompt, int n, double temperature, int top_k, uint64_t seed, int vocab_limit,
             nb::object callback) {
            const Tokens p = tokens_from(prompt, "Model.generate: prompt", model.vocab_size());
            if (p.shape.size() != 1) throw attnlab::Error("Model.generate: prompt: one sequence of ids (T,) expected");
            if (n < 0) throw attnlab::Error("Model.generate: n = " + std::to_string(n) + ": must be >= 0");
            api::SamplingParams params = api::default_sampling_params();
            params.temperature = temperature;
            params.top_k = top_k;
            params.seed = seed;
            params.vocab_limit = vocab_limit;
            std::vector<int32_t> ids;
            if (callback.is_none()) {
              nb::gil_scoped_release release;
              ids = model.generate(p.ids, n, params);
            } else {
              auto on_token = [&callback](int32_t id) {
                nb::gil_scoped_acquire acquire;
                nb::object keep_going = callback(id);
                return keep_going.is_none() || nb::cast<bool>(keep_going);
              };
              nb::gil_scoped_release release;
              ids = model.generate(p.ids, n, params, on_token).ids;
            }
            const size_t count = ids.size();
            return numpy_owning(std::move(ids), {count});
          },
          "prompt"_a, "n"_a, "temperature"_a = 1.0, "top_k"_a = 0, "seed"_a = 0, "vocab_limit"_a = 0,
          "callback"_a = nb::none(),
          nb::sig("def generate(self, prompt: numpy.typing.ArrayLike, n: int, temperature: float = 1.0, top_k: int = 0, "
                  "seed: int = 0, vocab_limit: int = 0, callback: collections.abc.Callable[[int], bool | None] | None = None) "
                  "-> numpy.typing.NDArray[numpy.int32]"),
          "The prompt followed by n generated ids (int32 array). temperature 0 is greedy; top_k > 0 draws among\n"
          "the k most likely; the same seed gives the same ids. callback(id) is called as each id is drawn;\n"
          "returning False stops the generation.")
      .def_prop_ro("num_params", &Model::num_params, "Number of parameters.")
      .def_prop_ro("vocab_size", &Model::vocab_size, "model.vocab_size.")
      .def_prop_ro("config", &Model::config, "The resolved configuration (a Config).")
      .def("__repr__", [](const Model& model) {
        return "attnlab.Model(" + std::to_string(model.num_params()) + " parameters, vocab_size " +
               std::to_string(model.vocab_size()) + ")";
      });
}

}  // namespace attnlab::python
