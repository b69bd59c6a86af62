// attnlab._core.train: the library's training loop (include/attnlab/trainer.h) on a prepared
// directory or on batches from a Python function, with the GIL released while it computes and
// taken back for each callback and batch. attnlab.train (python/attnlab/training.py) wraps it with
// the progress bar, the iterable of NumPy batches and Ctrl-C.
#include <attnlab/trainer.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <optional>

#include "bindings.h"

namespace attnlab::python {

using namespace nb::literals;

namespace {

// Batches from a Python function returning (inputs, targets), both C-contiguous int32 (B, T) with
// ids already checked (python/attnlab/training.py builds it from the user's iterable).
class BatchFunctionSource final : public api::DataSource {
 public:
  BatchFunctionSource(nb::handle fetch, std::string description) : fetch_(fetch), description_(std::move(description)) {}
  void next(int32_t* inputs, int32_t* targets, int B, int T) override {
    nb::gil_scoped_acquire acquire;
    nb::tuple batch = nb::cast<nb::tuple>(fetch_());
    if (batch.size() != 2) throw attnlab::Error("data: the batch function must return (inputs, targets)");
    copy(batch[0], inputs, B, T, "inputs");
    copy(batch[1], targets, B, T, "targets");
  }
  std::string describe() const override { return description_; }

 private:
  static void copy(nb::handle array, int32_t* out, int B, int T, const char* what) {
    auto a = nb::cast<nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>>(array);
    if (a.shape(0) != size_t(B) || a.shape(1) != size_t(T))
      throw attnlab::Error(std::string("data: ") + what + " of shape (" + std::to_string(a.shape(0)) + ", " +
                           std::to_string(a.shape(1)) + "); training needs (train.batch_size, model.seq_len) = (" +
                           std::to_string(B) + ", " + std::to_string(T) + ")");
    std::memcpy(out, a.data(), sizeof(int32_t) * size_t(B) * size_t(T));
  }
  nb::handle fetch_;  // borrowed: the binding's caller keeps it alive for the whole train()
  std::string description_;
};

}  // namespace

void bind_train(nb::module_& m) {
  nb::class_<api::TrainResult>(m, "TrainResult", "What attnlab.train returns.")
      .def_ro("steps", &api::TrainResult::steps, "Optimizer steps completed (resumes included).")
      .def_ro("steps_this_run", &api::TrainResult::steps_this_run)
      .def_ro("last_train_loss", &api::TrainResult::last_train_loss)
      .def_ro("val_loss", &api::TrainResult::val_loss, "The last validation loss (NaN without validation data).")
      .def_ro("tokens_per_s", &api::TrainResult::tokens_per_s)
      .def_ro("train_seconds", &api::TrainResult::train_seconds)
      .def_ro("num_params", &api::TrainResult::num_params)
      .def_ro("checkpoint", &api::TrainResult::checkpoint, "The last checkpoint written (Model.load it).")
      .def_prop_ro(
          "losses", [](const api::TrainResult& r) { return numpy_owning(std::vector<double>(r.losses), {r.losses.size()}); },
          "Training loss per step of this call (float64 array).")
      .def_ro("skipped_steps", &api::TrainResult::skipped_steps)
      .def_ro("interrupted", &api::TrainResult::interrupted,
              "Stopped by Ctrl-C, SIGTERM or request_train_stop() before train.steps (a checkpoint was written).")
      .def("__repr__", [](const api::TrainResult& r) {
        return "attnlab.TrainResult(steps=" + std::to_string(r.steps) + ", last_train_loss=" +
               std::to_string(r.last_train_loss) + ", val_loss=" + std::to_string(r.val_loss) + ", checkpoint='" +
               r.checkpoint + "'" + (r.interrupted ? ", interrupted=True" : "") + ")";
      });

  m.def(
      "_train",
      [](const api::Config& config, nb::object batches, nb::object validation, const std::string& describe,
         const std::string& resume, int stop_after, bool force, nb::object on_step, nb::object on_eval) {
        api::TrainParams params = api::default_train_params();
        params.resume = resume;
        params.stop_after = stop_after;
        params.force = force;
        // The std::functions capture references to the Python callables (alive in this frame):
        // copying them (TrainParams is copied inside) must not touch reference counts without the GIL.
        if (!on_step.is_none())
          params.on_step = [&on_step](int64_t step, double loss, double tokens_per_s) {
            nb::gil_scoped_acquire acquire;
            on_step(step, loss, tokens_per_s);
          };
        if (!on_eval.is_none())
          params.on_eval = [&on_eval](int64_t step, double val_loss) {
            nb::gil_scoped_acquire acquire;
            on_eval(step, val_loss);
          };
        if (batches.is_none()) {
          if (!validation.is_none()) throw attnlab::Error("train: validation batches go with data batches; data.dir validates on its val.bin");
          nb::gil_scoped_release release;
          return api::train(config, params);
        }
        BatchFunctionSource source(batches, describe);
        std::optional<BatchFunctionSource> val;
        if (!validation.is_none()) {
          val.emplace(validation, describe + " (validation)");
          params.validation = &*val;
        }
        nb::gil_scoped_release release;
        return api::train(config, source, params);
      },
      "config"_a, "batches"_a = nb::none(), "validation"_a = nb::none(), "describe"_a = "Python batches",
      "resume"_a = "", "stop_after"_a = -1, "force"_a = false, "on_step"_a = nb::none(), "on_eval"_a = nb::none(),
      "The training loop as the C++ API has it; use attnlab.train.");

  m.def("request_train_stop", &api::request_train_stop,
        "Asks the training running now (on any thread) to stop after its current step with a checkpoint, as\n"
        "Ctrl-C does. Safe from any thread or signal handler; no effect on a training started later.");
  m.def(
      "_check_signals",
      [] {
        if (PyErr_CheckSignals() != 0) throw nb::python_error();
      },
      "Runs the Python signal handlers that are pending (main thread).");
}

}  // namespace attnlab::python
