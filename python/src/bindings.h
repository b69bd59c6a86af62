// attnlab._core: the Python bindings of the public C++ API (include/attnlab/), one file per concern.
// Only <attnlab/...> headers are included here, never the library's internals
// (tests/cli/test_api_only.sh checks), so the package is a view of the same API the CLI uses.
// The Pythonic layer over it (train's progress bar and Ctrl-C, compare's DataFrame) is
// python/attnlab/*.py; docs/python.md describes both.
#pragma once
#include <nanobind/nanobind.h>
// Every file sees the same casters: a cast<std::string> compiled without this header in one file
// (an ODR clash the linker resolves silently) would fail with bad_cast in all of them.
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab::python {

namespace nb = nanobind;

void bind_config(nb::module_& m);     // Config
void bind_model(nb::module_& m);      // Model
void bind_tokenizer(nb::module_& m);  // Tokenizer
void bind_data(nb::module_& m);       // prepare, read_token_file
void bind_train(nb::module_& m);      // train (over a data dir or a Python batch function), request_train_stop
void bind_compare(nb::module_& m);    // compare grids, read their results
void bind_analyze(nb::module_& m);    // analyze
void bind_info(nb::module_& m);       // version, kernel set, threads

// Token ids from any integer array-like (a NumPy array, a list): C-contiguous int32, with the
// shape (ndim 1 or 2) kept. `what` names the argument in errors; ids must lie in [lo, vocab_size);
// none at all is an error unless allow_empty.
struct Tokens {
  std::vector<int32_t> ids;
  std::vector<size_t> shape;
};
Tokens tokens_from(nb::handle array, const char* what, int vocab_size, int lo = 0, bool allow_empty = false);

// A NumPy array that takes over `values` (moved, not copied): its memory is freed when the last
// NumPy view of it goes (the array's base is the owning capsule).
template <class T>
nb::object numpy_owning(std::vector<T>&& values, std::vector<size_t> shape);

}  // namespace attnlab::python
