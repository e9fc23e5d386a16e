"""Registering the topics' JSON Schemas in a Confluent-compatible schema registry.

Where a registry is configured (``FAULTLINE_SCHEMA_REGISTRY``, optionally with
``FAULTLINE_SCHEMA_REGISTRY_USERNAME``/``_PASSWORD``), ``faultline schemas register`` and
``faultline topics apply`` register each topic's record schema (:func:`streams.export.topic_schema`)
as a ``JSON`` schema under the subject ``<topic>-value`` (the registry's default
TopicNameStrategy), so subscribers using the registry's serializers find it. Registering the same
schema again returns the same id; a schema the subject's compatibility rule refuses is an error
that names the subject.

Uses confluent-kafka's own client (the ``schemaregistry`` extra: ``pip install
'faultline[schemaregistry]'``); it is imported only when a registry is configured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from streams.export import topic_schema
from streams.topics import TOPICS, topic_name

__all__ = ["Registered", "register_schemas", "subject"]


@dataclass(frozen=True)
class Registered:
    """One schema in the registry: its subject, the registry's id for it, and its ``$id``."""

    subject: str
    schema_id: int
    uri: str


def subject(namespace: str, suffix: str) -> str:
    """The subject of a topic's record schema (TopicNameStrategy): ``faultline.events-value``."""
    return f"{topic_name(namespace, suffix)}-value"


def register_schemas(url: str, namespace: str, username: str | None = None, password: str | None = None,
                     client: Any = None) -> list[Registered]:
    """Register every declared topic's JSON Schema under ``<topic>-value`` at the registry ``url``."""
    try:
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    except ImportError as exc:  # the optional extra is missing
        raise RuntimeError("registering schemas needs confluent-kafka's schema registry client: "
                           "pip install 'faultline[schemaregistry]'") from exc
    if client is None:
        conf: dict[str, Any] = {"url": url}
        if username:
            conf["basic.auth.user.info"] = f"{username}:{password or ''}"
        client = SchemaRegistryClient(conf)
    done = []
    for suffix in TOPICS:
        schema = topic_schema(suffix)
        name = subject(namespace, suffix)
        try:
            schema_id = client.register_schema(name, Schema(json.dumps(schema, sort_keys=True), "JSON"))
        except Exception as exc:
            raise RuntimeError(f"the schema registry at {url} refused {name}: {exc}") from exc
        done.append(Registered(name, int(schema_id), str(schema["$id"])))
    return done
