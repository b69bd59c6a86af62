// NumPy in and out: token ids into the int32 vectors the API takes, and result vectors handed to
// NumPy without a copy.
#include <attnlab/error.h>
#include <nanobind/ndarray.h>

#include <limits>
#include <memory>

#include "bindings.h"

namespace attnlab::python {

using namespace nb::literals;

Tokens tokens_from(nb::handle array, const char* what, int vocab_size, int lo, bool allow_empty) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::object a = np.attr("asarray")(array);
  if (allow_empty && nb::cast<size_t>(a.attr("size")) == 0) return Tokens{{}, {0}};  // [] is float64 to NumPy
  const std::string kind = nb::cast<std::string>(a.attr("dtype").attr("kind"));
  if (kind != "i" && kind != "u")
    throw attnlab::Error(std::string(what) + ": token ids must be integers, got an array of dtype " +
                         nb::cast<std::string>(a.attr("dtype").attr("name")));
  const int ndim = nb::cast<int>(a.attr("ndim"));
  if (ndim != 1 && ndim != 2)
    throw attnlab::Error(std::string(what) + ": expected ids of shape (T,) or (B, T), got " + std::to_string(ndim) +
                         " dimensions");
  // int64 holds every id of any integer dtype but uint64's top half, which no vocabulary reaches.
  nb::object wide = np.attr("ascontiguousarray")(a, "dtype"_a = np.attr("int64"));
  auto view = nb::cast<nb::ndarray<const int64_t, nb::c_contig, nb::device::cpu>>(wide);
  Tokens t;
  for (size_t d = 0; d < view.ndim(); ++d) t.shape.push_back(view.shape(d));
  if (view.size() == 0 && !allow_empty) throw attnlab::Error(std::string(what) + ": no token ids");
  t.ids.resize(view.size());
  const int64_t* p = view.data();
  for (size_t i = 0; i < view.size(); ++i) {
    if (p[i] < lo || p[i] >= vocab_size)
      throw attnlab::Error(std::string(what) + ": id " + std::to_string(p[i]) + " at flat index " + std::to_string(i) +
                           " is outside [" + std::to_string(lo) + ", " + std::to_string(vocab_size) +
                           ") (model.vocab_size = " + std::to_string(vocab_size) + ")");
    t.ids[i] = int32_t(p[i]);
  }
  return t;
}

template <class T>
nb::object numpy_owning(std::vector<T>&& values, std::vector<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  nb::ndarray<nb::numpy, T> array(owned->data(), shape.size(), shape.data(), owner);
  return nb::cast(array, nb::rv_policy::reference);  // wraps the buffer; the capsule keeps it alive
}

template nb::object numpy_owning<float>(std::vector<float>&&, std::vector<size_t>);
template nb::object numpy_owning<double>(std::vector<double>&&, std::vector<size_t>);
template nb::object numpy_owning<int32_t>(std::vector<int32_t>&&, std::vector<size_t>);

}  // namespace attnlab::python
