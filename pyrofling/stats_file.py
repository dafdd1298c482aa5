"""Statistics files (``--stats-json``) that readers can poll while the writer runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_stats(path: Path, stats: dict[str, Any]) -> None:
    """Write ``stats`` as JSON beside ``path`` and rename it into place: readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(stats, indent=2))
    tmp.replace(path)
