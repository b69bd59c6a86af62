// The extension module attnlab._core (docs/python.md): attnlab::Error as the Python exception
// attnlab.Error, then each part of the API.
#include <attnlab/error.h>

#include "bindings.h"

namespace nb = nanobind;
using namespace attnlab::python;

NB_MODULE(_core, m) {
  m.doc() =
      "attnlab's engine: the public C++ API (include/attnlab/) bound with nanobind. Import the "
      "package `attnlab`, which re-exports these names and adds train(), compare() and analyze().";
  // Every failure of the library (a bad option, a missing or damaged file) is attnlab::Error,
  // whose message names the option or file: one Python exception class carries it unchanged.
  nb::exception<attnlab::Error>(m, "Error");
  bind_config(m);
  bind_model(m);
  bind_tokenizer(m);
  bind_data(m);
  bind_train(m);
  bind_compare(m);
  bind_analyze(m);
  bind_info(m);
}
