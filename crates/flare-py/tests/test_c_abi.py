"""The extension also exports Flare's C ABI, and init() points FLARE_LIBRARY at it: the
NCCL profiler plugin NCCL loads into the same process (or any C/C++ code) then records
into this process's tracer instead of starting a second one."""


def test_c_code_records_into_the_python_tracer(child):
    out = child.result(
        """
import ctypes, os
import flare
flare.init(gc=False)
lib = ctypes.CDLL(os.environ["FLARE_LIBRARY"])
lib.flare_is_initialized.restype = ctypes.c_bool
lib.flare_intern.restype = ctypes.c_uint32
name = lib.flare_intern(b"from_c")
lib.flare_span_begin(name, 0, None)
lib.flare_span_end(name, 0)
with flare.span("from_python"):
    pass
emit({"library": os.environ["FLARE_LIBRARY"], "same": lib.flare_is_initialized(),
      "module": flare._native.__file__})
flare.shutdown()
"""
    )
    assert out["library"] == out["module"]
    assert out["same"] is True
    spans = {s["name"] for s in child.read_dump()["spans"]}
    assert {"from_c", "from_python"} <= spans
