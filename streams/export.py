"""JSON Schema of every topic's records, for downstream subscribers.

Each file is a JSON Schema 2020-12 document (``$schema``, pydantic's dialect) whose ``$id`` is an
absolute URI naming the topic's record and its schema version: ``urn:faultline:schema:<topic
suffix>:v<schema_version>`` (a URN, so it resolves to nothing and names the schema alone; it
changes when the schema version does). The same documents are what
:func:`common.schema_registry.register_schemas` registers in a Confluent-compatible registry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.batch import record_schema
from streams.topics import TOPICS

__all__ = ["JSON_SCHEMA_DIALECT", "export_schemas", "schema_id", "topic_schema"]

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _version(suffix: str) -> int:
    field = TOPICS[suffix].model.model_fields.get("schema_version")
    return int(field.default) if field is not None and isinstance(field.default, int) else 1


def schema_id(suffix: str) -> str:
    """``urn:faultline:schema:events:v1``: the ``$id`` of the topic's record schema."""
    return f"urn:faultline:schema:{suffix}:v{_version(suffix)}"


def topic_schema(suffix: str) -> dict[str, Any]:
    """The JSON Schema of one declared topic's records, with ``$schema``, ``$id`` and the topic's plan."""
    spec = TOPICS[suffix]
    schema = spec.model.model_json_schema() if spec.batch is None else record_schema(spec.model, spec.batch)
    schema = {"$schema": JSON_SCHEMA_DIALECT, "$id": schema_id(suffix), **schema}
    schema["x-faultline-topic"] = {"suffix": suffix, "key": spec.key, "partitions": spec.partitions,
                                   "cleanup": spec.cleanup, "retention_ms": spec.retention_ms,
                                   "batch": spec.batch.__name__ if spec.batch is not None else None}
    return schema


def export_schemas(directory: Path) -> list[Path]:
    """Write ``<topic>.schema.json`` for each declared topic; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for suffix in TOPICS:
        path = directory / f"{suffix}.schema.json"
        path.write_text(json.dumps(topic_schema(suffix), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        out.append(path)
    return out
