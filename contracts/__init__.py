"""The language of memory-ledger: commands, events, envelope, (de)serialisation.

This package imports nothing else of the project.
"""

from contracts.commands import EraseMemories, MemoryWrite, RedactMemory, RevokeConsent
from contracts.errors import ContractError, UnknownEventError, UpcastError
from contracts.events import (
    EVENT_ADAPTER,
    EVENT_TYPES,
    SCHEMA_VERSION,
    SCHEMA_VERSIONS,
    ConflictDetected,
    ConsentRevoked,
    Envelope,
    ErasureRequested,
    Event,
    MemoryConfirmed,
    MemoryRedacted,
    MemoryRef,
    MemoryReinforced,
    MemorySuperseded,
    MemoryWritten,
    RedactedState,
    RetentionExpired,
    SummaryDerived,
    touched_memories,
)
from contracts.memory import MemoryBody, Provenance, Retention, Scope, SealedText
from contracts.serialization import decode_event, describe_validation_error, encode_event, evolved
from contracts.types import VERACITY_CONFIDENCE, utc_now

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_TYPES",
    "SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
    "VERACITY_CONFIDENCE",
    "ConflictDetected",
    "ConsentRevoked",
    "ContractError",
    "Envelope",
    "EraseMemories",
    "ErasureRequested",
    "Event",
    "MemoryBody",
    "MemoryConfirmed",
    "MemoryRedacted",
    "MemoryRef",
    "MemoryReinforced",
    "MemorySuperseded",
    "MemoryWrite",
    "MemoryWritten",
    "Provenance",
    "RedactMemory",
    "RedactedState",
    "Retention",
    "RetentionExpired",
    "RevokeConsent",
    "Scope",
    "SealedText",
    "SummaryDerived",
    "UnknownEventError",
    "UpcastError",
    "decode_event",
    "describe_validation_error",
    "encode_event",
    "evolved",
    "touched_memories",
    "utc_now",
]
