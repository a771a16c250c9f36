// rt_dist.torch._C: the rtd backend's C++ half, as a Python module.
// rt_dist.torch registers ProcessGroupRTD with torch.distributed.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "backend.h"
#include "c_api_loader.h"
#include "comm.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  // torch.distributed's own bindings first: c10d::Backend and c10d::Store.
  py::module_::import("torch.distributed");
  m.def("load", &rtd_torch::load_c_api, py::arg("path"),
        "opens librt_dist (the path rt_dist._capi loaded); before any group is made");
  using rtd_torch::BackendRTD;
  py::class_<BackendRTD, c10d::Backend, c10::intrusive_ptr<BackendRTD>>(m, "ProcessGroupRTD")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<BackendRTD>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"))
      .def_property_readonly("calls", &BackendRTD::calls,
                             "operations launched through librt_dist (for tests)");
  m.def("unraised_failures", &rtd_torch::unraised_failures,
        "failures of rtd communicators that nothing raised (reported at exit)");
  m.attr("TORCH_VERSION") = TORCH_BUILT_WITH;
}
