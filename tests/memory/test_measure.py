"""The measuring recipe. The measurements themselves (stock vs memory saving vs
recompute, in fresh processes) are asserted in tests/report/test_report.py."""

import pytest

from tfseg.memory.measure import StepConfig


def test_recipe_is_in_the_docstring():
    from tfseg.memory import measure as module

    assert "DEVELOPERS.md" not in module.__doc__
    for step in ("fresh Python process", "warm-up", "gc.collect()", "reset_memory_stats", "peak - base"):
        assert step in module.__doc__


def test_unknown_variant_is_rejected():
    with pytest.raises(ValueError, match="variant"):
        StepConfig(variant="fast")
