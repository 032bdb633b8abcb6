"""A deployed site's ClientApp process only forwards each message to its warm worker
(`client_app.worker`), so importing the ClientApp must not import the machine-learning stack:
torch, transformers, peft (the model), pymoo, scipy (the server's optimisers). Each check runs in
a fresh interpreter, since this test process has long imported them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "peft", "pymoo", "scipy")


def imported_heavy(statement: str) -> list[str]:
    """The HEAVY modules in sys.modules after `statement` runs in a fresh interpreter."""
    code = (f"import json, sys\n{statement}\n"
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("statement", [
    "import client_app.app",  # the ClientApp process of a deployed site
    "import settings; settings.RunConfig.from_mapping(settings.default_config())",  # its checks
    "import strategies.records",  # the wire format
])
def test_the_clientapp_process_imports_no_ml_stack(statement):
    assert imported_heavy(statement) == []


def test_the_lazy_names_still_load_what_they_name():
    """The lazy packages hand out the real objects on first use (this is what they are for)."""
    loaded = imported_heavy("import tasks, strategies, metaheuristics\n"
                            "assert callable(tasks.build_model) and callable(tasks.train)\n"
                            "assert strategies.LayerSelectionStrategy and metaheuristics.optimize")
    assert {"torch", "pymoo", "scipy"} <= set(loaded)
