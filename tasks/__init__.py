"""Prefect tasks: thin wrappers that call the library packages and report (logs, artifacts)."""
