"""Shared fixtures. Helpers and data they are built from are in helpers.py.

Tests marked `slow` (project workflows, benchmark scripts, trainings of every shipped config) run
by default, as CI runs them; `pytest -m "not slow"` leaves them out for a quick check.
"""

import pytest
from thinc.api import get_current_ops, require_cpu, require_gpu

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
