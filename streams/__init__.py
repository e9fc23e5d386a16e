"""The contract between faultline's stages: event and decision schemas, topics."""

from streams.decisions import Approval, Command, CommandResult, DeadLetter, Incident, StreamEnd
from streams.events import SCHEMA_VERSION, Event
from streams.topics import TOPICS, topic_name

__all__ = [
    "SCHEMA_VERSION",
    "Event",
    "Incident",
    "Command",
    "CommandResult",
    "DeadLetter",
    "StreamEnd",
    "Approval",
    "TOPICS",
    "topic_name",
]
