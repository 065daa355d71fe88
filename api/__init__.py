"""rlplane control-plane API (FastAPI). Never imports torch: the REST API is the contract."""
