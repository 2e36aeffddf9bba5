"""The REST API (FastAPI), CLI and settings. Arrives with the service issue (#3)."""
