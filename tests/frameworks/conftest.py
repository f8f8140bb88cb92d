"""Framework lanes (each run by its own nox session, with AGL_LANE set): shared assertions get pytest's rewriting."""

import pytest

pytest.register_assert_rewrite("tests.frameworks.span_tree")
