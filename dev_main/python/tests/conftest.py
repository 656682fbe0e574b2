"""Fixtures: the package under test, and the frameworks every contract test runs on.

`fw` runs a test on NumPy arrays, on torch CPU tensors (skipped with a reason when torch is not
installed) and on torch CUDA tensors (marked `cuda`; skipped without a GPU or without the CUDA
backend). ctest runs `-m "not cuda"` as test `python` and `-m cuda` as test `python_cuda`.
"""

import pytest

import helpers


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA device and ropepool's CUDA backend")


@pytest.fixture(scope="session")
def ropepool():
    import ropepool as module

    return module


FRAMEWORKS = ["numpy", "torch", pytest.param("torch-cuda", marks=pytest.mark.cuda)]


@pytest.fixture(params=FRAMEWORKS)
def fw(request, ropepool):
    framework = helpers.make_framework(request.param)
    if framework.is_cuda and not ropepool.has_cuda():
        pytest.skip("this ropepool was built without its CUDA backend")
    return framework


@pytest.fixture(params=["numpy", "torch"])
def cpu_fw(request):
    """Frameworks on the CPU only: for what only the CPU backend does (threads, fork)."""
    return helpers.make_framework(request.param)


@pytest.fixture
def np_fw():
    return helpers.make_framework("numpy")


@pytest.fixture
def torch_fw():
    return helpers.make_framework("torch")
