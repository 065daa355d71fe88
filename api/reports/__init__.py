"""One request per forwarding tick: a worker's metrics, samples and log lines in one transaction."""
