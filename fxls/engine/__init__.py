"""The analysis engine: no LSP, no torch. Runs captures through the worker client, keeps
results per document version, computes fixes and turns values into text for people."""
