"""Structured-output load test: `locust -f locustfiles/json.py --host http://127.0.0.1:8000`.

--schema-complexity flat|nested|arrays|enums|mixed, --json-mode response_format|structured_outputs|guided_json,
--json-schema FILE; every answer is validated (failures of kind invalid_json).
"""

import importlib.util
import os
import sys

if __name__ == "json":
    # Locust imports a locustfile under its file name, so this file replaced the standard library's `json`
    # in sys.modules: load the real one back before anything else imports it.
    _init = os.path.join(os.path.dirname(os.__file__), "json", "__init__.py")
    _spec = importlib.util.spec_from_file_location(
        "json", _init, submodule_search_locations=[os.path.dirname(_init)]
    )
    assert _spec is not None and _spec.loader is not None
    _std = importlib.util.module_from_spec(_spec)
    sys.modules["json"] = _std
    _spec.loader.exec_module(_std)

from vllm_users.scenarios.json_user import JsonUser  # noqa: E402

__all__ = ["JsonUser"]
