// SPDX-License-Identifier: MIT
// ferry._ferry: the nanobind extension behind the `ferry` Python package. This file defines
// the module; each part of the public API is bound in a file of its own (bind_*.cpp), under
// the rules binding.hpp states once. ferry.torch's glue is the submodule `_torch`
// (python/src/torch/).
#include "binding.hpp"

#include <nanobind/stl/string.h>

#include <exception>

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_ferry, m) {
  m.doc() =
      "ferry's C++ core: devices, queues, timelines, pools, transfers and snapshots. Import the "
      "`ferry` package rather than this module.";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ferry::Error& e) {
      nb::object cls = nb::module_::import_("ferry._error").attr("Error");
      nb::object exc = cls(std::string(ferry::to_string(e.code())), e.message(), e.call());
      PyErr_SetObject(cls.ptr(), exc.ptr());
    }
  });

  nb::enum_<ferry::Backend>(m, "Backend", "The backends ferry can be built with.")
      .value("host", ferry::Backend::host)
      .value("cuda", ferry::Backend::cuda)
      .value("hip", ferry::Backend::hip)
      .value("vulkan", ferry::Backend::vulkan)
      .value("vulkan_cuda", ferry::Backend::vulkan_cuda)
      .value("cuda_vulkan", ferry::Backend::cuda_vulkan)
      .value("null", ferry::Backend::null);
  nb::enum_<ferry::QueueRole>(m, "QueueRole", "compute (owner) or transfer (executing).")
      .value("compute", ferry::QueueRole::compute)
      .value("transfer", ferry::QueueRole::transfer);

  ferry::python::bind_device(m);
  ferry::python::bind_buffers(m);
  ferry::python::bind_transfer(m);
  nb::module_ glue = m.def_submodule("_torch", "ferry.torch's glue (python/src/torch/); not a public API.");
  ferry::python::bind_torch_glue(glue);

  m.def("backend_name", [](ferry::Backend b) { return std::string(ferry::to_string(b)); }, "backend"_a);
  m.def("parse_backend", [](const std::string& name) { return ferry::parse_backend(name); }, "name"_a);
}
