// The Python extension sncl_torch._C: exposes ProcessGroupSNCL as a subclass of
// torch.distributed.ProcessGroup; sncl_torch/__init__.py registers it as "sncl".
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include "bindings/torch/process_group_sncl.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  // The base class must be registered with pybind11 before the subclass.
  py::module::import("torch.distributed");
  py::class_<sncl_torch::ProcessGroupSNCL, c10::intrusive_ptr<sncl_torch::ProcessGroupSNCL>, c10d::ProcessGroup>(
      m, "ProcessGroupSNCL")
      // register_backend's creator signature: (store, rank, world_size, timeout). The
      // store waits for rank 0's id, so the GIL is released meanwhile.
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<sncl_torch::ProcessGroupSNCL>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
}
