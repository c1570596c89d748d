"""Shared fixtures. Helpers and data they are built from are in helpers.py.

Tests marked `slow` (project workflows, benchmark scripts, trainings of every shipped config) run
by default, as CI runs them; `pytest -m "not slow"` leaves them out for a quick check.
"""

import os

# The README runs the tests in one pytest-xdist worker per core (`-n auto`): each worker and the
# processes its tests start then use one BLAS / OpenMP thread (set before numpy and torch load), since
# a second thread per worker only contends with the other workers' and makes torch's tests slower.
if "PYTEST_XDIST_WORKER" in os.environ:
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

import pytest  # noqa: E402
from thinc.api import get_current_ops, require_cpu, require_gpu  # noqa: E402

from helpers import NESTED, make_examples, small_pipeline, train


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: project workflows and long trainings (CI runs them)")


@pytest.fixture(scope="module")
def trained():
    """A small fofe_ner trained to fit NESTED (per test module, since tests edit its cfg)."""
    nlp = small_pipeline()
    return train(nlp, make_examples(nlp, NESTED))


@pytest.fixture
def gpu_ops():
    """Select the GPU for the test and give the CPU back afterwards, so other tests stay on numpy."""
    require_gpu(0)
    yield get_current_ops()
    require_cpu()
