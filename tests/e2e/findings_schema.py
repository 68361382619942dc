"""Validation of findings documents against the committed JSON Schema."""

import json
from pathlib import Path

import jsonschema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schema" / "findings.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def validate(doc):
    """Raises with every violation listed when `doc` does not follow the schema."""
    errors = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(
            "findings document violates schema/findings.schema.json:\n"
            + "\n".join(f"  at {list(e.path)}: {e.message}" for e in errors[:20])
        )
