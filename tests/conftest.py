"""Shared test fixtures."""
import pytest

@pytest.fixture
def on_cpu():
  """Keep every tensor of the test on the CPU, also under MOCKGPU=1 NV=1: for tests of C code generation and of
  CPU-only opts (BEAM timing C candidates, vector tiles, loop peeling checked in the C source)."""
  from frontend import Device
  old, Device.DEFAULT = Device.DEFAULT, "CPU"
  yield
  Device.DEFAULT = old
