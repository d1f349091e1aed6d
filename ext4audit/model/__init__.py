"""The contract: every file the audit reads or writes, as msgspec models (contract.py) with their
JSON Schemas (schemas/), and the one YAML loader that keeps line numbers for errors (safe_yaml.py).
Every other layer imports this one; it imports no other layer."""
