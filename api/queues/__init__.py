"""The queues as a cluster's users share them: who holds what, who waits and why (docs/scheduling.md)."""
