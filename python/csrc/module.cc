// rt_dist.torch._C: the rtd backend's C++ half, as a Python module.
// rt_dist.torch registers ProcessGroupRTD with torch.distributed.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "backend.h"
#include "c_api_loader.h"
#include "comm.h"
#include "job_store.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  // torch.distributed's own bindings first: c10d::Backend and c10d::Store.
  py::module_::import("torch.distributed");
  m.def("load", &rtd_torch::load_c_api, py::arg("path"),
        "opens librt_dist (the path rt_dist._capi loaded); before any group is made");
  using rtd_torch::BackendRTD;
  py::class_<BackendRTD, c10d::Backend, c10::intrusive_ptr<BackendRTD>>(m, "ProcessGroupRTD")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, bool copy_engines,
                       bool high_priority_stream) {
             return c10::make_intrusive<BackendRTD>(
                 store, rank, size, timeout,
                 rtd_torch::BackendConfig{.copy_engines = copy_engines,
                                          .high_priority_stream = high_priority_stream});
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("copy_engines") = false, py::arg("high_priority_stream") = true)
      .def_property_readonly("options", &BackendRTD::getBackendOptions,
                             "the group's options (its timeout), as split_group copies them")
      .def_property_readonly("calls", &BackendRTD::calls,
                             "operations launched through librt_dist (for tests)")
      .def(
          "check", [](BackendRTD& b) { b.check("check"); },
          py::call_guard<py::gil_scoped_release>(),
          "raises the failure of the group's communicators (an asynchronous NCCL error, an "
          "abort), if one failed");
  using rtd_torch::OptionsRTD;
  py::class_<OptionsRTD, c10d::Backend::Options, c10::intrusive_ptr<OptionsRTD>>(
      m, "OptionsRTD", "an rtd group's options (torch.distributed.Backend.Options)")
      .def(py::init([](std::chrono::milliseconds timeout) {
             return c10::make_intrusive<OptionsRTD>(timeout);
           }),
           py::arg("timeout"))
      .def("__deepcopy__", [](const OptionsRTD& o, const py::dict&) {
        auto copy = c10::make_intrusive<OptionsRTD>(o.timeout);
        copy->group_name = o.group_name;
        copy->group_desc = o.group_desc;
        copy->global_ranks_in_group = o.global_ranks_in_group;
        return copy;
      });
  using rtd_torch::JobStore;
  py::class_<JobStore, c10d::Store, c10::intrusive_ptr<JobStore>>(
      m, "JobStore", "dtrun's store under this worker's round: it outlives every rank")
      .def(py::init([](std::chrono::milliseconds timeout) {
             return c10::make_intrusive<JobStore>(timeout);
           }),
           py::arg("timeout") = c10d::Store::kDefaultTimeout,
           py::call_guard<py::gil_scoped_release>());
  m.def(
      "job_info",
      [] {
        const rtd_job_info i = rtd_torch::read_job_info();
        py::dict d;
        d["rank"] = i.rank;
        d["world_size"] = i.world_size;
        d["round"] = i.round;
        d["generation"] = i.generation;
        d["recovery"] = i.recovery != 0;
        d["joining"] = i.joining != 0;
        d["recovery_wait_s"] = static_cast<double>(i.recovery_wait_ms) / 1000.0;
        d["timeout_s"] = static_cast<double>(i.timeout_ms) / 1000.0;
        return d;
      },
      "what dtrun told this worker: its place, round, generation and in-process recovery");
  m.def("unraised_failures", &rtd_torch::unraised_failures,
        "failures of rtd communicators that nothing raised (reported at exit)");
  m.attr("TORCH_VERSION") = TORCH_BUILT_WITH;
}
