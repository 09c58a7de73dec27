"""The retrieval model zoo: one file per model (config dataclass + module) and the registry that names them."""
