// Versions and the machine: what `attnlab info` prints about the build (include/attnlab/bench.h).
#include <attnlab/bench.h>
#include <attnlab/version.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

namespace attnlab::python {

void bind_info(nb::module_& m) {
  m.attr("__version__") = ATTNLAB_VERSION_STRING;
  m.def("library_version", &api::library_version, "The version the C++ library was built as.");
  m.def(
      "kernel_info",
      [] {
        const api::KernelInfo k = api::kernel_info();
        nb::dict d;
        d["attention_kernels"] = k.attention_kernels;
        d["lanes"] = k.lanes;
        d["available"] = k.available;
        d["gemm_backend"] = k.gemm_backend;
        d["gemm_backend_bf16"] = k.gemm_backend_bf16;
        return d;
      },
      "The attention kernel set chosen at run time (ATTNLAB_KERNELS=<set> forces one) and the GEMM library.");
  m.def("threads", &api::threads, "The threads the library computes with (OMP_NUM_THREADS, or every core).");
}

}  // namespace attnlab::python
