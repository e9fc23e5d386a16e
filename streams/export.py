"""JSON Schema of every topic's records, for downstream subscribers."""

from __future__ import annotations

import json
from pathlib import Path

from streams.topics import TOPICS

__all__ = ["export_schemas"]


def export_schemas(directory: Path) -> list[Path]:
    """Write ``<topic>.schema.json`` for each declared topic; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for suffix, spec in TOPICS.items():
        schema = spec.model.model_json_schema()
        schema["$id"] = f"faultline/{suffix}"
        schema["x-faultline-topic"] = {"suffix": suffix, "key": spec.key, "partitions": spec.partitions,
                                       "cleanup": spec.cleanup, "retention_ms": spec.retention_ms}
        path = directory / f"{suffix}.schema.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        out.append(path)
    return out
