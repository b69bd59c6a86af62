// attnlab.Config (include/attnlab/config.h): from a preset, a TOML file or text, and keyword
// overrides; values converted from Python to the file syntax the library parses, so errors name
// the key exactly as `attnlab train --set` would.
#include <attnlab/config.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "bindings.h"

namespace attnlab::python {

using namespace nb::literals;
using api::Config;

namespace {

// A Python value as a configuration value in file syntax: true, 2, 0.003, "text", [0, 1].
std::string config_value(nb::handle value, const std::string& key) {
  PyObject* o = value.ptr();
  if (PyBool_Check(o)) return o == Py_True ? "true" : "false";
  if (PyIndex_Check(o)) return nb::cast<std::string>(nb::str(nb::int_(value)));  // int, NumPy integers
  if (PyUnicode_Check(o) || PyObject_HasAttrString(o, "__fspath__")) {
    const std::string text = PyUnicode_Check(o) ? nb::cast<std::string>(value)
                                                : nb::cast<std::filesystem::path>(value).string();
    if (text.find_first_of("\"\n") != std::string::npos)
      throw attnlab::Error("Config: " + key + ": a string value cannot hold a double quote or a newline");
    return "\"" + text + "\"";
  }
  if (PyFloat_Check(o) || PyObject_HasAttrString(o, "__float__")) {
    const double x = nb::cast<double>(nb::float_(value));
    if (!std::isfinite(x)) throw attnlab::Error("Config: " + key + ": " + std::to_string(x) + " is not a finite number");
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", x);  // round-trips exactly
    return buf;
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    std::string list = "[";
    for (nb::handle item : value) list += (list.size() > 1 ? ", " : "") + config_value(item, key);
    return list + "]";
  }
  throw attnlab::Error("Config: " + key + ": a value of type " +
                       nb::cast<std::string>(nb::str(value.type().attr("__name__"))) +
                       "; give a bool, int, float, str, path or a list of them");
}

// key = value, or a table {"n_layer": 2} under key "model": every leaf as "model.n_layer".
void set_value(Config& config, const std::string& key, nb::handle value) {
  if (PyDict_Check(value.ptr())) {
    for (auto [sub, v] : nb::borrow<nb::dict>(value)) set_value(config, key + "." + nb::cast<std::string>(nb::str(sub)), v);
    return;
  }
  config.set(key, config_value(value, key));
}

// A resolved value as Python: numbers, booleans and lists from their JSON text, strings as they are.
nb::object python_value(const std::string& text) {
  try {
    return nb::module_::import_("json").attr("loads")(text);
  } catch (nb::python_error&) {
    return nb::str(text.c_str());
  }
}

std::string repr(const Config& config) {
  try {
    std::string lines = config.dump(), out = "attnlab.Config(\n";
    size_t start = 0;
    while (start < lines.size()) {
      size_t end = lines.find('\n', start);
      if (end == std::string::npos) end = lines.size();
      if (end > start) out += "    " + lines.substr(start, end - start) + "\n";
      start = end + 1;
    }
    return out + ")";
  } catch (const attnlab::Error& e) {
    return std::string("attnlab.Config(<does not resolve: ") + e.what() + ">)";
  }
}

}  // namespace

void bind_config(nb::module_& m) {
  nb::class_<Config>(m, "Config",
                     "A model and training configuration (keys: docs/mechanisms.md §7.2).\n\n"
                     "    Config(preset=\"tiny\", file=None, text=None, **overrides)\n\n"
                     "Assignments apply in order: the preset, the file, the text, then the overrides. An override is\n"
                     "a dotted key (`**{\"model.n_layer\": 2}`) or a table (`model={\"n_layer\": 2}`). Nothing is\n"
                     "checked until resolve() or a use; errors (attnlab.Error) name the key and where it was set.\n"
                     "repr() shows every resolved value.")
      .def(
          "__init__",
          [](Config* self, std::optional<std::string> preset, std::optional<std::filesystem::path> file,
             std::optional<std::string> text, nb::kwargs overrides) {
            Config config = preset ? Config::preset(*preset) : Config();
            if (file) config.merge(Config::from_file(file->string()));
            if (text) config.merge(Config::from_text(*text));
            for (auto [key, value] : overrides) set_value(config, nb::cast<std::string>(key), value);
            new (self) Config(std::move(config));
          },
          "preset"_a = nb::none(), "file"_a = nb::none(), "text"_a = nb::none(), "overrides"_a,
          "A configuration from a built-in preset (tiny, small, bench), a TOML file, TOML text and keyword overrides.")
      .def_static("from_checkpoint", [](const std::filesystem::path& path) { return Config::from_checkpoint(path.string()); },
                  "path"_a, "The configuration stored in a checkpoint written by attnlab (every key, resolved).")
      .def_static("has_preset", &Config::has_preset, "name"_a, "Whether a built-in preset of that name exists.")
      .def(
          "set",
          [](nb::handle self, const std::string& key, nb::handle value) {
            set_value(nb::cast<Config&>(self), key, value);
            return nb::borrow(self);
          },
          "key"_a, "value"_a, nb::sig("def set(self, key: str, value: object) -> Config"),
          "Appends an assignment (later ones override earlier ones); returns the Config for chaining.")
      .def(
          "unset", [](nb::handle self, const std::string& key) {
            nb::cast<Config&>(self).unset(key);
            return nb::borrow(self);
          },
          "key"_a, nb::sig("def unset(self, key: str) -> Config"), "Removes every assignment of key (it returns to its default); returns the Config.")
      .def("resolve", &Config::resolve, "Applies and validates the assignments; raises attnlab.Error naming the key.")
      .def("get", [](const Config& c, const std::string& key) { return python_value(c.get(key)); }, "key"_a,
           "A resolved value: int, float, bool, str or list.")
      .def("__getitem__", [](const Config& c, const std::string& key) { return python_value(c.get(key)); }, "key"_a)
      .def("to_dict", [](const Config& c) { return nb::module_::import_("json").attr("loads")(c.to_json_string()); },
           "Every resolved key and value, as a dict of dotted keys.")
      .def("dump", &Config::dump, "The resolved configuration, one `key = value` line per key.")
      .def("__eq__", [](const Config& a, const Config& b) { return a == b; }, nb::is_operator(),
           "Equal when both resolve to the same configuration.")
      .def("__copy__", [](const Config& c) { return Config(c); })
      .def("__deepcopy__", [](const Config& c, nb::handle) { return Config(c); }, "memo"_a)
      .def("__repr__", &repr);
}

}  // namespace attnlab::python
