"""Celery workers: lease a run through the API, supervise its trainer process, forward its reports."""
