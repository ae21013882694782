"""A hand-edited memory plan in config.json is one line naming the file and the entry, not a
traceback (config.json's other entries: tests/runtime/test_config_json.py)."""

import json

import pytest

from tfseg.budget.choose import saved_choice
from tfseg.config import Config
from tfseg.errors import InputError


@pytest.mark.parametrize("record", [{"overhead_bytes": 0, "plan": {"name": "stock"}},
                                    {"overhead_bytes": 0, "plan": "stock"}])
def test_a_hand_edited_memory_plan_is_one_line_naming_config_json(tmp_path, record):
    config = Config.from_flat(memory_budget_gb=8.0, model_dir=str(tmp_path))
    saved = {**json.loads(config.to_json()), "memory_plan": record}
    with pytest.raises(InputError, match=f"^{tmp_path}/config.json: memory_plan: not a plan"):
        saved_choice(config, saved, 0)
