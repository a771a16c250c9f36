#include "python_warning.h"

#include <Python.h>

namespace rtd_torch {

void warn_python(const std::string& message) {
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing();
#else
  const bool finalizing = _Py_IsFinalizing();
#endif
  if (!Py_IsInitialized() || finalizing) {
    return;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) != 0) {
    PyErr_Clear();
  }
  PyGILState_Release(gil);
}

}  // namespace rtd_torch
